"""The shared training loop: mixed precision, the non-finite guard, summaries under a budget.

The model is a small encoder-decoder defined here, so that common/ is tested without a trainer.
"""
import glob
import os
import signal
import time

import keras
import numpy as np
import pytest
import tensorflow as tf

from common.contract import config as config_lib
from common.training import diagnostics
from common.nn import optimizers
from common.runtime import signals
from common.app import startup
from common.contract import task as task_lib
from common.training import actions
from common.training import calibration
from common.training import train_loop
from common.contract.errors import TrainingDiverged
from common.contract.errors import ConfigError
from helpers import loop_task
from helpers import read_events
from helpers import read_scalars


def build_model(num_classes):
  """uint8 images [B, H, W, 3] (H, W even) -> float32 per-pixel logits: conv-BN-ReLU down and up."""
  inputs = keras.Input((None, None, 3), dtype="uint8")
  x = keras.layers.Rescaling(1 / 255, name="to_float")(inputs)
  skips = []
  for level, (width, strides) in enumerate(((4, 1), (8, 2))):
    for part in ("a", "b"):
      x = keras.layers.Conv2D(width, 3, strides=strides if part == "a" else 1, padding="same",
                              use_bias=False, name=f"enc{level}_{part}_conv")(x)
      x = keras.layers.BatchNormalization(name=f"enc{level}_{part}_bn")(x)
      x = keras.layers.ReLU()(x)
    skips.append(x)
  x = keras.layers.Conv2DTranspose(4, 3, strides=2, padding="same", name="up")(x)
  x = keras.layers.Concatenate()([x, skips[0]])
  logits = keras.layers.Conv2D(num_classes, 1, dtype="float32", name="logits")(x)
  return keras.Model(inputs, logits)


def tiny_config(steps=6, mixed_precision=False):
  config = config_lib.base_config()
  config.mixed_precision = mixed_precision
  config.train.num_steps = steps
  config.train.log_every = 2
  config.train.eval_every = 1000
  config.train.checkpoint_every = 1000
  config.train.max_consecutive_nonfinite = 1000
  config.summaries.scalars_every = 2
  return config


def patch_dataset(batch=4, size=16):
  """Images whose class is a threshold of the red channel: learnable, streamed, no constants."""

  def make(i):
    image = tf.random.stateless_uniform([batch, size, size, 3], [i, 7], maxval=256, dtype=tf.int32)
    labels = tf.cast(image[..., 0] > 127, tf.int32)
    return tf.cast(image, tf.uint8), labels

  return tf.data.Dataset.range(1 << 30).map(make)


def pixel_loss_fn(model, batch, training):
  images, labels = batch
  logits = tf.cast(model(images, training=training), tf.float32)
  return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels, logits)), {}


def pixel_accuracy(model):
  images, labels = next(iter(patch_dataset().take(1)))
  predictions = tf.argmax(model(images, training=False), axis=-1, output_type=tf.int32)
  return {"pixel_accuracy": float(tf.reduce_mean(tf.cast(predictions == labels, tf.float32)))}


def run_training(tmp_path, config, model, loss_fn=pixel_loss_fn, image_summaries_fn=None,
                 learning_rate=None, metrics_fn=pixel_accuracy):
  strategy = startup.prepare_run(config)
  with strategy.scope():
    optimizer = optimizers.make_optimizer(config.optimizer, config.mixed_precision, config.train.num_steps,
                                          learning_rate)
  task = loop_task(patch_dataset(), loss_fn, metrics_fn, image_summaries_fn)
  return train_loop.train(config, str(tmp_path), strategy=strategy, model=model, task=task,
                          phases=[task_lib.Phase("train", config.train.num_steps, optimizer)])


def scale_weights(model, factor):
  for variable in model.trainable_variables:
    if variable.path.endswith("kernel"):
      variable.assign(variable * factor)


def all_finite(variables):
  return all(np.all(np.isfinite(np.asarray(v, np.float32))) for v in variables)


def test_mixed_precision_keeps_variables_and_logits_float32():
  keras.mixed_precision.set_global_policy("mixed_float16")
  model = build_model(3)
  assert {v.dtype for v in model.variables} == {"float32"}
  assert model.get_layer("enc0_a_conv").compute_dtype == "float16"
  assert model(np.zeros([1, 16, 16, 3], np.uint8)).dtype == tf.float32


def naive_float16_training(initial_weights, steps, learning_rate):
  """The approach people try first: the whole model and its optimizer in float16, no loss scaling."""
  keras.mixed_precision.set_global_policy("float16")
  model = build_model(2)
  model.set_weights([w.astype(np.float16) for w in initial_weights])
  optimizer = keras.optimizers.Adam(learning_rate)
  for batch in patch_dataset().take(steps):
    with tf.GradientTape() as tape:
      loss = pixel_loss_fn(model, batch, True)[0]
    optimizer.apply(tape.gradient(loss, model.trainable_variables), model.trainable_variables)
  return model


@pytest.mark.slow
def test_mixed_precision_survives_where_naive_float16_overflows(tmp_path):
  # Large initial weights and a large learning rate, as in the original question.
  steps, learning_rate = 8, 1.0
  reference = build_model(2)
  scale_weights(reference, 50.0)
  initial = reference.get_weights()

  naive = naive_float16_training(initial, steps, learning_rate)
  assert not all_finite(naive.variables), "the naive float16 run was expected to overflow"

  keras.mixed_precision.set_global_policy("float32")
  config = tiny_config(steps, mixed_precision=True)
  config.optimizer.learning_rate = learning_rate
  keras.mixed_precision.set_global_policy("mixed_float16")
  model = build_model(2)
  model.set_weights(initial)
  results = run_training(tmp_path, config, model)
  assert results["step"] == steps
  assert all_finite(model.variables)
  assert {v.dtype for v in model.variables} == {"float32"}


@pytest.mark.parametrize("mixed_precision", [False, True])
def test_forced_inf_loss_skips_the_step_and_keeps_weights(tmp_path, mixed_precision):
  config = tiny_config(steps=3, mixed_precision=mixed_precision)
  startup.prepare_run(config)  # sets the precision policy before the build
  model = build_model(2)
  before = [np.array(v) for v in model.variables]

  def inf_loss(model, batch, training):
    loss, metrics = pixel_loss_fn(model, batch, training)
    return loss * np.inf, metrics

  results = run_training(tmp_path, config, model, loss_fn=inf_loss)
  assert results["nonfinite_steps"] == 3
  for old, new in zip(before, model.variables):  # BatchNorm moving statistics included
    np.testing.assert_array_equal(old, np.array(new), err_msg=new.path)


def test_consecutive_nonfinite_steps_stop_with_a_report_naming_the_layer(tmp_path):
  config = tiny_config(steps=10)
  config.train.max_consecutive_nonfinite = 3
  inputs = keras.Input((None, None, 3), dtype="uint8")
  x = keras.layers.Rescaling(1.0, name="to_float")(inputs)
  x = keras.layers.Conv2D(4, 3, padding="same", name="conv_ok")(x)
  x = keras.layers.Rescaling(1e30, name="still_finite")(x)
  x = keras.layers.Rescaling(1e30, name="overflows")(x)
  logits = keras.layers.Conv2D(2, 1, name="logits")(x)
  model = keras.Model(inputs, logits)
  with pytest.raises(TrainingDiverged) as error:
    run_training(tmp_path, config, model)
  message = str(error.value)
  assert "3 non-finite steps in a row, the last at step 3" in message
  assert "first non-finite activation: layer 'overflows'" in message
  assert "first non-finite gradient" in message
  assert all_finite(model.variables)
  assert tf.train.latest_checkpoint(os.path.join(tmp_path, "checkpoints"))


def image_summaries(model, batch, count):
  images, labels = (tensor[:count] for tensor in batch)
  del model
  return {"inputs": images, "labels": tf.cast(labels[..., None] * 255, tf.uint8)}


@pytest.mark.slow
def test_300_steps_of_default_summaries_stay_small(tmp_path):
  config = tiny_config(steps=300)
  config.summaries = config_lib.base_config().summaries  # the defaults
  config.summaries.images_every = 100  # so that images are written within 300 steps
  model = build_model(2)
  results = run_training(tmp_path, config, model, image_summaries_fn=image_summaries)
  event_bytes = sum(os.path.getsize(p) for p in glob.glob(os.path.join(tmp_path, "*", "events*")))
  assert event_bytes < 5 * 2**20
  assert results["summary_bytes"] == event_bytes
  events = read_events(os.path.join(tmp_path, "train"))
  images = [v for _, plugin, _, v in events if plugin == "images"]
  assert len(images) == 2 * 3  # two image summaries at steps 100, 200, 300
  for value in images:
    assert len(value.tensor.string_val) - 2 <= config.summaries.max_outputs  # width, height, then images
  assert not [tag for tag, plugin, _, _ in events if plugin == "histograms"]


@pytest.mark.parametrize("asked, expected", [
    ({}, set()),
    ({"histograms": True}, {"kernel"}),
    ({"bias_histograms": True}, {"bias"}),
    ({"activation_histograms": True}, {"activations"}),
])
def test_histograms_appear_only_when_asked(tmp_path, asked, expected):
  config = tiny_config(steps=2)
  config.summaries.histograms_every = 2
  for key, value in asked.items():
    config.summaries[key] = value
  run_training(tmp_path, config, build_model(2))
  tags = {tag for tag, plugin, _, _ in read_events(os.path.join(tmp_path, "train"))
          if plugin == "histograms"}
  kinds = {"activations" if t.startswith("activations/") else t.rsplit("/", 1)[-1] for t in tags}
  kinds = {"kernel" if k in ("kernel", "depthwise_kernel") else k for k in kinds}
  assert kinds == expected


def test_a_summary_over_the_size_limit_is_refused(tmp_path):
  config = tiny_config(steps=2)
  config.summaries.images_every = 2
  # 3 input images of 16x16x3 are 2,304 bytes; 3 label images of 16x16x1 are 768.
  config.summaries.max_summary_bytes = 1000
  results = run_training(tmp_path, config, build_model(2),
                         image_summaries_fn=image_summaries)
  assert results["summaries_refused"] == 1
  tags = {tag for tag, plugin, _, _ in read_events(os.path.join(tmp_path, "train")) if plugin == "images"}
  assert tags == {"labels"}


def test_training_reduces_the_loss_and_writes_its_outputs(tmp_path):
  config = tiny_config(steps=40)
  config.train.log_every = 20
  config.optimizer.learning_rate = 1e-2
  results = run_training(tmp_path, config, build_model(2))
  assert results["step"] == 40
  history = [v for tag, _, _, v in read_events(os.path.join(tmp_path, "train")) if tag == "loss"]
  first, last = (tf.make_ndarray(history[i].tensor) for i in (0, -1))
  assert last < 0.7 * first
  for name in ("metrics.json", "config.json", "config.txt"):
    assert os.path.exists(os.path.join(tmp_path, name))
  assert tf.train.latest_checkpoint(os.path.join(tmp_path, "checkpoints")).endswith("ckpt-40")


def test_a_tiny_learning_rate_is_reported_as_a_stall(tmp_path, caplog):
  config = tiny_config(steps=4)
  config.optimizer.learning_rate = 1e-50
  config.optimizer.allow_extreme_learning_rate = True
  run_training(tmp_path, config, build_model(2))
  assert "TRAINING HAS STALLED" in caplog.text


def test_best_metric_ends_the_run_with_the_peak_weights(tmp_path):
  config = tiny_config(steps=6)
  config.train.eval_every = 2
  config.train.best_metric = "score"
  scores = iter([0.2, 0.9, 0.5])  # evaluations at steps 2, 4 and 6: the peak is step 4's
  model = build_model(2)
  results = run_training(tmp_path, config, model, metrics_fn=lambda model: {"score": next(scores)})
  assert results["best"] == {"metric": "score", "value": 0.9, "step": 4}
  peak = build_model(2)
  tf.train.Checkpoint(model=peak).read(os.path.join(tmp_path, "checkpoints", "ckpt-4")).expect_partial()
  for kept, expected in zip(model.variables, peak.variables):
    np.testing.assert_array_equal(np.array(kept), np.array(expected), err_msg=kept.path)
  config.train.best_metric = "missing"
  with pytest.raises(ConfigError, match="train.best_metric='missing'.*score"):
    run_training(tmp_path / "other", config, build_model(2), metrics_fn=lambda model: {"score": 1.0})


def test_an_evaluation_loss_far_above_the_training_loss_is_a_warning_naming_causes(tmp_path, caplog):
  config = tiny_config(steps=4)
  config.train.eval_every = 2
  losses = iter([1e8, 1.5])  # evaluations at steps 2 and 4: training's cross-entropy is about 0.7
  run_training(tmp_path, config, build_model(2), metrics_fn=lambda model: {"loss": next(losses)})
  warnings = [r.getMessage() for r in caplog.records if "EVALUATION LOSS" in r.getMessage()]
  assert len(warnings) == 1 and warnings[0].startswith("EVALUATION LOSS 1e+08 IS FAR ABOVE"), warnings
  assert "BatchNorm moving statistics" in warnings[0] and "preprocessing" in warnings[0]
  assert diagnostics.eval_loss_warning(float("nan"), 0.5)
  assert not diagnostics.eval_loss_warning(25.0, 0.01)  # over-fitting: a floor of 1 for the ratio
  assert not diagnostics.eval_loss_warning(1e8, None)  # no training loss logged yet


def test_calls_end_where_the_nearest_action_is_due_and_only_due_actions_run():
  """The schedule alone: cadences 4 and 6, a named step 9, calls of at most 5 steps, a phase to 14;
  an action with no cadence runs after every call."""
  ran = []
  schedule = [actions.Action(lambda call: ran.append(("each", call.step))),
              actions.Action(lambda call: ran.append(("4|6", call.step)), every=(4, 6)),
              actions.Action(lambda call: ran.append(("at 9", call.step)), at=(9,))]
  step, ends = 0, []
  while step < 14:
    step = actions.next_end(schedule, step, 5, 14)
    ends.append(step)
    actions.run_due(schedule, actions.Call(step, [], (), {}), True)
  assert ends == [4, 6, 8, 9, 12, 14]
  assert [name for name, at in ran if name != "each"] == ["4|6", "4|6", "4|6", "at 9", "4|6"]
  assert [at for name, at in ran if name == "4|6"] == [4, 6, 8, 12]
  assert [at for name, at in ran if name == "each"] == ends
  assert actions.next_end(schedule, 14, 5, 100) == 16  # the cadence 4 first; 9 is behind
  assert actions.next_end(schedule, 0, 2, 100) == 2  # the call length first


def test_a_chief_only_action_ends_every_workers_calls_and_runs_on_the_chief_alone():
  """Its cadence is in every worker's list (so that their calls, and collectives, line up); only the
  chief runs it, the others run the rest."""
  for chief in (True, False):
    ran = []
    schedule = [actions.Action(lambda call: ran.append(("chief", call.step)), every=(3,), chief_only=True),
                actions.Action(lambda call: ran.append(("all", call.step)), every=(2,))]
    step = 0
    while step < 7:
      step = actions.next_end(schedule, step, 100, 7)
      actions.run_due(schedule, actions.Call(step, [], (), {}), chief)
    assert [at for name, at in ran if name == "all"] == [2, 4, 6]
    assert [at for name, at in ran if name == "chief"] == ([3, 6] if chief else [])


def test_a_trainers_own_actions_run_at_their_steps_and_change_no_weight(tmp_path):
  """Task.make_actions: a trainer's action every 3 steps and at step 8 runs there, made at the phase's
  start with the model and the run's summaries (into whose train/ writer it writes), and calls of 1
  step or of up to 100 train the same weights with it."""
  fired = {}

  def make_actions(model, summaries):
    def write(call):
      fired.setdefault(workdir, []).append(call.step)
      summaries.train.write_scalars(call.step, {"own/kernel_sum": float(tf.reduce_sum(model.weights[0]))})
    return [actions.Action(write, every=(3,), at=(8,))]

  trained = {}
  for steps_per_loop in (1, 100):
    workdir = tmp_path / str(steps_per_loop)
    run_regression(workdir, 10, poisoned_loss(), steps_per_loop=steps_per_loop, make_actions=make_actions)
    trained[steps_per_loop] = model_values(workdir)
    assert fired[workdir] == [3, 6, 8, 9]
    assert sorted(read_scalars(os.path.join(workdir, "train"), "own/kernel_sum")) == [3, 6, 8, 9]
  assert_same_values(trained[1], trained[100])


# Several steps in one compiled call (train.steps_per_loop): nothing the loop promises changes.


def indexed_dataset():
  """Regression batches that carry their index, so that a loss can misbehave at one step."""
  return tf.data.Dataset.range(1 << 30).map(
      lambda i: (tf.random.stateless_normal([4, 3], [i, 0]), tf.random.stateless_normal([4, 1], [i, 1]), i))


def poisoned_loss(poisoned=(), on_batch=None):
  """Mean squared error, infinite on the batches in `poisoned`; on_batch(index) runs in Python
  for every batch (inside the compiled call)."""
  def loss_fn(model, batch, training):
    x, y, index = batch
    loss = tf.reduce_mean(tf.square(model(x, training=training) - y))
    if on_batch:
      loss += 0.0 * tf.ensure_shape(tf.py_function(lambda i: float(on_batch(int(i))), [index], tf.float32), [])
    bad = tf.reduce_any(tf.equal(index, tf.constant(list(poisoned) or [-1], tf.int64)))
    return tf.where(bad, np.inf, loss), {}
  return loss_fn


def run_regression(workdir, steps, loss_fn, steps_per_loop=100, max_consecutive=1000, dataset=None,
                   seconds_per_loop=0.0, ema_decay=0.0, make_actions=None, calibrate=None):
  config = config_lib.base_config()
  config.train.ema_decay = ema_decay
  config.train.num_steps = steps
  config.train.batch_size = 4
  config.train.steps_per_loop = steps_per_loop
  config.train.seconds_per_loop = seconds_per_loop  # 0: calls end at fixed steps (asserted below)
  config.train.max_consecutive_nonfinite = max_consecutive
  config.train.log_every = config.train.eval_every = config.train.checkpoint_every = 1000
  config.summaries.scalars_every = 1000
  strategy = startup.prepare_run(config, str(workdir))
  with strategy.scope():
    inputs = keras.Input((3,))
    hidden = keras.layers.BatchNormalization()(keras.layers.Dense(8, activation="relu")(inputs))
    hidden = keras.layers.Dropout(0.5)(hidden)  # a random state, which a resume must restore
    model = keras.Model(inputs, keras.layers.Dense(1)(hidden))
    optimizer = optimizers.make_optimizer(config.optimizer, False, config.train.num_steps)
  task = loop_task(dataset or indexed_dataset(), loss_fn)
  task.make_actions, task.calibrate = make_actions, calibrate
  results = train_loop.train(config, str(workdir), strategy=strategy, model=model, task=task,
                             phases=[task_lib.Phase("train", steps, optimizer)])
  return results, model


def checkpoint_values(workdir):
  reader = tf.train.load_checkpoint(tf.train.latest_checkpoint(os.path.join(workdir, "checkpoints")))
  return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()
          if name.endswith("VARIABLE_VALUE") and "save_counter" not in name}


def model_values(workdir):
  """The weights and BatchNorm statistics in the newest checkpoint (the optimizer's counters and
  moments are left out: a skipped step still counts as an Adam iteration)."""
  return {name: value for name, value in checkpoint_values(workdir).items()
          if name.startswith(("model/", "optimizer_train/_trainable_variables/"))}


def assert_same_values(expected, actual):
  assert len(expected) >= 8 and expected.keys() == actual.keys()
  for name in expected:
    np.testing.assert_array_equal(expected[name], actual[name], err_msg=name)


def test_one_step_per_call_and_many_give_identical_weights(tmp_path):
  keras.utils.set_random_seed(0)
  run_regression(tmp_path / "one", 12, poisoned_loss(), steps_per_loop=1)
  keras.utils.set_random_seed(0)
  run_regression(tmp_path / "five", 12, poisoned_loss(), steps_per_loop=5)  # calls of 5, 5, 2
  assert_same_values(checkpoint_values(tmp_path / "one"), checkpoint_values(tmp_path / "five"))


def test_nonfinite_steps_inside_a_call_are_skipped_counted_and_named(tmp_path, caplog):
  keras.utils.set_random_seed(0)
  results, _ = run_regression(tmp_path / "poisoned", 8, poisoned_loss(range(3, 8)))  # one call of 8
  assert results["nonfinite_steps"] == 5
  for step in range(4, 9):
    assert f"step {step}: loss or gradients not finite (loss inf); step skipped" in caplog.text
  assert "step 3: loss" not in caplog.text
  # Skipped means unchanged: weights and BatchNorm statistics are those of the first three steps.
  keras.utils.set_random_seed(0)
  run_regression(tmp_path / "three", 3, poisoned_loss())
  assert_same_values(model_values(tmp_path / "three"), model_values(tmp_path / "poisoned"))


def test_the_consecutive_limit_inside_a_call_stops_at_that_step_with_the_last_finite_weights(tmp_path):
  keras.utils.set_random_seed(0)
  with pytest.raises(TrainingDiverged) as error:
    run_regression(tmp_path / "diverged", 10, poisoned_loss([2, 3, 4]), max_consecutive=3)
  assert "3 non-finite steps in a row, the last at step 5" in str(error.value)
  assert checkpoint_values(tmp_path / "diverged")["step/.ATTRIBUTES/VARIABLE_VALUE"] == 5
  keras.utils.set_random_seed(0)
  run_regression(tmp_path / "two", 2, poisoned_loss())
  assert_same_values(model_values(tmp_path / "two"), model_values(tmp_path / "diverged"))


def training_pass(model):
  """A Task.calibrate whose training forward pass, like Inception V4's, draws dropout masks."""
  model(tf.random.stateless_normal([4, 3], [0, 2]), training=True)


@pytest.mark.parametrize("ema_decay", [0.0, 0.9])
def test_sigterm_inside_a_call_then_resume_matches_an_uninterrupted_run(tmp_path, ema_decay):
  """With dropout, and a calibration at the save that the signal makes (the uninterrupted run saves
  at its end alone)."""
  keras.utils.set_random_seed(0)
  run_regression(tmp_path / "straight", 20, poisoned_loss([6]), steps_per_loop=8, ema_decay=ema_decay,
                 calibrate=training_pass)

  def signal_at_batch_10(index):
    if index == 10:
      os.kill(os.getpid(), signal.SIGTERM)  # handled once the call of steps 9 to 16 returns
    return 0

  keras.utils.set_random_seed(0)
  with pytest.raises(signals.Interrupted) as error:
    run_regression(tmp_path / "cut", 20, poisoned_loss([6], signal_at_batch_10), steps_per_loop=8,
                   ema_decay=ema_decay, calibrate=training_pass)
  assert "at step 16" in str(error.value)
  assert checkpoint_values(tmp_path / "cut")["step/.ATTRIBUTES/VARIABLE_VALUE"] == 16
  keras.utils.set_random_seed(1)  # the resumed run takes everything from the checkpoint
  results, _ = run_regression(tmp_path / "cut", 20, poisoned_loss([6]), steps_per_loop=8,
                              ema_decay=ema_decay, calibrate=training_pass)
  assert (results["step"], results["steps_run"], results["nonfinite_steps"]) == (20, 4, 1)
  straight = checkpoint_values(tmp_path / "straight")
  assert any(name.startswith("weight_average/") for name in straight) == bool(ema_decay)
  assert_same_values(straight, checkpoint_values(tmp_path / "cut"))


def test_a_slow_step_makes_short_calls_so_that_a_signal_is_honoured_soon(tmp_path):
  def slow_steps_and_a_signal_at_batch_5(index):
    time.sleep(0.1)
    if index == 5:
      os.kill(os.getpid(), signal.SIGTERM)
    return 0

  # 100 steps per call would stop at step 40; 0.3 s per call gives calls of about 3 steps.
  with pytest.raises(signals.Interrupted) as error:
    run_regression(tmp_path, 40, poisoned_loss((), slow_steps_and_a_signal_at_batch_5),
                   seconds_per_loop=0.3)
  stopped = checkpoint_values(tmp_path)["step/.ATTRIBUTES/VARIABLE_VALUE"]
  assert 6 <= stopped <= 10, str(error.value)


def test_a_recalibration_leaves_the_dropout_state_as_it_was():
  """A save's BatchNorm recalibration runs training passes, which advance Dropout's random state (a
  variable of the model that model.weights lacks, so run_state.py checkpoints it beside them): after
  it the state is as before, so a run that saves at a step draws the masks of one that does not."""
  inputs = keras.Input((3,))
  hidden = keras.layers.Dropout(0.5)(keras.layers.BatchNormalization()(keras.layers.Dense(8)(inputs)))
  model = keras.Model(inputs, keras.layers.Dense(1)(hidden))
  states = calibration.random_states(model)
  assert len(states) == 1 and not any(state is weight for weight in model.weights for state in states)
  before = states[0].numpy()
  calibrated = calibration.CalibratedStatistics(
      model, lambda m: m(tf.ones([4, 3]), training=True), None, tf.distribute.get_strategy())
  with calibrated.recalibrated():
    assert not np.array_equal(states[0].numpy(), before)  # the pass drew masks
  np.testing.assert_array_equal(states[0].numpy(), before)
