"""SavedModel export with a serving signature, written so that no failure costs the last good one.

The model is saved into `<path>.tmp`, then swapped in: the previous export is renamed to
`<path>.old` and removed only once the new one is in place. An export cut short (a kill, a full
disk) leaves at most those two folders, which the next export clears, restoring `<path>.old`
first if the swap was cut between its two renames.
"""
import os
import shutil
import tempfile

import tensorflow as tf

from common.contract.errors import first_line
from common.contract.errors import WorkdirError
from common.runtime import signals
from common.runtime import workdir as workdir_lib

CLASS_NAMES_ASSET = "class_names.txt"


CONSTANTS_SIGNATURE = "constants"


def export_saved_model(model, serve, path, input_signature, trainer, class_names=(), constants=None):
  """Saves `serve` (a function of the signature's tensors, closing over `model`) as serving_default,
  with the trainer's name (its Task.name) as the asset assets/trainer.txt (a command of another
  trainer refuses the export in one line: workdir.check_saved_model), class_names (if given) as the asset assets/class_names.txt, a name per line in id order, and
  constants (if given: {name: number}) as the outputs of a second signature, CONSTANTS_SIGNATURE,
  which takes no input (the triplet's verification threshold and the step it was chosen at).

  Every OS error (full disk, read-only folder, a file or symlink in the way) is one WorkdirError
  naming the path; the checkpoints and the previous SavedModel are untouched. A signal before the
  export skips it (rerunning the finished run only exports); one during it is honoured after it.
  """
  signals.check(f"before the export of {path}; training is finished and checkpointed: run the "
                "same command again to export")
  tmp, old = path + ".tmp", path + ".old"
  _check_target(path)
  try:
    if os.path.isdir(old) and not os.path.lexists(path):
      os.rename(old, path)  # a swap cut between its renames: the old export is the good one
    for leftover in (tmp, old):
      if os.path.lexists(leftover):
        shutil.rmtree(leftover)
    module = tf.Module()
    # The variables, not the Keras model: the model would add its object graph and a default
    # signature of its own, traced once more (Inception V4's export: 10 s -> 5 s, loading 4.5 -> 3).
    module.model_weights = list(model.weights)
    module.serve = tf.function(serve, input_signature=input_signature)
    signatures = {"serving_default": module.serve}
    if constants:
      values = {name: tf.constant(value) for name, value in constants.items()}
      signatures[CONSTANTS_SIGNATURE] = tf.function(lambda: values, input_signature=[])
    with tempfile.TemporaryDirectory() as scratch:
      # The save copies each asset into assets/.
      module.trainer = tf.saved_model.Asset(_write(scratch, workdir_lib.TRAINER_ASSET, [trainer]))
      if class_names:
        module.class_names = tf.saved_model.Asset(_write(scratch, CLASS_NAMES_ASSET, class_names))
      tf.saved_model.save(module, tmp, signatures=signatures)
    if os.path.lexists(path):
      os.rename(path, old)
    os.rename(tmp, path)
    shutil.rmtree(old, ignore_errors=True)
  except (OSError, tf.errors.OpError) as e:
    shutil.rmtree(tmp, ignore_errors=True)
    reason = getattr(e, "strerror", None) or first_line(e)
    raise WorkdirError(f"cannot export the SavedModel {path} ({reason}); the checkpoints"
                       f"{' and the previous export' if os.path.isdir(path) else ''} are intact: "
                       "free space or fix the path, then run the same command again to export") from None
  signals.check(f"during the export; the SavedModel {path} is complete")
  return path


def _write(folder, name, lines):
  path = os.path.join(folder, name)
  with open(path, "w", encoding="utf-8") as f:
    f.write("".join(f"{line}\n" for line in lines))
  return path


def _check_target(path):
  """A file or symlink where the SavedModel goes, or a read-only folder, before anything is written."""
  if os.path.islink(path) or (os.path.lexists(path) and not os.path.isdir(path)):
    raise WorkdirError(f"cannot export the SavedModel {path}: a {'symlink' if os.path.islink(path) else 'file'} "
                       "is in the way; move it, then run the same command again to export")
  for folder in (path, os.path.dirname(os.path.abspath(path))):
    if os.path.isdir(folder) and not os.access(folder, os.W_OK):
      raise WorkdirError(f"cannot export the SavedModel {path}: {folder} is read-only; make it "
                         "writable, then run the same command again to export")


UINT8_IMAGES = tf.TensorSpec([None, None, None, 3], tf.uint8, name="images")
