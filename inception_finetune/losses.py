"""The classification loss of the fine-tuning trainer."""
import tensorflow as tf

from common.contract.errors import DataError


def sparse_classification_loss(labels, logits, num_classes, label_smoothing=0.0):
  """Mean softmax cross-entropy of integer class ids [B], with TF-Slim's label smoothing."""
  if labels.shape.rank != 1:
    raise DataError(f"labels have shape {labels.shape}: the sparse loss takes one integer class id "
                    "per image (shape [batch]), not one-hot or multi-label vectors")
  if labels.dtype.is_floating:
    raise DataError(f"labels are {labels.dtype.name}: the sparse loss takes integer class ids")
  # The data was checked up front; on a GPU an out-of-range id would give NaN, not an error.
  tf.debugging.assert_non_negative(labels, message="negative label")
  tf.debugging.assert_less(labels, tf.cast(num_classes, labels.dtype), message="label >= num_classes")
  logits = tf.cast(logits, tf.float32)
  targets = tf.one_hot(labels, num_classes)
  if label_smoothing:
    targets = targets * (1.0 - label_smoothing) + label_smoothing / num_classes
  return tf.reduce_mean(tf.nn.softmax_cross_entropy_with_logits(labels=targets, logits=logits))
