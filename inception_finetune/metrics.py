"""Classification metrics: top-1, top-5, loss, per-class accuracy and the confusion-matrix report."""
import csv
import dataclasses
import os

import numpy as np
import tensorflow as tf

from common.training import plots


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


def top_k_hits(labels, logits, k):
  """Booleans [B]: whether each label is among the k largest logits (k capped at the class count)."""
  logits = np.asarray(logits)
  k = min(k, logits.shape[-1])
  # The label's rank: how many classes score strictly higher. Ties count in its favor, as in tf.math.in_top_k.
  label_scores = np.take_along_axis(logits, np.asarray(labels)[:, None], axis=1)
  return (logits > label_scores).sum(axis=1) < k


def chance_top1(confusion, train_counts):
  """Top-1 of two guessers that never look at the image, over the same evaluation images.

  chance_top1_majority always answers the training set's most frequent class;
  chance_top1_uniform answers a class at random (1 / num_classes). Without train_counts (None: an
  evaluation of a run that kept no class_balance.csv) only the second.
  """
  uniform = {"chance_top1_uniform": 1.0 / len(confusion)}
  if train_counts is None:
    return uniform
  per_class = confusion.sum(axis=1)
  return dict(uniform, chance_top1_majority=float(per_class[int(np.argmax(train_counts))] / per_class.sum()))


def confusion_matrix(labels, predictions, num_classes):
  return np.bincount(np.asarray(labels) * num_classes + np.asarray(predictions),
                     minlength=num_classes * num_classes).reshape(num_classes, num_classes)


def evaluate(predict_fn, dataset, num_classes):
  """One pass over (images, labels) batches -> EvalResult; predict_fn(images) -> logits."""
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
  """Writes per_class_accuracy.csv, confusion_matrix.csv (rows: true class) and confusion_matrix.png.

  Returns the paths written.
  """
  os.makedirs(directory, exist_ok=True)
  per_class = os.path.join(directory, "per_class_accuracy.csv")
  with open(per_class, "w", newline="") as f:
    writer = csv.writer(f)
    writer.writerow(["id", "name", "images", "accuracy"])
    for class_id, (name, images, accuracy) in enumerate(
        zip(class_names, result.confusion.sum(axis=1), result.per_class_accuracy)):
      writer.writerow([class_id, name, int(images), "" if np.isnan(accuracy) else f"{accuracy:.6f}"])
  return [per_class, *plots.write_confusion_matrix(directory, result.confusion, class_names)]


