"""Triplet's data settings: the config's data section read once, by read_settings, into the frozen
DataSettings that sources.py and input_pipeline.py take instead of the config.
"""
import dataclasses

from common.contract import bounds
from common.contract import checks
from common.contract.errors import ConfigError
from common.data import normalization
from common.data import text_inputs
from triplet import sources

@dataclasses.dataclass(frozen=True)
class DataSettings:
  """The config's data section (configs/triplet.py), read once by read_settings and checked: what
  the functions of this module take instead of the config. P x K batches; then the folder source's
  paths ("" = none); then the synthetic source's identities, written once under cache_dir."""
  source: str
  identities_per_batch: int
  images_per_identity: int
  small_identities: str
  skip_bad_files: bool
  duplicates: str
  load_size: int
  crop_size: int
  random_flip: bool
  normalization: str
  eval_batch_size: int
  train_dir: str
  eval_dir: str
  pairs_file: str
  pairs_dir: str
  cache_dir: str
  num_train_identities: int
  num_eval_identities: int
  images_per_synthetic_identity: int
  num_pair_folds: int
  pairs_per_fold: int


# bounds.check's: the data section's counts and sizes.
BOUNDS = {
    **dict.fromkeys(["data.load_size", "data.crop_size"], bounds.SIDE),
    **dict.fromkeys(["data.identities_per_batch", "data.images_per_identity", "data.eval_batch_size"],
                    bounds.BATCH),
    **dict.fromkeys(["data.num_train_identities", "data.num_eval_identities", "data.pairs_per_fold"],
                    bounds.IMAGES),
    "data.images_per_synthetic_identity": (1000, "the images a synthetic identity makes in memory"),
    "data.num_pair_folds": (100, "cross-validation folds of the verification pairs (LFW's protocol has 10)"),
}


def read_settings(data_cfg):
  """The config's data section -> DataSettings, every value checked before any file is listed: a
  ConfigError naming the first bad one (data.<key>). The checks that need another section (the
  loss, the batch size) are task.validate_config's."""
  values = {field.name: data_cfg[field.name] for field in dataclasses.fields(DataSettings)}
  checks.check_values({"data": values}, {
      "data.source": checks.one_of("synthetic", "folder"),
      "data.small_identities": checks.one_of(*sources.SMALL_IDENTITY_MODES),
      "data.identities_per_batch": checks.integer(2),  # negatives need a second identity
      "data.images_per_identity": checks.POSITIVE_INT,
      "data.skip_bad_files": checks.BOOL,
      "data.random_flip": checks.BOOL,
      "data.normalization": checks.one_of(*normalization.SCHEMES),
      **dict.fromkeys(["data.load_size", "data.crop_size", "data.eval_batch_size",
                       "data.num_train_identities", "data.num_pair_folds", "data.pairs_per_fold"],
                      checks.POSITIVE_INT),
      # Verification pairs need two identities with two images each.
      "data.num_eval_identities": checks.integer(2),
      "data.images_per_synthetic_identity": checks.integer(2),
  })
  bounds.check({"data": values}, BOUNDS)
  text_inputs.check_duplicates_mode(values["duplicates"])
  for key in ("train_dir", "eval_dir", "pairs_file", "pairs_dir", "cache_dir"):
    values[key] = values[key] or ""
  settings = DataSettings(**values)
  if settings.crop_size > settings.load_size:
    raise ConfigError(f"data.crop_size={settings.crop_size} must be in "
                      f"1..data.load_size={settings.load_size}")
  if settings.source == "folder" and settings.pairs_file and not (settings.pairs_dir or settings.eval_dir):
    raise ConfigError(f"data.pairs_file={settings.pairs_file} needs data.pairs_dir or data.eval_dir")
  return settings
