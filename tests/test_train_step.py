"""The compiled step's gradient accumulation (train.accumulate_steps): k micro-batches give the
update of the whole batch, and a batch they do not divide is one line."""
import numpy as np
import pytest
import tensorflow as tf
import keras

from common.contract.errors import ConfigError
from common.training import distributed
from common.training import train_step


def mean_squared_error(model, batch, training):
  inputs, targets = batch
  loss = tf.reduce_mean(tf.square(model(inputs, training=training) - targets))
  return loss, {"mean_target": tf.reduce_mean(targets)}


def trained(accumulate_steps, batches, seed=0):
  """The weights and per-step metrics of a small model without BatchNorm after one step per batch."""
  keras.utils.set_random_seed(seed)
  model = keras.Sequential([keras.Input((6,)), keras.layers.Dense(8, activation="tanh"),
                            keras.layers.Dense(3, kernel_regularizer=keras.regularizers.L2(1e-2))])
  optimizer = keras.optimizers.LossScaleOptimizer(keras.optimizers.Adam(1e-2), initial_scale=1.0)
  optimizer.build(model.trainable_variables)  # as the loop does before its first step
  step = train_step.make_train_step(model, optimizer, mean_squared_error, tf.distribute.get_strategy(),
                                    clipnorm=1.0, accumulate_steps=accumulate_steps)
  metrics = [{name: float(value) for name, value in step(batch).items()} for batch in batches]
  return [w.numpy() for w in model.weights], metrics


def test_micro_batches_give_the_whole_batchs_update():
  rng = np.random.default_rng(0)
  batches = [tuple(tf.constant(rng.normal(size=(12, n)), tf.float32) for n in (6, 3)) for _ in range(4)]
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
