"""The non-chief workers' temporary save folders (common/training/worker_files.chief_path) are removed at the
end of every save and at exit (a SIGTERM included), and those of killed workers at the next start;
only this run's folders (named after the workdir and their process) are touched."""
import os
import signal
import subprocess
import sys
import tempfile
from unittest import mock

import pytest
import tensorflow as tf

from common.runtime import hardware
from common.training import worker_files
from test_multi_worker import TIMEOUT_S
from test_multi_worker import _worker_pids
from test_multi_worker import finish
from test_multi_worker import segmentation_args
from test_multi_worker import start_launcher
from test_multi_worker import wait_for


def dead_pid():
  process = subprocess.Popen([sys.executable, "-c", "pass"])
  process.wait()
  return process.pid


def test_a_killed_workers_folder_is_removed_at_start_and_others_are_kept(tmp_path, monkeypatch):
  monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
  workdir, other = str(tmp_path / "runs" / "run"), str(tmp_path / "runs" / "other")
  prefix = worker_files.temporary_prefix(workdir)
  assert worker_files.temporary_prefix(other) != prefix
  killed = tmp_path / f"{prefix}worker1-pid{dead_pid()}-abc"
  alive = tmp_path / f"{prefix}worker2-pid{os.getpid()}-def"  # a live worker of this run
  others = tmp_path / f"{worker_files.temporary_prefix(other)}worker1-pid{dead_pid()}-ghi"  # another run's
  unrelated = tmp_path / "worker1-unrelated"
  for folder in (killed, alive, others, unrelated):
    (folder / "checkpoints").mkdir(parents=True)
  with mock.patch.object(hardware, "is_chief", return_value=False), \
       mock.patch.object(hardware, "worker_index", return_value=1):
    with worker_files.chief_path(workdir, strategy=None) as path:
      assert os.path.basename(path) == "run"
      own = os.path.dirname(path)
      assert os.path.basename(own).startswith(f"{prefix}worker1-pid{os.getpid()}-")
      assert not killed.exists()
    assert not os.path.exists(own)
    with pytest.raises(KeyboardInterrupt):  # a signal ending the block removes it too
      with worker_files.chief_path(workdir, strategy=None) as path:
        raise KeyboardInterrupt
    assert not os.path.exists(os.path.dirname(path))
  assert sorted(os.listdir(tmp_path)) == sorted(p.name for p in (alive, others, unrelated))


@pytest.mark.slow
def test_no_temporary_folder_is_left_after_a_killed_worker_and_a_relaunch_stopped_by_sigterm(tmp_path):
  workdir, tmp = tmp_path / "run", tmp_path / "tmp"
  checkpoints = workdir / "checkpoints"
  args = segmentation_args(workdir, 1000, "--config.train.checkpoint_every=2", "--config.train.eval_every=1000")
  process = start_launcher(args, tmp)
  pids = _worker_pids(wait_for(process, checkpoints / "ckpt-2.index"))
  os.kill(pids[1], signal.SIGKILL)
  code, output = finish(process)
  assert code == 128 + signal.SIGKILL, output[-3000:]
  prefix = worker_files.temporary_prefix(str(workdir))
  assert [name for name in os.listdir(tmp) if name.startswith(prefix)], os.listdir(tmp)  # the killed one's

  killed = int(tf.train.latest_checkpoint(str(checkpoints)).rsplit("-", 1)[1])
  process = start_launcher(args, tmp)
  head = wait_for(process, checkpoints / f"ckpt-{killed + 2}.index")
  assert "the temporary folder of a killed worker" in head, head[-3000:]
  process.send_signal(signal.SIGTERM)
  code, rest = finish(process, timeout=TIMEOUT_S)
  assert code == 128 + signal.SIGTERM, (head + rest)[-3000:]
  # No folder at all (the files left are AutoGraph's, which a signalled exit does not delete).
  assert [name for name in os.listdir(tmp) if os.path.isdir(tmp / name)] == []
