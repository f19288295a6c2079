"""SavedModel export with a serving signature, written so that no failure costs the last good one.

The model is saved into `<path>.tmp`, then swapped in: the previous export is renamed to
`<path>.old` and removed only once the new one is in place. An export cut short (a kill, a full
disk) leaves at most those two folders, which the next export clears, restoring `<path>.old`
first if the swap was cut between its two renames.
"""
import contextlib
import json
import os
import shutil
import tempfile

from absl import logging
import tensorflow as tf

from common.contract.errors import CheckpointError
from common.contract.errors import first_line
from common.contract.errors import WorkdirError
from common.runtime import signals
from common.runtime import workdir as workdir_lib

CLASS_NAMES_ASSET = "class_names.txt"


CONSTANTS_SIGNATURE = "constants"
THRESHOLD = "threshold"  # of CONSTANTS_SIGNATURE: the triplet's verification threshold


def threshold_problem(value):
  """What makes `value` no verification threshold, or None: the distance of two L2-normalized
  embeddings is in [0, 2], so a threshold is a number in (0, 2]. At or below 0 no pair is the same,
  not even a photo and itself: a run's evaluation chooses one (the lowest distance - 1) when calling
  every pair different scores best, i.e. its embeddings do not tell its identities apart."""
  if isinstance(value, bool) or not isinstance(value, (int, float)):
    return f"is {json.dumps(value)}, not a number"
  if value <= 0:
    return (f"is {value:g}, below every distance: no pair would be the same (a run's evaluation "
            "chooses one when its embeddings do not tell the identities apart: train it longer)")
  if not value <= 2:
    return f"is {value:g}, not a distance in (0, 2]"
  return None


def warn_of_constants(constants, output):
  """A warning line when the threshold an export carries serves no verification (predict refuses it)."""
  if THRESHOLD in constants and threshold_problem(constants[THRESHOLD]):
    logging.warning("the export %s carries its run's verification threshold, which %s; predict refuses "
                    "it", output, threshold_problem(constants[THRESHOLD]))


def replaced(output, fmt, suffix):
  """What an export of `fmt` at --output=`output` (with a suffix: its JSON at <output>.json too) would
  replace that no export made, as the rest of a line that starts with "--output=<output>", or None. An existing file is replaced
  only as an earlier export of the format: a name ending `suffix` whose JSON says it is one."""
  path, described = os.path.abspath(output), os.path.abspath(output) + ".json"
  if os.path.lexists(path) and not (suffix and path.endswith(suffix)):
    kept = f"a name ending {suffix}" if suffix else "a saved_model is written into a new folder"
    return f" exists and is not an earlier {fmt} export ({kept}); name a new path"
  if not suffix or not (os.path.lexists(path) or os.path.lexists(described)):
    return None
  if os.path.lexists(described) and not os.path.isfile(described):
    return (f": {output}.json, where the export's JSON goes, is a folder or a broken link; an export "
            "never replaces it: move it or name another --output")
  try:
    with open(described, encoding="utf-8") as f:
      about = json.load(f)
  except (OSError, ValueError):
    about = None
  if not isinstance(about, dict) or about.get("format") != fmt:
    return (f": {output}.json does not say {output} is an earlier {fmt} export (its \"format\"): an export "
            f"never replaces what it did not make; move {output} and {output}.json or name another --output")
  return None


@contextlib.contextmanager
def reading_outputs(path, outputs):
  """The trainer asking the SavedModel at `path`, which gives `outputs`, for another (a KeyError of
  its name, e.g. the export of another trainer whose assets/trainer.txt was edited) is one line."""
  try:
    yield
  except KeyError as e:
    if not e.args or e.args[0] in outputs:
      raise
    raise CheckpointError(f"SavedModel {path} gives {', '.join(sorted(outputs))}, not {e.args[0]}: the "
                          "export of another trainer or program") from None


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
