"""The per-pixel loss of semantic segmentation."""
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
