"""SIGTERM and Ctrl-C at any moment: recorded by the handler, honoured at the next safe point.

The handler only records the signal. It reads no TensorFlow value and raises nothing, so a signal
can arrive while a function is being traced, a checkpoint written or a SavedModel exported
without a traceback, and it is never lost (AutoGraph swallowed exceptions raised inside a trace).
The safe points: the CLI after start-up, the loop before training and after each compiled call
(which saves first), the evaluation before each batch, the export before it starts and after it
ends. A second signal of the same kind exits at once with 128 + N, as a kill would: checkpoints
are written so that a killed run resumes exactly.

This module imports no TensorFlow, so that the CLIs can install the handler before importing it.
It uses only SIGTERM and SIGINT, which Windows has too (Ctrl-C is SIGINT there; a SIGTERM comes only
from signal.raise_signal or os.kill in Python, as Windows ends processes without a signal).
"""
import contextlib
import os
import signal

_SIGNALS = (signal.SIGTERM, signal.SIGINT)
_received = []
_previous = {}


class Interrupted(Exception):
  """A signal arrived; the message says what was kept and how to go on."""

  def __init__(self, signum, what):
    super().__init__(f"interrupted by {signal.Signals(signum).name} {what}")
    self.signum = signum


def _record(signum, frame):
  del frame
  if signum in _received:
    os.write(2, f"second {signal.Signals(signum).name}: exiting now; every checkpoint written so "
                "far is kept\n".encode())
    os._exit(128 + signum)
  _received.append(signum)


def install():
  """Records SIGTERM and SIGINT from now on; the handlers in place before are kept for uninstall().

  Safe to call again, and needed once TensorFlow's multi-worker runtime has started: its
  preemption notifier takes SIGTERM over in C, where signal.getsignal() still reports this
  module's handler (see reclaim()).
  """
  for signum in _SIGNALS:
    _previous.setdefault(signum, signal.signal(signum, _record))


def uninstall():
  """Puts the earlier handlers back and forgets recorded signals (a test, a notebook goes on)."""
  for signum, handler in _previous.items():
    signal.signal(signum, handler)
  _previous.clear()
  _received.clear()


def reclaim():
  """install() again where installed: after TensorFlow's multi-worker runtime starts."""
  if _previous:
    install()


@contextlib.contextmanager
def recording():
  """install() for the duration; uninstalls after unless installed before (by the CLI)."""
  owner = not _previous
  install()
  try:
    yield
  finally:
    if owner:
      uninstall()


def finish(what):
  """The end of a CLI: signals are ignored from now on (the interpreter's exit would put back the
  default handler, and a late SIGTERM would kill the finished program), one already recorded is
  raised as Interrupted(signal, "<what>")."""
  for signum in _SIGNALS:
    signal.signal(signum, signal.SIG_IGN)
  check(what)


def pending():
  """The first signal recorded and not yet honoured, or None."""
  return _received[0] if _received else None


def check(what):
  """Raises Interrupted(signal, "<what>") if a signal was recorded."""
  if _received:
    raise Interrupted(_received[0], what)


def checked(function, what):
  """`function` that first checks for a signal (an evaluation's predict, called once a batch)."""

  def wrapper(*args, **kwargs):
    check(what)
    return function(*args, **kwargs)

  return wrapper
