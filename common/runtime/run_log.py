"""A command's log, kept beside its outputs: <workdir>/train.log, <report_dir>/eval.log.

The CLIs hold their log lines in memory from the start (start()); a run appends them, and every
line after, to its log file once it owns its outputs (keep_in(), after the lock and the checks),
so that a refused run writes nothing into a workdir.
"""
import logging
import logging.handlers

from absl import logging as absl_logging

from common.runtime import workdir as workdir_lib

_held = []  # the MemoryHandler of start(), until keep_in()


def start(record_filter):
  """Holds every log line from now on (records that pass record_filter, as on the console)."""
  held = logging.handlers.MemoryHandler(capacity=1 << 30, flushLevel=logging.CRITICAL + 1)
  held.addFilter(record_filter)
  logging.getLogger().addHandler(held)  # absl's and TensorFlow's loggers propagate to the root
  _held[:] = [held]


def keep_in(path):
  """Appends the held lines and every later one to path; nothing when start() did not run (a
  library call, a test) or when the lines already go to a file."""
  if not _held:
    return
  held = _held.pop()
  with workdir_lib.writing(path):
    handler = logging.FileHandler(path, mode="a", encoding="utf-8")
  handler.setFormatter(absl_logging.PythonFormatter())
  for record_filter in held.filters:
    handler.addFilter(record_filter)
  held.setTarget(handler)
  held.flush()
  root = logging.getLogger()
  root.removeHandler(held)
  root.addHandler(handler)
  absl_logging.info("this log is also appended to %s", path)
