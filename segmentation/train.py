"""Trains the segmentation model: `python -m segmentation.train --config=configs/segmentation.py`.

The recipe: config -> datasets -> model -> the shared training loop -> export.
"""
import os

from absl import logging
import tensorflow as tf

from common import cli
from common import export
from common import train_loop
from common.errors import ConfigError
from segmentation import data as data_lib
from segmentation import losses
from segmentation import metrics
from segmentation import model as model_lib
from segmentation import visualize


def validate_config(config):
  if config.data.patch_size % model_lib.total_stride(config.model.widths):
    raise ConfigError(
        f"data.patch_size={config.data.patch_size} is not divisible by the model's total stride "
        f"{model_lib.total_stride(config.model.widths)} (model.widths={tuple(config.model.widths)})")
  weights = tuple(config.loss.class_weights)
  if weights and len(weights) != config.data.num_classes:
    raise ConfigError(f"loss.class_weights has {len(weights)} entries, data.num_classes is "
                      f"{config.data.num_classes}")


def build_model_from_config(config, num_classes):
  return model_lib.build_model(num_classes, tuple(config.model.widths), config.model.weight_decay,
                               config.data.normalization)


def make_loss_fn(ignore_label, class_weights):
  def loss_fn(model, batch, training):
    images, labels = batch
    logits = model(images, training=training)
    return losses.pixel_cross_entropy(labels, logits, ignore_label, class_weights), {}
  return loss_fn


def make_image_summaries(model, batch):
  images, labels = batch
  predictions = tf.argmax(model(images, training=False), axis=-1)
  return {"patches/image": images,
          "patches/label": visualize.colorize(labels.numpy()),
          "patches/prediction": visualize.colorize(predictions.numpy())}


def export_model(model, path, pad_multiple):
  """SavedModel: uint8 images of any size -> per-pixel logits, probabilities and class ids."""

  def serve(images):
    height, width = tf.shape(images)[1], tf.shape(images)[2]
    logits = model(export.pad_to_multiple(images, pad_multiple), training=False)
    logits = logits[:, :height, :width]
    return {"logits": logits, "probabilities": tf.nn.softmax(logits),
            "class_ids": tf.argmax(logits, axis=-1, output_type=tf.int32)}

  return export.export_saved_model(model, serve, path, [export.UINT8_IMAGES])


def train_and_evaluate(config, workdir):
  """Trains, evaluates and exports; returns the final metrics (also in workdir/metrics.json)."""
  validate_config(config)
  strategy = train_loop.prepare_run(config, workdir)
  pad_multiple = model_lib.total_stride(config.model.widths)
  data = data_lib.make_datasets(config.data, config.train.batch_size, config.seed, pad_multiple, workdir)
  with strategy.scope():
    model = build_model_from_config(config, data.num_classes)
    optimizer = train_loop.make_optimizer(config.optimizer, config.mixed_precision)
  logging.info("model: %d parameters, total stride %d", model.count_params(), pad_multiple)
  predict_fn = metrics.make_predict_fn(model)
  results = train_loop.train(
      config, workdir, strategy=strategy, model=model, train_dataset=data.train,
      loss_fn=make_loss_fn(config.data.ignore_label, tuple(config.loss.class_weights) or None),
      phases=[train_loop.Phase("train", config.train.num_steps, optimizer)],
      evaluate_fn=lambda _: metrics.evaluate(predict_fn, data.eval, data.num_classes,
                                                  config.data.ignore_label),
      image_summaries_fn=make_image_summaries)
  saved_model = export_model(model, os.path.join(workdir, "saved_model"), pad_multiple)
  print(f"validation mIoU {results['eval']['miou']:.4f}, pixel accuracy "
        f"{results['eval']['pixel_accuracy']:.4f} at step {results['step']}\n"
        f"outputs in {os.path.abspath(workdir)}: checkpoints/, train/ and eval/ (TensorBoard), "
        f"metrics.json, config.json, {os.path.basename(saved_model)}/", flush=True)
  return results


def main(argv):
  del argv
  train_and_evaluate(_CONFIG.value, _WORKDIR.value)


if __name__ == "__main__":
  _CONFIG, _WORKDIR = cli.define_flags("configs/segmentation.py", "runs/segmentation")
  cli.run(main)
