"""Confusion-matrix metrics of semantic segmentation over a whole dataset."""
import numpy as np
import tensorflow as tf


def confusion_matrix(labels, logits, num_classes, ignore_label):
  """[num_classes, num_classes] counts, rows = true class, columns = predicted, ignored pixels left out."""
  labels = tf.reshape(tf.cast(labels, tf.int32), [-1])
  predictions = tf.reshape(tf.argmax(logits, axis=-1, output_type=tf.int32), [-1])
  valid = tf.not_equal(labels, ignore_label)
  return tf.math.confusion_matrix(tf.boolean_mask(labels, valid), tf.boolean_mask(predictions, valid),
                                  num_classes=num_classes, dtype=tf.int64)


def metrics_from_confusion(confusion, class_names=None):
  """mIoU over the classes that occur (in labels or predictions), per-class IoU, pixel accuracy.

  Per-class keys have zero-padded ids so that sorted keys (metrics.json, the log) are in class order:
  iou/01_disk with class names, iou/class_01 without. The chance baseline beside them,
  chance_miou and chance_pixel_accuracy, is what predicting the evaluation set's most frequent
  class everywhere would score: a model must beat it to have learned anything beyond the background.
  """
  confusion = np.asarray(confusion, np.float64)
  true_positive = np.diag(confusion)
  union = confusion.sum(0) + confusion.sum(1) - true_positive
  present = union > 0
  iou = np.where(present, true_positive / np.maximum(union, 1), np.nan)
  label_counts = confusion.sum(1)
  total = max(confusion.sum(), 1)
  # All pixels predicted as the majority class: its IoU is its share, every other labelled class 0.
  majority_share = label_counts.max() / total
  results = {"miou": float(np.nanmean(iou)) if present.any() else 0.0,
             "pixel_accuracy": float(true_positive.sum() / total),
             "chance_miou": float(majority_share / max(np.count_nonzero(label_counts), 1)),
             "chance_pixel_accuracy": float(majority_share)}
  width = max(2, len(str(len(iou) - 1)))
  results.update({f"iou/{_class_key(c, width, class_names)}": float(v)
                  for c, v in enumerate(iou) if present[c]})
  return results


def _class_key(class_id, width, class_names):
  padded = f"{class_id:0{width}d}"
  return f"{padded}_{class_names[class_id]}" if class_names else f"class_{padded}"


def evaluate(predict_fn, dataset, num_classes, ignore_label, class_names=None):
  """mIoU, per-class IoU and pixel accuracy from one confusion matrix over the whole dataset."""
  confusion = np.zeros([num_classes, num_classes], np.int64)
  for images, labels in dataset:
    confusion += confusion_matrix(labels, predict_fn(images), num_classes, ignore_label).numpy()
  return metrics_from_confusion(confusion, class_names)
