"""The learning-rate schedule's checks: a piecewise schedule without (good) boundaries is one line
before any data is read; a warm-up or a boundary past a phase's end is a warning that says what the
rate does."""
import math

from absl import logging
import pytest

from common.app import cli
from common.nn import optimizers
import helpers
from inception_finetune import task as inception_task
from inception_finetune import train as inception_train
from segmentation import train as segmentation_train
from triplet import train as triplet_train

TRAIN = {"segmentation": segmentation_train, "triplet": triplet_train, "inception_v4": inception_train}


def test_piecewise_without_boundaries_is_one_line_from_the_readme_command(tmp_path, run_cli):
  workdir = tmp_path / "run"
  args = helpers.readme_command("python -m segmentation.train --config=configs/segmentation.py:smoke --workdir",
                                workdir=workdir)
  done = run_cli(args + ["--config.optimizer.schedule=piecewise"])
  lines = done.stderr.strip().splitlines()
  assert done.returncode == 2, done.stderr[-3000:]
  assert [line for line in lines if line.startswith("error: ")] == [lines[-1]], lines
  assert lines[-1].startswith("error: optimizer.boundaries=() must be"), lines[-1]
  assert "optimizer.schedule='piecewise' needs one or more" in lines[-1]
  assert not (workdir / "data").exists()  # the synthetic scenes are not even written


CASES = [(trainer, (), "()") for trainer in TRAIN] + [
    ("segmentation", (20, 10), "(20, 10)"), ("triplet", (0, 5), "(0, 5)")]


@pytest.mark.parametrize("trainer, boundaries, shown", CASES)
def test_piecewise_boundaries_are_checked_before_any_data_is_read(trainer, boundaries, shown, tmp_path, capsys):
  config = helpers.make_config(trainer, **{"optimizer.schedule": "piecewise", "optimizer.boundaries": boundaries})
  workdir = tmp_path / "run"
  capsys.readouterr()
  with pytest.raises(SystemExit) as exit_info:
    cli.run_guarded(TRAIN[trainer].train_and_evaluate, config, str(workdir))
  lines = capsys.readouterr().err.strip().splitlines()
  assert exit_info.value.code == 2
  assert lines[-1].startswith(f"error: optimizer.boundaries={shown} must be increasing positive step "
                              "numbers"), lines
  assert not (workdir / "data").exists()


def test_warmup_and_boundaries_past_a_phase_are_warnings_that_say_what_the_rate_does(caplog):
  """Inception's head phase of 300 steps, then 700 unfrozen: a 500-step warm-up and a boundary at 400
  are cut short in the first phase only."""
  config = helpers.make_config("inception_v4", **{
      "train.num_steps": 1000, "finetune.head_steps": 300, "optimizer.warmup_steps": 500,
      "optimizer.schedule": "piecewise", "optimizer.boundaries": (200, 400), "optimizer.decay_rate": 0.5})
  with caplog.at_level(logging.WARNING):
    inception_task.make_phases(config, None, False)
  assert ("optimizer.warmup_steps=500 is longer than the phase 'head' (300 steps): the rate rises to 60% "
          "of its peak and never reaches it") in caplog.text
  assert ("optimizer.boundaries 400 are at or past the last step of the phase 'head' (300 steps) and "
          "never apply: the rate ends at 50% of its peak, not 25%") in caplog.text
  assert "'unfrozen'" not in caplog.text
  # What the warnings say is what the schedule does at the head phase's last step.
  schedule = optimizers.make_schedule(config.optimizer, 300, 1.0)
  assert math.isclose(float(schedule(299)), 0.6 * 0.5, rel_tol=1e-6)
  # A trainer of one phase names it 'train'.
  caplog.clear()
  segmentation = helpers.make_config("segmentation", **{"optimizer.warmup_steps": 50})
  with caplog.at_level(logging.WARNING):
    optimizers.single_phase(segmentation.train.num_steps, segmentation.optimizer, False)
  assert "optimizer.warmup_steps=50 is longer than the phase 'train' (30 steps): the rate rises to 60%" \
      in caplog.text
  caplog.clear()
  with caplog.at_level(logging.WARNING):
    optimizers.single_phase(50, segmentation.optimizer, False)  # warm-up ends at the last step: fine
  assert "optimizer." not in caplog.text
