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
import os
import signal
import time

from absl import logging
import tensorflow as tf

from common.training import checkpoints as checkpoints_lib
from common.training import diagnostics
from common.training import distributed
from common.runtime import run_log
from common.training import run_state
from common.runtime import signals as signals_lib
from common.training import summaries as summaries_lib
from common.training import train_step as train_step_lib
from common.runtime import workdir as workdir_lib
from common.contract.errors import DataError
from common.contract.errors import TrainingDiverged


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


def train(config, workdir, *, strategy, model, phases, task):
  """Trains `model` through `phases` and returns the final metrics (also in workdir/metrics.json).

  From the task (common/contract/task.py) the loop takes the training dataset of
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
  with signals_lib.recording(), distributed.chief_path(workdir, strategy) as out, \
      workdir_lib.locked(out):
    checkpoints = checkpoints_lib.checkpoint_dir(out)
    workdir_lib.check_writable(out, checkpoints)
    workdir_lib.remove_leftovers(checkpoints)
    run = run_state.RunState(config, workdir, out, strategy, model, phases, task)
    run.restore()
    start_step = int(run.step)
    signals_lib.check(f"before training started (step {start_step}), no checkpoint written: run "
                      f"the same command again to {'resume' if start_step else 'start'}")
    workdir_lib.write_run_config(config, out, task.run_files)
    # The run's own event file, in the workdir itself: what the run is (config, HParams), beside
    # train/ and eval/.
    run_summaries = summaries_lib.SummaryBudget(out, config.summaries)
    if run.chief:
      run_log.keep_in(os.path.join(out, "train.log"))
      run_summaries.write_config(start_step, config)
      run_summaries.flush()  # on disk even if the run is stopped before it closes the writer
    start_time = time.time()
    with diagnostics.Watchdog(config.train.stall_timeout_s) as watchdog:
      phase_end = 0
      for phase in phases:
        phase_end += phase.num_steps
        if int(run.step) < phase_end:
          _train_phase(run, phase, phase_end, task.loss_fn, watchdog)
      if not run.latest_checkpoint() or int(run.step) > start_step:
        run.save()
      if not run.last_eval or run.last_eval.get("step") != int(run.step):
        _evaluate(run)
      _honour_signal(run)
    results = run.write_metrics(time.time() - start_time, int(run.step) - start_step)
    if run.chief:
      # The final evaluation's metrics are the last values of eval/'s scalars.
      run_summaries.write_hparams(config, run.last_eval.keys() - {"step"}, group="eval")
    run_summaries.close()
    run.best.load_into_model()
    if run.last_evaluation:
      with workdir_lib.writing(os.path.join(out, "eval")):
        run.last_evaluation.write(os.path.join(out, "eval"))
    run.train_summaries.close()
    run.eval_summaries.close()
    return results


def _next_boundary(run, step, phase_end, max_steps):
  """The step at which the compiled call starting after `step` ends: the nearest of the phase end,
  max_steps on, and the next step due for a log line, summary, checkpoint or evaluation."""
  config = run.config
  cadences = [config.train.log_every, config.train.checkpoint_every, config.train.eval_every,
              *run.train_summaries.cadences(with_images=run.image_summaries_fn is not None)]
  due = min((step // every + 1) * every for every in cadences)
  return min(phase_end, step + max_steps, due)


def _call_length(config, seconds_per_step):
  """At most train.steps_per_loop steps, and no more than fill train.seconds_per_loop (so that a
  signal is honoured soon after it arrives, however slow the step); one step while the speed is
  unknown (the first call, which traces). Where calls end does not change the weights."""
  if not config.train.seconds_per_loop:
    return config.train.steps_per_loop
  if seconds_per_step is None:
    return 1
  return max(1, min(config.train.steps_per_loop, int(config.train.seconds_per_loop / seconds_per_step)))


def _train_phase(run, phase, phase_end, loss_fn, watchdog):
  config = run.config
  if phase.prepare:
    phase.prepare()
  logging.info("phase '%s': steps %d to %d, %d trainable variables, up to %d steps per compiled call",
               phase.name, phase_end - phase.num_steps, phase_end, len(run.model.trainable_variables),
               config.train.steps_per_loop)
  train_step = train_step_lib.make_train_step(run.model, phase.optimizer, loss_fn, run.strategy,
                               config.optimizer.clipnorm, config.train.jit_compile)
  loop, names = make_train_loop(train_step, run.iterator, run.strategy, run.step,
                         config.train.max_consecutive_nonfinite, run.stop_flag)
  sample_weights = diagnostics.make_weight_sampler(run.model.trainable_variables)
  window = _Window(sample_weights)
  step = int(run.step)
  seconds_per_step, traced = None, False
  while step < phase_end:
    first, started = step, time.monotonic()
    if run.stop_flag is not None and signals_lib.pending():
      run.stop_flag.assign(1.0)  # this call tells the other workers
    try:
      out = loop(tf.constant(_next_boundary(run, step, phase_end, _call_length(config, seconds_per_step))
                             - step, tf.int32),
                 tf.constant(run.consecutive_nonfinite, tf.int32))
    except tf.errors.OutOfRangeError:
      raise DataError(f"the training dataset ended at step {int(run.step)}; it must repeat "
                      "(.repeat())") from None
    rows = out["metrics"].numpy()  # the one read of the call's metrics
    step = first + len(rows)
    if traced:  # the first call's time is mostly tracing
      seconds_per_step = (time.monotonic() - started) / len(rows)
    traced = True
    watchdog.beat(step)
    batch = out["last_batch"]
    if run.workers > 1 and not run.input_logged:  # the first call of this run
      run.input_logged = True
      logging.info("worker %d of %d: its input at step %d has digest %s", run.worker, run.workers,
                   step - 1, distributed.batch_digest(batch))
    metrics = [dict(zip(names, map(float, row))) for row in rows]
    for values in metrics:
      window.add(values)
    skipped = [offset for offset, values in enumerate(metrics) if not values["finite"]]
    if skipped:
      run.nonfinite_steps.assign_add(len(skipped))
    for offset in skipped:
      logging.warning("step %d: loss or gradients not finite (loss %s); step skipped, weights "
                      "unchanged", first + offset + 1, metrics[offset]["loss"])
    run.consecutive_nonfinite = int(out["consecutive"])
    if run.consecutive_nonfinite >= config.train.max_consecutive_nonfinite:
      _stop_diverged(run, batch, loss_fn)
    last = metrics[-1]
    if step % config.train.log_every == 0 or step == phase_end:
      _log_progress(run, phase, window, step, phase.optimizer)
      window = _Window(sample_weights)
    if run.train_summaries.scalars_due(step):
      _write_train_summaries(run, step, last, phase.optimizer)
    evaluate = step % config.train.eval_every == 0
    # Training images also at each evaluation (the run's last step has one), so that every run has some.
    _write_heavy_summaries(run, step, batch, evaluating=evaluate or step == run.total_steps)
    if evaluate or step % config.train.checkpoint_every == 0:
      run.save()  # before the evaluation, so that a failing or interrupted one loses no step
    if evaluate:
      _evaluate(run)
    _honour_signal(run, float(out["stop"]) if "stop" in out else None)


def _honour_signal(run, stop=None):
  """Saves the newest step and raises Interrupted if this worker was signalled.

  After a compiled call of several workers, `stop` (the sum of every worker's flag, the same on
  all of them after the same call) says whether any was: they save and stop together.
  """
  signum = signals_lib.pending()
  if stop is not None:
    if not stop:
      return
    signum = signum or signal.SIGTERM
  if signum is not None:
    raise signals_lib.Interrupted(signum, f"at step {int(run.step)}; checkpoint "
                                  f"{run.save_and_report()} written; run the same command again "
                                  "to resume")


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

  def __init__(self, sample_weights):
    self.sums = {}
    self.count = 0
    self.start = time.time()
    self.weights = sample_weights()
    self.sample_weights = sample_weights

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
  update = diagnostics.relative_update(window.weights, window.sample_weights())
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


def _write_heavy_summaries(run, step, batch, evaluating):
  """Images, histograms and activation statistics: each only at its cadence (images also when
  evaluating), never in the step."""
  if not run.chief:
    return
  cfg = run.config.summaries
  budget = run.train_summaries
  if run.image_summaries_fn and budget.images_due(step, evaluating):
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
  try:
    run.last_evaluation = run.evaluate_fn()
  except signals_lib.Interrupted as e:  # the step is saved: every evaluation follows a save
    raise signals_lib.Interrupted(e.signum, f"during the evaluation at step {step}; checkpoint "
                                  f"{run.save_and_report()} written; run the same command again "
                                  "to resume") from None
  results = {name: float(value) for name, value in run.last_evaluation.metrics.items()}
  logging.info("eval at step %d (%.1f s): %s", step, time.time() - started,
               "  ".join(f"{k} {v:.4f}" for k, v in sorted(results.items())))
  warning = diagnostics.eval_loss_warning(results.get("loss"), run.last_train.get("loss"))
  if warning:
    logging.warning("%s", warning)
  run.eval_summaries.write_scalars(step, results)
  if run.chief and run.last_evaluation.summary_images:
    run.eval_summaries.write_images(step, run.last_evaluation.summary_images())
  if run.chief and run.last_evaluation.embeddings:
    run.eval_summaries.write_embeddings(step, *run.last_evaluation.embeddings())
  run.eval_summaries.flush()
  run.last_eval = dict(results, step=step)
  run.best.offer(results, step)
  run.write_metrics()
