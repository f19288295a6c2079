"""What every command does before it imports TensorFlow (no TensorFlow import here).

Signals are recorded from the first moment (common/runtime/signals.py), and TensorFlow's C++ log level is
set (unless the user set TF_CPP_MIN_LOG_LEVEL), so that a run's output starts with its own lines.
TensorFlow 2.17 and later print their import banner through absl's C++ logging before it is
initialized, whatever the level says: the import and the CUDA probe run with stderr captured, and
only their lines that the level would have shown are written on.

Keras' import (inside TensorFlow's) imports scikit-learn, when it is installed, for its scikit-learn
wrappers, which no command uses: about 1 s of every command's start-up (scipy's import). The
import hides it; `import sklearn` works again after.
"""
import contextlib
import importlib
import os
import re
import shutil
import sys
import tempfile

from common.runtime import signals

LEVEL = "2"  # C++ INFO and WARNING lines off, errors (a failed CUDA library load) on


def _cpp_line(levels):
  """TensorFlow's C++ log lines of these levels ("IW", "E"), in absl's format and in TSL's older one."""
  return re.compile(rf"([{levels}]\d{{4}} [\d:.]+ +\d+ \S+:\d+\]|\d{{4}}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+: [{levels}] )")


_CPP_INFO_OR_WARNING = re.compile(_cpp_line("IW").pattern + r"|WARNING: All log messages before "
                                  r"absl::InitializeLog\(\)|To enable the following instructions")
_CPP_ERROR = _cpp_line("E")


def start():
  """Call first in an entry module's `if __name__ == "__main__":`, before other imports."""
  signals.install()
  if "TF_CPP_MIN_LOG_LEVEL" in os.environ:
    import_tensorflow()  # the user's level, and every line TensorFlow prints
    return
  os.environ["TF_CPP_MIN_LOG_LEVEL"] = LEVEL
  lines, gpus = [], []
  try:
    with captured_stderr() as lines:
      tf = import_tensorflow()
      # The CUDA probe, here rather than at the first device query, so that its lines are judged here.
      gpus = tf.config.list_physical_devices("GPU")
  finally:
    # Where neither TensorFlow nor a driver (nvidia-smi) sees a GPU, CUDA's errors (a failed
    # cuInit on every such machine) explain nothing; elsewhere they may explain a missing GPU.
    no_gpu = not gpus and shutil.which("nvidia-smi") is None
    for line in lines:
      if not (_CPP_INFO_OR_WARNING.match(line) or no_gpu and _CPP_ERROR.match(line)):
        print(line, file=sys.stderr, flush=True)


def import_tensorflow():
  """TensorFlow, imported with scikit-learn hidden from Keras (a None module fails to import)."""
  hidden = "sklearn" not in sys.modules
  if hidden:
    sys.modules["sklearn"] = None
  try:
    return importlib.import_module("tensorflow")
  finally:
    if hidden:
      del sys.modules["sklearn"]


@contextlib.contextmanager
def captured_stderr():
  """The lines written to file descriptor 2 in the block (C++ code writes there, not to sys.stderr)."""
  lines = []
  sys.stderr.flush()
  saved = os.dup(2)
  with tempfile.TemporaryFile() as capture:
    os.dup2(capture.fileno(), 2)
    try:
      yield lines
    finally:
      sys.stderr.flush()
      os.dup2(saved, 2)
      os.close(saved)
      capture.seek(0)
      lines.extend(capture.read().decode(errors="replace").splitlines())
