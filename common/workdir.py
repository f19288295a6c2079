"""The workdir of a run: one run at a time, no leftovers of killed runs, and a history of configs.

Every OS error on the workdir becomes a WorkdirError: one line naming the path
and what to do. The lock is an flock on <workdir>/LOCK, which the kernel
releases when its process dies (kill -9 included), so a lock left behind by a
dead run never blocks the next one.
"""
import contextlib
import datetime
import errno
import fcntl
import glob
import json
import os
import shutil
import socket

from absl import logging

from common import config as config_lib
from common.errors import CheckpointError
from common.errors import WorkdirError

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
    handle = open(path, "a+")
  try:
    try:
      fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
      raise WorkdirError(f"{workdir} is in use by another run ({_read_owner(handle) or 'unknown process'}); "
                         "wait for it to end or stop it, or choose another --workdir") from None
    previous = _read_owner(handle)
    if previous:
      logging.warning("taking over the lock of %s in %s: that run ended without releasing it",
                      previous, workdir)
    with writing(path):
      handle.seek(0)
      handle.truncate()
      handle.write(f"pid {os.getpid()} on {socket.gethostname()}")
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
