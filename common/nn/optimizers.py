"""The optimizer of every phase and its learning-rate schedule, inside a LossScaleOptimizer.

The LossScaleOptimizer is the loop's non-finite guard in both precisions (float32 starts at
scale 1, where scaling is exact): a step whose gradients are not finite changes no weight.
Each phase has its own optimizer, so a schedule counts the steps of its phase from 0.
"""
from absl import logging
import keras
import tensorflow as tf

from common.contract.task import Phase

# Decoupled weight decay (AdamW) shrinks kernels only: biases and BatchNorm's offsets and scales
# are left alone, as in Loshchilov & Hutter's and most recipes.
NO_WEIGHT_DECAY = ["bias", "beta", "gamma"]


def make_optimizer(opt_cfg, mixed_precision, num_steps, learning_rate=None, phase="train"):
  """The phase's optimizer; num_steps is the phase's length (cosine and polynomial decay over it),
  learning_rate overrides opt_cfg.learning_rate (a second fine-tuning phase, say), phase names the
  phase in the warnings of a schedule that outlasts it."""
  warn_if_longer_than_phase(opt_cfg, num_steps, phase)
  schedule = make_schedule(opt_cfg, num_steps,
                           learning_rate if learning_rate is not None else opt_cfg.learning_rate)
  # Clipping is the train step's (train_step.make_train_step), not the optimizer's.
  if opt_cfg.name in ("adam", "adamw"):
    adam = opt_cfg.adam
    inner = keras.optimizers.Adam(schedule, beta_1=adam.beta_1, beta_2=adam.beta_2, epsilon=adam.epsilon,
                                  weight_decay=opt_cfg.adamw.weight_decay if opt_cfg.name == "adamw" else None)
    if opt_cfg.name == "adamw":
      inner.exclude_from_weight_decay(var_names=NO_WEIGHT_DECAY)
  elif opt_cfg.name == "sgd":
    inner = keras.optimizers.SGD(schedule, momentum=opt_cfg.sgd.momentum, nesterov=opt_cfg.sgd.nesterov)
  else:
    rms = opt_cfg.rmsprop
    inner = keras.optimizers.RMSprop(schedule, rho=rms.rho, momentum=rms.momentum, epsilon=rms.epsilon)
  return keras.optimizers.LossScaleOptimizer(inner, initial_scale=2.0**15 if mixed_precision else 1.0)


def make_schedule(opt_cfg, num_steps, learning_rate):
  """optimizer.schedule as a Keras schedule of the phase's step, with optimizer.warmup_steps of
  linear warm-up in front of it."""
  name = opt_cfg.schedule
  if name == "constant":
    # A schedule rather than a float: a float would be a variable in the checkpoint, which a
    # resume with another schedule could not restore.
    decay = keras.optimizers.schedules.ExponentialDecay(learning_rate, 1, 1.0)
  elif name == "exponential":
    decay = keras.optimizers.schedules.ExponentialDecay(
        learning_rate, opt_cfg.decay_steps, opt_cfg.decay_rate, staircase=opt_cfg.staircase)
  elif name == "cosine":
    decay = keras.optimizers.schedules.CosineDecay(learning_rate, max(num_steps, 1),
                                                   alpha=opt_cfg.final_fraction)
  elif name == "piecewise":
    values = [learning_rate * opt_cfg.decay_rate**i for i in range(len(opt_cfg.boundaries) + 1)]
    decay = keras.optimizers.schedules.PiecewiseConstantDecay(list(opt_cfg.boundaries), values)
  else:
    decay = keras.optimizers.schedules.PolynomialDecay(
        learning_rate, max(num_steps, 1), learning_rate * opt_cfg.final_fraction, power=opt_cfg.power)
  return WarmUp(decay, opt_cfg.warmup_steps) if opt_cfg.warmup_steps else decay


def warn_if_longer_than_phase(opt_cfg, num_steps, phase):
  """Logs what the rate does when the warm-up or a piecewise boundary reaches past the phase's last
  step: the schedule counts each phase's steps from 0, so that part of it never happens."""
  if num_steps < 1:  # a phase that does not run
    return
  warmup = opt_cfg.warmup_steps
  if warmup > num_steps:
    logging.warning("optimizer.warmup_steps=%d is longer than the phase '%s' (%d steps): the rate rises "
                    "to %.0f%% of its peak and never reaches it", warmup, phase, num_steps,
                    100 * num_steps / warmup)
  if opt_cfg.schedule == "piecewise":
    # A boundary b lowers the rate from step b + 1 on; the phase's last step is num_steps - 1.
    late = [b for b in opt_cfg.boundaries if b >= num_steps - 1]
    if late:
      applied = len(opt_cfg.boundaries) - len(late)
      logging.warning("optimizer.boundaries %s are at or past the last step of the phase '%s' (%d steps) "
                      "and never apply: the rate ends at %.3g%% of its peak, not %.3g%%",
                      ", ".join(map(str, late)), phase, num_steps, 100 * opt_cfg.decay_rate**applied,
                      100 * opt_cfg.decay_rate**len(opt_cfg.boundaries))


class WarmUp(keras.optimizers.schedules.LearningRateSchedule):
  """The schedule's value times (step + 1) / warmup_steps over the first warmup_steps steps: the
  first update is already a small one, and the schedule's own curve is reached without a jump."""

  def __init__(self, schedule, warmup_steps):
    self.schedule, self.warmup_steps = schedule, warmup_steps

  def __call__(self, step):
    ramp = tf.minimum(1.0, (tf.cast(step, tf.float32) + 1.0) / float(self.warmup_steps))
    return self.schedule(step) * ramp


def single_phase(num_steps, optimizer_config, mixed_precision):
  """The phase list of a trainer that trains every layer with one optimizer."""
  return [Phase("train", num_steps, make_optimizer(optimizer_config, mixed_precision, num_steps))]
