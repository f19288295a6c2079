"""Shared test set-up: quiet TensorFlow, and no global Keras state leaking between tests."""
import os

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
