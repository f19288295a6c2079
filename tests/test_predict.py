"""The trainers' predict commands, in one interpreter: a photo stored turned with EXIF orientation 6
predicts as the upright photo does (segmentation's mask, Inception's classes, triplet's embedding);
triplet's compare uses the verification threshold the run chose, from metrics.json (--workdir) and
from the SavedModel (--saved_model); bad files and flags are one line; a bad photo among good ones is
named and left out (the others get their results, then exit 2), one over --max_pixels refused
before the model loads, and a command that stops before writing leaves no folder it made. The
README's command lines run in tests/test_readme_commands.py."""
import json
import os
import shutil
import signal
import sys
import warnings

import numpy as np
from PIL import Image
import pytest
import tensorflow as tf

from common.app import cli
from common.app import export as export_lib
from common.app import predict as predict_lib
from common.contract import config as config_lib
from common.data import class_labels
from common.data import photos
from common.runtime import signals
from common.training import checkpoints
import helpers
from inception_finetune import predict as inception_predict
from segmentation import data as segmentation_data
from segmentation import predict as segmentation_predict
from segmentation import task as segmentation_task
from triplet import predict as triplet_predict

EXIF_ORIENTATION = 0x0112


@pytest.fixture(autouse=True)
def command_line(monkeypatch):
  """The command line of `predict --workdir=W` (run_config reads --config arguments from it)."""
  monkeypatch.setattr(sys, "argv", ["predict"])


def write_photos(root, height=48, width=64, seed=0):
  """(upright.png, turned.jpg, stored.png): a photo with a bright corner, the same stored turned 90
  degrees with EXIF orientation 6 (a viewer shows it upright), and turned.jpg's stored pixels as
  they are. The upright PNG holds exactly the pixels a viewer shows of the JPEG."""
  rng = np.random.default_rng(seed)
  pixels = rng.integers(0, 120, (height, width, 3)).astype(np.uint8)
  pixels[:height // 3, :width // 4] = 250  # top-left: shows which way up the photo is
  exif = Image.Exif()
  exif[EXIF_ORIENTATION] = 6
  Image.fromarray(pixels).transpose(Image.Transpose.ROTATE_90).save(root / "turned.jpg", exif=exif, quality=95)
  with Image.open(root / "turned.jpg") as turned:
    stored = np.asarray(turned.convert("RGB"))
  Image.fromarray(stored).save(root / "stored.png")
  upright = np.rot90(stored, k=-1)  # orientation 6: turn the stored pixels 90 degrees clockwise
  Image.fromarray(upright).save(root / "upright.png")
  assert upright.shape[:2] == (height, width)
  return [str(root / name) for name in ("upright.png", "turned.jpg", "stored.png")]


def write_run(trainer, workdir, model, config, directory="checkpoints"):
  config_lib.write_config(config, str(workdir))
  tf.train.CheckpointManager(tf.train.Checkpoint(model=model), str(workdir / directory),
                             max_to_keep=1).save(checkpoint_number=7)


def error_line(capsys, function, *args, **kwargs):
  """The last `error:` line of function(*args, **kwargs) behind the commands' guard, exit 2."""
  return stopped(capsys, function, *args, **kwargs)[1][-1]


def stopped(capsys, function, *args, **kwargs):
  """(stdout, the stderr lines) of function(*args, **kwargs) behind the commands' guard, which ends
  it with exit code 2 and an `error:` line."""
  capsys.readouterr()
  with pytest.raises(SystemExit) as exit_info:
    cli.run_guarded(lambda: function(*args, **kwargs))
  captured = capsys.readouterr()
  lines = captured.err.strip().splitlines()
  assert exit_info.value.code == 2 and lines[-1].startswith("error: "), lines
  return captured.out, lines


def photo_folder(root):
  """(folder, its good photos, its bad ones): two small photos around a file of 0 bytes, a JPEG cut
  short and a text file named .jpg (in this order: sorted, as a folder is read)."""
  folder = root / "photos"
  folder.mkdir()
  rng = np.random.default_rng(1)
  for name in ("a.png", "z.jpg"):
    Image.fromarray(rng.integers(0, 255, (24, 32, 3)).astype(np.uint8)).save(folder / name)
  (folder / "b_empty.jpg").write_bytes(b"")
  (folder / "c_cut.jpg").write_bytes((folder / "z.jpg").read_bytes()[:300])
  (folder / "d_text.jpg").write_text("not a photo\n")
  return (str(folder), [str(folder / name) for name in ("a.png", "z.jpg")],
          [str(folder / name) for name in ("b_empty.jpg", "c_cut.jpg", "d_text.jpg")])


def assert_bad_photos_named(lines, bad, last):
  """lines: one `error:` line naming each bad photo, in order, then `last`."""
  assert len(lines) == len(bad) + 1 and lines[-1] == last, lines
  for line, path in zip(lines, bad):
    assert line.startswith(f"error: {path}: does not decode as an image ("), (path, lines)


def stand_in_saved_model(root):
  """A folder that passes the checks made before a SavedModel loads (its saved_model.pb empty):
  loading it fails, so a line that comes first is the one a command gives."""
  folder = root / "stand_in_saved_model"
  folder.mkdir()
  (folder / "saved_model.pb").write_bytes(b"")
  return str(folder)


def segmentation_run(root):
  """(config, workdir) of an untrained smoke segmentation run: its config.json and a checkpoint."""
  config = helpers.make_config("segmentation", "smoke")
  tf.keras.utils.set_random_seed(0)
  write_run("segmentation", root / "run",
            segmentation_task.build_model(config, segmentation_data.read_settings(config.data)), config)
  return cli.run_config(type("Flag", (), {"value": config}), str(root / "run")), str(root / "run")


def test_segmentation_predicts_an_exif_photo_as_shown(tmp_path, caplog):
  config, run = segmentation_run(tmp_path)
  upright, turned, stored = write_photos(tmp_path)
  with caplog.at_level("INFO"):
    segmentation_predict.predict_files([upright, turned, stored], str(tmp_path / "out"), config, workdir=run)
  masks = {name: np.array(Image.open(tmp_path / "out" / f"{name}_classes.png"))
           for name in ("upright", "turned", "stored")}
  assert masks["turned"].shape == (48, 64) and masks["stored"].shape == (64, 48)
  np.testing.assert_array_equal(masks["turned"], masks["upright"])
  assert f"{turned}: EXIF orientation 6, turned upright as a viewer shows it" in caplog.text
  assert "EXIF orientation applied (PIL's ImageOps.exif_transpose)" in caplog.text
  assert sorted(p.name for p in (tmp_path / "out").iterdir()) == sorted(
      f"{name}_{kind}.png" for name in masks for kind in ("classes", "mask", "overlay"))


def test_segmentation_writes_every_good_photos_masks_and_names_each_bad_one(tmp_path, capsys):
  """A 0-byte file, a JPEG cut short and a text file named .jpg among good photos: one line each,
  the good ones' masks written, then a line saying how many were done (exit 2). A command whose
  every photo is bad writes nothing, and makes no folder."""
  config, run = segmentation_run(tmp_path)
  folder, _, bad = photo_folder(tmp_path)
  out = tmp_path / "masks"
  _, lines = stopped(capsys, segmentation_predict.predict_files, [folder], str(out), config, workdir=run)
  assert_bad_photos_named(lines, bad, f"error: 3 of 5 photos did not read (each named above); the masks of "
                                      f"the other 2 are in {out}")
  assert sorted(os.listdir(out)) == sorted(f"{name}_{kind}.png" for name in ("a", "z")
                                           for kind in ("classes", "mask", "overlay"))
  _, lines = stopped(capsys, segmentation_predict.predict_files, bad[:1], str(tmp_path / "new" / "masks"),
                     config, workdir=run)
  assert len(lines) == 1 and lines[0].startswith(f"error: {bad[0]}: does not decode as an image"), lines
  _, lines = stopped(capsys, segmentation_predict.predict_files, bad[1:], str(tmp_path / "new" / "masks"),
                     config, workdir=run)
  assert_bad_photos_named(lines, bad[1:], "error: none of the 2 photos read (each named above); nothing was "
                                          "written")
  assert not (tmp_path / "new").exists()


@pytest.fixture(scope="module")
def inception_run(module_tmp, inception_smoke_checkpoint):
  """An Inception V4 run as fine-tuning from a TF-Slim checkpoint leaves it (its BatchNorm layers
  restored, so no calibration), untrained: config.json, labels.txt, a checkpoint (a copy of the
  session's, tests/conftest.py: the smoke preset's network seeded 0)."""
  workdir = module_tmp("inception")
  config = helpers.make_config("inception_v4", "smoke", checkpoint_path="inception_v4.ckpt")
  names = [f"breed_{i}" for i in range(config.data.num_classes)]
  config_lib.write_config(config, str(workdir))
  shutil.copytree(inception_smoke_checkpoint(), workdir / "checkpoints")
  (workdir / "labels.txt").write_text(class_labels.labels_file_text(names))
  return workdir, config, names


@pytest.mark.slow  # an Inception V4 or a trained triplet run: seconds
def test_inception_classifies_an_exif_photo_as_shown_and_writes_the_csv(inception_run, tmp_path, capsys):
  workdir, config, names = inception_run
  upright, turned, stored = write_photos(tmp_path, 90, 120)
  output = tmp_path / "top.csv"
  rows = inception_predict.classify([upright, turned, stored], config, workdir=str(workdir),
                                    top_k=len(names), output=str(output))
  table = capsys.readouterr().out
  print(table)
  ranked = {path: [row for row in rows if row[0] == path] for path in (upright, turned, stored)}
  assert [row[1] for row in ranked[turned]] == list(range(1, len(names) + 1))
  assert ranked[turned][0][2:4] == ranked[upright][0][2:4]  # the top-1 class id and name
  assert all(row[3] == names[row[2]] for row in rows)
  # Every class's probability as the upright photo's; the stored pixels (turned) are another input.
  by_class = {path: np.array([row[4] for row in sorted(found, key=lambda row: row[2])])
              for path, found in ranked.items()}
  assert by_class[turned].sum() == pytest.approx(1, abs=1e-5)
  same = np.abs(by_class[turned] - by_class[upright]).max()
  assert same < 1e-6 and np.abs(by_class[stored] - by_class[upright]).max() > 10 * max(same, 1e-7)
  # The table: a header and a row per class of each photo, as the CSV has them.
  lines = table.strip().splitlines()
  assert lines[0].split() == ["image", "rank", "class_id", "class_name", "probability"]
  assert len(lines) == 1 + 3 * len(names)
  assert lines[1].split() == [upright, "1", str(rows[0][2]), rows[0][3], f"{rows[0][4]:.4f}"]
  written = output.read_text().splitlines()
  assert written[0] == "image,rank,class_id,class_name,probability" and len(written) == len(lines)
  assert written[1].split(",") == [upright, "1", str(rows[0][2]), rows[0][3], repr(rows[0][4])]


@pytest.fixture(scope="module")
def triplet_run(triplet_smoke_run):
  """The smoke preset trained (20 steps), with its metrics.json and SavedModel: the session's run
  (tests/conftest.py), which these tests only read."""
  return triplet_smoke_run.workdir, triplet_smoke_run.config, triplet_smoke_run.results


@pytest.mark.slow  # the triplet smoke run trains first
def test_triplet_compare_uses_the_runs_threshold_from_the_workdir_and_the_saved_model(triplet_run, tmp_path, capsys):
  workdir, config, results = triplet_run
  threshold = json.loads((workdir / "metrics.json").read_text())["eval"]["verification_threshold"]
  assert threshold == results["eval"]["verification_threshold"]
  step = results["eval"]["step"]
  upright, turned, _ = write_photos(tmp_path)
  sources = {"workdir": f"from {workdir / 'metrics.json'}, the run's verification pairs at step {step}",
             "saved_model": f"from the SavedModel, the run's verification pairs at step {step}"}
  distances = {}
  for source, said in sources.items():
    model = {source: str(workdir / "saved_model") if source == "saved_model" else str(workdir)}
    embedder = (triplet_predict.load_saved_model(model[source]) if source == "saved_model"
                else triplet_predict.load_workdir(str(workdir), config))
    assert embedder.threshold == pytest.approx(threshold, abs=1e-5), source
    capsys.readouterr()
    distances[source] = triplet_predict.run([upright, turned], config, compare_two=True, **model)
    out = capsys.readouterr().out
    print(out)
    assert f"threshold {threshold:.4f} ({said}): a pair is the same identity below it" in out, out
    assert out.strip().splitlines()[-1].split() == [upright, turned, f"{distances[source]:.4f}", "same"]
  # The EXIF photo is the upright one to the network, from the checkpoint and from the export alike.
  assert distances["workdir"] < 1e-4 and distances["saved_model"] < 1e-4
  # --threshold instead of the run's.
  capsys.readouterr()
  triplet_predict.run([upright, turned], config, workdir=str(workdir), compare_two=True, threshold=2.0)
  out = capsys.readouterr().out
  assert "threshold 2.0000 (from --threshold)" in out and out.strip().split()[-1] == "same"


@pytest.mark.slow  # the triplet smoke run trains first
def test_triplet_embeds_to_npy_and_searches_a_gallery(triplet_run, tmp_path, capsys):
  workdir, config, _ = triplet_run
  upright, turned, stored = write_photos(tmp_path)
  gallery = tmp_path / "gallery"
  gallery.mkdir()
  for i, path in enumerate((upright, stored)):
    Image.open(path).save(gallery / f"g{i}.png")
  saved_model = str(workdir / "saved_model")
  embeddings = triplet_predict.run([str(tmp_path / "turned.jpg"), str(gallery)], config,
                                   saved_model=saved_model, embed_path=str(tmp_path / "out" / "e.npy"))
  np.testing.assert_array_equal(np.load(tmp_path / "out" / "e.npy"), embeddings)
  assert embeddings.shape == (3, config.model.embedding_size) and embeddings.dtype == np.float32
  assert (tmp_path / "out" / "e.tsv").read_text() == (
      f"row\tfile\n0\t{turned}\n1\t{gallery / 'g0.png'}\n2\t{gallery / 'g1.png'}\n")
  np.testing.assert_allclose(embeddings[0], embeddings[1], atol=1e-5)  # the EXIF photo as shown
  assert np.linalg.norm(embeddings[0] - embeddings[2]) > 1e-3  # not as stored
  capsys.readouterr()
  rows = triplet_predict.run([turned], config, saved_model=saved_model, gallery=str(gallery), top_k=1,
                             output=str(tmp_path / "found.csv"))
  print(capsys.readouterr().out)
  assert [row[:3] for row in rows] == [[turned, 1, str(gallery / "g0.png")]]
  assert (tmp_path / "found.csv").read_text().splitlines()[1].startswith(f"{turned},1,{gallery / 'g0.png'},")


@pytest.mark.slow  # the triplet smoke run trains first
def test_bad_photos_and_flags_are_one_line(triplet_run, tmp_path, capsys):
  workdir, config, _ = triplet_run
  upright, _, _ = write_photos(tmp_path)
  (tmp_path / "broken.jpg").write_bytes(b"\xff\xd8 not a jpeg")
  (tmp_path / "empty").mkdir()
  run = triplet_predict.run
  not_compared = "error: 1 of 2 photos did not read (each named above); nothing was compared"
  cases = [  # (the call, what its line says, or its lines)
      (lambda: run([upright, str(tmp_path / "broken.jpg")], config, workdir=str(workdir), compare_two=True),
       [f"error: {tmp_path / 'broken.jpg'}: does not decode as an image", not_compared]),
      (lambda: run([upright, str(tmp_path / "missing.png")], config, workdir=str(workdir), compare_two=True),
       [f"error: {tmp_path / 'missing.png'}: no such file", not_compared]),
      (lambda: run([str(tmp_path / "empty")], config, workdir=str(workdir), embed_path="e.npy"),
       f"error: {tmp_path / 'empty'}: no files ending in"),
      (lambda: run([upright], config, workdir=str(workdir), compare_two=True),
       "error: --compare takes two photos, got 1"),
      (lambda: run([upright], config, workdir=str(workdir)), "error: give one of --embed_to=FILE.npy"),
      (lambda: run([upright, upright], config, saved_model=str(tmp_path / "nothing"), compare_two=True),
       f"error: SavedModel {tmp_path / 'nothing'} does not exist"),
      (lambda: run([upright], config, workdir=str(tmp_path), gallery=str(tmp_path)),
       f"error: no checkpoint in {checkpoints.checkpoint_dir(str(tmp_path))}"),
  ]
  for call, said in cases:
    said = said if isinstance(said, list) else [said]
    lines = stopped(capsys, call)[1][-len(said):]
    assert all(line.startswith(start) for line, start in zip(lines, said)), (said, lines)
  assert not (tmp_path / "e.npy").exists()


@pytest.mark.slow  # an Inception V4 and the triplet smoke run
def test_inception_and_triplet_give_every_good_photos_result_and_name_each_bad_one(
    inception_run, triplet_run, tmp_path, capsys):
  """As segmentation's masks: the good photos' classes (table and CSV), embeddings (.npy and .tsv)
  and gallery matches, a line per bad photo, then one saying how many were done (exit 2); --compare
  needs both photos."""
  folder, good, bad = photo_folder(tmp_path)
  workdir, config, _ = inception_run
  table = tmp_path / "top.csv"
  out, lines = stopped(capsys, inception_predict.classify, [folder], config, workdir=str(workdir), top_k=1,
                       output=str(table))
  assert_bad_photos_named(lines, bad, f"error: 3 of 5 photos did not read (each named above); the classes "
                                      f"of the other 2 are above and in {table}")
  assert [line.split()[0] for line in out.strip().splitlines()] == ["image", *good]
  assert [row.split(",")[0] for row in table.read_text().splitlines()] == ["image", *good]
  workdir, config, _ = triplet_run
  saved_model = str(workdir / "saved_model")
  embeddings = tmp_path / "e.npy"
  _, lines = stopped(capsys, triplet_predict.run, [folder], config, saved_model=saved_model,
                     embed_path=str(embeddings))
  assert_bad_photos_named(lines, bad, f"error: 3 of 5 photos did not read (each named above); the embeddings "
                                      f"of the other 2 are in {embeddings}, their files in {tmp_path / 'e.tsv'}")
  assert np.load(embeddings).shape == (2, config.model.embedding_size)
  assert (tmp_path / "e.tsv").read_text() == f"row\tfile\n0\t{good[0]}\n1\t{good[1]}\n"
  out, lines = stopped(capsys, triplet_predict.run, [good[1], bad[0]], config, saved_model=saved_model,
                       gallery=folder, top_k=5)
  assert_bad_photos_named(lines, bad + bad[:1], "error: 4 of 7 photos did not read (each named above); the "
                                                "table above holds 1 of the 2 queries, matched among 2 of the "
                                                "gallery's 5 photos")
  assert [row.split()[:3] for row in out.strip().splitlines()[2:]] == [[good[1], "1", good[1]],
                                                                       [good[1], "2", good[0]]]
  _, lines = stopped(capsys, triplet_predict.run, [good[0], bad[0]], config, saved_model=saved_model,
                     compare_two=True)
  assert_bad_photos_named(lines, bad[:1], "error: 1 of 2 photos did not read (each named above); nothing was "
                                          "compared")


def over_max_pixels(path, size, pixels, bound, tiles=""):
  """The line of a photo over --max_pixels (segmentation's names the key that would tile it)."""
  return (f"error: {path}: {size} is {pixels} pixels, more than --max_pixels={bound}, the bound on the memory "
          f"of one whole image; resize it or raise --max_pixels{tiles}")


def test_a_photo_over_max_pixels_is_one_line_for_every_predict_before_the_model_loads(tmp_path, capsys,
                                                                                        monkeypatch):
  """A 12000x12000 photo, over PIL's own bound (whose DecompressionBombWarning no command lets out),
  given alone (among others it is named and left out: test_a_folder_with_an_oversize_photo_...):
  every predict refuses it from its header before the model loads (a stand-in that would not load),
  by --max_pixels (segmentation's default data.eval_max_pixels, the others' PIL's bound), and makes
  nothing. The bound takes the place of PIL's: a photo under it is read."""
  huge, gallery, out = tmp_path / "huge.png", tmp_path / "gallery", tmp_path / "out"
  Image.new("1", (12000, 12000)).save(huge)  # 1 bit a pixel: quick to write
  gallery.mkdir()
  shutil.copy(huge, gallery)
  photo = write_photos(tmp_path)[0]  # 48x64
  saved_model = stand_in_saved_model(tmp_path)
  triplet = helpers.make_config("triplet", "smoke")
  cases = [  # (the call, its line)
      (lambda: segmentation_predict.predict_files([str(huge)], str(out / "masks"),
                                                  helpers.make_config("segmentation", "smoke"),
                                                  saved_model=saved_model),
       over_max_pixels(huge, "12000x12000", "144,000,000", "8,388,608",
                       ", or set eval.window to evaluate it in tiles")),
      (lambda: inception_predict.classify([str(huge)], helpers.make_config("inception_v4", "smoke"),
                                          saved_model=saved_model, output=str(out / "top.csv")),
       over_max_pixels(huge, "12000x12000", "144,000,000", "89,478,485")),
      (lambda: triplet_predict.run([str(huge)], triplet, saved_model=saved_model,
                                   embed_path=str(out / "e.npy")),
       over_max_pixels(huge, "12000x12000", "144,000,000", "89,478,485")),
      (lambda: triplet_predict.run([photo], triplet, saved_model=saved_model, gallery=str(gallery)),
       over_max_pixels(gallery / "huge.png", "12000x12000", "144,000,000", "89,478,485")),
      (lambda: triplet_predict.run([photo], triplet, saved_model=saved_model, embed_path=str(out / "e.npy"),
                                   max_pixels=3000),
       over_max_pixels(photo, "48x64", "3,072", "3,000")),
  ]
  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    for call, said in cases:
      assert stopped(capsys, call)[1] == [said]
  assert not [w for w in caught if issubclass(w.category, Image.DecompressionBombWarning)]
  assert not out.exists()
  monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 1000)  # PIL would refuse the photo (twice as many)
  with warnings.catch_warnings():
    warnings.simplefilter("error")
    assert photos.read_photo(photo, 3072)[0].shape == (48, 64, 3)
  assert Image.MAX_IMAGE_PIXELS == 1000


def test_every_predict_command_has_max_pixels_and_no_pil_warning_reaches_the_user(tmp_path):
  """--max_pixels is defined once for the three predict commands: Inception refuses a 12000x12000
  photo by its default (PIL's bound, whose DecompressionBombWarning is not printed), triplet takes
  the flag; before the model loads, nothing made."""
  huge, small, saved_model = tmp_path / "huge.png", tmp_path / "small.png", stand_in_saved_model(tmp_path)
  Image.new("1", (12000, 12000)).save(huge)
  Image.new("RGB", (60, 100)).save(small)
  for args, said in (
      (["inception_finetune.predict", f"--output={tmp_path / 'out' / 'top.csv'}", str(huge)],
       over_max_pixels(huge, "12000x12000", "144,000,000", "89,478,485")),
      (["triplet.predict", "--max_pixels=5000", f"--embed_to={tmp_path / 'out' / 'e.npy'}", str(small)],
       over_max_pixels(small, "100x60", "6,000", "5,000"))):
    result = helpers.run_python(["-m", args[0], f"--saved_model={saved_model}", *args[1:]])
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert result.returncode == 2 and errors == [said], result.stderr[-3000:]
    assert "Traceback" not in result.stderr and "DecompressionBomb" not in result.stderr, result.stderr[-3000:]
  assert sorted(os.listdir(tmp_path)) == ["huge.png", "small.png", "stand_in_saved_model"]


def test_a_refused_or_interrupted_predict_leaves_no_folder_it_made(tmp_path, capsys):
  """Every predict checks that its output folder can be written before the model loads, making it:
  a command refused after that (here: a SavedModel that does not load) or interrupted before its
  first result removes the folders it made (not one that was there)."""
  photo = write_photos(tmp_path)[0]
  saved_model = stand_in_saved_model(tmp_path)
  new, existing = tmp_path / "new", tmp_path / "existing"
  existing.mkdir()
  triplet = helpers.make_config("triplet", "smoke")
  commands = [
      lambda out: segmentation_predict.predict_files([photo], str(out / "masks"),
                                                     helpers.make_config("segmentation", "smoke"),
                                                     saved_model=saved_model),
      lambda out: inception_predict.classify([photo], helpers.make_config("inception_v4", "smoke"),
                                             saved_model=saved_model, output=str(out / "deeper" / "top.csv")),
      lambda out: triplet_predict.run([photo], triplet, saved_model=saved_model, embed_path=str(out / "e.npy")),
      lambda out: triplet_predict.run([photo], triplet, saved_model=saved_model, gallery=str(tmp_path),
                                      output=str(out / "found.csv")),
  ]
  for command in commands:
    for out in (new, existing):
      line = error_line(capsys, command, out)
      assert line.startswith(f"error: SavedModel {saved_model} is damaged ("), line
      assert not new.exists() and os.listdir(existing) == [], os.listdir(existing)
  config, run = segmentation_run(tmp_path)
  signals._received.append(signal.SIGINT)  # pylint: disable=protected-access  # as the handler records it
  try:
    with pytest.raises(signals.Interrupted) as interrupted:
      segmentation_predict.predict_files([photo], str(new / "masks"), config, workdir=run)
  finally:
    signals._received.clear()  # pylint: disable=protected-access
  assert str(interrupted.value) == "interrupted by SIGINT after 0 of 1 photos; nothing was written"
  assert not new.exists()


def test_the_workdirs_threshold_says_its_step_and_when_there_is_none(tmp_path, caplog):
  metrics = tmp_path / "metrics.json"
  metrics.write_text(json.dumps({"eval": {"verification_threshold": 0.5, "step": 30}}))
  with caplog.at_level("WARNING"):
    assert triplet_predict.metrics_threshold(str(tmp_path), 20) == (
        0.5, f"from {metrics}, the run's verification pairs at step 30")
  assert "the threshold is the evaluation's at step 30, the weights are of step 20" in caplog.text
  metrics.write_text(json.dumps({"eval": {"recall_at_1": 0.5, "step": 30}}))
  assert triplet_predict.metrics_threshold(str(tmp_path), 30) == (
      None, f"{metrics} has none (a run without verification pairs)")
  assert triplet_predict.verdict(0.1, None) == "?"


def test_thresholds_and_embedding_files_that_would_mislead_are_refused(tmp_path, capsys):
  """metrics.json's threshold as a string, null, NaN, negative or a bool is no threshold (the line says
  why); --threshold NaN or out of (0, 2] and an --embed_to numpy would rename are one line each,
  before anything loads."""
  metrics = tmp_path / "metrics.json"
  for value, why in (('"0.5"', 'is "0.5", not a number'), ("null", "is null, not a number"),
                     ("NaN", "is nan, not a distance in (0, 2]"), ("3", "is 3, not a distance in (0, 2]"),
                     ("true", "is true, not a number"), ("[0.5]", "is [0.5], not a number")):
    metrics.write_text(f'{{"eval": {{"verification_threshold": {value}, "step": 3}}}}')
    assert triplet_predict.metrics_threshold(str(tmp_path), 3) == (
        None, f"{metrics}'s eval.verification_threshold {why}; pass --threshold"), value
  photo = str(write_photos(tmp_path)[0])
  config = helpers.make_config("triplet", "smoke")
  for kwargs, said in (
      ({"compare_two": True, "threshold": float("nan")}, "error: --threshold=nan is nan, not a distance in (0, 2]"),
      ({"compare_two": True, "threshold": -1.0}, "error: --threshold=-1 is -1, below every distance: no pair "
                                                 "would be the same (a run's evaluation chooses one when its "
                                                 "embeddings do not tell the identities apart: train it longer)"),
      ({"embed_path": str(tmp_path / "x.bin")}, f"error: --embed_to={tmp_path / 'x.bin'}: name a .npy file "
                                                 f"(numpy writes {tmp_path / 'x.bin'}.npy for this name)")):
    paths = [photo, photo] if kwargs.get("compare_two") else [photo]
    line = error_line(capsys, triplet_predict.run, paths, config, workdir=str(tmp_path), **kwargs)
    assert line == said, line
  assert not (tmp_path / "x.bin.npy").exists() and not (tmp_path / "x.bin").exists()


def test_a_threshold_from_json_that_does_not_serve_is_one_line_before_the_model_loads(tmp_path, capsys):
  """--threshold_from names the JSON scripts/export.py writes beside an ONNX or LiteRT export: one
  that is missing, empty, cut short, not UTF-8, a list, a folder, another trainer's or whose threshold
  is no distance is one line naming it, before any model loads (the --saved_model here is none)."""
  photo = str(write_photos(tmp_path)[0])
  config = helpers.make_config("triplet", "smoke")
  described = tmp_path / "model.onnx.json"
  fix = "give the .json that scripts/export.py wrote beside a triplet ONNX or LiteRT export"
  for case, (write, said) in {
      "missing": (lambda: None, "cannot be read (No such file or directory)"),
      "empty": (lambda: described.write_text(""), "is empty"),
      "cut short": (lambda: described.write_text('{"trainer": "triplet", "thre'), "is not valid JSON"),
      "not UTF-8": (lambda: described.write_bytes(b'{"trainer": "\xff"}'), "cannot be read ("),
      "wrong type": (lambda: described.write_text("[0.5]"), "holds no keys (a JSON list)"),
      "a folder": (described.mkdir, "cannot be read (Is a directory)"),
      "another trainer's": (lambda: described.write_text('{"trainer": "segmentation", "format": "onnx"}'),
                            'describes an export of "segmentation", not of triplet'),
      "out of range": (lambda: described.write_text('{"trainer": "triplet", "format": "onnx", "threshold": 3, "step": 5}'),
                       "threshold is 3, not a distance in (0, 2]; pass --threshold"),
  }.items():
    write()
    line = error_line(capsys, triplet_predict.run, [photo, photo], config, saved_model=str(tmp_path / "none"),
                      compare_two=True, threshold_from=str(described))
    assert line.startswith(f"error: {described}") and said in line, (case, line)
    assert case in ("another trainer's", "out of range") or line.endswith(fix), (case, line)
    shutil.rmtree(described) if described.is_dir() else described.unlink(missing_ok=True)
  line = error_line(capsys, triplet_predict.run, [photo, photo], config, saved_model=str(tmp_path / "none"),
                    compare_two=True, threshold=0.5, threshold_from=str(described))
  assert line == "error: give --threshold or --threshold_from, not both", line


def test_inception_class_names_short_or_not_utf8_are_one_line(tmp_path, capsys):
  """assets/class_names.txt of an export read back: a name per class of the model, UTF-8, or one line."""
  module = tf.Module()
  module.serve = tf.function(lambda images: {"probabilities": tf.ones([tf.shape(images)[0], 3]) / 3},
                             input_signature=[tf.TensorSpec([None, None, None, 3], tf.uint8, name="images")])
  export = str(tmp_path / "saved_model")
  tf.saved_model.save(module, export, signatures={"serving_default": module.serve})
  names = os.path.join(export, "assets", export_lib.CLASS_NAMES_ASSET)
  os.makedirs(os.path.dirname(names), exist_ok=True)
  for contents, said in ((b"a\nb\n", f"error: {names} names 2 classes, the model gives 3; export the run again"),
                         (b"a\ncaf\xe9\nc\n", f"error: {names} cannot be read (")):
    with open(names, "wb") as f:
      f.write(contents)
    line = error_line(capsys, inception_predict.load_saved_model, export)
    assert line.startswith(said), line
  with open(names, "wb") as f:
    f.write("a\ncafé\nc\n".encode())
  assert inception_predict.load_saved_model(export)[1] == ["a", "café", "c"]


def test_a_signal_stops_predict_between_photos_saying_what_was_written(tmp_path):
  """Every predict reads its photos through predict_lib.Photos: a signal is honoured before the next
  photo (not after the last of 400), with what the command has written."""
  paths = [str(path) for path in write_photos(tmp_path)]
  read = iter(predict_lib.Photos(paths, written=lambda done: f"{done} written"))
  next(read)
  signals._received.append(signal.SIGINT)  # pylint: disable=protected-access  # as the handler records it
  try:
    with pytest.raises(signals.Interrupted) as interrupted:
      next(read)
  finally:
    signals._received.clear()  # pylint: disable=protected-access
  assert str(interrupted.value) == "interrupted by SIGINT after 1 of 3 photos; 1 written"
