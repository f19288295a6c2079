"""Segmentation learns real handwriting (scripts/make_real_sets.py), beyond the all-background baseline.

Both runs are the README's command lines (its real_data/ the session's sets), as a user runs them;
tests/test_readme_commands.py leaves them to this file. They read metrics.json.
"""
import json
import re

import pytest

import helpers

SCENES = "python -m segmentation.train --config=configs/segmentation.py:scenes"
# Its flags: the scenes preset's network without its stem, on the patches padded to 32 (a multiple of its stride 8;
# the padding is ignored), 800 steps of 32.
NPY = "python -m segmentation.train --config=configs/segmentation.py --config.data.source=npy"


def train(start, real_sets, workdir):
  """Runs the README's command line that starts with `start`; returns (metrics.json's eval section, stdout)."""
  args = helpers.readme_command(start, [("real_data/", f"{real_sets}/")], workdir)
  result = helpers.run_python(args, timeout=1200)
  assert result.returncode == 0, result.stderr[-3000:]
  with open(workdir / "metrics.json") as f:
    return json.load(f)["eval"], result.stdout


def final_line_figures(stdout):
  """(mIoU, its all-majority-class baseline) of the run's last line."""
  match = re.search(r"validation mIoU ([0-9.]+) \(all-majority-class ([0-9.]+)\)", stdout)
  return float(match.group(1)), float(match.group(2))


@pytest.mark.slow
def test_scenes_preset_learns_digit_scenes_much_larger_than_a_patch(real_sets, tmp_path):
  """VOC layout, one digit 84-112 px tall per 128x128 scene (3-4x the default 28 px patch), 11 classes."""
  scores, stdout = train(SCENES, real_sets, tmp_path)
  print(f"scenes: mIoU {scores['miou']:.4f} (all-background {scores['chance_miou']:.4f})")
  assert (scores["miou"], scores["chance_miou"]) == pytest.approx(final_line_figures(stdout), abs=1e-4)
  assert scores["chance_miou"] < 0.1
  assert scores["miou"] >= 0.85  # issue 42's target (0.92 measured; seeds 1 and 2 gave 0.86, 0.89)
  # The class names come from the set's class_names.txt, in class order.
  per_class = [key for key in scores if key.startswith("iou/")]
  assert per_class == ["iou/00_background"] + [f"iou/{d + 1:02d}_digit_{d}" for d in range(10)]


@pytest.mark.slow
def test_npy_patches_reach_miou_085(real_sets, tmp_path):
  """28x28 patches of one 18-26 px digit each, 11 classes."""
  scores, _ = train(NPY, real_sets, tmp_path)
  print(f"npy: mIoU {scores['miou']:.4f} (all-background {scores['chance_miou']:.4f})")
  assert scores["chance_miou"] < 0.1
  assert scores["miou"] >= 0.85

