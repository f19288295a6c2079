"""The losses of semantic segmentation, over the pixels whose label is not the ignore label.

Each takes logits of any float type (computed in float32, so mixed precision loses nothing here)
and returns the loss of its replica's part of the batch, which the train step divides by the number
of replicas. Every shape is the batch's own: nothing varies on the Python side, so they compile
with XLA. The class terms (Dice, Lovász) pool the part of the batch's pixels per class and average
the classes present in its labels, weighted by class_weights.
"""
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


def ohem_cross_entropy(labels, logits, ignore_label, threshold, min_kept, class_weights=None):
  """Cross-entropy averaged over the hard pixels only (online hard-example mining, as
  mmsegmentation's OHEM sampler): those whose probability of their true class is below threshold,
  and never fewer than the min_kept hardest per image of the batch (every valid pixel if it has
  fewer; ties with the last one kept are kept too).
  """
  logits = tf.cast(logits, tf.float32)
  labels = tf.cast(labels, tf.int32)
  valid = tf.not_equal(labels, ignore_label)
  safe_labels = tf.where(valid, labels, 0)
  per_pixel = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=safe_labels, logits=logits)
  # The probability of the true class is exp(-cross-entropy); ignored pixels (2) rank after all.
  probability = tf.where(valid, tf.exp(-per_pixel), 2.0)
  ranked = tf.sort(tf.reshape(probability, [-1]))
  count = tf.minimum(min_kept * tf.shape(labels)[0], tf.size(ranked))
  floor = tf.where(count > 0, tf.gather(ranked, tf.maximum(count - 1, 0)), -1.0)
  kept = tf.logical_and(valid, tf.logical_or(probability < threshold, probability <= floor))
  weights = tf.cast(kept, tf.float32)
  if class_weights is not None:
    weights *= tf.gather(tf.constant(class_weights, tf.float32), safe_labels)
  return tf.reduce_sum(per_pixel * weights) / tf.maximum(tf.reduce_sum(weights), 1e-6)


def _class_columns(labels, logits, ignore_label):
  """-> softmax probabilities and one-hot truth, [num_classes, pixels], zero at ignored pixels;
  and the valid pixels' mask, [pixels]."""
  logits = tf.cast(logits, tf.float32)
  num_classes = logits.shape[-1]
  logits = tf.reshape(logits, [-1, num_classes])
  labels = tf.reshape(tf.cast(labels, tf.int32), [-1])
  valid = tf.not_equal(labels, ignore_label)
  mask = tf.cast(valid, tf.float32)[:, None]
  probabilities = tf.nn.softmax(logits) * mask
  truth = tf.one_hot(tf.where(valid, labels, 0), num_classes) * mask
  return tf.transpose(probabilities), tf.transpose(truth), valid


def _mean_over_present(per_class, truth, class_weights):
  """The mean of per-class losses over the classes that some valid pixel has, weighted by
  class_weights; 0 when there is none (a batch of ignored pixels trains nothing)."""
  weights = tf.cast(tf.reduce_sum(truth, axis=1) > 0, tf.float32)
  if class_weights is not None:
    weights *= tf.constant(class_weights, tf.float32)
  return tf.reduce_sum(per_class * weights) / tf.maximum(tf.reduce_sum(weights), 1e-6)


def dice_loss(labels, logits, ignore_label, class_weights=None):
  """1 - the soft Dice coefficient 2 sum(p y) / (sum(p) + sum(y)) of each class, p its softmax
  probability and y its one-hot truth, summed over the batch's valid pixels."""
  probabilities, truth, _ = _class_columns(labels, logits, ignore_label)
  overlap = tf.reduce_sum(probabilities * truth, axis=1)
  sizes = tf.reduce_sum(probabilities, axis=1) + tf.reduce_sum(truth, axis=1)
  # A present class has sizes >= 1; the floor only keeps an absent one's 0 / 0 finite.
  per_class = 1.0 - 2.0 * overlap / tf.maximum(sizes, 1e-6)
  return _mean_over_present(per_class, truth, class_weights)


def lovasz_softmax(labels, logits, ignore_label, class_weights=None):
  """The Lovász-softmax loss (Berman, Rannen Triki and Blaschko, CVPR 2018): per class, the Lovász
  extension of the Jaccard loss (1 - IoU) evaluated at the pixels' errors |y - p|, a convex
  surrogate that equals 1 - IoU when the probabilities are one-hot.

  The extension at errors sorted in decreasing order is sum_i error_i (J_i - J_(i-1)), J_i the
  Jaccard loss of the set of the i largest errors taken as mispredicted pixels.
  """
  probabilities, truth, valid = _class_columns(labels, logits, ignore_label)
  errors = tf.abs(truth - probabilities)
  # Ignored pixels rank after every valid one: their error (0) and their growth of the union
  # then touch no valid pixel's term.
  order = tf.argsort(tf.where(valid[None, :], errors, -1.0), axis=1, direction="DESCENDING")
  errors = tf.gather(errors, order, batch_dims=1)
  truth_sorted = tf.gather(truth, order, batch_dims=1)
  size = tf.reduce_sum(truth_sorted, axis=1, keepdims=True)
  # Among the i largest errors: |truth \ S_i| = size - cumsum(truth), |truth u S_i| = size + cumsum(1 - truth).
  jaccard = 1.0 - (size - tf.cumsum(truth_sorted, axis=1)) / (size + tf.cumsum(1.0 - truth_sorted, axis=1))
  steps = tf.concat([jaccard[:, :1], jaccard[:, 1:] - jaccard[:, :-1]], axis=1)
  per_class = tf.reduce_sum(errors * steps, axis=1)
  return _mean_over_present(per_class, truth, class_weights)
