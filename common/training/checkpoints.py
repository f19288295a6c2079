"""Checkpoints of a run: where they live, restoring with one-line errors, the input fingerprint,
and the best evaluation's weights. TensorFlow's CheckpointManager does every save, prune and
"newest" lookup; nothing here stages or renames checkpoint files by hand (a failed read looks for
the files it needed, to say which one is gone) but the list of them, the state file, when it is
broken (repair_state)."""
import contextlib
import glob
import json
import os
import re

from absl import logging
import tensorflow as tf

from common.contract import config as config_lib
from common.contract.errors import CheckpointError
from common.contract.errors import CheckpointVanished
from common.contract.errors import ConfigError
from common.contract.errors import first_line
from common.contract.errors import WorkdirError
from common.runtime import workdir as workdir_lib
from common.training import averaging
from common.training import calibration


def checkpoint_dir(workdir):
  return os.path.join(workdir, "checkpoints")


def best_dir(workdir):
  """Where train.best_metric keeps the weights of the best evaluation."""
  return os.path.join(workdir, "best")


def restore(checkpoint, path, partial):
  """Restores checkpoint `path`; what goes wrong is one CheckpointError line (_reading)."""
  with _reading(path):
    status = checkpoint.restore(path)
    if partial:
      status.expect_partial()
    status.assert_existing_objects_matched()


@contextlib.contextmanager
def _reading(path):
  """Turns an error of reading checkpoint `path` into one CheckpointError line: a file that vanished
  (CheckpointVanished), a corrupt file, else a checkpoint of another model or config."""
  try:
    yield
  except (AssertionError, ValueError, IndexError, tf.errors.OpError) as e:
    gone = _missing_file(path)
    if gone:
      raise CheckpointVanished(f"{gone} vanished while it was read (the run rotated it away); run the "
                               "command again") from None
    damage = _damage(e)
    if damage:
      raise CheckpointError(f"{_damaged_file(path, e)} is corrupt ({damage}); copy the checkpoint back "
                            "from a backup, or use the run's export (saved_model/)") from None
    raise CheckpointError(
        f"checkpoint {path} does not match this model and config ({first_line(e)}); "
        "use another --workdir, or the config the checkpoint was trained with") from None


def _missing_file(path):
  """The first file of checkpoint `path` that is not there (its index, then its data shards), or None."""
  if not tf.io.gfile.exists(path + ".index"):
    return path + ".index"
  shards = {os.path.basename(shard) for shard in tf.io.gfile.glob(path + ".data-*-of-*")}
  count = int(min(shards).rsplit("-of-", 1)[1]) if shards else 1
  expected = [f"{os.path.basename(path)}.data-{i:05d}-of-{count:05d}" for i in range(count)]
  missing = [name for name in expected if name not in shards]
  return os.path.join(os.path.dirname(path), missing[0]) if missing else None


def _damage(error):
  """What TensorFlow's error says is wrong with a file's bytes, or None (the error is not about them).
  The reader raises IndexError for a file cut short, and mostly plain OpErrors for checksums."""
  message = str(error).lower()
  if "checksum" in message:
    return "checksum does not match"
  if isinstance(error, IndexError) or "less bytes" in message:
    return "cut short"
  if isinstance(error, tf.errors.DataLossError) or "corrupt" in message or "sstable" in message:
    return "not a checkpoint file TensorFlow can read"
  return None


def _damaged_file(path, error):
  """The file of checkpoint `path` that TensorFlow's error names (a data shard or the index), else the
  checkpoint's prefix."""
  message = str(error)
  shard = re.search(r"shard (\d+)", message)
  if shard:
    found = tf.io.gfile.glob(f"{path}.data-{int(shard.group(1)):05d}-of-*")
    if found:
      return found[0]
  return path + ".index" if path + ".index" in message else f"checkpoint {path}"


def _state(directory):
  """(directory's CheckpointState or None, what is wrong with its state file or None)."""
  state_file = os.path.join(directory, "checkpoint")
  try:
    state = tf.train.get_checkpoint_state(directory)  # None when missing or unparsable
  except ValueError:  # empty, no newest checkpoint named, or not UTF-8
    return None, "empty or unreadable"
  if state is None:
    return None, "unreadable" if tf.io.gfile.exists(state_file) else "missing"
  return state, None


def listed(directory):
  """The complete checkpoints of directory, oldest first: those its state file (`checkpoint`,
  CheckpointManager's list) names whose files are there; when that file is missing, unreadable,
  empty or names none that are there, those found from the files, with a warning: the state file
  is never trusted alone (a garbage one must not restart a trained run at step 0)."""
  state, problem = _state(directory)
  paths = [path for path in (state.all_model_checkpoint_paths if state else []) if complete(path)]
  if paths:
    return paths
  found = _found_in(directory)
  if found:
    logging.warning("%s (TensorFlow's list of checkpoints) %s; using the %d complete checkpoint(s) "
                    "found from the files, the newest %s", os.path.join(directory, "checkpoint"),
                    f"is {problem}" if problem else "names none of the checkpoint files there",
                    len(found), found[-1])
  return found


def complete(path):
  """Whether checkpoint `path` has its index and every data shard."""
  return _missing_file(path) is None


def _found_in(directory):
  """The complete checkpoints `<name>-<number>` in directory, from their files, by number."""
  numbered = []
  for index in tf.io.gfile.glob(os.path.join(glob.escape(directory), "*-*.index")):
    match = re.fullmatch(r"(.+)-(\d+)\.index", os.path.basename(index))
    path = index[:-len(".index")]
    if match and complete(path):
      numbered.append((int(match.group(2)), path))
  return [path for _, path in sorted(numbered)]


def newest(directory, skip=None):
  """The newest complete checkpoint in directory (listed), other than `skip`; None when there is none."""
  for path in reversed(listed(directory)):
    if path != skip:
      return path
  return None


def repair_state(directory):
  """Rewrites directory's state file when it does not list exactly its complete checkpoints
  (listed), so that a resumed run's CheckpointManager goes on with their list and prunes the old
  ones. The chief's, before its CheckpointManager reads the file."""
  state, _ = _state(directory)
  paths = listed(directory)
  if paths and (state is None or list(state.all_model_checkpoint_paths) != paths):
    state_file = os.path.join(directory, "checkpoint")
    try:
      write_state(directory, paths)
    except (OSError, tf.errors.OpError) as e:
      raise WorkdirError(f"cannot rewrite {state_file} ({first_line(e)}); remove it (the checkpoints "
                         "are found from their files) and run the same command again") from None
    logging.warning("%s rewritten to list those checkpoints", state_file)


def write_state(directory, paths):
  """Writes directory's state file listing `paths` (the last the newest), with relative names as
  CheckpointManager writes it. By hand: TensorFlow's writer of it (update_checkpoint_state) is
  deprecated and logs so; the file is a text proto of two repeated fields."""
  names = [json.dumps(os.path.basename(path)) for path in paths]
  text = "".join([f"model_checkpoint_path: {names[-1]}\n",
                  *(f"all_model_checkpoint_paths: {name}\n" for name in names)])
  partial = os.path.join(directory, f".checkpoint-{os.getpid()}.tmp")
  try:
    with tf.io.gfile.GFile(partial, "w") as f:
      f.write(text)
    tf.io.gfile.rename(partial, os.path.join(directory, "checkpoint"), overwrite=True)
  finally:
    if tf.io.gfile.exists(partial):
      tf.io.gfile.remove(partial)


def restore_newest(checkpoint, directory):
  """Restores the newest checkpoint in directory (an evaluation's or prediction's weights) and returns
  its path. A run that is training rotates old checkpoints away: one that vanishes while it is read
  is retried once, on the newest one left."""
  path = newest(directory)
  if path is None:
    raise CheckpointError(f"no checkpoint in {directory}")
  try:
    restore(checkpoint, path, partial=True)
  except CheckpointVanished:
    retry = newest(directory, skip=path)
    if retry is None:
      raise
    logging.warning("checkpoint %s vanished while it was read (the run rotated it away); reading %s, "
                    "the newest one left, instead", path, retry)
    restore(checkpoint, retry, partial=True)
    path = retry
  return path


def restore_weights(model, directory):
  """Loads the model's weights from the newest checkpoint in directory, with what the run served in
  their place where the checkpoint holds it: the weight average (train.ema_decay: what the run
  evaluated and exported), then the BatchNorm statistics recalibrated for them (calibration.py);
  returns its path."""
  path = restore_newest(tf.train.Checkpoint(model=model), directory)
  with _reading(path):
    reader = tf.train.load_checkpoint(path)
  for what, weights, key in (
      ("the weight average (train.ema_decay)", averaging.averaged_weights(model), averaging.KEY),
      ("the recalibrated BatchNorm statistics", calibration.batch_norm_statistics(model), calibration.KEY)):
    if reader.has_tensor(key.format(0)):
      for i, weight in enumerate(weights):
        weight.assign(reader.get_tensor(key.format(i)))
      logging.info("%s: %s loaded in place of the model's", path, what)
  return path


def restore_model(model, workdir):
  """restore_weights of the newest checkpoint in workdir (for evaluation)."""
  return restore_weights(model, checkpoint_dir(workdir))


def restore_served(model, workdir):
  """restore_weights of what a run serves, as its SavedModel holds it: its best weights (best/, with
  train.best_metric), else its newest checkpoint; returns the checkpoint's path (predict, export)."""
  directory = best_dir(workdir)
  if not newest(directory):
    directory = checkpoint_dir(workdir)
    if not newest(directory):
      raise CheckpointError(f"no checkpoint in {directory}; train into --workdir first, or pass --saved_model")
  return restore_weights(model, directory)


def load_saved_model(path, outputs=(), trainer=None):
  """The SavedModel at `path`, loaded; one CheckpointError line when it is missing, damaged
  (saved_model.pb cut short, variables/ missing or cut) or another trainer's export: given `trainer`
  (the Task.name it must name) or `outputs` (names its serving signature must give)."""
  workdir_lib.check_saved_model(path, trainer)
  try:
    loaded = tf.saved_model.load(path)
  except (OSError, ValueError, IndexError, tf.errors.OpError) as e:
    raise CheckpointError(f"SavedModel {path} is damaged ({first_line(e)[:200]}); export the run "
                          "again (scripts/export.py --format=saved_model, or its training command)") from None
  serve = loaded.signatures.get("serving_default")
  if serve is None:
    raise CheckpointError(f"SavedModel {path} has no serving_default signature: the export of another "
                          "program")
  missing = [name for name in outputs if name not in serve.structured_outputs]
  if missing:
    raise CheckpointError(f"SavedModel {path} gives {', '.join(sorted(serve.structured_outputs))}, not "
                          f"{', '.join(missing)}: the export of another trainer or program")
  return loaded


def read_json_variable(path, name):
  """The JSON text of the string variable `name` of checkpoint `path`, decoded; None when the
  checkpoint has no such variable. TensorFlow's reader matches it by name."""
  variable = tf.Variable("", trainable=False)
  with _reading(path):
    tf.train.Checkpoint(**{name: variable}).read(path).expect_partial()
  text = variable.numpy().decode()
  return json.loads(text) if text else None


def saved_fingerprint(path):
  """The input fingerprint stored in a checkpoint, or None for a checkpoint without one."""
  return read_json_variable(path, "input_fingerprint")


def input_changes(saved, current):
  """['key: saved -> current', ...] of the input facts that differ; none for an unknown saved one."""
  return [] if saved is None else config_lib.diff(saved, current, show=str)


class BestWeights:
  """The weights of the best evaluation so far, with {"metric", "value", "step"} in the same
  checkpoint (so that the record and the weights can never disagree).

  Reads from the workdir's best/ (a resumed run goes on from its best) and writes into best/ of
  where the cluster writes (the workdir on the chief, a temporary folder on other workers); a
  CheckpointManager keeping one checkpoint replaces the previous best only once the new one is
  complete.
  """

  def __init__(self, model, cluster, metric, mode):
    self.metric, self.mode = metric, mode
    self._record = tf.Variable("", trainable=False, name="best")
    self._checkpoint = tf.train.Checkpoint(model=model, best=self._record)
    self._directory = best_dir(cluster.out)
    self._cluster = cluster
    self._manager = None
    self.best = None
    if cluster.chief:
      repair_state(best_dir(cluster.workdir))
    latest = newest(best_dir(cluster.workdir)) if metric else None
    if latest:
      saved = read_json_variable(latest, "best")
      self.best = saved if saved["metric"] == metric else None
    self._read_from = latest if self.best else None

  def offer(self, results, step):
    """Keeps the model's weights when the evaluation `results` beat the best so far."""
    if not self.metric:
      return
    if self.metric not in results:
      raise ConfigError(f"train.best_metric='{self.metric}' is not a metric of the evaluation; choose "
                        f"one of {', '.join(sorted(results))}")
    value = results[self.metric]
    if self.best is not None and not (value > self.best["value"] if self.mode == "max"
                                      else value < self.best["value"]):
      return
    self.best = {"metric": self.metric, "value": value, "step": step}
    self._record.assign(json.dumps(self.best, sort_keys=True))
    with workdir_lib.writing(self._directory):
      if self._manager is None:
        self._manager = tf.train.CheckpointManager(self._checkpoint, self._directory, max_to_keep=1,
                                                   checkpoint_name="weights")
      self._read_from = self._manager.save(checkpoint_number=step)
    self._cluster.remove_copy(self._directory)
    logging.info("best %s so far (%.4f) at step %d: weights kept in %s", self.metric, value, step,
                 self._directory)

  def load_into_model(self):
    """Loads the best weights into the model, so that the export saves them. A non-chief worker's
    model keeps its weights: its copy of the best is removed after each save, as its export is."""
    if self.best is None or not self._cluster.chief:
      return
    restore(self._checkpoint, self._read_from, partial=True)
    logging.info("the model now holds the weights of step %d (best %s %.4f), which the export saves",
                 self.best["step"], self.best["metric"], self.best["value"])
