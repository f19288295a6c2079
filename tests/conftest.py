"""Shared test set-up: quiet TensorFlow, no global Keras state leaking between tests, a read-only folder."""
import errno
import os
import subprocess

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from absl import logging  # pylint: disable=g-import-not-at-top
import keras  # pylint: disable=g-import-not-at-top
import pytest  # pylint: disable=g-import-not-at-top

import helpers  # pylint: disable=g-import-not-at-top
from scripts import make_real_sets  # pylint: disable=g-import-not-at-top


@pytest.fixture(autouse=True)
def float32_policy():
  """Mixed-precision tests set a global policy; every test starts and ends with float32. A test
  of a one-line error (cli.fail) silences absl's log, which the next test gets back."""
  keras.mixed_precision.set_global_policy("float32")
  yield
  keras.mixed_precision.set_global_policy("float32")
  keras.backend.clear_session()
  logging.set_verbosity(logging.INFO)


@pytest.fixture
def run_cli():
  """run_cli(args) runs `python args...` from the repository root as a user would."""
  return helpers.run_python


@pytest.fixture(scope="session")
def real_sets(tmp_path_factory):
  """A folder with the development real data sets (scripts/make_real_sets.py), written once per session."""
  root = tmp_path_factory.mktemp("real_sets")
  make_real_sets.write_all(str(root))
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
