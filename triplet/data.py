"""Triplet's data settings: the config's data section (configs/triplet.py says what each key does)
read once, by read_settings through common/contract/settings.read, into a frozen DataSettings of
groups that check themselves; sources.py and input_pipeline.py take them instead of the config.
"""
import dataclasses

from common.contract import bounds
from common.contract import checks
from common.contract import settings as settings_lib
from common.contract.errors import ConfigError
from common.data import normalization
from common.data import text_inputs
from common.data import tfds_sets
from triplet import sources


@dataclasses.dataclass(frozen=True)
class SourceSettings:
  """Where the identities come from: the folder source's paths ("" = none), or the synthetic
  source's identities or a TFDS data set's, written once under cache_dir; how bad and duplicate
  files are met."""
  source: str
  skip_bad_files: bool
  duplicates: str
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
  tfds: tfds_sets.TfdsSettings
  tfds_eval_fraction: float

  CHECKS = {
      "source": checks.one_of("synthetic", "folder", tfds_sets.SOURCE),
      "tfds_eval_fraction": checks.number(0, 1, low_open=True, high_open=True),
      "skip_bad_files": checks.BOOL,
      **dict.fromkeys(["num_train_identities", "num_pair_folds", "pairs_per_fold"], checks.POSITIVE_INT),
      # Verification pairs need two identities with two images each.
      "num_eval_identities": checks.integer(2),
      "images_per_synthetic_identity": checks.integer(2),
  }
  BOUNDS = {
      **dict.fromkeys(["num_train_identities", "num_eval_identities", "pairs_per_fold"], bounds.IMAGES),
      "images_per_synthetic_identity": (1000, "the images a synthetic identity makes in memory"),
      "num_pair_folds": (100, "cross-validation folds of the verification pairs (LFW's protocol has 10)"),
  }

  def __post_init__(self):
    text_inputs.check_duplicates_mode(self.duplicates)
    if self.source == "folder" and self.pairs_file and not (self.pairs_dir or self.eval_dir):
      raise ConfigError(f"data.pairs_file={self.pairs_file} needs data.pairs_dir or data.eval_dir")


@dataclasses.dataclass(frozen=True)
class ImageSettings:
  """How an image is read for training, evaluation and the export: resized to load_size, cropped to
  crop_size, normalized."""
  load_size: int
  crop_size: int
  normalization: str

  CHECKS = {
      **dict.fromkeys(["load_size", "crop_size"], checks.POSITIVE_INT),
      "normalization": checks.one_of(*normalization.SCHEMES),
  }
  BOUNDS = dict.fromkeys(["load_size", "crop_size"], bounds.SIDE)

  def __post_init__(self):
    if self.crop_size > self.load_size:
      raise ConfigError(f"data.crop_size={self.crop_size} must be in 1..data.load_size={self.load_size}")


@dataclasses.dataclass(frozen=True)
class TrainSettings:
  """The P x K batches: P identities of K images each, what short identities do, the flip."""
  identities_per_batch: int
  images_per_identity: int
  small_identities: str
  random_flip: bool

  CHECKS = {
      "identities_per_batch": checks.integer(2),  # negatives need a second identity
      "images_per_identity": checks.POSITIVE_INT,
      "small_identities": checks.one_of(*sources.SMALL_IDENTITY_MODES),
      "random_flip": checks.BOOL,
  }
  BOUNDS = dict.fromkeys(["identities_per_batch", "images_per_identity"], bounds.BATCH)


@dataclasses.dataclass(frozen=True)
class EvalSettings:
  eval_batch_size: int

  CHECKS = {"eval_batch_size": checks.POSITIVE_INT}
  BOUNDS = {"eval_batch_size": bounds.BATCH}


@dataclasses.dataclass(frozen=True)
class DataSettings:
  """The config's data section in groups by what they serve."""
  source: SourceSettings
  images: ImageSettings
  train: TrainSettings
  eval: EvalSettings


def read_settings(data_cfg):
  """The config's data section -> DataSettings, every value checked before any file is listed: a
  ConfigError naming the first bad one (data.<key>). The checks that need another section (the
  loss, the batch size) are task.validate_config's."""
  return settings_lib.read(DataSettings, data_cfg, "data")
