"""The compiled step's gradient accumulation (train.accumulate_steps): k micro-batches give the
update of the whole batch, and a batch they do not divide is one line; its weight average
(train.ema_decay): the hand-computed average, unchanged by a skipped step, read back by commands."""
import numpy as np
import pytest
import tensorflow as tf
import keras

from common.contract.errors import ConfigError
from common.training import averaging
from common.training import checkpoints
from common.training import distributed
from common.training import train_step


def mean_squared_error(model, batch, training):
  inputs, targets = batch
  loss = tf.reduce_mean(tf.square(model(inputs, training=training) - targets))
  return loss, {"mean_target": tf.reduce_mean(targets)}


def small_model(seed=0):
  """A small model without BatchNorm, and its optimizer, built as the loop builds them."""
  keras.utils.set_random_seed(seed)
  model = keras.Sequential([keras.Input((6,)), keras.layers.Dense(8, activation="tanh"),
                            keras.layers.Dense(3, kernel_regularizer=keras.regularizers.L2(1e-2))])
  optimizer = keras.optimizers.LossScaleOptimizer(keras.optimizers.Adam(1e-2), initial_scale=1.0)
  optimizer.build(model.trainable_variables)
  return model, optimizer


def trained(accumulate_steps, batches, seed=0):
  """The weights and per-step metrics of small_model() after one step per batch."""
  model, optimizer = small_model(seed)
  step = train_step.make_train_step(model, optimizer, mean_squared_error, tf.distribute.get_strategy(),
                                    clipnorm=1.0, accumulate_steps=accumulate_steps)
  metrics = [{name: float(value) for name, value in step(batch).items()} for batch in batches]
  return [w.numpy() for w in model.weights], metrics


def random_batches(count, size=12, seed=0):
  rng = np.random.default_rng(seed)
  return [tuple(tf.constant(rng.normal(size=(size, n)), tf.float32) for n in (6, 3)) for _ in range(count)]


def test_micro_batches_give_the_whole_batchs_update():
  batches = random_batches(4)
  whole, whole_metrics = trained(1, batches)
  for k in (2, 3, 12):
    accumulated, metrics = trained(k, batches)
    for a, b in zip(accumulated, whole):
      np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6, err_msg=f"accumulate_steps={k}")
    for got, expected in zip(metrics, whole_metrics):
      for name in ("loss", "regularization", "grad_norm", "mean_target", "finite"):
        assert got[name] == pytest.approx(expected[name], rel=1e-5, abs=1e-6), (k, name)
  # The check has teeth: an update from the first micro-batch alone is another one.
  first_half, _ = trained(1, [(x[:6], y[:6]) for x, y in batches])
  assert max(np.abs(a - b).max() for a, b in zip(first_half, whole)) > 1e-3


def test_accumulate_steps_that_do_not_divide_the_replicas_batch_are_one_line():
  strategy = tf.distribute.get_strategy()
  assert distributed.batch_sizes(12, strategy, 1, 4)["accumulate_steps"] == 4
  with pytest.raises(ConfigError) as error:
    distributed.batch_sizes(12, strategy, 1, 5)
  assert str(error.value) == ("train.accumulate_steps=5 does not divide the 12 examples per replica "
                              "(train.batch_size=12 over 1 replica(s))")


def test_the_weight_average_is_the_hand_computed_one_and_a_skipped_step_leaves_it(tmp_path):
  model, optimizer = small_model()
  strategy = tf.distribute.get_strategy()
  average = averaging.WeightAverage(model, 0.5, strategy)
  step = train_step.make_train_step(model, optimizer, mean_squared_error, strategy, average=average)
  batches = random_batches(4)
  poisoned = (batches[2][0], batches[2][1] * np.nan)  # a non-finite loss: the step is skipped
  expected = [w.numpy() for w in model.weights]  # the average starts at the initial weights
  updates = 0
  for batch in (batches[0], batches[1], poisoned, batches[2], batches[3]):
    finite = bool(step(batch)["finite"])
    if finite:  # TF-Slim's warm-up: the n-th update (from 0) decays by min(0.5, (1 + n) / (10 + n))
      decay = min(0.5, (1 + updates) / (10 + updates))
      expected = [decay * a + (1 - decay) * w.numpy() for a, w in zip(expected, model.weights)]
      updates += 1
    assert int(average.updates) == updates
    for value, wanted in zip(average.values, expected):
      np.testing.assert_allclose(value.numpy(), wanted, rtol=1e-6, atol=1e-7)
  assert updates == 4 and max(np.abs(a - w.numpy()).max() for a, w in zip(expected, model.weights)) > 1e-3
  # In the model for a block, its own weights after; commands read it from a checkpoint.
  raw = [w.numpy() for w in model.weights]
  with average.in_model():
    assert all(np.array_equal(w.numpy(), a.numpy()) for w, a in zip(model.weights, average.values))
  assert all(np.array_equal(w.numpy(), r) for w, r in zip(model.weights, raw))
  tf.train.CheckpointManager(tf.train.Checkpoint(model=model, weight_average=average), str(tmp_path),
                             max_to_keep=1).save()
  reader, _ = small_model(seed=1)
  checkpoints.restore_weights(reader, str(tmp_path))
  for weight, value in zip(reader.weights, average.values):
    np.testing.assert_array_equal(weight.numpy(), value.numpy())
