"""Signals during a compiled call that holds the main thread for over a minute (the gtx960m preset's
step on a CPU, a first trace, a long input build): Python runs no handler until the call returns, so
the watcher thread of common/runtime/signals.py answers. tests/long_call_run.py is the run: a command
line whose third step sleeps inside its compiled call.
"""
import concurrent.futures
import os
import re
import signal
import subprocess
import sys
import time

import pytest
import tensorflow as tf

import long_call_run
from helpers import REPO_ROOT

SLEEP_S = 62  # the slow step: its compiled call lasts over a minute


def signal_the_long_call(workdir, signums):
  """Starts the run, sends `signums` 5 s into the slow step, 3 s apart; returns (exit code, stderr,
  seconds from the last signal to the exit)."""
  process = subprocess.Popen(
      [sys.executable, os.path.join(REPO_ROOT, "tests", "long_call_run.py"), str(workdir), str(SLEEP_S)],
      cwd=REPO_ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
      env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
  lines = []
  for line in process.stderr:
    lines.append(line)
    if long_call_run.STARTS in line:
      break
  for signum in signums:
    time.sleep(5 if signum is signums[0] else 3)
    process.send_signal(signum)
  sent = time.monotonic()
  lines += process.stderr.readlines()  # until the process ends
  process.wait(timeout=600)
  return process.returncode, "".join(lines), time.monotonic() - sent


def checkpointed_step(workdir):
  reader = tf.train.load_checkpoint(tf.train.latest_checkpoint(os.path.join(workdir, "checkpoints")))
  return int(reader.get_tensor("step/.ATTRIBUTES/VARIABLE_VALUE"))


@pytest.mark.slow
def test_a_long_compiled_call_says_what_a_signal_waits_for_and_a_second_exits_at_once(tmp_path):
  with concurrent.futures.ThreadPoolExecutor(2) as pool:  # the two runs side by side
    twice = pool.submit(signal_the_long_call, tmp_path / "twice", [signal.SIGINT, signal.SIGINT])
    once = pool.submit(signal_the_long_call, tmp_path / "once", [signal.SIGTERM])
    (code, stderr, after), (code_once, stderr_once, _) = twice.result(), once.result()

  # Ctrl-C twice: the first is said, with how long the call has run; the second exits at once.
  assert code == 128 + signal.SIGINT, stderr[-3000:]
  assert after < 5, (after, stderr[-3000:])
  assert re.search(r"SIGINT: the run writes a checkpoint and stops when the compiled call of steps 3 "
                   r"to \d+ returns \(running for \d+ s; over the [\d.]+ s of the previous calls' speed\); a second "
                   r"SIGINT exits at once, writing nothing more", stderr), stderr[-3000:]
  assert stderr.strip().splitlines()[-1] == ("second SIGINT: exiting now; every checkpoint written so "
                                             "far is kept")
  assert "Traceback" not in stderr

  # SIGTERM once: honoured when the call returns, with a checkpoint of its last step; a line every 30 s.
  assert code_once == 128 + signal.SIGTERM, stderr_once[-3000:]
  end = re.search(r"the compiled call of steps 3 to (\d+): running for 30 s", stderr_once)
  assert end, stderr_once[-3000:]
  assert f"the compiled call of steps 3 to {end[1]}: running for 60 s" in stderr_once
  last = stderr_once.strip().splitlines()[-1]
  assert last.startswith(f"interrupted by SIGTERM at step {end[1]}; checkpoint "), last
  assert checkpointed_step(tmp_path / "once") == int(end[1])
  assert "Traceback" not in stderr_once
