"""Evaluates a segmentation model (a checkpoint in a workdir, or a SavedModel) on whole images.

python -m segmentation.evaluate --config=configs/segmentation.py --workdir=runs/segmentation
python -m segmentation.evaluate --config=configs/segmentation.py --saved_model=runs/segmentation/saved_model
"""
import json
import os

from absl import flags
from absl import logging
import tensorflow as tf

from common import cli
from common import train_loop
from common.errors import CheckpointError
from segmentation import data as data_lib
from segmentation import metrics
from segmentation import model as model_lib
from segmentation import train


def load_for_evaluation(config, workdir, saved_model):
  """A predict function (uint8 images -> logits) from a SavedModel, or the newest checkpoint in workdir."""
  if saved_model:
    if not os.path.isdir(saved_model):
      raise CheckpointError(f"SavedModel {saved_model} does not exist")
    serve = tf.saved_model.load(saved_model).signatures["serving_default"]
    return lambda images: serve(images=images)["logits"]
  model = train.build_model_from_config(config, config.data.num_classes)
  logging.info("evaluating %s", train_loop.restore_model(model, workdir))
  return metrics.make_predict_fn(model)


def main(argv):
  del argv
  config = _CONFIG.value
  data = data_lib.make_datasets(config.data, config.train.batch_size, config.seed,
                                model_lib.total_stride(config.model.widths), _WORKDIR.value)
  predict_fn = load_for_evaluation(config, _WORKDIR.value, _SAVED_MODEL.value)
  results = metrics.evaluate(predict_fn, data.eval, data.num_classes, config.data.ignore_label)
  print(json.dumps(results, indent=2, sort_keys=True))


if __name__ == "__main__":
  _CONFIG, _WORKDIR = cli.define_flags("configs/segmentation.py", "runs/segmentation")
  _SAVED_MODEL = flags.DEFINE_string("saved_model", None, "Evaluate this SavedModel instead of a checkpoint.")
  cli.run(main)
