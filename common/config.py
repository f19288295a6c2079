"""Configs: the shared defaults, presets, validation, and the resolved copy in the workdir.

Every trainer's config file (configs/<trainer>.py) starts from `base_config()`,
adds its own `data` and `model` sections and applies presets with
`apply_preset`. The CLIs load them through ml_collections' config_flags; the
unknown-key check here runs before that so a typo is one clear line.
"""
import difflib
import json
import os
import re

import ml_collections

from common.errors import ConfigError

# Learning rates outside this range are almost always a typo (the original
# question trained at 1e-50 and nothing moved); `allow_extreme_learning_rate` opts out.
MIN_LEARNING_RATE = 1e-8
MAX_LEARNING_RATE = 1.0


def base_config():
  """Fields every trainer shares, with their defaults."""
  config = ml_collections.ConfigDict()
  config.seed = 0
  # Op determinism: two runs, or a run and its resumed twin, give the same weights.
  config.deterministic = False
  config.mixed_precision = False

  config.train = ml_collections.ConfigDict()
  config.train.batch_size = 32
  config.train.num_steps = 1000
  config.train.log_every = 50
  config.train.eval_every = 500
  config.train.checkpoint_every = 500
  config.train.keep_checkpoints = 3
  # Loss-scale reductions can skip ~15 steps in a row at the start of mixed
  # precision; more than this many non-finite steps in a row is a real failure.
  config.train.max_consecutive_nonfinite = 25
  # Warn when the sampled weights move less than this (relative) over a log window.
  config.train.stall_update_ratio = 1e-10
  # Warn when no step finishes for this long (a stuck input pipeline); 0 turns it off.
  config.train.stall_timeout_s = 600.0
  config.train.jit_compile = False

  config.optimizer = ml_collections.ConfigDict()
  config.optimizer.learning_rate = 1e-3
  config.optimizer.decay_steps = 1000
  config.optimizer.decay_rate = 1.0  # 1.0 = constant learning rate
  config.optimizer.staircase = False
  config.optimizer.clipnorm = 1.0  # clip by global norm; 0 turns clipping off
  config.optimizer.allow_extreme_learning_rate = False

  config.summaries = ml_collections.ConfigDict()
  config.summaries.scalars_every = 50
  config.summaries.images_every = 500
  config.summaries.max_outputs = 3
  config.summaries.histograms = False  # kernel histograms, opt-in
  config.summaries.histograms_every = 500
  config.summaries.bias_histograms = False
  config.summaries.activation_histograms = False
  config.summaries.activation_stats = False  # per-layer activation mean/variance scalars
  # One summary larger than this is refused with a warning.
  config.summaries.max_summary_bytes = 1 << 20

  config.hardware = ml_collections.ConfigDict()
  config.hardware.memory_limit_mb = 0  # >0 emulates a smaller GPU, e.g. 4096 for a GTX 960M
  config.hardware.memory_growth = True
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
  """All leaf keys of a ConfigDict, dotted."""
  keys = []
  for key, value in config.items():
    path = f"{prefix}{key}"
    if isinstance(value, ml_collections.ConfigDict):
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


def validate_config(config):
  """Checks the shared fields; trainers check their own sections."""
  lr = config.optimizer.learning_rate
  if not config.optimizer.allow_extreme_learning_rate and not (
      MIN_LEARNING_RATE <= lr <= MAX_LEARNING_RATE):
    raise ConfigError(
        f"optimizer.learning_rate={lr:g} is outside [{MIN_LEARNING_RATE:g}, {MAX_LEARNING_RATE:g}]; "
        "set optimizer.allow_extreme_learning_rate=True if you mean it")
  for key in ("train.batch_size", "train.num_steps", "train.log_every", "train.eval_every",
              "train.checkpoint_every", "summaries.scalars_every", "summaries.images_every",
              "summaries.histograms_every", "optimizer.decay_steps"):
    value = get_value(config, key)
    if not isinstance(value, int) or value <= 0:
      raise ConfigError(f"{key}={value!r} must be a positive integer")
  if config.summaries.max_outputs < 0:
    raise ConfigError(f"summaries.max_outputs={config.summaries.max_outputs} must be >= 0")
  if not 0 < config.optimizer.decay_rate <= 1:
    raise ConfigError(f"optimizer.decay_rate={config.optimizer.decay_rate} must be in (0, 1]")
  if config.optimizer.clipnorm < 0:
    raise ConfigError(f"optimizer.clipnorm={config.optimizer.clipnorm} must be >= 0")


def get_value(config, dotted_key):
  node = config
  for part in dotted_key.split("."):
    node = node[part]
  return node


def write_config(config, workdir):
  """Writes the resolved config as JSON (machine-readable) and text (readable) into the workdir."""
  os.makedirs(workdir, exist_ok=True)
  with open(os.path.join(workdir, "config.json"), "w") as f:
    json.dump(config.to_dict(), f, indent=2, sort_keys=True, default=str)
  with open(os.path.join(workdir, "config.txt"), "w") as f:
    f.write(str(config))
