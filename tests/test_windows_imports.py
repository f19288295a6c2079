"""Windows has no fcntl: a trainer runs with it hidden, and its workdir lock still refuses a second run
and takes over one left by a killed run (filelock then falls back to a lock file whose dead owner it
detects; on Windows it takes a kernel lock). Nor has it SIGKILL: the launcher kills workers through
Popen.kill."""
import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from common.app.trainers import find_trainers
from scripts import launch_workers

from tests.helpers import REPO_ROOT
from tests.helpers import run_python

# Imports every module of the packages with fcntl hidden, as on Windows, then runs
# segmentation.train as `python -m` would with the arguments given.
RUNNER = f"""
import pkgutil, runpy, sys
sys.modules["fcntl"] = None
for package in {("common", "configs", *(trainer.package for trainer in find_trainers(REPO_ROOT)))!r}:
  for module in pkgutil.walk_packages([package], package + "."):
    if module.name != "segmentation.train":
      __import__(module.name)
sys.argv = ["segmentation.train"] + sys.argv[1:]
runpy.run_module("segmentation.train", run_name="__main__", alter_sys=True)
"""


# Takes the workdir lock with fcntl hidden and exits without releasing it, as a killed run would.
KILLED_RUN = """
import os, sys
sys.modules["fcntl"] = None
from common.runtime import workdir
held = workdir.locked(sys.argv[1])  # kept, so that no garbage collection releases it
held.__enter__()
os._exit(0)
"""


@pytest.mark.slow
def test_smoke_run_without_fcntl_trains_exports_and_keeps_the_lock(tmp_path):
  workdir = tmp_path / "run"
  killed = subprocess.Popen([sys.executable, "-c", KILLED_RUN, str(workdir)], cwd=REPO_ROOT)
  assert killed.wait(timeout=300) == 0
  assert (workdir / "LOCK.owner").read_text() == f"pid {killed.pid} on {socket.gethostname()}"
  command = ["-c", RUNNER, "--config=configs/segmentation.py:smoke", "--config.train.log_every=1",
             f"--config.data.cache_dir={tmp_path / 'data'}", f"--workdir={workdir}"]
  first = subprocess.Popen([sys.executable] + command, cwd=REPO_ROOT, stderr=subprocess.PIPE, text=True,
                           env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
  output = []
  try:
    for line in first.stderr:  # the lock is held once steps run
      output.append(line)
      if "step 2/" in line:
        break
    else:
      pytest.fail("".join(output)[-3000:])
    first.send_signal(signal.SIGSTOP)  # holds the lock, whatever the machine's speed
    assert (workdir / "LOCK.owner").read_text() == f"pid {first.pid} on {socket.gethostname()}"
    second = run_python(command)
    first.send_signal(signal.SIGCONT)
    output += first.stderr.readlines()
    assert first.wait(timeout=600) == 0, "".join(output)[-3000:]
  finally:
    first.kill()
    first.wait()
  text = "".join(output)
  assert f"taking over the lock of pid {killed.pid} on {socket.gethostname()}" in text
  assert os.path.isfile(workdir / "saved_model" / "saved_model.pb")
  assert not os.path.exists(workdir / "LOCK") and not os.path.exists(workdir / "LOCK.owner")  # released

  assert second.returncode == 2, second.stderr[-3000:]
  last = second.stderr.strip().splitlines()[-1]
  assert last == (f"error: {workdir} is in use by another run (pid {first.pid} on {socket.gethostname()}); "
                  "wait for it to end or stop it, or choose another --workdir"), last


def test_the_launcher_kills_a_worker_that_ignores_sigterm(tmp_path):
  """Through Popen.kill, which Windows has too (TerminateProcess): not os.kill(pid, signal.SIGKILL)."""
  ready = tmp_path / "ready"
  ignores_sigterm = ["python", "-c", "import pathlib, signal, sys, time; signal.signal(signal.SIGTERM, "
                     "signal.SIG_IGN); pathlib.Path(sys.argv[1]).touch(); time.sleep(120)", str(ready)]
  workers = launch_workers.Workers(ignores_sigterm, 1, stop_timeout_s=1)
  deadline = time.monotonic() + 60
  while not ready.exists() and time.monotonic() < deadline:
    time.sleep(0.05)
  workers.stop()  # SIGTERM, ignored; killed after the timeout
  assert workers.processes[0].returncode == -signal.SIGKILL  # killed, not ended by the SIGTERM
