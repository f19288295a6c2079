"""data.source='tfds': the splits of a TensorFlow Datasets data set, read as every other source is.

A data set is opened once (TfdsSettings.open): its builder from data.tfds_name and data.tfds_data_dir,
prepared (or, with data.tfds_download, downloaded and prepared), the split (TFDS split syntax,
"train[:90%]") and the features the trainer needs checked, each problem one line naming its key.

Order and resume: the split's shards are read in their stored order (no file shuffle, one file at a
time), its images still encoded (cheap to shuffle), then shuffled with the seed and decoded by the
trainer, so that the tf.data iterator is saved in the checkpoint as with TFRecords. The input
fingerprint names the data set, its version, and the shards and example ranges the split reads.

tensorflow_datasets is an extra (requirements-tfds.txt), imported only when data.source='tfds'.
"""
import dataclasses
import hashlib
import os

from common.contract import checks
from common.contract.errors import ConfigError
from common.contract.errors import DataError
from common.data import sources

SOURCE = "tfds"
MISSING = ("data.source='tfds' needs tensorflow-datasets: pip install -r requirements-tfds.txt "
           "(or pip install -e \".[tfds]\")")
# The config keys, as the trainers name them (configs/*.py).
NAME_KEY, DOWNLOAD_KEY = "tfds_name", "tfds_download"
TRAIN_SPLIT_KEY, EVAL_SPLIT_KEY = "tfds_train_split", "tfds_eval_split"


@dataclasses.dataclass(frozen=True)
class TfdsSettings:
  """The data.tfds_* keys every trainer has (read by common/contract/settings.read from its data
  section): the data set, where it is prepared ("" = TFDS's default), its splits, the download."""
  tfds_name: str
  tfds_data_dir: str
  tfds_train_split: str
  tfds_eval_split: str
  tfds_download: bool

  # The name, folder and splits are checked when the data set is opened (load_builder, open_split).
  CHECKS = {"tfds_download": checks.BOOL}

  def open(self, check_features, for_training=True):
    """(builder, train Split or None for an evaluation, eval Split or None when data.tfds_eval_split
    is "", which the trainer allows where it holds evaluation examples out of the train split);
    check_features(builder) first, the trainer's check of the features it reads."""
    builder = load_builder(self.tfds_name, self.tfds_data_dir, self.tfds_download)
    check_features(builder)
    train = open_split(builder, self.tfds_train_split, TRAIN_SPLIT_KEY) if for_training else None
    evaluation = open_split(builder, self.tfds_eval_split, EVAL_SPLIT_KEY) if self.tfds_eval_split else None
    return builder, train, evaluation


def import_tfds():
  """The tensorflow_datasets module; a ConfigError saying how to install it when it is missing."""
  try:
    import tensorflow_datasets as tfds  # pylint: disable=import-outside-toplevel
  except ImportError:
    raise ConfigError(MISSING) from None
  return tfds


def _first_line(error):
  return (str(error).strip().splitlines() or [type(error).__name__])[0]


def load_builder(name, data_dir, download):
  """The prepared builder of data set `name` (data.tfds_name) in data_dir ("" = TFDS's default,
  ~/tensorflow_datasets); prepared here when download (data.tfds_download) is set."""
  tfds = import_tfds()
  sources.required(name, NAME_KEY, SOURCE)
  if getattr(tfds.core.DatasetBuilder.as_dataset, "__module__", "").startswith("tensorflow_datasets.testing"):
    # Mocked examples come from a Python generator, whose position a checkpoint cannot save.
    raise ConfigError("data.source='tfds' cannot train inside tfds.testing.mock_data (its examples come from "
                      "a Python generator, which a checkpoint cannot resume); prepare a data set instead")
  try:
    builder = tfds.builder(name, data_dir=data_dir or None)
  except tfds.core.registered.DatasetNotFoundError:
    raise ConfigError(f"data.{NAME_KEY}='{name}' is not a TensorFlow Datasets data set, nor one prepared in "
                      f"{data_dir or 'the default data_dir'} (see https://www.tensorflow.org/datasets/catalog)"
                      ) from None
  except (ValueError, OSError) as e:
    raise ConfigError(f"data.{NAME_KEY}='{name}': {_first_line(e)}") from None
  if not builder.is_prepared():
    if not download:
      dir_flag = f" --data_dir={data_dir}" if data_dir else ""
      raise DataError(f"data.{NAME_KEY}='{name}' is not prepared in {builder.data_dir}: run `tfds build "
                      f"{name}{dir_flag}` (its files go to {builder.data_dir}), or set "
                      f"data.{DOWNLOAD_KEY}=True to download and prepare it now")
    try:
      builder.download_and_prepare()
    except Exception as e:  # pylint: disable=broad-except  # a download or a manual step: say which
      raise DataError(f"data.{DOWNLOAD_KEY}: preparing '{name}' in {builder.data_dir} failed: "
                      f"{_first_line(e)}") from None
  return builder


def feature(builder, key, kind, what):
  """The feature `key` of the data set, of tfds.features class name `kind` ("Image", "ClassLabel",
  "Text"; a tuple for any of several), which the trainer reads as `what`; else a ConfigError naming
  the features the data set has."""
  features = builder.info.features
  kinds = kind if isinstance(kind, tuple) else (kind,)
  found = features[key] if key in features.keys() else None
  if found is None or type(found).__name__ not in kinds:
    have = ", ".join(f"{name} ({type(f).__name__})" for name, f in sorted(features.items()))
    raise ConfigError(f"data.{NAME_KEY}='{builder.name}': the trainer reads {what} from a feature '{key}' "
                      f"({' or '.join(kinds)}); the data set has {have}")
  return found


def image_feature(builder, key, channels, what):
  """feature() of an Image feature with `channels` channels (None: any)."""
  found = feature(builder, key, "Image", what)
  if channels and found.shape[-1] not in (None, channels):
    raise ConfigError(f"data.{NAME_KEY}='{builder.name}': feature '{key}' has {found.shape[-1]} channels, "
                      f"but {what} has {channels}")
  return found


@dataclasses.dataclass(frozen=True)
class Split:
  """One split of a prepared data set: split is in TFDS's syntax, key the config key naming it."""
  builder: object
  split: str
  key: str
  num_examples: int
  shards: tuple  # (file name, first example, examples) the split reads, in order

  def read(self, seed, shuffle_buffer, encoded=()):
    """The split's examples (dicts of features, the Image features in `encoded` as their encoded
    bytes): shuffled (from a buffer of shuffle_buffer) and endless with a seed, in stored order and
    once with None."""
    tfds = import_tfds()
    examples = self.builder.as_dataset(
        split=self.split, shuffle_files=False,
        decoders={key: tfds.decode.SkipDecoding() for key in encoded},
        read_config=tfds.ReadConfig(interleave_cycle_length=1, try_autocache=False))
    if seed is not None:
      examples = examples.shuffle(min(shuffle_buffer, self.num_examples), seed=seed,
                                  reshuffle_each_iteration=True).repeat()
    return examples

  def fingerprint(self):
    """'<name> <version> <split>: <n> examples, <digest of the shards and ranges read>', for the
    input fingerprint: another data set, version or split refuses a resume."""
    digest = hashlib.sha256(repr(self.shards).encode()).hexdigest()[:16]
    return (f"{self.builder.name} {self.builder.version} {self.split}: {self.num_examples} examples in "
            f"{len(self.shards)} shard ranges, {digest}")


def open_split(builder, split, key):
  """Split `split` of the builder's data set, which data.`key` names; a ConfigError naming the key
  for a split the data set does not have, one in a syntax TFDS does not read, or an empty one."""
  sources.required(split, key, SOURCE)
  try:
    info = builder.info.splits[split]
  except (ValueError, KeyError, AssertionError) as e:
    raise ConfigError(f"data.{key}='{split}' of '{builder.name}': {_first_line(e)} (its splits: "
                      f"{', '.join(builder.info.splits.keys())})") from None
  if not info.num_examples:
    raise ConfigError(f"data.{key}='{split}' of '{builder.name}' holds no examples")
  shards = tuple((os.path.basename(i.filename), i.skip, i.take) for i in info.file_instructions)
  return Split(builder, split, key, int(info.num_examples), shards)

