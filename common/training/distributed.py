"""What several replicas and workers add to a run: batch sizes, input slices, one writer, one stop.

train.batch_size is the global batch. Every worker runs the same seeded input
pipeline and keeps its slice of each global batch, so that its iterator stays
a plain, checkpointable one (a DistributedIterator cannot be saved); each
worker keeps its own input positions beside the chief's collective checkpoint.
Cluster decides, once a run, what one or several workers do differently.
"""
import atexit
import contextlib
import glob
import hashlib
import os
import re
import shutil
import signal
import sys
import tempfile
import time

from absl import logging
import tensorflow as tf
from tensorflow.python.eager import context  # the coordination service's key-value store: no public API

from common.contract.errors import CheckpointError
from common.contract.errors import ClusterFailed
from common.contract.errors import ConfigError
from common.runtime import hardware
from common.runtime import signals
from common.runtime import workdir as workdir_lib
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


# What a collective raises when a worker it waits for failed or left (TensorFlow's coordination
# service tells the others "The tasks have crashed").
_PEER_ERRORS = (tf.errors.UnavailableError, tf.errors.AbortedError, tf.errors.CancelledError,
                tf.errors.DeadlineExceededError)


@contextlib.contextmanager
def failing_together(strategy):
  """With several workers, a collective that fails because another worker failed or left ends the
  run in one line with ClusterFailed's retryable exit code, instead of a traceback; then every
  worker leaves together (a last barrier), so that none sees another's exit as a crash."""
  if hardware.num_workers(strategy) == 1:
    yield
    return
  try:
    yield
    barrier(strategy)
    _leave_after_the_chief(strategy)
  except _PEER_ERRORS as e:
    raise ClusterFailed(
        f"worker {hardware.worker_index(strategy)} of {hardware.num_workers(strategy)}: another "
        f"worker failed or left (a collective operation ended with {type(e).__name__}); exiting with "
        f"code {ClusterFailed.EXIT_CODE} so that the run is restarted: the same command resumes from "
        "the last checkpoint") from None


# The key by which the chief says it is through the last barrier (TensorFlow's coordination service
# lives as long as the cluster's processes: a restarted run has a fresh one).
_CHIEF_THROUGH = "reference_trainers/chief_through_last_barrier"


def _leave_after_the_chief(strategy):
  """Holds the other workers until the chief is through the last barrier: a collective's receiver
  pulls each chunk from its sender, so a worker that left as soon as its own part was done could
  leave the chief waiting for one ("Socket closed"). The chief says so in the key-value store of
  TensorFlow's coordination service, which it hosts; a chief that never does is a peer error."""
  coordination = context.context()
  if hardware.is_chief(strategy):
    coordination.set_config_key_value(_CHIEF_THROUGH, "1")
  else:
    coordination.get_config_key_value(_CHIEF_THROUGH, timeout_in_ms=120_000)


_LEAVING = "reference_trainers/leaving/worker"
# After the others' word, before the chief's exit: the time each of them has left between its word
# and its own exit (microseconds, unless the machine stalls it).
_GRACE_S = 1.0


def leave_together(strategy):
  """With several workers, ends this process once its outputs are written (nothing alone): the other
  workers first, the chief, which hosts TensorFlow's coordination service, right after them.

  Whichever process outlives the others by TensorFlow's heartbeat timeout (10 s) logs their exit as
  a crash ("BaseCollectiveExecutor::StartAbort UNAVAILABLE ... The tasks have crashed"), and a
  worker's interpreter teardown alone can take longer under load. So no worker tears TensorFlow down:
  each runs its exit handlers (AutoGraph's temporary files, the logs), says in the key-value store that
  it leaves and exits at once; the chief waits for every word, then exits as promptly (exit code 0:
  every output is written, a later signal finds nothing to stop)."""
  workers = hardware.num_workers(strategy)
  if workers == 1:
    return
  atexit._run_exitfuncs()  # pylint: disable=protected-access
  sys.stdout.flush()
  sys.stderr.flush()
  coordination = context.context()
  if hardware.is_chief(strategy):
    try:
      for index in range(1, workers):
        coordination.get_config_key_value(f"{_LEAVING}{index}", timeout_in_ms=60_000)
      time.sleep(_GRACE_S)
    except tf.errors.OpError as e:  # a worker that failed after the run's outputs: nothing left to save
      logging.warning("not every worker said it leaves: %s", str(e).splitlines()[0])
  else:
    coordination.set_config_key_value(f"{_LEAVING}{hardware.worker_index(strategy)}", "1")
  os._exit(0)  # pylint: disable=protected-access


@contextlib.contextmanager
def chief_path(path, strategy):
  """`path` on the chief; on other workers a temporary path, removed after the block.

  Every worker takes part in a collective save (checkpoint, SavedModel), but only
  the chief's copy is kept (TensorFlow's multi-worker guide). The temporary
  folders are named after `path` and their process, so that those of killed
  workers of this run are recognised and removed at the next start.
  """
  if hardware.is_chief(strategy):
    yield path
    return
  prefix = temporary_prefix(path)
  remove_killed_workers_folders(prefix)
  temporary = tempfile.mkdtemp(prefix=f"{prefix}worker{hardware.worker_index(strategy)}-pid{os.getpid()}-")
  try:
    yield os.path.join(temporary, os.path.basename(os.path.normpath(path)))
  finally:
    shutil.rmtree(temporary, ignore_errors=True)


def remove_copy(directory, chief):
  """Removes a non-chief worker's copy of a collective save right after the save (TensorFlow's
  multi-worker guide): only the chief's is kept, and a worker's copies never pile up in TMPDIR."""
  if not chief:
    shutil.rmtree(directory, ignore_errors=True)


def temporary_prefix(path):
  """The start of the names of the non-chief workers' temporary folders for `path`, under TMPDIR:
  its name and a digest of its absolute path, which tell this run's folders from other runs'."""
  absolute = os.path.abspath(path)
  digest = hashlib.sha1(absolute.encode()).hexdigest()[:10]
  return f"nonchief-{os.path.basename(absolute)}-{digest}-"


def remove_killed_workers_folders(prefix):
  """Removes the temporary folders of `prefix` whose process has died (kill -9 leaves them)."""
  for folder in glob.glob(os.path.join(tempfile.gettempdir(), glob.escape(prefix) + "worker*-pid*-*")):
    owner = re.match(r"worker\d+-pid(\d+)-", os.path.basename(folder)[len(prefix):])
    if owner and not workdir_lib.is_running(int(owner.group(1))):
      logging.warning("removing %s, the temporary folder of a killed worker", folder)
      shutil.rmtree(folder, ignore_errors=True)


class InputPositions:
  """Where this worker's input iterator is saved. Alone, in the run's checkpoint (`in_checkpoint`,
  the objects it adds to that checkpoint); with several workers, as `input-<step>` in a folder of
  its own beside each collective checkpoint (the chief's), a CheckpointManager keeping as many
  positions as checkpoints are kept.
  """

  def __init__(self, iterator, checkpoints, cluster, keep):
    self._cluster = cluster
    self._manager = None
    if cluster.workers == 1:
      self.in_checkpoint = {"iterator": iterator}
      return
    self.in_checkpoint = {}
    self.directory = os.path.join(checkpoints, "input", f"worker{cluster.index}")
    workdir_lib.check_writable(self.directory)
    workdir_lib.remove_leftovers(self.directory)
    self._checkpoint = tf.train.Checkpoint(iterator=iterator)
    self._manager = tf.train.CheckpointManager(self._checkpoint, self.directory, max_to_keep=keep,
                                               checkpoint_name="input")

  def save(self, step):
    """With several workers, writes the position of `step`; every worker writes before the
    collective checkpoint (the barrier), so a checkpoint never exists without the positions it needs."""
    if self._manager is None:
      return
    with workdir_lib.writing(self.directory):
      self._manager.save(checkpoint_number=step)
    self._cluster.barrier()

  def restore(self, step, restore_fn):
    """With several workers, restores the position of `step` (restore_fn: checkpoints.restore)."""
    if self._manager is None:
      return
    path = os.path.join(self.directory, f"input-{step}")
    worker = self._cluster.index
    if not tf.io.gfile.exists(path + ".index"):
      raise CheckpointError(
          f"worker {worker} has no input position for step {step} ({path}); run with the same "
          "workers and workdir as before, or set train.reset_input_pipeline=True to start the input "
          "afresh")
    restore_fn(self._checkpoint, path, partial=False)
    logging.info("worker %d: input position of step %d restored from %s", worker, step, path)
