"""Classification metrics on a hand-made case; the report files."""
import csv

import numpy as np
from PIL import Image
import tensorflow as tf

from inception_finetune import metrics

# Four images, six classes. Worked out by hand:
#   0: label 2 scores highest                          -> top-1 and top-5 hit, predicted 2
#   1: label 0, four classes score higher              -> top-5 hit only, predicted 1
#   2: label 5, five classes score higher              -> miss, predicted 0
#   3: label 1, tied for first with class 2            -> top-1 hit (ties count), predicted 1
LOGITS = np.array([[0, 1, 5, 2, 3, 4],
                   [1, 5, 4, 3, 2, 0],
                   [6, 5, 4, 3, 2, 1],
                   [0, 3, 3, 1, 1, 1]], np.float32)
LABELS = np.array([2, 0, 5, 1], np.int32)


def test_top_k_on_the_hand_made_case():
  np.testing.assert_array_equal(metrics.top_k_hits(LABELS, LOGITS, 1), [True, False, False, True])
  np.testing.assert_array_equal(metrics.top_k_hits(LABELS, LOGITS, 5), [True, True, False, True])
  assert metrics.top_k_hits(LABELS, LOGITS, 10).all()  # k beyond the class count


def test_top_k_agrees_with_tensorflow():
  rng = np.random.default_rng(0)
  logits = rng.normal(size=(64, 12)).astype(np.float32)
  labels = rng.integers(0, 12, 64)
  for k in (1, 3, 5):
    np.testing.assert_array_equal(metrics.top_k_hits(labels, logits, k),
                                  tf.math.in_top_k(labels, logits, k).numpy())


def test_evaluate_on_the_hand_made_case():
  # The "images" are the logits and the model is the identity, two per batch.
  dataset = tf.data.Dataset.from_tensor_slices((LOGITS, LABELS)).batch(2)
  result = metrics.evaluate(tf.identity, dataset, num_classes=6)
  assert result.top1 == 0.5 and result.top5 == 0.75
  expected_confusion = np.zeros((6, 6), np.int64)
  for label, predicted in ((2, 2), (0, 1), (5, 0), (1, 1)):
    expected_confusion[label, predicted] += 1
  np.testing.assert_array_equal(result.confusion, expected_confusion)
  np.testing.assert_array_equal(result.per_class_accuracy, [0, 1, 1, np.nan, np.nan, 0])
  log_softmax = LOGITS - np.log(np.exp(LOGITS).sum(axis=1, keepdims=True))
  expected_loss = -log_softmax[np.arange(4), LABELS].mean()
  scalars = result.scalars()
  assert scalars["mean_per_class_accuracy"] == 0.5
  np.testing.assert_allclose(scalars["loss"], expected_loss, rtol=1e-6)


def test_report_files(tmp_path):
  confusion = np.array([[3, 1, 0], [0, 0, 0], [2, 0, 2]])
  result = metrics.EvalResult(top1=5 / 8, top5=1.0, loss=0.5, confusion=confusion)
  paths = metrics.write_report(result, str(tmp_path), ["pug", "beagle", "akita"])
  assert paths == [str(tmp_path / name) for name in ("per_class_accuracy.csv", "confusion_matrix.csv",
                                                     "confusion_matrix.png")]
  with open(tmp_path / "per_class_accuracy.csv") as f:
    assert list(csv.reader(f)) == [["id", "name", "images", "accuracy"], ["0", "pug", "4", "0.750000"],
                                   ["1", "beagle", "0", ""], ["2", "akita", "4", "0.500000"]]
  with open(tmp_path / "confusion_matrix.csv") as f:
    rows = list(csv.reader(f))
  assert rows[0] == ["true \\ predicted", "pug", "beagle", "akita"]
  assert rows[3] == ["akita", "2", "0", "2"]
  with Image.open(tmp_path / "confusion_matrix.png") as image:  # drawn by common/plots (tests/test_plots.py)
    assert image.format == "PNG" and min(image.size) > 200


def test_chance_top1():
  confusion = np.array([[3, 1, 0], [0, 0, 0], [2, 0, 4]])  # 4, 0 and 6 evaluation images
  chance = metrics.chance_top1(confusion, train_counts=np.array([5, 1, 9]))
  assert chance == {"chance_top1_majority": 0.6, "chance_top1_uniform": 1 / 3}  # class 2: 6 of 10
