"""Per-pixel loss and the confusion-matrix metrics of semantic segmentation."""
import numpy as np
import tensorflow as tf


def pixel_cross_entropy(labels, logits, ignore_label, class_weights=None):
  """Mean sparse softmax cross-entropy over the pixels whose label is not ignore_label.

  class_weights: optional [num_classes] weights; the mean is weighted by them.
  """
  logits = tf.cast(logits, tf.float32)
  labels = tf.cast(labels, tf.int32)
  valid = tf.not_equal(labels, ignore_label)
  safe_labels = tf.where(valid, labels, 0)
  per_pixel = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=safe_labels, logits=logits)
  weights = tf.cast(valid, tf.float32)
  if class_weights is not None:
    weights *= tf.gather(tf.constant(class_weights, tf.float32), safe_labels)
  return tf.reduce_sum(per_pixel * weights) / tf.maximum(tf.reduce_sum(weights), 1e-6)


def confusion_matrix(labels, logits, num_classes, ignore_label):
  """[num_classes, num_classes] counts, rows = true class, columns = predicted, ignored pixels left out."""
  labels = tf.reshape(tf.cast(labels, tf.int32), [-1])
  predictions = tf.reshape(tf.argmax(logits, axis=-1, output_type=tf.int32), [-1])
  valid = tf.not_equal(labels, ignore_label)
  return tf.math.confusion_matrix(tf.boolean_mask(labels, valid), tf.boolean_mask(predictions, valid),
                                  num_classes=num_classes, dtype=tf.int64)


def metrics_from_confusion(confusion):
  """mIoU over the classes that occur (in labels or predictions), per-class IoU, pixel accuracy."""
  confusion = np.asarray(confusion, np.float64)
  true_positive = np.diag(confusion)
  union = confusion.sum(0) + confusion.sum(1) - true_positive
  present = union > 0
  iou = np.where(present, true_positive / np.maximum(union, 1), np.nan)
  results = {"miou": float(np.nanmean(iou)) if present.any() else 0.0,
             "pixel_accuracy": float(true_positive.sum() / max(confusion.sum(), 1))}
  results.update({f"iou/class_{c}": float(v) for c, v in enumerate(iou) if present[c]})
  return results
