"""Reads TF-Slim Inception V4 checkpoints into the Keras model, by TF-Slim's names.

Scopes follow TF-Slim's `train_image_classifier.py` flags: `exclude_scopes`
(checkpoint_exclude_scopes) and `trainable_scopes` are prefixes of variable names,
matched with `str.startswith` exactly as TF-Slim does; `ignore_missing_vars` skips
model variables the checkpoint lacks (or holds with another shape) instead of failing.
"""
import dataclasses
import os

from absl import logging
import keras
import numpy as np
import tensorflow as tf

from common.contract.errors import CheckpointError
from common.contract.errors import first_line
from inception_finetune.inception_v4 import SCOPE
from inception_finetune.inception_v4 import slim_name

# Checkpoint entries that belong to the training run, not to the network.
_NON_MODEL_VARIABLES = ("global_step",)
# The checkpoint in TF-Slim's published inception_v4_2016_09_09.tar.gz.
PUBLISHED_NAME = "inception_v4.ckpt"


class CorruptCheckpointError(CheckpointError):
  """A checkpoint's own files are damaged, incomplete or gone (a checksum that does not match, a
  missing .data file), as opposed to a sound checkpoint that does not fit the model."""


@dataclasses.dataclass
class RestoreReport:
  """What `restore` did, by TF-Slim variable name."""
  checkpoint: str
  loaded: list = dataclasses.field(default_factory=list)
  excluded: list = dataclasses.field(default_factory=list)  # model variables kept as initialized
  missing: list = dataclasses.field(default_factory=list)  # model variables not in the checkpoint
  mismatched: list = dataclasses.field(default_factory=list)  # in the checkpoint with another shape
  unexpected: list = dataclasses.field(default_factory=list)  # checkpoint variables the model lacks

  def format(self):
    """Counts on the first line, then one line per excluded, missing, mismatched or unexpected name."""
    lines = [f"checkpoint {self.checkpoint}: loaded {len(self.loaded)}, "
             f"excluded {len(self.excluded)}, missing {len(self.missing)}, "
             f"mismatched {len(self.mismatched)}, unexpected {len(self.unexpected)}"]
    for kind in ("excluded", "missing", "mismatched", "unexpected"):
      lines.extend(f"  {kind}: {name}" for name in getattr(self, kind))
    return "\n".join(lines)


def parse_scopes(scopes):
  """A comma-separated string (TF-Slim's flag format) or a sequence -> list of scopes."""
  if scopes is None:
    return []
  if isinstance(scopes, str):
    scopes = scopes.split(",")
  return [scope.strip() for scope in scopes if scope.strip()]


def in_scopes(name, scopes):
  return any(name.startswith(scope) for scope in scopes)


def slim_variables(model):
  """{TF-Slim name: variable} for every weight of the model, moving statistics included."""
  return {slim_name(variable): variable for variable in model.weights}


def resolve_checkpoint(checkpoint_path):
  """A checkpoint prefix, or a directory -> its latest checkpoint's prefix."""
  path = os.fspath(checkpoint_path)
  if os.path.isdir(path):
    latest = tf.train.latest_checkpoint(path)
    if latest is None:
      raise CheckpointError(f"checkpoint directory {path} holds no checkpoint")
    return latest
  if not tf.io.gfile.glob(path + "*"):
    folder = os.path.dirname(path) or "."
    raise CheckpointError(f"checkpoint {path} does not exist; TF-Slim's published Inception V4 one is "
                          f"fetched and checked by `{fetch_command(folder)}`, then pass "
                          f"--config.checkpoint_path={os.path.join(folder, PUBLISHED_NAME)}")
  return path


def fetch_command(output_dir):
  """The command that downloads, checks and extracts TF-Slim's published checkpoint into output_dir."""
  return f"python scripts/fetch_slim_checkpoint.py --output_dir={output_dir}"


def read_variable_shapes(path):
  """Opens a checkpoint -> (reader, {name: shape}); a file that is no checkpoint is a CheckpointError."""
  try:
    reader = tf.train.load_checkpoint(path)
  except (tf.errors.OpError, ValueError) as error:
    raise CorruptCheckpointError(f"checkpoint {path} is unreadable: {first_line(error)}") from None
  return reader, reader.get_variable_to_shape_map()


def read_tensor(reader, path, name, hint=""):
  """reader.get_tensor(name), which checks the tensor's checksum; a tensor that does not read back
  is a CorruptCheckpointError naming the checkpoint, ending with `hint`."""
  try:
    return reader.get_tensor(name)
  except (tf.errors.OpError, IndexError) as error:  # IndexError: a truncated .data file
    raise CorruptCheckpointError(f"checkpoint {path} is corrupt or incomplete: {name} does not read back "
                                 f"({first_line(error)}){hint}") from None


def check_slim_checkpoint(checkpoint_path):
  """Resolves a checkpoint path and checks that it holds TF-Slim InceptionV4 variables; returns the path."""
  path = resolve_checkpoint(checkpoint_path)
  _, shapes = read_variable_shapes(path)
  _check_network(path, shapes)
  return path


def restore(model, checkpoint_path, exclude_scopes=(), ignore_missing_vars=False):
  """Assigns the model's variables from a TF-Slim checkpoint; returns a RestoreReport.

  Nothing is assigned unless every variable checks out, so a failed restore leaves
  the model as it was.

  Raises:
    CheckpointError: the path holds no checkpoint, the checkpoint is not an
      InceptionV4 one, or (unless ignore_missing_vars) a variable is missing or has
      another shape; the message names the path and the variable.
    CorruptCheckpointError: a file of the checkpoint is damaged or gone.
  """
  report, reader, to_assign = _plan(model, checkpoint_path, exclude_scopes, ignore_missing_vars)
  folder = os.path.dirname(report.checkpoint) or "."
  hint = f"; fetch it again (`{fetch_command(folder)}` replaces a broken one) or copy it again"
  # Every tensor is read before any is assigned, so that a corrupt one leaves the model as it was.
  values = [read_tensor(reader, report.checkpoint, name, hint) for name, _ in to_assign]
  for (name, variable), value in zip(to_assign, values):
    variable.assign(tf.cast(value, variable.dtype))
    report.loaded.append(name)
  logging.info("%s", report.format())
  return report


def check_variables(model, checkpoint_path):
  """Checks, reading names and shapes only, that a checkpoint holds every variable of `model` under
  its TF-Slim name with its shape; returns the RestoreReport of what restore() would load.

  Raises:
    CheckpointError: as restore() without ignore_missing_vars.
  """
  report, _, to_assign = _plan(model, checkpoint_path, (), False)
  report.loaded = [name for name, _ in to_assign]
  return report


def _plan(model, checkpoint_path, exclude_scopes, ignore_missing_vars):
  """(RestoreReport without `loaded`, the checkpoint's reader, [(name, variable) to assign])."""
  path = resolve_checkpoint(checkpoint_path)
  reader, shapes = read_variable_shapes(path)
  _check_network(path, shapes)
  exclude_scopes = parse_scopes(exclude_scopes)
  report = RestoreReport(checkpoint=path)
  variables = slim_variables(model)
  to_assign = []
  for name, variable in sorted(variables.items()):
    if in_scopes(name, exclude_scopes):
      report.excluded.append(name)
    elif name not in shapes:
      report.missing.append(name)
    elif list(shapes[name]) != list(variable.shape):
      report.mismatched.append(name)
    else:
      to_assign.append((name, variable))
  if not ignore_missing_vars:
    _check_complete(path, report, shapes, variables)
  report.unexpected = sorted(
      name for name in shapes
      if name not in variables and name not in _NON_MODEL_VARIABLES
      and not in_scopes(name, exclude_scopes))
  return report, reader, to_assign


def _check_complete(path, report, shapes, variables):
  if report.missing:
    others = len(report.missing) - 1
    raise CheckpointError(f"checkpoint {path} has no variable {report.missing[0]}"
                          + (f" (nor {others} other model variables)" if others else ""))
  if report.mismatched:
    name, others = report.mismatched[0], len(report.mismatched) - 1
    raise CheckpointError(f"checkpoint {path}: {name} has shape {list(shapes[name])}, the model "
                          f"expects {list(variables[name].shape)}"
                          + (f" ({others} other variables differ too)" if others else ""))


def _check_network(path, shapes):
  if not any(name.startswith(f"{SCOPE}/") for name in shapes):
    names = sorted(set(shapes) - set(_NON_MODEL_VARIABLES))
    example = names[0] if names else "none"
    raise CheckpointError(f"checkpoint {path} is not a TF-Slim {SCOPE} checkpoint: no variable "
                          f"under {SCOPE}/ (first variable: {example})")


def trainable_variables_for_scopes(model, scopes):
  """The trainable variables under TF-Slim trainable_scopes; empty scopes mean all of them."""
  scopes = parse_scopes(scopes)
  return [variable for variable in model.trainable_variables
          if not scopes or in_scopes(slim_name(variable), scopes)]


def set_trainable_scopes(model, scopes):
  """Makes the layers with variables under `scopes` trainable and freezes the others.

  A frozen BatchNormalization layer also runs in inference mode (Keras 3), so
  frozen blocks keep their moving statistics. Empty scopes unfreeze everything.
  Returns the model's trainable variables.
  """
  scopes = parse_scopes(scopes)
  for layer in _layers_with_weights(model):
    layer.trainable = not scopes or any(
        in_scopes(slim_name(variable), scopes) for variable in layer.weights)
  return model.trainable_variables


def _layers_with_weights(model):
  for layer in model.layers:
    if isinstance(layer, keras.Model):
      yield from _layers_with_weights(layer)
    elif layer.weights:
      yield layer


def slim_tensors(model, global_step=0):
  """{TF-Slim name: numpy value} of the model's weights plus global_step, as slim saves them."""
  tensors = {name: variable.numpy() for name, variable in slim_variables(model).items()}
  tensors["global_step"] = np.int64(global_step)
  return tensors


def write_checkpoint(path, tensors):
  """Writes {name: array} as a V2 checkpoint at prefix `path` under exactly these names.

  Also writes the directory's `checkpoint` state file, so that the directory
  itself can be given as the checkpoint path.
  """
  directory, basename = os.path.split(os.path.abspath(path))
  tf.io.gfile.makedirs(directory)
  names = sorted(tensors)
  tf.raw_ops.SaveV2(prefix=path, tensor_names=names, shape_and_slices=[""] * len(names),
                    tensors=[tf.convert_to_tensor(tensors[name]) for name in names])
  with tf.io.gfile.GFile(os.path.join(directory, "checkpoint"), "w") as state:
    state.write(f'model_checkpoint_path: "{basename}"\n'
                f'all_model_checkpoint_paths: "{basename}"\n')
  return path


def write_slim_checkpoint(model, path, global_step=0):
  """Writes the model's weights under TF-Slim's names, as TF-Slim's Saver would."""
  return write_checkpoint(path, slim_tensors(model, global_step))
