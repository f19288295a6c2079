"""Where each worker writes: the chief into the workdir, the others into temporary folders removed
after the run (chief_path; a killed worker's removed at the next start), and each worker's own input
positions beside the chief's collective checkpoints (InputPositions)."""
import contextlib
import glob
import hashlib
import os
import re
import shutil
import tempfile

from absl import logging
import tensorflow as tf

from common.contract.errors import CheckpointError
from common.runtime import hardware
from common.runtime import workdir as workdir_lib


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
