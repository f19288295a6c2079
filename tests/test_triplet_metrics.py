"""Verification and retrieval metrics on hand-made cases."""
import numpy as np
import pytest

from triplet import lfw_pairs
from triplet import metrics
from triplet import sources


def test_best_threshold_separates_classes_midway():
  distances = [0.1, 0.2, 0.3, 0.9, 1.0, 1.1]
  is_same = [True, True, True, False, False, False]
  threshold = metrics.best_threshold(distances, is_same)
  assert threshold == pytest.approx(0.6)
  assert metrics.accuracy(distances, is_same, threshold) == 1.0


def test_best_threshold_with_overlap_maximizes_accuracy():
  # Below 0.5 accepts 3 same + 1 different (5/6 correct); every other cut does worse.
  distances = [0.1, 0.2, 0.3, 0.4, 0.6, 0.7]
  is_same = [True, False, True, True, False, False]
  threshold = metrics.best_threshold(distances, is_same)
  assert threshold == pytest.approx(0.5)
  assert metrics.accuracy(distances, is_same, threshold) == pytest.approx(5 / 6)


def test_verification_accuracy_scores_each_fold_with_the_other_folds_threshold():
  # Fold 0 separates at 0.5, fold 1 at 1.5; either threshold misclassifies the other fold's
  # 2 crossing pairs: 2 of 4 correct per fold.
  distances = [0.2, 0.4, 0.6, 0.8, 1.2, 1.4, 1.6, 1.8]
  is_same = [True, True, False, False, True, True, False, False]
  result = metrics.verification_accuracy(distances, is_same, num_folds=2)
  assert result["accuracy"] == pytest.approx(0.5)
  assert result["threshold"] == pytest.approx(1.0)
  # One fold: the threshold is fit and scored on everything.
  assert metrics.verification_accuracy(distances, is_same, num_folds=1)["accuracy"] == pytest.approx(0.75)


def test_verification_accuracy_is_perfect_when_classes_separate():
  rng = np.random.default_rng(0)
  distances = np.concatenate([rng.uniform(0, 1, 300), rng.uniform(1.2, 2, 300)])
  is_same = np.arange(600) < 300
  order = rng.permutation(600)
  result = metrics.verification_accuracy(distances[order], is_same[order], num_folds=10)
  assert result["accuracy"] == 1.0 and result["accuracy_std"] == 0.0


def test_threshold_at_far_accepts_at_most_the_allowed_false_pairs():
  different = np.linspace(0.001, 1.0, 2000)  # 2000 x 1e-3 = 2 false accepts allowed
  distances = np.concatenate([different, [0.0005, 0.5]])
  is_same = np.r_[np.zeros(2000, bool), True, True]
  threshold = metrics.threshold_at_far(distances, is_same, 1e-3)
  assert threshold == pytest.approx(different[2])
  tar, far = metrics.rates(distances, is_same, threshold)
  assert far == pytest.approx(2 / 2000)
  assert tar == 0.5


def test_val_at_far_over_folds():
  rng = np.random.default_rng(1)
  # Same pairs: half clearly below every different pair, half mixed in.
  same = np.r_[rng.uniform(0.0, 0.1, 500), rng.uniform(0.5, 2.0, 500)]
  different = rng.uniform(0.2, 2.0, 10000)
  distances = np.r_[same, different]
  is_same = np.r_[np.ones(1000, bool), np.zeros(10000, bool)]
  order = rng.permutation(len(distances))
  result = metrics.val_at_far(distances[order], is_same[order], far=1e-3, num_folds=10)
  assert result["far"] <= 2e-3
  assert 0.5 <= result["val"] < 0.53


def test_val_at_far_protocol_per_fold_pooled_or_unmeasurable():
  # 10 folds of 100 same and 1000 different pairs: a 1e-3 rate is one false accept per fold.
  is_same = np.tile(np.r_[np.ones(100, bool), np.zeros(1000, bool)], 10)
  assert metrics.val_at_far_protocol(is_same, num_folds=10) == ("val_at_far_1e-3", None)
  # LFW's own 300 different pairs per fold are too few per fold, but 2999 together are enough.
  is_same = np.tile(np.r_[np.ones(300, bool), np.zeros(300, bool)], 10)
  is_same[-1] = True
  assert metrics.val_at_far_protocol(is_same, num_folds=10) == (
      "val_at_far_1e-3_pooled", "pooled over all 10 folds (val_at_far_1e-3_pooled): a fold has 299 "
      "different-identity pairs, per fold needs 1000; all folds have 2999")
  # Under 1000 different pairs overall: not measurable at all; the fewest of any fold is named.
  is_same = np.tile(np.r_[np.ones(30, bool), np.zeros(30, bool)], 10)
  is_same[-1] = True
  assert metrics.val_at_far_protocol(is_same, num_folds=10) == (None, (
      "n/a (needs 1000 different-identity pairs per fold, or over all folds for a pooled VAL; the "
      "pairs file has 29 in a fold, 299 overall)"))
  # One fold is all the pairs.
  assert metrics.val_at_far_protocol(np.zeros(1000, bool), num_folds=1) == ("val_at_far_1e-3", None)


def test_pooled_val_at_far_on_an_lfw_sized_set_matches_a_brute_force_count():
  # LFW's layout: 10 folds of 300 same then 300 different pairs, made-up distances.
  rng = np.random.default_rng(7)
  folds = [(rng.gamma(2.0, 0.3, 300), rng.normal(1.4, 0.25, 300)) for _ in range(10)]
  distances = np.concatenate([np.r_[same, different] for same, different in folds])
  is_same = np.tile(np.r_[np.ones(300, bool), np.zeros(300, bool)], 10)
  pairs = [lfw_pairs.Pair(f"a{i}", f"b{i}", bool(s)) for i, s in enumerate(is_same)]
  eval_data = sources.EvalData([], np.zeros([0], np.int64), pairs, num_folds=10)
  # Embeddings on a line, so that each pair's distance is the made-up one.
  embeddings = {}
  for i, distance in enumerate(distances):
    embeddings[f"a{i}"], embeddings[f"b{i}"] = np.array([0.0]), np.array([distance])
  results, _ = metrics.score(embeddings, eval_data)
  assert "val_at_far_1e-3" not in results
  assert metrics.val_at_far_note(eval_data).startswith("pooled over all 10 folds")
  # Brute force: of every threshold (each distance, or above them all) that accepts at most
  # 1e-3 x 3000 = 3 different pairs (distance below it), the largest; VAL over all 3000 same pairs.
  same_all = [d for d, s in zip(distances, is_same) if s]
  different_all = [d for d, s in zip(distances, is_same) if not s]
  best = None
  for threshold in list(distances) + [max(distances) + 1.0]:
    if sum(d < threshold for d in different_all) <= 3 and (best is None or threshold > best):
      best = threshold
  expected_val = sum(d < best for d in same_all) / 3000
  expected_far = sum(d < best for d in different_all) / 3000
  assert 0.05 < expected_val < 0.95  # the made-up set is neither trivial nor hopeless at this rate
  assert results["val_at_far_1e-3_pooled"] == pytest.approx(expected_val, abs=1e-12)
  assert results["val_far_achieved_pooled"] == pytest.approx(expected_far, abs=1e-12)
  assert expected_far == 3 / 3000


def test_raw_pixel_embeddings_are_flattened_unit_vectors():
  images = np.arange(2 * 3 * 3 * 3, dtype=np.float32).reshape(2, 3, 3, 3) - 20
  embeddings = metrics.raw_pixel_embeddings(images)
  assert embeddings.shape == (2, 27)
  np.testing.assert_allclose(np.linalg.norm(embeddings, axis=1), 1.0)
  np.testing.assert_allclose(embeddings[1] * np.linalg.norm(images[1]), images[1].ravel(), rtol=1e-6)


def test_recall_at_k_leave_one_out():
  embeddings = np.array([[0.0], [3.0], [1.0], [1.1], [10.0], [20.0]])
  labels = np.array([0, 0, 1, 1, 2, 3])  # Labels 2 and 3 occur once: not queries.
  # Query 0 -> nearest 2 (label 1), then 3 (1), then 1 (label 0): hit at rank 3.
  # Query 1 -> nearest 3 (label 1), then 2 (1), then 0 (label 0): hit at rank 3.
  # Queries 2 and 3 find each other first.
  recall = metrics.recall_at_k(embeddings, labels, ks=(1, 2, 3, 5))
  assert recall == {1: 0.5, 2: 0.5, 3: 1.0, 5: 1.0}


def test_recall_at_k_needs_a_repeated_label():
  with pytest.raises(ValueError, match="at least twice"):
    metrics.recall_at_k(np.eye(3), [0, 1, 2])


def test_roc_curve_and_area():
  far, tar = metrics.roc_curve([0.1, 0.2, 0.2, 0.4], [True, False, True, False])
  np.testing.assert_allclose(far, [0, 0, 0.5, 1])
  np.testing.assert_allclose(tar, [0, 0.5, 1, 1])
  assert metrics.area_under_curve(far, tar) == pytest.approx(0.875)
  perfect_far, perfect_tar = metrics.roc_curve([0.1, 0.2, 0.8, 0.9], [True, True, False, False])
  assert metrics.area_under_curve(perfect_far, perfect_tar) == 1.0


def test_evaluate_scores_retrieval_and_pairs_of_the_embedded_images():
  pairs = [lfw_pairs.Pair("a1", "a2", True), lfw_pairs.Pair("a1", "b1", False),
           lfw_pairs.Pair("b1", "b2", True), lfw_pairs.Pair("a2", "b2", False)]
  eval_data = sources.EvalData(["a1", "a2", "b1", "b2"], np.array([0, 0, 1, 1]), pairs, num_folds=2)
  paths = metrics.images_to_embed(eval_data)
  assert paths == ["a1", "a2", "b1", "b2"]
  # Two batches of 2-d embeddings; identity a near (1, 0), b near (0, 1).
  batches = [np.array([[1.0, 0.0], [0.9, 0.1]]), np.array([[0.0, 1.0], [0.1, 0.9]])]
  results, (far, tar), embeddings = metrics.evaluate(lambda x: x, batches, paths, eval_data)
  np.testing.assert_array_equal(embeddings["b1"], batches[1][0])
  assert results["recall_at_1"] == results["recall_at_5"] == 1.0
  assert results["verification_accuracy"] == 1.0
  # One different pair per fold cannot measure a 1e-3 false accept rate: no number at all.
  assert "val_at_far_1e-3" not in results and "val_far_achieved" not in results
  assert metrics.val_at_far_note(eval_data) == (
      "n/a (needs 1000 different-identity pairs per fold, or over all folds for a pooled VAL; the "
      "pairs file has 1 in a fold, 2 overall)")
  assert metrics.area_under_curve(far, tar) == 1.0
  assert metrics.evaluate(None, [], [], sources.EvalData([], np.zeros([0], np.int64), [], 0)) == ({}, None, {})


def test_score_reports_val_at_far_when_each_fold_has_1000_different_pairs():
  # Identity a near (1, 0), b near (0, 1); 2 folds of 1 same and 1000 different pairs.
  embeddings = {"a1": np.array([1.0, 0.0]), "a2": np.array([0.9, 0.1]), "b1": np.array([0.0, 1.0])}
  fold = [lfw_pairs.Pair("a1", "a2", True)] + [lfw_pairs.Pair("a1", "b1", False)] * 1000
  eval_data = sources.EvalData([], np.zeros([0], np.int64), fold * 2, num_folds=2)
  results, _ = metrics.score(embeddings, eval_data)
  assert results["val_at_far_1e-3"] == 1.0 and results["val_far_achieved"] == 0.0
  assert metrics.val_at_far_note(eval_data) is None
