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
"""
import collections
import dataclasses
import io
import os

from absl import logging
import numpy as np
from PIL import Image
import tensorflow as tf

from common.data import image_checks
from common.data import listing
from common.data import npy
from common.data import pipeline
from common.data import sources
from common.data import text_inputs
from common.data import tfrecords
from common.contract.errors import ConfigError
from common.contract.errors import DataError
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

# Keys of the TFRecords written by scripts/convert_to_tfrecord.py (DeepLab's names).
TFRECORD_FEATURES = {
    "image/encoded": tf.io.FixedLenFeature([], tf.string),
    "image/segmentation/class/encoded": tf.io.FixedLenFeature([], tf.string),
    "image/height": tf.io.FixedLenFeature([], tf.int64, default_value=0),
    "image/width": tf.io.FixedLenFeature([], tf.int64, default_value=0),
}


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
    data_report: what the checks skipped (common/data.skip_report), for metrics.json.
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

# What the up-front check learns about an image and its mask.
PairInfo = collections.namedtuple("PairInfo", ["image_format", "height", "width", "mask_mode", "palette",
                                               "class_ids"])


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
      return read_class_names(path, cfg.num_classes)
    if cfg.num_classes == len(VOC_CLASS_NAMES):
      return VOC_CLASS_NAMES
  return None


def read_class_names(path, num_classes):
  """The names of a file of one class name per line, in class id order (0 first)."""
  names = tuple(line.strip() for _, line in text_inputs.read_text_lines(path, "class names file"))
  if len(names) != num_classes:
    raise DataError(f"{path}: {len(names)} class names for data.num_classes={num_classes}; "
                    "give one name per class, one per line")
  return names


def _make_sources(cfg, seed, workdir, for_training):
  """((train source, eval source), the training (image, mask) files or None) of the configured kind;
  for an evaluation (for_training=False), (None, eval source) and None."""
  if cfg.source == "tfrecord":
    train_pattern = sources.required(cfg.train_pattern, "train_pattern", cfg.source) if for_training else None
    eval_pattern = sources.required(cfg.eval_pattern, "eval_pattern", cfg.source)
    _check_tfrecord_eval_sizes(eval_pattern, cfg.eval_max_pixels)  # before the check decodes them
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
  checked = [_checked_pairs(pairs, cfg.num_classes, cfg.ignore_label, cfg.skip_bad_files)
             if for_training or split == 1 else None for split, pairs in enumerate(splits)]
  for (image_path, _), info in zip(*checked[1][:2]):
    check_eval_size(image_path, (info.height, info.width), cfg.eval_max_pixels)
  return checked


def check_eval_size(where, size, max_pixels, setting="data.eval_max_pixels"):
  """Refuses an image of (height, width) `size` over `max_pixels`, before any training or loading.

  Evaluation and prediction run on whole images, whose activations grow with their pixels (about
  300 bytes a pixel for the default network: 19 GB for 8000x8000).
  """
  height, width = size
  if height * width > max_pixels:
    raise DataError(f"{where}: {height}x{width} is {height * width:,} pixels, more than "
                    f"{setting}={max_pixels:,}, the bound on the memory of one whole image; resize it "
                    f"or raise {setting}")


def header_size(where, image):
  """(height, width) from the header of an image (a path or a file of its bytes), which PIL reads
  without decoding the pixels; None when it has no readable header (the decode check names it)."""
  try:
    with Image.open(image) as opened:
      return opened.height, opened.width
  except Image.DecompressionBombError as e:  # PIL's own bound, far above any evaluation's
    raise DataError(f"{where}: {e}") from None
  except Exception:  # pylint: disable=broad-except  # PIL raises many types for broken files
    return None


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
    images_dir: the images, with any extension of common/data.IMAGE_EXTENSIONS.
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


def check_pair(pair, num_classes, ignore_label):
  """Decodes an image and its mask as the pipeline does and checks that they agree; returns a PairInfo.

  The mask is read with PIL too, for its palette and the indices of a palette mask.
  """
  image_path, mask_path = pair
  image_format, _, (width, height) = image_checks.check_image(image_path)
  orientation = image_checks.exif_orientation(image_path) if image_format == "JPEG" else 1
  if orientation != 1:
    # Refused rather than turned: a mask drawn on the photo as shown would not match the stored
    # pixels that the pipeline decodes, and one drawn on the stored pixels would no longer match
    # a turned photo; only the user knows which it is.
    raise DataError(f"{image_path}: EXIF orientation {orientation} (viewers show it turned or "
                    "mirrored, TensorFlow decodes it as stored), so its mask may not match its pixels; "
                    "save it with its pixels as shown and orientation 1 (PIL: ImageOps.exif_transpose)")
  contents = listing.read_file(mask_path)
  with image_checks.decoded_image(mask_path, contents) as mask:
    mask_format, mask_mode = mask.format, mask.mode
    palette = mask.getpalette() if mask_mode == "P" else None
    ids = np.asarray(mask)
  if mask_format != "PNG" or mask_mode not in ("L", "P"):
    raise DataError(f"{mask_path}: masks must be 8-bit grayscale or palette PNGs of class ids, "
                    f"got a {mask_format} of mode {mask_mode}")
  # The channels of _mask_decoder's decode_png: class ids, or the colors of a palette.
  image_checks.tf_decoded(mask_path, tf.io.decode_png, contents, channels=1 if mask_mode == "L" else 3)
  if ids.shape != (height, width):
    raise DataError(f"mask {mask_path} is {ids.shape[0]}x{ids.shape[1]}, "
                    f"image {image_path} is {height}x{width}")
  class_ids = np.flatnonzero(np.bincount(ids.ravel(), minlength=256))
  _check_class_ids(mask_path, class_ids, num_classes, ignore_label)
  return PairInfo(image_format, height, width, mask_mode, tuple(palette) if palette else None,
                  tuple(int(c) for c in class_ids))


def _check_class_ids(where, class_ids, num_classes, ignore_label):
  bad = [c for c in class_ids if c >= num_classes and c != ignore_label]
  if bad:
    raise DataError(f"{where}: class id {bad[0]} >= data.num_classes={num_classes} "
                    f"and not data.ignore_label={ignore_label}")


def check_pairs(pairs, num_classes, ignore_label, skip_bad_files):
  """Checks every pair up front; returns (good pairs, their PairInfos)."""
  return _checked_pairs(pairs, num_classes, ignore_label, skip_bad_files)[:2]


def _checked_pairs(pairs, num_classes, ignore_label, skip_bad_files):
  """(good pairs, their PairInfos, the names of the skipped ones)."""
  good, infos, skipped = image_checks.check_files(
      pairs, lambda pair: check_pair(pair, num_classes, ignore_label), skip_bad_files,
      name_fn=lambda pair: os.path.basename(pair[0]))
  if not good:
    raise DataError(f"no image of {os.path.dirname(pairs[0][0])} decodes")
  return good, infos, skipped


def _pairs_source(pairs, infos, skipped=()):
  decode_mask = _mask_decoder(pairs, infos)
  sizes = {(info.height, info.width) for info in infos}

  def load(image_path, mask_path):
    return image_checks.decode_image(tf.io.read_file(image_path), 3), decode_mask(tf.io.read_file(mask_path))

  def read(seed):
    files = tf.data.Dataset.from_tensor_slices(tuple(list(column) for column in zip(*pairs)))
    if seed is not None:
      files = files.shuffle(len(pairs), seed=seed, reshuffle_each_iteration=True).repeat()
    return files.map(load, num_parallel_calls=tf.data.AUTOTUNE)

  return _Source(read, len(pairs), sizes.pop() if len(sizes) == 1 else None, skipped)


def _mask_decoder(pairs, infos):
  """PNG bytes -> uint8 class ids [h, w].

  tf.io.decode_png expands palette PNGs to RGB, so palette masks (VOC's
  SegmentationClass) are mapped back from colors to indices with a lookup
  sorted by color; the check has made sure the palette is the same in every
  mask and that the colors of the indices in use are distinct.
  """
  modes = {info.mask_mode for info in infos}
  if modes == {"L"}:
    return lambda png: tf.io.decode_png(png, channels=1)[..., 0]
  if len(modes) > 1:
    first = {}
    for pair, info in zip(pairs, infos):
      first.setdefault(info.mask_mode, pair[1])
    raise DataError(f"masks mix palette and grayscale PNGs ({first['P']} is palette, {first['L']} is grayscale)")
  colors, ids = _palette_lookup(pairs, infos)

  def decode(png):
    rgb = tf.cast(tf.io.decode_png(png, channels=3), tf.int32)
    keys = rgb[..., 0] * 65536 + rgb[..., 1] * 256 + rgb[..., 2]
    position = tf.searchsorted(colors, tf.reshape(keys, [-1]))
    labels = tf.gather(ids, tf.minimum(position, len(ids) - 1))
    return tf.reshape(labels, tf.shape(keys))

  return decode


def _palette_lookup(pairs, infos):
  """(sorted int32 color keys, uint8 ids) of the palette indices used by any mask."""
  palette = infos[0].palette
  used = set()
  for (_, mask_path), info in zip(pairs, infos):
    if info.palette != palette:
      raise DataError(f"{mask_path}: its palette differs from that of {pairs[0][1]}; "
                      "convert the masks to grayscale PNGs of class ids")
    used.update(info.class_ids)
  by_color = {}
  for index in sorted(used):
    if 3 * index + 2 >= len(palette):
      raise DataError(f"{pairs[0][1]}: index {index} is outside the mask's palette")
    r, g, b = palette[3 * index:3 * index + 3]
    key = (r << 16) | (g << 8) | b
    if key in by_color:
      raise DataError(f"{pairs[0][1]}: palette indices {by_color[key]} and {index} have the same color; "
                      "convert the masks to grayscale PNGs of class ids")
    by_color[key] = index
  keys = sorted(by_color)
  return tf.constant(keys, tf.int32), tf.constant([by_color[k] for k in keys], tf.uint8)


# TFRecord shards.


def _check_tfrecord_eval_sizes(pattern, max_pixels):
  """Refuses an evaluation record whose image is over max_pixels from its header, before the
  up-front check decodes it; records that do not parse are left to that check to name."""
  encoded = {"image/encoded": TFRECORD_FEATURES["image/encoded"]}
  for path in tfrecords.list_tfrecord_files(pattern):
    records = (tf.data.TFRecordDataset(path).enumerate()
               .map(lambda index, record: (index, tf.io.parse_single_example(record, encoded)))
               .ignore_errors())
    for index, features in records.as_numpy_iterator():
      where = f"{path}: record {index}"
      size = header_size(where, io.BytesIO(features["image/encoded"]))
      if size:
        check_eval_size(where, size, max_pixels)


def _tfrecord_source(pattern, cfg):
  """Records of scripts/convert_to_tfrecord.py, every one parsed and decoded up front."""

  def parse(record):
    features = tf.io.parse_single_example(record, TFRECORD_FEATURES)
    image = image_checks.decode_image(features["image/encoded"], 3)
    mask = tf.io.decode_png(features["image/segmentation/class/encoded"], channels=1)[..., 0]
    return image, mask

  def record_values(record):
    """What check tests: the sizes of image and mask, and the mask's pixels per class id."""
    features = tfrecords.parse_example(record, TFRECORD_FEATURES)
    image = image_checks.tf_decoded("image/encoded", image_checks.decode_image, features["image/encoded"], 3)
    mask = image_checks.tf_decoded("image/segmentation/class/encoded", tf.io.decode_png,
                                  features["image/segmentation/class/encoded"], channels=1)[..., 0]
    return (tf.shape(image)[:2], tf.shape(mask),
            tf.math.bincount(tf.cast(mask, tf.int32), minlength=256, maxlength=256))

  def check(image_size, mask_size, pixels_per_id):
    if tuple(image_size) != tuple(mask_size):
      raise DataError(f"the mask is {mask_size[0]}x{mask_size[1]}, the image {image_size[0]}x{image_size[1]}")
    _check_class_ids("image/segmentation/class/encoded", np.flatnonzero(pixels_per_id), cfg.num_classes,
                     cfg.ignore_label)
    return int(mask_size[0]), int(mask_size[1])

  sizes, skip = tfrecords.check_tfrecords(pattern, record_values, check, cfg.skip_bad_files)

  def read(seed):
    records = tfrecords.read_tfrecords(pattern, shuffle_seed=seed, repeat=seed is not None, skip=skip)
    return records.map(parse, num_parallel_calls=tf.data.AUTOTUNE)

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
  low, high = npy.check_npy_finite(images)
  if low < 0 or high > cfg.npy_pixel_max:
    raise DataError(f"{images.path}: values span [{low:g}, {high:g}], outside [0, data.npy_pixel_max="
                    f"{cfg.npy_pixel_max:g}]; store pixels in [0, 255] or [0, 1] and set data.npy_pixel_max")
  if images.dtype != np.uint8 and cfg.npy_pixel_max == 255 and high <= 1:
    logging.warning("%s: values lie in [0, 1]; if that is the pixel range set data.npy_pixel_max=1",
                    images.path)
  npy.check_npy_labels(labels, cfg.num_classes, cfg.ignore_label)
  return images, labels


def _npy_source(images, labels, pixel_max, start, stop):
  """Records start..stop-1 of the arrays; float images are scaled to uint8 as the model reads uint8."""
  height, width = images.shape[1:3]
  scale = 255.0 / pixel_max

  def block(a, b):
    return tf.data.Dataset.zip((npy.read_npy_records(images, a, b),
                                npy.read_npy_records(labels, a, b)))

  def convert(image, label):
    if image.dtype != tf.uint8:
      image = tf.cast(tf.round(tf.clip_by_value(tf.cast(image, tf.float32) * scale, 0, 255)), tf.uint8)
    return image, tf.cast(tf.reshape(label, [height, width]), tf.uint8)

  def read(seed):
    if seed is None:
      records = block(start, stop)
    else:
      records = npy.read_shuffled_blocks(
          stop - start, lambda a, b: block(start + a, start + b), seed=seed)
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
    return sample_patches(image, mask, patch_size, count, element_seed, cfg.ignore_label)

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


def sample_patches(image, mask, patch_size, count, seed, ignore_label):
  """`count` random patch_size crops at the same places of an image and its mask.

  Args:
    image: uint8 [h, w, 3]; smaller images are padded with 0.
    mask: uint8 [h, w]; padded with ignore_label.
    patch_size: crop height and width.
    count: crops.
    seed: int64 [2], for tf.random.stateless_uniform.
    ignore_label: mask value of padding.

  Returns:
    (uint8 [count, p, p, 3], uint8 [count, p, p]).
  """
  image, mask = _pad_to_at_least(image, mask, patch_size, ignore_label)
  # The mask travels as a fourth channel, so both are cut by the same gathers.
  stacked = tf.concat([image, mask[..., None]], axis=-1)
  shape = tf.shape(stacked)
  room = tf.cast(shape[:2] - patch_size + 1, tf.float32)
  offsets = tf.cast(tf.random.stateless_uniform([count, 2], seed) * room, tf.int32)
  offsets = tf.minimum(offsets, shape[:2] - patch_size)
  steps = tf.range(patch_size)
  rows = offsets[:, :1] + steps  # [count, p]
  cols = offsets[:, 1:] + steps
  patches = tf.gather(stacked, rows)  # [count, p, w, 4]
  patches = tf.gather(patches, cols, axis=2, batch_dims=1)  # [count, p, p, 4]
  patches = tf.ensure_shape(patches, [count, patch_size, patch_size, 4])
  return patches[..., :3], patches[..., 3]


def _pad_to_at_least(image, mask, size, ignore_label):
  shape = tf.shape(mask)
  pad_h, pad_w = tf.maximum(size - shape[0], 0), tf.maximum(size - shape[1], 0)
  image = tf.pad(image, [[0, pad_h], [0, pad_w], [0, 0]])
  mask = tf.pad(mask, [[0, pad_h], [0, pad_w]], constant_values=ignore_label)
  return image, mask


def _make_eval(source, ignore_label, pad_multiple, batch_size):
  def prepare(image, mask):
    return (pipeline.pad_to_multiple(image, pad_multiple),
            tf.cast(pipeline.pad_to_multiple(mask, pad_multiple, ignore_label), tf.int32))

  return (source.read(None)
          .map(prepare, num_parallel_calls=tf.data.AUTOTUNE)
          .batch(batch_size)
          .prefetch(tf.data.AUTOTUNE))


def read_image_file(path):
  """uint8 [h, w, 3] of an image file, for prediction; DataError if it does not decode."""
  image_checks.check_image(path)
  return image_checks.decode_image(tf.io.read_file(path), 3)

