"""Triplet losses with online mining on the in-batch distance matrix.

Each loss takes integer labels [B], embeddings [B, D] and a margin (which the
soft-margin batch-hard loss, having none, does not use) and returns
(scalar float32 loss, dict of mining statistics):
  active_fraction    fraction of the triplets the loss averages over whose
                     hinge is positive (the triplets that carry gradient);
  positive_distance  mean anchor-positive distance over those triplets;
  negative_distance  mean anchor-negative distance over those triplets.
Everything is computed in float32 whatever the embeddings' dtype, and every
loss needs O(B^2) memory: the semi-hard and batch-all losses sort each anchor's
negatives instead of building the B x B x B triplet cube.
"""
import functools

import tensorflow as tf

# Squared distances below this are treated as 0 by the safe square root.
_MIN_SQUARED_DISTANCE = 1e-16


def pairwise_distances(embeddings, squared=False):
  """[B, D] -> [B, B] Euclidean (or squared Euclidean) distances.

  The square root is guarded so that coinciding embeddings give a distance of
  0 with a zero (not NaN or infinite) gradient.
  """
  embeddings = tf.cast(embeddings, tf.float32)
  gram = tf.linalg.matmul(embeddings, embeddings, transpose_b=True)
  norms = tf.linalg.diag_part(gram)
  squared_distances = tf.maximum(norms[:, None] - 2.0 * gram + norms[None, :], 0.0)
  # The diagonal is exactly 0, not the rounding error of the line above.
  squared_distances = tf.linalg.set_diag(
      squared_distances, tf.zeros_like(norms))
  if squared:
    return squared_distances
  is_zero = squared_distances < _MIN_SQUARED_DISTANCE
  safe = tf.where(is_zero, tf.ones_like(squared_distances), squared_distances)
  return tf.where(is_zero, tf.zeros_like(safe), tf.sqrt(safe))


def _pair_masks(labels):
  """Returns (positive [B, B], negative [B, B]) boolean masks; a != p for positives."""
  labels = tf.reshape(labels, [-1])
  same = tf.equal(labels[:, None], labels[None, :])
  not_self = tf.logical_not(tf.eye(tf.shape(labels)[0], dtype=tf.bool))
  return tf.logical_and(same, not_self), tf.logical_not(same)


def _masked_mean(values, mask):
  """Mean of values where mask holds; 0 when it holds nowhere."""
  mask = tf.cast(mask, tf.float32)
  return tf.math.divide_no_nan(tf.reduce_sum(values * mask), tf.reduce_sum(mask))


def _statistics(active, positive_distance, negative_distance, weights):
  """Weighted means over the triplets the loss averages over (weights = counts)."""
  weights = tf.cast(weights, tf.float32)
  total = tf.reduce_sum(weights)
  mean = lambda x: tf.math.divide_no_nan(tf.reduce_sum(x * weights), total)
  return {
      "active_fraction": tf.stop_gradient(mean(tf.cast(active, tf.float32))),
      "positive_distance": tf.stop_gradient(mean(positive_distance)),
      "negative_distance": tf.stop_gradient(mean(negative_distance)),
  }


def _sort_negatives(distances, negative):
  """Sorts each anchor's negatives by distance.

  Returns (sorted_distances [B, B], num_negatives [B]):
  row a's first num_negatives[a] entries are its negatives in increasing
  distance; the rest are padding larger than any distance. sorted_distances
  is differentiable with respect to distances.
  """
  padding = tf.stop_gradient(tf.reduce_max(distances)) + 1.0
  padded = tf.where(negative, distances, padding)
  columns = tf.argsort(tf.stop_gradient(padded), axis=1, stable=True)
  sorted_distances = tf.gather(padded, columns, batch_dims=1)
  num_negatives = tf.reduce_sum(tf.cast(negative, tf.int32), axis=1)
  return sorted_distances, num_negatives


def batch_hard_triplet_loss(labels, embeddings, margin, squared=False, soft=False):
  """Batch-hard loss (Hermans et al. 2017): each anchor's hardest positive and negative.

  Over the anchors that have at least one positive and one negative, the mean
  of max(0, max_p d(a,p) - min_n d(a,n) + margin), or when soft of
  softplus(max_p d(a,p) - min_n d(a,n)): the paper's soft margin, which
  replaces the margin (`margin` is not used). 0 when no anchor qualifies.
  """
  distances = pairwise_distances(embeddings, squared)
  positive, negative = _pair_masks(labels)
  valid = tf.logical_and(tf.reduce_any(positive, axis=1), tf.reduce_any(negative, axis=1))
  zeros = tf.zeros_like(distances)
  hardest_positive = tf.reduce_max(tf.where(positive, distances, zeros), axis=1)
  padding = tf.stop_gradient(tf.reduce_max(distances)) + 1.0
  hardest_negative = tf.reduce_min(tf.where(negative, distances, zeros + padding), axis=1)
  gap = hardest_positive - hardest_negative + (0.0 if soft else margin)
  per_anchor = tf.nn.softplus(gap) if soft else tf.nn.relu(gap)
  loss = _masked_mean(per_anchor, valid)
  return loss, _statistics(gap > 0, hardest_positive, hardest_negative, valid)


def batch_semi_hard_triplet_loss(labels, embeddings, margin, squared=False):
  """Semi-hard loss (Schroff et al. 2015) with TensorFlow Addons' fallback.

  For every positive pair (a, p), a != p, whose anchor has a negative: the
  closest negative farther from a than p, or the farthest negative when none
  is farther. The loss is the mean of max(0, d(a,p) - d(a,n) + margin) over
  those pairs; 0 when there is none. Each anchor's negatives are sorted once
  and every positive distance is looked up in them (searchsorted), so memory
  stays O(B^2).
  """
  distances = pairwise_distances(embeddings, squared)
  positive, negative = _pair_masks(labels)
  sorted_distances, num_negatives = _sort_negatives(distances, negative)
  # Index in the sorted row of the first negative strictly farther than p.
  farther = tf.searchsorted(
      tf.stop_gradient(sorted_distances), tf.stop_gradient(distances), side="right")
  last = tf.maximum(num_negatives - 1, 0)[:, None]
  chosen = tf.minimum(farther, last)  # Past the last negative: the farthest one.
  negative_distance = tf.gather(sorted_distances, chosen, batch_dims=1)
  valid = tf.logical_and(positive, (num_negatives > 0)[:, None])
  gap = distances - negative_distance + margin
  loss = _masked_mean(tf.nn.relu(gap), valid)
  return loss, _statistics(gap > 0, distances, negative_distance, valid)


def batch_all_triplet_loss(labels, embeddings, margin, squared=False):
  """Batch-all loss: mean of the positive d(a,p) - d(a,n) + margin over all triplets.

  Triplets are (a, p, n) with a != p sharing a label and n of another label;
  only those with a positive value enter the mean; 0 when none does.
  Instead of the B x B x B cube, for each pair (a, p) the active negatives
  are those with d(a,n) < d(a,p) + margin: a prefix of a's sorted negatives
  whose length comes from searchsorted and whose sum from a cumulative sum.
  """
  distances = pairwise_distances(embeddings, squared)
  positive, negative = _pair_masks(labels)
  sorted_distances, num_negatives = _sort_negatives(distances, negative)
  prefix_sums = tf.concat(
      [tf.zeros_like(sorted_distances[:, :1]), tf.cumsum(sorted_distances, axis=1)], axis=1)
  reach = distances + margin
  active_counts = tf.searchsorted(
      tf.stop_gradient(sorted_distances), tf.stop_gradient(reach), side="left")
  active_counts = tf.minimum(active_counts, num_negatives[:, None])
  active_counts = tf.where(positive, active_counts, tf.zeros_like(active_counts))
  counts = tf.cast(active_counts, tf.float32)
  # Sum over the active negatives n of (d(a,p) + margin - d(a,n)), per pair (a, p).
  pair_sums = counts * reach - tf.gather(prefix_sums, active_counts, batch_dims=1)
  loss = tf.math.divide_no_nan(tf.reduce_sum(pair_sums), tf.reduce_sum(counts))
  return loss, _batch_all_statistics(distances, positive, negative, counts)


def _batch_all_statistics(distances, positive, negative, active_counts):
  """Means over all valid triplets, in O(B^2): pairs weighted by how many triplets hold them."""
  positive = tf.cast(positive, tf.float32)
  negative = tf.cast(negative, tf.float32)
  num_positives = tf.reduce_sum(positive, axis=1)
  num_negatives = tf.reduce_sum(negative, axis=1)
  num_triplets = tf.reduce_sum(num_positives * num_negatives)
  positive_sum = tf.reduce_sum(tf.reduce_sum(distances * positive, axis=1) * num_negatives)
  negative_sum = tf.reduce_sum(tf.reduce_sum(distances * negative, axis=1) * num_positives)
  return {
      "active_fraction": tf.stop_gradient(
          tf.math.divide_no_nan(tf.reduce_sum(active_counts), num_triplets)),
      "positive_distance": tf.stop_gradient(tf.math.divide_no_nan(positive_sum, num_triplets)),
      "negative_distance": tf.stop_gradient(tf.math.divide_no_nan(negative_sum, num_triplets)),
  }


def gather_replicas(labels, embeddings):
  """(labels, embeddings) of the global batch, so that each replica mines over all replicas' examples.

  Call in a replica function (strategy.run) of several replicas; every replica
  then computes the same loss L over the global batch, and the same mining
  statistics. The training step (common/training/train_step.make_train_step) divides
  each replica's loss by the number of replicas R and sums the replicas'
  gradients. That sum is the single-device gradient of L on the concatenated
  batch when each replica contributes R * dL/d(its own embeddings) and nothing
  through the others' (their replicas contribute those): so the gathered copies
  of the other replicas' embeddings are constants here, and this replica's own
  rows pass their gradient back multiplied by R. (Mining only a replica's own
  anchors against constants would lose the gradient that an embedding gets as
  the positive or negative of another replica's anchors.)
  """
  context = tf.distribute.get_replica_context()
  replicas = context.num_replicas_in_sync
  size = tf.shape(embeddings)[:1]
  # An op made here runs on this replica's device; all_gather needs one, and under
  # MultiWorkerMirroredStrategy the replica function's inputs (the labels) have none.
  labels = tf.reshape(labels, [-1])
  all_labels, all_embeddings, sizes = context.all_gather([labels, embeddings, size], axis=0)
  start = tf.reduce_sum(sizes[:context.replica_id_in_sync_group])
  all_embeddings = tf.stop_gradient(all_embeddings)
  return all_labels, tf.concat([all_embeddings[:start], _scale_gradient(embeddings, replicas),
                                all_embeddings[start + size[0]:]], axis=0)


def _scale_gradient(x, factor):
  """x, with the gradient that flows back through it multiplied by factor."""

  @tf.custom_gradient
  def identity(x):
    return tf.identity(x), lambda upstream: upstream * factor

  return identity(x)


# Config name -> loss(labels, embeddings, margin, squared).
LOSSES = {
    "batch_hard": batch_hard_triplet_loss,
    "batch_hard_soft": functools.partial(batch_hard_triplet_loss, soft=True),
    "semi_hard": batch_semi_hard_triplet_loss,
    "batch_all": batch_all_triplet_loss,
}
