"""SIGTERM and Ctrl-C at any moment: recorded by the handler, honoured at the next safe point.

The handler only records the signal. It reads no TensorFlow value and raises nothing, so a signal
can arrive while a function is being traced, a checkpoint written or a SavedModel exported
without a traceback, and it is never lost (AutoGraph swallowed exceptions raised inside a trace).
The safe points: the CLI after start-up, the loop before training and after each compiled call
(which saves first), the evaluation before each batch, the export before it starts and after it
ends. A second signal of the same kind (_REPEAT_S or more after the first) exits at once with
128 + N, as a kill would: checkpoints are written so that a killed run resumes exactly.

Python runs a handler only once the main thread is back in the interpreter, which a compiled call
can keep from it for minutes. So the signals are also read by a watcher thread, from the wake-up
socket Python's C-level handler writes each signal's number to (signal.set_wakeup_fd): it exits on
the second signal whatever the main thread does, and while the main thread is in a long call that it
declared (running()), it says what the first signal waits for and logs a line every 30 s of the call.

This module imports no TensorFlow, so that the CLIs can install the handler before importing it.
It uses only SIGTERM and SIGINT, which Windows has too (Ctrl-C is SIGINT there; a SIGTERM comes only
from signal.raise_signal or os.kill in Python, as Windows ends processes without a signal).
"""
import contextlib
import dataclasses
import os
import signal
import socket
import threading
import time

from absl import logging

_SIGNALS = (signal.SIGTERM, signal.SIGINT)
_received = []
_previous = {}
_watched = {}  # signum: when the watcher read its first one
_wakeup = []  # [the writing end of the wake-up socket, the wake-up fd set before install()]

# A first signal whose call has not returned this long after it gets a line of its own.
_GRACE_S = 1.0
_TICK_S = 30.0  # a line every this many seconds of a long call
# A repeat sooner than this is the same signal: timeout(1) sends its signal to the command and then
# to the command's process group, and the kernel delivers them as two when they do not overlap.
_REPEAT_S = 0.5


class Interrupted(Exception):
  """A signal arrived; the message says what was kept and how to go on."""

  def __init__(self, signum, what):
    super().__init__(f"interrupted by {signal.Signals(signum).name} {what}")
    self.signum = signum


def _record(signum, frame):
  del frame
  if signum not in _received:
    _received.append(signum)


def install():
  """Records SIGTERM and SIGINT from now on; the handlers in place before are kept for uninstall().

  Safe to call again, and needed once TensorFlow's multi-worker runtime has started: its
  preemption notifier takes SIGTERM over in C, where signal.getsignal() still reports this
  module's handler (see reclaim()).
  """
  for signum in _SIGNALS:
    _previous.setdefault(signum, signal.signal(signum, _record))
  if not _wakeup:
    reader, writer = socket.socketpair()  # a socket: Windows' set_wakeup_fd takes no pipe
    writer.setblocking(False)
    threading.Thread(target=_watch, args=(reader,), name="signals", daemon=True).start()
    _wakeup[:] = [writer, None]
  before = signal.set_wakeup_fd(_wakeup[0].fileno(), warn_on_full_buffer=False)
  if _wakeup[1] is None:
    _wakeup[1] = before


def uninstall():
  """Puts the earlier handlers back and forgets recorded signals (a test, a notebook goes on)."""
  for signum, handler in _previous.items():
    signal.signal(signum, handler)
  if _wakeup and _wakeup[1] is not None:
    signal.set_wakeup_fd(_wakeup[1])
    _wakeup[1] = None
  _previous.clear()
  _received.clear()
  _watched.clear()


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


@dataclasses.dataclass
class _Call:
  what: str
  expected_s: float | None
  then: str
  started: float = dataclasses.field(default_factory=time.monotonic)
  ticks: int = 0  # the lines said of it

  def progress(self, now):
    """How long it has run and may still run: "running for 40 s; about 20 s more at ..."."""
    elapsed = now - self.started
    if self.expected_s is None:
      estimate = "no estimate yet"
    elif elapsed < self.expected_s:
      estimate = f"about {_seconds(self.expected_s - elapsed)} more at the previous calls' speed"
    else:
      estimate = f"over the {_seconds(self.expected_s)} of the previous calls' speed"
    return f"running for {elapsed:.0f} s; {estimate}"


def _seconds(seconds):
  return f"{seconds:.0f} s" if seconds >= 1 else f"{seconds:.2f} s"


_call = None  # the _Call the main thread is in (running())


@contextlib.contextmanager
def running(what, expected_s, then):
  """The main thread is in `what` (a compiled call, "the compiled call of steps 3 to 10") until the
  block ends: a first signal is honoured after it, which may be minutes away. The watcher logs a line
  every 30 s of it, and, if it has not returned a second after a signal, says that the run `then`
  ("writes a checkpoint and stops") once it returns, and how long it may take: expected_s, what it
  should take (None: unknown yet).
  """
  global _call
  _call = _Call(what, expected_s, then)
  try:
    yield
  finally:
    _call = None


def _watch(reader):
  """The watcher thread: reads the signals' numbers from the wake-up socket (see the docstring)."""
  reader.settimeout(_GRACE_S)
  first = None  # (signum, when) of a first signal not yet said
  while True:
    try:
      numbers = reader.recv(64)
    except TimeoutError:
      numbers = b""
    now = time.monotonic()
    for signum in numbers:
      if signum not in _SIGNALS or not _previous:
        continue
      if signum not in _watched:
        _watched[signum] = now
        first = (signum, now)
      elif now - _watched[signum] >= _REPEAT_S:
        os.write(2, f"second {signal.Signals(signum).name}: exiting now; every checkpoint written so "
                    "far is kept\n".encode())
        os._exit(128 + signum)  # pylint: disable=protected-access
    call = _call
    if first and now - first[1] >= _GRACE_S:
      if call:
        name = signal.Signals(first[0]).name
        logging.warning("%s: the run %s when %s returns (%s); a second %s exits at once, writing "
                        "nothing more", name, call.then, call.what, call.progress(now), name)
      first = None
    if call and now - call.started >= _TICK_S * (call.ticks + 1):
      call.ticks += 1
      logging.info("%s: %s", call.what, call.progress(now))
