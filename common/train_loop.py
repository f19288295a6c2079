"""The one training loop of every trainer.

It owns what a trainer should not have to get right again: mixed precision
with loss scaling, gradient clipping, the guard against non-finite steps,
checkpoints of the whole state (model, optimizers, step and input iterator),
resuming, SIGTERM/SIGINT, progress lines, evaluation, summaries under a budget,
and metrics.json.

Up to `train.steps_per_loop` steps run inside one compiled call, which reads
its batches from the plain, checkpointable input iterator and hands back every
step's metrics at once: the host syncs once per call, not once per step. A call
ends at the next log line, summary, checkpoint, evaluation or phase end, so
that all of those (and signals) fall on call boundaries.

The non-finite guard is Keras' LossScaleOptimizer in both precisions: a step
whose gradients are not finite changes no weight and lowers the scale. The step
restores BatchNorm statistics that such a step's forward pass touched; the loop
counts the step, and stops the run at that step with a report after
`train.max_consecutive_nonfinite` in a row.
"""
import dataclasses
import json
import math
import os
import signal
import time
from typing import Callable, Optional

from absl import logging
import keras
import numpy as np
import tensorflow as tf

from common import checkpoints as checkpoints_lib
from common import diagnostics
from common import distributed
from common import hardware
from common import summaries as summaries_lib
from common import workdir as workdir_lib
from common.errors import CheckpointError
from common.errors import DataError
from common.errors import WorkdirError


class TrainingInterrupted(Exception):
  """SIGTERM or SIGINT arrived; the checkpoint of `step` is written."""

  def __init__(self, signum, step, checkpoint):
    super().__init__(f"interrupted by {signal.Signals(signum).name} at step {step}; "
                     f"checkpoint {checkpoint} written; run the same command again to resume")
    self.signum = signum


class TrainingDiverged(Exception):
  """Too many non-finite steps in a row; the message says where the values went non-finite."""


@dataclasses.dataclass
class Phase:
  """A stretch of training with its own optimizer and its own trainable set.

  prepare() sets `layer.trainable` for the phase (frozen BatchNorm layers then
  run in inference mode); the phase trains `model.trainable_variables` after it.
  """
  name: str
  num_steps: int
  optimizer: keras.optimizers.Optimizer
  prepare: Optional[Callable[[], None]] = None


def batch_norm_statistics(model):
  """The BatchNorm moving statistics, which a training forward pass assigns."""
  return [v for v in model.non_trainable_variables
          if v.path.endswith(("moving_mean", "moving_variance"))]


def make_train_step(model, optimizer, loss_fn, strategy, clipnorm=0.0, jit_compile=False):
  """The compiled step: (distributed batch) -> metrics, updating model and optimizer in place.

  Clipping by global norm happens here, on the gradient summed over replicas:
  Keras' own clipnorm would clip each replica's part separately. Each replica's
  loss is its mean over its part of the batch divided by the number of replicas
  (the loss of the global batch), and its regularization is divided the same
  way, so that the sum over replicas counts it once (tf.nn.scale_regularization_loss).
  """
  variables = model.trainable_variables
  statistics = batch_norm_statistics(model)
  replicas = strategy.num_replicas_in_sync

  def replica_step(batch):
    context = tf.distribute.get_replica_context()
    saved_statistics = [tf.identity(v) for v in statistics]
    with tf.GradientTape() as tape:
      loss, metrics = loss_fn(model, batch, True)
      regularization = tf.add_n([tf.cast(l, tf.float32) for l in model.losses]) if model.losses else 0.0
      total = loss + regularization
      scaled = optimizer.scale_loss(total / replicas)
    grads = tape.gradient(scaled, variables)
    if replicas > 1:
      grads = context.all_reduce(tf.distribute.ReduceOp.SUM, grads)
    finite = tf.logical_and(tf.reduce_all([tf.reduce_all(tf.math.is_finite(g)) for g in grads]),
                            tf.math.is_finite(total))
    all_finite = tf.equal(
        context.all_reduce(tf.distribute.ReduceOp.SUM, 1.0 - tf.cast(finite, tf.float32)), 0.0)
    scale = tf.cast(optimizer.dynamic_scale, tf.float32)
    # Gradients are still multiplied by the loss scale, and so is the clipping threshold.
    if clipnorm:
      grads, scaled_norm = tf.clip_by_global_norm(grads, clipnorm * scale)
    else:
      scaled_norm = tf.linalg.global_norm(grads)
    # The optimizer sums the replicas' gradients again, hence 1 / replicas. A non-finite loss can
    # have finite gradients (a loss cut off by tf.where, say), which Adam's momentum would still
    # apply: NaN gradients make the LossScaleOptimizer skip the step whatever the cause.
    factor = tf.where(all_finite, 1.0 / replicas, math.nan)
    optimizer.apply([g * tf.cast(factor, g.dtype) for g in grads], variables)
    for variable, saved in zip(statistics, saved_statistics):
      variable.assign(tf.where(all_finite, variable, saved))
    out = {"loss": loss, "regularization": tf.cast(regularization, tf.float32),
           "grad_norm": tf.where(all_finite, scaled_norm / scale, 0.0),
           "finite": tf.cast(all_finite, tf.float32), "loss_scale": scale}
    out.update(metrics)
    return out

  @tf.function(jit_compile=jit_compile)
  def train_step(batch):
    per_replica = strategy.run(replica_step, args=(batch,))
    return {name: strategy.reduce(tf.distribute.ReduceOp.MEAN, value, axis=None)
            for name, value in per_replica.items()}

  return train_step


def make_train_loop(train_step, iterator, strategy, step, max_consecutive, stop_flag=None):
  """(loop, names): loop(num_steps, consecutive) runs up to num_steps steps in one compiled call.

  consecutive is the count of non-finite steps in a row so far; the call stops early at the
  step that brings it to max_consecutive. Returns {"metrics": [steps run, K] (one row a step,
  columns `names`), "consecutive", "last_batch": the host batch of the last step run}, and
  with stop_flag "stop", the sum of every worker's flag, so that all workers stop together.
  The next batch is read (and copied to the step's device) while a step runs, except where
  that step may end the call early: the iterator never reads past the last step run, so that
  its checkpointed position is exact. A dataset that ends raises tf.errors.OutOfRangeError.
  """
  device = distributed.step_devices(strategy)[0]
  names = []

  def fetch():
    batch = next(iterator)
    return distributed.to_device(batch, device) if strategy.num_replicas_in_sync == 1 else batch

  @tf.function
  def loop(num_steps, consecutive):
    first = fetch()
    # The step's outputs, known from its trace, set the columns of the metrics rows.
    names[:] = sorted(train_step.get_concrete_function(
        distributed.distribute_batch(first, strategy)).structured_outputs)
    rows = tf.TensorArray(tf.float32, size=0, dynamic_size=True, element_shape=[len(names)])

    def body(i, consecutive, batch, last, rows):
      del last
      more = i + 1 < num_steps
      may_end = consecutive + 1 >= max_consecutive  # this step may be the last of the call
      ahead = tf.cond(more & ~may_end, fetch, lambda: batch)
      metrics = train_step(distributed.distribute_batch(batch, strategy))
      step.assign_add(1)
      consecutive = tf.where(metrics["finite"] > 0, 0, consecutive + 1)
      following = tf.cond(more & may_end & (consecutive < max_consecutive), fetch, lambda: ahead)
      rows = rows.write(i, tf.stack([tf.cast(metrics[name], tf.float32) for name in names]))
      return i + 1, consecutive, following, batch, rows

    def cond(i, consecutive, *_):
      return (i < num_steps) & (consecutive < max_consecutive)

    _, consecutive, _, last, rows = tf.while_loop(cond, body, (0, consecutive, first, first, rows))
    out = {"metrics": rows.stack(), "consecutive": consecutive, "last_batch": last}
    if stop_flag is not None:
      out["stop"] = strategy.reduce(tf.distribute.ReduceOp.SUM,
                                    strategy.run(stop_flag.read_value), axis=None)
    return out

  return loop, names


def _format_seconds(seconds):
  seconds = int(seconds)
  return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m" if seconds >= 3600 else f"{seconds // 60}m{seconds % 60:02d}s"


class _SignalFlag:
  """Records SIGTERM/SIGINT so that the loop can checkpoint before it exits.

  The first signal lets the current compiled call (or evaluation) finish; the
  loop then saves and exits. A second signal while the newest step is already
  saved (during an evaluation, which always follows a save) exits at once.
  """

  def __init__(self, run):
    self.run = run
    self.signum = None
    self._previous = {}

  def __enter__(self):
    for signum in (signal.SIGTERM, signal.SIGINT):
      self._previous[signum] = signal.signal(signum, self._record)
    return self

  def _record(self, signum, frame):
    del frame
    name = signal.Signals(signum).name
    saved = self.run.saved_step == int(self.run.step)
    if self.signum is not None and saved:
      raise TrainingInterrupted(signum, int(self.run.step), self.run.latest_checkpoint())
    logging.warning("received %s: finishing these steps, then %s" if not self.run.evaluating else
                    "received %s: finishing this evaluation, then %s", name,
                    "exiting (the checkpoint is written; a second signal exits now)" if saved
                    else "saving a checkpoint")
    self.signum = signum
    if self.run.stop_flag is not None:
      self.run.stop_flag.assign(1.0)  # the next compiled call tells the other workers

  def check(self, stop=None):
    """Raises TrainingInterrupted after a signal, with the newest step saved.

    With several workers the checkpoint is collective: a worker stops only after the call
    whose `stop` (the sum of every worker's flag) says that one of them was signalled, which
    every worker sees after the same call.
    """
    if self.run.stop_flag is not None and stop is not None:
      if not stop:
        return
      self.signum = self.signum or signal.SIGTERM
    if self.signum is not None:
      path = self.run.save()
      _write_metrics(self.run, None, None)
      raise TrainingInterrupted(self.signum, int(self.run.step), path)

  def __exit__(self, *exc):
    for signum, handler in self._previous.items():
      signal.signal(signum, handler)


class _Run:
  """State of one call to `train`: what the loop reads and writes between compiled calls.

  It reads checkpoints from `workdir` and writes into `out`: the workdir on the chief, a
  temporary folder on the other workers (common.distributed.chief_path).
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
    self.evaluate_fn = task.make_evaluate_fn(model)
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
    self.evaluating = False
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

  def save(self):
    """Saves the newest step (once); a failed write keeps the last good checkpoint and is one line."""
    step = int(self.step)
    if self.saved_step == step:
      return self.latest_checkpoint()
    if self.input_positions:
      self.input_positions.save(step, self.strategy)
    try:
      path = self.manager.save(checkpoint_number=step)
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


def train(config, workdir, *, strategy, model, phases, task):
  """Trains `model` through `phases` and returns the final metrics (also in workdir/metrics.json).

  From the task (common/task.py) the loop takes the training dataset of
  (inputs, targets) batches, the loss function, the evaluation, the image
  summaries and the input fingerprint. The workdir is locked for the run;
  training resumes from its newest checkpoint; the resolved config is written
  after the checkpoint is known to fit; every evaluation follows a save, and
  the final evaluation's report goes to workdir/eval. With train.best_metric
  the model ends with the weights of the best evaluation (workdir/best), so
  that the export saves those; metrics.json names their step under "best".

  With several workers (MultiWorkerMirroredStrategy) only the chief writes the
  workdir; the others write into temporary folders that are removed, except
  their own input positions (checkpoints/input/worker<i>/).
  """
  with distributed.chief_path(workdir, strategy) as out, workdir_lib.locked(out):
    checkpoints = checkpoints_lib.checkpoint_dir(out)
    workdir_lib.check_writable(out, checkpoints)
    workdir_lib.remove_leftovers(checkpoints)
    run = _Run(config, workdir, out, strategy, model, phases, task)
    run.restore()
    workdir_lib.write_run_config(config, out)
    start_time = time.time()
    start_step = int(run.step)
    with _SignalFlag(run) as signals, diagnostics.Watchdog(config.train.stall_timeout_s) as watchdog:
      phase_end = 0
      for phase in phases:
        phase_end += phase.num_steps
        if int(run.step) < phase_end:
          _train_phase(run, phase, phase_end, task.loss_fn, signals, watchdog)
      if not run.latest_checkpoint() or int(run.step) > start_step:
        run.save()
      if not run.last_eval or run.last_eval.get("step") != int(run.step):
        _evaluate(run)
      signals.check()
    results = _write_metrics(run, time.time() - start_time, int(run.step) - start_step)
    run.best.load_into_model()
    if run.last_evaluation:
      with workdir_lib.writing(os.path.join(out, "eval")):
        run.last_evaluation.write(os.path.join(out, "eval"))
    run.train_summaries.close()
    run.eval_summaries.close()
    return results


def _next_boundary(run, step, phase_end):
  """The step at which the compiled call starting after `step` ends: the nearest of the phase end,
  train.steps_per_loop steps on, and the next step due for a log line, summary, checkpoint or
  evaluation."""
  config, budget = run.config, run.train_summaries
  cadences = [config.train.log_every, config.train.checkpoint_every, config.train.eval_every,
              config.summaries.scalars_every]
  if run.image_summaries_fn and budget.images_due(0):
    cadences.append(config.summaries.images_every)
  if budget.histograms_due(0):
    cadences.append(config.summaries.histograms_every)
  due = min((step // every + 1) * every for every in cadences)
  return min(phase_end, step + config.train.steps_per_loop, due)


def _train_phase(run, phase, phase_end, loss_fn, signals, watchdog):
  config = run.config
  if phase.prepare:
    phase.prepare()
  logging.info("phase '%s': steps %d to %d, %d trainable variables, up to %d steps per compiled call",
               phase.name, phase_end - phase.num_steps, phase_end, len(run.model.trainable_variables),
               config.train.steps_per_loop)
  train_step = make_train_step(run.model, phase.optimizer, loss_fn, run.strategy,
                               config.optimizer.clipnorm, config.train.jit_compile)
  loop, names = make_train_loop(train_step, run.iterator, run.strategy, run.step,
                         config.train.max_consecutive_nonfinite, run.stop_flag)
  window = _Window(run.model.trainable_variables)
  step = int(run.step)
  while step < phase_end:
    first = step
    try:
      out = loop(tf.constant(_next_boundary(run, step, phase_end) - step, tf.int32),
                 tf.constant(run.consecutive_nonfinite, tf.int32))
    except tf.errors.OutOfRangeError:
      raise DataError(f"the training dataset ended at step {int(run.step)}; it must repeat "
                      "(.repeat())") from None
    rows = out["metrics"].numpy()  # the one read of the call's metrics
    step = int(run.step)
    watchdog.beat(step)
    batch = out["last_batch"]
    if run.workers > 1 and not run.input_logged:  # the first call of this run
      run.input_logged = True
      logging.info("worker %d of %d: its input at step %d has digest %s", run.worker, run.workers,
                   step - 1, distributed.batch_digest(batch))
    metrics = [dict(zip(names, map(float, row))) for row in rows]
    for offset, values in enumerate(metrics):
      window.add(values)
      if not values["finite"]:
        run.nonfinite_steps.assign_add(1)
        logging.warning("step %d: loss or gradients not finite (loss %s); step skipped, weights "
                        "unchanged", first + offset + 1, values["loss"])
    run.consecutive_nonfinite = int(out["consecutive"])
    if run.consecutive_nonfinite >= config.train.max_consecutive_nonfinite:
      _stop_diverged(run, batch, loss_fn)
    last = metrics[-1]
    if step % config.train.log_every == 0 or step == phase_end:
      _log_progress(run, phase, window, step, phase.optimizer)
      window = _Window(run.model.trainable_variables)
    if run.train_summaries.scalars_due(step):
      _write_train_summaries(run, step, last, phase.optimizer)
    _write_heavy_summaries(run, step, batch)
    evaluate = step % config.train.eval_every == 0
    if evaluate or step % config.train.checkpoint_every == 0:
      run.save()  # before the evaluation, so that a failing or interrupted one loses no step
    if evaluate:
      _evaluate(run)
    signals.check(float(out["stop"]) if "stop" in out else None)


def _stop_diverged(run, batch, loss_fn):
  """Saves the last finite weights (the non-finite steps changed none) and raises the report."""
  model = run.model

  def loss_and_grads():
    with tf.GradientTape() as tape:
      loss, _ = loss_fn(model, batch, True)
    return loss, tape.gradient(loss, model.trainable_variables)

  run.save()  # first: the report's forward passes in training mode move BatchNorm statistics
  report = diagnostics.locate_nonfinite(model, batch[0], loss_and_grads)
  raise TrainingDiverged(
      f"{run.consecutive_nonfinite} non-finite steps in a row, the last at step {int(run.step)}: "
      f"{report}; checkpoint of the last finite weights in {checkpoints_lib.checkpoint_dir(run.workdir)}")


class _Window:
  """Metrics and timing between two progress lines, and the weight sample for stall detection."""

  def __init__(self, variables):
    self.sums = {}
    self.count = 0
    self.start = time.time()
    self.weights = diagnostics.sample_weights(variables)
    self.variables = variables

  def add(self, metrics):
    self.count += 1
    for name, value in metrics.items():
      self.sums[name] = self.sums.get(name, 0.0) + value

  def mean(self, name):
    return self.sums.get(name, 0.0) / max(self.count, 1)


def _log_progress(run, phase, window, step, optimizer):
  elapsed = max(time.time() - window.start, 1e-9)
  steps_per_s = window.count / elapsed
  run.window_rates.append(steps_per_s)
  eta = (run.total_steps - step) / max(steps_per_s, 1e-9)
  skipped = window.count - window.sums.get("finite", 0.0)
  logging.info("step %d/%d [%s] loss %.4f  lr %.3g  %.2f steps/s  ETA %s%s", step, run.total_steps,
               phase.name, window.mean("loss"), _learning_rate(optimizer), steps_per_s,
               _format_seconds(eta), f"  ({skipped:.0f} non-finite steps skipped)" if skipped else "")
  run.last_train = {name: window.mean(name) for name in window.sums if name != "finite"}
  run.last_train.update(step=step, steps_per_second=steps_per_s)
  update = diagnostics.relative_update(window.weights, diagnostics.sample_weights(window.variables))
  run.train_summaries.write_scalars(step, {"diagnostics/relative_update": update})
  if skipped < window.count and update < run.config.train.stall_update_ratio:
    logging.warning(
        "TRAINING HAS STALLED: the weights moved by %.3g (relative) over the last %d steps; learning "
        "rate %.3g. Check optimizer.learning_rate and the gradients (summaries grad_norm)",
        update, window.count, _learning_rate(optimizer))


def _learning_rate(optimizer):
  inner = getattr(optimizer, "inner_optimizer", optimizer)
  return float(inner.learning_rate)


def _write_train_summaries(run, step, metrics, optimizer):
  scalars = {name: value for name, value in metrics.items() if name != "finite"}
  scalars["learning_rate"] = _learning_rate(optimizer)
  scalars["nonfinite_steps"] = float(run.nonfinite_steps)
  scalars["summary_bytes"] = float(run.train_summaries.bytes_written())
  run.train_summaries.write_scalars(step, scalars)


def _write_heavy_summaries(run, step, batch):
  """Images, histograms and activation statistics: each only at its cadence, never in the step."""
  if not run.chief:
    return
  cfg = run.config.summaries
  budget = run.train_summaries
  if run.image_summaries_fn and budget.images_due(step):
    budget.write_images(step, run.image_summaries_fn(run.model, batch))
  if cfg.activation_stats and budget.scalars_due(step):
    stats = run.activation_statistics(batch[0])
    budget.write_scalars(step, {f"activations/{name}/{kind}": value
                                for name, (mean, var) in stats.items()
                                for kind, value in (("mean", mean), ("variance", var))})
  if budget.histograms_due(step):
    tensors = summaries_lib.select_histogram_variables(run.model.variables, cfg.histograms,
                                                       cfg.bias_histograms)
    if cfg.activation_histograms:
      outputs = run.probe(batch[0], training=False)
      tensors.update({f"activations/{name}": value for name, value in outputs.items()})
    budget.write_histograms(step, tensors)


def _evaluate(run):
  step = int(run.step)
  started = time.time()
  run.evaluating = True
  try:
    run.last_evaluation = run.evaluate_fn()
  finally:
    run.evaluating = False
  results = {name: float(value) for name, value in run.last_evaluation.metrics.items()}
  logging.info("eval at step %d (%.1f s): %s", step, time.time() - started,
               "  ".join(f"{k} {v:.4f}" for k, v in sorted(results.items())))
  warning = eval_loss_warning(results.get("loss"), run.last_train.get("loss"))
  if warning:
    logging.warning("%s", warning)
  run.eval_summaries.write_scalars(step, results)
  run.eval_summaries.flush()
  run.last_eval = dict(results, step=step)
  run.best.offer(results, step)
  _write_metrics(run, None, None)


# An evaluation loss this many times the training loss (or 1, if that is lower) is no over-fitting:
# the evaluation runs another network than the one training saw.
EVAL_LOSS_RATIO = 30.0


def eval_loss_warning(eval_loss, train_loss):
  """The warning for an evaluation loss orders of magnitude above the training loss, or None."""
  if eval_loss is None or train_loss is None:
    return None
  if math.isfinite(eval_loss) and eval_loss <= EVAL_LOSS_RATIO * max(train_loss, 1.0):
    return None
  return (f"EVALUATION LOSS {eval_loss:.4g} IS FAR ABOVE THE TRAINING LOSS {train_loss:.4g}: the "
          "evaluation does not run the network that training saw. Likely causes: BatchNorm moving "
          "statistics not yet adapted to the weights (layers trained from random weights with a "
          "momentum near 1, e.g. TF-Slim's 0.9997, which inference mode uses), or evaluation "
          "preprocessing that differs from training's (image scale, crop, normalization)")


def _write_metrics(run, wall_time_s, steps_run):
  payload = {
      "step": int(run.step),
      "nonfinite_steps": int(run.nonfinite_steps),
      "train": run.last_train,
      "eval": run.last_eval,
      "summary_bytes": run.train_summaries.bytes_written() + run.eval_summaries.bytes_written(),
      "summaries_refused": run.train_summaries.refused + run.eval_summaries.refused,
      "data": run.data_report,
      "best": run.best.best,
      "distribution": run.distribution,
  }
  if wall_time_s is not None:
    payload["wall_time_s"] = wall_time_s
    payload["steps_run"] = steps_run
    # The first window holds the tracing of the compiled call; the median of the others is the speed.
    payload["steps_per_second"] = float(np.median(run.window_rates[1:] or run.window_rates or [0.0]))
  with workdir_lib.writing(run.out):
    workdir_lib.write_json(os.path.join(run.out, "metrics.json"), payload)
  return payload
