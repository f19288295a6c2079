"""Timing and host-memory readings shared by the benchmark and its peers.

Standard library only (but psutil for the peak on Windows, which has no
`resource`): the PyTorch peers import it from their own virtual environment.

Host memory is the resident set size (RSS) of the process. On Linux its
high-water mark (VmHWM) can be reset to the current size, so the peak of a
stretch of work is `peak_rss_bytes()` after `reset_peak_rss()`. Allocators
keep freed memory for reuse (TensorFlow's CPU allocator keeps most of a
step's), so the peak of a step is only visible from before the first one.
"""
import statistics
import sys
import time


def read_status_bytes(field):
  """A memory field of /proc/self/status (Linux) in bytes, or None."""
  try:
    with open("/proc/self/status") as f:
      for line in f:
        if line.startswith(field + ":"):
          return int(line.split()[1]) * 1024
  except OSError:
    pass
  return None


def rss_bytes():
  """The current resident set size, or the peak where the current one is not readable."""
  current = read_status_bytes("VmRSS")
  return peak_rss_bytes() if current is None else current


def peak_rss_bytes():
  """The resident set's high-water mark (since the last reset_peak_rss on Linux)."""
  peak = read_status_bytes("VmHWM")
  if peak is not None:
    return peak
  try:
    import resource  # pylint: disable=g-import-not-at-top  POSIX only
  except ImportError:  # Windows: psutil (a dependency of the trainers) reads the peak working set
    import psutil  # pylint: disable=g-import-not-at-top
    return psutil.Process().memory_info().peak_wset
  peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
  return peak if sys.platform == "darwin" else peak * 1024  # bytes on macOS, KiB on Linux


def reset_peak_rss():
  """Resets VmHWM to the current resident size (Linux >= 4.0).

  Returns (the current resident size, whether the reset worked); where it did
  not, peak_rss_bytes() is the process's peak since it started.
  """
  try:
    with open("/proc/self/clear_refs", "w") as f:
      f.write("5")
    resettable = True
  except OSError:
    resettable = False
  return rss_bytes(), resettable


def time_windows(step, warmup_steps, windows, steps_per_window):
  """Seconds per step of each timed window, after warm-up steps."""
  for _ in range(warmup_steps):
    step()
  seconds = []
  for _ in range(windows):
    start = time.perf_counter()
    for _ in range(steps_per_window):
      step()
    seconds.append((time.perf_counter() - start) / steps_per_window)
  return seconds


def median(values):
  return statistics.median(values)
