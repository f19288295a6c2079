"""Evaluates a segmentation model (a checkpoint in a workdir, or a SavedModel) on whole images.

python -m segmentation.evaluate --config=configs/segmentation.py --workdir=runs/segmentation
python -m segmentation.evaluate --config=configs/segmentation.py --saved_model=runs/segmentation/saved_model
"""
import json
import os

from absl import flags
from absl import logging
import numpy as np
import tensorflow as tf

from common import cli
from common.errors import CheckpointError
from segmentation import losses

# Distinct colors for class ids; 255 (ignore) is drawn white.
PALETTE = np.array([
    [0, 0, 0], [230, 25, 75], [60, 180, 75], [255, 225, 25], [0, 130, 200], [245, 130, 48],
    [145, 30, 180], [70, 240, 240], [240, 50, 230], [210, 245, 60], [250, 190, 212], [0, 128, 128],
    [220, 190, 255], [170, 110, 40], [255, 250, 200], [128, 0, 0], [170, 255, 195], [128, 128, 0],
    [255, 215, 180], [0, 0, 128], [128, 128, 128]], np.uint8)


def colorize(class_ids):
  """[..., H, W] class ids -> [..., H, W, 3] uint8 colors; ids beyond the palette wrap around."""
  class_ids = np.asarray(class_ids)
  colors = PALETTE[np.mod(class_ids, len(PALETTE))]
  colors[class_ids == 255] = 255
  return colors


def make_predict_fn(model):
  """A compiled forward pass that does not retrace for every image size."""
  return tf.function(lambda images: model(images, training=False), reduce_retracing=True)


def evaluate(predict_fn, dataset, num_classes, ignore_label):
  """mIoU, per-class IoU and pixel accuracy from one confusion matrix over the whole dataset."""
  confusion = np.zeros([num_classes, num_classes], np.int64)
  for images, labels in dataset:
    confusion += losses.confusion_matrix(labels, predict_fn(images), num_classes, ignore_label).numpy()
  return losses.metrics_from_confusion(confusion)


def load_for_evaluation(config, workdir, saved_model):
  """A predict function from a SavedModel, or from the newest checkpoint in workdir."""
  if saved_model:
    if not os.path.isdir(saved_model):
      raise CheckpointError(f"SavedModel {saved_model} does not exist")
    serve = tf.saved_model.load(saved_model).signatures["serving_default"]
    return lambda images: serve(images=images)["logits"]
  # Imported here: building the model is only needed for checkpoints.
  from segmentation import train
  model = train.build_model_from_config(config)
  checkpoint_dir = os.path.join(workdir, "checkpoints")
  latest = tf.train.latest_checkpoint(checkpoint_dir)
  if latest is None:
    raise CheckpointError(f"no checkpoint in {checkpoint_dir}")
  tf.train.Checkpoint(model=model).restore(latest).expect_partial()
  logging.info("evaluating %s", latest)
  return make_predict_fn(model)


def main(argv):
  del argv
  from segmentation import data as data_lib  # pylint: disable=g-import-not-at-top
  config = _CONFIG.value
  saved_model = _SAVED_MODEL.value
  data = data_lib.make_datasets(config.data, config.train.batch_size, config.seed,
                                pad_multiple=_pad_multiple(config), workdir=_WORKDIR.value,
                                uint8_eval=bool(saved_model))
  predict_fn = load_for_evaluation(config, _WORKDIR.value, saved_model)
  results = evaluate(predict_fn, data.eval, data.num_classes, config.data.ignore_label)
  print(json.dumps(results, indent=2, sort_keys=True))


def _pad_multiple(config):
  from segmentation import model  # pylint: disable=g-import-not-at-top
  return model.total_stride(config.model.widths)


if __name__ == "__main__":
  _CONFIG, _WORKDIR = cli.define_flags("configs/segmentation.py", "runs/segmentation")
  _SAVED_MODEL = flags.DEFINE_string("saved_model", None, "Evaluate this SavedModel instead of a checkpoint.")
  cli.run(main)
