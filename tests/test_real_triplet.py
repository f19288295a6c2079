"""The triplet trainer learns real handwriting: held-out identities (scripts/make_real_sets.py).

The runs are the README's command lines (its real_data/ the session's sets), as a user runs them;
tests/test_readme_commands.py leaves them to this file.
"""
import json
import os

import numpy as np
from PIL import Image
import pytest

import helpers
from scripts import make_real_sets


@pytest.mark.slow
def test_identity_folders_hold_out_identities_and_their_digit_samples(real_sets):
  root = real_sets / "identities"
  train, held_out = set(os.listdir(root / "train")), set(os.listdir(root / "eval"))
  assert len(train) == 70 and len(held_out) == 30 and not train & held_out
  pair_names = set()
  for line in (root / "pairs.txt").read_text().splitlines()[1:]:
    tokens = line.split("\t")
    pair_names.update(tokens[0::2] if len(tokens) == 4 else tokens[:1])
  assert pair_names <= held_out
  train_pixels = {Image.open(path).tobytes() for path in (root / "train").glob("*/*.png")}
  assert not any(Image.open(path).tobytes() in train_pixels for path in (root / "eval").glob("*/*.png"))


@pytest.mark.slow
def test_small_preset_beats_the_untrained_network_and_raw_pixels_on_held_out_identities(real_sets,
                                                                                          tmp_path):
  workdir = tmp_path / "run"
  result = helpers.run_python(helpers.readme_command(
      "python -m triplet.train --config=configs/triplet.py:small", [("real_data/", f"{real_sets}/")], workdir),
      timeout=900)
  assert result.returncode == 0, result.stderr[-3000:]
  trained = json.loads((workdir / "metrics.json").read_text())["eval"]
  before = json.loads((workdir / "initial_eval.json").read_text())
  for metric in ("recall_at_1", "verification_accuracy"):
    assert trained[metric] > before[metric] + 0.1, (metric, trained, before)
    assert trained[metric] > before[f"raw_pixels/{metric}"], (metric, trained, before)
  # 30 held-out identities of 8 images: chance recall@1 is 7/239.
  assert trained["recall_at_1"] > 10 * 7 / 239
  assert np.isfinite(trained["roc_auc"]) and trained["roc_auc"] > 0.8


@pytest.mark.slow
def test_few_preset_on_8_identities_beats_the_untrained_network_and_raw_pixels_and_exports_the_best(
    tmp_path):
  # The few-identities development set: 8 of the 70 training numbers, the same 30 held-out ones.
  root = make_real_sets.write_identities(str(tmp_path), train_identities=8)
  assert len(os.listdir(os.path.join(root, "train"))) == 8
  workdir = tmp_path / "run"
  command = helpers.readme_command("python -m triplet.train --config=configs/triplet.py:few",
                                   [("real_data_few/identities", root)])
  result = helpers.run_python(command + [f"--workdir={workdir}"], timeout=900)
  assert result.returncode == 0, result.stderr[-3000:]
  run = json.loads((workdir / "metrics.json").read_text())
  before = json.loads((workdir / "initial_eval.json").read_text())
  assert run["best"]["metric"] == "verification_accuracy"
  # The exported SavedModel, evaluated on its own, is the best evaluation's model.
  result = helpers.run_python(["-m", "triplet.evaluate", *command[2:], f"--workdir={workdir}",
                               f"--saved_model={workdir / 'saved_model'}",
                               f"--report_dir={tmp_path / 'report'}"], timeout=300)
  assert result.returncode == 0, result.stderr[-3000:]
  exported = json.loads(result.stdout[result.stdout.index("{"):])
  assert exported["verification_accuracy"] == pytest.approx(run["best"]["value"], abs=1e-5)
  # The best is chosen on these held-out pairs, so the last evaluation must beat the baselines too.
  for metric in ("recall_at_1", "verification_accuracy"):
    for trained in (exported[metric], run["eval"][metric]):
      assert trained > max(before[metric], before[f"raw_pixels/{metric}"]) + 0.05, (metric, run, before)
