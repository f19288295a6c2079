"""Finding where training went wrong: non-finite values, activation statistics, stalls."""
import contextlib
import math
import os
import sys
import threading
import time

from absl import logging
import keras
import numpy as np
import tensorflow as tf

from common.contract.errors import ClusterFailed

# Elements sampled per variable to tell whether the weights moved (cheap next to a full copy).
_SAMPLE_PER_VARIABLE = 64


def activation_model(model):
  """A model returning {layer name: output} for every single-output layer, in graph order."""
  outputs = {}
  for layer in model.layers:
    if isinstance(layer, keras.layers.InputLayer):
      continue
    output = layer.output
    if isinstance(output, (list, tuple)):
      continue
    outputs[layer.name] = output
  return keras.Model(model.inputs, outputs)


def make_activation_statistics(probe):
  """statistics(inputs) -> {layer: (mean, variance)} of each output of `probe` (activation_model)
  for one batch, as Python floats: one compiled call and one read from the device, however many
  layers."""
  names = []

  @tf.function
  def moments(inputs):
    outputs = probe(inputs, training=False)
    names[:] = list(outputs)
    return tf.stack([tf.stack(tf.nn.moments(tf.reshape(tf.cast(value, tf.float32), [-1]), axes=[0]))
                     for value in outputs.values()])

  def statistics(inputs):
    values = moments(inputs).numpy()
    return {name: (float(mean), float(variance)) for name, (mean, variance) in zip(names, values)}

  return statistics


def locate_nonfinite(model, inputs, loss_and_grads):
  """One-line report of the first layer whose output, and the first variable whose gradient, is non-finite.

  loss_and_grads(): returns (loss, [gradient per model.trainable_variables]) for the failing batch.
  """
  parts = []
  bad_layer = next((name for name, value in activation_model(model)(inputs, training=True).items()
                    if not np.all(np.isfinite(np.asarray(tf.cast(value, tf.float32))))), None)
  parts.append(f"first non-finite activation: layer '{bad_layer}'" if bad_layer
               else "all activations finite")
  loss, grads = loss_and_grads()
  if not np.isfinite(float(loss)):
    parts.append(f"loss is {float(loss)}")
  bad_grad = next((v.path for v, g in zip(model.trainable_variables, grads)
                   if g is not None and not np.all(np.isfinite(np.asarray(tf.cast(g, tf.float32))))), None)
  parts.append(f"first non-finite gradient: '{bad_grad}'" if bad_grad else "all gradients finite")
  return "; ".join(parts)


def make_weight_sampler(variables):
  """sample() -> a small, fixed sample of every variable, concatenated, for stall detection: one
  compiled call and one read from the device, however many variables."""
  @tf.function
  def gather():
    return tf.concat([tf.cast(tf.reshape(v, [-1])[:_SAMPLE_PER_VARIABLE], tf.float32) for v in variables],
                     axis=0)

  return lambda: gather().numpy().astype(np.float64) if variables else np.zeros([0])


def relative_update(before, after):
  """||after - before|| / ||before|| over the sampled weights."""
  return float(np.linalg.norm(after - before) / max(np.linalg.norm(before), 1e-30))


class Watchdog:
  """Acts when no training step has finished for timeout_s (a stuck input pipeline, a hung device, a
  worker that stalled or left while the others wait in a collective): warns, or with `exit`, says
  so in one line and ends the process at once with ClusterFailed.EXIT_CODE (a hang inside a
  collective cannot be interrupted; nothing half-done is saved, the last checkpoint stands)."""

  def __init__(self, timeout_s, exit=False):  # pylint: disable=redefined-builtin
    self.timeout_s = timeout_s
    self.exit = exit
    self._last_beat = time.monotonic()
    self._step = 0
    self._paused = False
    self._stop = threading.Event()
    self._thread = None

  def __enter__(self):
    if self.timeout_s > 0:
      self._thread = threading.Thread(target=self._watch, daemon=True)
      self._thread.start()
    return self

  def beat(self, step):
    self._step = step
    self._last_beat = time.monotonic()
    self._paused = False

  def pause(self):
    """Not training until the next beat (an evaluation): no stall is counted meanwhile."""
    self._paused = True

  def _watch(self):
    while not self._stop.wait(min(self.timeout_s / 4, 30.0)):
      idle = time.monotonic() - self._last_beat
      if self._paused or idle <= self.timeout_s:
        continue
      if self.exit:
        sys.stderr.write(
            f"error: no training step has finished for {idle:.0f} s (train.stall_timeout_s="
            f"{self.timeout_s:g}; last finished step {self._step}): a worker stalled, failed or left; "
            f"exiting with code {ClusterFailed.EXIT_CODE} so that the run is restarted, nothing "
            "half-done saved: the same command resumes from the last checkpoint\n")
        sys.stderr.flush()
        os._exit(ClusterFailed.EXIT_CODE)  # pylint: disable=protected-access
      logging.warning("no training step has finished for %.0f s (last finished step: %d); "
                      "the input pipeline or the device may be stuck", idle, self._step)
      self._last_beat = time.monotonic()

  def __exit__(self, *exc):
    self._stop.set()


# An evaluation loss this many times the training loss (or 1, if that is lower) is no over-fitting:
# the evaluation runs another network than the one training saw.
EVAL_LOSS_RATIO = 30.0


def eval_loss_warning(eval_loss, train_loss):
  """The warning for an evaluation loss orders of magnitude above the training loss, or None."""
  if eval_loss is None or train_loss is None:
    return None
  if math.isfinite(eval_loss) and eval_loss <= EVAL_LOSS_RATIO * max(train_loss, 1.0):
    return None
  return (f"EVALUATION LOSS {eval_loss:.4g} IS FAR ABOVE THE TRAINING LOSS {train_loss:.4g}: the "
          "evaluation does not run the network that training saw. Likely causes: BatchNorm moving "
          "statistics not yet adapted to the weights (layers trained from random weights with a "
          "momentum near 1, e.g. TF-Slim's 0.9997, which inference mode uses), or evaluation "
          "preprocessing that differs from training's (image scale, crop, normalization)")


class StepProfile:
  """train.profile_steps=(start, stop): TensorFlow's profiler records the steps after `start` up
  to `stop` (whole compiled calls: a call ends at each of them) into <out>/train/plugins/profile/,
  which TensorBoard's Profile tab opens with the tensorboard-plugin-profile package
  (requirements-profile.txt). The chief alone profiles (its actions are chief_only), while every
  worker's calls end at its steps alike; () = off."""

  def __init__(self, steps, out):
    self.steps = tuple(steps)
    self.logdir = os.path.join(out, "train")
    self._running = False

  def actions(self, action):
    """The two actions (of class `action`) that start and stop the profile; none when off."""
    if not self.steps:
      return []
    return [action(self._start, at=self.steps[:1], chief_only=True),
            action(lambda call: self.stop(), at=self.steps[1:], chief_only=True)]

  def marking(self, step):
    """While profiling, marks a compiled call as one step for the profile's step-time view (its
    first step's number; a call may hold several)."""
    if not self._running:
      return contextlib.nullcontext()
    return tf.profiler.experimental.Trace("train", step_num=step, _r=1)

  def _start(self, call):
    tf.profiler.experimental.start(self.logdir)
    self._running = True
    logging.info("profiling steps %d to %d into %s", call.step + 1, self.steps[1],
                 os.path.join(self.logdir, "plugins", "profile"))

  def stop(self):
    """Ends the profile (at its last step, or where the run ends before it)."""
    if not self._running:
      return
    tf.profiler.experimental.stop()
    self._running = False
    try:
      import tensorboard_plugin_profile  # pylint: disable=g-import-not-at-top,unused-import
      viewer = "TensorBoard's Profile tab shows it"
    except ImportError:
      viewer = ("TensorBoard's Profile tab needs tensorboard-plugin-profile: pip install -r "
                "requirements-profile.txt (or pip install -e \".[profile]\")")
    logging.info("profile written to %s; %s", os.path.join(self.logdir, "plugins", "profile"), viewer)
