"""Errors caused by the user's input (configs, files, checkpoints).

The CLIs turn a UserError into one line on stderr and exit code 2; anything
else is a bug and keeps its traceback.
"""


def first_line(error):
  """The first line of an exception's message (its type's name when it has none): what a one-line
  error quotes of a library's error."""
  message = str(error).strip()
  return message.splitlines()[0] if message else type(error).__name__


class UserError(Exception):
  """Bad input from the user; the message names the file, key or value."""


class ConfigError(UserError):
  """A config key or value is invalid."""


class DataError(UserError):
  """An input file or array is unreadable or inconsistent."""


class CheckpointError(UserError):
  """A checkpoint is missing, of another network, or does not match the model."""


class CheckpointVanished(CheckpointError):
  """A checkpoint's file was deleted while it was read: a training run rotated it away."""


class WorkdirError(UserError):
  """The workdir cannot be used: a file, read-only, full, or locked by another run."""


class TrainingDiverged(Exception):
  """Too many non-finite steps in a row; the message says where the values went non-finite (exit
  code 3, not a user error)."""


class ClusterFailed(Exception):
  """With several workers, no step for train.stall_timeout_s, or a worker that failed or left: the
  run ends with EXIT_CODE, which an orchestrator retries (Kubeflow's ExitCode policy retries 128-255;
  it is 128 + SIGALRM, a timer's), and the restarted run resumes from its last checkpoint."""

  EXIT_CODE = 142
