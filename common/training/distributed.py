"""What several replicas and workers add to a run: batch sizes, input slices, one writer, one stop.

train.batch_size is the global batch. Every worker runs the same seeded input
pipeline and keeps its slice of each global batch, so that its iterator stays
a plain, checkpointable one (a DistributedIterator cannot be saved); each
worker keeps its own input positions beside the chief's collective checkpoint.
Cluster decides, once a run, what one or several workers do differently. Where
each worker writes is common.training.worker_files; how the workers end a run
together, common.training.worker_exits.
"""
import contextlib
import hashlib
import shutil
import signal

from absl import logging
import tensorflow as tf

from common.contract.errors import ConfigError
from common.runtime import hardware
from common.runtime import signals
from common.training import calibration


class Cluster:
  """This process's part in a run, decided once: how many workers, which one this is, whether it
  is the chief, where it writes, the batch sizes, and the flag by which several workers stop
  together. The loop and the run's state ask it instead of testing worker counts and flags
  themselves.

  It reads checkpoints from `workdir` (every worker resumes from the chief's) and writes into
  `out`: the workdir on the chief, a temporary folder on the other workers (chief_path).
  """

  def __init__(self, strategy, workdir, out, global_batch, accumulate_steps=1):
    self.strategy = strategy
    self.workdir = workdir
    self.out = out
    self.chief = out == workdir
    self.workers = hardware.num_workers(strategy)
    self.index = hardware.worker_index(strategy)
    self.batch_sizes = batch_sizes(global_batch, strategy, self.workers, accumulate_steps)
    # Several workers stop together, after a call that tells each of them about a signal.
    self._stop_flag = tf.Variable(0.0, trainable=False, name="stop_flag") if self.workers > 1 else None
    self._input_to_log = self.workers > 1  # a batch's digest, once a run, tells what each worker read
    # With one replica a batch read ahead is copied to its device at once; with several,
    # distribute_batch places each replica's part.
    self._ahead_device = step_devices(strategy)[0] if strategy.num_replicas_in_sync == 1 else None
    # Collectives are compiled: called eagerly they are slow, and TensorFlow warns about it.
    self.barrier = tf.function(lambda: _barrier(strategy))

  def input_fingerprint(self, fingerprint):
    """The task's input fingerprint; with several workers also their number (each worker's input
    position is a slice of the one-worker stream)."""
    return dict(fingerprint, workers=self.workers) if self.workers > 1 else dict(fingerprint)

  def shard(self, dataset):
    """This worker's shard of the training dataset (worker_input)."""
    return worker_input(dataset, self.batch_sizes, self.index)

  def checkpoints_kept(self, keep):
    """How many checkpoints this process keeps: train.keep_checkpoints on the chief, one elsewhere
    (its copy is removed after each save)."""
    return keep if self.chief else 1

  def remove_copy(self, directory):
    """Removes this process's copy of a collective save if it is not the chief (remove_copy)."""
    remove_copy(directory, self.chief)

  def read_ahead(self, batch):
    """A batch read ahead of its step (inside the compiled call): on its device with one replica."""
    return batch if self._ahead_device is None else to_device(batch, self._ahead_device)

  def flag_signal(self):
    """Before a compiled call of several workers: raises this worker's flag if it was signalled,
    so that the call tells every worker."""
    if self._stop_flag is not None and signals.pending():
      self._stop_flag.assign(1.0)

  def agree(self, proposal):
    """Inside the compiled call: with several workers, {"stop": the sum of every worker's signal
    flag, "next_length": the smallest of every worker's proposed length of the next call}, the
    same numbers on all of them after the same call (one all-gather); {} alone. Every worker then
    runs calls of the same length, so their collectives line up whatever each one's speed."""
    if self._stop_flag is None:
      return {}
    votes = self.strategy.gather(self.strategy.run(
        lambda: tf.stack([self._stop_flag.read_value(), tf.cast(proposal, tf.float32)])[None]), axis=0)
    return {"stop": tf.reduce_sum(votes[:, 0]), "next_length": tf.cast(tf.reduce_min(votes[:, 1]), tf.int32)}

  def call_length(self, proposal, call=None):
    """The number of steps of the next compiled call: alone, this worker's `proposal`; with several
    workers, what the last call agreed (`call`, its outputs; agree), and one step before any call."""
    if self._stop_flag is None:
      return proposal
    return 1 if call is None else int(call["next_length"])

  def should_stop(self, call=None):
    """The signal to stop the run at, or None: this process's own, except after a compiled call
    of several workers (`call`, its outputs), where it is any worker's, so that they stop together."""
    signum = signals.pending()
    if call is None or "stop" not in call:
      return signum
    return (signum or signal.SIGTERM) if float(call["stop"]) else None

  def make_statistics_mean(self, model):
    """mean(): sets the moving mean and variance of each BatchNorm layer of `model` to their mean
    over the replicas (nothing with one replica), so that every worker evaluates, checkpoints and
    exports the same model. Each replica updates them from its own part of the batch (unless
    model.sync_batch_norm), and a moving average is linear: the mean of the replicas' moving means
    is the moving average of the global batches' means (the variance: of the replicas' variances)."""
    variables = calibration.batch_norm_statistics(model)
    if self.strategy.num_replicas_in_sync == 1 or not variables:
      return lambda: None

    def replica_mean():
      context = tf.distribute.get_replica_context()
      for variable, mean in zip(variables, context.all_reduce(tf.distribute.ReduceOp.MEAN,
                                                              [tf.identity(v) for v in variables])):
        variable.assign(mean)

    return tf.function(lambda: self.strategy.run(replica_mean))

  def log_input_once(self, step, batch):
    """With several workers, logs the digest of this worker's batch of `step`, once a run."""
    if self._input_to_log:
      self._input_to_log = False
      logging.info("worker %d of %d: its input at step %d has digest %s", self.index, self.workers,
                   step, batch_digest(batch))


def batch_sizes(global_batch, strategy, workers, accumulate_steps=1):
  """train.batch_size is the global batch: each worker reads its share, each replica a share of that,
  which it computes in train.accumulate_steps micro-batches."""
  replicas = strategy.num_replicas_in_sync
  if global_batch % replicas:
    raise ConfigError(f"train.batch_size={global_batch} (the global batch) is not divisible by the "
                      f"{replicas} replicas ({workers} worker(s) x {replicas // workers})")
  if (global_batch // replicas) % accumulate_steps:
    raise ConfigError(f"train.accumulate_steps={accumulate_steps} does not divide the "
                      f"{global_batch // replicas} examples per replica (train.batch_size={global_batch} over {replicas} replica(s))")
  sizes = {"strategy": type(strategy).__name__, "workers": workers, "replicas": replicas,
           "global_batch": global_batch, "per_worker_batch": global_batch // workers,
           "per_replica_batch": global_batch // replicas, "accumulate_steps": accumulate_steps}
  logging.info("batch: global %d (train.batch_size) = %d worker(s) x %d replica(s) each x %d per replica%s; "
               "each worker reads %d per step (%s)", global_batch, workers, replicas // workers,
               sizes["per_replica_batch"],
               f" in {accumulate_steps} micro-batches of {global_batch // replicas // accumulate_steps}"
               if accumulate_steps > 1 else "", sizes["per_worker_batch"], sizes["strategy"])
  return sizes


def worker_input(dataset, sizes, worker):
  """This worker's shard of the global batches: its slice of each one.

  Every worker keeps the worker-th of each global batch's `workers` slices
  (tf.data's DATA auto-shard policy, made explicit), so that several workers
  train on exactly the global batches of a one-worker run.
  """
  if sizes["workers"] == 1:
    return dataset
  return (dataset.rebatch(sizes["per_worker_batch"], drop_remainder=True)
          .shard(sizes["workers"], worker)
          .prefetch(1))


def step_devices(strategy):
  """The devices of this worker's replicas, in replica order."""
  try:
    return tuple(strategy.extended.worker_devices)
  except RuntimeError:  # the default strategy has no device list: its ops go to the first GPU, if any
    gpus = tf.config.list_logical_devices("GPU")
    return (gpus[0].name if gpus else tf.config.list_logical_devices("CPU")[0].name,)


def to_device(batch, device):
  """A copy of `batch` on `device`: placed early, the copy overlaps the step before (no-op on the host)."""
  with tf.device(device):
    return tf.nest.map_structure(tf.identity, batch)


def distribute_batch(batch, strategy):
  """Splits this worker's host batch across its local replicas, each part on its replica's device."""
  if strategy.num_replicas_in_sync == 1:
    return batch
  devices = step_devices(strategy)

  def replica_value(context):
    # replica_id_in_sync_group counts the replicas of every worker, each worker's in a row.
    index = context.replica_id_in_sync_group % len(devices)
    return to_device(tf.nest.map_structure(lambda t: tf.split(t, len(devices))[index], batch),
                     devices[index])

  return strategy.experimental_distribute_values_from_function(replica_value)


def batch_digest(batch):
  """A short digest of a batch's contents, to tell which examples a worker read."""
  digest = hashlib.sha256()
  for tensor in tf.nest.flatten(batch):
    digest.update(tensor.numpy().tobytes())
  return digest.hexdigest()[:16]


def _barrier(strategy):
  """Returns once every worker has reached it (a collective sum of ones); Cluster.barrier compiles it."""
  strategy.reduce(tf.distribute.ReduceOp.SUM, strategy.run(lambda: tf.constant(1.0)), axis=None)


def barrier(strategy):
  """With several workers, returns once every worker has called it (compiled: eager collectives are
  slow, and TensorFlow warns); at once alone."""
  if hardware.num_workers(strategy) > 1:
    tf.function(lambda: _barrier(strategy))()


@contextlib.contextmanager
def chief_first(strategy):
  """The block runs on the chief, then on the other workers: what it writes once a workdir
  (synthetic data, baselines) is written by the chief alone, and the others find it."""
  if hardware.is_chief(strategy):
    yield
    barrier(strategy)
  else:
    barrier(strategy)
    yield


def remove_copy(directory, chief):
  """Removes a non-chief worker's copy of a collective save right after the save (TensorFlow's
  multi-worker guide): only the chief's is kept, and a worker's copies never pile up in TMPDIR."""
  if not chief:
    shutil.rmtree(directory, ignore_errors=True)
