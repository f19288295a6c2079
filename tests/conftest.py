"""Shared test set-up: quiet TensorFlow, and no global Keras state leaking between tests."""
import os
import subprocess
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # pylint: disable=g-import-not-at-top
import pytest  # pylint: disable=g-import-not-at-top

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(autouse=True)
def float32_policy():
  """Mixed-precision tests set a global policy; every test starts and ends with float32."""
  keras.mixed_precision.set_global_policy("float32")
  yield
  keras.mixed_precision.set_global_policy("float32")
  keras.backend.clear_session()


@pytest.fixture
def run_cli():
  """run_cli(args) runs `python args...` from the repository root as a user would."""

  def run(args, timeout=900):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    return subprocess.run([sys.executable] + list(args), cwd=REPO_ROOT, capture_output=True,
                          text=True, timeout=timeout, env=env)

  return run
