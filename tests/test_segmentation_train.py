"""The segmentation trainer end to end: the README's job, resume after SIGTERM, bad input, TensorBoard."""
import csv
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.parse
import urllib.request

import numpy as np
from PIL import Image
import pytest
import tensorflow as tf

from common.training import evaluation as evaluation_lib
import helpers
from helpers import REPO_ROOT
from helpers import free_port
from helpers import make_config
from helpers import read_scalars
from helpers import wait_for_json
from segmentation import metrics
from segmentation import synthetic
from segmentation import task as task_lib
from segmentation import visualize
from segmentation import train

# How far one run of the main job's mIoU may be from another's (config.deterministic is off).
MIOU_SPREAD = 0.02


def smoke_config(**overrides):
  return make_config("segmentation", "smoke", **overrides)


@pytest.fixture(scope="module")
def smoke_run(module_tmp):
  """The smoke preset trained to step 20, then resumed to its 30 steps: (config, workdir, first
  results, final results), shared by the tests that read a finished run."""
  workdir = module_tmp("smoke")
  config = smoke_config(**{"train.num_steps": 20})
  first = train.train_and_evaluate(config, str(workdir))
  config.train.num_steps = 30
  return config, workdir, first, train.train_and_evaluate(config, str(workdir))


def test_resumed_run_continues_from_its_checkpoint(smoke_run):
  _, _, first, second = smoke_run
  assert (first["step"], second["step"], second["steps_run"]) == (20, 30, 10)


def test_smoke_run_trains_evaluates_and_exports(smoke_run):
  config, workdir, _, results = smoke_run
  assert results["step"] == config.train.num_steps
  assert 0.0 <= results["eval"]["miou"] <= 1.0
  with open(workdir / "metrics.json") as f:
    written = json.load(f)["eval"]
  assert written["miou"] == results["eval"]["miou"]
  # Per-class keys in class order (metrics.json sorts its keys), named after the synthetic classes.
  per_class = [key for key in written if key.startswith("iou/")]
  named = [f"iou/{c:02d}_{name}" for c, name in enumerate(synthetic.CLASS_NAMES)]
  assert per_class == [key for key in named if key in per_class] and len(per_class) >= 2
  # The report in eval/: per-class IoU as in metrics.json, the confusion matrix, overlays.
  with open(workdir / "eval" / "per_class_iou.csv") as f:
    rows = list(csv.DictReader(f))
  assert {f"iou/{int(r['id']):02d}_{r['name']}": pytest.approx(float(r["iou"]), abs=1e-6)
          for r in rows if r["iou"]} == {key: written[key] for key in per_class}
  with open(workdir / "eval" / "confusion_matrix.csv") as f:
    counts = np.array([row[1:] for row in list(csv.reader(f))[1:]], np.int64)
  assert counts.sum() == sum(int(r["label_pixels"]) for r in rows) > 0
  assert np.trace(counts) / counts.sum() == pytest.approx(written["pixel_accuracy"])
  for name in ["confusion_matrix.png"] + [f"overlay_{i}.png" for i in range(config.data.num_eval_images)]:
    assert Image.open(workdir / "eval" / name).format == "PNG", name
  serve = tf.saved_model.load(str(workdir / "saved_model")).signatures["serving_default"]
  out = serve(images=tf.zeros([2, 37, 45, 3], tf.uint8))  # any size, not a multiple of the stride
  assert out["class_ids"].shape == (2, 37, 45)
  assert out["logits"].dtype == tf.float32
  np.testing.assert_allclose(out["probabilities"].numpy().sum(-1), 1.0, rtol=1e-5)


def test_checkpoint_and_saved_model_evaluate_alike_and_predict_writes_masks(smoke_run, tmp_path, run_cli):
  config, workdir, _, results = smoke_run
  task = task_lib.make_task(config, str(workdir))
  for saved_model in (None, str(workdir / "saved_model")):
    scores = evaluation_lib.evaluate_saved(task, str(workdir), saved_model).metrics
    assert scores["miou"] == pytest.approx(results["eval"]["miou"], abs=1e-6), saved_model
  image_path = tmp_path / "photo.png"
  Image.fromarray(np.random.default_rng(0).integers(0, 255, (21, 30, 3), np.uint8)).save(image_path)
  predicted = run_cli(["-m", "segmentation.predict", f"--saved_model={workdir / 'saved_model'}",
                       f"--output_dir={tmp_path / 'out'}", str(image_path)])
  assert predicted.returncode == 0, predicted.stderr[-3000:]
  class_ids = np.array(Image.open(tmp_path / "out" / "photo_classes.png"))
  assert class_ids.shape == (21, 30) and class_ids.max() < config.data.num_classes
  # _mask.png is a palette PNG like VOC's masks: its indices are the class ids, class k has VOC's color k.
  mask = Image.open(tmp_path / "out" / "photo_mask.png")
  assert mask.mode == "P"
  np.testing.assert_array_equal(np.array(mask), class_ids)
  voc = visualize.voc_palette()
  for k in np.unique(class_ids):
    assert mask.getpalette()[3 * k:3 * k + 3] == voc[3 * k:3 * k + 3], k
  # The photo beside its prediction, enlarged, above a legend (tests/test_views.py): the shared figure.
  overlay = np.array(Image.open(tmp_path / "out" / "photo_overlay.png"))
  photo = np.array(Image.open(image_path))
  np.testing.assert_array_equal(
      overlay, np.array(visualize.figure(photo, {"prediction": class_ids}, synthetic.CLASS_NAMES)))
  assert overlay.shape[1] >= 2 * visualize.MIN_SIDE
  # --workdir: the run's config and newest weights, the same classes as its export.
  predicted = run_cli(["-m", "segmentation.predict", f"--workdir={workdir}", f"--output_dir={tmp_path / 'w'}",
                       str(image_path)])
  assert predicted.returncode == 0, predicted.stderr[-3000:]
  np.testing.assert_array_equal(np.array(Image.open(tmp_path / "w" / "photo_classes.png")), class_ids)
  # A fresh process reads the export's class names, from the signature and from its asset.
  names = run_cli(["-c", "import sys, tensorflow as tf; serve = tf.saved_model.load(sys.argv[1]).signatures"
                   "['serving_default']; print(*[n.decode() for n in serve(images=tf.zeros([1, 8, 8, 3], "
                   "tf.uint8))['class_names'].numpy()])", str(workdir / "saved_model")])
  assert names.stdout.split() == list(synthetic.CLASS_NAMES[:config.data.num_classes]), names.stderr[-2000:]
  assert (workdir / "saved_model" / "assets" / "class_names.txt").read_text().split() == names.stdout.split()


def test_evaluating_a_saved_model_without_workdir_writes_only_the_report(smoke_run, tmp_path, run_cli):
  """No --workdir: the synthetic evaluation images go into a temporary folder, the report into
  --report_dir, and nothing else anywhere (before, runs/segmentation/{data,eval} in the current folder)."""
  _, workdir, _, results = smoke_run
  here = tmp_path / "here"
  here.mkdir()
  evaluated = run_cli(["-m", "segmentation.evaluate", f"--config={REPO_ROOT}/configs/segmentation.py:smoke",
                       f"--saved_model={workdir / 'saved_model'}", "--report_dir=report"], cwd=here)
  assert evaluated.returncode == 0, evaluated.stderr[-3000:]
  assert json.loads(evaluated.stdout)["miou"] == pytest.approx(results["eval"]["miou"], abs=1e-6)
  assert "no --workdir: the report goes to report" in evaluated.stderr
  assert [path.name for path in here.iterdir()] == ["report"]
  assert (here / "report" / "eval.log").is_file()


def test_evaluate_workdir_alone_needs_only_the_evaluation_files(tmp_path, run_cli):
  """A VOC run with a non-default model, evaluated by --workdir alone once its training images and
  split file are gone: its own config, the same mIoU, and nothing written but the report. Evaluated
  on its training split first: that report goes to eval-data.eval_split=train, the training's stays."""
  voc = tmp_path / "voc"
  helpers.write_voc(voc, num_images=4, size=(24, 32))
  workdir = tmp_path / "run"
  results = train.train_and_evaluate(smoke_config(**{
      "data.source": "voc", "data.voc_root": str(voc), "data.num_classes": 21, "model.widths": (8, 16),
      "train.num_steps": 2}), str(workdir))
  # Another split's report goes beside the training's, which stays byte for byte.
  report = {path: path.read_bytes() for path in (workdir / "eval").rglob("*") if path.is_file()}
  on_train = run_cli(["-m", "segmentation.evaluate", f"--workdir={workdir}", "--config.data.eval_split=train"])
  assert on_train.returncode == 0, on_train.stderr[-3000:]
  assert {path: path.read_bytes() for path in (workdir / "eval").rglob("*") if path.is_file()} == report
  assert (workdir / "eval-data.eval_split=train" / "per_class_iou.csv").is_file()
  for image_id in (voc / "ImageSets/Segmentation/train.txt").read_text().split():
    os.remove(voc / "JPEGImages" / f"{image_id}.jpg")
  os.remove(voc / "ImageSets/Segmentation/train.txt")
  before = {path: os.path.getmtime(path) for path in workdir.rglob("*") if "eval" not in path.parts}
  evaluated = run_cli(["-m", "segmentation.evaluate", f"--workdir={workdir}"])
  assert evaluated.returncode == 0, evaluated.stderr[-3000:]
  assert json.loads(evaluated.stdout)["miou"] == results["eval"]["miou"]
  assert {path: os.path.getmtime(path) for path in workdir.rglob("*") if "eval" not in path.parts} == before
  assert (workdir / "eval" / "per_class_iou.csv").is_file()


def test_chance_baseline_is_the_majority_class_everywhere():
  # 3 classes in the labels (rows): 90 background pixels, 6 of class 1, 4 of class 2; class 3 absent.
  confusion = np.array([[80, 10, 0, 0], [1, 5, 0, 0], [0, 0, 4, 0], [0, 0, 0, 0]])
  scores = metrics.metrics_from_confusion(confusion)
  # Background everywhere: background IoU 90/100, classes 1 and 2 IoU 0, class 3 not counted.
  assert scores["chance_miou"] == pytest.approx(0.9 / 3)
  assert scores["chance_pixel_accuracy"] == pytest.approx(0.9)
  assert scores["miou"] > scores["chance_miou"]


def test_foreground_vs_background_iou_merges_every_object_class():
  # Pixels as (true class, predicted class) pairs: background 0, two object classes.
  truth = np.array([0] * 50 + [1] * 20 + [2] * 20 + [0] * 5 + [1] * 5)
  predicted = np.array([0] * 50 + [2] * 20 + [1] * 20 + [1] * 5 + [0] * 5)
  confusion = np.zeros((3, 3), np.int64)
  np.add.at(confusion, (truth, predicted), 1)
  # Counted from the pixels: objects called objects (whatever their class) over pixels that are or are
  # called objects: 40 / 50.
  objects_found = np.sum((truth > 0) & (predicted > 0)) / np.sum((truth > 0) | (predicted > 0))
  scores = metrics.metrics_from_confusion(confusion)
  assert scores["fg_bg_iou"] == pytest.approx(objects_found) == pytest.approx(0.8)
  assert scores["miou"] < 0.4  # every object taken for the other class
  line = metrics.mixed_up_line(scores)
  assert line.startswith("objects found but their classes mixed up: foreground-vs-background IoU 0.8000")
  assert metrics.mixed_up_line(dict(scores, fg_bg_iou=0.25, miou=0.11)) is None  # objects missed, not mixed up
  told_apart = metrics.metrics_from_confusion(np.diag([55, 25, 20]))
  assert told_apart["fg_bg_iou"] == told_apart["miou"] == 1.0 and metrics.mixed_up_line(told_apart) is None


def test_the_closing_line_has_the_foreground_iou_and_says_when_classes_are_mixed_up():
  scores = {"miou": 0.634, "chance_miou": 0.09, "fg_bg_iou": 0.918, "pixel_accuracy": 0.95,
            "chance_pixel_accuracy": 0.8}
  first, second = train.headline({"eval": scores, "step": 1200}).splitlines()
  assert first == ("validation mIoU 0.6340 (all-majority-class 0.0900), foreground-vs-background IoU 0.9180, "
                   "pixel accuracy 0.9500 (all-majority-class 0.8000) at step 1200")
  assert second.startswith("objects found but their classes mixed up")
  assert "\n" not in train.headline({"eval": dict(scores, miou=0.9), "step": 1200})


@pytest.mark.parametrize("num_classes, class_names, first_keys", [
    (12, None, ["iou/class_00", "iou/class_01", "iou/class_02"]),  # not class_0, class_1, class_10
    (3, ("background", "disk", "rectangle"), ["iou/00_background", "iou/01_disk", "iou/02_rectangle"]),
    (101, None, ["iou/class_000", "iou/class_001", "iou/class_002"])])
def test_per_class_keys_sort_in_class_order(num_classes, class_names, first_keys):
  confusion = np.eye(num_classes, dtype=np.int64)
  keys = [key for key in metrics.metrics_from_confusion(confusion, class_names) if key.startswith("iou/")]
  assert len(keys) == num_classes and keys[:3] == first_keys
  assert keys == sorted(keys)  # made in class order, so sorting (metrics.json, the log) keeps it


@pytest.mark.slow
def test_readme_main_job_reaches_miou_085(tmp_path, run_cli):
  """The first command of the README, as a new user runs it (the install part aside)."""
  with open(os.path.join(REPO_ROOT, "README.md")) as f:
    command = re.search(r"&& (python -m segmentation\.train [^\n`]*)", f.read()).group(1)
  args = command.split()[1:]
  args = [a for a in args if not a.startswith("--workdir")] + [f"--workdir={tmp_path}"]
  started = time.time()
  result = run_cli(args, timeout=1800)
  assert result.returncode == 0, result.stderr[-3000:]
  miou, chance = map(float, re.search(r"validation mIoU ([0-9.]+) \(all-majority-class ([0-9.]+)\)",
                                      result.stdout).groups())
  print(f"main job: mIoU {miou:.4f} in {time.time() - started:.0f} s")
  assert miou >= 0.85
  assert os.path.isdir(tmp_path / "saved_model")
  # segmentation/README.md quotes this run's closing line: the baseline is the evaluation set's (the
  # same scenes every run), the mIoU one run's (not bitwise reproducible: within MIOU_SPREAD).
  quoted = re.findall(r"`validation mIoU ([0-9.]+)\s+\(all-majority-class ([0-9.]+)\)` for the first command",
                      helpers.read_doc("segmentation/README.md"))
  assert len(quoted) == 1, quoted
  assert abs(float(quoted[0][0]) - miou) <= MIOU_SPREAD and abs(float(quoted[0][1]) - chance) <= 1e-4, (quoted, miou, chance)


def checkpoint_values(path):
  reader = tf.train.load_checkpoint(path)
  return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()
          if "save_counter" not in name and "ITERATOR_STATE" not in name}


@pytest.mark.slow
def test_sigterm_then_resume_matches_an_uninterrupted_run(tmp_path, run_cli):
  total = 60
  common = ["-m", "segmentation.train", "--config=configs/segmentation.py:smoke",
            "--config.deterministic=True", f"--config.train.num_steps={total}",
            "--config.train.log_every=20", "--config.train.eval_every=1000",
            "--config.train.checkpoint_every=1000", f"--config.data.cache_dir={tmp_path / 'data'}"]
  straight = tmp_path / "straight"
  assert run_cli(common + [f"--workdir={straight}"]).returncode == 0

  interrupted = tmp_path / "interrupted"
  process = subprocess.Popen([sys.executable] + common + [f"--workdir={interrupted}"], cwd=REPO_ROOT,
                             stderr=subprocess.PIPE, text=True,
                             env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
  for line in process.stderr:  # progress lines: "step 20/60 ..."
    if re.search(r"step 20/%d" % total, line):
      # Arrives after step 20 or during the compiled call of steps 21 to 30 (the smoke preset's
      # summaries every 10 steps end a call); the run stops where a call ends.
      process.send_signal(signal.SIGTERM)
      break
  process.stderr.read()
  assert process.wait(timeout=300) == 128 + signal.SIGTERM
  stopped_at = tf.train.latest_checkpoint(interrupted / "checkpoints")
  stopped_step = int(checkpoint_values(stopped_at)["step/.ATTRIBUTES/VARIABLE_VALUE"])
  assert 20 <= stopped_step < total and stopped_step % 10 == 0

  resumed = run_cli(common + [f"--workdir={interrupted}"])
  assert resumed.returncode == 0, resumed.stderr[-3000:]
  assert f"resuming from {stopped_at} at step {stopped_step}" in resumed.stderr
  expected = checkpoint_values(tf.train.latest_checkpoint(straight / "checkpoints"))
  actual = checkpoint_values(tf.train.latest_checkpoint(interrupted / "checkpoints"))
  assert expected.keys() == actual.keys()
  assert int(actual["step/.ATTRIBUTES/VARIABLE_VALUE"]) == total
  for name, value in expected.items():
    np.testing.assert_array_equal(value, actual[name], err_msg=name)


# The bad files and values are rows of tests/test_bad_inputs.py's table (in one interpreter); a
# misspelt key is read by the command line's flags alone.
def test_misspelt_key_is_one_line_and_exit_code_2(tmp_path, run_cli):
  result = run_cli(["-m", "segmentation.train", "--config=configs/segmentation.py:smoke",
                    "--config.optimizer.learnin_rate=0.1", f"--workdir={tmp_path}"])
  errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
  assert result.returncode == 2, result.stderr[-2000:]
  assert errors == [result.stderr.strip().splitlines()[-1]], result.stderr[-2000:]
  assert errors[0].startswith("error: unknown config key 'optimizer.learnin_rate'. Did you mean "
                              "'optimizer.learning_rate'? Valid keys here: "), errors
  assert "Traceback" not in result.stderr


@pytest.mark.slow
def test_tensorboard_serves_the_loss_series(smoke_run):
  config, workdir, _, _ = smoke_run
  port = free_port()
  server = subprocess.Popen([sys.executable, "-m", "tensorboard.main", "--logdir", str(workdir),
                             "--host", "127.0.0.1", "--port", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
  try:
    url = f"http://127.0.0.1:{port}/data/plugin/scalars"
    tags = wait_for_json(f"{url}/tags", lambda tags: "loss" in tags.get("train", {}), 120)
    assert tags and "loss" in tags["train"], tags
    assert "miou" in tags["eval"]
    query = urllib.parse.urlencode({"run": "train", "tag": "loss"})
    with urllib.request.urlopen(f"{url}/scalars?{query}", timeout=10) as response:
      series = json.load(response)
    steps = [step for _, step, _ in series]
    assert steps == list(range(config.summaries.scalars_every, config.train.num_steps + 1,
                               config.summaries.scalars_every))
    assert all(np.isfinite(value) and value > 0 for _, _, value in series)
  finally:
    server.send_signal(signal.SIGTERM)
    server.wait(timeout=30)


def test_best_miou_weights_are_the_exported_ones(tmp_path):
  config = smoke_config()
  config.train.eval_every = 10
  config.train.best_metric = "miou"
  results = train.train_and_evaluate(config, str(tmp_path))
  series = read_scalars(str(tmp_path / "eval"), "miou")
  best_step = max(series, key=lambda step: (series[step], -step))
  assert results["best"]["step"] == best_step and results["best"]["value"] == pytest.approx(series[best_step])
  with open(tmp_path / "metrics.json") as f:
    assert json.load(f)["best"]["step"] == best_step
  task = task_lib.make_task(config, str(tmp_path))
  model = task.build_model()
  tf.train.Checkpoint(model=model).read(str(tmp_path / "checkpoints" / f"ckpt-{best_step}")).expect_partial()
  images = next(iter(task.eval_dataset))[0]
  serve = tf.saved_model.load(str(tmp_path / "saved_model")).signatures["serving_default"]
  np.testing.assert_allclose(serve(images=images)["logits"].numpy(), model(images).numpy(), atol=1e-5)


def file_digests(root):
  """{path under root: sha256 of its bytes} of every file under root."""
  return {os.path.relpath(os.path.join(folder, name), root):
          hashlib.sha256(open(os.path.join(folder, name), "rb").read()).hexdigest()
          for folder, _, names in os.walk(root) for name in names}


def test_an_export_onto_the_run_or_a_garbage_checkpoint_state_file_loses_nothing(smoke_run, tmp_path, run_cli):
  """The two ways a finished run was lost: `export.py --output=<the workdir>` replaced it with one ONNX
  file; a garbage checkpoints/checkpoint made the same training command start again at step 0."""
  workdir = tmp_path / "run"
  shutil.copytree(smoke_run[1], workdir)
  before = file_digests(workdir)
  for output in (str(workdir), f"{workdir}/"):
    exported = run_cli(["scripts/export.py", f"--workdir={workdir}", "--format=onnx", f"--output={output}"])
    lines = exported.stderr.strip().splitlines()
    assert exported.returncode == 2 and [line for line in lines if line.startswith("error")] == lines[-1:] == [
        f"error: --output={output} is the run's --workdir; an export never replaces a folder: name a new "
        f"path, e.g. {workdir}/model.onnx"], lines
  assert file_digests(workdir) == before
  state_file = workdir / "checkpoints" / "checkpoint"
  state_file.write_text("model_checkpoint_path: {{{ not a checkpoint state\n")
  rerun = run_cli(["-m", "segmentation.train", "--config=configs/segmentation.py:smoke", f"--workdir={workdir}"])
  assert rerun.returncode == 0, rerun.stderr[-3000:]
  assert (f"{state_file} (TensorFlow's list of checkpoints) is unreadable; using the "
          in rerun.stderr and f"found from the files, the newest {workdir}/checkpoints/ckpt-30" in rerun.stderr)
  assert f"resuming from {workdir}/checkpoints/ckpt-30 at step 30" in rerun.stderr
  after = file_digests(workdir)
  kept = {path: digest for path, digest in before.items() if path.startswith("checkpoints/ckpt-")}
  assert kept and {path: after.get(path) for path in kept} == kept
  assert json.loads((workdir / "metrics.json").read_text())["step"] == 30
  assert tf.train.latest_checkpoint(str(workdir / "checkpoints")) == f"{workdir}/checkpoints/ckpt-30"
