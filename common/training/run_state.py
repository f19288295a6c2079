"""The state of one training run between compiled calls, in two parts with a job each.

RunCheckpoint is what a checkpoint holds (model, optimizers, step, counters, input fingerprint and
position) and writes and reads it; RunRecord is what metrics.json records. What a worker does
differently (where it writes, what it keeps) is its Cluster's (common.training.distributed).
"""
import json
import os

from absl import logging
import numpy as np
import tensorflow as tf

from common.contract.errors import CheckpointError
from common.contract.errors import first_line
from common.contract.errors import WorkdirError
from common.runtime import workdir as workdir_lib
from common.training import calibration
from common.training import checkpoints as checkpoints_lib
from common.training import worker_files


def build_optimizers(model, phases, strategy):
  """Creates every phase's optimizer slots, inside the strategy scope: they must exist before a
  restore or the first step."""
  for phase in phases:
    if phase.prepare:
      phase.prepare()
    with strategy.scope():
      phase.optimizer.build(model.trainable_variables)


class RunCheckpoint:
  """What a checkpoint of the run holds, written into the cluster's `out` and read from the workdir's
  `directory`:
  the model and its random layers' states, each phase's optimizer, the weight average (if kept), the
  recalibrated BatchNorm statistics (`calibrated`, if the task calibrates), the step, the count of
  non-finite steps, the input fingerprint, and the input iterator's position (in the checkpoint
  alone; beside it, per worker, on several).
  """

  def __init__(self, cluster, model, phases, dataset, input_fingerprint, keep, average=None, calibrated=None):
    self._cluster = cluster
    self.directory = checkpoints_lib.checkpoint_dir(cluster.workdir)
    self.step = tf.Variable(0, dtype=tf.int64, trainable=False, name="global_step")
    self.nonfinite_steps = tf.Variable(0, dtype=tf.int64, trainable=False, name="nonfinite_steps")
    self.input_fingerprint = cluster.input_fingerprint(input_fingerprint)
    self._saved_fingerprint = tf.Variable(json.dumps(self.input_fingerprint, sort_keys=True),
                                          trainable=False, name="input_fingerprint")
    if cluster.chief:
      checkpoints_lib.repair_state(self.directory)
    self.iterator = iter(cluster.shard(dataset))
    # Everything but the input position: what a restore with a fresh input pipeline reads.
    self._variables = dict(model=model, step=self.step, nonfinite_steps=self.nonfinite_steps,
                           input_fingerprint=self._saved_fingerprint,
                           **{f"optimizer_{p.checkpoint_name or p.name}": p.optimizer for p in phases},
                           **({"weight_average": average} if average else {}))
    self.calibrated = calibrated  # calibration.CalibratedStatistics, or None
    self._statistics_mean = cluster.make_statistics_mean(model)
    self._positions = worker_files.InputPositions(self.iterator, self.directory, cluster, keep)
    self._checkpoint = tf.train.Checkpoint(**self._positions.in_checkpoint, **self._variables)
    # Dropout's random states (calibration.random_states), which model= lacks: a resumed run draws
    # the masks an uninterrupted one would, not those of the first steps again.
    self._random_states = calibration.random_states(model)
    # These and the calibrated statistics are restored on their own (restore, calibrated.restore): a
    # checkpoint written before they were kept resumes.
    self._saved = tf.train.Checkpoint(**self._positions.in_checkpoint, **self._variables,
                                      random_states=self._random_states,
                                      **({"calibrated_statistics": calibrated} if calibrated else {}))
    self._manager = tf.train.CheckpointManager(
        self._saved, checkpoints_lib.checkpoint_dir(cluster.out),
        max_to_keep=cluster.checkpoints_kept(keep))
    self._saved_step = None

  def latest(self):
    """The newest checkpoint of the run, in the workdir (every worker reads the chief's)."""
    return checkpoints_lib.newest(self.directory)

  def restore(self, reset_input_pipeline):
    """Resumes from the newest checkpoint, input position included unless the input changed
    (then only with reset_input_pipeline, train.reset_input_pipeline)."""
    latest = self.latest()
    if not latest:
      logging.info("no checkpoint in %s: starting at step 0", self.directory)
      return
    changes = checkpoints_lib.input_changes(checkpoints_lib.saved_fingerprint(latest),
                                            self.input_fingerprint)
    if changes and not reset_input_pipeline:
      raise CheckpointError(
          f"checkpoint {latest} was written with another input pipeline ({'; '.join(changes)}), so "
          "its input position does not apply; set train.reset_input_pipeline=True to keep the model, "
          "optimizer and step and start the input afresh, or go back to the old settings")
    if changes:
      checkpoints_lib.restore(tf.train.Checkpoint(**self._variables), latest, partial=True)
      self._saved_fingerprint.assign(json.dumps(self.input_fingerprint, sort_keys=True))
      logging.warning("resuming from %s at step %d with a fresh input pipeline "
                      "(train.reset_input_pipeline; %s)", latest, int(self.step), "; ".join(changes))
    else:
      # Partial: the random states and calibrated statistics in it are read on their own below (a
      # TensorFlow warning for each of their values otherwise, some 600 lines for Inception V4).
      checkpoints_lib.restore(self._checkpoint, latest, partial=True)
      self._positions.restore(int(self.step), checkpoints_lib.restore)
      logging.info("resuming from %s at step %d", latest, int(self.step))
    tf.train.Checkpoint(random_states=self._random_states).read(latest).expect_partial()
    if self.calibrated:
      self.calibrated.restore(latest)
    self._saved_step = int(self.step)

  def save(self):
    """Saves the newest step (once) and returns its path in the workdir; a failed write keeps the
    last good checkpoint and is one line."""
    step = int(self.step)
    if self._saved_step == step:
      return self.latest()
    self._statistics_mean()  # every evaluation and the export follow a save
    if self.calibrated:
      self.calibrated.update()
    self._positions.save(step)
    try:
      path = self._manager.save(checkpoint_number=step)
      self._cluster.remove_copy(self._manager.directory)
    except (OSError, tf.errors.OpError) as e:
      raise WorkdirError(
          f"cannot write a checkpoint of step {step} to {self._manager.directory} ({first_line(e)}); "
          f"free space or make it writable, then run again: the last good checkpoint "
          f"{self.latest() or '(none)'} is intact") from None
    self._saved_step = step
    return os.path.join(self.directory, os.path.basename(path))


class RunRecord:
  """What metrics.json records, and the last evaluation, whose report the run's end writes into
  eval/. The chief writes both into the workdir; other workers write nothing (their evaluations
  are the chief's: every worker evaluates the same model on the whole evaluation set)."""

  def __init__(self, cluster, checkpoint, data_report, best, summaries):
    self._out = cluster.out
    self._chief = cluster.chief
    self._counters = checkpoint  # its step and count of non-finite steps
    self._batch_sizes = cluster.batch_sizes
    self._data_report = data_report
    self._summaries = summaries  # the bytes they wrote and the ones they refused
    self.best = best  # checkpoints.BestWeights
    self.train_figures = {}  # the mean figures of the last progress window, with its step and speed
    self.evaluation = None  # the last Evaluation
    self.evaluation_step = None
    self._window_rates = []  # steps/s of each progress window of this run

  def keep_window(self, figures, step, steps_per_second):
    """Keeps a progress window's mean figures and its speed."""
    self._window_rates.append(steps_per_second)
    self.train_figures = dict(figures, step=step, steps_per_second=steps_per_second)

  def keep_evaluation(self, evaluation, step):
    """Keeps the Evaluation of `step`: metrics.json's "eval", and the report of the run's end."""
    self.evaluation, self.evaluation_step = evaluation, step

  def _eval_figures(self):
    """The last evaluation's metrics as floats, with its step; {} before the first."""
    if self.evaluation is None:
      return {}
    return dict(figures(self.evaluation), step=self.evaluation_step)

  def write(self, wall_time_s=None, steps_run=None):
    """Writes metrics.json; with the wall time, the final one of the run. Returns its payload."""
    payload = {
        "step": int(self._counters.step),
        "nonfinite_steps": int(self._counters.nonfinite_steps),
        "train": self.train_figures,
        "eval": self._eval_figures(),
        "summary_bytes": self._summaries.bytes_written(),
        "summaries_refused": self._summaries.refused(),
        "data": self._data_report,
        "best": self.best.best,
        "distribution": self._batch_sizes,
    }
    if wall_time_s is not None:
      payload["wall_time_s"] = wall_time_s
      payload["steps_run"] = steps_run
      # The first window holds the tracing of the compiled call; the median of the others is the speed.
      payload["steps_per_second"] = float(np.median(self._window_rates[1:] or self._window_rates or [0.0]))
    if not self._chief:
      return payload
    with workdir_lib.writing(self._out):
      workdir_lib.write_json(os.path.join(self._out, "metrics.json"), payload)
    return payload

  def write_report(self):
    """Writes the last evaluation's report into `out`/eval, if there was one (the chief)."""
    if self.evaluation and self._chief:
      with workdir_lib.writing(os.path.join(self._out, "eval")):
        self.evaluation.write(os.path.join(self._out, "eval"))


def figures(evaluation):
  """An Evaluation's metrics as {name: float}."""
  return {name: float(value) for name, value in evaluation.metrics.items()}
