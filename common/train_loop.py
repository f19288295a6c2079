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
import contextlib
import dataclasses
import hashlib
import json
import math
import os
import shutil
import signal
import tempfile
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
  # Before any op: MultiWorkerMirroredStrategy configures the collective ops at start-up.
  strategy = hardware.make_strategy(config.distribution.strategy)
  hardware.set_determinism(config.seed, config.deterministic)
  keras.mixed_precision.set_global_policy("mixed_float16" if config.mixed_precision else "float32")
  return strategy


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


def make_train_step(model, optimizer, loss_fn, strategy, clipnorm=0.0, jit_compile=False, stop_flag=None):
  """The compiled step: (distributed batch) -> metrics, updating model and optimizer in place.

  Clipping by global norm happens here, on the gradient summed over replicas:
  Keras' own clipnorm would clip each replica's part separately. Each replica's
  loss is its mean over its part of the batch divided by the number of replicas
  (the loss of the global batch), and its regularization is divided the same
  way, so that the sum over replicas counts it once (tf.nn.scale_regularization_loss).
  With stop_flag (a variable, set by a signal) the metrics hold "stop", its sum
  over all workers, so that every worker stops at the same step.
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
    if stop_flag is not None:
      out["stop"] = context.all_reduce(tf.distribute.ReduceOp.SUM, stop_flag.read_value())
    return out

  @tf.function(jit_compile=jit_compile)
  def train_step(batch):
    per_replica = strategy.run(replica_step, args=(batch,))
    return {name: strategy.reduce(tf.distribute.ReduceOp.MEAN, value, axis=None)
            for name, value in per_replica.items()}

  return train_step


def distribute_batch(batch, strategy):
  """Splits this worker's host batch across its local replicas.

  The loop iterates the plain dataset rather than a distributed one because
  only a plain iterator can be checkpointed (a DistributedIterator cannot).
  """
  if strategy.num_replicas_in_sync == 1:
    return batch
  local = len(strategy.extended.worker_devices)

  def replica_value(context):
    # replica_id_in_sync_group counts the replicas of every worker, each worker's in a row.
    index = context.replica_id_in_sync_group % local
    return tf.nest.map_structure(lambda t: tf.split(t, local)[index], batch)

  return strategy.experimental_distribute_values_from_function(replica_value)


def _batch_sizes(global_batch, strategy, workers):
  """train.batch_size is the global batch: each worker reads its share, each replica a share of that."""
  replicas = strategy.num_replicas_in_sync
  if global_batch % replicas:
    raise ConfigError(f"train.batch_size={global_batch} (the global batch) is not divisible by the "
                      f"{replicas} replicas ({workers} worker(s) x {replicas // workers})")
  sizes = {"strategy": type(strategy).__name__, "workers": workers, "replicas": replicas,
           "global_batch": global_batch, "per_worker_batch": global_batch // workers,
           "per_replica_batch": global_batch // replicas}
  logging.info("batch: global %d (train.batch_size) = %d worker(s) x %d replica(s) each x %d per replica; "
               "each worker reads %d per step (%s)", global_batch, workers, replicas // workers,
               sizes["per_replica_batch"], sizes["per_worker_batch"], sizes["strategy"])
  return sizes


def _worker_input(dataset, sizes, worker):
  """This worker's shard of the global batches: its slice of each one.

  Every worker runs the same seeded pipeline and keeps the worker-th of each
  global batch's `workers` slices (tf.data's DATA auto-shard policy, made
  explicit), so that a run on several workers trains on exactly the global
  batches of a one-worker run, and each worker's iterator stays a plain,
  checkpointable one.
  """
  if sizes["workers"] == 1:
    return dataset
  return (dataset.rebatch(sizes["per_worker_batch"], drop_remainder=True)
          .shard(sizes["workers"], worker)
          .prefetch(1))


def batch_digest(batch):
  """A short digest of a batch's contents, to tell which examples a worker read."""
  digest = hashlib.sha256()
  for tensor in tf.nest.flatten(batch):
    digest.update(tensor.numpy().tobytes())
  return digest.hexdigest()[:16]


def _one():
  return tf.constant(1.0)


def input_positions_dir(workdir, worker):
  """Where worker `worker` of a multi-worker run keeps its input positions, one per checkpoint."""
  return os.path.join(checkpoint_dir(workdir), "input", f"worker{worker}")


@contextlib.contextmanager
def chief_path(path, strategy):
  """`path` on the chief; on other workers a temporary path, removed after the block.

  Every worker takes part in a collective save (checkpoint, SavedModel), but only
  the chief's copy is kept (TensorFlow's multi-worker guide).
  """
  if hardware.is_chief(strategy):
    yield path
    return
  temporary = tempfile.mkdtemp(prefix=f"worker{hardware.worker_index(strategy)}-")
  try:
    yield os.path.join(temporary, os.path.basename(os.path.normpath(path)))
  finally:
    shutil.rmtree(temporary, ignore_errors=True)


def write_json(path, payload):
  """Atomic write, so that a crash never leaves a half-written file (nor do two workers writing the same file)."""
  tmp = f"{path}.tmp{os.getpid()}"
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
      raise TrainingInterrupted(signum, int(self.run.step), self.run.latest_checkpoint())
    logging.warning("received %s: finishing this %s, then %s", name,
                    "evaluation" if self.run.evaluating else "step",
                    "exiting (the checkpoint is written; a second signal exits now)" if saved
                    else "saving a checkpoint")
    self.signum = signum
    if self.run.stop_flag is not None:
      self.run.stop_flag.assign(1.0)  # the next step tells the other workers

  def check(self, stop=None):
    """Raises TrainingInterrupted after a signal, with the newest step saved.

    With several workers the checkpoint is collective: between steps a worker stops only at the
    step whose `stop` (the sum of every worker's flag) says that one of them was signalled, which
    every worker sees at the same step.
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
  """State of one call to `train`: what the loop reads and writes between steps.

  It reads checkpoints from `workdir` and writes into `out`: the workdir on the chief, a
  temporary folder on the other workers (common.train_loop.chief_path).
  """

  def __init__(self, config, workdir, out, strategy, model, phases, task):
    self.config = config
    self.workdir = workdir
    self.out = out
    self.strategy = strategy
    self.chief = out == workdir
    self.workers = hardware.num_workers(strategy)
    self.worker = hardware.worker_index(strategy)
    # Several workers stop together, at a step that tells each of them about a signal.
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
    self.best = _read_best(workdir, config.train.best_metric)
    self.distribution = _batch_sizes(config.train.batch_size, strategy, self.workers)
    self.iterator = iter(_worker_input(task.train_dataset, self.distribution, self.worker))
    self.train_summaries = summaries_lib.SummaryBudget(os.path.join(out, "train"), config.summaries)
    self.eval_summaries = summaries_lib.SummaryBudget(os.path.join(out, "eval"), config.summaries)
    self.last_eval = {}
    self.last_evaluation = None
    self.last_train = {}
    self.consecutive_nonfinite = 0
    self.input_logged = False  # the first batch's digest, once per run on several workers
    self._probe = None
    self._build_optimizers()
    self.state = dict(model=model, step=self.step, nonfinite_steps=self.nonfinite_steps,
                      input_fingerprint=self.saved_fingerprint,
                      **{f"optimizer_{p.name}": p.optimizer for p in phases})
    if self.workers > 1:
      # The collective checkpoint is the chief's; each worker's input position is its own file.
      self.checkpoint = tf.train.Checkpoint(**self.state)
      self.input_checkpoint = tf.train.Checkpoint(iterator=self.iterator)
    else:
      self.checkpoint = tf.train.Checkpoint(iterator=self.iterator, **self.state)
    self.manager = tf.train.CheckpointManager(
        self.checkpoint, checkpoint_dir(out), max_to_keep=config.train.keep_checkpoints if self.chief else 1)

  def latest_checkpoint(self):
    """The newest checkpoint of the run, in the workdir (every worker reads the chief's)."""
    return tf.train.latest_checkpoint(checkpoint_dir(self.workdir))

  def input_path(self, step):
    """Where this worker keeps its input position of `step` (several workers only)."""
    return os.path.join(input_positions_dir(self.workdir, self.worker), f"input-{step}")

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
      logging.info("no checkpoint in %s: starting at step 0", checkpoint_dir(self.workdir))
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
      if self.workers > 1:
        self._restore_input_position()
      logging.info("resuming from %s at step %d", latest, int(self.step))
    self.saved_step = int(self.step)

  def _restore_input_position(self):
    path = self.input_path(int(self.step))
    if not tf.io.gfile.exists(path + ".index"):
      raise CheckpointError(
          f"worker {self.worker} has no input position for step {int(self.step)} ({path}); run with the "
          "same workers and workdir as before, or set train.reset_input_pipeline=True to start the input "
          "afresh")
    _restore(self.input_checkpoint, path, partial=False)
    logging.info("worker %d: input position of step %d restored from %s", self.worker, int(self.step), path)

  def _save_input_position(self):
    """Writes this worker's input position of the newest step, keeping as many as checkpoints.

    Every worker writes before the collective checkpoint (a barrier in between), so a checkpoint
    never exists without the input positions it needs.
    """
    step = int(self.step)
    directory = input_positions_dir(self.workdir, self.worker)
    with workdir_lib.writing(directory):
      self.input_checkpoint.write(self.input_path(step))
      kept = sorted((int(name[len("input-"):].split(".")[0]) for name in os.listdir(directory)
                     if name.startswith("input-") and name.endswith(".index")))
      for old in kept[:-self.config.train.keep_checkpoints]:
        for name in os.listdir(directory):
          if name.startswith(f"input-{old}."):
            os.remove(os.path.join(directory, name))
    self.strategy.reduce(tf.distribute.ReduceOp.SUM, self.strategy.run(_one), axis=None)

  def save(self):
    """Saves the newest step (once); a failed write keeps the last good checkpoint and is one line."""
    if self.saved_step == int(self.step):
      return self.latest_checkpoint()
    if self.workers > 1:
      self._save_input_position()
    try:
      path = self.manager.save(checkpoint_number=int(self.step))
    except (OSError, tf.errors.OpError) as e:
      message = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
      raise WorkdirError(
          f"cannot write a checkpoint of step {int(self.step)} to {self.manager.directory} ({message}); "
          f"free space or make it writable, then run again: the last good checkpoint "
          f"{self.latest_checkpoint() or '(none)'} is intact") from None
    self.saved_step = int(self.step)
    return os.path.join(checkpoint_dir(self.workdir), os.path.basename(path))

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

  With several workers (MultiWorkerMirroredStrategy) only the chief writes the
  workdir; the others write into temporary folders that are removed, except
  their own input positions (checkpoints/input/worker<i>/).
  """
  with chief_path(workdir, strategy) as out, workdir_lib.locked(out):
    workdir_lib.check_writable(out, checkpoint_dir(out))
    workdir_lib.remove_leftovers(checkpoint_dir(out))
    run = _Run(config, workdir, out, strategy, model, phases, task)
    if run.workers > 1:
      workdir_lib.check_writable(input_positions_dir(workdir, run.worker))
      workdir_lib.remove_leftovers(input_positions_dir(workdir, run.worker))
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
    _restore_best(run)
    if run.last_evaluation:
      with workdir_lib.writing(os.path.join(out, "eval")):
        run.last_evaluation.write(os.path.join(out, "eval"))
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
                               config.optimizer.clipnorm, config.train.jit_compile, run.stop_flag)
  window = _Window(run.model.trainable_variables)
  while int(run.step) < phase_end:
    batch = next(run.iterator, None)
    if batch is None:
      raise DataError(f"the training dataset ended at step {int(run.step)}; it must repeat (.repeat())")
    if run.workers > 1 and not run.input_logged:  # the first batch of this run
      run.input_logged = True
      logging.info("worker %d of %d: its input at step %d has digest %s", run.worker, run.workers,
                   int(run.step), batch_digest(batch))
    metrics = {k: float(v) for k, v in train_step(distribute_batch(batch, run.strategy)).items()}
    stop = metrics.pop("stop", None)
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
    signals.check(stop)


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
        f"checkpoint of the last finite weights in {checkpoint_dir(run.workdir)}")


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
  if not run.chief:
    return
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
  warning = eval_loss_warning(results.get("loss"), run.last_train.get("loss"))
  if warning:
    logging.warning("%s", warning)
  run.eval_summaries.write_scalars(step, results)
  run.eval_summaries.flush()
  run.last_eval = dict(results, step=step)
  _keep_best(run, results, step)
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
  directory = best_dir(run.out)
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
  # Another worker keeps its own copy of the best weights if they came in this run.
  directory = best_dir(run.out) if os.path.isdir(best_dir(run.out)) else best_dir(run.workdir)
  _restore(tf.train.Checkpoint(model=run.model), os.path.join(directory, "weights"), partial=True)
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
      "distribution": run.distribution,
  }
  if wall_time_s is not None:
    payload["wall_time_s"] = wall_time_s
    payload["steps_run"] = steps_run
  with workdir_lib.writing(run.out):
    write_json(os.path.join(run.out, "metrics.json"), payload)
  return payload
