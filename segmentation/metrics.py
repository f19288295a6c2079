"""Confusion-matrix metrics of semantic segmentation over a whole dataset, and its report."""
import csv
import os

import numpy as np
import tensorflow as tf

from common.training import plots
from segmentation import visualize


def confusion_matrix(labels, logits, num_classes, ignore_label):
  """[num_classes, num_classes] counts, rows = true class, columns = predicted, ignored pixels left out."""
  labels = tf.reshape(tf.cast(labels, tf.int32), [-1])
  predictions = tf.reshape(tf.argmax(logits, axis=-1, output_type=tf.int32), [-1])
  valid = tf.not_equal(labels, ignore_label)
  return tf.math.confusion_matrix(tf.boolean_mask(labels, valid), tf.boolean_mask(predictions, valid),
                                  num_classes=num_classes, dtype=tf.int64)


# fg_bg_iou this much above the mIoU: the objects are found but their classes mixed up (issue 51's
# first digit scenes: 0.918 against 0.634); a model that tells them apart scores both alike.
MIXED_UP_GAP = 0.1
FOUND_IOU = 0.5  # objects found: PASCAL's overlap criterion (a lower fg_bg_iou: they are missed)


def metrics_from_confusion(confusion, class_names=None):
  """mIoU over the classes that occur (in labels or predictions), per-class IoU, pixel accuracy,
  fg_bg_iou (the objects found whatever their class: fg_bg_iou).

  Per-class keys have zero-padded ids so that sorted keys (metrics.json, the log) are in class order:
  iou/01_disk with class names, iou/class_01 without. The chance baseline beside them,
  chance_miou and chance_pixel_accuracy, is what predicting the evaluation set's most frequent
  class everywhere would score: a model must beat it to have learned anything beyond the background.
  """
  confusion = np.asarray(confusion, np.float64)
  true_positive = np.diag(confusion)
  iou = class_iou(confusion)
  present = ~np.isnan(iou)
  label_counts = confusion.sum(1)
  total = max(confusion.sum(), 1)
  # All pixels predicted as the majority class: its IoU is its share, every other labelled class 0.
  majority_share = label_counts.max() / total
  results = {"miou": float(np.nanmean(iou)) if present.any() else 0.0,
             "pixel_accuracy": float(true_positive.sum() / total),
             "chance_miou": float(majority_share / max(np.count_nonzero(label_counts), 1)),
             "chance_pixel_accuracy": float(majority_share),
             "fg_bg_iou": fg_bg_iou(confusion)}
  width = max(2, len(str(len(iou) - 1)))
  results.update({f"iou/{_class_key(c, width, class_names)}": float(v)
                  for c, v in enumerate(iou) if present[c]})
  return results


def class_iou(confusion):
  """Each class's IoU, NaN for a class in neither labels nor predictions."""
  true_positive = np.diag(confusion).astype(np.float64)
  union = confusion.sum(0) + confusion.sum(1) - true_positive
  return np.where(union > 0, true_positive / np.maximum(union, 1), np.nan)


def fg_bg_iou(confusion):
  """Foreground-vs-background IoU: every class but the background merged into one, the IoU of that
  foreground (0 when no pixel is foreground in labels or predictions)."""
  confusion = np.asarray(confusion, np.float64)
  background = visualize.BACKGROUND
  both = np.delete(np.delete(confusion, background, 0), background, 1).sum()  # object, called an object
  either = confusion.sum() - confusion[background, background]
  return float(both / either) if either else 0.0


def mixed_up_line(scores):
  """A line when the objects are found (fg_bg_iou FOUND_IOU or more) but their classes mixed up
  (fg_bg_iou MIXED_UP_GAP or more above the mIoU), else None."""
  if scores["fg_bg_iou"] < FOUND_IOU or scores["fg_bg_iou"] - scores["miou"] < MIXED_UP_GAP:
    return None
  return (f"objects found but their classes mixed up: foreground-vs-background IoU {scores['fg_bg_iou']:.4f}, "
          f"mIoU {scores['miou']:.4f}; the confusion matrix (the report's confusion_matrix.png, TensorBoard's "
          "confusion_matrix image) shows which class is taken for which")


def _class_key(class_id, width, class_names):
  padded = f"{class_id:0{width}d}"
  return f"{padded}_{class_names[class_id]}" if class_names else f"class_{padded}"


def evaluate(predict_fn, dataset, num_classes, ignore_label):
  """The confusion matrix of one pass over the dataset (metrics_from_confusion scores it)."""
  confusion = np.zeros([num_classes, num_classes], np.int64)
  for images, labels in dataset:
    confusion += confusion_matrix(labels, predict_fn(images), num_classes, ignore_label).numpy()
  return confusion


def confusion_title(confusion):
  """The confusion matrix's title: what its cells are and the figures that say whether the objects are
  found (fg_bg_iou) and told apart (mIoU)."""
  scores = metrics_from_confusion(confusion)
  return (f"pixels, fraction of each true class\nmIoU {scores['miou']:.3f}, "
          f"foreground-vs-background IoU {scores['fg_bg_iou']:.3f}")


def write_report(directory, confusion, class_names, examples, ignore_label):
  """per_class_iou.csv, confusion_matrix.csv (rows: true class; pixels), confusion_matrix.png
  (labelled, each row's fractions) and overlay_<i>.png (an evaluation image, its truth and the
  prediction: visualize.figure) of each (image, label, logits) example; returns the paths."""
  os.makedirs(directory, exist_ok=True)
  per_class = os.path.join(directory, "per_class_iou.csv")
  iou = class_iou(confusion)
  with open(per_class, "w", newline="") as f:
    writer = csv.writer(f)
    writer.writerow(["id", "name", "label_pixels", "predicted_pixels", "iou"])
    for c, name in enumerate(class_names):
      writer.writerow([c, name, int(confusion[c].sum()), int(confusion[:, c].sum()),
                       "" if np.isnan(iou[c]) else f"{iou[c]:.6f}"])
  paths = [per_class, *plots.write_confusion_matrix(directory, confusion, class_names, confusion_title(confusion),
                                                    fractions_in_cells=True)]
  for i, (pixels, label, logits) in enumerate(examples):
    path = os.path.join(directory, f"overlay_{i}.png")
    visualize.figure(pixels, {"truth": label, "prediction": np.argmax(logits, axis=-1)}, class_names,
                     ignore_label).save(path)
    paths.append(path)
  return paths
