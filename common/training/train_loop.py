"""The one training loop of every trainer.

It runs a run's phases in compiled calls of steps (the step itself, with loss
scaling, clipping and the non-finite guard, is common.training.train_step) and,
between calls, the progress lines, summaries, checkpoints, evaluations,
metrics.json and SIGTERM/SIGINT. The run's state is in small parts, each
handed to the helpers that use it: the Cluster (common.training.distributed:
workers, chief, where this process writes, the stop flag), RunCheckpoint and
RunRecord (common.training.run_state: what a checkpoint holds, what
metrics.json records) and RunSummaries (common.training.summaries).

Up to `train.steps_per_loop` steps run inside one compiled call, which reads
its batches from the plain, checkpointable input iterator and hands back every
step's metrics at once: the host syncs once per call, not once per step. A call
ends at the next log line, summary, checkpoint, evaluation or phase end, so
that all of those (and signals) fall on call boundaries.

A step whose loss or gradients are not finite changes no weight (train_step);
the loop counts such steps, and stops the run at that step with a report after
`train.max_consecutive_nonfinite` in a row.
"""
import os
import time

from absl import logging
import tensorflow as tf

from common.contract.errors import DataError
from common.contract.errors import TrainingDiverged
from common.runtime import hardware
from common.runtime import run_log
from common.runtime import signals as signals_lib
from common.runtime import workdir as workdir_lib
from common.training import checkpoints as checkpoints_lib
from common.training import diagnostics
from common.training import distributed
from common.training import evaluation as evaluation_lib
from common.training import run_state
from common.training import summaries as summaries_lib
from common.training import train_step as train_step_lib


def make_train_loop(train_step, iterator, cluster, step, max_consecutive):
  """(loop, names): loop(num_steps, consecutive, proposal) runs up to num_steps steps in one compiled
  call; proposal is the length this worker would give the next call (Cluster.agree).

  consecutive is the count of non-finite steps in a row so far; the call stops early at the
  step that brings it to max_consecutive. Returns {"metrics": [steps run, K] (one row a step,
  columns `names`), "consecutive", "last_batch": the host batch of the last step run}, and what the
  workers agreed (Cluster.agree): whether to stop, and the next call's length.
  The next batch is read (and copied to the step's device) while a step runs, except where
  that step may end the call early: the iterator never reads past the last step run, so that
  its checkpointed position is exact. A dataset that ends raises tf.errors.OutOfRangeError.
  """
  strategy = cluster.strategy
  names = []

  def fetch():
    return cluster.read_ahead(next(iterator))

  @tf.function
  def loop(num_steps, consecutive, proposal):
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
    out.update(cluster.agree(proposal))
    return out

  return loop, names


def _format_seconds(seconds):
  seconds = int(seconds)
  return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m" if seconds >= 3600 else f"{seconds // 60}m{seconds % 60:02d}s"


def train(config, workdir, *, strategy, model, phases, task, command_line=None):
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

  command_line: {"preset", "keys"} the trainer's command line chose (common.app.cli), which
  TensorBoard's HParams show; None for a run without one.
  """
  with signals_lib.recording(), distributed.chief_path(workdir, strategy) as out, \
      workdir_lib.locked(out, retryable=hardware.num_workers(strategy) > 1):
    checkpoints = checkpoints_lib.checkpoint_dir(out)
    workdir_lib.check_writable(out, checkpoints)
    workdir_lib.remove_leftovers(checkpoints)
    cluster = distributed.Cluster(strategy, workdir, out, config.train.batch_size)
    evaluate_fn = evaluation_lib.make_evaluate_fn(task, model)
    best = checkpoints_lib.BestWeights(model, cluster, config.train.best_metric, config.train.best_mode)
    run_state.build_optimizers(model, phases, strategy)
    checkpoint = run_state.RunCheckpoint(cluster, model, phases, task.train_dataset,
                                         task.input_fingerprint, config.train.keep_checkpoints)
    summaries = summaries_lib.RunSummaries(out, config.summaries, cluster.chief, model,
                                           task.image_summaries_fn)
    record = run_state.RunRecord(cluster, checkpoint, task.data_report, best, summaries)
    checkpoint.restore(config.train.reset_input_pipeline)
    start_step = int(checkpoint.step)
    signals_lib.check(f"before training started (step {start_step}), no checkpoint written: run "
                      f"the same command again to {'resume' if start_step else 'start'}")
    workdir_lib.write_run_config(config, out, task.run_files)
    if cluster.chief:
      run_log.keep_in(os.path.join(out, "train.log"))
    summaries.write_config(start_step, config)
    total_steps = sum(p.num_steps for p in phases)
    start_time = time.time()
    consecutive = 0  # non-finite steps in a row, across phases
    exit_on_stall = config.train.on_stall == "exit" or (config.train.on_stall == "auto" and cluster.workers > 1)
    with diagnostics.Watchdog(config.train.stall_timeout_s, exit_on_stall) as watchdog:
      phase_end = 0
      for phase in phases:
        phase_end += phase.num_steps
        if int(checkpoint.step) < phase_end:
          consecutive = _train_phase(config, phase, phase_end, total_steps, model, task.loss_fn,
                                     evaluate_fn, watchdog, cluster, checkpoint, record, summaries,
                                     consecutive)
      if not checkpoint.latest() or int(checkpoint.step) > start_step:
        checkpoint.save()
      if record.evaluation_step != int(checkpoint.step):
        watchdog.pause()  # the final evaluation is no stall either
        _evaluate(evaluate_fn, checkpoint, record, summaries)
      _honour_signal(cluster, checkpoint, record)
    results = record.write(time.time() - start_time, int(checkpoint.step) - start_step)
    # The final evaluation's metrics are the last values of eval/'s scalars.
    summaries.write_hparams(config, list(record.evaluation.metrics), task.headline_metrics, command_line,
                            trial_id=workdir)
    summaries.close()
    best.load_into_model()
    record.write_report()
    return results


def _next_boundary(train_cfg, summaries, step, phase_end, max_steps):
  """The step at which the compiled call starting after `step` ends: the nearest of the phase end,
  max_steps on, and the next step due for a log line, summary, checkpoint or evaluation."""
  cadences = [train_cfg.log_every, train_cfg.checkpoint_every, train_cfg.eval_every,
              *summaries.cadences()]
  due = min((step // every + 1) * every for every in cadences)
  return min(phase_end, step + max_steps, due)


def _call_length(train_cfg, seconds_per_step):
  """This worker's length of the next call: at most train.steps_per_loop steps, and no more than
  fill train.seconds_per_loop (so that a signal is honoured soon after it arrives, however slow the
  step); one step while the speed is unknown (the first call, which traces). With several workers
  the smallest of theirs is taken (Cluster.call_length). Where calls end does not change the weights."""
  if not train_cfg.seconds_per_loop:
    return train_cfg.steps_per_loop
  if seconds_per_step is None:
    return 1
  return max(1, min(train_cfg.steps_per_loop, int(train_cfg.seconds_per_loop / seconds_per_step)))


def _train_phase(config, phase, phase_end, total_steps, model, loss_fn, evaluate_fn, watchdog,
                 cluster, checkpoint, record, summaries, consecutive):
  """Trains `phase` up to step phase_end, call by call; returns the count of non-finite steps in
  a row at its end (`consecutive` at its start)."""
  train_cfg = config.train
  if phase.prepare:
    phase.prepare()
  logging.info("phase '%s': steps %d to %d, %d trainable variables, up to %d steps per compiled call",
               phase.name, phase_end - phase.num_steps, phase_end, len(model.trainable_variables),
               train_cfg.steps_per_loop)
  train_step = train_step_lib.make_train_step(model, phase.optimizer, loss_fn, cluster.strategy,
                                              config.optimizer.clipnorm, train_cfg.jit_compile)
  loop, names = make_train_loop(train_step, checkpoint.iterator, cluster, checkpoint.step,
                                train_cfg.max_consecutive_nonfinite)
  sample_weights = diagnostics.make_weight_sampler(model.trainable_variables)
  window = _Window(sample_weights)
  step = int(checkpoint.step)
  seconds_per_step, traced, out = None, False, None
  while step < phase_end:
    first, started = step, time.monotonic()
    cluster.flag_signal()
    proposal = _call_length(train_cfg, seconds_per_step)
    length = cluster.call_length(proposal, out)
    try:
      out = loop(tf.constant(_next_boundary(train_cfg, summaries, step, phase_end, length) - step,
                             tf.int32),
                 tf.constant(consecutive, tf.int32), tf.constant(proposal, tf.int32))
    except tf.errors.OutOfRangeError:
      raise DataError(f"the training dataset ended at step {int(checkpoint.step)}; it must repeat "
                      "(.repeat())") from None
    rows = out["metrics"].numpy()  # the one read of the call's metrics
    step = first + len(rows)
    if traced:  # the first call's time is mostly tracing
      seconds_per_step = (time.monotonic() - started) / len(rows)
    traced = True
    watchdog.beat(step)
    batch = out["last_batch"]
    cluster.log_input_once(step - 1, batch)
    metrics = [dict(zip(names, map(float, row))) for row in rows]
    for values in metrics:
      window.add(values)
    skipped = [offset for offset, values in enumerate(metrics) if not values["finite"]]
    if skipped:
      checkpoint.nonfinite_steps.assign_add(len(skipped))
    for offset in skipped:
      logging.warning("step %d: loss or gradients not finite (loss %s); step skipped, weights "
                      "unchanged", first + offset + 1, metrics[offset]["loss"])
    consecutive = int(out["consecutive"])
    if consecutive >= train_cfg.max_consecutive_nonfinite:
      _stop_diverged(checkpoint, model, batch, loss_fn, consecutive)
    if step % train_cfg.log_every == 0 or step == phase_end:
      _log_progress(phase, window, step, total_steps, record)
      _warn_if_stalled(window, step, train_cfg.stall_update_ratio, phase.optimizer, summaries)
      window = _Window(sample_weights)
    if summaries.train.scalars_due(step):
      summaries.write_train_scalars(step, metrics[-1], _learning_rate(phase.optimizer),
                                    float(checkpoint.nonfinite_steps))
    evaluate = step % train_cfg.eval_every == 0
    # Training images also at each evaluation (the run's last step has one), so that every run has some.
    summaries.write_heavy(step, batch, evaluating=evaluate or step == total_steps)
    if evaluate or step % train_cfg.checkpoint_every == 0:
      checkpoint.save()  # before the evaluation, so that a failing or interrupted one loses no step
    if evaluate:
      watchdog.pause()  # an evaluation is no stall, however long
      _evaluate(evaluate_fn, checkpoint, record, summaries)
      watchdog.beat(step)
    _honour_signal(cluster, checkpoint, record, out)
  return consecutive


def _save_and_report(checkpoint, record):
  """Saves the newest step and writes metrics.json (a signal stops the run); returns the path."""
  path = checkpoint.save()
  record.write()
  return path


def _honour_signal(cluster, checkpoint, record, call=None):
  """Saves the newest step and raises Interrupted if the run is to stop (Cluster.should_stop;
  `call`: the outputs of the compiled call just run)."""
  signum = cluster.should_stop(call)
  if signum is not None:
    raise signals_lib.Interrupted(signum, f"at step {int(checkpoint.step)}; checkpoint "
                                  f"{_save_and_report(checkpoint, record)} written; run the same "
                                  "command again to resume")


def _stop_diverged(checkpoint, model, batch, loss_fn, consecutive):
  """Saves the last finite weights (the non-finite steps changed none) and raises the report."""

  def loss_and_grads():
    with tf.GradientTape() as tape:
      loss, _ = loss_fn(model, batch, True)
    return loss, tape.gradient(loss, model.trainable_variables)

  checkpoint.save()  # first: the report's forward passes in training mode move BatchNorm statistics
  report = diagnostics.locate_nonfinite(model, batch[0], loss_and_grads)
  raise TrainingDiverged(
      f"{consecutive} non-finite steps in a row, the last at step {int(checkpoint.step)}: "
      f"{report}; checkpoint of the last finite weights in {checkpoint.directory}")


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

  def skipped(self):
    """How many of the window's steps were not finite."""
    return self.count - self.sums.get("finite", 0.0)


def _log_progress(phase, window, step, total_steps, record):
  """Logs the progress line of a window and records its mean figures and speed."""
  elapsed = max(time.time() - window.start, 1e-9)
  steps_per_s = window.count / elapsed
  eta = (total_steps - step) / max(steps_per_s, 1e-9)
  skipped = window.skipped()
  logging.info("step %d/%d [%s] loss %.4f  lr %.3g  %.2f steps/s  ETA %s%s", step, total_steps,
               phase.name, window.mean("loss"), _learning_rate(phase.optimizer), steps_per_s,
               _format_seconds(eta), f"  ({skipped:.0f} non-finite steps skipped)" if skipped else "")
  record.keep_window({name: window.mean(name) for name in window.sums if name != "finite"},
                     step, steps_per_s)


def _warn_if_stalled(window, step, stall_update_ratio, optimizer, summaries):
  """Writes how far the weights moved over the window, and warns below train.stall_update_ratio."""
  update = diagnostics.relative_update(window.weights, window.sample_weights())
  summaries.train.write_scalars(step, {"diagnostics/relative_update": update})
  if window.skipped() < window.count and update < stall_update_ratio:
    logging.warning(
        "TRAINING HAS STALLED: the weights moved by %.3g (relative) over the last %d steps; learning "
        "rate %.3g. Check optimizer.learning_rate and the gradients (summaries grad_norm)",
        update, window.count, _learning_rate(optimizer))


def _learning_rate(optimizer):
  inner = getattr(optimizer, "inner_optimizer", optimizer)
  return float(inner.learning_rate)


def _evaluate(evaluate_fn, checkpoint, record, summaries):
  """Evaluates the model at the current step: logs, summarises and records the figures, offers
  them to the best weights, and writes metrics.json."""
  step = int(checkpoint.step)
  started = time.time()
  try:
    evaluation = evaluate_fn()
  except signals_lib.Interrupted as e:  # the step is saved: every evaluation follows a save
    raise signals_lib.Interrupted(e.signum, f"during the evaluation at step {step}; checkpoint "
                                  f"{_save_and_report(checkpoint, record)} written; run the same "
                                  "command again to resume") from None
  results = run_state.figures(evaluation)
  logging.info("eval at step %d (%.1f s): %s", step, time.time() - started,
               "  ".join(f"{k} {v:.4f}" for k, v in sorted(results.items())))
  warning = diagnostics.eval_loss_warning(results.get("loss"), record.train_figures.get("loss"))
  if warning:
    logging.warning("%s", warning)
  summaries.write_eval(step, results, evaluation)
  record.keep_evaluation(evaluation, step)
  record.best.offer(results, step)
  record.write()
