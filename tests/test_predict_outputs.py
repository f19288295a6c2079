"""What the predict commands write is their own: a file that exists where an output would go (a
user's ground-truth img_mask.png, an earlier run's mask, a CSV or .npy) is one line before the model
loads and is left as it was; two photos of one name stem are one line; a folder predicted into
itself is not read back as photos; a photo over --max_pixels among others is named and left out,
the others predicted. The command lines of issue 50 run as written in the slow test at the end."""
import hashlib
import os

import numpy as np
from PIL import Image
import pytest

from common.app import predict as predict_lib
from common.contract import config as config_lib
import helpers
from inception_finetune import predict as inception_predict
from segmentation import data as segmentation_data
from segmentation import predict as segmentation_predict
from segmentation import task as segmentation_task
from test_predict import command_line  # pylint: disable=unused-import  # the autouse fixture
from test_predict import error_line, segmentation_run, stand_in_saved_model, stopped
from triplet import predict as triplet_predict

OUTPUTS = segmentation_predict.OUTPUTS


def photo(path, seed=0, size=(24, 32)):
  Image.fromarray(np.random.default_rng(seed).integers(0, 255, (*size, 3)).astype(np.uint8)).save(path)
  return str(path)


def digests(folder):
  """{name: sha256} of a folder's files."""
  return {name: hashlib.sha256((folder / name).read_bytes()).hexdigest() for name in sorted(os.listdir(folder))}


def exists_line(path, flag="--output_dir"):
  return (f"error: {path} exists; predict writes only new files, never over a user's or an earlier run's: "
          f"choose another {flag}, or move the file away")


def test_predict_never_writes_over_a_file_or_reads_its_own_outputs(tmp_path, capsys):
  """Segmentation's three PNGs where the user's ground truth stands, photos of one stem (in two folders,
  or two formats), a folder predicted into itself twice; triplet's .npy, .tsv and CSV and Inception's
  CSV where a file stands: one line each before the model loads, every file as it was (sha256)."""
  config, run = segmentation_run(tmp_path)
  truth = tmp_path / "truth"
  truth.mkdir()
  image = photo(truth / "img00.jpg")
  for suffix in ("_mask.png", "_overlay.png"):
    Image.new("P", (32, 24), 1).save(truth / f"img00{suffix}")
  before = digests(truth)
  assert error_line(capsys, segmentation_predict.predict_files, [image], str(truth), config, workdir=run) == (
      exists_line(truth / "img00_mask.png"))
  assert digests(truth) == before
  # Photos of one stem: one line naming both, nothing made.
  for name, other in (("a/img.jpg", "b/img.jpg"), ("c/img.jpg", "c/img.png")):
    for path in (name, other):
      (tmp_path / path).parent.mkdir(exist_ok=True)
      photo(tmp_path / path)
    out = tmp_path / f"out_{name[0]}"
    line = error_line(capsys, segmentation_predict.predict_files, [str(tmp_path / name), str(tmp_path / other)],
                      str(out), config, workdir=run)
    assert line == (f"error: {tmp_path / name} and {tmp_path / other} would both write {out / 'img'}_mask.png: "
                    "predict photos of one name stem into separate --output_dir folders"), line
    assert not out.exists()
  # A folder into itself: 3 photos and their 9 outputs; the outputs are not read back as photos, into
  # another folder or into itself again (refused: they exist).
  folder = tmp_path / "own"
  folder.mkdir()
  photos = [photo(folder / f"p{i}.png", seed=i) for i in range(3)]
  assert segmentation_predict.predict_files([str(folder)], str(folder), config, workdir=run) == [
      f"{os.path.splitext(p)[0]}_mask.png" for p in photos]
  assert len(os.listdir(folder)) == 12
  segmentation_predict.predict_files([str(folder)], str(tmp_path / "again"), config, workdir=run)
  assert len(os.listdir(tmp_path / "again")) == 9  # not 36: the 9 outputs were not read as photos
  before = digests(folder)
  assert error_line(capsys, segmentation_predict.predict_files, [str(folder)], str(folder), config,
                    workdir=run) == exists_line(folder / "p0_mask.png")
  assert digests(folder) == before
  # Triplet's and Inception's files: the .npy, its .tsv, the CSV.
  saved_model, triplet = stand_in_saved_model(tmp_path), helpers.make_config("triplet", "smoke")
  kept = tmp_path / "kept"
  kept.mkdir()
  for name in ("e.npy", "f.tsv", "found.csv", "top.csv"):
    (kept / name).write_text("the user's\n")
  before = digests(kept)
  for call, said in (
      (lambda: triplet_predict.run([image], triplet, saved_model=saved_model, embed_path=str(kept / "e.npy")),
       exists_line(kept / "e.npy", "--embed_to")),
      (lambda: triplet_predict.run([image], triplet, saved_model=saved_model, embed_path=str(kept / "f.npy")),
       exists_line(kept / "f.tsv", "--embed_to")),
      (lambda: triplet_predict.run([image], triplet, saved_model=saved_model, gallery=str(folder),
                                   output=str(kept / "found.csv")), exists_line(kept / "found.csv", "--output")),
      (lambda: inception_predict.classify([image], helpers.make_config("inception_v4", "smoke"),
                                          saved_model=saved_model, output=str(kept / "top.csv")),
       exists_line(kept / "top.csv", "--output"))):
    assert error_line(capsys, call) == said
  assert digests(kept) == before


def test_a_folder_with_an_oversize_photo_predicts_the_others_and_names_it(tmp_path, capsys):
  """A photo over --max_pixels among good ones is named in its line and left out, the others' masks
  written, then exit 2 saying how many; all of them over it: each named, before the model loads."""
  config, run = segmentation_run(tmp_path)
  folder = tmp_path / "photos"
  folder.mkdir()
  good = photo(folder / "a.png")
  Image.new("1", (4000, 3000)).save(folder / "big.png")  # over the smoke preset's 8,388,608
  out = tmp_path / "masks"
  _, lines = stopped(capsys, segmentation_predict.predict_files, [str(folder)], str(out), config, workdir=run)
  assert lines == [
      f"error: {folder / 'big.png'}: 3000x4000 is 12,000,000 pixels, more than --max_pixels=8,388,608, the bound "
      "on the memory of one whole image; resize it or raise --max_pixels, or set eval.window to evaluate it in tiles",
      f"error: 1 of 2 photos did not read (each named above); the masks of the other 1 are in {out}"], lines
  assert sorted(os.listdir(out)) == [f"a{suffix}" for suffix in sorted(OUTPUTS)]
  assert os.path.getsize(good)
  _, lines = stopped(capsys, segmentation_predict.predict_files, [str(folder / "big.png")] * 2,
                     str(tmp_path / "none"), config, saved_model=stand_in_saved_model(tmp_path))
  assert len(lines) == 3 and lines[-1] == ("error: all 2 photos are over --max_pixels (each named above); "
                                           "nothing was written"), lines
  assert not (tmp_path / "none").exists()


def test_a_large_photos_overlay_is_drawn_within_its_box(tmp_path, monkeypatch):
  """Windowed predict of a photo larger than the overlay's box: the class ids at the photo's size,
  the overlay (photo and prediction side by side) fitted into the box."""
  config, run = segmentation_run(tmp_path)
  for key, value in (("eval.window", 64), ("eval.stride", 48)):
    config_lib.set_value(config, key, value)
  monkeypatch.setattr(segmentation_predict, "OVERLAY_SIDE", 300)
  segmentation_predict.predict_files([photo(tmp_path / "p.png", size=(200, 400))], str(tmp_path / "out"), config,
                                     workdir=run)
  with Image.open(tmp_path / "out" / "p_classes.png") as ids, Image.open(tmp_path / "out" / "p_overlay.png") as overlay:
    # Two panels of 300 (not 400) side by side, and a small gap.
    assert ids.size == (400, 200) and 600 <= overlay.size[0] < 700, overlay.size


def test_only_the_photos_own_outputs_are_left_out_of_a_folder():
  paths = ["d/x.jpg", "d/x_mask.png", "d/x_overlay.png", "d/y_mask.png", "e/x_classes.png"]
  assert predict_lib._without_outputs(paths, OUTPUTS) == ["d/x.jpg", "d/y_mask.png", "e/x_classes.png"]  # pylint: disable=protected-access


@pytest.mark.slow  # three command lines: TensorFlow's start-up each
def test_the_issues_command_lines_leave_the_users_files_as_they_were(tmp_path):
  """Issue 50's command lines as written: predict --saved_model=W/saved_model --output_dir=D D/img00.jpg
  beside the user's img00_mask.png and img00_overlay.png; two photos of one stem; a folder into
  itself twice. Each refused in one line, exit 2, every file's sha256 as before."""
  config = helpers.make_config("segmentation", "smoke")
  settings = segmentation_data.read_settings(config.data)
  saved_model = str(tmp_path / "W" / "saved_model")
  segmentation_task.export_model(segmentation_task.build_model(config, settings), saved_model,
                                 segmentation_task.pad_multiple(config),
                                 [str(c) for c in range(settings.source.num_classes)])
  folder = tmp_path / "D"
  folder.mkdir()
  photo(folder / "img00.jpg")
  for suffix in ("_mask.png", "_overlay.png"):
    Image.new("P", (32, 24), 1).save(folder / f"img00{suffix}")
  for name in ("a/img.jpg", "b/img.jpg"):
    (tmp_path / name).parent.mkdir()
    photo(tmp_path / name)
  own = tmp_path / "own"
  own.mkdir()
  for i in range(3):
    photo(own / f"img{i:02d}.png", seed=i)
  (tmp_path / "O").mkdir()

  def predict(output_dir, *photos):
    return helpers.run_python(["-m", "segmentation.predict", f"--saved_model={saved_model}",
                               f"--output_dir={output_dir}", *map(str, photos)])

  # The folder's first run into itself (in this interpreter: a fourth start-up would add 20 s).
  segmentation_predict.predict_files([str(own)], str(own), config, saved_model=saved_model)
  assert len(os.listdir(own)) == 12
  before = {path: digests(path) for path in (folder, own, tmp_path / "O")}
  for args, said in (((folder, folder / "img00.jpg"), exists_line(folder / "img00_mask.png")),
                     ((tmp_path / "O", tmp_path / "a/img.jpg", tmp_path / "b/img.jpg"),
                      f"error: {tmp_path / 'a/img.jpg'} and {tmp_path / 'b/img.jpg'} would both write "
                      f"{tmp_path / 'O/img'}_mask.png: predict photos of one name stem into separate --output_dir "
                      "folders"),
                     ((own, own), exists_line(own / "img00_mask.png"))):
    result = predict(*args)
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert result.returncode == 2 and errors == [said] and "Traceback" not in result.stderr, result.stderr[-2000:]
  assert {path: digests(path) for path in before} == before
