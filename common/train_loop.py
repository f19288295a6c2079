"""The one training loop of every trainer.

It owns what a trainer should not have to get right again: the distribution
strategy, mixed precision with loss scaling, gradient clipping, the guard
against non-finite steps, checkpoints of the whole state (model, optimizers,
step and input iterator), resuming, SIGTERM/SIGINT, progress lines,
evaluation, summaries under a budget, and metrics.json.

The non-finite guard is Keras' LossScaleOptimizer in both precisions (float32
starts at scale 1, where scaling is exact): a step whose gradients are not
finite changes no weight and lowers the scale. The loop restores BatchNorm
statistics that such a step's forward pass touched, counts the step, and stops
the run with a report after `train.max_consecutive_nonfinite` in a row.
"""
import dataclasses
import json
import os
import shutil
import signal
import time
from typing import Callable, Optional

from absl import logging
import keras
import tensorflow as tf

from common import config as config_lib
from common import diagnostics
from common import hardware
from common import summaries as summaries_lib
from common import workdir as workdir_lib
from common.errors import CheckpointError
from common.errors import ConfigError
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


def prepare_run(config, workdir=None):
  """Checks the shared config and the workdir, then devices, determinism and precision policy;
  returns the strategy.

  Call first, before any TensorFlow op (GPU options cannot change after) and
  before building the model (the precision policy applies to layers built after it).
  A workdir that cannot be written (a file, read-only, full) fails here, before
  anything is written into it.
  """
  config_lib.validate_config(config)
  if workdir is not None:
    workdir_lib.check_writable(workdir)
  hardware.configure_devices(config.hardware.memory_limit_mb, config.hardware.memory_growth)
  hardware.set_determinism(config.seed, config.deterministic)
  keras.mixed_precision.set_global_policy("mixed_float16" if config.mixed_precision else "float32")
  return hardware.make_strategy()


def make_optimizer(opt_cfg, mixed_precision, learning_rate=None):
  """Adam with exponential decay, inside a LossScaleOptimizer.

  learning_rate overrides opt_cfg.learning_rate (a second fine-tuning phase, say).
  """
  schedule = keras.optimizers.schedules.ExponentialDecay(
      learning_rate if learning_rate is not None else opt_cfg.learning_rate,
      decay_steps=opt_cfg.decay_steps, decay_rate=opt_cfg.decay_rate, staircase=opt_cfg.staircase)
  inner = keras.optimizers.Adam(schedule)  # clipping is the train step's (make_train_step)
  return keras.optimizers.LossScaleOptimizer(inner, initial_scale=2.0**15 if mixed_precision else 1.0)


def checkpoint_dir(workdir):
  return os.path.join(workdir, "checkpoints")


def best_dir(workdir):
  """Where train.best_metric keeps the weights of the best evaluation, with best.json."""
  return os.path.join(workdir, "best")


def restore_model(model, workdir):
  """Loads the model's weights from the newest checkpoint in workdir (for evaluation); returns its path."""
  latest = tf.train.latest_checkpoint(checkpoint_dir(workdir))
  if latest is None:
    raise CheckpointError(f"no checkpoint in {checkpoint_dir(workdir)}")
  _restore(tf.train.Checkpoint(model=model), latest, partial=True)
  return latest


def _restore(checkpoint, path, partial):
  """Restores, turning a mismatch (another model or config) into one CheckpointError line.

  A checkpoint without a save counter (Checkpoint.write, as the best weights are kept) is read.
  """
  try:
    has_counter = tf.train.load_checkpoint(path).has_tensor("save_counter/.ATTRIBUTES/VARIABLE_VALUE")
    status = checkpoint.restore(path) if has_counter else checkpoint.read(path)
    if partial:
      status.expect_partial()
    status.assert_existing_objects_matched()
  except (AssertionError, ValueError, tf.errors.OpError) as e:
    first_line = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    raise CheckpointError(
        f"checkpoint {path} does not match this model and config ({first_line}); "
        "use another --workdir, or the config the checkpoint was trained with") from None


def _saved_fingerprint(path):
  """The input fingerprint stored in a checkpoint, or None for a checkpoint without one."""
  reader = tf.train.load_checkpoint(path)
  key = "input_fingerprint/.ATTRIBUTES/VARIABLE_VALUE"
  if not reader.has_tensor(key):
    return None
  return json.loads(reader.get_tensor(key))


def input_changes(saved, current):
  """['key: saved -> current', ...] of the input facts that differ; none for an unknown saved one."""
  if saved is None:
    return []
  return [f"{key}: {saved.get(key)} -> {current.get(key)}"
          for key in sorted(set(saved) | set(current)) if saved.get(key) != current.get(key)]


def batch_norm_statistics(model):
  """The BatchNorm moving statistics, which a training forward pass assigns."""
  return [v for v in model.non_trainable_variables
          if v.path.endswith(("moving_mean", "moving_variance"))]


def make_train_step(model, optimizer, loss_fn, strategy, clipnorm=0.0, jit_compile=False):
  """The compiled step: (distributed batch) -> metrics, updating model and optimizer in place.

  Clipping by global norm happens here, on the gradient summed over replicas:
  Keras' own clipnorm would clip each replica's part separately.
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
    if replicas > 1:
      grads = [g / replicas for g in grads]  # the optimizer sums the replicas' gradients again
    optimizer.apply(grads, variables)
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


def distribute_batch(batch, strategy):
  """Splits a host batch across the replicas.

  The loop iterates the plain dataset rather than a distributed one because
  only a plain iterator can be checkpointed (a DistributedIterator cannot).
  """
  replicas = strategy.num_replicas_in_sync
  if replicas == 1:
    return batch

  def replica_value(context):
    return tf.nest.map_structure(lambda t: tf.split(t, replicas)[context.replica_id_in_sync_group], batch)

  return strategy.experimental_distribute_values_from_function(replica_value)


def write_json(path, payload):
  """Atomic write, so that a crash never leaves a half-written file."""
  tmp = path + ".tmp"
  with open(tmp, "w") as f:
    json.dump(payload, f, indent=2, sort_keys=True)
  os.replace(tmp, path)


def _format_seconds(seconds):
  seconds = int(seconds)
  return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m" if seconds >= 3600 else f"{seconds // 60}m{seconds % 60:02d}s"


class _SignalFlag:
  """Records SIGTERM/SIGINT so that the loop can checkpoint before it exits.

  The first signal lets the current step (or evaluation) finish; the loop
  then saves and exits. A second signal while the newest step is already saved
  (during an evaluation, which always follows a save) exits at once.
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
      raise TrainingInterrupted(signum, int(self.run.step), self.run.manager.latest_checkpoint)
    logging.warning("received %s: finishing this %s, then %s", name,
                    "evaluation" if self.run.evaluating else "step",
                    "exiting (the checkpoint is written; a second signal exits now)" if saved
                    else "saving a checkpoint")
    self.signum = signum

  def check(self):
    """Raises TrainingInterrupted after a signal, with the newest step saved."""
    if self.signum is not None:
      path = self.run.save()
      _write_metrics(self.run, None, None)
      raise TrainingInterrupted(self.signum, int(self.run.step), path)

  def __exit__(self, *exc):
    for signum, handler in self._previous.items():
      signal.signal(signum, handler)


class _Run:
  """State of one call to `train`: what the loop reads and writes between steps."""

  def __init__(self, config, workdir, strategy, model, phases, task):
    self.config = config
    self.workdir = workdir
    self.strategy = strategy
    self.model = model
    self.phases = phases
    self.evaluate_fn = task.make_evaluate_fn(model)
    self.image_summaries_fn = task.image_summaries_fn
    self.data_report = task.data_report
    self.total_steps = sum(p.num_steps for p in phases)
    self.step = tf.Variable(0, dtype=tf.int64, trainable=False, name="global_step")
    self.nonfinite_steps = tf.Variable(0, dtype=tf.int64, trainable=False, name="nonfinite_steps")
    self.input_fingerprint = dict(task.input_fingerprint)
    self.saved_fingerprint = tf.Variable(json.dumps(self.input_fingerprint, sort_keys=True),
                                         trainable=False, name="input_fingerprint")
    self.saved_step = None
    self.evaluating = False
    self.best = _read_best(workdir, config.train.best_metric)
    if config.train.batch_size % strategy.num_replicas_in_sync:
      raise ConfigError(f"train.batch_size={config.train.batch_size} is not divisible by the "
                        f"{strategy.num_replicas_in_sync} replicas")
    self.iterator = iter(task.train_dataset)
    self.train_summaries = summaries_lib.SummaryBudget(os.path.join(workdir, "train"), config.summaries)
    self.eval_summaries = summaries_lib.SummaryBudget(os.path.join(workdir, "eval"), config.summaries)
    self.last_eval = {}
    self.last_evaluation = None
    self.last_train = {}
    self.consecutive_nonfinite = 0
    self._probe = None
    self._build_optimizers()
    self.state = dict(model=model, step=self.step, nonfinite_steps=self.nonfinite_steps,
                      input_fingerprint=self.saved_fingerprint,
                      **{f"optimizer_{p.name}": p.optimizer for p in phases})
    self.checkpoint = tf.train.Checkpoint(iterator=self.iterator, **self.state)
    self.manager = tf.train.CheckpointManager(
        self.checkpoint, checkpoint_dir(workdir), max_to_keep=config.train.keep_checkpoints)

  def _build_optimizers(self):
    # Optimizer slots must exist, inside the strategy scope, before a restore or the first step.
    for phase in self.phases:
      if phase.prepare:
        phase.prepare()
      with self.strategy.scope():
        phase.optimizer.build(self.model.trainable_variables)

  def restore(self):
    """Resumes from the newest checkpoint, input position included unless the input changed."""
    latest = self.manager.latest_checkpoint
    if not latest:
      logging.info("no checkpoint in %s: starting at step 0", self.manager.directory)
      return
    changes = input_changes(_saved_fingerprint(latest), self.input_fingerprint)
    if changes and not self.config.train.reset_input_pipeline:
      raise CheckpointError(
          f"checkpoint {latest} was written with another input pipeline ({'; '.join(changes)}), so "
          "its input position does not apply; set train.reset_input_pipeline=True to keep the model, "
          "optimizer and step and start the input afresh, or go back to the old settings")
    if changes:
      _restore(tf.train.Checkpoint(**self.state), latest, partial=True)
      self.saved_fingerprint.assign(json.dumps(self.input_fingerprint, sort_keys=True))
      logging.warning("resuming from %s at step %d with a fresh input pipeline "
                      "(train.reset_input_pipeline; %s)", latest, int(self.step), "; ".join(changes))
    else:
      _restore(self.checkpoint, latest, partial=False)
      logging.info("resuming from %s at step %d", latest, int(self.step))
    self.saved_step = int(self.step)

  def save(self):
    """Saves the newest step (once); a failed write keeps the last good checkpoint and is one line."""
    if self.saved_step == int(self.step):
      return self.manager.latest_checkpoint
    try:
      path = self.manager.save(checkpoint_number=int(self.step))
    except (OSError, tf.errors.OpError) as e:
      message = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
      raise WorkdirError(
          f"cannot write a checkpoint of step {int(self.step)} to {self.manager.directory} ({message}); "
          f"free space or make it writable, then run again: the last good checkpoint "
          f"{self.manager.latest_checkpoint or '(none)'} is intact") from None
    self.saved_step = int(self.step)
    return path

  @property
  def probe(self):
    if self._probe is None:
      self._probe = diagnostics.activation_model(self.model)
    return self._probe


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
  """
  with workdir_lib.locked(workdir):
    workdir_lib.check_writable(workdir, checkpoint_dir(workdir))
    workdir_lib.remove_leftovers(checkpoint_dir(workdir))
    run = _Run(config, workdir, strategy, model, phases, task)
    run.restore()
    workdir_lib.write_run_config(config, workdir)
    start_time = time.time()
    start_step = int(run.step)
    with _SignalFlag(run) as signals, diagnostics.Watchdog(config.train.stall_timeout_s) as watchdog:
      phase_end = 0
      for phase in phases:
        phase_end += phase.num_steps
        if int(run.step) < phase_end:
          _train_phase(run, phase, phase_end, task.loss_fn, signals, watchdog)
      if not run.manager.latest_checkpoint or int(run.step) > start_step:
        run.save()
      if not run.last_eval or run.last_eval.get("step") != int(run.step):
        _evaluate(run)
      signals.check()
    results = _write_metrics(run, time.time() - start_time, int(run.step) - start_step)
    _restore_best(run)
    if run.last_evaluation:
      with workdir_lib.writing(os.path.join(workdir, "eval")):
        run.last_evaluation.write(os.path.join(workdir, "eval"))
    run.train_summaries.close()
    run.eval_summaries.close()
    return results


def _train_phase(run, phase, phase_end, loss_fn, signals, watchdog):
  config = run.config
  if phase.prepare:
    phase.prepare()
  logging.info("phase '%s': steps %d to %d, %d trainable variables", phase.name,
               phase_end - phase.num_steps, phase_end, len(run.model.trainable_variables))
  train_step = make_train_step(run.model, phase.optimizer, loss_fn, run.strategy,
                               config.optimizer.clipnorm, config.train.jit_compile)
  window = _Window(run.model.trainable_variables)
  while int(run.step) < phase_end:
    batch = next(run.iterator, None)
    if batch is None:
      raise DataError(f"the training dataset ended at step {int(run.step)}; it must repeat (.repeat())")
    metrics = {k: float(v) for k, v in train_step(distribute_batch(batch, run.strategy)).items()}
    run.step.assign_add(1)
    step = int(run.step)
    watchdog.beat(step)
    _count_nonfinite(run, metrics, batch, loss_fn)
    window.add(metrics)
    if step % config.train.log_every == 0 or step == phase_end:
      _log_progress(run, phase, window, step, phase.optimizer)
      window = _Window(run.model.trainable_variables)
    if run.train_summaries.scalars_due(step):
      _write_train_summaries(run, step, metrics, phase.optimizer)
    _write_heavy_summaries(run, step, batch)
    evaluate = step % config.train.eval_every == 0
    if evaluate or step % config.train.checkpoint_every == 0:
      run.save()  # before the evaluation, so that a failing or interrupted one loses no step
    if evaluate:
      _evaluate(run)
    signals.check()


def _count_nonfinite(run, metrics, batch, loss_fn):
  if metrics["finite"] > 0:
    run.consecutive_nonfinite = 0
    return
  run.nonfinite_steps.assign_add(1)
  run.consecutive_nonfinite += 1
  step = int(run.step)
  logging.warning("step %d: loss or gradients not finite (loss %s); step skipped, weights unchanged",
                  step, metrics["loss"])
  if run.consecutive_nonfinite >= run.config.train.max_consecutive_nonfinite:
    model = run.model

    def loss_and_grads():
      with tf.GradientTape() as tape:
        loss, _ = loss_fn(model, batch, True)
      return loss, tape.gradient(loss, model.trainable_variables)

    report = diagnostics.locate_nonfinite(model, batch[0], loss_and_grads)
    run.save()
    raise TrainingDiverged(
        f"{run.consecutive_nonfinite} non-finite steps in a row, the last at step {step}: {report}; "
        f"checkpoint of the last finite weights in {run.manager.directory}")


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
  cfg = run.config.summaries
  budget = run.train_summaries
  if run.image_summaries_fn and budget.images_due(step):
    budget.write_images(step, run.image_summaries_fn(run.model, batch))
  if cfg.activation_stats and budget.scalars_due(step):
    stats = diagnostics.activation_statistics(run.probe, batch[0])
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
  run.eval_summaries.write_scalars(step, results)
  run.eval_summaries.flush()
  run.last_eval = dict(results, step=step)
  _keep_best(run, results, step)
  _write_metrics(run, None, None)


def _read_best(workdir, metric):
  """{"metric", "value", "step"} of the best evaluation so far (a resumed run goes on from it), or None."""
  path = os.path.join(best_dir(workdir), "best.json")
  if not metric or not os.path.isfile(path):
    return None
  with open(path) as f:
    best = json.load(f)
  return best if best["metric"] == metric else None


def _keep_best(run, results, step):
  """Writes the model's weights to workdir/best when the evaluation beats the best so far."""
  metric, mode = run.config.train.best_metric, run.config.train.best_mode
  if not metric:
    return
  if metric not in results:
    raise ConfigError(f"train.best_metric='{metric}' is not a metric of the evaluation; choose one of "
                      f"{', '.join(sorted(results))}")
  value = results[metric]
  if run.best is not None and not (value > run.best["value"] if mode == "max" else value < run.best["value"]):
    return
  run.best = {"metric": metric, "value": value, "step": step}
  directory = best_dir(run.workdir)
  staging = directory + ".tmp"
  with workdir_lib.writing(directory):
    shutil.rmtree(staging, ignore_errors=True)
    tf.train.Checkpoint(model=run.model).write(os.path.join(staging, "weights"))
    write_json(os.path.join(staging, "best.json"), run.best)
    shutil.rmtree(directory, ignore_errors=True)
    os.replace(staging, directory)
  logging.info("best %s so far (%.4f) at step %d: weights kept in %s", metric, value, step, directory)


def _restore_best(run):
  """Loads the kept best weights into the model, so that the export saves them."""
  if run.best is None:
    return
  _restore(tf.train.Checkpoint(model=run.model), os.path.join(best_dir(run.workdir), "weights"),
           partial=True)
  logging.info("the model now holds the weights of step %d (best %s %.4f), which the export saves",
               run.best["step"], run.best["metric"], run.best["value"])


def _write_metrics(run, wall_time_s, steps_run):
  payload = {
      "step": int(run.step),
      "nonfinite_steps": int(run.nonfinite_steps),
      "train": run.last_train,
      "eval": run.last_eval,
      "summary_bytes": run.train_summaries.bytes_written() + run.eval_summaries.bytes_written(),
      "summaries_refused": run.train_summaries.refused + run.eval_summaries.refused,
      "data": run.data_report,
      "best": run.best,
  }
  if wall_time_s is not None:
    payload["wall_time_s"] = wall_time_s
    payload["steps_run"] = steps_run
  with workdir_lib.writing(run.workdir):
    write_json(os.path.join(run.workdir, "metrics.json"), payload)
  return payload
