"""The classification loss of the fine-tuning trainer."""
import tensorflow as tf

from common.contract.errors import DataError


def classification_loss(labels, logits, num_classes, label_smoothing=0.0):
  """Mean softmax cross-entropy with TF-Slim's label smoothing, of integer class ids [B] or of the
  soft labels of mixup and CutMix (float [B, num_classes], rows summing to 1), smoothed on top as
  timm's mixup_target does."""
  if labels.dtype.is_floating:
    if labels.shape.rank != 2 or labels.shape[-1] != num_classes:
      raise DataError(f"float labels have shape {labels.shape}: soft labels are [batch, {num_classes}] "
                      "(mixup, CutMix); integer class ids are [batch]")
    targets = tf.cast(labels, tf.float32)
  else:
    if labels.shape.rank != 1:
      raise DataError(f"labels have shape {labels.shape}: integer labels are one class id per image "
                      "(shape [batch]), not one-hot or multi-label vectors")
    # The data was checked up front; on a GPU an out-of-range id would give NaN, not an error.
    tf.debugging.assert_non_negative(labels, message="negative label")
    tf.debugging.assert_less(labels, tf.cast(num_classes, labels.dtype), message="label >= num_classes")
    targets = tf.one_hot(labels, num_classes)
  logits = tf.cast(logits, tf.float32)
  if label_smoothing:
    targets = targets * (1.0 - label_smoothing) + label_smoothing / num_classes
  return tf.reduce_mean(tf.nn.softmax_cross_entropy_with_logits(labels=targets, logits=logits))
