"""Config value checks: each key's type and range, the first value refused one line naming the key,
"key=value must be <allowed>" (a ConfigError, exit code 2). The shared fields are checked here
(validate_config); each trainer checks its own sections with these checks where it reads them. The
config's reading and writing is common.contract.config.
"""
import math
import numbers
import typing

from common.contract import bounds
from common.contract import config as config_lib
from common.contract.errors import ConfigError

# Learning rates outside this range are almost always a typo (the original
# question trained at 1e-50 and nothing moved); `allow_extreme_learning_rate` opts out.
MIN_LEARNING_RATE = 1e-8
MAX_LEARNING_RATE = 1.0


# A Check is a predicate and the words for what it allows; check_values turns the
# first value a check refuses into one line, "key=value must be <allowed>". Types are checked too:
# ml_collections lets None, True for an int, and anything a preset sets through.


class Check(typing.NamedTuple):
  ok: typing.Callable[[typing.Any], bool]
  allowed: str


def check_values(config, checks):
  """Raises ConfigError for the first {dotted.key: Check} whose value the check refuses."""
  for key, check in checks.items():
    value = config_lib.get_value(config, key)
    if not check.ok(value):
      raise ConfigError(f"{key}={value!r} must be {check.allowed}")


def _is_int(value):
  return isinstance(value, numbers.Integral) and not isinstance(value, bool)  # True is an int in Python


def integer(low, high=None, allowed=None):
  """An integer in [low, high] (high=None: no upper bound)."""
  words = f"an integer >= {low}" if high is None else f"an integer in [{low}, {high}]"
  return Check(lambda v: _is_int(v) and low <= v and (high is None or v <= high), allowed or words)


def number(low, high=math.inf, low_open=False, high_open=False):
  """A finite number in an interval, ends included unless open: number(0, 1, high_open=True) is [0, 1)."""
  high_open = high_open or high == math.inf

  def ok(v):
    return (isinstance(v, numbers.Real) and not isinstance(v, bool) and math.isfinite(v)
            and (low < v if low_open else low <= v) and (v < high if high_open else v <= high))

  return Check(ok, f"a number in {'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}")


def one_of(*choices):
  return Check(lambda v: v in choices, "one of " + ", ".join(map(repr, choices)))


def sequence_of(item, allowed, non_empty=False):
  """A tuple or list (the CLI gives tuples) whose every item passes `item`."""
  return Check(lambda v: isinstance(v, (tuple, list)) and (len(v) > 0 or not non_empty)
               and all(item.ok(x) for x in v), allowed)


BOOL = Check(lambda v: isinstance(v, bool), "True or False")
POSITIVE_INT = integer(1, allowed="a positive integer")
NON_NEGATIVE_INT = integer(0)
NON_NEGATIVE = number(0)
POSITIVE = number(0, low_open=True)
FRACTION = number(0, 1, high_open=True)  # rates and momenta: 1 would drop, smooth or freeze everything
STRING = Check(lambda v: isinstance(v, str), "a string")
POSITIVE_INTS = sequence_of(POSITIVE_INT, "a non-empty sequence of positive integers", non_empty=True)


def learning_rate(allow_extreme):
  """The check of a learning rate; outside [MIN, MAX] only with optimizer.allow_extreme_learning_rate."""
  if allow_extreme:
    return POSITIVE
  in_range = number(MIN_LEARNING_RATE, MAX_LEARNING_RATE)
  return Check(in_range.ok,
               in_range.allowed + "; set optimizer.allow_extreme_learning_rate=True if you mean it")


def validate_config(config):
  """Checks the shared fields (trainers check their own sections in their task.validate_config)."""
  check_values(config, {
      "seed": integer(0, 2**32 - 1),  # NumPy's seed range
      "deterministic": BOOL,
      "mixed_precision": BOOL,
      **dict.fromkeys(["train.batch_size", "train.accumulate_steps", "train.num_steps", "train.log_every",
                       "train.eval_every", "train.checkpoint_every", "train.keep_checkpoints",
                       "train.steps_per_loop", "train.max_consecutive_nonfinite", "optimizer.decay_steps",
                       "summaries.scalars_every", "summaries.images_every",
                       "summaries.histograms_every", "summaries.max_summary_bytes"], POSITIVE_INT),
      "train.ema_decay": FRACTION,  # 0 = off
      "train.profile_steps": Check(
          lambda v: v == () or sequence_of(POSITIVE_INT, "").ok(v) and len(v) == 2 and v[0] < v[1],
          "() (off) or (start, stop), steps with 1 <= start < stop"),
      "train.stall_update_ratio": NON_NEGATIVE,
      "train.stall_timeout_s": NON_NEGATIVE,  # 0 = off
      "train.on_stall": one_of("auto", "warn", "exit"),
      "train.seconds_per_loop": NON_NEGATIVE,  # 0 = no limit
      "train.jit_compile": BOOL,
      "train.reset_input_pipeline": BOOL,
      "train.best_metric": STRING,
      "train.best_mode": one_of("max", "min"),
      "optimizer.allow_extreme_learning_rate": BOOL,  # before the learning rate, which it widens
      "optimizer.learning_rate": learning_rate(config.optimizer.allow_extreme_learning_rate),
      "optimizer.name": one_of("adam", "adamw", "sgd", "rmsprop"),
      "optimizer.schedule": one_of("constant", "exponential", "cosine", "piecewise", "polynomial"),
      "optimizer.warmup_steps": NON_NEGATIVE_INT,
      "optimizer.decay_rate": number(0, 1, low_open=True),
      "optimizer.staircase": BOOL,
      "optimizer.boundaries": Check(  # the piecewise schedule's values are one more, from decay_rate
          lambda v: sequence_of(POSITIVE_INT, "").ok(v) and list(v) == sorted(set(v))
          and (len(v) > 0 or config.optimizer.schedule != "piecewise"),
          "increasing positive step numbers, e.g. (3000, 6000); optimizer.schedule='piecewise' needs "
          "one or more"),
      "optimizer.final_fraction": FRACTION,
      "optimizer.power": POSITIVE,
      **dict.fromkeys(["optimizer.adam.beta_1", "optimizer.adam.beta_2"], FRACTION),
      "optimizer.adam.epsilon": POSITIVE,
      "optimizer.adamw.weight_decay": NON_NEGATIVE,
      "optimizer.sgd.momentum": FRACTION,
      "optimizer.sgd.nesterov": BOOL,
      **dict.fromkeys(["optimizer.rmsprop.rho", "optimizer.rmsprop.momentum"], FRACTION),
      "optimizer.rmsprop.epsilon": POSITIVE,
      "optimizer.clipnorm": NON_NEGATIVE,  # 0 = off
      "summaries.max_outputs": NON_NEGATIVE_INT,  # 0 = no images
      **dict.fromkeys(["summaries.histograms", "summaries.bias_histograms",
                       "summaries.activation_histograms", "summaries.activation_stats"], BOOL),
      "hardware.memory_limit_mb": NON_NEGATIVE_INT,  # 0 = the whole GPU
      "hardware.memory_growth": BOOL,
      "distribution.strategy": one_of("auto", "one_device", "mirrored", "multi_worker"),
  })
  bounds.check(config, bounds.SHARED)
