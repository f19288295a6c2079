"""SIGTERM or Ctrl-C at any moment of a run (start-up, TensorFlow's import, tracing, steps,
evaluation, export): exit 0 or 128 + N with one line, never a traceback, and the same command run
again finishes (a run that exits 0 has).

One interpreter drives the runs, two at a time (the machine's two cores); the moments are spread
evenly over the length of an uninterrupted run of the same command.
"""
import concurrent.futures
import os
import signal
import subprocess
import sys
import time

import pytest

from helpers import REPO_ROOT

# (command, SIGTERM moments). The handling is common/'s: segmentation is swept more finely, triplet
# (its extra moment: the initial evaluation) more coarsely. Each moment costs a run and its rerun.
COMMANDS = {
    "segmentation": (["-m", "segmentation.train", "--config=configs/segmentation.py:smoke"], 4),
    "triplet": (["-m", "triplet.train", "--config=configs/triplet.py:smoke"], 3),
}
SIGINT_AT = (0.4,)  # fractions of the run (Ctrl-C takes the same path as SIGTERM: one moment)


def run(argv, workdir, signum=None, delay=None):
  """(exit code, stderr, seconds) of `python argv --workdir=workdir`, sent `signum` after `delay` s."""
  started = time.monotonic()
  process = subprocess.Popen([sys.executable, *argv, f"--workdir={workdir}"], cwd=REPO_ROOT,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                             env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
  try:
    _, stderr = process.communicate(timeout=delay)
  except subprocess.TimeoutExpired:
    process.send_signal(signum)
    _, stderr = process.communicate(timeout=600)
  return process.returncode, stderr, time.monotonic() - started


def interrupt_then_finish(argv, workdir, signum, delay):
  code, stderr, _ = run(argv, workdir, signum, delay)
  problems = []
  if code not in (0, 128 + signum):
    problems.append(f"exit {code}")
  if "Traceback" in stderr:
    problems.append("a traceback")
  last = stderr.strip().splitlines()[-1] if stderr.strip() else ""
  if code and not last.startswith(f"interrupted by {signal.Signals(signum).name} "):
    problems.append(f"last line {last!r}")
  if code:  # exit 0: the run had finished
    again, stderr_again, _ = run(argv, workdir)
    if again != 0 or not os.path.isdir(os.path.join(workdir, "saved_model")):
      problems.append(f"the rerun exits {again}: {stderr_again.strip().splitlines()[-1:]}")
  return delay, code, last, problems


@pytest.mark.slow
@pytest.mark.parametrize("trainer", sorted(COMMANDS))
def test_a_signal_at_any_moment_is_one_line_and_the_run_finishes_after(tmp_path, trainer):
  argv, moments = COMMANDS[trainer]
  with concurrent.futures.ThreadPoolExecutor(2) as pool:  # its length two at a time, as below
    straight = list(pool.map(lambda name: run(argv, tmp_path / name), ["straight0", "straight1"]))
  assert [code for code, _, _ in straight] == [0, 0], straight[0][1][-2000:]
  length = max(seconds for _, _, seconds in straight)
  cases = [(signal.SIGTERM, length * (i + 0.5) / moments) for i in range(moments)]
  cases += [(signal.SIGINT, length * fraction) for fraction in SIGINT_AT]
  with concurrent.futures.ThreadPoolExecutor(2) as pool:
    outcomes = list(pool.map(
        lambda case: interrupt_then_finish(argv, tmp_path / f"cut{case[1]:.2f}", *case), cases))
  report = "\n".join(f"{signal.Signals(signum).name} at {delay:5.2f}s: exit {code} {last!r} "
                     f"{problems or ''}" for (signum, _), (delay, code, last, problems)
                     in zip(cases, outcomes))
  print(report)
  assert not [problems for *_, problems in outcomes if problems], report
  # The moments cover the run: some are interrupted (start-up included), some end it normally.
  assert sum(code != 0 for _, code, _, _ in outcomes) >= moments // 2, report
  assert any("during start-up" in last or "before training started" in last
             for _, _, last, _ in outcomes), report
