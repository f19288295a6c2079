"""Runs a trainer as N worker processes on this machine, one TF_CONFIG each.

  python scripts/launch_workers.py --num_workers 2 -- python -m segmentation.train \\
      --config=configs/segmentation.py:smoke --workdir=/tmp/two_workers

Each worker gets a free port on 127.0.0.1 and the TF_CONFIG of its index, so
that the trainer's `distribution.strategy=auto` picks MultiWorkerMirroredStrategy
(worker 0 is the chief, the one that writes the workdir). Their output is
streamed line by line with a `[worker i]` prefix. When a worker fails, the others
are stopped (SIGTERM, then killed after --stop_timeout_s: a worker whose peer
died can be blocked in a collective); Ctrl-C or SIGTERM is passed on to every
worker the same way. The exit code is the first failing worker's (128 + N for a
worker ended by signal N), 0 when all succeed. A leading `python` in the command
is this interpreter.
"""
import argparse
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

HOST = "127.0.0.1"


def free_ports(count):
  """`count` distinct ports that were free a moment ago (held open together so none repeats)."""
  with contextlib.ExitStack() as stack:
    sockets = [stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) for _ in range(count)]
    for s in sockets:
      s.bind((HOST, 0))
    return [s.getsockname()[1] for s in sockets]


def tf_config(addresses, index):
  return json.dumps({"cluster": {"worker": addresses}, "task": {"type": "worker", "index": index}})


def exit_code(returncode):
  """A Popen return code as a shell reports it: -N (killed by signal N) -> 128 + N."""
  return 128 - returncode if returncode < 0 else returncode


class Workers:
  """The worker processes, their prefixed output, and stopping them all."""

  def __init__(self, command, num_workers, stop_timeout_s):
    if command and os.path.basename(command[0]) in ("python", "python3"):
      command = [sys.executable] + command[1:]
    addresses = [f"{HOST}:{port}" for port in free_ports(num_workers)]
    self.stop_timeout_s = stop_timeout_s
    self.lock = threading.Lock()
    self.processes = []
    self.threads = []
    for index in range(num_workers):
      env = dict(os.environ, TF_CONFIG=tf_config(addresses, index), PYTHONUNBUFFERED="1")
      # A session of its own: a terminal's Ctrl-C reaches the launcher only, which passes it on.
      process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                 start_new_session=True, text=True, errors="replace")
      self.processes.append(process)
      thread = threading.Thread(target=self._stream, args=(index, process), daemon=True)
      thread.start()
      self.threads.append(thread)
    self.say(f"{num_workers} workers on {', '.join(addresses)}: {' '.join(command)}")
    for index, process in enumerate(self.processes):
      self.say(f"worker {index}: pid {process.pid}")

  def say(self, line):
    with self.lock:
      print(f"[launcher] {line}", flush=True)

  def _stream(self, index, process):
    for line in process.stdout:
      with self.lock:
        sys.stdout.write(f"[worker {index}] {line}")
        sys.stdout.flush()

  def signal_all(self, signum):
    for process in self.processes:
      if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
          os.kill(process.pid, signum)
          if hasattr(signal, "SIGCONT"):  # a stopped worker (SIGSTOP) acts on the signal only once resumed
            os.kill(process.pid, signal.SIGCONT)

  def kill_all(self):
    """Popen.kill: SIGKILL on POSIX, TerminateProcess on Windows (which has no SIGKILL)."""
    for process in self.processes:
      if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
          process.kill()

  def stop(self, signum=signal.SIGTERM):
    """Sends signum to the running workers, then kills those still running after the timeout."""
    self.signal_all(signum)
    deadline = time.monotonic() + self.stop_timeout_s
    while time.monotonic() < deadline and any(p.poll() is None for p in self.processes):
      time.sleep(0.1)
    if any(p.poll() is None for p in self.processes):
      self.say(f"workers still running {self.stop_timeout_s:g} s after {signal.Signals(signum).name}: "
                "killing them")
      self.kill_all()
    for process in self.processes:
      process.wait()

  def wait(self):
    """Waits for every worker; on the first failure stops the others. Returns the exit code."""
    try:
      while True:
        codes = [p.poll() for p in self.processes]
        failed = [(i, c) for i, c in enumerate(codes) if c not in (None, 0)]
        if failed:
          index, code = failed[0]
          self.say(f"worker {index} exited with code {exit_code(code)}: stopping the others")
          self.stop()
          return exit_code(code)
        if all(c == 0 for c in codes):
          return 0
        time.sleep(0.1)
    finally:
      for thread in self.threads:
        thread.join(timeout=5)


class _Parser(argparse.ArgumentParser):
  def error(self, message):
    """A bad flag is the commands' one `error:` line and exit code 2 (argparse's usage line before it
    would be a second line)."""
    print(f"error: {message}", file=sys.stderr)
    sys.exit(2)


def main(argv):
  parser = _Parser(description=__doc__.split("\n\n")[0], usage="launch_workers.py --num_workers N -- COMMAND ...")
  parser.add_argument("--num_workers", type=int, required=True, help="worker processes to start (>= 1)")
  parser.add_argument("--stop_timeout_s", type=float, default=30.0,
                      help="after a failure or a signal, how long the workers may take to stop "
                      "before they are killed")
  parser.add_argument("command", nargs=argparse.REMAINDER, help="the trainer's command, after --")
  args = parser.parse_args(argv)
  command = args.command[1:] if args.command[:1] == ["--"] else args.command
  if args.num_workers < 1:
    print(f"error: --num_workers={args.num_workers} must be at least 1", file=sys.stderr)
    return 2
  if not command:
    print("error: no command to run: give it after --, e.g. -- python -m segmentation.train ...",
          file=sys.stderr)
    return 2
  if os.path.basename(command[0]) not in ("python", "python3") and not shutil.which(command[0]):
    print(f"error: cannot run {command[0]}: no such program (on PATH or as a path)", file=sys.stderr)
    return 2
  workers = Workers(command, args.num_workers, args.stop_timeout_s)
  received = []

  def pass_on(signum, frame):
    del frame
    received.append(signum)
    if len(received) > 1:  # a second Ctrl-C: no more waiting
      workers.say("second signal: killing the workers")
      workers.kill_all()
      return
    workers.say(f"received {signal.Signals(signum).name}: passing it on to the workers")
    workers.stop(signum)

  signal.signal(signal.SIGINT, pass_on)
  signal.signal(signal.SIGTERM, pass_on)
  return workers.wait()


if __name__ == "__main__":
  sys.exit(main(sys.argv[1:]))
