"""The work between the training loop's compiled calls, as a list of actions.

An Action runs after a compiled call that ends at one of its steps: a multiple of one of its
cadences (`every`), or one of its named steps (`at`: a phase's end, the run's end); an action with
neither runs after every call. Each cadence is written once, in the action: the loop ends each call
at the nearest step where some action is due (next_end), so every action falls on a call's end and
where calls end never changes the weights. What an action does takes only the Call it follows.
A trainer's copier who wants more between calls adds an action to the list, not a branch to the loop.
"""
import dataclasses
import time
from typing import Callable, NamedTuple

from absl import logging

from common.training import diagnostics

QUIET_S = 30.0  # the longest wall time between progress lines while steps finish


class Call(NamedTuple):
  """What one compiled call gives the actions after it.

  step: the step reached; metrics: one {name: float} per step run; batch: the host batch of the last
  step; agreed: what the workers agreed in the call (distributed.Cluster.agree; {} alone)."""
  step: int
  metrics: list
  batch: tuple
  agreed: dict


@dataclasses.dataclass(frozen=True)
class Action:
  """run(call) after each compiled call that ends at a multiple of one of `every` or at one of
  the steps `at`; after every call when both are empty."""
  run: Callable[[Call], None]
  every: tuple = ()
  at: tuple = ()

  def due(self, step):
    if not self.every and not self.at:
      return True
    return step in self.at or any(step % every == 0 for every in self.every)


def next_end(actions, step, length, phase_end):
  """The step at which the call starting after `step` ends: at most `length` steps on, at the
  phase's end, or at the nearest step where an action is due."""
  due = [(step // every + 1) * every for action in actions for every in action.every]
  due += [at for action in actions for at in action.at if at > step]
  return min([step + length, phase_end, *due])


def call_length(train_cfg, seconds_per_step):
  """This worker's length of the next call: at most train.steps_per_loop steps, and no more than
  fill train.seconds_per_loop (so that a signal is honoured soon after it arrives, however slow the
  step); one step while the speed is unknown (the first call, which traces). With several workers
  the smallest of theirs is taken (distributed.Cluster.call_length). Where calls end does not
  change the weights."""
  if not train_cfg.seconds_per_loop:
    return train_cfg.steps_per_loop
  if seconds_per_step is None:
    return 1
  return max(1, min(train_cfg.steps_per_loop, int(train_cfg.seconds_per_loop / seconds_per_step)))


def run_due(actions, call):
  """Runs, in the list's order, each action that is due at the call's step."""
  for action in actions:
    if action.due(call.step):
      action.run(call)


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
