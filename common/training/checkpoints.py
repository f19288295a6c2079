"""Checkpoints of a run: where they live, restoring with one-line errors, the input fingerprint,
and the best evaluation's weights. TensorFlow's CheckpointManager does every save, prune and
"newest" lookup; nothing here lists, stages or renames checkpoint files by hand."""
import json
import os

from absl import logging
import tensorflow as tf

from common.contract import config as config_lib
from common.contract.errors import CheckpointError
from common.contract.errors import ConfigError
from common.contract.errors import first_line
from common.runtime import workdir as workdir_lib


def checkpoint_dir(workdir):
  return os.path.join(workdir, "checkpoints")


def best_dir(workdir):
  """Where train.best_metric keeps the weights of the best evaluation."""
  return os.path.join(workdir, "best")


def restore(checkpoint, path, partial):
  """Restores, turning a mismatch (another model or config) into one CheckpointError line."""
  try:
    status = checkpoint.restore(path)
    if partial:
      status.expect_partial()
    status.assert_existing_objects_matched()
  except (AssertionError, ValueError, tf.errors.OpError) as e:
    raise CheckpointError(
        f"checkpoint {path} does not match this model and config ({first_line(e)}); "
        "use another --workdir, or the config the checkpoint was trained with") from None


def restore_model(model, workdir):
  """Loads the model's weights from the newest checkpoint in workdir (for evaluation); returns its path."""
  latest = tf.train.latest_checkpoint(checkpoint_dir(workdir))
  if latest is None:
    raise CheckpointError(f"no checkpoint in {checkpoint_dir(workdir)}")
  restore(tf.train.Checkpoint(model=model), latest, partial=True)
  return latest


def read_json_variable(path, name):
  """The JSON text of the string variable `name` of checkpoint `path`, decoded; None when the
  checkpoint has no such variable. TensorFlow's reader matches it by name."""
  variable = tf.Variable("", trainable=False)
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
    latest = tf.train.latest_checkpoint(best_dir(cluster.workdir)) if metric else None
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
