"""The progress line of the training loop, an action after its compiled calls (common.training.actions):
each window's mean figures, speed and ETA, recorded for metrics.json, and a warning where the weights
stop moving."""
import time

from absl import logging

from common.training import diagnostics

QUIET_S = 30.0  # the longest wall time between progress lines while steps finish


def learning_rate(optimizer):
  """The optimizer's current learning rate (of the inner one under a LossScaleOptimizer)."""
  return float(getattr(optimizer, "inner_optimizer", optimizer).learning_rate)


class Progress:
  """The progress lines of one phase: the mean figures and speed of the steps since the last line
  (recorded for metrics.json), and how far a sample of the weights moved over them (a warning
  below train.stall_update_ratio). add() follows every call; log() is the progress line, and
  say_if_quiet() says it early, unrecorded, where none came for QUIET_S (slow steps)."""

  def __init__(self, phase, variables, total_steps, record, summaries, stall_update_ratio):
    self._phase = phase
    self._total_steps = total_steps
    self._record = record
    self._summaries = summaries
    self._stall_update_ratio = stall_update_ratio
    self._sample_weights = diagnostics.make_weight_sampler(variables)
    self._start_window()

  def _start_window(self):
    self._sums, self._count, self._start = {}, 0, time.time()
    self._said = self._start
    self._weights = self._sample_weights()

  def add(self, call):
    for metrics in call.metrics:
      self._count += 1
      for name, value in metrics.items():
        self._sums[name] = self._sums.get(name, 0.0) + value

  def _mean(self, name):
    return self._sums.get(name, 0.0) / max(self._count, 1)

  def _say(self, call):
    """Logs the progress line of the window so far; returns its speed in steps/s."""
    self._said = time.time()
    steps_per_s = self._count / max(self._said - self._start, 1e-9)
    eta = (self._total_steps - call.step) / max(steps_per_s, 1e-9)
    skipped = self._count - self._sums.get("finite", 0.0)
    logging.info("step %d/%d [%s] loss %.4f  lr %.3g  %.2f steps/s  ETA %s%s", call.step, self._total_steps,
                 self._phase.name, self._mean("loss"), learning_rate(self._phase.optimizer), steps_per_s,
                 _format_seconds(eta), f"  ({skipped:.0f} non-finite steps skipped)" if skipped else "")
    return steps_per_s

  def say_if_quiet(self, call):
    """The progress line so far where none came for QUIET_S: steps of seconds put train.log_every
    steps many minutes apart (a call itself that long is said by the signals' watcher)."""
    if time.time() - self._said >= QUIET_S:
      self._say(call)

  def log(self, call):
    """Logs the progress line, records the window's mean figures and speed, writes the weights'
    relative update (a warning if they stalled), and starts the next window."""
    steps_per_s = self._say(call)
    self._record.keep_window({name: self._mean(name) for name in self._sums if name != "finite"},
                             call.step, steps_per_s)
    update = diagnostics.relative_update(self._weights, self._sample_weights())
    self._summaries.train.write_scalars(call.step, {"diagnostics/relative_update": update})
    if self._sums.get("finite", 0.0) > 0 and update < self._stall_update_ratio:
      logging.warning(
          "TRAINING HAS STALLED: the weights moved by %.3g (relative) over the last %d steps; learning "
          "rate %.3g. Check optimizer.learning_rate and the gradients (summaries grad_norm)",
          update, self._count, learning_rate(self._phase.optimizer))
    self._start_window()


def _format_seconds(seconds):
  seconds = int(seconds)
  return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m" if seconds >= 3600 else f"{seconds // 60}m{seconds % 60:02d}s"
