"""The state of one training run between compiled calls: step, counters, checkpoints, metrics.json.

It reads checkpoints from the workdir and writes into `out`: the workdir on the chief, a
temporary folder on other workers (common.training.distributed.chief_path).
"""
import json
import os

from absl import logging
import numpy as np
import tensorflow as tf

from common.training import checkpoints as checkpoints_lib
from common.training import diagnostics
from common.training import distributed
from common.training import evaluation as evaluation_lib
from common.runtime import hardware
from common.training import summaries as summaries_lib
from common.runtime import workdir as workdir_lib
from common.contract.errors import CheckpointError
from common.contract.errors import WorkdirError


class RunState:
  """State of one call to `train`: what the loop reads and writes between compiled calls.

  It reads checkpoints from `workdir` and writes into `out`: the workdir on the chief, a
  temporary folder on the other workers (common.training.distributed.chief_path).
  """

  def __init__(self, config, workdir, out, strategy, model, phases, task):
    self.config = config
    self.workdir = workdir
    self.out = out
    self.strategy = strategy
    self.chief = out == workdir
    self.workers = hardware.num_workers(strategy)
    self.worker = hardware.worker_index(strategy)
    # Several workers stop together, after a call that tells each of them about a signal.
    self.stop_flag = tf.Variable(0.0, trainable=False, name="stop_flag") if self.workers > 1 else None
    self.model = model
    self.phases = phases
    self.evaluate_fn = evaluation_lib.make_evaluate_fn(task, model)
    self.image_summaries_fn = task.image_summaries_fn
    self.data_report = task.data_report
    self.total_steps = sum(p.num_steps for p in phases)
    self.step = tf.Variable(0, dtype=tf.int64, trainable=False, name="global_step")
    self.nonfinite_steps = tf.Variable(0, dtype=tf.int64, trainable=False, name="nonfinite_steps")
    self.input_fingerprint = dict(task.input_fingerprint)
    if self.workers > 1:  # each worker's input position is a slice of the one-worker stream
      self.input_fingerprint["workers"] = self.workers
    self.saved_fingerprint = tf.Variable(json.dumps(self.input_fingerprint, sort_keys=True),
                                         trainable=False, name="input_fingerprint")
    self.saved_step = None
    self.best = checkpoints_lib.BestWeights(model, workdir, out, config.train.best_metric,
                                            config.train.best_mode)
    self.distribution = distributed.batch_sizes(config.train.batch_size, strategy, self.workers)
    self.iterator = iter(distributed.worker_input(task.train_dataset, self.distribution, self.worker))
    self.train_summaries = summaries_lib.SummaryBudget(os.path.join(out, "train"), config.summaries)
    self.eval_summaries = summaries_lib.SummaryBudget(os.path.join(out, "eval"), config.summaries)
    self.last_eval = {}
    self.last_evaluation = None
    self.last_train = {}
    self.window_rates = []  # steps/s of each progress window of this run
    self.consecutive_nonfinite = 0
    self.input_logged = False  # a batch's digest, once per run on several workers
    self._probe = None
    self._activation_statistics = None
    self._build_optimizers()
    self.state = dict(model=model, step=self.step, nonfinite_steps=self.nonfinite_steps,
                      input_fingerprint=self.saved_fingerprint,
                      **{f"optimizer_{p.name}": p.optimizer for p in phases})
    checkpoints = checkpoints_lib.checkpoint_dir(workdir)
    if self.workers > 1:
      # The collective checkpoint is the chief's; each worker's input position is its own.
      self.checkpoint = tf.train.Checkpoint(**self.state)
      self.input_positions = distributed.InputPositions(self.iterator, checkpoints, self.worker,
                                                        config.train.keep_checkpoints)
    else:
      self.checkpoint = tf.train.Checkpoint(iterator=self.iterator, **self.state)
      self.input_positions = None
    self.manager = tf.train.CheckpointManager(
        self.checkpoint, checkpoints_lib.checkpoint_dir(out),
        max_to_keep=config.train.keep_checkpoints if self.chief else 1)

  def latest_checkpoint(self):
    """The newest checkpoint of the run, in the workdir (every worker reads the chief's)."""
    return tf.train.latest_checkpoint(checkpoints_lib.checkpoint_dir(self.workdir))

  def _build_optimizers(self):
    # Optimizer slots must exist, inside the strategy scope, before a restore or the first step.
    for phase in self.phases:
      if phase.prepare:
        phase.prepare()
      with self.strategy.scope():
        phase.optimizer.build(self.model.trainable_variables)

  def restore(self):
    """Resumes from the newest checkpoint, input position included unless the input changed."""
    latest = self.latest_checkpoint()
    if not latest:
      logging.info("no checkpoint in %s: starting at step 0", checkpoints_lib.checkpoint_dir(self.workdir))
      return
    changes = checkpoints_lib.input_changes(checkpoints_lib.saved_fingerprint(latest),
                                            self.input_fingerprint)
    if changes and not self.config.train.reset_input_pipeline:
      raise CheckpointError(
          f"checkpoint {latest} was written with another input pipeline ({'; '.join(changes)}), so "
          "its input position does not apply; set train.reset_input_pipeline=True to keep the model, "
          "optimizer and step and start the input afresh, or go back to the old settings")
    if changes:
      checkpoints_lib.restore(tf.train.Checkpoint(**self.state), latest, partial=True)
      self.saved_fingerprint.assign(json.dumps(self.input_fingerprint, sort_keys=True))
      logging.warning("resuming from %s at step %d with a fresh input pipeline "
                      "(train.reset_input_pipeline; %s)", latest, int(self.step), "; ".join(changes))
    else:
      checkpoints_lib.restore(self.checkpoint, latest, partial=False)
      if self.input_positions:
        self.input_positions.restore(int(self.step), checkpoints_lib.restore)
      logging.info("resuming from %s at step %d", latest, int(self.step))
    self.saved_step = int(self.step)

  def save_and_report(self):
    """Saves the newest step and writes metrics.json (a signal stops the run); returns the path."""
    path = self.save()
    self.write_metrics()
    return path

  def save(self):
    """Saves the newest step (once); a failed write keeps the last good checkpoint and is one line."""
    step = int(self.step)
    if self.saved_step == step:
      return self.latest_checkpoint()
    if self.input_positions:
      self.input_positions.save(step, self.strategy)
    try:
      path = self.manager.save(checkpoint_number=step)
      distributed.remove_copy(self.manager.directory, self.chief)
    except (OSError, tf.errors.OpError) as e:
      message = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
      raise WorkdirError(
          f"cannot write a checkpoint of step {step} to {self.manager.directory} ({message}); "
          f"free space or make it writable, then run again: the last good checkpoint "
          f"{self.latest_checkpoint() or '(none)'} is intact") from None
    self.saved_step = step
    return os.path.join(checkpoints_lib.checkpoint_dir(self.workdir), os.path.basename(path))

  @property
  def probe(self):
    if self._probe is None:
      self._probe = diagnostics.activation_model(self.model)
    return self._probe

  @property
  def activation_statistics(self):
    if self._activation_statistics is None:
      self._activation_statistics = diagnostics.make_activation_statistics(self.probe)
    return self._activation_statistics

  def write_metrics(self, wall_time_s=None, steps_run=None):
    """Writes metrics.json; with the wall time, the final one of the run. Returns its payload."""
    payload = {
        "step": int(self.step),
        "nonfinite_steps": int(self.nonfinite_steps),
        "train": self.last_train,
        "eval": self.last_eval,
        "summary_bytes": self.train_summaries.bytes_written() + self.eval_summaries.bytes_written(),
        "summaries_refused": self.train_summaries.refused + self.eval_summaries.refused,
        "data": self.data_report,
        "best": self.best.best,
        "distribution": self.distribution,
    }
    if wall_time_s is not None:
      payload["wall_time_s"] = wall_time_s
      payload["steps_run"] = steps_run
      # The first window holds the tracing of the compiled call; the median of the others is the speed.
      payload["steps_per_second"] = float(np.median(self.window_rates[1:] or self.window_rates or [0.0]))
    with workdir_lib.writing(self.out):
      workdir_lib.write_json(os.path.join(self.out, "metrics.json"), payload)
    return payload
