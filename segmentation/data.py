"""Segmentation inputs: synthetic scenes, image/mask folders, Pascal VOC, TFRecords and .npy patches.

Every source becomes the same two pipelines:
  train: endless, shuffled with the seed; random patch_size x patch_size crops
    of image and mask together, several per image, cut inside tf.data;
    yields (uint8 images [B, p, p, 3], int32 labels [B, p, p]).
  eval: whole images in order, padded at the bottom and right to a multiple of
    the model's stride (images with 0, labels with the ignore label); batches
    of eval_batch_size when all images have the same size, else of one image.

Images stay uint8: the model normalizes them in its first layer, so that the
exported SavedModel takes uint8 images too.

Files are checked up front (every image and mask, or every TFRecord, decoded
with TensorFlow's decoders in a thread pool, masks also read with PIL for their
palette), so that a bad file is named before training starts, or skipped and
counted in the data report with data.skip_bad_files. Pipelines read from files
only, so no array becomes a graph constant and the train iterator can be
checkpointed.

This module is the one reader of the config's data section: it checks its values and hands
plain values to the readers and checks of common/data.
"""
import collections
import dataclasses
import os

from absl import logging
import tensorflow as tf

from common.contract.errors import ConfigError
from common.contract.errors import DataError
from common.data import class_labels
from common.data import class_masks
from common.data import image_checks
from common.data import listing
from common.data import npy
from common.data import pipeline
from common.data import sources
from common.data import text_inputs
from common.data import tfrecords
from segmentation import synthetic

SOURCES = ("synthetic", "folder", "voc", "tfrecord", "npy")
MASK_EXTENSION = ".png"
VOC_CLASS_NAMES = (
    "background", "aeroplane", "bicycle", "bird", "boat", "bottle", "bus", "car", "cat", "chair", "cow",
    "diningtable", "dog", "horse", "motorbike", "person", "pottedplant", "sheep", "sofa", "train",
    "tvmonitor")
VOC_SPLITS = ("train", "val")
# Optional, in a VOC root: one class name per line, class 0 first (VOC's own 21 names are known).
VOC_CLASS_NAMES_FILE = "class_names.txt"


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


# A source in a uniform shape: read(seed) gives (uint8 image [h, w, 3], uint8
# mask [h, w]), shuffled and endless with a seed, in order and once with None.
# size is the number of images; image_size is (h, w) when every image has it,
# else None; skipped names what the check skipped.
_Source = collections.namedtuple("_Source", ["read", "size", "image_size", "skipped"], defaults=[()])


def make_datasets(data_cfg, batch_size, seed, pad_multiple, workdir=None, for_training=True):
  """Builds the train and eval pipelines of the configured source.

  Args:
    data_cfg: the config's `data` section (configs/segmentation.py).
    batch_size: training patches per batch.
    seed: seeds the synthetic scenes, shuffles and crops.
    pad_multiple: eval images are padded to a multiple of this (the model's total stride).
    workdir: where synthetic scenes are cached when data_cfg.cache_dir is empty.
    for_training: False for an evaluation, which lists and checks the evaluation files only (the
      training files are listed, not checked, where the evaluation set is a hash split of them).

  Returns:
    SegmentationData.
  """
  _check_config(data_cfg)
  (train_source, eval_source), train_files = _make_sources(data_cfg, seed, workdir, for_training)
  train = _make_train(train_source, data_cfg, batch_size, seed) if for_training else None
  eval_batch_size = data_cfg.eval_batch_size if eval_source.image_size else 1
  evaluation = _make_eval(eval_source, data_cfg.ignore_label, pad_multiple, eval_batch_size)
  logging.info("segmentation data: %s, %s eval images, %d classes", data_cfg.source,
               (f"{train_source.size:,} train images, " if for_training else "") + f"{eval_source.size:,}",
               data_cfg.num_classes)
  report = image_checks.skip_report({"train": list(train_source.skipped) if for_training else [],
                                    "eval": list(eval_source.skipped)})
  return SegmentationData(train=train, eval=evaluation, num_classes=data_cfg.num_classes,
                          class_names=class_names(data_cfg), ignore_label=data_cfg.ignore_label,
                          num_eval_images=eval_source.size,
                          num_train_images=train_source.size if for_training else 0,
                          train_files=train_files, data_report=report)


def _check_config(cfg):
  if cfg.source not in SOURCES:
    raise ConfigError(f"data.source '{cfg.source}' is unknown; choose one of {', '.join(SOURCES)}")
  if cfg.num_classes < 2:
    raise ConfigError(f"data.num_classes must be >= 2, got {cfg.num_classes}")
  if not cfg.num_classes <= cfg.ignore_label <= 255:
    raise ConfigError(f"data.ignore_label must be in [num_classes, 255] (masks are 8-bit), "
                      f"got {cfg.ignore_label}")
  for key in ("patch_size", "patches_per_image", "shuffle_buffer", "eval_batch_size", "eval_max_pixels"):
    if cfg[key] < 1:
      raise ConfigError(f"data.{key} must be >= 1, got {cfg[key]}")
  if not 0 < cfg.eval_fraction < 1:
    raise ConfigError(f"data.eval_fraction must be in (0, 1), got {cfg.eval_fraction}")
  if cfg.class_names and len(cfg.class_names) != cfg.num_classes:
    raise ConfigError(f"data.class_names has {len(cfg.class_names)} names for {cfg.num_classes} classes")
  text_inputs.check_duplicates_mode(cfg.duplicates)


def class_names(cfg):
  """data.class_names; else the source's: synthetic, a VOC root's class_names.txt, VOC's 21; else None."""
  if cfg.class_names:
    return tuple(cfg.class_names)
  if cfg.source == "synthetic":
    return synthetic.CLASS_NAMES[:cfg.num_classes]
  if cfg.source == "voc":
    path = os.path.join(cfg.voc_root, VOC_CLASS_NAMES_FILE)
    if os.path.exists(path):
      return class_labels.read_class_names(path, cfg.num_classes)
    if cfg.num_classes == len(VOC_CLASS_NAMES):
      return VOC_CLASS_NAMES
  return None


def _make_sources(cfg, seed, workdir, for_training):
  """((train source, eval source), the training (image, mask) files or None) of the configured kind;
  for an evaluation (for_training=False), (None, eval source) and None."""
  if cfg.source == "tfrecord":
    train_pattern = sources.required(cfg.train_pattern, "train_pattern", cfg.source) if for_training else None
    eval_pattern = sources.required(cfg.eval_pattern, "eval_pattern", cfg.source)
    tfrecords.check_image_sizes(eval_pattern, "image/encoded", cfg.eval_max_pixels)  # before decoding
    return ((_tfrecord_source(train_pattern, cfg) if for_training else None),
            _tfrecord_source(eval_pattern, cfg)), None
  if cfg.source == "npy":
    return _npy_sources(cfg, for_training), None
  train, evaluation = _checked_splits(cfg, seed, workdir, for_training)
  if not for_training:
    return (None, _pairs_source(*evaluation)), None
  return (_pairs_source(*train), _pairs_source(*evaluation)), train[0]


# Sources of image and mask files: synthetic scenes, folders, Pascal VOC.


def _checked_splits(cfg, seed, workdir, for_training):
  """[(train pairs, infos, skipped names), (eval pairs, infos, skipped names)], every file checked;
  the first is None for an evaluation."""
  if cfg.source == "synthetic":
    cache_dir = sources.synthetic_cache_dir(cfg.cache_dir, workdir)
    if not 2 <= cfg.num_classes <= len(synthetic.CLASS_NAMES):
      raise ConfigError(f"data.num_classes must be 2..{len(synthetic.CLASS_NAMES)} for synthetic scenes, "
                        f"got {cfg.num_classes}")
    if min(cfg.num_train_images, cfg.num_eval_images, cfg.image_size) < 1:
      raise ConfigError("data.num_train_images, data.num_eval_images and data.image_size must be >= 1")
    folders = synthetic.write_scenes(cache_dir, seed, cfg.image_size, cfg.num_train_images,
                                     cfg.num_eval_images, cfg.num_classes)
    splits = [list_folder_pairs(*folders[split]) for split in ("train", "eval")]
  elif cfg.source == "voc":
    root = sources.required(cfg.voc_root, "voc_root", cfg.source)
    images_dir, masks_dir, train_file = voc_paths(root, cfg.train_split or VOC_SPLITS[0])
    eval_file = voc_paths(root, cfg.eval_split or VOC_SPLITS[1])[2]
    splits = _split_file_pairs(images_dir, masks_dir, train_file, eval_file, cfg.duplicates, for_training)
  else:
    splits = _folder_splits(cfg, for_training)
  checked = [class_masks.checked_pairs(pairs, cfg.num_classes, cfg.ignore_label, cfg.skip_bad_files)
             if for_training or split == 1 else None for split, pairs in enumerate(splits)]
  for (image_path, _), info in zip(*checked[1][:2]):
    image_checks.check_eval_size(image_path, (info.height, info.width), cfg.eval_max_pixels)
  return checked


def _folder_splits(cfg, for_training):
  images_dir = sources.required(cfg.images_dir, "images_dir", cfg.source)
  masks_dir = sources.required(cfg.masks_dir, "masks_dir", cfg.source)
  if bool(cfg.train_split) != bool(cfg.eval_split):
    raise ConfigError("set both data.train_split and data.eval_split (files of image ids), or neither")
  if cfg.train_split:
    return _split_file_pairs(images_dir, masks_dir, cfg.train_split, cfg.eval_split, cfg.duplicates,
                             for_training)
  pairs = list_folder_pairs(images_dir, masks_dir)
  if len(pairs) < 2:
    raise DataError(f"{pairs[0][0]}: one image cannot be split into train and eval; "
                    "add images or set data.train_split and data.eval_split")
  return sources.split_by_hash(pairs, cfg.eval_fraction, path_fn=lambda pair: pair[0])


def voc_paths(voc_root, split):
  """(images_dir, masks_dir, split file) of a Pascal VOC 2012 layout."""
  return (os.path.join(voc_root, "JPEGImages"), os.path.join(voc_root, "SegmentationClass"),
          os.path.join(voc_root, "ImageSets", "Segmentation", f"{split}.txt"))


def read_split_file(path, duplicates="error"):
  """{image id: line number}: the first word of each line (Pascal VOC's ImageSets format).

  An id listed twice is a DataError, or with duplicates="warn" a warning.
  """
  entries = [(line.split()[0], None, n) for n, line in text_inputs.read_text_lines(path, "split file")]
  if not entries:
    raise DataError(f"{path}: split file lists no image ids")
  return {image_id: n for image_id, _, n in text_inputs.first_entries(entries, path, "image id", duplicates)}


def _split_file_pairs(images_dir, masks_dir, train_file, eval_file, duplicates, for_training):
  """split_file_pairs; for an evaluation, [None, the eval file's pairs] (the train file unread)."""
  if for_training:
    return split_file_pairs(images_dir, masks_dir, train_file, eval_file, duplicates)
  return [None, list_folder_pairs(images_dir, masks_dir, eval_file, duplicates)]


def split_file_pairs(images_dir, masks_dir, train_file, eval_file, duplicates="error"):
  """[train pairs, eval pairs] of the ids of two split files; an id in both is reported (data.duplicates)."""
  train_ids, eval_ids = (read_split_file(path, duplicates) for path in (train_file, eval_file))
  text_inputs.check_overlap({i: f"{train_file}:{n}" for i, n in train_ids.items()},
                            {i: f"{eval_file}:{n}" for i, n in eval_ids.items()}, "image id", duplicates)
  images = _list_images(images_dir)
  return [_pairs_of_ids(images, images_dir, masks_dir, ids, path)
          for ids, path in ((train_ids, train_file), (eval_ids, eval_file))]


def list_folder_pairs(images_dir, masks_dir, split_file=None, duplicates="error"):
  """Sorted (image path, mask path) pairs; masks are <masks_dir>/<image name>.png.

  Args:
    images_dir: the images, with any extension of common/data/listing.IMAGE_EXTENSIONS.
    masks_dir: PNG masks of class ids (or palette PNGs whose indices are class ids).
    split_file: optional file of image ids (names without extension); None takes every image.
    duplicates: what an id listed twice in split_file is: "error" or "warn".
  """
  images = _list_images(images_dir)
  ids = {image_id: None for image_id in sorted(images)} if split_file is None else read_split_file(
      split_file, duplicates)
  return _pairs_of_ids(images, images_dir, masks_dir, ids, split_file)


def _list_images(images_dir):
  """{image id: path} of the images of a folder."""
  images = {}
  for path in listing.list_files(images_dir, listing.IMAGE_EXTENSIONS):
    image_id = os.path.splitext(os.path.basename(path))[0]
    if image_id in images:
      raise DataError(f"{images_dir}: two images are named {image_id} ({images[image_id]}, {path})")
    images[image_id] = path
  return images


def _pairs_of_ids(images, images_dir, masks_dir, ids, split_file):
  """(image, mask) of each id of {id: line number in split_file (None without one)}."""
  pairs = []
  for image_id, line in ids.items():
    if image_id not in images:
      raise DataError(f"{split_file}:{line}: image id '{image_id}' has no image in {images_dir}")
    mask = os.path.join(masks_dir, image_id + MASK_EXTENSION)
    if not os.path.lexists(mask):  # a link to nothing passes, for check_pair to name it
      raise DataError(f"image {images[image_id]} has no mask {mask}")
    pairs.append((images[image_id], mask))
  return pairs


def _pairs_source(pairs, infos, skipped=()):
  decode_mask = class_masks.mask_decoder(pairs, infos)
  sizes = {(info.height, info.width) for info in infos}

  def load(image_path, mask_path):
    return image_checks.decode_image(tf.io.read_file(image_path), 3), decode_mask(tf.io.read_file(mask_path))

  columns = tuple(list(column) for column in zip(*pairs))
  return _Source(lambda seed: pipeline.read_files(columns, load, seed), len(pairs),
                 sizes.pop() if len(sizes) == 1 else None, skipped)


# TFRecord shards.


def _tfrecord_source(pattern, cfg):
  """Records of scripts/convert_to_tfrecord.py, every one parsed and decoded up front."""
  sizes, skip = class_masks.check_mask_records(pattern, cfg.num_classes, cfg.ignore_label, cfg.skip_bad_files)

  def read(seed):
    records = tfrecords.read_tfrecords(pattern, shuffle_seed=seed, repeat=seed is not None, skip=skip)
    return records.map(class_masks.parse_mask_record, num_parallel_calls=tf.data.AUTOTUNE)

  distinct = set(sizes)
  return _Source(read, len(sizes), distinct.pop() if len(distinct) == 1 else None,
                 tfrecords.tfrecord_names(skip))


# .npy arrays of patches [N, h, w, 3] and labels [N, h, w].


def _npy_sources(cfg, for_training):
  """(train source, eval source); the first is None for an evaluation."""
  if bool(cfg.eval_images) != bool(cfg.eval_labels):
    raise ConfigError("set both data.eval_images and data.eval_labels, or neither")
  train = _check_npy_pair(cfg, "train") if for_training or not cfg.eval_images else None
  if cfg.eval_images:
    eval_images, eval_labels = _check_npy_pair(cfg, "eval")
    evaluation = _npy_source(eval_images, eval_labels, cfg.npy_pixel_max, 0, eval_images.shape[0])
    num_train = train[0].shape[0] if train else 0
  else:
    # Without eval arrays the last eval_fraction of the train records is held out.
    total = train[0].shape[0]
    num_train = total - min(max(int(round(total * cfg.eval_fraction)), 1), total - 1)
    evaluation = _npy_source(*train, cfg.npy_pixel_max, num_train, total)
  return (_npy_source(*train, cfg.npy_pixel_max, 0, num_train) if for_training else None), evaluation


def _check_npy_pair(cfg, split):
  """Reads and checks the headers and values of one split's arrays."""
  images = npy.read_npy_header(sources.required(cfg[f"{split}_images"], f"{split}_images", cfg.source))
  labels = npy.read_npy_header(sources.required(cfg[f"{split}_labels"], f"{split}_labels", cfg.source))
  if len(images.shape) != 4 or images.shape[-1] != 3:
    raise DataError(f"{images.path}: images must be [N, height, width, 3], got {list(images.shape)}")
  label_shape = labels.shape[:3] if len(labels.shape) == 4 and labels.shape[3] == 1 else labels.shape
  if label_shape != images.shape[:3]:
    raise DataError(f"{labels.path}: labels are {list(labels.shape)}, images {images.path} are "
                    f"{list(images.shape)}; expected [N, height, width]")
  npy.check_npy_pixels(images, cfg.npy_pixel_max)
  npy.check_npy_labels(labels, cfg.num_classes, cfg.ignore_label)
  return images, labels


def _npy_source(images, labels, pixel_max, start, stop):
  """Records start..stop-1 of the arrays; float images are scaled to uint8 as the model reads uint8."""
  height, width = images.shape[1:3]
  scale = 255.0 / pixel_max

  def convert(image, label):
    if image.dtype != tf.uint8:
      image = tf.cast(tf.round(tf.clip_by_value(tf.cast(image, tf.float32) * scale, 0, 255)), tf.uint8)
    return image, tf.cast(tf.reshape(label, [height, width]), tf.uint8)

  def read(seed):
    records = npy.read_npy_pair(images, labels, start, stop, seed)
    return records.map(convert, num_parallel_calls=tf.data.AUTOTUNE)

  return _Source(read, stop - start, (height, width))


# The pipelines every source shares.


def _make_train(source, cfg, batch_size, seed):
  patch_size = cfg.patch_size
  # Records that are patches already need no more than one (identity) crop.
  count = 1 if source.image_size == (patch_size, patch_size) else cfg.patches_per_image

  def crop(index, example):
    image, mask = example
    element_seed = tf.stack([tf.cast(seed, tf.int64), index])
    return pipeline.sample_patches(image, mask, patch_size, count, element_seed, cfg.ignore_label)

  def to_int32(images, masks):
    return images, tf.cast(masks, tf.int32)

  patches = (source.read(seed)
             .enumerate()
             .map(crop, num_parallel_calls=tf.data.AUTOTUNE)
             .unbatch())
  return (patches.shuffle(cfg.shuffle_buffer, seed=seed)
          .batch(batch_size, drop_remainder=True)
          .map(to_int32)
          .prefetch(tf.data.AUTOTUNE))


def _make_eval(source, ignore_label, pad_multiple, batch_size):
  def prepare(image, mask):
    return (pipeline.pad_to_multiple(image, pad_multiple),
            tf.cast(pipeline.pad_to_multiple(mask, pad_multiple, ignore_label), tf.int32))

  return (source.read(None)
          .map(prepare, num_parallel_calls=tf.data.AUTOTUNE)
          .batch(batch_size)
          .prefetch(tf.data.AUTOTUNE))
