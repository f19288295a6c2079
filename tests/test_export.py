"""scripts/export.py on runs the test writes (config.json and a checkpoint, no training; Inception V4's
trained from random weights, with its saved_model/): each format's model, run by its own runtime,
gives the SavedModel's outputs on the evaluation images and on other sizes and batches; every reader
of the Inception run gives its SavedModel's answer; a failed check or a missing extra is one line and
leaves no output."""
import json
import os
import sys

import numpy as np
import pytest

pytest.importorskip("tf2onnx", reason="requirements-export.txt is not installed")
onnxruntime = pytest.importorskip("onnxruntime")
pytest.importorskip("ai_edge_litert")

from PIL import Image  # pylint: disable=g-import-not-at-top
import tensorflow as tf  # pylint: disable=g-import-not-at-top
from tensorflow.lite.tools import flatbuffer_utils  # pylint: disable=g-import-not-at-top

from common.app import cli  # pylint: disable=g-import-not-at-top
from common.contract import config as config_lib  # pylint: disable=g-import-not-at-top
from common.training import checkpoints  # pylint: disable=g-import-not-at-top
from common.training import evaluation  # pylint: disable=g-import-not-at-top
import helpers  # pylint: disable=g-import-not-at-top
from inception_finetune import predict as inception_predict  # pylint: disable=g-import-not-at-top
from inception_finetune import task as inception_task  # pylint: disable=g-import-not-at-top
from common.app import conversion  # pylint: disable=g-import-not-at-top
from common.app import export_check  # pylint: disable=g-import-not-at-top
from common.app import run_export  # pylint: disable=g-import-not-at-top
from segmentation import data as segmentation_data  # pylint: disable=g-import-not-at-top
from segmentation import task as segmentation_task  # pylint: disable=g-import-not-at-top
from triplet import data as triplet_data  # pylint: disable=g-import-not-at-top
from triplet import model as triplet_model  # pylint: disable=g-import-not-at-top
from triplet import predict as triplet_predict  # pylint: disable=g-import-not-at-top
from triplet import task as triplet_task  # pylint: disable=g-import-not-at-top

# Inception V4's run is the session's run trained from random weights (tests/conftest.py's
# inception_random_run), which these tests only read.
BUILD_MODEL = {"segmentation": lambda config: segmentation_task.build_model(
                   config, segmentation_data.read_settings(config.data)),
               "triplet": lambda config: triplet_task.build_model(
                   config, triplet_data.read_settings(config.data), 0)}


@pytest.fixture(autouse=True)
def command_line(monkeypatch):
  monkeypatch.setattr(sys, "argv", ["export"])  # cli.run_config reads --config arguments from it


class Runs(dict):
  """{trainer: workdir} with the smoke preset's config.json and a checkpoint of its untrained model,
  each written when a test first asks for it (Inception V4's only by the slow tests)."""

  def __init__(self, mktemp, inception_run):
    super().__init__()
    self.mktemp = mktemp
    self.inception_run = inception_run

  def __missing__(self, trainer):
    if trainer == "inception_v4":
      self[trainer] = str(self.inception_run()[0])
      return self[trainer]
    workdir = str(self.mktemp(trainer))
    config = helpers.make_config(trainer, "smoke")
    config_lib.write_config(config, workdir)
    tf.keras.utils.set_random_seed(0)  # the same weights in every session
    tf.train.CheckpointManager(tf.train.Checkpoint(model=BUILD_MODEL[trainer](config)),
                               checkpoints.checkpoint_dir(workdir), max_to_keep=1).save(checkpoint_number=1)
    self[trainer] = workdir
    return workdir


@pytest.fixture(scope="module")
def runs(module_tmp, inception_random_run):
  return Runs(module_tmp, inception_random_run)


@pytest.fixture(scope="module")
def exports(runs, module_tmp):
  """exports(trainer, fmt) -> (its output path, run_export.export's result): each export of a run made
  once, when a test first asks for it, into a folder of its own."""
  made = {}

  def export_of(trainer, fmt):
    if (trainer, fmt) not in made:
      output = str(module_tmp(f"{trainer}_{fmt}") / (f"model{run_export.SUFFIX[fmt]}" if fmt in run_export.SUFFIX else "saved_model"))
      made[trainer, fmt] = output, run_export.export(runs[trainer], fmt, output)
    return made[trainer, fmt]

  return export_of


# Inception V4 at its smoke size (75x75, its smallest): 1.5 min for LiteRT (7.5 GB resident at the
# peak), under 1 min for ONNX quiet (9.6 GB resident at the peak; README, Exports).
CONVERSIONS = [*[(trainer, fmt) for trainer in ("segmentation", "triplet") for fmt in ("onnx", "litert")],
               *[pytest.param("inception_v4", fmt, marks=pytest.mark.slow) for fmt in ("onnx", "litert")]]


@pytest.mark.parametrize("trainer, fmt", CONVERSIONS)
def test_the_export_gives_the_saved_models_outputs_in_its_runtime(runs, exports, trainer, fmt):
  output, result = exports(trainer, fmt)
  assert sorted(os.listdir(os.path.dirname(output))) == [os.path.basename(output), os.path.basename(output) + ".json"]
  # Inception V4's run has recalibrated BatchNorm statistics and near one-hot probabilities: its float32
  # differences reach 5.7e-05 (the export's own TOLERANCE); the smoke networks stay within 1e-5.
  bound = export_check.TOLERANCE if trainer == "inception_v4" else 1e-5
  assert result["max_difference"] and max(result["max_difference"].values()) < bound, result
  assert result["after"] == pytest.approx(result["before"], abs=1e-6), result
  if trainer != "triplet":
    assert result["same_class_ids"] == 1.0
    assert result["metric"] == {"segmentation": "miou", "inception_v4": "top1"}[trainer]
  assert result["image_size"] is None  # any size, in both formats
  text = run_export.describe(result, fmt, output, None)
  assert text.splitlines()[-1] == (f"  wrote {output} ({os.path.getsize(output) / 2**20:.3g} MB), {output}.json "
                                   f"({os.path.getsize(output + '.json')} bytes) in {result['seconds']:.1f} s")
  # Held to the run's own answers where it has a saved_model/ (the trained Inception run).
  own = os.path.join(runs[trainer], "saved_model")
  assert result["reference"] == (own if os.path.isdir(own) else "a SavedModel of the same weights, made "
                                 "for the check"), result


def test_onnx_without_tf2onnxs_copies_is_the_same_model_and_a_failing_pass_converts_again(exports, monkeypatch,
                                                                                          tmp_path):
  """conversion._onnx_model turns off tf2onnx's deep copy of the graph before each optimizer pass (a third
  of Inception V4's conversion): the same operations and outputs (tf2onnx numbers its node names on
  and orders equal nodes as it meets them, so no two conversions have the same bytes); a pass that
  raises makes it convert again with the copies."""
  import tf2onnx  # pylint: disable=g-import-not-at-top
  saved_model, _ = exports("segmentation", "saved_model")
  graph = conversion.onnx_graph(conversion.load("saved_model", saved_model))
  images = tf.cast(tf.random.stateless_uniform([2, 40, 52, 3], [1, 2], maxval=256, dtype=tf.int32), tf.uint8)

  def operations_and_outputs(model, name):
    path = str(tmp_path / f"{name}.onnx")
    with open(path, "wb") as f:
      f.write(model.SerializeToString())
    outputs = conversion.load("onnx", path)(images)
    return sorted(node.op_type for node in model.graph.node), {k: v.numpy() for k, v in outputs.items()}

  def assert_same(found, expected):
    assert found[0] == expected[0]
    assert found[1].keys() == expected[1].keys()
    for name, value in expected[1].items():
      np.testing.assert_array_equal(found[1][name], value, err_msg=name)

  fast = operations_and_outputs(conversion._onnx_model(tf2onnx, graph), "fast")
  assert conversion.CATCH_ERRORS not in os.environ
  assert_same(operations_and_outputs(conversion._onnx_model(tf2onnx, graph, copies=True), "copies"), fast)

  class Failing(tf2onnx.optimizer.optimizer_base.GraphOptimizerBase):
    runs = []

    def _optimize(self, graph):
      self.runs.append(os.environ.get(conversion.CATCH_ERRORS))
      raise ValueError("a failing pass")

  monkeypatch.setitem(tf2onnx.optimizer._optimizers, "failing", Failing)
  assert_same(operations_and_outputs(conversion._onnx_model(tf2onnx, graph), "again"), fast)
  assert Failing.runs[:2] == ["FALSE", None]  # raised without the copies, skipped with them


@pytest.mark.parametrize("trainer, fmt", CONVERSIONS)
def test_another_image_size_and_a_batch_of_three_give_predicts_outputs(exports, trainer, fmt):
  """predict --saved_model runs the SavedModel's serving signature on each photo as it is: the export
  takes the same uint8 images, of a size the evaluation never had (45x71), three at once."""
  saved_model, _ = exports(trainer, "saved_model")
  output, _ = exports(trainer, fmt)
  images = tf.cast(tf.random.stateless_uniform([3, 45, 71, 3], [4, 2], maxval=256, dtype=tf.int32), tf.uint8)
  expected = conversion.load("saved_model", saved_model)(images)
  outputs = conversion.load(fmt, output)(images)
  assert set(outputs) == {name for name, value in expected.items() if value.dtype != tf.string}
  for name, value in outputs.items():
    want = expected[name].numpy()
    assert value.shape == want.shape, (name, value.shape, want.shape)
    if value.dtype.is_floating:
      assert np.max(np.abs(value.numpy() - want)) <= 1e-4 * max(1.0, np.max(np.abs(want))), name
    else:
      assert np.array_equal(value.numpy(), want), name


def test_the_triplet_threshold_is_in_every_export_and_predict_takes_it_from_the_json(runs, exports, tmp_path,
                                                                                   capsys):
  """The verification threshold and its step: the SavedModel's signature `constants`, the JSON beside
  the ONNX and LiteRT models, their own metadata; triplet.predict --threshold_from prints it."""
  carried = conversion.load("saved_model", exports("triplet", "saved_model")[0]).constants
  assert sorted(carried) == ["step", "threshold"] and 0 < carried["threshold"] <= 2, carried
  for fmt in ("onnx", "litert"):
    output, _ = exports("triplet", fmt)
    with open(output + ".json", encoding="utf-8") as f:
      about = json.load(f)
    assert about == {"trainer": "triplet", "format": fmt, **carried}, about
    metadata = model_metadata(fmt, output)
    assert {name: metadata.get(name) for name in about} == {name: str(value) for name, value in about.items()}
  photos = []
  for seed in (1, 2):
    photos.append(str(tmp_path / f"{seed}.png"))
    Image.fromarray(np.random.default_rng(seed).integers(0, 256, (30, 40, 3), dtype=np.uint8)).save(photos[-1])
  capsys.readouterr()
  triplet_predict.run(photos, helpers.make_config("triplet", "smoke"), workdir=runs["triplet"], compare_two=True,
                      threshold_from=output + ".json")
  assert (f"threshold {carried['threshold']:.4f} (from {output}.json, the litert export's: the run's verification "
          f"pairs at step {carried['step']}): a pair is the same identity below it") in capsys.readouterr().out


def model_metadata(fmt, path):
  """{name: text} of an ONNX model's metadata_props or a LiteRT model's metadata entries."""
  if fmt == "onnx":
    return onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"]).get_modelmeta().custom_metadata_map
  with open(path, "rb") as f:
    model = flatbuffer_utils.convert_bytearray_to_object(bytearray(f.read()))
  return {entry.name.decode(): bytes(model.buffers[entry.buffer].data).decode(errors="replace")
          for entry in model.metadata}


@pytest.mark.slow  # the session's Inception V4 run from random weights trains first (about a minute)
def test_every_reader_of_an_inception_run_from_random_weights_gives_its_saved_models_answer(
    runs, inception_random_run, tmp_path, capsys):
  """Its checkpoint holds the BatchNorm statistics recalibrated for its weight average when it was
  written: its saved_model/, predict --workdir, evaluate --workdir and the saved_model export give the
  same top-1 and probabilities (ONNX and LiteRT: the test above, against the same saved_model/)."""
  workdir, config = inception_random_run()
  own = str(workdir / "saved_model")
  images = tf.random.stateless_uniform([3, 90, 120, 3], [4, 2], maxval=256, dtype=tf.int32).numpy()
  paths = [str(tmp_path / f"{i}.png") for i in range(len(images))]
  for path, image in zip(paths, images.astype(np.uint8)):
    Image.fromarray(image).save(path)  # lossless: the pixels the SavedModel is given below
  served = conversion.load("saved_model", own)(images=tf.constant(images, tf.uint8))["probabilities"].numpy()
  rows = inception_predict.classify(paths, config, workdir=str(workdir), top_k=config.data.num_classes)
  predicted = np.array([[row[4] for row in sorted((row for row in rows if row[0] == path), key=lambda r: r[2])]
                        for path in paths])
  np.testing.assert_allclose(predicted, served, rtol=0, atol=1e-6)
  assert [row[2] for row in rows if row[1] == 1] == list(np.argmax(served, axis=1))
  capsys.readouterr()
  task = inception_task.make_task(config, str(workdir), for_training=False)
  from_checkpoint = evaluation.evaluate_saved(task, str(workdir)).metrics
  from_saved_model = evaluation.evaluate_saved(task, str(workdir), own).metrics
  assert (from_checkpoint["top1"], from_checkpoint["top5"]) == (from_saved_model["top1"], from_saved_model["top5"])
  # The loss from logits, and from the SavedModel's log-probabilities.
  assert from_checkpoint["loss"] == pytest.approx(from_saved_model["loss"], rel=1e-5), (from_checkpoint, from_saved_model)
  result = run_export.export(str(workdir), "saved_model", str(tmp_path / "exported"))
  assert result["reference"] == own and result["max_difference"]["probabilities"] < 1e-6, result
  assert result["same_class_ids"] == 1.0 and result["after"] == result["before"], result
  assert f"compared with {own}" in run_export.describe(result, "saved_model", "exported", None)


def test_a_zero_embedding_is_zero_in_every_runtime(tmp_path):
  """A triplet network whose projection gives a zero vector (an untrained one did, on one image, in
  CI): its normalization gave NaN in LiteRT (Keras' UnitNormalization's ops in XNNPACK), 0 in
  TensorFlow and ONNX Runtime, so the export was scored on other embeddings than the SavedModel's."""
  config = helpers.make_config("triplet", "smoke")
  model = BUILD_MODEL["triplet"](config)
  projection = model.get_layer(triplet_model.RAW_EMBEDDING)
  projection.set_weights([0 * weight for weight in projection.get_weights()])
  saved_model = triplet_task.export_model(model, str(tmp_path / "saved_model"),
                                          triplet_data.read_settings(config.data))
  reference = conversion.load("saved_model", saved_model)
  images = tf.random.stateless_uniform([2, 40, 40, 3], [0, 1], maxval=256, dtype=tf.int32)
  images = tf.cast(images, tf.uint8)
  for fmt in ("onnx", "litert"):
    path = str(tmp_path / f"model.{fmt}")
    conversion.convert(reference, fmt, path, (40, 40))
    embeddings = conversion.load(fmt, path)(images)["embeddings"].numpy()
    assert embeddings.shape == (2, config.model.embedding_size) and not embeddings.any(), (fmt, embeddings)


def test_saved_model_format_and_a_saved_model_input(runs, exports, tmp_path):
  workdir = runs["segmentation"]
  saved, result = exports("segmentation", "saved_model")
  assert os.listdir(os.path.dirname(saved)) == ["saved_model"]  # no JSON: the SavedModel carries its own
  assert result["max_difference"]["logits"] == 0 and result["before"] == result["after"]
  converted = run_export.export(workdir, "onnx", str(tmp_path / "m.onnx"), saved_model=saved)
  assert converted["max_difference"]["logits"] < 1e-5 and converted["after"] == pytest.approx(result["before"])


@pytest.mark.slow
@pytest.mark.parametrize("quantize", ["float16", "int8"])
def test_quantized_litert_reports_the_metric_before_and_after(runs, quantize, tmp_path):
  output = str(tmp_path / f"{quantize}.tflite")
  result = run_export.export(runs["segmentation"], "litert", output, quantize=quantize)
  assert os.path.isfile(output) and 0 <= result["after"] <= 1 and result["metric"] == "miou"
  if quantize == "float16":  # weights rounded to float16, computed in float32
    assert max(result["max_difference"].values()) < 0.05
  text = run_export.describe(result, "litert", output, quantize)
  assert f"miou on the evaluation set: SavedModel {result['before']:.4f}, export" in text


def test_a_failed_check_or_a_missing_extra_is_one_line_and_leaves_nothing(runs, tmp_path, monkeypatch, capsys):
  output = str(tmp_path / "model.onnx")
  monkeypatch.setattr(export_check, "TOLERANCE", 0.0)  # every float difference fails it
  line = error_line(capsys, run_export.export, runs["segmentation"], "onnx", output)
  assert "failed its check (logits differs by" in line and "nothing was written" in line, line
  assert os.listdir(tmp_path) == []
  monkeypatch.setitem(conversion.EXTRA, "onnx", ("tf2onnx", "a_runtime_not_installed"))
  line = error_line(capsys, run_export.export, runs["segmentation"], "onnx", output)
  assert "--format=onnx needs" in line and "pip install -r requirements-export.txt" in line, line
  line = error_line(capsys, run_export.export, runs["triplet"], "onnx", output, None, None, "int8")
  assert "--quantize=int8 is for --format=litert" in line, line
  line = error_line(capsys, run_export.export, str(tmp_path), "litert", output)
  assert "config.json does not exist" in line, line
  assert os.listdir(tmp_path) == []


def error_line(capsys, function, *args):
  """The one `error:` line of function(*args) behind the commands' guard, exit 2."""
  capsys.readouterr()
  with pytest.raises(SystemExit) as exit_info:
    cli.run_guarded(function, *args)
  lines = capsys.readouterr().err.strip().splitlines()
  assert exit_info.value.code == 2 and lines[-1].startswith("error: "), lines
  return lines[-1]


def test_a_full_disk_is_one_line_and_leaves_nothing(runs, tmp_path, capsys):
  """The export is written in a folder of its own beside --output: a disk that fills up midway is one
  line, and that folder goes (a 64 KiB tmpfs; the segmentation smoke model's ONNX file is larger)."""
  import subprocess  # pylint: disable=g-import-not-at-top
  disk = tmp_path / "small_disk"
  disk.mkdir()
  if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "none", str(disk)], capture_output=True).returncode:
    pytest.skip("no tmpfs can be mounted here (root can; CI runs as root)")
  try:
    output = str(disk / "model.onnx")
    line = error_line(capsys, run_export.export, runs["segmentation"], "onnx", output)
    assert line.startswith(f"error: cannot write --output={output} (") and line.endswith(
        "free space or choose another folder; nothing was written"), line
    assert os.listdir(disk) == []
  finally:
    subprocess.run(["umount", "-l", str(disk)], check=False)


def test_a_signal_during_the_export_says_nothing_was_written(runs, tmp_path):
  import signal  # pylint: disable=g-import-not-at-top
  from common.runtime import signals  # pylint: disable=g-import-not-at-top
  output = str(tmp_path / "model.onnx")
  signals._received.append(signal.SIGTERM)  # pylint: disable=protected-access  # as the handler records it
  try:
    with pytest.raises(signals.Interrupted) as interrupted:
      run_export.export(runs["segmentation"], "onnx", output)
  finally:
    signals._received.clear()  # pylint: disable=protected-access
  assert str(interrupted.value) == (f"interrupted by SIGTERM during the export to {output}; nothing was "
                                    "written: run the command again")
  assert os.listdir(tmp_path) == []
