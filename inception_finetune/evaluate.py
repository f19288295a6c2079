"""Evaluates a fine-tuned Inception V4: top-1, top-5, per-class accuracy and a confusion matrix.

python -m inception_finetune.evaluate --config=configs/inception_v4.py --workdir=runs/inception_v4
python -m inception_finetune.evaluate --config=configs/inception_v4.py --saved_model=runs/inception_v4/saved_model

Writes per_class_accuracy.csv, confusion_matrix.csv and confusion_matrix.png
into <workdir>/eval and prints the scalar metrics as JSON.
"""
import csv
import dataclasses
import json
import os

from absl import flags
from absl import logging
import numpy as np
from PIL import Image
import tensorflow as tf

from common import cli
from common import export
from common import train_loop
from common.errors import CheckpointError
from inception_finetune import data as data_lib
from inception_finetune import preprocessing

# Side of the confusion-matrix PNG, about; every class gets a square of whole pixels.
_CONFUSION_PNG_SIZE = 480


@dataclasses.dataclass
class EvalResult:
  """Metrics of one pass over an evaluation set."""
  top1: float
  top5: float
  loss: float
  confusion: np.ndarray  # [true class, predicted class] counts

  @property
  def per_class_accuracy(self):
    """Recall of each class; NaN for a class without evaluation images."""
    totals = self.confusion.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
      return np.diag(self.confusion) / totals

  def scalars(self):
    return {"top1": self.top1, "top5": self.top5, "loss": self.loss,
            "mean_per_class_accuracy": float(np.nanmean(self.per_class_accuracy))}


def main_logits(outputs):
  """The main logits of the model's outputs ([logits, aux_logits] with the aux head)."""
  return outputs[0] if isinstance(outputs, (list, tuple)) else outputs


def top_k_hits(labels, logits, k):
  """Booleans [B]: whether each label is among the k largest logits (k capped at the class count)."""
  logits = np.asarray(logits)
  k = min(k, logits.shape[-1])
  # The label's rank: how many classes score strictly higher. Ties count in its favor, as in tf.math.in_top_k.
  label_scores = np.take_along_axis(logits, np.asarray(labels)[:, None], axis=1)
  return (logits > label_scores).sum(axis=1) < k


def confusion_matrix(labels, predictions, num_classes):
  return np.bincount(np.asarray(labels) * num_classes + np.asarray(predictions),
                     minlength=num_classes * num_classes).reshape(num_classes, num_classes)


def make_predict_fn(model):
  """A compiled forward pass in inference mode returning the main logits in float32."""
  return tf.function(lambda images: tf.cast(main_logits(model(images, training=False)), tf.float32))


def evaluate(predict_fn, dataset, num_classes):
  """One pass over (images, labels) batches -> EvalResult."""
  confusion = np.zeros([num_classes, num_classes], np.int64)
  hits1 = hits5 = count = 0
  loss_sum = 0.0
  for images, labels in dataset:
    logits = predict_fn(images)
    labels = labels.numpy()
    loss_sum += float(tf.reduce_sum(
        tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)))
    logits = logits.numpy()
    hits1 += int(top_k_hits(labels, logits, 1).sum())
    hits5 += int(top_k_hits(labels, logits, 5).sum())
    count += len(labels)
    confusion += confusion_matrix(labels, logits.argmax(axis=1), num_classes)
  if not count:
    raise ValueError("the evaluation dataset is empty")
  return EvalResult(top1=hits1 / count, top5=hits5 / count, loss=loss_sum / count, confusion=confusion)


def write_report(result, directory, class_names):
  """per_class_accuracy.csv, confusion_matrix.csv (rows: true class) and confusion_matrix.png."""
  os.makedirs(directory, exist_ok=True)
  with open(os.path.join(directory, "per_class_accuracy.csv"), "w", newline="") as f:
    writer = csv.writer(f)
    writer.writerow(["id", "name", "images", "accuracy"])
    for class_id, (name, images, accuracy) in enumerate(
        zip(class_names, result.confusion.sum(axis=1), result.per_class_accuracy)):
      writer.writerow([class_id, name, int(images), "" if np.isnan(accuracy) else f"{accuracy:.6f}"])
  with open(os.path.join(directory, "confusion_matrix.csv"), "w", newline="") as f:
    writer = csv.writer(f)
    writer.writerow(["true \\ predicted", *class_names])
    for name, row in zip(class_names, result.confusion):
      writer.writerow([name, *(int(c) for c in row)])
  confusion_image(result.confusion).save(os.path.join(directory, "confusion_matrix.png"))
  return directory


def confusion_image(confusion):
  """Row-normalized confusion matrix as an RGB image: white 0, dark blue 1; true classes down."""
  totals = np.maximum(confusion.sum(axis=1, keepdims=True), 1)
  fraction = confusion / totals
  white, blue = np.array([255, 255, 255]), np.array([8, 48, 107])
  pixels = (white + fraction[..., None] * (blue - white)).astype(np.uint8)
  cell = max(_CONFUSION_PNG_SIZE // len(confusion), 1)
  return Image.fromarray(np.kron(pixels, np.ones((cell, cell, 1), np.uint8)))


def export_model(model, path, image_size, central_fraction):
  """SavedModel: uint8 images [B, H, W, 3] of any size -> class probabilities and ids.

  Images go through TF-Slim's evaluation preprocessing (central crop, legacy
  bilinear resize to image_size, [-1, 1]) inside the signature.
  """

  def serve(images):
    prepared = tf.map_fn(
        lambda image: preprocessing.preprocess_for_eval(image, image_size, image_size, central_fraction),
        images, fn_output_signature=tf.float32)
    logits = tf.cast(main_logits(model(prepared, training=False)), tf.float32)
    return {"probabilities": tf.nn.softmax(logits),
            "class_ids": tf.argmax(logits, axis=-1, output_type=tf.int32)}

  return export.export_saved_model(model, serve, path, [export.UINT8_IMAGES])


def load_for_evaluation(config, workdir, saved_model, num_classes):
  """A predict function (images -> logits or log-probabilities) from a SavedModel or the newest checkpoint."""
  if saved_model:
    if not os.path.isdir(saved_model):
      raise CheckpointError(f"SavedModel {saved_model} does not exist")
    serve = tf.saved_model.load(saved_model).signatures["serving_default"]
    # Log-probabilities rank like the logits and give the same cross-entropy.
    return lambda images: tf.math.log(tf.maximum(serve(images=images)["probabilities"], 1e-30))
  # Imported here because train.py imports this module.
  from inception_finetune import train  # pylint: disable=g-import-not-at-top
  model = train.build_model(config, num_classes)
  logging.info("evaluating %s", train_loop.restore_model(model, workdir))
  return make_predict_fn(model)


def main(argv):
  del argv
  config, workdir, saved_model = _CONFIG.value, _WORKDIR.value, _SAVED_MODEL.value
  data = data_lib.make_datasets(config.data, config.train.batch_size, config.seed, workdir=workdir,
                                uint8_eval=bool(saved_model))
  predict_fn = load_for_evaluation(config, workdir, saved_model, data.num_classes)
  result = evaluate(predict_fn, data.eval, data.num_classes)
  directory = write_report(result, os.path.join(workdir, "eval"), data.class_names)
  print(json.dumps(dict(result.scalars(), report=directory), indent=2, sort_keys=True))


if __name__ == "__main__":
  _CONFIG, _WORKDIR = cli.define_flags("configs/inception_v4.py", "runs/inception_v4")
  _SAVED_MODEL = flags.DEFINE_string("saved_model", None, "Evaluate this SavedModel instead of a checkpoint.")
  cli.run(main)
