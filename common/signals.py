"""SIGTERM and Ctrl-C during training: finish the compiled call (or the evaluation), save, exit.

A signal that arrives while a compiled call runs is handled when the call returns (Python runs
signal handlers between its own instructions), which is where the loop can save a consistent
state: model, optimizer, step and input position of the same step.
"""
import signal

from absl import logging


class TrainingInterrupted(Exception):
  """SIGTERM or SIGINT arrived; the checkpoint of `step` is written."""

  def __init__(self, signum, step, checkpoint):
    super().__init__(f"interrupted by {signal.Signals(signum).name} at step {step}; "
                     f"checkpoint {checkpoint} written; run the same command again to resume")
    self.signum = signum


class SignalFlag:
  """Records SIGTERM/SIGINT so that the loop can checkpoint before it exits.

  The first signal lets the current compiled call (or evaluation) finish; the loop then saves
  and exits. A second signal while the newest step is already saved (during an evaluation, which
  always follows a save) exits at once. The handlers in place before are restored on exit.

  run: what the flag needs of the loop's state: step (a variable), saved_step, evaluating,
  stop_flag (a variable on several workers, else None), latest_checkpoint() and save_and_report()
  (saves the newest step, writes metrics.json, returns the checkpoint's path).
  """

  def __init__(self, run):
    self.run = run
    self.signum = None
    self._previous = {}

  def __enter__(self):
    for signum in (signal.SIGTERM, signal.SIGINT):
      self._previous[signum] = signal.signal(signum, self._record)
    return self

  def _record(self, signum, frame):
    del frame
    saved = self.run.saved_step == int(self.run.step)
    if self.signum is not None and saved:
      raise TrainingInterrupted(signum, int(self.run.step), self.run.latest_checkpoint())
    logging.warning("received %s: finishing this %s, then %s", signal.Signals(signum).name,
                    "evaluation" if self.run.evaluating else "compiled call of training steps",
                      "exiting (the checkpoint is written; a second signal exits now)" if saved
                      else "saving a checkpoint")
    self.signum = signum
    if self.run.stop_flag is not None:
      self.run.stop_flag.assign(1.0)  # the next compiled call tells the other workers

  def check(self, stop=None):
    """Raises TrainingInterrupted after a signal, with the newest step saved.

    With several workers the checkpoint is collective: a worker stops only after the call whose
    `stop` (the sum of every worker's flag) says that one of them was signalled, which every
    worker sees after the same call.
    """
    if self.run.stop_flag is not None and stop is not None:
      if not stop:
        return
      self.signum = self.signum or signal.SIGTERM
    if self.signum is not None:
      raise TrainingInterrupted(self.signum, int(self.run.step), self.run.save_and_report())

  def __exit__(self, *exc):
    for signum, handler in self._previous.items():
      signal.signal(signum, handler)
