"""Shared test set-up: quiet TensorFlow, no global Keras state leaking between tests, a read-only folder."""
import errno
import os
import subprocess

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
LONGEST_FILES_FIRST = (
    "test_readme_commands.py", "test_signal_sweep.py", "test_export.py", "test_segmentation_train.py",
    "test_real_inception.py", "test_real_segmentation.py", "test_inception_train.py",
    "test_multi_worker.py", "test_distributed_trainers.py", "test_layout.py", "test_triplet_train.py",
    "test_predict.py", "test_real_triplet.py",
)


def pytest_collection_modifyitems(items):
  """The long files first (pytest.ini's --no-loadscope-reorder keeps this order), tests in file order."""
  def rank(item):
    name = os.path.basename(item.nodeid.split("::")[0])
    return LONGEST_FILES_FIRST.index(name) if name in LONGEST_FILES_FIRST else len(LONGEST_FILES_FIRST)
  items.sort(key=rank)


@pytest.fixture(autouse=True)
def float32_policy():
  """Mixed-precision tests set a global policy; every test starts and ends with float32. A test
  of a one-line error (cli.fail) silences absl's log, which the next test gets back. Keras' global
  state is cleared without its full garbage collection (about 0.35 s a test, 8 minutes of the
  suite's worker time): Python's collector still runs as it always does."""
  keras.mixed_precision.set_global_policy("float32")
  yield
  keras.mixed_precision.set_global_policy("float32")
  keras.backend.clear_session(free_memory=False)
  logging.set_verbosity(logging.INFO)


@pytest.fixture
def run_cli():
  """run_cli(args) runs `python args...` from the repository root as a user would."""
  return helpers.run_python


@pytest.fixture(scope="session")
def real_sets(tmp_path_factory, worker_id):
  """A folder with the development real data sets (scripts/make_real_sets.py), written once per
  session: under xdist by the first worker that asks, in the folder its workers share (pytest-xdist's
  recipe), while the others wait on the lock."""
  if worker_id == "master":
    root = tmp_path_factory.mktemp("real_sets")
    make_real_sets.write_all(str(root))
    return root
  root = tmp_path_factory.getbasetemp().parent / "real_sets"
  with filelock.FileLock(f"{root}.lock"):
    if not (root / "written").exists():
      make_real_sets.write_all(str(root))
      (root / "written").touch()
  return root


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
