"""How several workers end a run together: a collective that fails because another worker failed
or left is one retryable line on every worker (failing_together), and no worker leaves before the
others are through (leave_together), so that none sees another's exit as a crash. Alone, both do
nothing."""
import atexit
import contextlib
import os
import sys
import time

from absl import logging
import tensorflow as tf
from tensorflow.python.eager import context  # the coordination service's key-value store: no public API

from common.contract.errors import ClusterFailed
from common.runtime import hardware
from common.training import distributed


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
    distributed.barrier(strategy)
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
