"""Segmentation inputs: synthetic scenes, image/mask folders, Pascal VOC, TFRecords and .npy patches.

Every source (sources.py) becomes the same two pipelines (input_pipeline.py): endless random patches to
train on, whole images in order to evaluate. Images stay uint8: the model normalizes them in its first
layer, so that the exported SavedModel takes uint8 images too.

Files are checked up front (every image and mask, or every TFRecord, decoded
with TensorFlow's decoders in a thread pool, masks also read with PIL for their
palette), so that a bad file is named before training starts, or skipped and
counted in the data report with data.skip_bad_files. Pipelines read from files
only, so no array becomes a graph constant and the train iterator can be
checkpointed.

read_settings reads the config's data section once, through common/contract/settings.read, into a
frozen DataSettings of groups (SourceSettings, TrainSettings, EvalSettings), each checking its own
values, before any file is listed; make_datasets, sources.py and input_pipeline.py take the
settings and hand plain values to the readers and checks of common/data.
"""
import dataclasses
import os

from absl import logging
import tensorflow as tf

from common.contract import bounds
from common.contract import checks
from common.contract import settings as settings_lib
from common.contract.errors import ConfigError
from common.data import class_labels
from common.data import image_checks
from common.data import normalization
from common.data import sources
from common.data import text_inputs
from common.data import tfds_sets
from segmentation import augment as augment_lib
from segmentation import input_pipeline
from segmentation import sources as sources_lib
from segmentation import synthetic

SOURCES = ("synthetic", "folder", "voc", "tfrecord", "npy", "tfds")
VOC_CLASS_NAMES = (
    "background", "aeroplane", "bicycle", "bird", "boat", "bottle", "bus", "car", "cat", "chair", "cow",
    "diningtable", "dog", "horse", "motorbike", "person", "pottedplant", "sheep", "sofa", "train",
    "tvmonitor")
# Optional, in a VOC root: one class name per line, class 0 first (VOC's own 21 names are known).
VOC_CLASS_NAMES_FILE = "class_names.txt"


@dataclasses.dataclass(frozen=True)
class SourceSettings:
  """What the source is and holds: its kind, its classes, its files or its synthetic scenes, how bad
  and duplicate files are met (configs/segmentation.py says what each key does)."""
  source: str
  num_classes: int
  ignore_label: int
  class_names: tuple  # of str; () = the source's names
  skip_bad_files: bool
  duplicates: str
  eval_fraction: float
  cache_dir: str
  image_size: int
  num_train_images: int
  num_eval_images: int
  images_dir: str
  masks_dir: str
  train_split: str
  eval_split: str
  voc_root: str
  train_pattern: str
  eval_pattern: str
  train_images: str
  train_labels: str
  eval_images: str
  eval_labels: str
  npy_pixel_max: float
  tfds: tfds_sets.TfdsSettings

  CHECKS = {
      "skip_bad_files": checks.BOOL,
      "class_names": checks.sequence_of(checks.STRING, "a sequence of strings (() = the source's names)"),
      "npy_pixel_max": checks.POSITIVE,
  }
  BOUNDS = {
      "image_size": bounds.SIDE,
      "num_classes": (255, "masks are 8-bit, with room for data.ignore_label"),
      **dict.fromkeys(["num_train_images", "num_eval_images"], bounds.IMAGES),
  }

  def __post_init__(self):
    if self.source not in SOURCES:
      raise ConfigError(f"data.source '{self.source}' is unknown; choose one of {', '.join(SOURCES)}")
    if self.num_classes < 2:
      raise ConfigError(f"data.num_classes must be >= 2, got {self.num_classes}")
    if not self.num_classes <= self.ignore_label <= 255:
      raise ConfigError(f"data.ignore_label must be in [num_classes, 255] (masks are 8-bit), "
                        f"got {self.ignore_label}")
    if not 0 < self.eval_fraction < 1:
      raise ConfigError(f"data.eval_fraction must be in (0, 1), got {self.eval_fraction}")
    if self.class_names and len(self.class_names) != self.num_classes:
      raise ConfigError(f"data.class_names has {len(self.class_names)} names for {self.num_classes} classes")
    text_inputs.check_duplicates_mode(self.duplicates)


@dataclasses.dataclass(frozen=True)
class TrainSettings:
  """What the training pipeline cuts: patches, how many per image, their augmentation (data.augment),
  the shuffle."""
  patch_size: int
  patches_per_image: int
  shuffle_buffer: int
  augment: augment_lib.Augmentation

  BOUNDS = {
      "patch_size": bounds.SIDE,
      "patches_per_image": (1024, "patches cut from one image per epoch, each a training example"),
      "shuffle_buffer": bounds.SHUFFLE,
  }

  def __post_init__(self):
    _at_least_one(self, "patch_size", "patches_per_image", "shuffle_buffer")
    if self.augment.crop_padding >= self.patch_size:
      raise ConfigError(f"data.augment.crop_padding={self.augment.crop_padding} must be below data.patch_size="
                        f"{self.patch_size}: a patch could fall wholly in the padding, which has no label")


@dataclasses.dataclass(frozen=True)
class EvalSettings:
  """How the evaluation reads whole images: batches, and the largest image evaluated whole."""
  eval_batch_size: int
  eval_max_pixels: int

  BOUNDS = {
      "eval_batch_size": bounds.BATCH,
      "eval_max_pixels": (2**28, "the pixels one call of the network sees: float32 logits of 2^28 "
                          "pixels are a GB per class"),
  }

  def __post_init__(self):
    _at_least_one(self, "eval_batch_size", "eval_max_pixels")


def _at_least_one(settings, *keys):
  for key in keys:
    if getattr(settings, key) < 1:
      raise ConfigError(f"data.{key} must be >= 1, got {getattr(settings, key)}")


@dataclasses.dataclass(frozen=True)
class DataSettings:
  """The config's data section read once and checked (read_settings), in groups by what they serve;
  normalization serves the model's first layer."""
  source: SourceSettings
  train: TrainSettings
  eval: EvalSettings
  normalization: str

  CHECKS = {"normalization": checks.one_of(*normalization.SCHEMES)}


def read_settings(data_cfg, for_training=True):
  """DataSettings of the config's data section, every value checked: a ConfigError naming the key.

  Called at start-up (task.validate_config, predict), before any file is listed or written.
  for_training=False (an evaluation, predict): the keys of the training files may be empty.
  """
  settings = settings_lib.read(DataSettings, data_cfg, "data")
  _check_source_keys(settings.source, for_training)
  return settings


def _check_source_keys(settings, for_training):
  """What data.source needs (SourceSettings): its sizes (synthetic) or the keys naming its files, set."""
  if settings.source == "synthetic":
    if not 2 <= settings.num_classes <= len(synthetic.CLASS_NAMES):
      raise ConfigError(f"data.num_classes must be 2..{len(synthetic.CLASS_NAMES)} for synthetic scenes, "
                        f"got {settings.num_classes}")
    if min(settings.num_train_images, settings.num_eval_images, settings.image_size) < 1:
      raise ConfigError("data.num_train_images, data.num_eval_images and data.image_size must be >= 1")
  elif settings.source == "folder":
    sources.required(settings.images_dir, "images_dir", settings.source)
    sources.required(settings.masks_dir, "masks_dir", settings.source)
    if bool(settings.train_split) != bool(settings.eval_split):
      raise ConfigError("set both data.train_split and data.eval_split (files of image ids), or neither")
  elif settings.source == "voc":
    sources.required(settings.voc_root, "voc_root", settings.source)
  elif settings.source == "tfrecord":
    if for_training:
      sources.required(settings.train_pattern, "train_pattern", settings.source)
    sources.required(settings.eval_pattern, "eval_pattern", settings.source)
  elif settings.source == "tfds":  # read when the data set is opened (sources.tfds_sources)
    sources.required(settings.tfds.tfds_eval_split, tfds_sets.EVAL_SPLIT_KEY, settings.source)
  else:  # npy: the train arrays hold the evaluation's records too when there are no eval arrays
    if bool(settings.eval_images) != bool(settings.eval_labels):
      raise ConfigError("set both data.eval_images and data.eval_labels, or neither")
    if for_training or not settings.eval_images:
      sources.required(settings.train_images, "train_images", settings.source)
      sources.required(settings.train_labels, "train_labels", settings.source)


@dataclasses.dataclass(frozen=True)
class SegmentationData:
  """What a trainer needs from the data.

  Attributes:
    train: endless dataset of (uint8 [B, p, p, 3], int32 [B, p, p]); None for an evaluation.
    eval: one pass of (uint8 [B, H, W, 3], int32 [B, H, W]), padded with the ignore label.
    num_classes: classes, without the ignore label.
    class_names: a name per class, or None.
    ignore_label: label of pixels that count in no loss or metric.
    num_eval_images: images in one pass of `eval`.
    train_files: (image path, mask path) of every training image, or None (TFRecords, .npy, TFDS).
    train_fingerprint: what the training examples are, where the source says it (TFDS), else None.
    num_train_images: images (or records) the training pipeline draws from; 0 for an evaluation.
    data_report: what the checks skipped (common/data/image_checks.skip_report), for metrics.json.
  """
  train: tf.data.Dataset
  eval: tf.data.Dataset
  num_classes: int
  class_names: tuple
  ignore_label: int
  num_eval_images: int
  num_train_images: int
  train_files: list = None
  train_fingerprint: str = None
  data_report: dict = dataclasses.field(default_factory=dict)


def make_datasets(settings, batch_size, seed, workdir=None, for_training=True, tiled=False):
  """Builds the train and eval pipelines of the configured source.

  Args:
    settings: DataSettings (read_settings of the config's data section).
    batch_size: training patches per batch.
    seed: seeds the synthetic scenes, shuffles and crops.
    workdir: where synthetic scenes are cached when settings.cache_dir is empty.
    for_training: False for an evaluation, which lists and checks the evaluation files only (the
      training files are listed, not checked, where the evaluation set is a hash split of them).
    tiled: the evaluation runs in windows (eval.window), so an image over data.eval_max_pixels is
      evaluated in tiles, not refused.

  Returns:
    SegmentationData.
  """
  source = settings.source
  # Evaluated whole (not tiled), an image over data.eval_max_pixels is refused before training.
  max_pixels = None if tiled else settings.eval.eval_max_pixels
  (train_source, eval_source), train_files = sources_lib.make_sources(source, seed, workdir, for_training,
                                                                      max_pixels, settings.train.shuffle_buffer)
  train = input_pipeline.make_train(
      train_source, batch_size, seed, patch_size=settings.train.patch_size,
      patches_per_image=settings.train.patches_per_image, shuffle_buffer=settings.train.shuffle_buffer,
      ignore_label=source.ignore_label, augmentation=settings.train.augment) if for_training else None
  eval_batch_size = settings.eval.eval_batch_size if eval_source.image_size else 1
  evaluation = input_pipeline.make_eval(eval_source, eval_batch_size)
  logging.info("segmentation data: %s, %s eval images, %d classes", source.source,
               (f"{train_source.size:,} train images, " if for_training else "") + f"{eval_source.size:,}",
               source.num_classes)
  report = image_checks.skip_report({"train": list(train_source.skipped) if for_training else [],
                                    "eval": list(eval_source.skipped)})
  return SegmentationData(train=train, eval=evaluation, num_classes=source.num_classes,
                          class_names=class_names(source), ignore_label=source.ignore_label,
                          num_eval_images=eval_source.size,
                          num_train_images=train_source.size if for_training else 0,
                          train_files=train_files, data_report=report,
                          train_fingerprint=train_source.fingerprint if for_training else None)


def class_names(settings):
  """data.class_names of the SourceSettings; else the source's: synthetic, a VOC root's
  class_names.txt, VOC's 21; else None."""
  if settings.class_names:
    return settings.class_names
  if settings.source == "synthetic":
    return synthetic.CLASS_NAMES[:settings.num_classes]
  if settings.source == "tfds" and settings.tfds.tfds_name == sources_lib.OXFORD_PETS:
    return sources_lib.OXFORD_PETS_CLASSES
  if settings.source == "voc":
    path = os.path.join(settings.voc_root, VOC_CLASS_NAMES_FILE)
    if os.path.exists(path):
      return class_labels.read_class_names(path, settings.num_classes)
    if settings.num_classes == len(VOC_CLASS_NAMES):
      return VOC_CLASS_NAMES
  return None
