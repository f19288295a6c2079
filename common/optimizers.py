"""The optimizer of every phase: Adam with exponential decay inside a LossScaleOptimizer.

The LossScaleOptimizer is the loop's non-finite guard in both precisions (float32 starts at
scale 1, where scaling is exact): a step whose gradients are not finite changes no weight.
"""
import keras


def make_optimizer(opt_cfg, mixed_precision, learning_rate=None):
  """learning_rate overrides opt_cfg.learning_rate (a second fine-tuning phase, say)."""
  schedule = keras.optimizers.schedules.ExponentialDecay(
      learning_rate if learning_rate is not None else opt_cfg.learning_rate,
      decay_steps=opt_cfg.decay_steps, decay_rate=opt_cfg.decay_rate, staircase=opt_cfg.staircase)
  inner = keras.optimizers.Adam(schedule)  # clipping is the train step's (train_step.make_train_step)
  return keras.optimizers.LossScaleOptimizer(inner, initial_scale=2.0**15 if mixed_precision else 1.0)
