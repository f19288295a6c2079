"""The Inception V4 fine-tuning trainer: the loss, the gtx960m preset and two phases end to end (bad
input is in tests/test_bad_inputs.py's table)."""
import glob
import json
import os
import shutil
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

from common.training import calibration
from common.contract.errors import DataError
from configs import inception_v4 as config_lib
import helpers
from inception_finetune import data as data_lib
from inception_finetune import inception_v4 as iv
from inception_finetune import losses
from inception_finetune import slim_checkpoint
from inception_finetune import task as task_lib
from inception_finetune import train
from scripts.benchmarking import memory_estimate
import test_run_files

# The base blocks the end-to-end test keeps frozen in phase 2 (its last 16 of 22 are unfrozen).
FROZEN_IN_PHASE_2 = iv.BLOCK_NAMES[:6]
HEAD_STEPS = 8
UNFROZEN_STEPS = 40


def test_the_loss_rejects_integer_vectors_float_ids_and_ids_out_of_range():
  logits = tf.zeros([2, 3])
  with pytest.raises(DataError, match=r"labels have shape \(2, 3\).*not one-hot"):
    losses.classification_loss(tf.constant([[0, 1, 0], [1, 0, 0]]), logits, 3)
  with pytest.raises(DataError, match=r"float labels have shape \(2,\)"):
    losses.classification_loss(tf.constant([0.0, 2.0]), logits, 3)
  with pytest.raises(tf.errors.InvalidArgumentError, match="label >= num_classes"):
    losses.classification_loss(tf.constant([0, 3]), logits, 3)


def test_label_smoothing_is_slims():
  logits = tf.constant([[2.0, 0.0, -1.0]])
  smoothed = losses.classification_loss(tf.constant([0]), logits, 3, label_smoothing=0.3)
  log_probs = tf.nn.log_softmax(logits)[0].numpy()
  targets = np.array([0.7 + 0.1, 0.1, 0.1])  # one-hot * (1 - 0.3) + 0.3 / 3
  np.testing.assert_allclose(smoothed.numpy(), -(targets * log_probs).sum(), rtol=1e-6)


def test_gtx960m_preset_is_the_largest_micro_batch_that_fits_4gb_by_estimate():
  # A 4 GB card leaves about 3.5 GiB to TensorFlow after the CUDA context.
  budget = 3.5 * 1024**3
  config = config_lib.get_config("gtx960m")
  assert config.mixed_precision
  assert config.train.batch_size == config_lib.get_config().train.batch_size  # the recipe's batch
  keras.mixed_precision.set_global_policy("mixed_float16")
  model = task_lib.build_model(config, data_lib.read_settings(config.data), config.data.num_classes)
  batch_size = config.train.batch_size // config.train.accumulate_steps  # one micro-batch at a time
  for phase in task_lib.make_phases(config, model, config.mixed_precision):
    phase.prepare()
    assert memory_estimate.estimate(model, batch_size, True).total < budget, phase.name
  assert memory_estimate.estimate(model, batch_size + 8, True).total > budget


def finetune_config(num_steps):
  """The smoke preset, sized so that a mostly random network learns the synthetic classes.

  Phase 2 unfreezes 16 blocks and trains at 1e-3: a random base, unlike a pretrained one,
  must be trained to be of use. BatchNorm statistics move at decay 0.9 so that the
  short run's evaluation is meaningful; images skip the random distortions to learn faster.
  """
  return helpers.make_config("inception_v4", "smoke", **{
      "deterministic": True, "train.num_steps": num_steps, "train.log_every": 8,
      "summaries.scalars_every": 4, "finetune.head_steps": HEAD_STEPS,
      "finetune.unfreeze_last_blocks": len(iv.BLOCK_NAMES) - len(FROZEN_IN_PHASE_2),
      "finetune.learning_rate": 1e-3, "model.batch_norm_decay": 0.9, "data.augment": False,
      "data.synthetic_images_per_class": 30})


def read_checkpoint_values(workdir, config, num_classes):
  """{slim name: value} of the model in the newest checkpoint of a workdir."""
  model = task_lib.build_model(config, data_lib.read_settings(config.data), num_classes)
  latest = tf.train.latest_checkpoint(os.path.join(workdir, "checkpoints"))
  tf.train.Checkpoint(model=model).restore(latest).expect_partial()
  return {name: v.numpy() for name, v in slim_checkpoint.slim_variables(model).items()}


@pytest.fixture(scope="module")
def slim_checkpoint_path(slim_inception_checkpoint):
  """A stand-in TF-Slim checkpoint (random, 1001 classes): the session's (tests/conftest.py), read only."""
  return slim_inception_checkpoint


@pytest.fixture(scope="module")
def finetune_run(module_tmp, slim_checkpoint_path):
  """Phase 1 alone from the stand-in TF-Slim checkpoint, then phase 2 resumed."""
  root = module_tmp("finetune")
  config = finetune_config(HEAD_STEPS)
  config.checkpoint_path = slim_checkpoint_path
  reader = tf.train.load_checkpoint(config.checkpoint_path)
  slim_values = {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()}
  workdir = str(root / "run")
  num_classes = config.data.num_classes
  after_head = train.train_and_evaluate(config, workdir)
  head_values = read_checkpoint_values(workdir, config, num_classes)
  config = finetune_config(HEAD_STEPS + UNFROZEN_STEPS)
  results = train.train_and_evaluate(config, workdir)  # resumes at step HEAD_STEPS, in phase 2
  return dict(config=config, workdir=workdir, slim=slim_values, head=head_values, after_head=after_head,
              final=read_checkpoint_values(workdir, config, num_classes), results=results)


def in_blocks(name, blocks):
  return name.startswith(tuple(f"{iv.SCOPE}/{block}/" for block in blocks))


@pytest.mark.slow
def test_phase_1_leaves_the_restored_base_bit_identical(finetune_run):
  assert finetune_run["after_head"]["step"] == HEAD_STEPS
  slim, head = finetune_run["slim"], finetune_run["head"]
  base = [name for name in head if not name.startswith(iv.HEAD_SCOPES)]
  assert len(base) == 596 and any(name.endswith("moving_variance") for name in base)
  for name in base:
    np.testing.assert_array_equal(head[name], slim[name], err_msg=name)
  # The new head is the 10-class one, not the checkpoint's 1001-class head.
  assert head["InceptionV4/Logits/Logits/weights"].shape == (512, 10)


@pytest.mark.slow
def test_phase_2_changes_the_unfrozen_blocks_and_only_those(finetune_run):
  slim, head, final = finetune_run["slim"], finetune_run["head"], finetune_run["final"]
  assert finetune_run["results"]["step"] == HEAD_STEPS + UNFROZEN_STEPS
  for name, value in final.items():
    if name.startswith(iv.HEAD_SCOPES):
      assert not np.array_equal(value, head[name]), name
    elif in_blocks(name, FROZEN_IN_PHASE_2):
      np.testing.assert_array_equal(value, slim[name], err_msg=name)
    else:
      assert not np.array_equal(value, slim[name]), name  # kernels, beta and moving statistics


@pytest.mark.slow
def test_training_accuracy_rises_clearly_above_chance(finetune_run):
  chance = 1.0 / finetune_run["config"].data.num_classes
  accuracy = helpers.read_scalars(os.path.join(finetune_run["workdir"], "train"), "accuracy")
  last_steps = [value for step, value in accuracy.items() if step > HEAD_STEPS + UNFROZEN_STEPS - 16]
  assert len(last_steps) >= 3
  assert np.mean(last_steps) > 3 * chance, accuracy
  with open(os.path.join(finetune_run["workdir"], "metrics.json")) as f:
    metrics = json.load(f)
  assert metrics["train"]["loss"] < np.log(finetune_run["config"].data.num_classes) - 0.3
  assert metrics["eval"]["top1"] > 2 * chance  # held-out images, BatchNorm in inference mode


@pytest.mark.slow
def test_reports_and_saved_model_are_written(finetune_run, run_cli):
  workdir = finetune_run["workdir"]
  for name in ("labels.txt", "class_balance.csv", "eval/confusion_matrix.csv",
               "eval/confusion_matrix.png", "eval/per_class_accuracy.csv"):
    assert os.path.isfile(os.path.join(workdir, name)), name
  evaluation = finetune_run["results"]["eval"]
  assert 0 <= evaluation["top1"] <= evaluation["top5"] <= 1
  serve = tf.saved_model.load(os.path.join(workdir, "saved_model")).signatures["serving_default"]
  images = tf.random.stateless_uniform([2, 90, 70, 3], [0, 1], maxval=256, dtype=tf.int32)
  out = serve(images=tf.cast(images, tf.uint8))  # any size: the signature crops and resizes
  assert out["probabilities"].shape == (2, 10)
  np.testing.assert_allclose(out["probabilities"].numpy().sum(axis=1), 1.0, rtol=1e-5)
  # The evaluate CLI's --saved_model pass: the decoded eval images score as the final checkpoint did.
  task = task_lib.make_task(finetune_run["config"], workdir)
  exported = task.evaluate(task.saved_model_predict_fn(serve), True).metrics
  assert (exported["top1"], exported["top5"]) == (evaluation["top1"], evaluation["top5"])
  np.testing.assert_allclose(exported["loss"], evaluation["loss"], rtol=1e-4)
  # A fresh process: the export names each image's class as labels.txt does (and keeps the names).
  names = [line.split(":", 1)[1] for line in open(os.path.join(workdir, "labels.txt")).read().splitlines()]
  named = run_cli(["-c", "import sys, tensorflow as tf; out = tf.saved_model.load(sys.argv[1]).signatures["
                   "'serving_default'](images=tf.zeros([1, 90, 70, 3], tf.uint8)); print(int(out['class_ids'][0]),"
                   " out['class_names'][0].numpy().decode())", os.path.join(workdir, "saved_model")])
  class_id, name = named.stdout.split()
  assert name == names[int(class_id)], named.stderr[-2000:]
  with open(os.path.join(workdir, "saved_model", "assets", "class_names.txt")) as f:
    assert f.read().splitlines() == names
  # evaluate --workdir alone: the run's own config.json (the smoke preset, the stand-in's classes).
  evaluated = run_cli(["-m", "inception_finetune.evaluate", f"--workdir={workdir}"])
  assert evaluated.returncode == 0, evaluated.stderr[-3000:]
  assert json.loads(evaluated.stdout)["top1"] == evaluation["top1"]
  # The export on a class folder by evaluation flags only: no training folder (a SavedModel needs no
  # BatchNorm calibration), the run's classes; nothing written outside the report.
  eval_dir = glob.glob(os.path.join(workdir, "data", "synthetic-classes-*", "eval"))[0]
  before = {path: os.path.getmtime(path) for path in glob.glob(f"{workdir}/**", recursive=True)
            if os.path.isfile(path)}
  evaluated = run_cli(["-m", "inception_finetune.evaluate", f"--workdir={workdir}",
                       f"--saved_model={workdir}/saved_model", "--config.data.source=folder",
                       "--config.data.train_dir=/nowhere", f"--config.data.eval_dir={eval_dir}",
                       f"--report_dir={workdir}/other"])
  assert evaluated.returncode == 0, evaluated.stderr[-3000:]
  assert json.loads(evaluated.stdout)["top1"] == evaluation["top1"]
  assert {path: os.path.getmtime(path) for path in glob.glob(f"{workdir}/**", recursive=True)
          if os.path.isfile(path) and not path.startswith(os.path.join(workdir, "other"))} == before


@pytest.mark.slow
def test_a_corrupt_checkpoint_of_the_run_is_one_line_for_evaluate(finetune_run, tmp_path, monkeypatch, capsys):
  """evaluate --workdir on a copy of the run whose newest checkpoint has flipped bytes in its data file."""
  workdir = tmp_path / "run"
  shutil.copytree(os.path.join(finetune_run["workdir"], "checkpoints"), workdir / "checkpoints")
  for name in ("config.json", "labels.txt", "class_balance.csv"):
    shutil.copy(os.path.join(finetune_run["workdir"], name), workdir)
  data = test_run_files.corrupt(tf.train.latest_checkpoint(str(workdir / "checkpoints")))
  monkeypatch.setattr(sys, "argv", ["evaluate"])
  line = test_run_files.error_line(capsys, test_run_files.evaluate, "inception_v4", workdir)
  assert line.startswith(f"error: {data} is corrupt (checksum does not match)"), line


@pytest.mark.slow
def test_calibration_recomputes_the_statistics_of_trained_random_batch_norm_layers_only(
    slim_checkpoint_path):
  config = helpers.make_config("inception_v4", "smoke", **{
      "train.batch_size": 8, "finetune.unfreeze_last_blocks": 2,
      "checkpoint_exclude_scopes": "InceptionV4/Logits,InceptionV4/Mixed_7d"})
  config.checkpoint_path = slim_checkpoint_path
  model = task_lib.build_model(config, data_lib.read_settings(config.data), 10)
  slim_checkpoint.restore(model, config.checkpoint_path, config.checkpoint_exclude_scopes)
  slim_checkpoint.set_trainable_scopes(model, task_lib.unfrozen_scopes(config))  # phase 2: the head, Mixed_7c, 7d
  fresh = task_lib.fresh_batch_norm_layers(model, config)
  assert fresh and {layer.name.split(".")[0] for layer in fresh} == {"Mixed_7d"}
  images = tf.random.stateless_normal([32, 75, 75, 3], [1, 2])
  dataset = tf.data.Dataset.from_tensor_slices((images, tf.zeros([32], tf.int32))).batch(8).repeat()
  before = {v.path: v.numpy() for v in calibration.batch_norm_statistics(model)}
  task_lib.make_batch_norm_calibration(config, lambda: dataset)(model)
  fresh_paths = {v.path for layer in fresh for v in (layer.moving_mean, layer.moving_variance)}
  for variable in calibration.batch_norm_statistics(model):
    if variable.path not in fresh_paths:  # restored Mixed_7c (trainable) and the frozen base
      np.testing.assert_array_equal(variable.numpy(), before[variable.path], err_msg=variable.path)
  assert all(layer.momentum == config.model.batch_norm_decay for layer in fresh)
  # The statistics a training pass normalizes with, averaged over the 32 // 8 batches.
  name = "Mixed_7d.Branch_0.Conv2d_0a_1x1"
  probe = keras.Model(model.inputs, model.get_layer(name).output)
  moments = [tf.nn.moments(probe(batch, training=True), axes=[0, 1, 2]) for batch in tf.split(images, 4)]
  layer = model.get_layer(f"{name}.BatchNorm")
  np.testing.assert_allclose(layer.moving_mean.numpy(), np.mean([m for m, _ in moments], axis=0),
                             rtol=1e-4, atol=1e-5)
  np.testing.assert_allclose(layer.moving_variance.numpy(), np.mean([v for _, v in moments], axis=0),
                             rtol=1e-4, atol=1e-5)


def test_the_first_phase_is_named_by_what_it_trains_and_keeps_its_checkpoint_name():
  for preset, first in (("smoke", "head"), ("scratch", "all layers")):
    phases = task_lib.make_phases(helpers.make_config("inception_v4", preset), None, False)
    assert [p.name for p in phases] == [first, "unfrozen"]
    assert phases[0].checkpoint_name == "head"  # checkpoints of either resume
