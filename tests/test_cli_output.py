"""What the CLIs print and keep: --help, output that starts with the run's own lines (TensorFlow's
C++ start-up lines held back), the run's log appended to <workdir>/train.log and eval.log, and
an evaluation of a workdir with nothing but --workdir."""
import importlib
import json
import os
import re
import signal
import subprocess
import sys
import time
import types

import pytest

from common.runtime import process
from common.runtime import workdir as workdir_lib
import helpers

# A line of TensorFlow's C++ logging (file.cc:line]); absl's Python lines name a .py file.
CPP_LINE = re.compile(r"\S+\.cc:\d+\]")


def run_cli(args):
  """The command as a user runs it: TF_CPP_MIN_LOG_LEVEL not set (helpers.run_python sets it)."""
  env = {key: value for key, value in os.environ.items() if key != "TF_CPP_MIN_LOG_LEVEL"}
  return subprocess.run([sys.executable] + args, cwd=helpers.REPO_ROOT, capture_output=True,
                        text=True, timeout=600, env=env)


@pytest.mark.parametrize("module, config, own_flags", [
    ("segmentation.train", "segmentation", ["--config", "--workdir"]),
    ("triplet.evaluate", "triplet", ["--config", "--workdir", "--saved_model", "--report_dir"]),
    ("segmentation.predict", "segmentation", ["--config", "--workdir", "--saved_model", "--max_pixels",
                                              "--output_dir"]),
])
def test_help_exits_0_listing_the_flags_and_presets(module, config, own_flags):
  result = run_cli(["-m", module, "--help"])
  assert result.returncode == 0, result.stderr[-2000:]
  listed = re.findall(r"^  (--[a-z_]+):", result.stdout, re.M)
  assert listed == own_flags, result.stdout
  if config:
    presets = importlib.import_module(f"configs.{config}").PRESETS
    for name, description in presets.items():
      assert re.search(rf"^  {name} +{re.escape(description)}$", result.stdout, re.M), result.stdout
  assert not CPP_LINE.search(result.stdout + result.stderr), result.stderr


def test_tensorflow_is_imported_with_scikit_learn_hidden_and_importable_after(monkeypatch):
  """Keras' import tries scikit-learn (for wrappers no command uses, 1 s of start-up): not found
  during the commands' TensorFlow import, importable after it."""
  found = []

  def import_module(name):
    try:
      importlib.import_module("sklearn")
      found.append(True)
    except ImportError:
      found.append(False)
    return name

  monkeypatch.delitem(sys.modules, "sklearn", raising=False)
  monkeypatch.setattr(process, "importlib", types.SimpleNamespace(import_module=import_module))
  assert process.import_tensorflow() == "tensorflow" and found == [False]
  assert importlib.import_module("sklearn").__name__ == "sklearn"


@pytest.mark.slow
def test_run_output_starts_with_its_own_lines_and_its_log_is_kept(tmp_path):
  workdir = str(tmp_path / "run")
  command = ["-m", "segmentation.train", "--config=configs/segmentation.py:smoke",
             "--config.train.num_steps=2", "--config.data.num_eval_images=6", f"--workdir={workdir}"]
  first = run_cli(command)
  assert first.returncode == 0, first.stderr[-2000:]
  assert not CPP_LINE.search(first.stderr), first.stderr[:2000]
  assert "hardware.py" in first.stderr.splitlines()[0]  # the device report opens the output
  log_path = os.path.join(workdir, "train.log")
  with open(log_path) as f:
    log = f.read()
  # The lines before the workdir was taken (devices, data) are in it too, and the progress.
  assert "GPU: none" in log and "step 2/2" in log and log.count("hardware.py") >= 3

  with workdir_lib.locked(workdir):  # another run holds the workdir: refused, nothing appended
    refused = run_cli(command)
  assert refused.returncode == 2 and "is in use by another run" in refused.stderr
  with open(log_path) as f:
    assert f.read() == log

  again = run_cli(command)  # resumed (nothing left to train): appended after the first run's lines
  assert again.returncode == 0, again.stderr[-2000:]
  with open(log_path) as f:
    appended = f.read()
  assert appended.startswith(log) and "hardware.py" in appended[len(log):]

  # --workdir alone: the run's own config (the smoke preset's model, 6 evaluation images), the same mIoU.
  evaluated = run_cli(["-m", "segmentation.evaluate", f"--workdir={workdir}"])
  assert evaluated.returncode == 0, evaluated.stderr[-2000:]
  with open(os.path.join(workdir, "metrics.json")) as f:
    assert json.loads(evaluated.stdout)["miou"] == json.load(f)["eval"]["miou"]
  with open(os.path.join(workdir, "eval", "eval.log")) as f:
    eval_log = f.read()
  assert "config: the run's own" in eval_log
  assert "training runs on" not in eval_log  # the device report says what the command does
  if "GPU: none" in eval_log:
    assert "GPU: none; evaluation runs on the CPU" in eval_log


def test_the_installed_repository_imports_from_any_folder(tmp_path):
  """requirements.txt installs the repository (pyproject.toml): no sys.path patches, but the one that
  puts a repository's root first for its scripts run as files (scripts/repository_root.py)."""
  env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
  modules = ["segmentation.train", "triplet.evaluate", "inception_finetune.train", "scripts.benchmark",
             "scripts.fetch_slim_checkpoint", "scripts.peers.tf_triplet_step"]
  result = subprocess.run([sys.executable, "-c", f"import {', '.join(modules)}"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300, env=env)
  assert result.returncode == 0, result.stderr[-2000:]
  script = subprocess.run([sys.executable, os.path.join(helpers.REPO_ROOT, "scripts", "make_real_sets.py"),
                           "--help"], cwd=tmp_path, capture_output=True, text=True, timeout=300, env=env)
  # absl's own --help (exit 1): the script got past its imports of the repository's modules.
  assert "--output_dir" in script.stdout + script.stderr and "Error" not in script.stderr, script.stderr[-2000:]
  patches = subprocess.run(["git", "grep", "-l", "sys.path", "--", "*.py", ":!tests"],
                           cwd=helpers.REPO_ROOT, capture_output=True, text=True).stdout.split()
  assert patches == ["scripts/repository_root.py"], patches


def test_ctrl_c_in_make_real_sets_is_one_line_and_exit_130(tmp_path):
  """The script imports no TensorFlow and installs no handler of the trainers': Python's Ctrl-C."""
  output_dir = tmp_path / "sets"
  # Started as from a terminal: SIGINT at its default (pytest-xdist's workers ignore it, and an ignored
  # signal stays ignored in their children, where Python then raises no KeyboardInterrupt).
  script = subprocess.Popen([sys.executable, "scripts/make_real_sets.py", f"--output_dir={output_dir}"],
                            cwd=helpers.REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
  deadline = time.monotonic() + 120
  while not (output_dir / "voc").is_dir() and script.poll() is None and time.monotonic() < deadline:
    time.sleep(0.05)  # the first set is being written
  script.send_signal(signal.SIGINT)
  _, stderr = script.communicate(timeout=60)
  assert script.returncode == 128 + signal.SIGINT, stderr[-2000:]
  assert stderr.strip().splitlines() == [
      f"interrupted by SIGINT: {output_dir} holds part of the sets; run the command again to write them whole"]


def test_a_signal_after_the_last_safe_point_says_everything_was_written(capsys, monkeypatch):
  """A signal that arrives once main has returned is not called one of start-up (nothing written)."""
  from absl import app  # pylint: disable=g-import-not-at-top
  from common.app import cli  # pylint: disable=g-import-not-at-top
  from common.runtime import run_log  # pylint: disable=g-import-not-at-top
  from common.runtime import signals  # pylint: disable=g-import-not-at-top

  def main(argv):
    del argv
    signals._received.append(signal.SIGTERM)  # pylint: disable=protected-access  # as the handler records it

  monkeypatch.setattr(app, "run", lambda function, flags_parser: function(["command"]))
  monkeypatch.setattr(run_log, "start", lambda record_filter: None)  # no lines held for a train.log
  monkeypatch.setattr(signals, "finish", lambda what: signals.check(what))  # keep the test's handlers
  try:
    with pytest.raises(SystemExit) as exit_info:
      cli.run(main)
  finally:
    signals._received.clear()  # pylint: disable=protected-access
  assert exit_info.value.code == 128 + signal.SIGTERM
  assert capsys.readouterr().err.strip().splitlines()[-1] == (
      "interrupted by SIGTERM after the run had finished; every output is written")
