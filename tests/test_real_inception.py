"""Inception V4 from random weights on real handwriting (scripts/make_real_sets.py's classes): the
README's `scratch` command line (its real_data/ the session's sets) with fewer steps;
tests/test_readme_commands.py leaves it to this file."""
import json

import pytest

import helpers

STEPS = 16  # the point is the recalibrated statistics, not how far 16 or 40 steps learn


@pytest.mark.slow
def test_scratch_preset_evaluates_the_network_it_trained_without_touching_batch_norm(real_sets, tmp_path):
  # TF-Slim's decay 0.9997 left the moving statistics at their initial values: evaluation losses of
  # 1e7-6e7 against a training loss of 2.3 after 50-200 steps. The recalibrated statistics give an
  # evaluation loss near the training loss from the first evaluation on.
  workdir = tmp_path / "run"
  flags = [f"--config.train.num_steps={STEPS}", f"--config.finetune.head_steps={STEPS}",
           f"--config.train.eval_every={STEPS}", f"--config.train.log_every={STEPS // 2}"]
  command = helpers.readme_command("python -m inception_finetune.train --config=configs/inception_v4.py:scratch",
                                   [("real_data/", f"{real_sets}/")], workdir)
  result = helpers.run_python(command + flags, timeout=900)
  assert result.returncode == 0, result.stderr[-3000:]
  assert "BatchNorm: 149 of 149 layers start from random weights" in result.stderr
  assert "EVALUATION LOSS" not in result.stderr
  metrics = json.loads((workdir / "metrics.json").read_text())
  scores, train_loss = metrics["eval"], metrics["train"]["loss"]
  assert scores["loss"] < 2 * train_loss, (scores, train_loss)
  assert scores["chance_top1_uniform"] == 0.1
  assert scores["chance_top1_majority"] < 0.15  # the digits are about balanced
  assert (f"eval top-1 {scores['top1']:.4f} (chance: majority class "
          f"{scores['chance_top1_majority']:.4f}, uniform 0.1000)") in result.stdout
  # Scoring the checkpoint by --workdir alone reads the statistics the run recalibrated into it (no
  # training image): the same figures.
  evaluated = helpers.run_python(["-m", "inception_finetune.evaluate", f"--workdir={workdir}"])
  assert evaluated.returncode == 0, evaluated.stderr[-3000:]
  assert "the recalibrated BatchNorm statistics loaded" in evaluated.stderr
  again = json.loads(evaluated.stdout)
  assert again["top1"] == scores["top1"], (again, scores)
  assert abs(again["loss"] - scores["loss"]) < 1e-4 * scores["loss"], (again, scores)
