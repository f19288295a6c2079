"""Verification and retrieval metrics of embeddings, in NumPy, and the scoring of an evaluation set.

Verification follows the LFW protocol: pairs come in `num_folds` contiguous
folds (pairs.txt order); each fold is scored with the threshold chosen on the
other folds. A pair is predicted "same" when its distance is below the
threshold.
"""
import numpy as np

# Queries scored per block in retrieval, bounding memory to this many rows of distances.
_RETRIEVAL_BLOCK = 512

# The false accept rate at which VAL is reported (FaceNet's and LFW's 1e-3).
TARGET_FAR = 1e-3
VAL_AT_FAR = "val_at_far_1e-3"
VAL_AT_FAR_POOLED = VAL_AT_FAR + "_pooled"


def pair_distances(embeddings_a, embeddings_b):
  """Euclidean distance between matching rows of two [N, D] arrays."""
  diff = np.asarray(embeddings_a, np.float64) - np.asarray(embeddings_b, np.float64)
  return np.sqrt(np.sum(diff * diff, axis=1))


def _accepted(sorted_distances, thresholds):
  """How many of the sorted distances fall below each threshold."""
  return np.searchsorted(sorted_distances, thresholds, side="left")


def accuracy(distances, is_same, threshold):
  is_same = np.asarray(is_same, bool)
  return float(np.mean((np.asarray(distances) < threshold) == is_same))


def best_threshold(distances, is_same):
  """The threshold of highest accuracy, midway between two observed distances."""
  distances = np.asarray(distances, np.float64)
  is_same = np.asarray(is_same, bool)
  values = np.unique(distances)
  candidates = np.concatenate([[values[0] - 1.0], (values[:-1] + values[1:]) / 2, [values[-1] + 1.0]])
  true_accepts = _accepted(np.sort(distances[is_same]), candidates)
  false_accepts = _accepted(np.sort(distances[~is_same]), candidates)
  correct = true_accepts + (np.sum(~is_same) - false_accepts)
  return float(candidates[np.argmax(correct)])


def split_folds(num_pairs, num_folds):
  """Indices of `num_folds` contiguous folds, LFW's pairs.txt layout."""
  if not 1 <= num_folds <= num_pairs:
    raise ValueError(f"cannot split {num_pairs} pairs into {num_folds} folds")
  return np.array_split(np.arange(num_pairs), num_folds)


def _cross_validate(distances, is_same, num_folds, fit, score):
  """Per fold: fit(train distances, train labels) -> threshold, score on the fold.

  With one fold the threshold is fit and scored on all pairs.
  """
  distances = np.asarray(distances, np.float64)
  is_same = np.asarray(is_same, bool)
  folds = split_folds(len(distances), num_folds)
  results = []
  for test in folds:
    train = np.setdiff1d(np.arange(len(distances)), test) if num_folds > 1 else test
    threshold = fit(distances[train], is_same[train])
    results.append((threshold,) + tuple(score(distances[test], is_same[test], threshold)))
  return np.array(results)


def verification_accuracy(distances, is_same, num_folds=10):
  """LFW protocol: returns {accuracy, accuracy_std, threshold} over the folds."""
  results = _cross_validate(distances, is_same, num_folds, best_threshold,
                            lambda d, s, t: (accuracy(d, s, t),))
  return {"accuracy": float(results[:, 1].mean()), "accuracy_std": float(results[:, 1].std()),
          "threshold": float(results[:, 0].mean())}


def threshold_at_far(distances, is_same, far):
  """The largest threshold accepting at most far x (number of different pairs) of them."""
  different = np.sort(np.asarray(distances, np.float64)[~np.asarray(is_same, bool)])
  allowed = int(np.floor(far * len(different) + 1e-9))
  if allowed >= len(different):
    return float(np.max(distances)) + 1.0
  return float(different[allowed])


def rates(distances, is_same, threshold):
  """(true accept rate, false accept rate) at a threshold; 0 where a class is absent."""
  accepted = np.asarray(distances) < threshold
  is_same = np.asarray(is_same, bool)
  tar = accepted[is_same].mean() if is_same.any() else 0.0
  far = accepted[~is_same].mean() if (~is_same).any() else 0.0
  return float(tar), float(far)


def val_at_far(distances, is_same, far=1e-3, num_folds=10):
  """VAL (true accept rate) at a false accept rate, thresholds fit on the other folds.

  Returns {val, val_std, far}: the mean and spread of VAL and the mean false
  accept rate the thresholds reached on the held-out folds.
  """
  results = _cross_validate(distances, is_same, num_folds,
                            lambda d, s: threshold_at_far(d, s, far), rates)
  return {"val": float(results[:, 1].mean()), "val_std": float(results[:, 1].std()),
          "far": float(results[:, 2].mean())}


def val_at_far_pooled(distances, is_same, far=1e-3):
  """VAL at a false accept rate over all pairs at once, as FaceNet reports it when the folds are too
  small: the threshold accepting at most far x all different pairs, VAL over all same pairs.

  Returns {val, far}: VAL and the false accept rate that threshold reaches.
  """
  val, far_reached = rates(distances, is_same, threshold_at_far(distances, is_same, far))
  return {"val": val, "far": far_reached}


def val_at_far_protocol(is_same, num_folds, far=TARGET_FAR):
  """(metric key, note): how VAL at `far` is measured on these pairs.

  A false accept rate is a count over different pairs: with fewer than 1 / far of them no rate
  as low as `far` can be told apart. (VAL_AT_FAR, None) per fold when every fold has that many;
  else (VAL_AT_FAR_POOLED, why) over all folds pooled when all of them together have; else
  (None, the n/a text).
  """
  is_same = np.asarray(is_same, bool)
  needed = int(np.ceil(1 / far - 1e-9))
  fewest = min(int(np.sum(~is_same[fold])) for fold in split_folds(len(is_same), num_folds))
  if fewest >= needed:
    return VAL_AT_FAR, None
  overall = int(np.sum(~is_same))
  if overall >= needed:
    return VAL_AT_FAR_POOLED, (f"pooled over all {num_folds} folds ({VAL_AT_FAR_POOLED}): a fold has "
                               f"{fewest} different-identity pairs, per fold needs {needed}; all "
                               f"folds have {overall}")
  return None, (f"n/a (needs {needed} different-identity pairs per fold, or over all folds for a "
                f"pooled VAL; the pairs file has {fewest} in a fold, {overall} overall)")


def recall_at_k(embeddings, labels, ks=(1, 5)):
  """Leave-one-out retrieval: the fraction of queries with a same-label item among their k nearest.

  Every embedding is a query against all others; queries whose label occurs
  only once (nothing to find) are left out. Returns {k: recall}.
  """
  embeddings = np.asarray(embeddings, np.float64)
  labels = np.asarray(labels)
  _, inverse, counts = np.unique(labels, return_inverse=True, return_counts=True)
  queries = np.flatnonzero(counts[inverse] > 1)
  if not len(queries):
    raise ValueError("recall@k needs a label that occurs at least twice")
  max_k = min(max(ks), len(labels) - 1)
  squared_norms = np.sum(embeddings * embeddings, axis=1)
  hits = {k: 0 for k in ks}
  for start in range(0, len(queries), _RETRIEVAL_BLOCK):
    block = queries[start:start + _RETRIEVAL_BLOCK]
    distances = squared_norms[block, None] - 2 * embeddings[block] @ embeddings.T + squared_norms[None]
    # Rounded below any distance that matters: the matrix product's last bits vary with the arrays'
    # memory alignment, and near-ties (an untrained network's embeddings) would rank by that noise.
    distances = np.round(distances, 9)
    distances[np.arange(len(block)), block] = np.inf  # A query does not retrieve itself.
    nearest = np.argpartition(distances, max_k - 1, axis=1)[:, :max_k]
    order = np.argsort(np.take_along_axis(distances, nearest, axis=1), axis=1, kind="stable")
    nearest = np.take_along_axis(nearest, order, axis=1)
    match = labels[nearest] == labels[block, None]
    for k in ks:
      hits[k] += int(np.sum(match[:, :k].any(axis=1)))
  return {k: hits[k] / len(queries) for k in ks}


def hardest_triplets(embeddings, labels):
  """Batch-hard mining in NumPy, for pictures of it: per anchor that has both, its farthest image of
  the same label and its nearest of another. Returns (anchors, positives, negatives, positive
  distances, negative distances), index arrays and Euclidean distances."""
  embeddings, labels = np.asarray(embeddings, np.float64), np.asarray(labels)
  squared = np.sum(embeddings * embeddings, axis=1)
  distances = np.sqrt(np.maximum(squared[:, None] - 2 * embeddings @ embeddings.T + squared[None], 0))
  same = labels[:, None] == labels[None]
  positive = same & ~np.eye(len(labels), dtype=bool)
  positives = np.where(positive, distances, -np.inf).argmax(axis=1)
  negatives = np.where(same, np.inf, distances).argmin(axis=1)
  anchors = np.flatnonzero(positive.any(axis=1) & ~same.all(axis=1))
  return (anchors, positives[anchors], negatives[anchors], distances[anchors, positives[anchors]],
          distances[anchors, negatives[anchors]])


def roc_curve(distances, is_same):
  """(false accept rates, true accept rates) as the threshold sweeps over every distance, from (0, 0) to (1, 1)."""
  distances = np.asarray(distances, np.float64)
  is_same = np.asarray(is_same, bool)
  order = np.argsort(distances, kind="stable")
  sorted_distances, sorted_same = distances[order], is_same[order]
  # One point per distinct distance: tied pairs are accepted together.
  last_of_tie = np.r_[sorted_distances[1:] != sorted_distances[:-1], True]
  true_accepts = np.cumsum(sorted_same)[last_of_tie]
  false_accepts = np.cumsum(~sorted_same)[last_of_tie]
  tar = np.r_[0.0, true_accepts / max(is_same.sum(), 1)]
  far = np.r_[0.0, false_accepts / max((~is_same).sum(), 1)]
  return far, tar


def area_under_curve(x, y):
  """Trapezoidal area under y(x) for increasing x."""
  x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
  return float(np.sum(np.diff(x) * (y[1:] + y[:-1]) / 2))


# Scoring an evaluation set (data.EvalData).


def images_to_embed(eval_data):
  """Every image the metrics need, each once."""
  pair_paths = [p for pair in eval_data.pairs for p in pair[:2]]
  return list(dict.fromkeys(list(eval_data.paths) + pair_paths))


def compute_embeddings(embed_fn, dataset):
  return np.concatenate([np.asarray(embed_fn(images)) for images in dataset], axis=0)


def has_retrieval(eval_data):
  """Whether recall@k can be measured: some held-out identity has two images."""
  return bool(len(eval_data.paths)) and np.max(np.bincount(eval_data.labels)) > 1


def score(embeddings_by_path, eval_data):
  """Returns (metrics dict, (false accept rates, true accept rates) or None)."""
  results = {}
  if has_retrieval(eval_data):
    embeddings = np.stack([embeddings_by_path[p] for p in eval_data.paths])
    recall = recall_at_k(embeddings, eval_data.labels, ks=(1, 5))
    results.update({f"recall_at_{k}": value for k, value in recall.items()})
  if not eval_data.pairs:
    return results, None
  distances = pair_distances(np.stack([embeddings_by_path[p.path_a] for p in eval_data.pairs]),
                             np.stack([embeddings_by_path[p.path_b] for p in eval_data.pairs]))
  is_same = np.array([p.is_same for p in eval_data.pairs])
  verification = verification_accuracy(distances, is_same, eval_data.num_folds)
  results.update({
      "verification_accuracy": verification["accuracy"],
      "verification_accuracy_std": verification["accuracy_std"],
      "verification_threshold": verification["threshold"],
  })
  # Per fold, pooled, or left out (not reported as a number) as the pairs allow (val_at_far_protocol).
  key, _ = val_at_far_protocol(is_same, eval_data.num_folds)
  if key == VAL_AT_FAR:
    val = val_at_far(distances, is_same, TARGET_FAR, eval_data.num_folds)
    results.update({VAL_AT_FAR: val["val"], "val_far_achieved": val["far"]})
  elif key == VAL_AT_FAR_POOLED:
    val = val_at_far_pooled(distances, is_same, TARGET_FAR)
    results.update({VAL_AT_FAR_POOLED: val["val"], "val_far_achieved_pooled": val["far"]})
  return results, roc_curve(distances, is_same)


def val_at_far_note(eval_data):
  """The note of val_at_far_protocol (pooled, or n/a) for an evaluation set's pairs, or None."""
  if not eval_data.pairs:
    return None
  return val_at_far_protocol([p.is_same for p in eval_data.pairs], eval_data.num_folds)[1]


def raw_pixel_embeddings(images):
  """The baseline "network": normalized crops flattened and L2-normalized."""
  flat = np.asarray(images, np.float64).reshape(len(images), -1)
  return flat / np.maximum(np.linalg.norm(flat, axis=1, keepdims=True), 1e-12)


def evaluate(embed_fn, dataset, paths, eval_data):
  """Embeds `dataset` (the images of `paths`, in order) and scores them: score()'s (metrics, ROC or
  None) and {path: embedding}."""
  if not paths:
    return {}, None, {}
  embeddings = dict(zip(paths, compute_embeddings(embed_fn, dataset)))
  return (*score(embeddings, eval_data), embeddings)
