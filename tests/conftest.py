"""Shared test set-up: quiet TensorFlow, no global Keras state leaking between tests, a read-only folder,
and what several test files read, made once per test session (the real data sets, a stand-in TF-Slim
checkpoint, an untrained smoke Inception V4's checkpoint, one trained from random weights, a trained
triplet smoke run)."""
import contextlib
import errno
import gc
import io
import json
import os
import shutil
import subprocess
import types

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from absl import logging  # pylint: disable=g-import-not-at-top
import filelock  # pylint: disable=g-import-not-at-top
import keras  # pylint: disable=g-import-not-at-top
import pytest  # pylint: disable=g-import-not-at-top

import helpers  # pylint: disable=g-import-not-at-top
from scripts import make_real_sets  # pylint: disable=g-import-not-at-top


# The files that take minutes, longest first (by the durations of a full run on 2 busy cores,
# 2026-12-02). Run first, they leave the many short files to even out the two workers' ends; run
# last (xdist orders files by their number of tests, so these came last), one worker could take two
# of them (a worker takes its next file when 2 of its tests are left) while the other sat idle.
LONGEST_FILES_FIRST = (  # by their tests' seconds in a full quiet run (--durations), 2026-12-05
    "test_readme_commands.py", "test_real_segmentation.py", "test_multi_worker.py", "test_export.py",
    "test_segmentation_train.py", "test_signal_sweep.py", "test_inception_train.py",
    "test_distributed_trainers.py", "test_real_inception.py", "test_real_triplet.py", "test_tfds.py",
    "test_layout.py", "test_fetch_slim_checkpoint.py", "test_workdir.py", "test_triplet_train.py",
    "test_worker_temp_dirs.py",
    "test_bad_inputs.py", "test_train_loop.py", "test_cli_output.py", "test_new_trainer.py",
    "test_benchmark.py", "test_predict.py",
)


def pytest_collection_modifyitems(items):
  """The long files first (pytest.ini's --no-loadscope-reorder keeps this order), tests in file order."""
  def rank(item):
    name = os.path.basename(item.nodeid.split("::")[0])
    return LONGEST_FILES_FIRST.index(name) if name in LONGEST_FILES_FIRST else len(LONGEST_FILES_FIRST)
  items.sort(key=rank)


# What the full suite holds on disk at its peak, with room to spare: the session's shared runs and two
# files' Inception V4 runs and exports (pytest.ini removes a passed test's tmp_path, and module_tmp a
# file's folders, as each ends). A quiet full run, 2026-12-05: 3.5 GB at the peak (the disk's used space
# every 2 s); before these removals the suite held 8.5 GB at its end, and pytest keeps three sessions.
DISK_NEEDED_GB = 5


def pytest_sessionstart(session):
  """One line, before anything runs, when the temporary folder's disk has less free than the suite
  needs: a full disk otherwise shows as hundreds of errors from whichever test wrote next."""
  if hasattr(session.config, "workerinput"):
    return  # the xdist controller says it once
  folder = session.config._tmp_path_factory.getbasetemp()  # pylint: disable=protected-access
  free_gb = shutil.disk_usage(folder).free / 1e9
  if free_gb < DISK_NEEDED_GB:
    session.config.get_terminal_writer().line(
        f"only {free_gb:.1f} GB free on the disk of {folder}: the full suite writes up to "
        f"{DISK_NEEDED_GB} GB there at once (set TMPDIR or --basetemp to a larger disk)", red=True, bold=True)


@pytest.fixture(scope="module")
def module_tmp(tmp_path_factory):
  """mktemp(name) for the folders a test file's module fixtures share, removed when the file's tests
  end (an Inception V4 run or export is over a GB; tmp_path_factory's own folders stay until the
  session ends)."""
  made = []

  def mktemp(name):
    made.append(tmp_path_factory.mktemp(name))
    return made[-1]

  yield mktemp
  for folder in made:
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(autouse=True)
def float32_policy():
  """Mixed-precision tests set a global policy; every test starts and ends with float32. A test
  of a one-line error (cli.fail) silences absl's log, which the next test gets back. Keras' global
  state is cleared with a full garbage collection of what the test left (clear_session's default):
  left to Python's own full collections, a worker's TensorFlow garbage piled up over tens of tests
  and its collection then stalled whichever fast test set it off, 20-70 s, mostly waiting off the
  CPU (2026-12-06: 157 s of such collections in 484 s of five files in one process). What survives
  is frozen (gc.freeze), so that the next collection walks only the next test's objects, not the
  worker's whole heap again."""
  keras.mixed_precision.set_global_policy("float32")
  yield
  keras.mixed_precision.set_global_policy("float32")
  keras.backend.clear_session()
  gc.freeze()
  logging.set_verbosity(logging.INFO)


@pytest.fixture
def run_cli():
  """run_cli(args) runs `python args...` from the repository root as a user would."""
  return helpers.run_python


@pytest.fixture(scope="session")
def real_sets(tmp_path_factory, worker_id):
  """A folder with the development real data sets (scripts/make_real_sets.py), written once per
  session (written_once). The `scenes` set is left out: no test reads it whole, and it is the slowest
  to write (its own test writes a small one)."""
  sets = tuple(name for name in make_real_sets.SETS if name != "scenes")
  return written_once(tmp_path_factory, worker_id, "real_sets", lambda root: make_real_sets.write_all(str(root), sets))


def written_once(tmp_path_factory, worker_id, name, write):
  """The folder <name> that write(folder) fills, once per test session: under xdist by the first
  worker that asks, in the folder its workers share (pytest-xdist's recipe), while the others wait on the
  lock; `<name>.written` beside it says it is whole (a write that failed is started again). Tests
  only read it: a test that changes it works on a copy (shutil.copytree)."""
  parent = tmp_path_factory.getbasetemp() if worker_id == "master" else tmp_path_factory.getbasetemp().parent
  root = parent / name
  with filelock.FileLock(f"{root}.lock"):
    if not (parent / f"{name}.written").exists():
      shutil.rmtree(root, ignore_errors=True)
      root.mkdir()
      write(root)
      (parent / f"{name}.written").touch()
  return root


@pytest.fixture(scope="session")
def slim_inception_checkpoint(tmp_path_factory, worker_id):
  """The path of helpers.write_slim_inception_checkpoint's stand-in for TF-Slim's published
  checkpoint (seed 1), <folder>/inception_v4.ckpt with the folder's `checkpoint` state file, written
  once per session (an Inception V4 of 1001 classes built and its 170 MB written: seconds).
  tests/test_inception_train.py fine-tunes from it, tests/test_readme_commands.py copies it."""
  root = written_once(tmp_path_factory, worker_id, "slim_inception_v4",
                      lambda root: helpers.write_slim_inception_checkpoint(str(root / "inception_v4.ckpt")))
  return str(root / "inception_v4.ckpt")


@pytest.fixture(scope="session")
def inception_smoke_checkpoint(tmp_path_factory, worker_id):
  """get() -> the folder checkpoints/ (ckpt-1, as tf.train.CheckpointManager saves it) of the smoke
  preset's Inception V4 (10 classes, 75x75), untrained, seeded 0: built and written at the session's
  first get() (seconds), so that files whose slow tests alone use it pay nothing in a fast run.
  tests/test_export.py and tests/test_predict.py copy it into the runs they write."""
  def write(root):
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    from inception_finetune import data  # pylint: disable=g-import-not-at-top
    from inception_finetune import task  # pylint: disable=g-import-not-at-top
    config = helpers.make_config("inception_v4", "smoke")
    tf.keras.utils.set_random_seed(0)
    model = task.build_model(config, data.read_settings(config.data), config.data.num_classes)
    tf.train.CheckpointManager(tf.train.Checkpoint(model=model),
                               str(root / "checkpoints"), max_to_keep=1).save(checkpoint_number=1)

  return lambda: written_once(tmp_path_factory, worker_id, "inception_smoke_untrained", write) / "checkpoints"


@pytest.fixture(scope="session")
def inception_random_run(tmp_path_factory, worker_id):
  """get() -> (workdir, config) of the smoke preset's Inception V4 trained from random weights, every
  layer (as the scratch preset), 2 steps with a weight average, evaluated and exported: its
  checkpoint holds recalibrated BatchNorm statistics. Trained at the session's first get() (about a
  minute), so that a fast run pays nothing. tests/test_export.py reads it."""
  config = helpers.make_config("inception_v4", "smoke", **{
      "trainable_scopes": "", "train.num_steps": 2, "finetune.head_steps": 2, "train.eval_every": 2,
      "train.checkpoint_every": 2, "train.log_every": 2, "train.ema_decay": 0.5})

  def write(root):
    from inception_finetune import train  # pylint: disable=g-import-not-at-top
    with contextlib.redirect_stdout(io.StringIO()):
      train.train_and_evaluate(config, str(root / "run"))

  return lambda: (written_once(tmp_path_factory, worker_id, "inception_random_run", write) / "run", config)


@pytest.fixture(scope="session")
def triplet_smoke_run(tmp_path_factory, worker_id):
  """The triplet smoke preset trained by train_and_evaluate (20 steps, evaluated, exported), once per
  session: .workdir (its metrics.json, checkpoints, SavedModel), .config, .results (the returned
  metrics, read back from JSON) and .printed (its stdout: the figures lines). For tests that read
  the run (tests/test_predict.py, tests/test_readme_figures.py); one that changes it copies it."""
  def write(root):
    from triplet import train  # pylint: disable=g-import-not-at-top
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
      results = train.train_and_evaluate(helpers.make_config("triplet", "smoke"), str(root / "run"))
    (root / "results.json").write_text(json.dumps(results))
    (root / "printed.txt").write_text(printed.getvalue())

  root = written_once(tmp_path_factory, worker_id, "triplet_smoke_run", write)
  return types.SimpleNamespace(workdir=root / "run", config=helpers.make_config("triplet", "smoke"),
                               results=json.loads((root / "results.json").read_text()),
                               printed=(root / "printed.txt").read_text())


@pytest.fixture(scope="session")
def tfds_data_dir(tmp_path_factory, worker_id):
  """A TFDS data_dir with tiny prepared copies of oxford_iiit_pet, stanford_dogs and lfw
  (tests/tfds_data.py), written once per session; skipped without the tfds extra."""
  pytest.importorskip("tensorflow_datasets", reason="the tfds extra is not installed (requirements-tfds.txt)")
  import tfds_data  # pylint: disable=g-import-not-at-top

  def write(root):
    for name in tfds_data.NAMES:
      tfds_data.prepare(name, str(root))

  return written_once(tmp_path_factory, worker_id, "tfds_data", write)


@pytest.fixture
def read_only_dir(tmp_path):
  """(a folder that cannot be written, the reason a write into it fails): chmod 555 for a user;
  for root, who writes through permissions, a tmpfs mounted read-only (skips where it cannot mount)."""
  path = tmp_path / "read_only"
  path.mkdir()
  if os.geteuid() != 0:
    path.chmod(0o555)
    yield str(path), os.strerror(errno.EACCES)
    path.chmod(0o755)
    return
  if subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=64k", "none", str(path)],
                    capture_output=True).returncode:
    pytest.skip("root writes into any folder, and no read-only filesystem can be mounted here")
  try:
    yield str(path), os.strerror(errno.EROFS)
  finally:
    subprocess.run(["umount", "-l", str(path)], check=False)
