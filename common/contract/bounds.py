"""Upper bounds of the configs' counts and sizes, each with why: a value past one is a typo or a run
that would fill the memory or the disk before it says so, refused in one line naming the key before
any work. The lower bounds and types are checked with the key's other checks (checks.check_values);
a value of another type is left to them.

SHARED bounds base_config()'s keys (checks.validate_config); each trainer bounds its own keys where
it reads them (its data.read_settings, its task.validate_config) with check(section, its table).
"""
import numbers

from common.contract.errors import ConfigError

# (maximum, why) of each kind of count or size.
STEPS = (10**9, "a billion steps is years of training on any card")
BATCH = (65536, "the largest batches trained with (large-batch ImageNet)")
SIDE = (8192, "a float32 image of 8192^2 pixels is 0.8 GB before any layer")
CHANNELS = (4096, "more channels or values than any of these networks' widest layer")
CLASSES = (100000, "ImageNet-21k's 21,841 classes fit")
IMAGES = (100000, "the images or identities a synthetic source makes in memory, or a class is drawn up to")
SHUFFLE = (100000, "the examples a shuffle buffer holds in memory at once")

SHARED = {
    **dict.fromkeys(["train.num_steps", "train.log_every", "train.eval_every", "train.checkpoint_every",
                     "train.steps_per_loop", "train.max_consecutive_nonfinite", "train.profile_steps",
                     "optimizer.decay_steps", "optimizer.warmup_steps", "optimizer.boundaries",
                     "summaries.scalars_every", "summaries.images_every", "summaries.histograms_every"], STEPS),
    "train.batch_size": BATCH,
    "train.accumulate_steps": (1024, "one update in a thousand steps' gradients is rather a smaller learning rate"),
    "train.keep_checkpoints": (1000, "each is a copy of the weights on disk"),
    "train.seconds_per_loop": (86400, "a day between the loop's actions"),
    "train.stall_timeout_s": (7 * 86400, "a week without a step"),
    "summaries.max_outputs": (100, "images per image summary, each written every summaries.images_every"),
    "summaries.max_summary_bytes": (2**30, "a GB per summary"),
    "hardware.memory_limit_mb": (2**20, "a TB: no card has as much"),
}

def check(config, table):
  """One ConfigError line for the first {dotted key: (maximum, why)} of `table` whose value in
  `config` (a ConfigDict or dict; each item of a sequence) is a number above its maximum."""
  for key, (maximum, why) in table.items():
    value = config
    for part in key.split("."):
      value = value[part]
    items = value if isinstance(value, (tuple, list)) else (value,)
    if any(isinstance(v, numbers.Real) and not isinstance(v, bool) and v > maximum for v in items):
      raise ConfigError(f"{key}={value!r} is over its bound {maximum:,}: {why}")
