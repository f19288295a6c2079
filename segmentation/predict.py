"""Writes a mask PNG in Pascal VOC's colors (and the raw class ids) per input image, with a SavedModel.

python -m segmentation.predict --saved_model=runs/segmentation/saved_model --output_dir=runs/masks a.jpg b.png
"""
from common import process

if __name__ == "__main__":
  process.start()  # before TensorFlow's import: signals recorded, its C++ start-up lines held back

import os

from absl import app
from absl import flags
from absl import logging
import numpy as np
from PIL import Image
import tensorflow as tf

from common import cli
from common import workdir as workdir_lib
from configs import segmentation as segmentation_config
from segmentation import data as data_lib
from segmentation import visualize

_SAVED_MODEL = flags.DEFINE_string("saved_model", "runs/segmentation/saved_model",
                                   "SavedModel written by segmentation.train.")
_OUTPUT_DIR = flags.DEFINE_string("output_dir", "runs/segmentation/predictions", "Where the PNGs go.")
MAX_PIXELS = segmentation_config.get_config().data.eval_max_pixels
_MAX_PIXELS = flags.DEFINE_integer("max_pixels", MAX_PIXELS,
                                   "Larger images are refused before the SavedModel loads: a whole image's "
                                   "activations grow with its pixels (as data.eval_max_pixels).")


def predict_files(saved_model, paths, output_dir, max_pixels=MAX_PIXELS):
  """Writes <name>_mask.png (VOC palette) and <name>_classes.png (class ids) per image; returns the paths."""
  workdir_lib.check_saved_model(saved_model)
  workdir_lib.check_writable(output_dir, flag="--output_dir")  # before the SavedModel loads
  for path in paths:  # from their headers, before the SavedModel loads too
    size = data_lib.header_size(path, path)
    if size:
      data_lib.check_eval_size(path, size, max_pixels, setting="--max_pixels")
  serve = tf.saved_model.load(saved_model).signatures["serving_default"]
  written = []
  for path in paths:
    image = data_lib.read_image_file(path)
    class_ids = serve(images=tf.convert_to_tensor(image[None]))["class_ids"][0].numpy().astype(np.uint8)
    stem = os.path.join(output_dir, os.path.splitext(os.path.basename(path))[0])
    with workdir_lib.writing(output_dir, flag="--output_dir"):  # a disk filling up on the way
      Image.fromarray(class_ids).save(stem + "_classes.png")
      # A palette PNG like VOC's ground-truth masks: the same colors side by side, and its indices are the ids.
      mask = Image.fromarray(class_ids)
      mask.putpalette(visualize.voc_palette())
      mask.save(stem + "_mask.png")
    written.append(stem + "_mask.png")
    logging.info("%s -> %s_mask.png", path, stem)
  return written


def main(argv):
  if len(argv) < 2:
    raise app.UsageError("give one or more image files")
  predict_files(_SAVED_MODEL.value, argv[1:], _OUTPUT_DIR.value, _MAX_PIXELS.value)


if __name__ == "__main__":
  cli.run(main)
