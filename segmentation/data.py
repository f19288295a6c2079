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

read_settings is the one reader of the config's data section: it reads every key once into a frozen
DataSettings and checks every value, before any file is listed; make_datasets, sources.py and
input_pipeline.py take the settings and hand plain values to the readers and checks of common/data.
"""
import dataclasses
import os

from absl import logging
import tensorflow as tf

from common.contract import bounds
from common.contract import checks
from common.contract.errors import ConfigError
from common.data import class_labels
from common.data import image_checks
from common.data import normalization
from common.data import sources
from common.data import text_inputs
from segmentation import augment as augment_lib
from segmentation import input_pipeline
from segmentation import sources as sources_lib
from segmentation import synthetic

SOURCES = ("synthetic", "folder", "voc", "tfrecord", "npy")
VOC_CLASS_NAMES = (
    "background", "aeroplane", "bicycle", "bird", "boat", "bottle", "bus", "car", "cat", "chair", "cow",
    "diningtable", "dog", "horse", "motorbike", "person", "pottedplant", "sheep", "sofa", "train",
    "tvmonitor")
# Optional, in a VOC root: one class name per line, class 0 first (VOC's own 21 names are known).
VOC_CLASS_NAMES_FILE = "class_names.txt"
# data.augment.scale_range's bound: at 4 an image has 16 times its pixels to resize before the crop.
MAX_SCALE = 4.0
AUGMENT_CHECKS = {
    "data.augment.scale_range": checks.Check(
        lambda v: (isinstance(v, (tuple, list)) and len(v) == 2 and all(checks.POSITIVE.ok(x) for x in v)
                   and v[0] <= v[1] <= MAX_SCALE), f"(low, high) with 0 < low <= high <= {MAX_SCALE:g}"),
    "data.augment.crop_padding": checks.NON_NEGATIVE_INT,
    "data.augment.flip": checks.BOOL,
    "data.augment.brightness": checks.FRACTION,
    "data.augment.contrast": checks.FRACTION,
    "data.augment.saturation": checks.FRACTION,
    "data.augment.hue": checks.number(0, 0.5),  # half the colour wheel either way reaches every hue
}
# bounds.check's: the data section's counts and sizes (data.augment.crop_padding: below data.patch_size).
BOUNDS = {
    **dict.fromkeys(["data.patch_size", "data.image_size"], bounds.SIDE),
    "data.num_classes": (255, "masks are 8-bit, with room for data.ignore_label"),
    "data.patches_per_image": (1024, "patches cut from one image per epoch, each a training example"),
    "data.shuffle_buffer": bounds.SHUFFLE,
    "data.eval_batch_size": bounds.BATCH,
    "data.eval_max_pixels": (2**28, "the pixels one call of the network sees: float32 logits of 2^28 "
                             "pixels are a GB per class"),
    **dict.fromkeys(["data.num_train_images", "data.num_eval_images"], bounds.IMAGES),
}


@dataclasses.dataclass(frozen=True)
class DataSettings:
  """The config's data section read once and checked (read_settings): a field per key of
  configs/segmentation.py, which says what each does, in its order; its sequence a tuple."""
  source: str
  num_classes: int
  ignore_label: int
  patch_size: int
  patches_per_image: int
  augment: augment_lib.Augmentation  # the data.augment section
  normalization: str
  skip_bad_files: bool
  duplicates: str
  shuffle_buffer: int
  class_names: tuple  # of str
  eval_batch_size: int
  eval_max_pixels: int
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


def read_settings(data_cfg, for_training=True):
  """DataSettings of the config's data section, every value checked: a ConfigError naming the key.

  Called at start-up (task.validate_config, predict), before any file is listed or written.
  for_training=False (an evaluation, predict): the keys of the training files may be empty.
  """
  values = {field.name: data_cfg[field.name] for field in dataclasses.fields(DataSettings)}
  checks.check_values({"data": values}, {
      "data.normalization": checks.one_of(*normalization.SCHEMES),
      "data.skip_bad_files": checks.BOOL,
      "data.class_names": checks.sequence_of(checks.STRING,
                                             "a sequence of strings (() = the source's names)"),
      "data.npy_pixel_max": checks.POSITIVE,
  } | AUGMENT_CHECKS)
  bounds.check({"data": values}, BOUNDS)
  settings = DataSettings(**dict(values, class_names=tuple(values["class_names"]),
                                 augment=_read_augmentation(values["augment"])))
  _check_values(settings)
  _check_source_keys(settings, for_training)
  return settings


def _read_augmentation(section):
  values = {field.name: section[field.name] for field in dataclasses.fields(augment_lib.Augmentation)}
  return augment_lib.Augmentation(**dict(values, scale_range=tuple(values["scale_range"])))


def _check_values(settings):
  if settings.source not in SOURCES:
    raise ConfigError(f"data.source '{settings.source}' is unknown; choose one of {', '.join(SOURCES)}")
  if settings.num_classes < 2:
    raise ConfigError(f"data.num_classes must be >= 2, got {settings.num_classes}")
  if not settings.num_classes <= settings.ignore_label <= 255:
    raise ConfigError(f"data.ignore_label must be in [num_classes, 255] (masks are 8-bit), "
                      f"got {settings.ignore_label}")
  for key in ("patch_size", "patches_per_image", "shuffle_buffer", "eval_batch_size", "eval_max_pixels"):
    if getattr(settings, key) < 1:
      raise ConfigError(f"data.{key} must be >= 1, got {getattr(settings, key)}")
  if settings.augment.crop_padding >= settings.patch_size:
    raise ConfigError(f"data.augment.crop_padding={settings.augment.crop_padding} must be below data.patch_size="
                      f"{settings.patch_size}: a patch could fall wholly in the padding, which has no label")
  if not 0 < settings.eval_fraction < 1:
    raise ConfigError(f"data.eval_fraction must be in (0, 1), got {settings.eval_fraction}")
  if settings.class_names and len(settings.class_names) != settings.num_classes:
    raise ConfigError(f"data.class_names has {len(settings.class_names)} names for {settings.num_classes} "
                      "classes")
  text_inputs.check_duplicates_mode(settings.duplicates)


def _check_source_keys(settings, for_training):
  """What data.source needs: its sizes (synthetic) or the keys naming its files, set."""
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
    train_files: (image path, mask path) of every training image, or None (TFRecords, .npy).
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
  data_report: dict = dataclasses.field(default_factory=dict)


def make_datasets(settings, batch_size, seed, pad_multiple, workdir=None, for_training=True, tiled=False):
  """Builds the train and eval pipelines of the configured source.

  Args:
    settings: DataSettings (read_settings of the config's data section).
    batch_size: training patches per batch.
    seed: seeds the synthetic scenes, shuffles and crops.
    pad_multiple: eval images are padded to a multiple of this (the model's total stride).
    workdir: where synthetic scenes are cached when settings.cache_dir is empty.
    for_training: False for an evaluation, which lists and checks the evaluation files only (the
      training files are listed, not checked, where the evaluation set is a hash split of them).
    tiled: the evaluation runs in windows (eval.window), so an image over data.eval_max_pixels is
      evaluated in tiles, not refused.

  Returns:
    SegmentationData.
  """
  (train_source, eval_source), train_files = sources_lib.make_sources(settings, seed, workdir, for_training, tiled)
  train = input_pipeline.make_train(
      train_source, batch_size, seed, patch_size=settings.patch_size,
      patches_per_image=settings.patches_per_image, shuffle_buffer=settings.shuffle_buffer,
      ignore_label=settings.ignore_label, augmentation=settings.augment) if for_training else None
  eval_batch_size = settings.eval_batch_size if eval_source.image_size else 1
  evaluation = input_pipeline.make_eval(eval_source, settings.ignore_label, pad_multiple, eval_batch_size)
  logging.info("segmentation data: %s, %s eval images, %d classes", settings.source,
               (f"{train_source.size:,} train images, " if for_training else "") + f"{eval_source.size:,}",
               settings.num_classes)
  report = image_checks.skip_report({"train": list(train_source.skipped) if for_training else [],
                                    "eval": list(eval_source.skipped)})
  return SegmentationData(train=train, eval=evaluation, num_classes=settings.num_classes,
                          class_names=class_names(settings), ignore_label=settings.ignore_label,
                          num_eval_images=eval_source.size,
                          num_train_images=train_source.size if for_training else 0,
                          train_files=train_files, data_report=report)


def class_names(settings):
  """data.class_names; else the source's: synthetic, a VOC root's class_names.txt, VOC's 21; else None."""
  if settings.class_names:
    return settings.class_names
  if settings.source == "synthetic":
    return synthetic.CLASS_NAMES[:settings.num_classes]
  if settings.source == "voc":
    path = os.path.join(settings.voc_root, VOC_CLASS_NAMES_FILE)
    if os.path.exists(path):
      return class_labels.read_class_names(path, settings.num_classes)
    if settings.num_classes == len(VOC_CLASS_NAMES):
      return VOC_CLASS_NAMES
  return None
