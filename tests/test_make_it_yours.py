"""Segmentation's README, "Make it yours": after its scripts/new_trainer.py line, the config lines
the README shows (another class count and data folder, a wider network) replace those of the copy's
config file, and the copy trains, evaluates and exports with them, in a copy of the repository.

The copy's commands are the README's lines under the session's name (test_new_trainer's NEW and
copy of the repository; its route test installs a copy in a venv, this one edits one)."""
import json
import os
import re
import subprocess
import sys

import numpy as np
from PIL import Image
import pytest

import helpers
import test_new_trainer

README = "segmentation/README.md"


def readme_edits():
  """The `config.<key> = value` lines of the README's "Make it yours" section."""
  section = helpers.read_doc(README).split("## Make it yours", 1)[1].split("\n## ", 1)[0]
  edits = [line for block in re.findall(r"```\n(.*?)```", section, re.S)
           for line in block.splitlines() if line.startswith("config.")]
  assert edits, f"{README}: no config lines in its Make it yours section"
  return edits


def edit_config(path, edits):
  """Each edit replaces the one line of the config file that assigns its key (indent kept)."""
  with open(path, encoding="utf-8") as f:
    lines = f.read().split("\n")
  for edit in edits:
    key = edit.split("=", 1)[0].strip()
    matches = [i for i, line in enumerate(lines) if re.match(rf"\s*{re.escape(key)}\s*=", line)]
    assert len(matches) == 1, f"{path}: {len(matches)} lines assign {key}"
    indent = re.match(r"\s*", lines[matches[0]]).group()
    lines[matches[0]] = indent + edit
  with open(path, "w", encoding="utf-8") as f:
    f.write("\n".join(lines))


def write_folder_set(images_dir, masks_dir, num_classes, count=12, size=48):
  """Images with a rectangle of a class 1..num_classes-1 each on class 0, and their masks of ids."""
  rng = np.random.default_rng(0)
  os.makedirs(images_dir)
  os.makedirs(masks_dir)
  for i in range(count):
    mask = np.zeros((size, size), np.uint8)
    top, left = rng.integers(0, size // 2, 2)
    mask[top:top + size // 2, left:left + size // 2] = 1 + i % (num_classes - 1)
    image = np.stack([mask * 80 + rng.integers(0, 40, mask.shape)] * 3, -1).astype(np.uint8)
    Image.fromarray(image).save(os.path.join(images_dir, f"{i:03d}.png"))
    Image.fromarray(mask).save(os.path.join(masks_dir, f"{i:03d}.png"))


@pytest.mark.slow
def test_the_readme_edits_make_a_copy_with_other_classes_data_and_widths_that_trains_evaluates_and_exports(tmp_path):
  project = tmp_path / "project"
  test_new_trainer.copy_of_the_repository(project)
  new = test_new_trainer.NEW
  example = helpers.readme_command("python scripts/new_trainer.py")[1]
  swap = [(example, new)]
  env = dict(os.environ, PYTHONPATH=str(project), TF_CPP_MIN_LOG_LEVEL="2")

  def run_line(args):
    result = subprocess.run([sys.executable, *args], cwd=project, capture_output=True, text=True, env=env, timeout=900)
    assert result.returncode == 0, (args, result.stderr[-3000:])
    return result.stdout

  run_line(helpers.readme_command("python scripts/new_trainer.py", paths=swap))
  edits = readme_edits()
  edit_config(project / "configs" / f"{new}.py", edits)
  edited = dict(edit.split(" = ", 1) for edit in edits)
  num_classes = int(edited["config.data.num_classes"])
  write_folder_set(project / json.loads(edited["config.data.images_dir"]),
                   project / json.loads(edited["config.data.masks_dir"]), num_classes)

  # The README's train line with the default preset, whose network is the config's own (smoke's
  # preset sets smaller widths), two steps.
  train = helpers.readme_command(f"python -m {example}.train", paths=swap, workdir=f"runs/{new}")
  train = [word.split(":")[0] if word.startswith("--config=") else word for word in train]
  run_line(train + ["--config.train.num_steps=2"])
  config = json.load(open(project / "runs" / new / "config.json"))
  assert config["trainer"] == new and config["data"]["source"] == "folder"
  assert config["data"]["num_classes"] == num_classes
  assert tuple(config["model"]["widths"]) == eval(edited["config.model.widths"])  # pylint: disable=eval-used

  evaluated = run_line(helpers.readme_command(f"python -m {example}.evaluate", paths=swap, workdir=f"runs/{new}"))
  per_class = sorted(set(re.findall(r"iou/class_\d+", evaluated)))
  assert per_class == [f"iou/class_{c:02d}" for c in range(num_classes)], evaluated[-2000:]

  run_line(helpers.readme_command(f"python scripts/export.py --workdir=runs/{example}", paths=swap,
                                  workdir=f"runs/{new}"))
  exported = project / "runs" / new / "exported"
  assert (exported / "assets" / "trainer.txt").read_text() == f"{new}\n"
  assert len((exported / "assets" / "class_names.txt").read_text().split()) == num_classes
