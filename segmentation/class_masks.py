"""Masks of class ids beside their images: each pair checked up front (sizes, class ids, PNG
mode, palette), and the masks decoded to class ids inside tf.data."""
import collections
import os

import numpy as np
import tensorflow as tf

from common.contract.errors import DataError
from common.data import image_checks
from common.data import listing
from common.data import tfrecords

# Keys of records of an image and its mask, as scripts/convert_to_tfrecord.py writes them (DeepLab's names).
TFRECORD_FEATURES = {
    "image/encoded": tf.io.FixedLenFeature([], tf.string),
    "image/segmentation/class/encoded": tf.io.FixedLenFeature([], tf.string),
    "image/height": tf.io.FixedLenFeature([], tf.int64, default_value=0),
    "image/width": tf.io.FixedLenFeature([], tf.int64, default_value=0),
}


# What the up-front check learns about an image and its mask.
PairInfo = collections.namedtuple("PairInfo", ["image_format", "height", "width", "mask_mode", "palette",
                                               "class_ids"])


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
  # The channels of mask_decoder's decode_png: class ids, or the colors of a palette.
  image_checks.tf_decoded(mask_path, tf.io.decode_png, contents, channels=1 if mask_mode == "L" else 3)
  if ids.shape != (height, width):
    raise DataError(f"mask {mask_path} is {ids.shape[0]}x{ids.shape[1]}, "
                    f"image {image_path} is {height}x{width}")
  class_ids = np.flatnonzero(np.bincount(ids.ravel(), minlength=256))
  check_class_ids(mask_path, class_ids, num_classes, ignore_label)
  return PairInfo(image_format, height, width, mask_mode, tuple(palette) if palette else None,
                  tuple(int(c) for c in class_ids))


def check_class_ids(where, class_ids, num_classes, ignore_label):
  bad = [c for c in class_ids if c >= num_classes and c != ignore_label]
  if bad:
    raise DataError(f"{where}: class id {bad[0]} >= data.num_classes={num_classes} "
                    f"and not data.ignore_label={ignore_label}")


def check_pairs(pairs, num_classes, ignore_label, skip_bad_files):
  """Checks every pair up front; returns (good pairs, their PairInfos)."""
  return checked_pairs(pairs, num_classes, ignore_label, skip_bad_files)[:2]


def checked_pairs(pairs, num_classes, ignore_label, skip_bad_files):
  """(good pairs, their PairInfos, the names of the skipped ones)."""
  good, infos, skipped = image_checks.check_files(
      pairs, lambda pair: check_pair(pair, num_classes, ignore_label), skip_bad_files,
      name_fn=lambda pair: os.path.basename(pair[0]))
  if not good:
    raise DataError(f"no image of {os.path.dirname(pairs[0][0])} decodes")
  return good, infos, skipped


def mask_decoder(pairs, infos):
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


def parse_mask_record(record):
  """A record of TFRECORD_FEATURES -> (uint8 image [h, w, 3], uint8 class ids [h, w])."""
  features = tf.io.parse_single_example(record, TFRECORD_FEATURES)
  image = image_checks.decode_image(features["image/encoded"], 3)
  mask = tf.io.decode_png(features["image/segmentation/class/encoded"], channels=1)[..., 0]
  return image, mask


def check_mask_records(pattern, num_classes, ignore_label, skip_bad_files):
  """Parses and decodes every record of the files once (tfrecords.check_tfrecords): image and mask
  of one size, class ids below num_classes or ignore_label. Returns ((height, width) of every good
  record, the skip list of tfrecords.read_tfrecords)."""

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
    check_class_ids("image/segmentation/class/encoded", np.flatnonzero(pixels_per_id), num_classes,
                    ignore_label)
    return int(mask_size[0]), int(mask_size[1])

  return tfrecords.check_tfrecords(pattern, record_values, check, skip_bad_files)
