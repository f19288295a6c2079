"""Tests of scripts/benchmark.py and its pieces (scripts/benchmarking/) and the peer runner (no timed
assertions)."""
import json
import math
import sys

import keras
import numpy as np
from PIL import Image
import pytest
import tensorflow as tf

import helpers
from scripts import benchmark
from scripts.benchmarking import exports as benchmark_exports
from scripts.benchmarking import flops
from scripts.benchmarking import memory_estimate
from scripts.benchmarking import peers as benchmark_peers
from scripts.benchmarking import tables
from scripts.benchmarking import timing as benchmark_timing
from scripts.benchmarking import trainers
from scripts.peers import peer_runner
from scripts.peers import tf_triplet_step


# scripts/benchmarking/flops.py, on models small enough to count by hand (a multiply-add is 2 FLOPs).


def test_conv_and_dense_flops_by_hand():
  # Conv2D(2, 3, same) on 4x4x1: 4*4*2 outputs of 3*3*1 multiply-adds = 288;
  # Dense(3) on the 32 flattened values: 32*3 = 96. Flatten counts nothing.
  inputs = keras.Input((4, 4, 1))
  x = keras.layers.Flatten()(keras.layers.Conv2D(2, 3, padding="same")(inputs))
  model = keras.Model(inputs, keras.layers.Dense(3)(x))
  assert flops.count_flops(model, batch_size=5) == 5 * 2 * (288 + 96)
  assert flops.count_training_flops(model, batch_size=5) == 3 * 5 * 2 * (288 + 96)


def test_transposed_depthwise_separable_and_nested_flops_by_hand():
  inputs = keras.Input((None, None, 2))
  # Conv2DTranspose(3, 2, strides 2) on 3x3x2: each of the 18 input values meets 2*2*3 weights.
  up = keras.layers.Conv2DTranspose(3, 2, strides=2)(inputs)  # 6x6x3
  # DepthwiseConv2D(3, same) on 6x6x3: 108 outputs of 9 multiply-adds.
  depthwise = keras.layers.DepthwiseConv2D(3, padding="same")(up)
  # SeparableConv2D(4, 3, valid) on 6x6x3: 4x4 positions, depthwise 3*3*3, pointwise 3*4.
  separable = keras.layers.SeparableConv2D(4, 3)(depthwise)
  block = keras.Sequential([keras.layers.Conv2D(5, 1)])  # nested: 4*4*5 outputs of 4 each
  model = keras.Model(inputs, block(separable))
  expected = 18 * 12 + 108 * 9 + 16 * (27 + 12) + 80 * 4
  assert flops.count_flops(model, batch_size=1, input_shapes=[(3, 3, 2)]) == 2 * expected


def test_frozen_layers_have_no_backward_pass():
  # Frozen conv (288 multiply-adds per example) then a trainable Dense (96): the step is the
  # forward pass of both and the two gradients of the Dense only.
  inputs = keras.Input((4, 4, 1))
  conv = keras.layers.Conv2D(2, 3, padding="same", trainable=False)
  model = keras.Model(inputs, keras.layers.Dense(3)(keras.layers.Flatten()(conv(inputs))))
  assert flops.count_training_flops(model, batch_size=1) == 2 * (288 + 96) + 2 * 2 * 96


def test_uncounted_layers_add_nothing():
  inputs = keras.Input((8, 8, 3))
  x = keras.layers.BatchNormalization()(inputs)
  x = keras.layers.MaxPooling2D()(keras.layers.ReLU()(x))
  model = keras.Model(inputs, keras.layers.GlobalAveragePooling2D()(x))
  assert flops.count_flops(model, batch_size=4) == 0


# The peer runner: a peer that cannot run is reported as skipped, never faked.


def test_missing_peer_venv_is_skipped(tmp_path):
  result = peer_runner.run_peer(["triplet", "--batch_size", 8], venv=tmp_path / "nowhere")
  assert set(result) == {"skipped"}
  assert "no peer venv" in result["skipped"]
  assert "setup_peer_venv.sh" in result["skipped"]


@pytest.mark.parametrize("body, reason", [
    ("import sys; print('boom', file=sys.stderr); sys.exit(3)", "failed (exit 3): boom"),
    ("print('no json here')", "printed no JSON result"),
    ("import time; time.sleep(30)", "ran over 1 s"),
])
def test_failing_peer_is_skipped(tmp_path, body, reason):
  script = tmp_path / "peer.py"
  script.write_text(body)
  result = peer_runner.run_script(sys.executable, script, [], timeout_s=1 if "sleep" in body else 60)
  assert set(result) == {"skipped"}
  assert reason in result["skipped"]


def test_peer_json_is_the_last_line(tmp_path):
  script = tmp_path / "peer.py"
  script.write_text("import json, sys; print('log line'); print(json.dumps({'args': sys.argv[1:]}))")
  assert peer_runner.run_script(sys.executable, script, ["a", 1], timeout_s=60) == {"args": ["a", "1"]}


def test_skipped_peers_are_printed_as_skipped():
  text = benchmark_peers.format_peers({
      "inception_v4": {"skipped": "no peer venv at /x"},
      "segmentation": {"skipped": "no files"},
      "triplet": [{"loss": "semi_hard", "batch_size": 128,
                   "ours": {"seconds_per_step": 0.01, "step_peak_bytes": 2 << 20,
                            "largest_tensor_bytes": 1 << 16, "graph_tensor_bytes": 1 << 20},
                   "peer": {"skipped": "no peer venv at /x"}}],
  })
  assert "inception_v4 training step vs timm: skipped (no peer venv at /x)" in text
  assert "segmentation input pipeline vs skipped (no files)" in text
  assert "peer skipped: no peer venv at /x" in text


# Our triplet step's memory, counted in its graph: O(B^2), not the B x B x B of a tiled loss.


@pytest.mark.parametrize("loss", ["semi_hard", "batch_hard"])
def test_triplet_step_graph_grows_as_batch_squared(loss):
  totals = []
  for size in (64, 128):
    labels = tf.constant(np.arange(size) % (size // 4), tf.int32)
    embeddings = tf.Variable(tf.math.l2_normalize(tf.random.stateless_normal([size, 8], [0, 1]), 1))
    step = tf_triplet_step.make_step(loss, labels, embeddings, margin=0.2)
    largest, total = tf_triplet_step.graph_tensor_bytes(step.get_concrete_function().graph)
    assert largest <= 8 * size * size  # one B x B matrix of at most 8-byte elements
    totals.append(total)
  assert 3.0 < totals[1] / totals[0] < 4.5


# The PIL-in-a-generator peer of the segmentation pipeline.


def test_pil_generator_dataset_matches_our_batches(tmp_path):
  pairs = []
  rng = np.random.default_rng(0)
  for i in range(2):
    image, mask = tmp_path / f"{i}.png", tmp_path / f"{i}_mask.png"
    Image.fromarray(rng.integers(0, 256, (20, 24, 3), dtype=np.uint8)).save(image)
    Image.fromarray(np.full((20, 24), i, np.uint8)).save(mask)
    pairs.append((str(image), str(mask)))
  dataset = benchmark_peers.make_pil_generator_dataset(pairs, patch_size=8, patches_per_image=3,
                                                       batch_size=4, shuffle_buffer=6, seed=0)
  images, labels = next(iter(dataset))
  assert images.shape == (4, 8, 8, 3) and images.dtype == tf.uint8
  assert labels.shape == (4, 8, 8) and labels.dtype == tf.int32
  # Every patch's mask is constant: the crop of image i's mask is all i.
  assert all(len(np.unique(label)) == 1 for label in labels.numpy())


# The benchmark itself, with tiny settings.


def _assert_positive_finite(name, value):
  assert isinstance(value, (int, float)) and math.isfinite(value) and value > 0, (name, value)


@pytest.mark.slow
def test_segmentation_benchmark_columns_are_positive(tmp_path, capsys):
  json_path = tmp_path / "results.json"
  args = benchmark.parse_args([
      "segmentation", "--preset", "smoke", "--steps", "1", "--windows", "1", "--matmul_size", "128",
      "--batch_size", "4", "--set", "model.widths=(4, 8)", "--set", "data.num_train_images=4",
      "--variants", ",".join(trainers.VARIANTS), "--cache_dir", str(tmp_path / "cache"),
      "--json", str(json_path)])
  results = benchmark.run_benchmark(args)
  (result,) = results["trainers"]
  assert [row["variant"] for row in result["rows"]] == list(trainers.VARIANTS)
  for row in result["rows"]:
    for key, value in row.items():
      if key not in tables.TEXT_COLUMNS:
        _assert_positive_finite(f"{row['variant']} {key}", value)
  _assert_positive_finite("input", result["input_images_per_s"])
  # The card's demand is its peak over the cheapest row's FLOPs per image; the ratio, the input's share.
  gflop_per_image = min(row["gflop_per_step"] for row in result["rows"]) / 4
  assert result["gtx960m_images_per_s"] == pytest.approx(trainers.GTX960M_GFLOPS / gflop_per_image)
  assert result["input_feed_ratio"] == pytest.approx(result["input_images_per_s"] / result["gtx960m_images_per_s"])
  assert set(result["eval_images_per_s"]) == {"float32", "mixed"}
  for precision, rate in result["eval_images_per_s"].items():
    _assert_positive_finite(f"eval {precision}", rate)
  _assert_positive_finite("matmul", results["header"]["matmul_gflops_per_s"]["float32"])
  printed = capsys.readouterr().out
  assert "== segmentation (preset smoke, batch 4" in printed
  assert f"{result['input_feed_ratio']:.2f}x a GTX 960M's FLOP-bound demand" in printed
  assert "fits" in printed and "4096.0 MiB" in printed
  assert "not run" not in printed  # every variant was asked for
  written = json.loads(json_path.read_text())
  assert written["trainers"][0]["rows"] == json.loads(json.dumps(result["rows"]))
  assert "_task" not in written["trainers"][0]


@pytest.mark.slow
def test_one_trainer_imports_nothing_of_the_others(tmp_path):
  # In a fresh interpreter: this test session has imported every trainer.
  code = ("import sys; from scripts import benchmark; benchmark.main(['segmentation', '--preset', "
          f"'smoke', '--estimate_only', '--cache_dir', {str(tmp_path)!r}]); "
          "print(sorted(m for m in sys.modules if m.split('.')[0] in ('triplet', 'inception_finetune')))")
  result = helpers.run_python(["-c", code])
  assert result.returncode == 0, result.stderr
  assert "== segmentation (preset smoke" in result.stdout
  assert result.stdout.splitlines()[-1] == "[]"


# Triplet writes fewer synthetic identities than its preset; the model and batch are the preset's.
@pytest.mark.parametrize("trainer, overrides", [
    ("segmentation", []),
    ("triplet", ["data.num_train_identities=32", "data.num_eval_identities=4",
                 "data.images_per_synthetic_identity=4", "data.num_pair_folds=1"]),
])
def test_gtx960m_presets_fit_4gb_by_the_estimate(trainer, overrides, tmp_path):
  # Inception V4's preset is checked in tests/test_inception_train.py.
  config = trainers.load_config(trainer, "gtx960m", overrides, batch_size=0)
  task = trainers.make_task(trainer, config, str(tmp_path))
  keras.mixed_precision.set_global_policy("mixed_float16")
  model = task.build_model()
  size = config.data.patch_size if trainer == "segmentation" else config.data.crop_size
  estimate = memory_estimate.estimate(model, config.train.batch_size, config.mixed_precision,
                                      input_shapes=[(size, size, 3)])
  assert config.mixed_precision
  assert estimate.total < trainers.BUDGET_MB * memory_estimate.MIB


def test_unknown_variant_is_refused():
  with pytest.raises(SystemExit):
    benchmark.parse_args(["segmentation", "--variants", "float32,bfloat16"])


def test_config_overrides_and_triplet_batch():
  config = trainers.load_config("triplet", "smoke", ["loss.margin=0.5"], batch_size=12)
  assert config.loss.margin == 0.5
  assert config.data.identities_per_batch * config.data.images_per_identity == 12
  assert config.train.batch_size == 12


# --exports: a row per export format beside the SavedModel, or one line without the extra.


def test_exports_without_the_extra_are_one_skipped_line(monkeypatch):
  monkeypatch.setitem(benchmark_exports.conversion.EXTRA, "onnx", ("a_runtime_not_installed",))
  exports = benchmark_exports.benchmark_exports(task=None, settings=None, workdir=None)
  line = benchmark_exports.format_exports(exports)
  assert line.startswith("exports: skipped (--format=onnx needs a_runtime_not_installed"), line
  assert "pip install -r requirements-export.txt" in line and "\n" not in line


@pytest.mark.slow
def test_exports_rows_are_timed_in_each_runtime(tmp_path):
  pytest.importorskip("tf2onnx", reason="requirements-export.txt is not installed")
  config = trainers.load_config("segmentation", "smoke", ["model.widths=(4, 8)"], batch_size=0)
  task = trainers.make_task("segmentation", config, str(tmp_path / "run"))
  exports = benchmark_exports.benchmark_exports(task, benchmark_timing.Settings(1, 1, 0, ()),
                                                str(tmp_path / "exports"))
  assert [row["format"] for row in exports["rows"]] == [name for name, _, _ in benchmark_exports.EXPORTS]
  for row in exports["rows"]:
    _assert_positive_finite(row["format"] + " ms", row["one_image_ms"])
    _assert_positive_finite(row["format"] + " img/s", row["batch_images_per_s"])
  text = benchmark_exports.format_exports(exports)
  assert f"batch {exports['batch_size']} img/s" in text and "LiteRT int8" in text, text
