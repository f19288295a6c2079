"""The work between the training loop's compiled calls, as a list of actions.

An Action runs after a compiled call that ends at one of its steps: a multiple of one of its
cadences (`every`), or one of its named steps (`at`: a phase's end, the run's end); an action with
neither runs after every call. Each cadence is written once, in the action: the loop ends each call
at the nearest step where some action is due (next_end), so every action falls on a call's end and
where calls end never changes the weights. What an action does takes only the Call it follows.
A chief_only action runs on the chief worker alone (what writes summaries or files once a run), yet
is in every worker's list: its cadence ends the calls of every worker alike, so that their
collectives line up. A trainer adds its own actions through Task.make_actions
(common/contract/task.py), never a branch to the loop. A leaf: imports nothing of common/.
"""
import dataclasses
from typing import Callable, NamedTuple


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
  the steps `at`; after every call when both are empty. chief_only: on the chief worker alone."""
  run: Callable[[Call], None]
  every: tuple = ()
  at: tuple = ()
  chief_only: bool = False

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


def run_due(actions, call, chief):
  """Runs, in the list's order, each action that is due at the call's step (a chief_only one where
  `chief`, this process is the chief worker, alone)."""
  for action in actions:
    if action.due(call.step) and (chief or not action.chief_only):
      action.run(call)
