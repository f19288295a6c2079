"""BatchNorm statistics recalibrated for the weights a run serves (Task.calibrate: Inception V4's
layers trained from random weights), computed once, when a checkpoint is written, and kept in it.

The run's own evaluation and SavedModel and every reader of its checkpoints (evaluate, predict,
scripts/export.py: checkpoints.restore_weights) use those numbers, and none computes them again:
one answer per image. The model's own moving statistics stay as training made them, so that a
resumed run goes on exactly as one that was not stopped.
"""
import contextlib

from absl import logging
import tensorflow as tf

from common.training import averaging

# Where a checkpoint holds the calibrated value of the model's i-th BatchNorm statistic.
KEY = "calibrated_statistics/values/{}/.ATTRIBUTES/VARIABLE_VALUE"


def batch_norm_statistics(model):
  """The BatchNorm moving statistics, which a training forward pass assigns, in the model's order
  (model.weights': the same whichever layers are frozen)."""
  return [v for v in model.weights if v.path.endswith(("moving_mean", "moving_variance"))]


def random_states(model):
  """The states of the model's random layers (Keras 3 SeedGenerators: Dropout's), which each
  training forward pass advances; model.variables holds them, model.weights (and so a checkpoint
  of the model) does not."""
  weights = {id(w) for w in model.weights}
  return [v for v in model.variables if id(v) not in weights]


class CalibratedStatistics(tf.Module):
  """The statistics calibrate(model) gives the served weights (inside served(): the weight
  average with train.ema_decay), as variables the run's checkpoints hold."""

  def __init__(self, model, calibrate, served, strategy):
    super().__init__(name="calibrated_statistics")
    self._model, self._calibrate, self._served = model, calibrate, served
    self._statistics = batch_norm_statistics(model)
    self._random_states = random_states(model)
    with strategy.scope():
      self.values = [tf.Variable(tf.convert_to_tensor(v), trainable=False, name=f"calibrated_{i}",
                                 aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
                     for i, v in enumerate(self._statistics)]

  def update(self):
    """Recalibrates them for the served weights (before a checkpoint is written)."""
    with self._served(), self.recalibrated():
      self._copy_from_model()

  def restore(self, path):
    """Reads them from the run's checkpoint `path`; one written before they were kept gives the
    served weights' moving statistics, as its readers see them (its next save recalibrates)."""
    if tf.train.load_checkpoint(path).has_tensor(KEY.format(0)):
      tf.train.Checkpoint(calibrated_statistics=self).read(path).expect_partial()
      return
    logging.warning("%s holds no recalibrated BatchNorm statistics (written before they were kept): "
                    "its moving ones stand in until the next checkpoint", path)
    with self._served():
      self._copy_from_model()

  def _copy_from_model(self):
    for value, statistic in zip(self.values, self._statistics):
      value.assign(statistic)

  @contextlib.contextmanager
  def recalibrated(self):
    """Inside the block the model's statistics are calibrated for its current weights (the raw
    weights' figures beside the average's); its own again after it. Its training passes leave the
    random layers' states as they were: a run that saves at a step goes on as one that does not."""
    with averaging.kept(self._statistics + self._random_states):
      self._calibrate(self._model)
      yield

  @contextlib.contextmanager
  def served(self):
    """The model holds the served weights and these statistics inside the block, its own after it."""
    with self._served(), averaging.kept(self._statistics):
      self.load_into_model()
      yield

  def load_into_model(self):
    for statistic, value in zip(self._statistics, self.values):
      statistic.assign(value)

