"""Segmentation's sources of records, for segmentation/data.py (which lists the image and mask files
of the others): TFRecord shards and .npy arrays, each an input_pipeline.Source, every record checked
up front.

tfrecord_sources and npy_sources take data.py's DataSettings (read and checked at start-up) and hand
plain values to the readers and checks of common/data.
"""
import tensorflow as tf

from common.contract.errors import DataError
from common.data import class_masks
from common.data import npy
from common.data import tfrecords
from segmentation import inference
from segmentation import input_pipeline


def tfrecord_sources(settings, for_training, tiled=False):
  """(train source, eval source) of data.train_pattern and data.eval_pattern; the first is None for
  an evaluation. tiled: evaluated in windows, so no image is too large."""
  if not tiled:  # before decoding: an image over data.eval_max_pixels is named from its header
    tfrecords.check_image_sizes(settings.eval_pattern, "image/encoded", settings.eval_max_pixels,
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
