"""Nothing lost: the workdir lock, interrupts during evaluation, changed inputs on resume, and a workdir
that cannot be written (a file, read-only, full)."""
import contextlib
import importlib
import os
import signal
import subprocess
import sys
import threading
import time
from unittest import mock

import keras
import numpy as np
from PIL import Image
import pytest
import tensorflow as tf

from common.training import checkpoints
from common.app import cli
from common.contract import config as config_lib
from common.app import export as export_lib
from common.nn import optimizers
from common.runtime import signals
from common.runtime import workdir as workdir_lib
from common.app import startup
from common.contract import task as task_lib
from common.training import train_loop
from common.contract.errors import CheckpointError
from common.contract.errors import WorkdirError
from helpers import REPO_ROOT
from helpers import loop_task
from helpers import make_config
from helpers import run_python
from segmentation import train as segmentation_train


def tiny_config(steps=4):
  config = config_lib.base_config()
  config.train.num_steps = steps
  config.train.batch_size = 4
  config.train.log_every = 2
  config.train.eval_every = 1000
  config.train.checkpoint_every = 1000
  return config


def regression_data():
  return tf.data.Dataset.range(1 << 30).map(
      lambda i: (tf.random.stateless_normal([4, 3], [i, 0]), tf.random.stateless_normal([4, 1], [i, 1])))


def mse_loss(model, batch, training):
  x, y = batch
  return tf.reduce_mean(tf.square(model(x, training=training) - y)), {}


def run_loop(workdir, config, metrics_fn=None, fingerprint=None):
  strategy = startup.prepare_run(config, str(workdir))
  with strategy.scope():
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    optimizer = optimizers.make_optimizer(config.optimizer, False, config.train.num_steps)
  task = loop_task(regression_data(), mse_loss, metrics_fn)
  task.input_fingerprint = fingerprint or {"train.batch_size": config.train.batch_size}
  return train_loop.train(config, str(workdir), strategy=strategy, model=model, task=task,
                          phases=[task_lib.Phase("train", config.train.num_steps, optimizer)])


def checkpoint_step(workdir):
  reader = tf.train.load_checkpoint(tf.train.latest_checkpoint(os.path.join(workdir, "checkpoints")))
  return int(reader.get_tensor("step/.ATTRIBUTES/VARIABLE_VALUE"))


def assert_one_line(message, *names):
  assert "\n" not in message
  for name in names:
    assert name in message, (name, message)


def test_sigterm_during_the_final_evaluation_keeps_the_last_step(tmp_path):
  def signalling_evaluation(model):
    del model
    os.kill(os.getpid(), signal.SIGTERM)  # arrives while the final evaluation runs
    return {"score": 1.0}

  with pytest.raises(signals.Interrupted) as error:
    run_loop(tmp_path, tiny_config(steps=6), signalling_evaluation)
  assert error.value.signum == signal.SIGTERM
  assert checkpoint_step(tmp_path) == 6
  resumed = run_loop(tmp_path, tiny_config(steps=6), lambda model: {"score": 2.0})
  assert (resumed["step"], resumed["steps_run"], resumed["eval"]["score"]) == (6, 0, 2.0)


def test_a_signal_stops_a_long_evaluation_before_its_next_batch(tmp_path):
  times = {}

  def long_evaluation(predict):
    threading.Timer(0.5, lambda: (times.setdefault("signal", time.time()),
                                  os.kill(os.getpid(), signal.SIGINT))).start()
    for _ in range(600):  # a minute of evaluation unless the signal cuts it short
      predict(tf.zeros([1, 3]))
      time.sleep(0.1)
    return {"score": 1.0}

  with pytest.raises(signals.Interrupted) as error:
    run_loop(tmp_path, tiny_config(steps=4), long_evaluation)
  assert time.time() - times["signal"] < 5
  assert error.value.signum == signal.SIGINT
  assert "during the evaluation at step 4; checkpoint" in str(error.value)
  assert checkpoint_step(tmp_path) == 4


def test_a_second_signal_exits_at_once():
  # The first is recorded for the next safe point; a second of the same kind ends the program now
  # (no TensorFlow needed to show it: the handler never touches it), unless it comes within
  # signals._REPEAT_S of the first, as timeout(1)'s copy for the process group does.
  result = run_python(["-c", "import os, signal, time\n"
                       "from common.runtime import signals\n"
                       "signals.install()\n"
                       "for signum in (signal.SIGTERM, signal.SIGINT):\n"
                       "  os.kill(os.getpid(), signum)\n"
                       "  time.sleep(0.1)\n"
                       "  os.kill(os.getpid(), signum)  # the same signal\n"
                       "  time.sleep(0.1)\n"
                       "assert signals.pending() == signal.SIGTERM\n"
                       "time.sleep(signals._REPEAT_S)\n"
                       "os.kill(os.getpid(), signal.SIGINT)\n"
                       "time.sleep(60)\n"], timeout=30)
  assert result.returncode == 128 + signal.SIGINT, result.stderr
  assert result.stderr.strip() == ("second SIGINT: exiting now; every checkpoint written so far is "
                                   "kept")


def test_mid_run_evaluation_follows_the_save_of_its_step(tmp_path):
  config = tiny_config(steps=6)
  config.train.eval_every = 3

  def failing_evaluation(model):
    del model
    raise RuntimeError("evaluation crashed")

  with pytest.raises(RuntimeError):
    run_loop(tmp_path, config, failing_evaluation)
  assert checkpoint_step(tmp_path) == 3


def test_changed_input_is_one_line_and_reset_input_pipeline_resumes(tmp_path):
  run_loop(tmp_path, tiny_config(steps=4))
  config = tiny_config(steps=8)
  config.train.batch_size = 2
  before = (tmp_path / "config.json").read_bytes()
  with pytest.raises(CheckpointError) as error:
    run_loop(tmp_path, config)
  assert_one_line(str(error.value), "train.batch_size: 4 -> 2", "train.reset_input_pipeline")
  assert (tmp_path / "config.json").read_bytes() == before  # a refused rerun writes nothing
  config.train.reset_input_pipeline = True
  resumed = run_loop(tmp_path, config)
  assert (resumed["step"], resumed["steps_run"]) == (8, 4)
  config.train.num_steps = 10  # the new fingerprint is saved: no reset needed any more
  config.train.reset_input_pipeline = False
  assert run_loop(tmp_path, config)["step"] == 10
  assert len(os.listdir(tmp_path / "configs")) == 3  # every run's resolved config is kept


def test_a_refused_rerun_leaves_config_json_byte_identical(tmp_path):
  config = make_config("segmentation", "smoke", **{"train.num_steps": 2})
  segmentation_train.train_and_evaluate(config, str(tmp_path))
  before = (tmp_path / "config.json").read_bytes()
  other = make_config("segmentation", "smoke", **{"train.num_steps": 4, "model.widths": (4, 8, 16)})
  with pytest.raises(CheckpointError) as error:
    segmentation_train.train_and_evaluate(other, str(tmp_path))
  assert_one_line(str(error.value), "does not match this model")
  assert (tmp_path / "config.json").read_bytes() == before


def write_pairs(folder, names):
  for name in names:
    os.makedirs(folder / "images", exist_ok=True)
    os.makedirs(folder / "masks", exist_ok=True)
    rng = np.random.default_rng(len(name))
    Image.fromarray(rng.integers(0, 255, (32, 32, 3), np.uint8)).save(folder / "images" / f"{name}.png")
    Image.fromarray(rng.integers(0, 2, (32, 32), np.uint8)).save(folder / "masks" / f"{name}.png")


def test_files_added_to_the_data_folder_are_named_on_resume(tmp_path):
  data = tmp_path / "data"
  write_pairs(data, [f"a{i}" for i in range(4)])
  overrides = {"data.source": "folder", "data.images_dir": str(data / "images"),
               "data.masks_dir": str(data / "masks"), "data.eval_fraction": 0.25}
  workdir = str(tmp_path / "run")
  segmentation_train.train_and_evaluate(
      make_config("segmentation", "smoke", **overrides, **{"train.num_steps": 2}), workdir)
  write_pairs(data, ["b0", "b1", "b2"])
  config = make_config("segmentation", "smoke", **overrides, **{"train.num_steps": 4})
  with pytest.raises(CheckpointError) as error:
    segmentation_train.train_and_evaluate(config, workdir)
  assert_one_line(str(error.value), "train files: 3 files", "-> 5 files")
  config.train.reset_input_pipeline = True
  results = segmentation_train.train_and_evaluate(config, workdir)
  assert (results["step"], results["steps_run"]) == (4, 2)


TASK_MODULES = {"segmentation": "segmentation.task", "triplet": "triplet.task",
                "inception_v4": "inception_finetune.task"}


@pytest.mark.parametrize("trainer, key, value", [
    ("segmentation", "train.batch_size", 8),
    ("segmentation", "data.patch_size", 16),
    ("triplet", "data.identities_per_batch", 2),
    ("inception_v4", "train.batch_size", 8),
])
def test_every_trainer_fingerprints_its_input(tmp_path, trainer, key, value):
  tasks = importlib.import_module(TASK_MODULES[trainer])
  base = make_config(trainer, "smoke")
  changed = make_config(trainer, "smoke", **{key: value})
  if trainer == "triplet":
    changed.train.batch_size = value * changed.data.images_per_identity
  first = tasks.make_task(base, str(tmp_path)).input_fingerprint
  second = tasks.make_task(changed, str(tmp_path)).input_fingerprint
  assert first and first != second
  assert checkpoints.input_changes(first, second)


def test_a_file_as_workdir_is_one_line(tmp_path):
  workdir = tmp_path / "notes.txt"
  workdir.write_text("not a folder")
  with pytest.raises(WorkdirError) as error:
    run_loop(workdir, tiny_config())
  assert_one_line(str(error.value), str(workdir), "choose another --workdir")


def test_a_full_disk_at_a_checkpoint_is_one_line_and_keeps_the_last_good_one(tmp_path):
  run_loop(tmp_path, tiny_config(steps=2))
  full = tf.errors.ResourceExhaustedError(None, None, "tmp; No space left on device [Op:SaveV2]")
  with mock.patch.object(tf.train.CheckpointManager, "save", side_effect=full):
    with pytest.raises(WorkdirError) as error:
      run_loop(tmp_path, tiny_config(steps=4))
  assert_one_line(str(error.value), "No space left on device", "ckpt-2 is intact")
  assert checkpoint_step(tmp_path) == 2


@contextlib.contextmanager
def small_filesystem(path, size="2m"):
  """A tmpfs of `size` at path (needs root); skips the test where mounting is not allowed."""
  os.makedirs(path)
  if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "none", str(path)],
                                         capture_output=True).returncode:
    pytest.skip("mounting a small filesystem needs root")
  try:
    yield path
  finally:
    subprocess.run(["umount", "-l", str(path)], check=False)


def test_a_read_only_or_full_workdir_is_one_line_and_the_checkpoint_still_loads(tmp_path):
  with small_filesystem(tmp_path / "disk") as disk:
    workdir = disk / "run"
    run_loop(workdir, tiny_config(steps=2))
    filler = disk / "filler"
    with pytest.raises(OSError):
      with open(filler, "wb") as f:
        while True:
          f.write(b"\0" * 65536)
          f.flush()
    with pytest.raises(WorkdirError) as error:
      run_loop(workdir, tiny_config(steps=4))
    assert_one_line(str(error.value), "the disk is full")
    os.remove(filler)
    subprocess.run(["mount", "-o", "remount,ro", str(disk)], check=True)
    with pytest.raises(WorkdirError) as error:
      run_loop(workdir, tiny_config(steps=4))
    assert_one_line(str(error.value), str(workdir), "not writable")
    assert checkpoint_step(workdir) == 2


def test_leftovers_of_a_killed_save_are_removed(tmp_path):
  os.makedirs(tmp_path / "checkpoints" / "ckpt-3_temp" / "part-0")
  run_loop(tmp_path, tiny_config(steps=2))
  assert not [name for name in os.listdir(tmp_path / "checkpoints") if "_temp" in name]


@pytest.mark.slow
def test_a_locked_workdir_names_the_other_run_and_a_dead_one_is_taken_over(tmp_path):
  command = ["-m", "segmentation.train", "--config=configs/segmentation.py:smoke",
             "--config.train.num_steps=100000", "--config.train.log_every=1",
             f"--config.data.cache_dir={tmp_path / 'data'}", f"--workdir={tmp_path / 'run'}"]
  first = subprocess.Popen([sys.executable] + command, cwd=REPO_ROOT, stderr=subprocess.PIPE, text=True,
                           env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
  try:
    for line in first.stderr:  # the lock is held once steps run
      if "step 2/" in line:
        break
    second = run_python(command)
    assert second.returncode == 2, second.stderr[-2000:]
    last = second.stderr.strip().splitlines()[-1]
    assert last.startswith("error: ") and f"pid {first.pid}" in last, last
  finally:
    first.kill()  # SIGKILL: the lock file keeps its pid, the kernel releases the lock
    first.wait()
  third = run_python(command[:3] + ["--config.train.num_steps=3"] + command[4:])
  assert third.returncode == 0, third.stderr[-2000:]
  assert f"taking over the lock of pid {first.pid}" in third.stderr


def test_a_run_that_ends_leaves_no_lock_file(tmp_path):
  for _ in range(2):  # and the next run takes the workdir as the first did
    with workdir_lib.locked(str(tmp_path)):
      assert sorted(os.listdir(tmp_path)) == ["LOCK", "LOCK.owner"]
      with pytest.raises(WorkdirError, match="is in use by another run"):
        with workdir_lib.locked(str(tmp_path)):
          pass
    assert os.listdir(tmp_path) == []


def test_a_lock_held_from_another_host_is_refused_with_how_to_free_it(tmp_path):
  with workdir_lib.locked(str(tmp_path)):
    (tmp_path / "LOCK.owner").write_text("pid 7 on another-host")  # as a run on a shared folder writes it
    with pytest.raises(WorkdirError) as error:
      with workdir_lib.locked(str(tmp_path)):
        pass
  assert str(error.value) == (f"{tmp_path} is in use by another run (pid 7 on another-host); wait for it to "
                              f"end or stop it, or choose another --workdir; if that run is gone, delete "
                              f"{tmp_path / 'LOCK'}")


def export_tiny(model, path):
  return export_lib.export_saved_model(model, lambda x: {"y": model(x)}, str(path),
                                       [tf.TensorSpec([None, 3], tf.float32)], "test")


def tree_digest(path):
  return {os.path.relpath(os.path.join(root, name), path): open(os.path.join(root, name), "rb").read()
          for root, _, names in os.walk(path) for name in names}


def assert_export_refused(capsys, model, target, *names):
  """The export fails with one `error:` line naming `names`, exit 2, the previous export intact
  (back in place if a cut swap had left it in saved_model.old)."""
  before = tree_digest(target if os.path.exists(target) else f"{target}.old")
  with pytest.raises(SystemExit) as exit_info:
    cli.run_guarded(export_tiny, model, target)
  lines = capsys.readouterr().err.strip().splitlines()
  assert exit_info.value.code == 2 and len(lines) == 1, lines
  assert_one_line(lines[0], "error: cannot export the SavedModel", str(target), *names)
  assert tree_digest(target) == before
  assert not os.path.exists(f"{target}.tmp")


def test_export_faults_are_one_line_and_keep_the_previous_saved_model(tmp_path, capsys):
  model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
  target = tmp_path / "saved_model"
  export_tiny(model, target)
  # A stale temporary folder of an export cut short is cleared, not an error.
  (tmp_path / "saved_model.tmp" / "variables").mkdir(parents=True)
  export_tiny(model, target)
  assert sorted(os.listdir(tmp_path)) == ["saved_model"]
  # A swap cut between its renames: the previous export waits in saved_model.old.
  os.rename(target, f"{target}.old")
  full = tf.errors.ResourceExhaustedError(None, None, "No space left on device [Op:SaveV2]")
  with mock.patch.object(tf.saved_model, "save", side_effect=full):
    assert_export_refused(capsys, model, target, "No space left on device", "the previous export")
  assert sorted(os.listdir(tmp_path)) == ["saved_model"]
  # A read-only SavedModel folder (a read-only bind mount: root may write anywhere else).
  if os.geteuid() == 0 and not subprocess.run(["mount", "--bind", target, target]).returncode:
    try:
      subprocess.run(["mount", "-o", "remount,bind,ro", target, target], check=True)
      assert_export_refused(capsys, model, target, "is read-only")
    finally:
      subprocess.run(["umount", "-l", target], check=False)
  # Whatever was in the way, the same export succeeds once the fault is cleared.
  export_tiny(model, target)
  served = tf.saved_model.load(str(target)).signatures["serving_default"]
  np.testing.assert_allclose(served(tf.ones([2, 3]))["y"], model(tf.ones([2, 3])), rtol=1e-6)


@pytest.mark.parametrize("obstacle", ["file", "symlink"])
def test_a_file_or_symlink_where_the_saved_model_goes_is_one_line(tmp_path, capsys, obstacle):
  model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
  target = tmp_path / "saved_model"
  if obstacle == "file":
    target.write_text("notes")
  else:
    export_tiny(model, tmp_path / "elsewhere")
    target.symlink_to(tmp_path / "elsewhere")
  assert_export_refused(capsys, model, target, f"a {obstacle} is in the way")


def test_a_full_disk_during_the_export_is_one_line_and_a_rerun_exports(tmp_path, capsys):
  small = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
  large = keras.Sequential([keras.Input((3,)), keras.layers.Dense(200_000)])  # 3.2 MB of weights
  with small_filesystem(tmp_path / "disk", size="2m") as disk:
    target = disk / "saved_model"
    export_tiny(small, target)
    assert_export_refused(capsys, large, target, "the previous export")
    subprocess.run(["mount", "-o", "remount,size=16m", str(disk)], check=True)
    export_tiny(large, target)
    assert sorted(os.listdir(disk)) == ["saved_model"]


def test_a_worker_of_several_finding_the_lock_held_exits_to_be_retried(tmp_path, capsys):
  """A restarted worker whose dead predecessor's lock its host still holds (a shared folder) is not
  refused for good (exit 2) but told to retry: ClusterFailed's code, which orchestrators retry."""
  workdir = str(tmp_path / "run")

  def enter(retryable):
    with workdir_lib.locked(workdir, retryable=retryable):
      pass

  with workdir_lib.locked(workdir):
    for retryable, code in ((False, 2), (True, 142)):
      capsys.readouterr()
      with pytest.raises(SystemExit) as exit_info:
        cli.run_guarded(enter, retryable)
      lines = capsys.readouterr().err.strip().splitlines()
      assert exit_info.value.code == code and len(lines) == 1 and lines[0].startswith("error: "), lines
  assert "exiting with code 142 so that it is tried again" in lines[0], lines


def test_a_stall_with_exit_set_is_one_line_and_the_retryable_code():
  """train.on_stall=exit (with several workers, auto): no step for the limit ends the process at once."""
  result = run_python(["-c", "import time\nfrom common.training import diagnostics\n"
                       "with diagnostics.Watchdog(0.5, exit=True) as watchdog:\n"
                       "  watchdog.beat(7)\n  time.sleep(20)\n"])
  lines = result.stderr.strip().splitlines()
  assert result.returncode == 142, result.stderr[-2000:]
  assert lines[-1].startswith("error: no training step has finished for ") and (
      "(train.stall_timeout_s=0.5; last finished step 7): a worker stalled, failed or left; exiting with "
      "code 142 so that the run is restarted") in lines[-1], lines


def test_a_full_disk_fails_the_write_check_in_one_line_and_leaves_no_probe(tmp_path, capsys):
  disk = tmp_path / "full"
  disk.mkdir()
  if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "none", str(disk)], capture_output=True).returncode:
    pytest.skip("no tmpfs can be mounted here (root can; CI runs as root)")
  try:
    with contextlib.suppress(OSError), open(disk / "filler", "wb") as f:
      f.write(b"x" * 65536 * 2)  # fills the disk
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:
      cli.run_guarded(lambda: workdir_lib.check_writable(str(disk), flag="--output_dir"))
    lines = capsys.readouterr().err.strip().splitlines()
    assert exit_info.value.code == 2 and len(lines) == 1 and "No space left on device" in lines[0], lines
    assert os.listdir(disk) == ["filler"]
  finally:
    subprocess.run(["umount", "-l", str(disk)], check=False)
