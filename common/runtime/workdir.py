"""The workdir of a run: one run at a time, no leftovers of killed runs, and a history of configs.

Every OS error on the workdir becomes a WorkdirError: one line naming the path
and what to do. The lock is <workdir>/LOCK, which holds its owner ("pid N on host"). Where fcntl
exists (POSIX) it is an flock, which the kernel releases when its process dies (kill -9 included), so
a lock left behind by a dead run never blocks the next one. Where it does not (Windows), the file is
created exclusively and removed on release; one left by a killed run is taken over once its owner no
longer runs on this host (psutil tells, on every platform). A lock of another host cannot be checked
that way: it is refused, and the message says to delete the file if that run is gone.
"""
import contextlib
import datetime
import errno
import glob
import json
import os
import re
import shutil
import socket

from absl import logging
import psutil

try:
  import fcntl
except ImportError:  # Windows
  fcntl = None

from common.contract import config as config_lib
from common.contract.errors import CheckpointError
from common.contract.errors import WorkdirError

LOCK_FILENAME = "LOCK"
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
      with open(probe, "w") as f:
        f.write("x")
        f.flush()
        os.fsync(f.fileno())
      os.remove(probe)


def check_saved_model(path):
  """A --saved_model that is missing, a file or a folder without saved_model.pb is one line."""
  if not os.path.exists(path):
    raise CheckpointError(f"SavedModel {path} does not exist; train first or pass --saved_model")
  if not os.path.isfile(os.path.join(path, "saved_model.pb")):
    what = "a file" if not os.path.isdir(path) else "a folder without saved_model.pb"
    raise CheckpointError(f"--saved_model {path} is {what}, not a SavedModel; pass the saved_model/ "
                          "folder that a training run exported into its workdir")


@contextlib.contextmanager
def locked(workdir):
  """Holds <workdir>/LOCK for the block; another run holding it is one line naming its process."""
  path = os.path.join(workdir, LOCK_FILENAME)
  with writing(workdir):
    os.makedirs(workdir, exist_ok=True)
  owner = f"pid {os.getpid()} on {socket.gethostname()}"
  with (_flock if fcntl else _created_lock)(workdir, path, owner):
    yield


def _in_use(workdir, owner, hint=""):
  return WorkdirError(f"{workdir} is in use by another run ({owner or 'unknown process'}); wait for it to "
                      f"end or stop it, or choose another --workdir{hint}")


def _taking_over(workdir, previous):
  logging.warning("taking over the lock of %s in %s: that run ended without releasing it", previous, workdir)


@contextlib.contextmanager
def _flock(workdir, path, owner):
  with writing(path):
    handle = open(path, "a+")
  try:
    try:
      fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
      raise _in_use(workdir, _read_owner(handle)) from None
    previous = _read_owner(handle)
    if previous:
      _taking_over(workdir, previous)
    with writing(path):
      handle.seek(0)
      handle.truncate()
      handle.write(owner)
      handle.flush()
    try:
      yield
    finally:
      handle.seek(0)
      handle.truncate()
  finally:
    handle.close()  # releases the flock


def _read_owner(handle):
  handle.seek(0)
  return handle.read().strip()


@contextlib.contextmanager
def _created_lock(workdir, path, owner):
  """LOCK created exclusively, so two runs cannot both create it. One whose owner is gone (killed) or
  empty (left by a run that used flock) is replaced. Without a kernel lock to arbitrate, two runs
  could both go on if they replace the same stale LOCK at the same moment, or if one reads a LOCK in
  the instant between its creation and its owner's name: races this cannot close."""
  while True:
    try:
      descriptor = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
      break
    except FileExistsError:
      with writing(path), open(path) as f:
        previous = f.read().strip()
      if _owner_running(previous):
        raise _in_use(workdir, previous, f"; if that run is gone, delete {path}") from None
      if previous:
        _taking_over(workdir, previous)
      with writing(path), contextlib.suppress(FileNotFoundError):
        os.remove(path)
    except OSError as e:
      raise WorkdirError(os_error_line(path, e)) from None
  with writing(path), os.fdopen(descriptor, "w") as f:
    f.write(owner)
  try:
    yield
  finally:
    with writing(path), contextlib.suppress(FileNotFoundError):
      os.remove(path)


def _owner_running(owner):
  """Whether the run named by a LOCK's "pid N on host" may still run: unknown hosts count as running."""
  match = re.fullmatch(r"pid (\d+) on (.+)", owner)
  if not match:
    return False
  if match.group(2) != socket.gethostname():
    return True
  return is_running(int(match.group(1)))


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
    with open(latest_path) as f:
      changes = config_diff(json.load(f), json.loads(json.dumps(current, default=str)))
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


def config_diff(old, new, prefix=""):
  """['key: old -> new', ...] between two nested dicts."""
  changes = []
  for key in sorted(set(old) | set(new)):
    a, b = old.get(key), new.get(key)
    if isinstance(a, dict) and isinstance(b, dict):
      changes += config_diff(a, b, f"{prefix}{key}.")
    elif a != b:
      changes.append(f"{prefix}{key}: {a!r} -> {b!r}")
  return changes


def write_json(path, payload):
  """Atomic write, so that a crash never leaves a half-written file (nor do two workers writing the same file)."""
  tmp = f"{path}.tmp{os.getpid()}"
  with open(tmp, "w") as f:
    json.dump(payload, f, indent=2, sort_keys=True)
  os.replace(tmp, path)
