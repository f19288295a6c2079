"""Weight averaging (train.ema_decay): an exponential moving average of the model's weights.

The compiled step updates the average after each finite step, on the device (every replica and
worker alike: the first replica's value is everyone's); the run's checkpoints hold it beside the
weights. The average is what the run evaluates (the raw weights' figures beside it, as raw/...),
keeps as its best, ends with and exports; the commands that read a checkpoint load it
(checkpoints.restore_weights). BatchNorm's moving statistics are averaged with the weights, as timm's ModelEmaV2
averages every buffer: the statistics then belong to the averaged weights they normalize.
"""
import contextlib

import tensorflow as tf

# Where a checkpoint holds the average of the model's i-th floating-point weight.
KEY = "weight_average/values/{}/.ATTRIBUTES/VARIABLE_VALUE"


def averaged_weights(model):
  """The weights that are averaged: every floating-point one, in the model's order."""
  return [weight for weight in model.weights if weight.dtype in ("float16", "bfloat16", "float32", "float64")]


class WeightAverage(tf.Module):
  """The average of `model`'s weights, with TF-Slim's (tf.train.ExponentialMovingAverage's)
  warm-up: the n-th update (from 0) uses min(decay, (1 + n) / (10 + n)), so that early averages are
  not dominated by the random initial weights."""

  def __init__(self, model, decay, strategy):
    super().__init__(name="weight_average")
    self.decay = decay
    self._weights = averaged_weights(model)
    with strategy.scope():
      self.values = [tf.Variable(tf.convert_to_tensor(weight), trainable=False, name=f"average_{i}",
                                 aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
                     for i, weight in enumerate(self._weights)]
      self.updates = tf.Variable(0, dtype=tf.int64, trainable=False, name="updates",
                                 aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)

  def update(self, finite):
    """Moves the average towards the weights (in the compiled step, after their update); a skipped
    (non-finite) step changes neither it nor the count."""
    n = tf.cast(self.updates, tf.float32)
    decay = tf.where(finite, tf.minimum(self.decay, (1.0 + n) / (10.0 + n)), 1.0)
    for average, weight in zip(self.values, self._weights):
      average.assign(decay * average + (1.0 - decay) * tf.cast(weight, average.dtype))
    self.updates.assign_add(tf.cast(finite, tf.int64))

  def load_into_model(self):
    for weight, average in zip(self._weights, self.values):
      weight.assign(average)

  @contextlib.contextmanager
  def in_model(self):
    """The model holds the average inside the block, its own weights again after it."""
    with kept(self._weights):
      self.load_into_model()
      yield


@contextlib.contextmanager
def kept(variables):
  """The variables' values of now, assigned back when the block ends, however it ends."""
  values = [tf.identity(v) for v in variables]
  try:
    yield
  finally:
    for variable, value in zip(variables, values):
      variable.assign(value)
