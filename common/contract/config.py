"""Configs: the shared defaults, presets, unknown keys, and the resolved copy in the workdir.

Every trainer's config file (configs/<trainer>.py) starts from `base_config(<its package>)`,
adds its own `data` and `model` sections and applies presets with
`apply_preset`. The CLIs load them through ml_collections' config_flags; the
unknown-key check here runs before that so a typo is one clear line. The values'
checks are common.contract.checks.
"""
import contextlib
import difflib
import json
import os
import re

import ml_collections

from common.contract.errors import ConfigError
from common.contract.errors import DataError

def base_config(trainer=""):
  """Fields every trainer shares, with their defaults; `trainer` is the package whose code runs the
  config (python -m <trainer>.train)."""
  config = ml_collections.ConfigDict()
  # The run's config.json names its trainer by it, so that what reads the run (evaluate, predict,
  # scripts/export.py) runs that trainer's code, never a look-alike's; set by the config file alone.
  config.trainer = trainer
  config.seed = 0  # weights, data order, synthetic sets and augmentation draws
  # Op determinism: two runs, or a run and its resumed twin, give the same weights.
  config.deterministic = False
  # Keras' mixed_float16 policy: float16 compute, float32 variables and loss.
  config.mixed_precision = False

  config.train = ml_collections.ConfigDict()
  config.train.batch_size = 32  # the global batch (split over workers and replicas)
  # Gradient accumulation: each step's batch is cut into this many micro-batches, whose averaged
  # gradients make its one update: a batch of train.batch_size within the memory of a micro-batch.
  config.train.accumulate_steps = 1
  # Weight averaging: an exponential moving average of the weights with this decay (0 = off, else
  # e.g. 0.999) is what the run evaluates, keeps as its best and exports (raw/ figures beside it).
  config.train.ema_decay = 0.0
  # (start, stop): a profile of the steps after start up to stop for TensorBoard's Profile tab
  # (tensorboard-plugin-profile, requirements-profile.txt); () = off. Start after the first call,
  # which traces.
  config.train.profile_steps = ()
  config.train.num_steps = 1000  # training steps of the run (over all phases)
  config.train.log_every = 50  # a progress line every this many steps
  config.train.eval_every = 500  # an evaluation every this many steps (and at the end)
  config.train.checkpoint_every = 500  # a checkpoint every this many steps (and at the end)
  config.train.keep_checkpoints = 3  # the newest this many checkpoints are kept
  # Loss-scale reductions can skip ~15 steps in a row at the start of mixed
  # precision; more than this many non-finite steps in a row is a real failure.
  config.train.max_consecutive_nonfinite = 25
  # Warn when the sampled weights move less than this (relative) over a log window.
  config.train.stall_update_ratio = 1e-10
  # Warn when no step finishes for this long (a stuck input pipeline); 0 turns it off.
  config.train.stall_timeout_s = 600.0
  # What a stall does: "warn"; "exit" with a retryable code (142) for an orchestrator to restart the
  # run from its last checkpoint; "auto" exits with several workers (the others would wait in a
  # collective for ever) and warns alone.
  config.train.on_stall = "auto"
  config.train.jit_compile = False  # XLA-compile each replica's forward and backward pass
  # Training steps per compiled call (Keras' steps_per_execution): metrics are read once per call,
  # and a call also ends at the next log line, summary, checkpoint, evaluation or phase end.
  # Signals are honoured between calls, so keep a call well under a second on the device.
  config.train.steps_per_loop = 100
  # ... and no more than fill this many seconds (judged from the last call), so that a signal is
  # honoured within about that long even where one step takes a second; 0 = no limit.
  config.train.seconds_per_loop = 1.0
  # Resume from a checkpoint whose input pipeline differs (batch size, files...): keep the model,
  # optimizer and step, and start the input from a fresh position.
  config.train.reset_input_pipeline = False
  # Keep the weights of the best evaluation besides the latest checkpoints, and end the run (and
  # its export) with them: an evaluation metric's name ("miou", "top1", "verification_accuracy");
  # "" = end with the last weights.
  config.train.best_metric = ""
  config.train.best_mode = "max"  # max | min (a metric where lower is better, a loss)

  config.optimizer = ml_collections.ConfigDict()
  config.optimizer.name = "adam"  # adam | adamw | sgd | rmsprop
  config.optimizer.learning_rate = 1e-3  # the peak: the schedule starts here, after any warm-up
  # constant | exponential | cosine | piecewise | polynomial, over each phase's own steps.
  config.optimizer.schedule = "exponential"
  config.optimizer.warmup_steps = 0  # the rate rises linearly to the schedule's over these steps
  config.optimizer.decay_steps = 1000  # exponential: times decay_rate every decay_steps
  config.optimizer.decay_rate = 1.0  # exponential; piecewise: the factor at each boundary
  config.optimizer.staircase = False  # exponential: whole decay_steps only
  config.optimizer.boundaries = ()  # piecewise: the steps where the rate is multiplied by decay_rate
  config.optimizer.final_fraction = 0.0  # cosine, polynomial: the last step's rate / learning_rate
  config.optimizer.power = 1.0  # polynomial (1 = linear)
  # Adam's beta_1, beta_2, epsilon (Keras' defaults).
  config.optimizer.adam = ml_collections.ConfigDict({"beta_1": 0.9, "beta_2": 0.999, "epsilon": 1e-7})
  # adamw: adam's settings, and decoupled weight decay (of kernels, not biases or BatchNorm).
  config.optimizer.adamw = ml_collections.ConfigDict({"weight_decay": 0.01})
  # SGD's momentum, and Nesterov's update or not.
  config.optimizer.sgd = ml_collections.ConfigDict({"momentum": 0.9, "nesterov": False})
  # TF-Slim's train_image_classifier.py settings (its Inception recipe's optimizer). Keras starts
  # the mean square at 0 where TF-Slim started it at 1; epsilon 1.0 keeps the first steps small.
  config.optimizer.rmsprop = ml_collections.ConfigDict({"rho": 0.9, "momentum": 0.9, "epsilon": 1.0})
  config.optimizer.clipnorm = 1.0  # clip by global norm; 0 turns clipping off
  config.optimizer.allow_extreme_learning_rate = False  # allow a learning rate outside [1e-8, 1]

  config.summaries = ml_collections.ConfigDict()
  config.summaries.scalars_every = 50  # training scalars every this many steps
  # Training images every this many steps (and at each evaluation).
  config.summaries.images_every = 500
  config.summaries.max_outputs = 3  # images per image summary
  config.summaries.histograms = False  # kernel histograms, opt-in
  config.summaries.histograms_every = 500  # with histograms: every this many steps
  config.summaries.bias_histograms = False  # bias histograms, opt-in
  config.summaries.activation_histograms = False  # activation histograms, opt-in
  config.summaries.activation_stats = False  # per-layer activation mean/variance scalars
  # One summary larger than this is refused with a warning.
  config.summaries.max_summary_bytes = 1 << 20

  config.hardware = ml_collections.ConfigDict()
  config.hardware.memory_limit_mb = 0  # >0 emulates a smaller GPU, e.g. 4096 for a GTX 960M
  config.hardware.memory_growth = True  # GPU memory allocated as needed, not all at start

  # tf.distribute. train.batch_size is the global batch: split over the workers, then over each
  # worker's replicas (logged at start and kept in metrics.json under "distribution").
  config.distribution = ml_collections.ConfigDict()
  # auto: MultiWorkerMirroredStrategy when TF_CONFIG is set, MirroredStrategy over several local
  # GPUs, else one device. one_device | mirrored (all local GPUs) | multi_worker (needs TF_CONFIG).
  config.distribution.strategy = "auto"
  return config


def apply_preset(config, presets, preset):
  """Applies the overrides of a named preset, {dotted.key: value}, to `config`."""
  name = preset or "default"
  if name not in presets:
    raise ConfigError(f"preset '{name}' is unknown; choose one of {sorted(presets)}")
  for key, value in presets[name].items():
    set_value(config, key, value)
  return config


def set_value(config, dotted_key, value):
  """Sets config[a.b.c] = value; an unknown key is a ConfigError listing the valid ones."""
  check_keys_exist(config, [dotted_key])
  *parents, leaf = dotted_key.split(".")
  node = config
  for part in parents:
    node = node[part]
  with node.ignore_type():
    node[leaf] = value


def flatten_keys(config, prefix=""):
  """All leaf keys of a ConfigDict (or of a dict, a config.json's), dotted."""
  keys = []
  for key, value in config.items():
    path = f"{prefix}{key}"
    if isinstance(value, (ml_collections.ConfigDict, dict)):
      keys.extend(flatten_keys(value, path + "."))
    else:
      keys.append(path)
  return keys


def check_keys_exist(config, dotted_keys):
  """Raises ConfigError naming the first key that is not in the config, with the valid ones."""
  valid = flatten_keys(config)
  for key in dotted_keys:
    if key in valid or any(v.startswith(key + ".") for v in valid):
      continue
    section = key.rpartition(".")[0]
    while section and not any(v.startswith(section + ".") for v in valid):
      section = section.rpartition(".")[0]
    siblings = [v for v in valid if v.startswith(section + ".")] if section else valid
    close = difflib.get_close_matches(key, valid, n=1)
    hint = f" Did you mean '{close[0]}'?" if close else ""
    raise ConfigError(f"unknown config key '{key}'.{hint} Valid keys here: {', '.join(siblings)}")


_OVERRIDE = re.compile(r"^--?config\.([A-Za-z0-9_.]+)(=.*)?$")


def override_keys(argv):
  """The dotted keys of `--config.a.b=...` arguments in argv."""
  return [m.group(1) for m in map(_OVERRIDE.match, argv) if m]


def get_value(config, dotted_key):
  node = config
  for part in dotted_key.split("."):
    node = node[part]
  return node


def apply_saved(config, saved, prefix=""):
  """Sets config's fields to a saved config.json's values (JSON's lists back to tuples); returns
  the dotted keys it could not set (gone from the config, or of another type)."""
  left_out = []
  for key, value in saved.items():
    if key not in config:
      left_out.append(prefix + key)
    elif isinstance(config[key], ml_collections.ConfigDict):
      left_out += apply_saved(config[key], value, f"{prefix}{key}.") if isinstance(value, dict) else [prefix + key]
    else:
      value = tuple(value) if isinstance(config[key], tuple) and isinstance(value, list) else value
      if value is None and config[key] is not None:  # ml_collections would take null for any type
        left_out.append(prefix + key)
      elif value != config[key]:  # equal ones untouched (a reference such as triplet's P x K batch)
        try:
          config[key] = value
        except (TypeError, ValueError):
          left_out.append(prefix + key)
  return left_out


def read_json_object(path, fix):
  """The dict of a JSON file a run wrote (config.json, metrics.json, ...); a missing, empty, cut
  short or unparsable file, or one without keys, is a DataError naming it and ending with `fix`."""
  try:
    with open(path, encoding="utf-8") as f:
      text = f.read()
  except (OSError, UnicodeDecodeError) as e:
    raise DataError(f"{path} cannot be read ({getattr(e, 'strerror', None) or e}); {fix}") from None
  if not text.strip():
    raise DataError(f"{path} is empty; {fix}")
  try:
    saved = json.loads(text)
  except json.JSONDecodeError as e:
    raise DataError(f"{path} is not valid JSON ({e.msg} at line {e.lineno}): cut short or edited; "
                    f"{fix}") from None
  if not isinstance(saved, dict) or not saved:
    raise DataError(f"{path} holds no keys (a JSON {type(saved).__name__}); {fix}")
  return saved


def read_saved_config(path, config, fix):
  """The dict of a run's config.json for `config`'s trainer; an empty, cut short or unparsable file,
  or a run of another trainer (its `trainer` key), is a DataError naming it and ending with `fix`."""
  saved = read_json_object(path, fix)
  if saved.get("trainer") != config.trainer:
    unnamed = "" if "trainer" in saved else (  # a run from before runs named their trainer
        f', or add "trainer": "{config.trainer}" to it if it is a run of this trainer')
    raise DataError(f"{path} is another trainer's config (trainer {saved.get('trainer')!r}, not "
                    f"{config.trainer!r}); give the --workdir of a run of this trainer, or pass "
                    f"--config=<file>{unnamed}")
  return saved


def resolved(config):
  """The config as config.json holds it: JSON values (lists for tuples, strings for other objects)."""
  return json.loads(json.dumps(config.to_dict(), default=str))


def flat(values, prefix=""):
  """{dotted key: value} of a nested dict's leaves."""
  leaves = {}
  for key, value in values.items():
    if isinstance(value, dict):
      leaves.update(flat(value, f"{prefix}{key}."))
    else:
      leaves[f"{prefix}{key}"] = value
  return leaves


def diff(old, new, show=repr):
  """['key: old -> new', ...] of the keys whose values differ between two dicts, nested dicts' keys
  dotted, each value written by `show`."""
  old, new = flat(old), flat(new)
  return [f"{key}: {show(old.get(key))} -> {show(new.get(key))}" for key in sorted(set(old) | set(new))
          if old.get(key) != new.get(key)]


def write_config(config, workdir):
  """Writes the resolved config as JSON (machine-readable) and text (readable) into the workdir."""
  os.makedirs(workdir, exist_ok=True)
  for name, text in (("config.json", json.dumps(config.to_dict(), indent=2, sort_keys=True, default=str)),
                     ("config.txt", str(config))):
    path = os.path.join(workdir, name)
    try:
      with open(path + ".tmp", "w") as f:  # swapped in whole: a kill never leaves half a config
        f.write(text)
      os.replace(path + ".tmp", path)
    except OSError as e:  # a full disk, a folder in the way: no .tmp left, and the error names the file
      with contextlib.suppress(OSError):
        os.remove(path + ".tmp")
      raise OSError(e.errno, e.strerror, path) from None
