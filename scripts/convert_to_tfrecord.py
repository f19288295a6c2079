"""Converts segmentation images and masks (a folder, or a Pascal VOC split) to TFRecord shards.

  python scripts/convert_to_tfrecord.py --voc_root=VOCdevkit/VOC2012 --split=train \\
      --num_classes=21 --output_prefix=data/voc-train --num_shards=4
  python scripts/convert_to_tfrecord.py --images_dir=images --masks_dir=masks \\
      [--split_file=train.txt] --num_classes=5 --output_prefix=data/mine-train

then train with --config.data.source=tfrecord
--config.data.train_pattern='data/voc-train-*.tfrecord' (and eval_pattern).

Every image and mask is decoded and checked first (sizes agree, class ids
below --num_classes or the ignore label). Records use DeepLab's keys:
image/encoded (the original file's bytes), image/format, image/filename,
image/height, image/width, image/channels, image/segmentation/class/encoded
(a grayscale PNG of class ids; palette masks are converted) and
image/segmentation/class/format.
"""
if not __package__:  # run as a file (python scripts/x.py): this repository's packages first
  import repository_root  # pylint: disable=unused-import

from common.runtime import process

if __name__ == "__main__":
  process.start()  # before TensorFlow's import: signals recorded, its C++ start-up lines held back

import errno  # pylint: disable=g-import-not-at-top,g-bad-import-order
import io
import os

from absl import flags
from absl import logging
import numpy as np
from PIL import Image
import tensorflow as tf

from common.app import cli
from common.contract.errors import first_line
from common.contract.errors import UserError
from common.contract.errors import WorkdirError
from common.data import tfrecords
from common.runtime import signals
from common.runtime import workdir as workdir_lib
from segmentation import class_masks
from segmentation import sources as seg_sources

_VOC_ROOT = flags.DEFINE_string("voc_root", None, "A Pascal VOC 2012 folder (JPEGImages/, SegmentationClass/, ...).")
_SPLIT = flags.DEFINE_string("split", "train", "With --voc_root: the ImageSets/Segmentation split to convert.")
_IMAGES_DIR = flags.DEFINE_string("images_dir", None, "Without --voc_root: the images.")
_MASKS_DIR = flags.DEFINE_string("masks_dir", None, "Without --voc_root: PNG masks of class ids, named as the images.")
_SPLIT_FILE = flags.DEFINE_string("split_file", None, "Without --voc_root: optional file of image ids to convert.")
_NUM_CLASSES = flags.DEFINE_integer("num_classes", None, "Classes; mask values must be below it or the ignore label.",
                                    lower_bound=2)
_IGNORE_LABEL = flags.DEFINE_integer("ignore_label", 255, "Mask value of pixels without a class.")
_OUTPUT_PREFIX = flags.DEFINE_string("output_prefix", None, "Shards are <prefix>-00000-of-0000N.tfrecord.")
_NUM_SHARDS = flags.DEFINE_integer("num_shards", 4, "Output files.", lower_bound=1)
_SKIP_BAD_FILES = flags.DEFINE_boolean("skip_bad_files", False, "Skip and count images that do not decode.")

# Progress lines per conversion.
_PROGRESS_LINES = 20


def mask_png(mask_path, info):
  """Grayscale PNG bytes of the class ids: the file itself, or a palette mask converted."""
  with open(mask_path, "rb") as f:
    contents = f.read()
  if info.mask_mode == "L":
    return contents
  with Image.open(io.BytesIO(contents)) as mask:
    ids = np.asarray(mask)
  out = io.BytesIO()
  Image.fromarray(ids).save(out, format="PNG")
  return out.getvalue()


def make_record(pair, info):
  """A serialized tf.train.Example of one checked (image, mask) pair."""
  image_path, mask_path = pair
  with open(image_path, "rb") as f:
    encoded = f.read()
  return tfrecords.make_example({
      "image/encoded": tfrecords.bytes_feature(encoded),
      "image/format": tfrecords.bytes_feature(info.image_format.lower()),
      "image/filename": tfrecords.bytes_feature(os.path.basename(image_path)),
      "image/height": tfrecords.int64_feature(info.height),
      "image/width": tfrecords.int64_feature(info.width),
      "image/channels": tfrecords.int64_feature(3),
      "image/segmentation/class/encoded": tfrecords.bytes_feature(mask_png(mask_path, info)),
      "image/segmentation/class/format": tfrecords.bytes_feature("png"),
  })


def convert(pairs, num_classes, ignore_label, output_prefix, num_shards, skip_bad_files=False):
  """Checks the pairs and writes them as shards, all whole or none (a failed write, a full disk or a
  signal, honoured between images, leaves no shard); returns the shard paths."""
  pairs, infos = class_masks.check_pairs(pairs, num_classes, ignore_label, skip_bad_files)
  every = max(len(pairs) // _PROGRESS_LINES, 1)

  def records():
    for i, (pair, info) in enumerate(zip(pairs, infos), start=1):
      signals.check(f"after {i - 1} of {len(pairs)} images; nothing was written")
      yield make_record(pair, info)
      if i % every == 0 or i == len(pairs):
        logging.info("converted %s of %s images", f"{i:,}", f"{len(pairs):,}")

  shards = f"{output_prefix}-*-of-{num_shards:05d}.tfrecord"
  try:
    return tfrecords.write_tfrecord_shards(records(), output_prefix, num_shards, log_every=0)
  except (OSError, tf.errors.OpError) as e:
    if isinstance(e, tf.errors.OpError):  # its message: "<path>; <the OS's reason>"
      e = OSError(_ERRNO.get(type(e), errno.EIO), first_line(e).rsplit("; ", 1)[-1])
    raise WorkdirError(f"{workdir_lib.os_error_line(shards, e, '--output_prefix')}; nothing was written") from None


# TensorFlow's file errors as the OS errors whose lines say what to do.
_ERRNO = {tf.errors.PermissionDeniedError: errno.EACCES, tf.errors.ResourceExhaustedError: errno.ENOSPC}


def list_pairs(voc_root=None, split="train", images_dir=None, masks_dir=None, split_file=None):
  """The (image, mask) pairs of a VOC split, or of the images and masks folders."""
  if voc_root:
    return seg_sources.list_folder_pairs(*seg_sources.voc_paths(voc_root, split))
  if not (images_dir and masks_dir):
    raise UserError("give --voc_root, or --images_dir and --masks_dir")
  return seg_sources.list_folder_pairs(images_dir, masks_dir, split_file)


def run(num_classes, output_prefix, voc_root=None, split="train", images_dir=None, masks_dir=None, split_file=None,
        ignore_label=255, num_shards=4, skip_bad_files=False):
  """The command, from its flags' values: returns the shard paths."""
  if num_classes is None or output_prefix is None:
    raise UserError("--num_classes and --output_prefix are required")
  return convert(list_pairs(voc_root, split, images_dir, masks_dir, split_file), num_classes, ignore_label,
                 output_prefix, num_shards, skip_bad_files)


def main(argv):
  del argv
  paths = run(_NUM_CLASSES.value, _OUTPUT_PREFIX.value, _VOC_ROOT.value, _SPLIT.value, _IMAGES_DIR.value,
              _MASKS_DIR.value, _SPLIT_FILE.value, _IGNORE_LABEL.value, _NUM_SHARDS.value, _SKIP_BAD_FILES.value)
  print(f"wrote {len(paths)} shards: {_OUTPUT_PREFIX.value}-*-of-{_NUM_SHARDS.value:05d}.tfrecord")


if __name__ == "__main__":
  cli.run(main)  # the commands' exits: a UserError is one line and exit 2, a signal one line and 128 + N
