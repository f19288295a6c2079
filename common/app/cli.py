"""What every trainer's command line shares: flags, the config check, and clean exits.

A UserError (bad config key or value, unreadable file, wrong checkpoint) ends
the program with one line on stderr and exit code 2; an interrupted run exits
128 + the signal number after its checkpoint is written.
"""
import importlib.util
import logging as std_logging
import os
import sys

from absl import app
from absl import flags
from absl import logging
from ml_collections import config_flags

from common.app.trainers import REPO_ROOT
from common.contract import config as config_lib
from common.contract.errors import ClusterFailed
from common.contract.errors import CheckpointError
from common.contract.errors import ConfigError
from common.contract.errors import DataError
from common.contract.errors import TrainingDiverged
from common.contract.errors import UserError
from common.contract.errors import WorkdirError
from common.runtime import run_log
from common.runtime import signals
from common.runtime import workdir as workdir_lib
from common.training import checkpoints

EXIT_USER_ERROR = 2
EXIT_DIVERGED = 3


def define_flags(default_config, default_workdir):
  """Defines --config (file[:preset], with --config.key=value overrides) and --workdir.

  default_config, relative to the repository root, is found beside this package (own_config); a
  --config the user gives is relative to the current folder."""
  default_config = own_config(default_config)
  _config_default[:] = [default_config]  # for --help
  _check_config_args(default_config, sys.argv)
  config_flag = config_flags.DEFINE_config_file(
      "config", default_config, "Config file, with a preset after a colon: configs/x.py:smoke.",
      lock_config=True)
  workdir_flag = flags.DEFINE_string(
      "workdir", default_workdir, "Where checkpoints, summaries and results go; a run resumes from it.")
  return config_flag, workdir_flag


def define_evaluation_flags():
  """--saved_model and --report_dir, the flags every evaluation CLI adds to define_flags()'s."""
  saved_model = flags.DEFINE_string(
      "saved_model", None, "Evaluate this SavedModel instead of the newest checkpoint in --workdir.")
  report_dir = flags.DEFINE_string(
      "report_dir", None, "Where the evaluation report goes (ROC curve, confusion matrix); "
      "default <workdir>/eval.")
  # At parsing, so that a bad path is one line before the data checks and the evaluation run.
  flags.register_multi_flags_validator(
      ["workdir", "saved_model", "report_dir"], lambda values: check_evaluation_paths(**values) or True)
  return saved_model, report_dir


def run_config(config_flag, workdir, saved_model=None):
  """The config of a command that reads a run (evaluate, predict): without --config on the command
  line, the run's own resolved config (<workdir>/config.json) with the command's --config.key=value
  flags on top; with --config, that one. What differs from the run's config is logged, as on resume.

  A config.json that is missing (unless --saved_model is what the command reads), empty, cut short
  or another trainer's is one line; with --config it is only compared, so that a broken one is a
  warning.
  """
  saved_path = os.path.join(workdir, "config.json")
  config = config_flag.value
  from_file = bool(_config_file_args(sys.argv))
  if not os.path.isfile(saved_path):
    if not (from_file or saved_model):
      raise ConfigError(f"{saved_path} does not exist: give the --workdir of a training run of this "
                        "trainer, or its config with --config=<file>")
    return config
  fix = (f"copy the run's config back from {os.path.join(workdir, workdir_lib.CONFIG_HISTORY_DIR)}/"
         "<time>.json (each run's copy), or pass --config=<file>")
  try:
    saved = config_lib.read_saved_config(saved_path, config, fix)
  except DataError as e:
    if not from_file:
      raise
    logging.warning("%s (not compared with --config)", e)
    return config
  if not from_file:
    overrides = {key: config_lib.get_value(config, key) for key in config_lib.override_keys(sys.argv[1:])}
    left_out = config_lib.apply_saved(config, saved)
    if left_out:
      logging.warning("%s: %s not taken (keys this version does not have, or of another type)",
                      saved_path, ", ".join(left_out))
    for key, value in overrides.items():
      config_lib.set_value(config, key, value)
    logging.info("config: the run's own, %s%s", saved_path, " with --config.* flags on top" if overrides else "")
  changes = config_lib.diff(saved, config_lib.resolved(config))
  if changes:
    logging.info("config changes from the run's: %s", "; ".join(changes))
  return config


def command_line_choices():
  """{"preset", "keys"} of the parsed command line: the preset of --config=file:preset and the keys
  its --config.key=value flags set (what TensorBoard's HParams show beside the usual ones); None
  where no command line was parsed (a run started from Python)."""
  if "config" not in flags.FLAGS or not flags.FLAGS.is_parsed():
    return None
  holder = flags.FLAGS["config"]
  spec = config_flags.get_config_filename(holder)
  return {"preset": (spec.split(":", 1)[1] if ":" in spec else "") or "default",
          "keys": list(config_flags.get_override_values(holder))}


def check_evaluation_paths(workdir, saved_model, report_dir):
  """What an evaluation reads (a SavedModel, else the workdir's newest checkpoint) exists, and where
  its report goes can be written; each a UserError line naming the path and the flag."""
  if saved_model:
    workdir_lib.check_saved_model(saved_model)
  elif os.path.exists(workdir) and not os.path.isdir(workdir):
    raise WorkdirError(f"--workdir {workdir} is a file; give the workdir folder of a training run")
  elif not checkpoints.newest(checkpoints.checkpoint_dir(workdir)):
    raise CheckpointError(f"no checkpoint in {checkpoints.checkpoint_dir(workdir)}; train into "
                          "--workdir first, or pass --saved_model")
  if report_dir:
    workdir_lib.check_writable(report_dir, flag="--report_dir")
  else:
    workdir_lib.check_writable(os.path.join(workdir, "eval"), flag="--workdir (or give --report_dir)")


def own_config(default_config):
  """The trainer's own config file (a path relative to the repository root) in the repository this
  package was imported from: as given when the command runs from that root, else its absolute path."""
  path = os.path.join(REPO_ROOT, default_config)
  return default_config if os.path.abspath(default_config) == path else path


def _check_config_args(default_config, argv):
  """A missing config file, another trainer's or a typo in --config.some.key is one line, not a
  traceback (another trainer's config was a KeyError deep in the run).

  config_flags defines the override flags while --config itself is being
  defined, so the check has to run first, on the config loaded without them.
  """
  config_args = _config_file_args(argv)
  path = (config_args[-1].split("=", 1)[1] if config_args else default_config).split(":")[0]
  if not os.path.isfile(path):
    fail(f"config file {path} does not exist (a relative --config is read from the current folder, "
         f"{os.getcwd()}); give the path of one, e.g. --config={default_config}" if config_args else
         f"config file {path}, this trainer's own, does not exist: give --config=<a config file>")
  keys = config_lib.override_keys(argv[1:])
  if not keys and not config_args:
    return
  try:
    config = _load_config(default_config, argv[:1] + config_args)
    trainer = _load_config(default_config, argv[:1]).trainer
    if config.trainer != trainer:
      raise ConfigError(f"config file {path} is another trainer's config (trainer {config.trainer!r}, not "
                        f"{trainer!r}); give {default_config} or a copy of it")
    if "trainer" in keys:  # the run would be named another trainer's while this one's code wrote it
      raise ConfigError(f"--config.trainer: the config file names its trainer ({trainer!r}); leave it out")
    config_lib.check_keys_exist(config, keys)
  except Exception as e:  # config_flags wraps errors raised inside the config file.
    fail(str(_user_error_in(e) or e))


def _load_config(default_config, argv):
  """The config that `--config` of argv (default_config without one) gives, without overrides."""
  scratch = flags.FlagValues()
  holder = config_flags.DEFINE_config_file("config", default_config, flag_values=scratch, sys_argv=argv)
  scratch(argv)
  return holder.value


def _config_file_args(argv):
  """The --config=file[:preset] arguments (not the --config.key=value ones)."""
  return [a for a in argv[1:] if a.startswith(("--config=", "-config="))]


def _user_error_in(error):
  """The UserError that caused `error` (config_flags wraps them), or None."""
  while error is not None and not isinstance(error, UserError):
    error = error.__cause__ or error.__context__
  return error


def fail(message, code=EXIT_USER_ERROR):
  """Prints the one `error:` line and exits; TensorFlow's warnings at exit (unrestored checkpoint
  values, say) are silenced so that the error stays the last line."""
  logging.set_verbosity(logging.ERROR)
  std_logging.getLogger("tensorflow").setLevel(std_logging.ERROR)
  print_error(message)
  sys.exit(code)


def print_error(message):
  """One `error:` line on stderr: a command's last, or one of a bad input it goes on past (a photo)."""
  print(f"error: {message}", file=sys.stderr, flush=True)


def _parse_flags(argv):
  """absl's parser, with config errors turned into one line and exit code 2, and --help."""
  if any(arg in _HELP_ARGS for arg in argv[1:]):
    print(help_text(argv), flush=True)
    sys.exit(0)
  try:
    return flags.FLAGS(argv)  # the program name and the positional arguments (predict's files)
  except Exception as e:  # flags.Error, or an error raised inside the config file.
    fail(str(_user_error_in(e) or e))


_config_default = []
_HELP_ARGS = ("--help", "-help", "-h", "-?", "--helpshort", "-helpshort")
_OTHERS_FLAGS = ("absl", "tensorflow", "keras", "ml_collections")


def help_text(argv):
  """The command's docstring, its own flags (absl's --help lists none of them: they are defined in
  common/, not in the main module) and its config file's presets, one line each."""
  lines = [(sys.modules["__main__"].__doc__ or "").strip(), "", "flags:"]
  # The shared flags (--config, --workdir...) first, then the command's own.
  for module, defined in sorted(flags.FLAGS.flags_by_module_dict().items(), key=lambda m: m[0] != __name__):
    for flag in defined if not module.startswith(_OTHERS_FLAGS) else ():
      default = f" (default {flag.default_as_str})" if flag.default is not None else ""
      lines.append(f"  --{flag.name}: {flag.help}{default}")
  if "config" in flags.FLAGS:
    config_args = [a.split("=", 1)[1] for a in _config_file_args(argv)]
    path = (config_args[-1] if config_args else _config_default[0]).split(":")[0]
    lines += ["  --config.<key>=<value>: any field of the config file, e.g. --config.train.num_steps=100 "
              "(--helpfull lists them all)", "", f"presets of {path} (--config={path}:<preset>):"]
    module = _config_module(path)
    width = max(map(len, module.PRESETS))
    lines += [f"  {name:<{width}}  {description}" for name, description in module.PRESETS.items()]
  return "\n".join(lines)


def _config_module(path):
  """The config file at `path`, loaded as a module (its PRESETS, CPU_PRESET)."""
  spec = importlib.util.spec_from_file_location("config_module", path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def cpu_advice():
  """What a run in mixed precision without a GPU is advised to take instead: the CPU preset its
  config file names (CPU_PRESET) unless the command line chose it, and plain float32."""
  config_args = _config_file_args(sys.argv)
  spec = config_args[-1].split("=", 1)[1] if config_args else "".join(_config_default[:1])
  path, _, preset = spec.partition(":")
  cpu = getattr(_config_module(path), "CPU_PRESET", "") if os.path.isfile(path) else ""
  return (f"--config={path}:{cpu} or " if cpu not in ("", preset or "default") else "") + \
      "--config.mixed_precision=False"


def _quiet_tensorflow_info(record):
  """TensorFlow's own INFO lines (checkpoint sharding, SavedModel assets) would drown the progress lines."""
  return record.levelno >= std_logging.WARNING or _TENSORFLOW_DIR not in record.pathname


_TENSORFLOW_DIR = f"{os.sep}tensorflow{os.sep}"


def run(main):
  """Runs `main(argv)` under absl with run_guarded's exits."""

  def guarded_main(argv):
    logging.get_absl_handler().addFilter(_quiet_tensorflow_info)
    run_log.start(_quiet_tensorflow_info)
    std_logging.getLogger("tensorflow").setLevel(std_logging.WARNING)
    run_guarded(_then_finish, main, argv)

  app.run(guarded_main, flags_parser=_parse_flags)


def _then_finish(main, argv):
  """main(argv), then a signal that came after its last safe point said as such (one guard for both:
  a guard's first check would call it one of start-up)."""
  main(argv)
  signals.finish("after the run had finished; every output is written")


def run_guarded(function, *args):
  """Runs function(*args): user errors exit 2 with one line, divergence 3, a signal 128 + its number.

  The CLIs run their main through it, and tests run train_and_evaluate through
  it to check the exits of many bad inputs in one interpreter. Signals are recorded from the
  start (common/runtime/signals.py) and honoured at the next safe point with one line saying what was
  kept.
  """
  with signals.recording():
    try:
      signals.check("during start-up; nothing was written")
      return function(*args)
    except UserError as e:
      fail(str(e))
    except TrainingDiverged as e:
      fail(f"training diverged: {e}", EXIT_DIVERGED)
    except ClusterFailed as e:
      fail(str(e), ClusterFailed.EXIT_CODE)
    except signals.Interrupted as e:
      print(str(e), file=sys.stderr, flush=True)
      sys.exit(128 + e.signum)