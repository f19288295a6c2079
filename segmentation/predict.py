"""Writes, per input image, its mask in Pascal VOC's colours, its raw class ids, and the image beside
its prediction (segmentation/visualize.py) above a legend of class names and colours.

python -m segmentation.predict --workdir=runs/segmentation --output_dir=runs/masks a.jpg b.png
python -m segmentation.predict --saved_model=runs/segmentation/saved_model --output_dir=runs/masks a.jpg

--workdir reads a training run: its own config.json (--config.key=value on top), and the weights of
its best evaluation (best/, with train.best_metric) or else of its newest checkpoint; --saved_model
reads an export. --config.eval.window=W --config.eval.stride=S predicts in overlapping windows, a
strip of them at a time (a photo of any size), --config.eval.flip and --config.eval.scales add
test-time augmentation. Photos are read as a photo viewer shows them (their EXIF orientation
applied); one that does not read, or is over --max_pixels, is named and left out, and the command
ends with exit code 2 once the others' masks are written (a lone photo over it is refused before the
model loads). Outputs never replace a file: one that exists in --output_dir (a ground-truth
img_mask.png, or an earlier run's), or two photos of one name stem, are refused before the model
loads, and a folder's files named as its photos' outputs are not read as photos.
"""
from common.runtime import process

if __name__ == "__main__":
  process.start()  # before TensorFlow's import: signals recorded, its C++ start-up lines held back

import os

from absl import flags
from absl import logging
import numpy as np
from PIL import Image
import tensorflow as tf

from common.app import cli
from common.app import predict as predict_lib
from common.contract.errors import ConfigError
from common.contract.errors import WorkdirError
from common.data import photos
from common.training import plots
from common.runtime import workdir as workdir_lib
from segmentation import data as data_lib
from segmentation import inference as inference_lib
from segmentation import task as task_lib
from segmentation import visualize

OUTPUTS = ("_mask.png", "_classes.png", "_overlay.png")  # after the photo's name stem
# The overlay's photo and mask are shrunk to fit this box (nearest neighbour): a picture to look at,
# whose memory would otherwise be tens of bytes a pixel of the photo.
OVERLAY_SIDE = 2048
# Beside the network's windows: the photo (3 bytes a pixel, 9 while decoded), its class ids and PNGs.
STREAMED_BYTES_PER_PIXEL = 12


def load_saved_model(saved_model, inference=inference_lib.Inference()):
  """images -> (class ids, class names) of a SavedModel, its logits in inference's windows and
  variants (inference.Inference; default: whole images)."""
  loaded = predict_lib.load_saved_model(saved_model, ("class_ids",), task_lib.NAME)
  # The names are a constant output: one call on a pixel gives them (exports from before class names
  # were added have none: ids then).
  names = loaded.signatures["serving_default"](images=tf.zeros([1, 1, 1, 3], tf.uint8)).get("class_names")
  names = None if names is None else [n.decode() for n in names.numpy()]
  # Through `loaded`, which owns the variables the signature reads (a compiled call holds them weakly).
  return classifier(lambda images: loaded.signatures["serving_default"](images=images)["logits"], inference, names)


def load_workdir(workdir, config, settings, inference):
  """images -> (class ids, class names) of a run's best weights, else its newest checkpoint (config:
  the run's; settings: its data settings, data.read_settings; inference: inference.read_inference)."""
  names = data_lib.class_names(settings.source) or tuple(str(c) for c in range(settings.source.num_classes))
  model = task_lib.build_model(config, settings)
  predict_lib.restore_weights(model, workdir)
  return classifier(task_lib.model_forward(model, task_lib.pad_multiple(config)), inference, names)


def classifier(forward, inference, names):
  """image -> (uint8 class ids of a uint8 [H, W, 3] photo, class names): in strips of windows where
  inference streams (inference.streamed_class_ids), else from the photo's logits."""
  logits = task_lib.make_predict_fn(forward, inference)
  if inference.streams:
    return lambda image: (inference_lib.streamed_class_ids(logits, image, inference), names)
  return lambda image: (tf.argmax(logits(tf.convert_to_tensor(image[None])), axis=-1)[0].numpy().astype(np.uint8),
                        names)


def predict_files(paths, output_dir, config, *, saved_model=None, workdir=None, max_pixels=None):
  """Writes <stem>_mask.png (VOC palette), <stem>_classes.png (class ids as grey levels) and
  <stem>_overlay.png (the image beside its prediction, a legend) per image; returns the mask paths.
  The model: the SavedModel, else the workdir's weights with config (the run's); paths: photos or
  folders of them; max_pixels: larger images are refused, default config.data.eval_max_pixels, or
  where config.eval's windows stream (inference.streams) PIL's bound, photos.MAX_PIXELS. No output
  may exist already, nor two photos share one (check_outputs)."""
  settings = data_lib.read_settings(config.data, for_training=False)
  inference = inference_lib.read_inference(config, settings.eval.eval_max_pixels)
  max_pixels = max_pixels or (None if inference.streams else settings.eval.eval_max_pixels)
  tiles_key = None if inference.window else inference_lib.WINDOW_KEY
  listed = predict_lib.photo_paths(paths, max_pixels, tiles_key, OUTPUTS)
  stems = check_outputs(listed, output_dir)
  photos = predict_lib.Photos(listed, max_pixels, lambda done: f"their masks are in {output_dir}", tiles_key)
  with predict_lib.checked_paths(saved_model, {"--output_dir": output_dir}):
    classify = (load_saved_model(saved_model, inference) if saved_model
                else load_workdir(workdir, config, settings, inference))
    written = [write_masks(path, image, classify, stems[path]) for path, image in photos]
    photos.finish(f"the masks of the other {len(written)} are in {output_dir}")
  return written


def check_outputs(paths, output_dir):
  """{photo: the stem of its outputs in output_dir}; one line, before anything is written, when two
  photos would write the same file (a/img.jpg and b/img.jpg, img.jpg and img.png) or one of the
  files exists (predict_lib.check_new)."""
  stems, by_stem = {}, {}
  for path in paths:
    stem = os.path.join(output_dir, os.path.splitext(os.path.basename(path))[0])
    if stem in by_stem:
      raise WorkdirError(f"{by_stem[stem]} and {path} would both write {stem}_mask.png: predict photos "
                         "of one name stem into separate --output_dir folders")
    stems[path], by_stem[stem] = stem, path
  predict_lib.check_new([stem + suffix for stem in by_stem for suffix in OUTPUTS], "--output_dir")
  return stems


def write_masks(path, image, classify, stem):
  """Writes the photo's three PNGs (predict_files) as new files; returns the mask's path."""
  class_ids, names = classify(image)
  if max(image.shape[:2]) > OVERLAY_SIDE:
    image, shown_ids = (plots.fitted(a, OVERLAY_SIDE, OVERLAY_SIDE) for a in (image, class_ids))
  else:
    shown_ids = class_ids
  # A palette PNG like VOC's ground-truth masks: the same colors side by side, and its indices are the ids.
  mask = Image.fromarray(class_ids)
  mask.putpalette(visualize.voc_palette())
  with workdir_lib.writing(stem, flag="--output_dir"):  # a disk filling up on the way
    for suffix, picture in zip(OUTPUTS, (mask, Image.fromarray(class_ids),
                                         visualize.figure(image, {"prediction": shown_ids}, names))):
      save_new(picture, stem + suffix)
  logging.info("%s -> %s_mask.png, _classes.png, _overlay.png", path, stem)
  return stem + "_mask.png"


def save_new(picture, path):
  """Saves a PNG as a new file ("x": one made meanwhile, by another predict, is not replaced); one
  that fails half-written is removed, as PIL does when it opens the file itself."""
  with open(path, "xb") as f:
    try:
      picture.save(f, format="PNG")
    except BaseException:
      os.remove(path)
      raise


def main(argv):
  if len(argv) < 2:
    raise ConfigError("no photo given: name one or more photos or folders after the flags")
  workdir = _WORKDIR.value
  predict_files(argv[1:], _OUTPUT_DIR.value, cli.run_config(_CONFIG, workdir, _SAVED_MODEL.value),
                saved_model=_SAVED_MODEL.value, workdir=workdir, max_pixels=_MAX_PIXELS.value)


if __name__ == "__main__":
  _CONFIG, _WORKDIR, _SAVED_MODEL, _MAX_PIXELS = predict_lib.define_flags(
      "segmentation", "configs/segmentation.py", "runs/segmentation",
      max_pixels_default="the config's data.eval_max_pixels (a whole image's activations grow with its "
      f"pixels); with --config.eval.window (and eval.scales 1), {photos.MAX_PIXELS:,} (PIL's bound): the network "
      f"sees a strip of windows at a time, and the rest holds about {STREAMED_BYTES_PER_PIXEL} bytes a pixel "
      "(the photo, its class ids, the PNGs; the overlay is at most "
      f"{OVERLAY_SIDE}x{OVERLAY_SIDE})")
  _OUTPUT_DIR = flags.DEFINE_string("output_dir", "runs/segmentation/predictions", "Where the PNGs go.")
  cli.run(main)
