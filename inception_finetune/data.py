"""Classification inputs: synthetic classes, class folders, an id,label CSV and TF-Slim TFRecords.

Every source (sources.py) becomes the same two pipelines (input_pipeline.py):
  train: endless, shuffled with the seed, optionally oversampling rare classes,
    Inception training distortions seeded per element, then RandAugment, mixup and CutMix
    (augment.py) seeded per batch; yields (float32 images [B, S, S, 3] in [-1, 1], int32 class
    ids [B]), or with mixup or CutMix float32 soft labels [B, num_classes] instead of the ids.
  eval: one pass in order, slim's evaluation preprocessing; same element types.
  raw_eval: the same pass of uint8 images as decoded, for a SavedModel that
    preprocesses inside.

Labels and images are checked before training starts, every image (and every
TFRecord) decoded once with TensorFlow's decoder: a label outside
0..num_classes-1, one-hot labels, an id listed twice, an unreadable or
undecodable image is a DataError naming the file (or shard and record);
data.skip_bad_files skips undecodable ones instead, naming and counting them in
the data report. Class ids map to names through a labels file in TF-Slim's
format (`<id>:<name>` per line), written to the workdir with config.json.

read_settings reads the config's data section once (common/contract/settings.read) into the frozen
DataSettings of groups (SourceSettings, TrainSettings, EvalSettings) that check their own values
before any file is listed, which the functions here, in sources.py and in input_pipeline.py take
instead of the config; they hand plain values to the readers and checks of common/data (labels:
common/data/class_labels).
"""
import dataclasses
import os
from typing import Callable, Optional

from absl import logging
import numpy as np
import tensorflow as tf

from common.contract import bounds
from common.contract import checks
from common.contract import settings as settings_lib
from common.contract.errors import ConfigError
from common.contract.errors import DataError
from common.data import class_labels
from common.data import image_checks
from common.data import listing
from common.data import text_inputs
from common.data import tfds_sets
from inception_finetune import augment
from inception_finetune import input_pipeline
from inception_finetune import sources as sources_lib

SOURCES = ("synthetic", "folder", "csv", "tfrecord", "tfds")
LABELS_FILENAME = "labels.txt"
CLASS_BALANCE_FILENAME = "class_balance.csv"

@dataclasses.dataclass(frozen=True)
class SourceSettings:
  """Where the classified images come from (configs/inception_v4.py says what each key does): paths
  and patterns "" when not set; num_classes 0 = from the data."""
  source: str
  num_classes: int
  eval_fraction: float
  skip_bad_files: bool
  duplicates: str
  min_class_count: int
  train_dir: str
  eval_dir: str
  csv_path: str
  images_dir: str
  image_extension: str
  train_pattern: str
  eval_pattern: str
  labels_file: str
  labels_offset: int
  cache_dir: str
  synthetic_images_per_class: int
  synthetic_image_size: int
  shuffle_buffer: int  # TFRecords' records (or a TFDS split's examples), shuffled before they are read
  tfds: tfds_sets.TfdsSettings

  CHECKS = {
      "skip_bad_files": checks.BOOL,
      "min_class_count": checks.NON_NEGATIVE_INT,
      "labels_offset": checks.NON_NEGATIVE_INT,
      "synthetic_image_size": checks.POSITIVE_INT,
  }
  BOUNDS = {
      "synthetic_image_size": bounds.SIDE,
      **dict.fromkeys(["num_classes", "labels_offset"], bounds.CLASSES),
      **dict.fromkeys(["min_class_count", "synthetic_images_per_class"], bounds.IMAGES),
      "shuffle_buffer": bounds.SHUFFLE,
  }

  def __post_init__(self):
    if self.source not in SOURCES:
      raise ConfigError(f"data.source '{self.source}' is unknown; choose one of {', '.join(SOURCES)}")
    if self.num_classes < 0:
      _refuse_num_classes(self)
    _check_rules(self, [("eval_fraction", "in (0, 1)", lambda v: 0 < v < 1),
                        ("shuffle_buffer", ">= 1", lambda v: v >= 1)])
    text_inputs.check_duplicates_mode(self.duplicates)
    # A fifth of each synthetic class, and at least one image, is held out for evaluation.
    if self.source == "synthetic" and self.synthetic_images_per_class < 2:
      raise ConfigError(f"data.synthetic_images_per_class must be >= 2, got {self.synthetic_images_per_class}")


@dataclasses.dataclass(frozen=True)
class TrainSettings:
  """What the training pipeline does to the images: oversampling, Inception's distortions,
  RandAugment, mixup and CutMix."""
  augment: bool
  fast_mode: bool
  randaugment_ops: int
  randaugment_magnitude: float
  mixup_alpha: float
  cutmix_alpha: float
  mix_prob: float
  mix_switch_prob: float
  oversample_to: int

  CHECKS = {
      "augment": checks.BOOL,
      "fast_mode": checks.BOOL,
      "randaugment_ops": checks.NON_NEGATIVE_INT,  # 0 = off
      "randaugment_magnitude": checks.number(0, augment.MAX_MAGNITUDE),
      "mixup_alpha": checks.NON_NEGATIVE,  # 0 = off
      "cutmix_alpha": checks.NON_NEGATIVE,  # 0 = off
      "mix_prob": checks.number(0, 1),
      "mix_switch_prob": checks.number(0, 1),
  }
  BOUNDS = {
      "randaugment_ops": (len(augment.OPERATIONS), "RandAugment's layers, each drawing one of its "
                          f"{len(augment.OPERATIONS)} operations: more repeat them on an image beyond recognition"),
      "oversample_to": bounds.IMAGES,
  }

  def __post_init__(self):
    _check_rules(self, [("oversample_to", ">= 0 (0 = off)", lambda v: v >= 0)])


@dataclasses.dataclass(frozen=True)
class EvalSettings:
  """How the evaluation reads images: slim's central crop, batches."""
  central_fraction: float
  eval_batch_size: int

  CHECKS = {"central_fraction": checks.number(0, 1)}  # TF-Slim's: 0 (or 1) = no crop
  BOUNDS = {"eval_batch_size": bounds.BATCH}

  def __post_init__(self):
    _check_rules(self, [("eval_batch_size", ">= 1", lambda v: v >= 1)])


def _check_rules(settings, rules):
  """(key, allowed, check) in the order the checks are made: the first that fails is the error."""
  for key, allowed, ok in rules:
    if not ok(getattr(settings, key)):
      raise ConfigError(f"data.{key} must be {allowed}, got {getattr(settings, key)}")


@dataclasses.dataclass(frozen=True)
class DataSettings:
  """The config's data section in groups by what they serve; image_size, the side of every image
  the network sees, serves all of them and the model."""
  source: SourceSettings
  train: TrainSettings
  eval: EvalSettings
  image_size: int

  BOUNDS = {"image_size": bounds.SIDE}

  def __post_init__(self):
    _check_rules(self, [("image_size", ">= 1", lambda v: v >= 1)])


def read_settings(data_cfg):
  """The config's data section -> DataSettings (common/contract/settings.read), every value checked
  before any file is listed: a ConfigError naming the first bad one (data.<key>). task.validate_config
  checks data.image_size against the network (model.aux_logits); make_datasets, that the source can
  give num_classes."""
  return settings_lib.read(DataSettings, data_cfg, "data")


def _refuse_num_classes(settings):
  raise ConfigError(f"data.num_classes={settings.num_classes}: data.source='{settings.source}' needs "
                    "2 or more (0 = from the data, for folders, CSVs and labels files)")


@dataclasses.dataclass(frozen=True)
class ClassificationData:
  """What the trainer needs from the data.

  Attributes:
    train: endless dataset of (float32 [B, S, S, 3] in [-1, 1], int32 [B], or float32 soft labels
      [B, num_classes] with mixup or CutMix); None for an evaluation.
    eval: one pass of (float32 images [B, S, S, 3], int32 [B]).
    raw_eval: one pass of (uint8 images [1, H, W, 3] as decoded, int32 [1]), in eval's order.
    num_classes: number of classes; ids are 0..num_classes-1.
    class_names: a name per class id.
    train_counts: training images per class (int64 [num_classes]); for an evaluation, the run's
      (its class_balance.csv), or None.
    num_eval: images in one pass of `eval`.
    new_train: () -> a new pipeline equal to `train`, from its first batch (a second iterator of
      `train` itself would draw another shuffle); None for an evaluation.
    data_report: what the checks skipped (common/data/image_checks.skip_report), for metrics.json.
    train_files: the training images, or TFRecord shards, in order ([] for TFDS).
    train_fingerprint: what the training examples are, for the input fingerprint.
    run_files: {name: text} of labels.txt and class_balance.csv, which the loop writes into the
      workdir with config.json, once the run's checks pass.
  """
  train: tf.data.Dataset
  eval: tf.data.Dataset
  raw_eval: tf.data.Dataset
  num_classes: int
  class_names: tuple
  train_counts: np.ndarray
  num_eval: int
  new_train: Optional[Callable[[], tf.data.Dataset]]
  data_report: dict = dataclasses.field(default_factory=dict)
  train_files: list = dataclasses.field(default_factory=list)
  train_fingerprint: str = ""
  run_files: dict = dataclasses.field(default_factory=dict)


def make_datasets(settings, batch_size, seed, workdir=None, for_training=True):
  """Builds the train and eval pipelines of the source the settings name, checking its files once.

  Args:
    settings: the config's data section as DataSettings (read_settings).
    batch_size: training images per batch.
    seed: seeds synthetic images, shuffles, oversampling and distortions.
    workdir: where synthetic images go.
    for_training: False for an evaluation of the run in workdir (_evaluation_data).
  """
  # data.num_classes=0 takes the classes from the data: synthetic ones and TFRecords without a
  # labels file have none to give.
  source = settings.source
  if source.num_classes < 2 and (source.source == "synthetic"
                                 or (source.source == "tfrecord" and not source.labels_file)):
    _refuse_num_classes(source)
  if not for_training:
    return _evaluation_data(settings, seed, workdir)
  class_names, train_source, eval_source = sources_lib.make_sources(source, seed, workdir)
  num_classes = len(class_names)
  report = class_labels.class_balance_report(train_source.counts, class_names, source.min_class_count)
  for line in report.splitlines():
    logging.info("%s", line)
  train = input_pipeline.make_train(train_source, settings, batch_size, seed, num_classes)
  if settings.train.oversample_to:
    logging.info("oversampling: classes drawn as though each had at least %d images",
                 settings.train.oversample_to)
  logging.info("classification data: %s, %d train and %d eval images, %d classes", source.source,
               train_source.counts.sum(), eval_source.counts.sum(), num_classes)
  report = image_checks.skip_report({"train": train_source.skipped, "eval": eval_source.skipped})
  return ClassificationData(train=train, eval=input_pipeline.make_eval(eval_source, settings, False),
                            raw_eval=input_pipeline.make_eval(eval_source, settings, True),
                            num_classes=num_classes,
                            class_names=tuple(class_names), train_counts=train_source.counts,
                            num_eval=int(eval_source.counts.sum()), data_report=report,
                            train_files=train_source.files,
                            train_fingerprint=train_source.fingerprint or listing.files_fingerprint(
                                train_source.files),
                            run_files={LABELS_FILENAME: class_labels.labels_file_text(class_names),
                                       CLASS_BALANCE_FILENAME: class_labels.class_balance_csv(
                                           train_source.counts, class_names, source.min_class_count)},
                            new_train=lambda: input_pipeline.make_train(train_source, settings, batch_size, seed,
                                                                        num_classes))


def _evaluation_data(settings, seed, workdir):
  """The evaluation's ClassificationData: only the evaluation images are checked. The class names
  and training counts are the run's (its labels.txt and class_balance.csv); with class folders and
  data.eval_dir, data.train_dir is not read."""
  run_names, run_counts = read_run_classes(workdir)
  class_names, _, eval_source = sources_lib.make_sources(settings.source, seed, workdir, for_training=False,
                                                         run_names=run_names)
  if run_names is not None and list(class_names) != list(run_names):
    raise DataError(f"the data's {len(class_names)} classes ({', '.join(class_names[:3])}, ...) are not "
                    f"those of {os.path.join(workdir, LABELS_FILENAME)}, which the run was trained on")
  if run_counts is not None and len(run_counts) != len(class_names):
    raise DataError(f"{os.path.join(workdir, CLASS_BALANCE_FILENAME)}: {len(run_counts)} classes, but the "
                    f"data has {len(class_names)}; it is another run's, or the data changed")
  logging.info("classification data: %s, %d eval images, %d classes", settings.source.source,
               eval_source.counts.sum(), len(class_names))
  return ClassificationData(train=None, eval=input_pipeline.make_eval(eval_source, settings, False),
                            raw_eval=input_pipeline.make_eval(eval_source, settings, True),
                            num_classes=len(class_names),
                            class_names=tuple(class_names), train_counts=run_counts,
                            num_eval=int(eval_source.counts.sum()), new_train=None,
                            data_report=image_checks.skip_report({"eval": eval_source.skipped}))


def read_run_classes(workdir):
  """(class names, training images per class) of the run in workdir, from its labels.txt and
  class_balance.csv; None for a file the workdir does not have. A file that is empty, cut short, or
  whose classes are not the other's is a DataError naming it."""
  if not workdir:
    return None, None
  labels, balance = (os.path.join(workdir, name) for name in (LABELS_FILENAME, CLASS_BALANCE_FILENAME))
  fix = "run the training command of this workdir again, which writes it anew"
  try:
    names = class_labels.read_labels_file(labels) if os.path.isfile(labels) else None
    counts = class_labels.read_class_balance(balance) if os.path.isfile(balance) else None
  except DataError as e:
    raise DataError(f"{e}; {fix}") from None
  if names is not None and counts is not None and len(counts) != len(names):
    raise DataError(f"{balance}: {len(counts)} classes, but {labels} names {len(names)}; {fix}")
  return names, counts
