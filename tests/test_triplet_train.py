"""The triplet trainer end to end: smoke run, resume, softmax sanity mode, convergence, CLI errors."""
import io
import json
import os
import subprocess
import sys
import time
import types

import numpy as np
from PIL import Image
import pytest
import tensorflow as tf

from common.app import commands
import helpers
import test_run_files
from triplet import evaluate as triplet_evaluate
from triplet import task as task_lib
from triplet import train


def test_smoke_run_trains_evaluates_exports_and_resumes(tmp_path, capsys):
  config = helpers.make_config("triplet", "smoke", **{"train.num_steps": 10})
  results = train.train_and_evaluate(config, str(tmp_path))
  assert results["step"] == 10
  initial = results["initial_eval"]
  for name in ("recall_at_1", "recall_at_5", "verification_accuracy", "roc_auc"):
    assert 0.0 <= results["eval"][name] <= 1.0
    assert 0.0 <= initial[name] <= 1.0 and 0.0 <= initial["raw_pixels/" + name] <= 1.0
  summary = capsys.readouterr().out
  print(summary)
  for name in ("recall_at_1", "verification_accuracy"):
    assert (f"{name} {results['eval'][name]:.4f} (untrained {initial[name]:.4f}, "
            f"raw pixels {initial['raw_pixels/' + name]:.4f})") in summary
  with Image.open(tmp_path / "eval" / "roc.png") as image:  # the final evaluation's report
    assert image.format == "PNG"
  # TensorBoard: the ROC at the evaluation, and the hardest triplets of a training batch (at the
  # evaluation too, as 10 steps are fewer than summaries.images_every).
  shown = {(tag, step): value for tag, plugin, step, value in
           helpers.read_events(tmp_path / "eval") + helpers.read_events(tmp_path / "train") if plugin == "images"}
  assert {("roc", 10), ("hardest_triplets", 10)} <= set(shown)
  pngs = shown[("hardest_triplets", 10)].tensor.string_val[2:]  # width, height, then the images
  assert len(pngs) == config.summaries.max_outputs
  with Image.open(io.BytesIO(pngs[0])) as image:  # three crops enlarged side by side, two caption lines
    helpers.assert_shown_legibly(np.asarray(image), [-2, -1])
  with open(tmp_path / "metrics.json") as f:
    saved = json.load(f)
  assert saved["eval"]["recall_at_1"] == results["eval"]["recall_at_1"]
  # 2 folds of 4 different pairs cannot measure a 1e-3 false accept rate: no number, the reason.
  assert "val_at_far_1e-3" not in results["eval"] and "val_at_far_1e-3" not in initial
  assert saved["data"]["val_at_far_1e-3"] == (
      "n/a (needs 1000 different-identity pairs per fold, or over all folds for a pooled VAL; the "
      "pairs file has 4 in a fold, 8 overall)")
  tags = helpers.scalar_tags(tmp_path / "train")
  assert {"mining/active_fraction", "mining/positive_distance", "mining/negative_distance",
          "embedding_norm"} <= tags
  assert not [tag for tag in tags if tag.startswith("activations/")]  # off by default

  serve = tf.saved_model.load(str(tmp_path / "saved_model")).signatures["serving_default"]
  embeddings = serve(images=tf.zeros([3, 25, 31, 3], tf.uint8))["embeddings"]
  assert embeddings.shape == (3, config.model.embedding_size) and embeddings.dtype == tf.float32
  np.testing.assert_allclose(np.linalg.norm(embeddings.numpy(), axis=1), 1.0, rtol=1e-5)

  config.train.num_steps = 15
  resumed = train.train_and_evaluate(config, str(tmp_path))
  assert (resumed["step"], resumed["steps_run"]) == (15, 5)
  assert resumed["initial_eval"] == results["initial_eval"]


def test_softmax_sanity_mode_raises_training_accuracy(tmp_path):
  config = helpers.make_config("triplet", "smoke", **{
      "loss.name": "softmax", "train.num_steps": 60, "data.load_size": 40, "data.crop_size": 32,
      "model.widths": (16, 32, 64), "model.bn_momentum": 0.8})
  results = train.train_and_evaluate(config, str(tmp_path))
  before, after = results["initial_eval"]["train_accuracy"], results["eval"]["train_accuracy"]
  print(f"softmax training accuracy {before:.3f} -> {after:.3f}")
  assert after >= 0.75 and after > before + 0.3
  assert "accuracy" in helpers.scalar_tags(tmp_path / "train")


@pytest.mark.slow
def test_synthetic_identities_reach_recall_and_verification_090(tmp_path):
  """Held-out identities: recall@1 and 10-fold verification accuracy from chance-like to >= 0.90."""
  config = helpers.make_config("triplet", "default", **{
      "data.load_size": 40, "data.crop_size": 32, "data.identities_per_batch": 16,
      "data.num_train_identities": 64, "data.num_eval_identities": 20,
      "data.images_per_synthetic_identity": 6, "data.pairs_per_fold": 30,
      "model.widths": (16, 32, 64), "model.embedding_size": 64, "model.weight_decay": 1e-4,
      "model.bn_momentum": 0.9, "train.num_steps": 400, "train.log_every": 100,
      "train.eval_every": 400, "train.checkpoint_every": 400, "summaries.scalars_every": 100,
  })
  started = time.time()
  results = train.train_and_evaluate(config, str(tmp_path))
  initial, final = results["initial_eval"], results["eval"]
  print(f"recall@1 {initial['recall_at_1']:.3f} -> {final['recall_at_1']:.3f}, verification "
        f"{initial['verification_accuracy']:.3f} -> {final['verification_accuracy']:.3f} "
        f"in {time.time() - started:.0f} s")
  assert initial["recall_at_1"] < 0.5 and initial["verification_accuracy"] < 0.75
  assert final["recall_at_1"] >= 0.90
  assert final["verification_accuracy"] >= 0.90


def write_identity(root, name, count, size=20):
  os.makedirs(root / name, exist_ok=True)
  for i in range(1, count + 1):
    pixels = np.random.default_rng(i).integers(0, 256, (size, size, 3), dtype=np.uint8)
    Image.fromarray(pixels).save(root / name / f"{name}_{i:04d}.png")


def start_cli(module, args):
  return subprocess.Popen(
      [sys.executable, "-m", module, "--config=configs/triplet.py:smoke"] + args,
      cwd=helpers.REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
      env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))


@pytest.mark.slow
def test_evaluate_cli_and_bad_input(tmp_path, monkeypatch, capsys):
  """The evaluate CLI scores a checkpoint and its SavedModel alike; bad input is one line, exit code 2."""
  trained = tmp_path / "trained"
  train.train_and_evaluate(helpers.make_config("triplet", "smoke", **{"train.num_steps": 2}), str(trained))
  os.remove(trained / "eval" / "roc.png")  # the CLI's default place: it must write it again
  # A run on folders with a non-default model, evaluated by --workdir alone (its own config.json), and
  # with the evaluation's flags only: no training folder, and a P x K the held-out set could not fill.
  folders, held_out = tmp_path / "folders", tmp_path / "folders" / "held_out"
  for i in range(4):
    write_identity(folders / "training", f"trainee{i}", 2)
    write_identity(held_out, f"person{i}", 2)
  pairs = folders / "pairs.txt"
  pairs.write_text("1\t2\nperson0\t1\t2\nperson1\t1\t2\nperson0\t1\tperson1\t2\nperson2\t1\tperson3\t2\n")
  on_folders = train.train_and_evaluate(helpers.make_config("triplet", "smoke", **{
      "train.num_steps": 2, "model.embedding_size": 12, "data.source": "folder",
      "data.train_dir": str(folders / "training"), "data.eval_dir": str(held_out),
      "data.pairs_file": str(pairs)}), str(folders / "run"))["eval"]
  evaluations = {
      "checkpoint": start_cli("triplet.evaluate", [f"--workdir={trained}"]),
      "saved_model": start_cli("triplet.evaluate", [f"--workdir={trained}",
                                                    f"--saved_model={trained / 'saved_model'}",
                                                    f"--report_dir={tmp_path / 'report'}"]),
      "workdir alone": subprocess.Popen(
          [sys.executable, "-m", "triplet.evaluate", f"--workdir={folders / 'run'}"], cwd=helpers.REPO_ROOT,
          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True),
      "evaluation flags only": start_cli("triplet.evaluate", [
          f"--workdir={folders / 'run'}", "--config.model.embedding_size=12", "--config.data.source=folder",
          f"--config.data.eval_dir={held_out}", f"--config.data.pairs_file={pairs}",
          "--config.data.identities_per_batch=64"]),
  }
  # The trained run read with another model is one line, exit 2 (bad files and values are rows of
  # tests/test_bad_inputs.py's table): in this interpreter, while the evaluations above run.
  other_model = helpers.make_config("triplet", "smoke", **{"model.embedding_size": 16})
  # cli.run_config takes --config from the command line, as `evaluate --config=... --workdir=W` does.
  monkeypatch.setattr(sys, "argv", ["evaluate", "--config=configs/triplet.py:smoke"])
  mismatches = {
      "evaluate": test_run_files.error_line(capsys, commands.evaluate_run, types.SimpleNamespace(
          value=other_model), str(trained), triplet_evaluate.make_task),
      "resume": test_run_files.error_line(capsys, train.train_and_evaluate, other_model, str(trained)),
  }
  for command, line in mismatches.items():
    assert "raw_embedding" in line, (command, line)

  scores = {}
  for source, process in evaluations.items():
    stdout, stderr = process.communicate(timeout=600)
    assert process.returncode == 0, (source, stderr[-2000:])
    scores[source] = json.loads(stdout[stdout.index("{"):])
  for source in ("workdir alone", "evaluation flags only"):
    for name in ("recall_at_1", "verification_accuracy"):
      assert scores[source][name] == pytest.approx(on_folders[name], abs=1e-6), (source, name)
  assert scores["checkpoint"].keys() == scores["saved_model"].keys()
  assert scores["checkpoint"].pop("val_at_far_1e-3").startswith("n/a (needs 1000 ")
  for name, value in scores["checkpoint"].items():
    assert scores["saved_model"][name] == pytest.approx(value, abs=1e-5), name
  for png in (trained / "eval" / "roc.png", tmp_path / "report" / "roc.png"):
    with Image.open(png) as image:
      assert image.format == "PNG"


def test_best_metric_without_verification_pairs_falls_back_before_training(tmp_path, caplog):
  training, held_out = tmp_path / "training", tmp_path / "held_out"
  for i in range(4):
    write_identity(training, f"trainee{i}", 2)
    write_identity(held_out, f"person{i}", 2)
  expected = {"held-out identities, no pairs": (held_out, "recall_at_1", "the best recall_at_1's weights"),
              "no evaluation data": (None, "", "the last weights")}
  for case, (eval_dir, metric, kept) in expected.items():
    config = helpers.make_config("triplet", "smoke", **{
        "data.source": "folder", "data.train_dir": str(training), "data.eval_dir": str(eval_dir or "")})
    assert config.train.best_metric == "verification_accuracy"  # the presets' choice
    caplog.clear()
    task_lib.make_task(config, str(tmp_path / "run"))
    assert config.train.best_metric == metric, case
    assert (f"train.best_metric=verification_accuracy needs verification pairs (data.pairs_file): "
            f"keeping {kept} instead") in caplog.text, case
