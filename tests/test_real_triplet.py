"""The triplet trainer learns real handwriting: held-out identities (scripts/make_real_sets.py)."""
import json
import os

import numpy as np
from PIL import Image
import pytest

import helpers


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
  root = real_sets / "identities"
  workdir = tmp_path / "run"
  result = helpers.run_python([
      "-m", "triplet.train", "--config=configs/triplet.py:small", "--config.data.source=folder",
      f"--config.data.train_dir={root / 'train'}", f"--config.data.eval_dir={root / 'eval'}",
      f"--config.data.pairs_file={root / 'pairs.txt'}", f"--workdir={workdir}"], timeout=900)
  assert result.returncode == 0, result.stderr[-3000:]
  trained = json.loads((workdir / "metrics.json").read_text())["eval"]
  before = json.loads((workdir / "initial_eval.json").read_text())
  for metric in ("recall_at_1", "verification_accuracy"):
    assert trained[metric] > before[metric] + 0.1, (metric, trained, before)
    assert trained[metric] > before[f"raw_pixels/{metric}"], (metric, trained, before)
  # 30 held-out identities of 8 images: chance recall@1 is 7/239.
  assert trained["recall_at_1"] > 10 * 7 / 239
  assert np.isfinite(trained["roc_auc"]) and trained["roc_auc"] > 0.8
