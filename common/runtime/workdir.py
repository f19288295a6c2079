"""The workdir of a run: one run at a time, no leftovers of killed runs, and a history of configs.

Every OS error on the workdir becomes a WorkdirError: one line naming the path
and what to do. The lock is <workdir>/LOCK, a kernel lock (filelock: flock on POSIX, LockFileEx on
Windows) that ends with its process, kill -9 included, so a lock left behind by a dead run never
blocks the next one. Its holder is named in <workdir>/LOCK.owner ("pid N on host"), a file apart:
a contender cannot read a locked file on Windows, and filelock 3 empties LOCK at every attempt.
A run that ends removes both, so that a finished workdir holds no LOCK: LOCK goes while it is
still held, and a contender that had opened it before gets the lock on a file with no name, which
filelock (4.3 on) notices and takes the new LOCK instead.
"""
import contextlib
import datetime
import errno
import glob
import json
import os
import shutil
import socket

from absl import logging
import filelock
import psutil

from common.contract import config as config_lib
from common.contract.errors import ClusterFailed
from common.contract.errors import CheckpointError
from common.contract.errors import DataError
from common.contract.errors import WorkdirError

LOCK_FILENAME = "LOCK"
OWNER_FILENAME = "LOCK.owner"
# The asset of a SavedModel that names the trainer (Task.name) whose export it is.
TRAINER_ASSET = "trainer.txt"
CONFIG_HISTORY_DIR = "configs"


def os_error_line(path, error, flag="--workdir"):
  """One line for an OS error on `path` (given by command-line flag `flag`): what happened and what to do."""
  reason = error.strerror or str(error)
  if error.errno == errno.ENOSPC:
    hint = f"the disk is full: free some space or choose another {flag}"
  elif error.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
    hint = f"it is not writable: make it writable or choose another {flag}"
  elif error.errno in (errno.EEXIST, errno.ENOTDIR):
    hint = f"a file stands where a folder is needed: choose another {flag}"
  else:
    hint = f"check the path or choose another {flag}"
  return f"cannot write {path} ({reason}); {hint}"


@contextlib.contextmanager
def writing(path, flag="--workdir"):
  """Turns an OSError raised inside the block into a WorkdirError naming `path`."""
  try:
    yield
  except OSError as e:
    raise WorkdirError(os_error_line(e.filename or path, e, flag)) from None


def check_writable(*directories, flag="--workdir"):
  """Creates each directory and writes a probe file in it, so that a read-only or full folder
  fails before training (or evaluating) rather than at the first write."""
  for directory in directories:
    probe = os.path.join(directory, f".write-test-{os.getpid()}")
    with writing(directory, flag):
      os.makedirs(directory, exist_ok=True)
      try:
        with open(probe, "w") as f:
          f.write("x")
          f.flush()
          os.fsync(f.fileno())
      finally:  # a full disk makes the file, then fails to write it: none is left behind
        with contextlib.suppress(FileNotFoundError):
          os.remove(probe)


@contextlib.contextmanager
def checked_writable(folders):
  """check_writable for each folder of {flag: folder} (None where not given), then the block: a
  block that stops (refused, failed or interrupted) leaves none of the folders check_writable made
  that are still empty, so that a command that wrote nothing leaves nothing it made."""
  given = {flag: folder for flag, folder in folders.items() if folder}
  # Deepest first (a child's path is longer than its parent's), so that a parent is empty when its turn comes.
  made = sorted({path for folder in given.values() for path in _missing(folder)}, key=len, reverse=True)
  try:
    for flag, folder in given.items():
      check_writable(folder, flag=flag)
    yield
  except BaseException:
    for path in made:
      with contextlib.suppress(OSError):  # not empty (an output in it) or not made: kept
        os.rmdir(path)
    raise


def _missing(folder):
  """The folders of `folder`'s path that do not exist (makedirs would make them)."""
  missing, path = [], os.path.abspath(folder)
  while not os.path.lexists(path) and os.path.dirname(path) != path:
    missing.append(path)
    path = os.path.dirname(path)
  return missing


def check_saved_model(path, trainer=None):
  """A --saved_model that is missing, a file or a folder without saved_model.pb is one line; so is,
  given `trainer` (a Task's name), the export of another trainer (its assets/trainer.txt says whose;
  an export without that file, made before it was written, is not checked here)."""
  if not os.path.exists(path):
    raise CheckpointError(f"SavedModel {path} does not exist; train first or pass --saved_model")
  if not os.path.isfile(os.path.join(path, "saved_model.pb")):
    what = "a file" if not os.path.isdir(path) else "a folder without saved_model.pb"
    raise CheckpointError(f"--saved_model {path} is {what}, not a SavedModel; pass the saved_model/ "
                          "folder that a training run exported into its workdir")
  named = os.path.join(path, "assets", TRAINER_ASSET)
  if trainer is None or not os.path.lexists(named):
    return
  try:
    with open(named, encoding="utf-8") as f:
      writer = f.read().strip()
  except (OSError, UnicodeDecodeError) as e:
    raise CheckpointError(f"SavedModel {path} is damaged ({named}: {getattr(e, 'strerror', None) or e}); "
                          "export the run again (scripts/export.py --format=saved_model, or its training "
                          "command)") from None
  if writer != trainer:
    raise CheckpointError(f"SavedModel {path} is the export of the {writer or '(unnamed)'} trainer, not of "
                          f"{trainer}: give the saved_model/ of a {trainer} run, or use {writer}'s commands")


@contextlib.contextmanager
def locked(workdir, retryable=False):
  """Holds <workdir>/LOCK for the block, named in LOCK.owner; a run holding it is one line naming it.

  An owner left in LOCK.owner while the lock is free is a run that ended without releasing it
  (killed): the lock is taken over with a warning. A lock held from another host (a shared folder)
  may outlive a run that host lost, so its refusal says to delete LOCK if that run is gone. With
  `retryable` (a worker of several, which an orchestrator restarts, perhaps on another host while
  its dead predecessor's lock is still held there) the refusal is ClusterFailed: a retry, not an end.
  """
  path = os.path.join(workdir, LOCK_FILENAME)
  owner_path = os.path.join(workdir, OWNER_FILENAME)
  with writing(workdir):
    os.makedirs(workdir, exist_ok=True)
  lock = filelock.FileLock(path)
  try:
    lock.acquire(timeout=0)
  except filelock.Timeout:  # an OSError too, so caught first
    owner = _read_owner(owner_path)
    elsewhere = owner and not owner.endswith(f" on {socket.gethostname()}")
    if retryable:
      raise ClusterFailed(f"{workdir} is locked by {owner or 'an unknown process'} (a run before this "
                          f"one, perhaps this worker's own predecessor whose lock its host has not yet "
                          f"released); exiting with code {ClusterFailed.EXIT_CODE} so that it is tried "
                          "again") from None
    raise WorkdirError(f"{workdir} is in use by another run ({owner or 'unknown process'}); wait for it "
                       f"to end or stop it, or choose another --workdir"
                       f"{f'; if that run is gone, delete {path}' if elsewhere else ''}") from None
  except OSError as e:
    raise WorkdirError(os_error_line(path, e)) from None
  try:
    previous = _read_owner(owner_path)
    if previous:
      logging.warning("taking over the lock of %s in %s: that run ended without releasing it",
                      previous, workdir)
    with writing(owner_path), open(owner_path, "w") as f:
      f.write(f"pid {os.getpid()} on {socket.gethostname()}")
    yield
  finally:
    try:
      with writing(owner_path), contextlib.suppress(FileNotFoundError):
        os.remove(owner_path)
    finally:
      # Windows refuses while the lock is held (filelock removes it after the release there).
      with contextlib.suppress(OSError):
        os.remove(path)
      lock.release()


def _read_owner(path):
  """The owner named in LOCK.owner, or "" when there is none."""
  with contextlib.suppress(OSError), open(path) as f:  # unreadable: the message says "unknown process"
    return f.read().strip()
  return ""


def is_running(pid):
  """Whether process `pid` runs (a zombie, killed and not yet reaped, does not), on every platform."""
  try:
    return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
  except psutil.NoSuchProcess:
    return False
  except psutil.AccessDenied:  # it exists, as another user's
    return True


def remove_leftovers(checkpoint_dir):
  """Removes the temporary folders of checkpoints that a killed run was writing."""
  for leftover in glob.glob(os.path.join(checkpoint_dir, "*_temp*")):
    logging.warning("removing %s, a checkpoint that a killed run did not finish", leftover)
    with writing(leftover):
      if os.path.isdir(leftover):
        shutil.rmtree(leftover)
      else:
        os.remove(leftover)


def write_run_config(config, workdir, files=None):
  """Logs what changed since the last run's config, then writes config.json / config.txt, a copy
  that is never overwritten, configs/<start time>.json, and `files` ({name: text}, a task's
  run_files) into the workdir."""
  current = config.to_dict()
  latest_path = os.path.join(workdir, "config.json")
  if os.path.isfile(latest_path):
    try:
      saved = config_lib.read_saved_config(latest_path, config, "it is rewritten by this run")
    except DataError as e:  # nothing to compare: the checkpoints' own checks still hold
      logging.warning("%s", e)
    else:
      changes = config_lib.diff(saved, config_lib.resolved(config))
      if changes:
        logging.info("config changes since the last run: %s", "; ".join(changes))
  history = os.path.join(workdir, CONFIG_HISTORY_DIR)
  stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%d-%H%M%S-%f")
  with writing(workdir):
    config_lib.write_config(config, workdir)
    os.makedirs(history, exist_ok=True)
    with open(os.path.join(history, f"{stamp}.json"), "w") as f:
      json.dump(current, f, indent=2, sort_keys=True, default=str)
    for name, text in (files or {}).items():
      with open(os.path.join(workdir, name), "w", newline="") as f:
        f.write(text)
      logging.info("wrote %s", os.path.join(workdir, name))


def write_json(path, payload):
  """Atomic write, so that a crash never leaves a half-written file (nor do two workers writing the same file)."""
  tmp = f"{path}.tmp{os.getpid()}"
  with open(tmp, "w") as f:
    json.dump(payload, f, indent=2, sort_keys=True)
  os.replace(tmp, path)
