"""Segmentation's sources, each an input_pipeline.Source with every file or record checked up front:
synthetic scenes, image and mask folders, Pascal VOC (pairs of files), TFRecord shards and .npy arrays.

The functions take data.py's SourceSettings (read and checked at start-up) and hand plain values to
the readers and checks of common/data.
"""
import os

import tensorflow as tf

from common.contract.errors import ConfigError
from common.contract.errors import DataError
from common.data import image_checks
from common.data import listing
from common.data import npy
from common.data import pipeline
from common.data import sources
from common.data import text_inputs
from common.data import tfds_sets
from common.data import tfrecords
from segmentation import class_masks
from segmentation import inference
from segmentation import input_pipeline
from segmentation import synthetic

MASK_EXTENSION = ".png"
VOC_SPLITS = ("train", "val")
# TFDS's Oxford-IIIT pets: trimaps of 1 pet, 2 background, 3 the border between, read as background 0,
# pet 1 and the border ignored (its pixels are neither; the TensorFlow segmentation tutorial's classes).
OXFORD_PETS = "oxford_iiit_pet"
OXFORD_PETS_CLASSES = ("background", "pet")
_TRIMAP_CLASSES = {1: 1, 2: 0}


def make_sources(settings, seed, workdir, for_training, max_eval_pixels=None, shuffle_buffer=1):
  """((train source, eval source), the training (image, mask) files or None) of the SourceSettings;
  for an evaluation (for_training=False), (None, eval source) and None. An evaluation image over
  max_eval_pixels (data.eval_max_pixels; None: no bound, the evaluation is tiled) is refused.
  shuffle_buffer: the examples a TFDS split is shuffled in (data.shuffle_buffer)."""
  if settings.source == "tfds":
    return tfds_sources(settings, for_training, shuffle_buffer), None
  if settings.source == "tfrecord":
    return tfrecord_sources(settings, for_training, max_eval_pixels), None
  if settings.source == "npy":
    return npy_sources(settings, for_training), None
  train, evaluation = _checked_splits(settings, seed, workdir, for_training, max_eval_pixels)
  if not for_training:
    return (None, _pairs_source(*evaluation)), None
  return (_pairs_source(*train), _pairs_source(*evaluation)), train[0]


# Sources of image and mask files: synthetic scenes, folders, Pascal VOC.


def _checked_splits(settings, seed, workdir, for_training, max_eval_pixels):
  """[(train pairs, infos, skipped names), (eval pairs, infos, skipped names)], every file checked;
  the first is None for an evaluation."""
  if settings.source == "synthetic":
    folders = synthetic.write_scenes(sources.synthetic_cache_dir(settings.cache_dir, workdir), seed,
                                     settings.image_size, settings.num_train_images, settings.num_eval_images,
                                     settings.num_classes)
    splits = [list_folder_pairs(*folders[split]) for split in ("train", "eval")]
  elif settings.source == "voc":
    images_dir, masks_dir, train_file = voc_paths(settings.voc_root, settings.train_split or VOC_SPLITS[0])
    eval_file = voc_paths(settings.voc_root, settings.eval_split or VOC_SPLITS[1])[2]
    splits = _split_file_pairs(images_dir, masks_dir, train_file, eval_file, settings.duplicates,
                               for_training)
  else:
    splits = _folder_splits(settings, for_training)
  checked = [class_masks.checked_pairs(pairs, settings.num_classes, settings.ignore_label,
                                       settings.skip_bad_files)
             if for_training or split == 1 else None for split, pairs in enumerate(splits)]
  if max_eval_pixels:
    for (image_path, _), info in zip(*checked[1][:2]):
      image_checks.check_eval_size(image_path, (info.height, info.width), max_eval_pixels,
                                   tiles_key=inference.WINDOW_KEY)
  return checked


def _folder_splits(settings, for_training):
  if settings.train_split:
    return _split_file_pairs(settings.images_dir, settings.masks_dir, settings.train_split,
                             settings.eval_split, settings.duplicates, for_training)
  pairs = list_folder_pairs(settings.images_dir, settings.masks_dir)
  if len(pairs) < 2:
    raise DataError(f"{pairs[0][0]}: one image cannot be split into train and eval; "
                    "add images or set data.train_split and data.eval_split")
  return sources.split_by_hash(pairs, settings.eval_fraction, path_fn=lambda pair: pair[0])


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
  return input_pipeline.Source(lambda seed: pipeline.read_files(columns, load, seed), len(pairs),
                               sizes.pop() if len(sizes) == 1 else None, skipped)


# TFRecord shards.


def tfrecord_sources(settings, for_training, max_eval_pixels=None):
  """(train source, eval source) of data.train_pattern and data.eval_pattern; the first is None for
  an evaluation. max_eval_pixels: as make_sources'."""
  if max_eval_pixels:  # before decoding: an image over the bound is named from its header
    tfrecords.check_image_sizes(settings.eval_pattern, "image/encoded", max_eval_pixels,
                                tiles_key=inference.WINDOW_KEY)
  check = (settings.num_classes, settings.ignore_label, settings.skip_bad_files)
  return ((_tfrecord_source(settings.train_pattern, *check) if for_training else None),
          _tfrecord_source(settings.eval_pattern, *check))


def _tfrecord_source(pattern, num_classes, ignore_label, skip_bad_files):
  """Records of scripts/convert_to_tfrecord.py, every one parsed and decoded up front."""
  sizes, skip = class_masks.check_mask_records(pattern, num_classes, ignore_label, skip_bad_files)

  def read(seed):
    records = tfrecords.read_tfrecords(pattern, shuffle_seed=seed, repeat=seed is not None, skip=skip)
    return records.map(class_masks.parse_mask_record, num_parallel_calls=tf.data.AUTOTUNE)

  distinct = set(sizes)
  return input_pipeline.Source(read, len(sizes), distinct.pop() if len(distinct) == 1 else None,
                               tfrecords.tfrecord_names(skip))


# .npy arrays of patches [N, h, w, 3] and labels [N, h, w].


def npy_sources(settings, for_training):
  """(train source, eval source) of data.train_images/labels and data.eval_images/labels; the first
  is None for an evaluation."""
  pixel_max = settings.npy_pixel_max
  check = (pixel_max, settings.num_classes, settings.ignore_label)
  train = (_check_npy_pair(settings.train_images, settings.train_labels, *check)
           if for_training or not settings.eval_images else None)
  if settings.eval_images:
    eval_images, eval_labels = _check_npy_pair(settings.eval_images, settings.eval_labels, *check)
    evaluation = _npy_source(eval_images, eval_labels, pixel_max, 0, eval_images.shape[0])
    num_train = train[0].shape[0] if train else 0
  else:
    # Without eval arrays the last eval_fraction of the train records is held out.
    total = train[0].shape[0]
    num_train = total - min(max(int(round(total * settings.eval_fraction)), 1), total - 1)
    evaluation = _npy_source(*train, pixel_max, num_train, total)
  return (_npy_source(*train, pixel_max, 0, num_train) if for_training else None), evaluation


def _check_npy_pair(images_path, labels_path, pixel_max, num_classes, ignore_label):
  """Reads and checks the headers and values of one split's arrays."""
  images, labels = npy.read_npy_header(images_path), npy.read_npy_header(labels_path)
  if len(images.shape) != 4 or images.shape[-1] != 3:
    raise DataError(f"{images.path}: images must be [N, height, width, 3], got {list(images.shape)}")
  label_shape = labels.shape[:3] if len(labels.shape) == 4 and labels.shape[3] == 1 else labels.shape
  if label_shape != images.shape[:3]:
    raise DataError(f"{labels.path}: labels are {list(labels.shape)}, images {images.path} are "
                    f"{list(images.shape)}; expected [N, height, width]")
  npy.check_npy_pixels(images, pixel_max)
  npy.check_npy_labels(labels, num_classes, ignore_label)
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

  return input_pipeline.Source(read, stop - start, (height, width))


# TensorFlow Datasets (common/data/tfds_sets.py): an image feature and a segmentation_mask feature.


def tfds_sources(settings, for_training, shuffle_buffer):
  """(train source, eval source) of data.tfds_train_split and data.tfds_eval_split; the first is None
  for an evaluation. Masks are class ids, or for oxford_iiit_pet its trimaps as OXFORD_PETS_CLASSES."""
  def check_features(builder):
    tfds_sets.image_feature(builder, "image", 3, "the images")
    tfds_sets.image_feature(builder, "segmentation_mask", 1, "the masks")
    if builder.name == OXFORD_PETS and settings.num_classes != len(OXFORD_PETS_CLASSES):
      raise ConfigError(f"data.num_classes={settings.num_classes}: {OXFORD_PETS}'s trimaps are 2 classes "
                        "(background, pet; the border is ignored); set data.num_classes=2")

  builder, train, evaluation = settings.tfds.open(check_features, for_training)
  ignore = settings.ignore_label
  if builder.name == OXFORD_PETS:
    table = [_TRIMAP_CLASSES.get(value, ignore) for value in range(256)]
  else:  # class ids, as the other sources' masks; a value that is not one is ignored
    table = [value if value < settings.num_classes else ignore for value in range(256)]
  classes = tf.constant(table, tf.uint8)

  def decode(example):
    mask = tf.io.decode_png(example["segmentation_mask"], channels=1)[..., 0]
    return image_checks.decode_image(example["image"], 3), tf.gather(classes, tf.cast(mask, tf.int32))

  def source(split):
    def read(seed):
      examples = split.read(seed, shuffle_buffer, encoded=("image", "segmentation_mask"))
      return examples.map(decode, num_parallel_calls=tf.data.AUTOTUNE)
    return input_pipeline.Source(read, split.num_examples, None, (), split.fingerprint())

  return (source(train) if for_training else None), source(evaluation)
