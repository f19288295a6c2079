"""The one training loop of every trainer.

It runs a run's phases in compiled calls of steps (the step itself, with loss
scaling, clipping and the non-finite guard, is common.training.train_step) and,
after each call, the actions that are due (common.training.actions): the
progress line, train scalars, heavy summaries, checkpoint, evaluation, and the
signal check (SIGTERM/SIGINT). Each action carries its cadence, and a call ends
at the nearest step where one is due, so that all of them (and signals) fall on
call boundaries. A run's parts are made once (_start_run): the Cluster
(common.training.distributed: workers, chief, where this process writes, the
stop flag), RunCheckpoint and RunRecord (common.training.run_state: what a
checkpoint holds, what metrics.json records) and RunSummaries
(common.training.summaries).

Up to `train.steps_per_loop` steps run inside one compiled call
(common.training.compiled_calls), which reads its batches from the plain,
checkpointable input iterator and hands back every step's metrics at once: the
host syncs once per call, not once per step.

A step whose loss or gradients are not finite changes no weight (train_step);
the compiled calls count such steps, and stop the run at that step with a
report after `train.max_consecutive_nonfinite` in a row.
"""
import contextlib
import os
import time
from typing import Callable, NamedTuple, Optional

from absl import logging
import keras
import ml_collections

from common.contract.task import Task
from common.runtime import hardware
from common.runtime import run_log
from common.runtime import signals as signals_lib
from common.runtime import workdir as workdir_lib
from common.training import actions as actions_lib
from common.training import averaging
from common.training import calibration
from common.training import checkpoints as checkpoints_lib
from common.training import compiled_calls
from common.training import diagnostics
from common.training import distributed
from common.training import evaluation as evaluation_lib
from common.training import progress as progress_lib
from common.training import run_state
from common.training import summaries as summaries_lib
from common.training import worker_files
from common.training.actions import Action


class _Run(NamedTuple):
  """The parts of one run, made once (_start_run)."""
  config: ml_collections.ConfigDict
  model: keras.Model
  task: Task
  cluster: distributed.Cluster
  checkpoint: run_state.RunCheckpoint
  summaries: summaries_lib.RunSummaries
  record: run_state.RunRecord
  evaluate_fn: Callable
  start_step: int  # where this run (re)started
  total_steps: int
  average: Optional[averaging.WeightAverage]  # train.ema_decay's, None when it is 0
  profile: diagnostics.StepProfile  # train.profile_steps


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
  with signals_lib.recording(), worker_files.chief_path(workdir, strategy) as out, \
      workdir_lib.locked(out, retryable=hardware.num_workers(strategy) > 1):
    cluster = distributed.Cluster(strategy, workdir, out, config.train.batch_size,
                                  config.train.accumulate_steps)
    run = _start_run(config, cluster, model, phases, task)
    started = time.time()
    exit_on_stall = _exit_on_stall(config.train, run.cluster)
    with diagnostics.Watchdog(config.train.stall_timeout_s, exit_on_stall) as watchdog:
      consecutive, phase_end = 0, 0  # non-finite steps in a row, across phases
      for phase in phases:
        phase_end += phase.num_steps
        if int(run.checkpoint.step) < phase_end:
          consecutive = _train_phase(run, phase, phase_end, watchdog, consecutive)
      _end_training(run, watchdog)
    return _close_run(run, time.time() - started, command_line, workdir)


def _start_run(config, cluster, model, phases, task):
  """Makes the run's parts, resumes from the newest checkpoint, and writes the run's config into
  the cluster's `out`."""
  checkpoints = checkpoints_lib.checkpoint_dir(cluster.out)
  workdir_lib.check_writable(cluster.out, checkpoints)
  workdir_lib.remove_leftovers(checkpoints)
  evaluate_fn = evaluation_lib.make_evaluate_fn(task, model)
  best = checkpoints_lib.BestWeights(model, cluster, config.train.best_metric, config.train.best_mode)
  run_state.build_optimizers(model, phases, cluster.strategy)
  average = (averaging.WeightAverage(model, config.train.ema_decay, cluster.strategy)
             if config.train.ema_decay else None)
  calibrated = (calibration.CalibratedStatistics(
      model, task.calibrate, lambda: average.in_model() if average else contextlib.nullcontext(),
      cluster.strategy) if task.calibrate else None)
  checkpoint = run_state.RunCheckpoint(cluster, model, phases, task.train_dataset, task.input_fingerprint,
                                       config.train.keep_checkpoints, average, calibrated)
  summaries = summaries_lib.RunSummaries(cluster.out, config.summaries, cluster.chief, model,
                                         task.image_summaries_fn)
  record = run_state.RunRecord(cluster, checkpoint, task.data_report, best, summaries)
  checkpoint.restore(config.train.reset_input_pipeline)
  start_step = int(checkpoint.step)
  signals_lib.check(f"before training started (step {start_step}), no checkpoint written: run "
                    f"the same command again to {'resume' if start_step else 'start'}")
  workdir_lib.write_run_config(config, cluster.out, task.run_files)
  if cluster.chief:
    run_log.keep_in(os.path.join(cluster.out, "train.log"))
  summaries.write_config(start_step, config)
  return _Run(config, model, task, cluster, checkpoint, summaries, record, evaluate_fn, start_step,
              total_steps=sum(phase.num_steps for phase in phases), average=average,
              profile=diagnostics.StepProfile(config.train.profile_steps, cluster.out))


def _exit_on_stall(train_cfg, cluster):
  """Whether a stall ends the process (train.on_stall; auto: with several workers)."""
  return train_cfg.on_stall == "exit" or (train_cfg.on_stall == "auto" and cluster.workers > 1)


def _train_phase(run, phase, phase_end, watchdog, consecutive):
  """Trains `phase` up to step phase_end: a compiled call, then each action that is due, until the
  phase's end. Returns the count of non-finite steps in a row at its end (`consecutive` at its
  start)."""
  if phase.prepare:
    phase.prepare()
  logging.info("phase '%s': steps %d to %d, %d trainable variables, up to %d steps per compiled call",
               phase.name, phase_end - phase.num_steps, phase_end, len(run.model.trainable_variables),
               run.config.train.steps_per_loop)
  calls = compiled_calls.CompiledCalls(run, phase, consecutive)
  actions = _actions(run, phase, phase_end, watchdog)
  step = calls.step
  while step < phase_end:
    call = calls.run(actions_lib.next_end(actions, step, calls.next_length(), phase_end))
    step = call.step
    watchdog.beat(step)
    actions_lib.run_due(actions, call, run.cluster.chief)
  return calls.consecutive


def _actions(run, phase, phase_end, watchdog):
  """What runs after the phase's compiled calls, in this order, each at its cadence
  (common.training.actions): the engine's, with the trainer's own (Task.make_actions) after the
  summaries, before the checkpoint, the evaluation and the signal check."""
  train_cfg, checkpoint, summaries = run.config.train, run.checkpoint, run.summaries
  progress = progress_lib.Progress(phase, run.model.trainable_variables, run.total_steps, run.record,
                                  summaries, train_cfg.stall_update_ratio)

  def write_train_scalars(call):
    summaries.write_train_scalars(call.step, call.metrics[-1], progress_lib.learning_rate(phase.optimizer),
                                  float(checkpoint.nonfinite_steps))

  def evaluate(call):
    watchdog.pause()  # an evaluation is no stall, however long
    _evaluate(run)
    watchdog.beat(call.step)

  return [
      Action(progress.add),
      Action(progress.log, every=(train_cfg.log_every,), at=(phase_end,)),
      Action(progress.say_if_quiet),
      Action(write_train_scalars, every=(run.config.summaries.scalars_every,)),
      *summaries.heavy_actions(train_cfg.eval_every, run.total_steps),
      *(run.task.make_actions(run.model, summaries) if run.task.make_actions else ()),
      # Before each evaluation too, so that a failing or interrupted one loses no step.
      Action(lambda call: checkpoint.save(), every=(train_cfg.checkpoint_every, train_cfg.eval_every)),
      Action(evaluate, every=(train_cfg.eval_every,)),
      *run.profile.actions(Action),
      Action(lambda call: _honour_signal(run, call.agreed)),
  ]


def _end_training(run, watchdog):
  """Saves the last step and evaluates it, unless that was done, then honours a signal."""
  run.profile.stop()  # a run that ends before the profile's last step
  checkpoint = run.checkpoint
  if not checkpoint.latest() or int(checkpoint.step) > run.start_step:
    checkpoint.save()
  if run.record.evaluation_step != int(checkpoint.step):
    watchdog.pause()  # the final evaluation is no stall either
    _evaluate(run)
  _honour_signal(run)


def _close_run(run, wall_time_s, command_line, workdir):
  """Writes the final metrics.json, HParams and report, leaves the model with the best weights
  (if kept) and returns the final metrics."""
  results = run.record.write(wall_time_s, int(run.checkpoint.step) - run.start_step)
  # The final evaluation's metrics are the last values of eval/'s scalars.
  run.summaries.write_hparams(run.config, list(run.record.evaluation.metrics), run.task.headline_metrics,
                              command_line, workdir)
  run.summaries.close()
  run.record.best.load_into_model()
  if run.record.best.best is None:  # the run ends with, and exports, what it served
    if run.average:
      run.average.load_into_model()
    if run.checkpoint.calibrated:
      run.checkpoint.calibrated.load_into_model()
  run.record.write_report()
  return results


def _save_and_report(run):
  """Saves the newest step and writes metrics.json (a signal stops the run); returns the path."""
  path = run.checkpoint.save()
  run.record.write()
  return path


def _honour_signal(run, agreed=None):
  """Saves the newest step and raises Interrupted if the run is to stop (Cluster.should_stop;
  `agreed`: what the workers agreed in the compiled call just run)."""
  signum = run.cluster.should_stop(agreed)
  if signum is not None:
    raise signals_lib.Interrupted(signum, f"at step {int(run.checkpoint.step)}; checkpoint "
                                  f"{_save_and_report(run)} written; run the same command again "
                                  "to resume")


def _evaluate(run):
  """Evaluates the model at the current step: logs, summarises and records the figures, offers
  them to the best weights, and writes metrics.json."""
  step = int(run.checkpoint.step)
  started = time.time()
  try:
    raw = {}
    if run.average:  # the raw weights, with statistics recalibrated for them (not kept)
      calibrated = run.checkpoint.calibrated
      with calibrated.recalibrated() if calibrated else contextlib.nullcontext():
        raw = run_state.figures(run.evaluate_fn())
    with _served(run):
      evaluation = run.evaluate_fn()
  except signals_lib.Interrupted as e:  # the step is saved: every evaluation follows a save
    raise signals_lib.Interrupted(e.signum, f"during the evaluation at step {step}; checkpoint "
                                  f"{_save_and_report(run)} written; run the same command again "
                                  "to resume") from None
  # The chance levels depend on the labels alone: once, beside the average's metrics.
  evaluation.metrics.update({f"raw/{name}": value for name, value in raw.items()
                             if name not in summaries_lib.chance_runs(raw)})
  results = run_state.figures(evaluation)
  logging.info("eval at step %d (%.1f s): %s", step, time.time() - started,
               "  ".join(f"{k} {v:.4f}" for k, v in sorted(results.items())))
  warning = diagnostics.eval_loss_warning(results.get("loss"), run.record.train_figures.get("loss"))
  if warning:
    logging.warning("%s", warning)
  run.summaries.write_eval(step, results, evaluation)
  run.record.keep_evaluation(evaluation, step)
  with _served(run):
    run.record.best.offer(results, step)
  run.record.write()


def _served(run):
  """The model holds what the run serves inside the block: the weight average (train.ema_decay),
  with the BatchNorm statistics recalibrated for it at this step's save (calibration.py); what is
  evaluated and kept as the best weights. The raw weights' figures are logged beside it as raw/<metric>."""
  if run.checkpoint.calibrated:
    return run.checkpoint.calibrated.served()
  return run.average.in_model() if run.average else contextlib.nullcontext()
