"""What the pictures show a person: overlays with only what each panel holds, the ignore label named,
small patches enlarged, names or plain ids; the confusion matrix's counts fitting their cells; the
hardest triplets of a batch."""
import numpy as np
import pytest

from common.training import plots
from segmentation import visualize
from triplet import metrics as triplet_metrics

IGNORE = 255


def scene():
  """A 28 px patch: a disk (class 1) in its middle, the right 4 columns ignored (padding)."""
  rows, columns = np.indices((28, 28))
  label = np.where((rows - 14) ** 2 + (columns - 12) ** 2 < 36, 1, 0).astype(np.uint8)
  label[:, 24:] = IGNORE
  photo = np.full((28, 28, 3), 60, np.uint8)
  photo[label == 1] = [250, 40, 40]  # a red disk on dark ground
  return photo, label


def test_a_prediction_of_all_background_shows_no_object_and_ignored_pixels_are_striped():
  photo, label = scene()
  drawn = np.asarray(visualize.figure(photo, {"truth": label, "prediction": np.zeros_like(label)},
                                      ("background", "disk"), IGNORE))
  side = 28 * 10  # enlarged to at least 256 px, by a whole factor
  assert drawn.shape[1] >= 3 * side
  painted_truth = visualize.paint(plots.upscaled(photo, 256), plots.upscaled(label, 256), IGNORE)
  painted_prediction = visualize.paint(plots.upscaled(photo, 256),
                                       plots.upscaled(np.zeros_like(label), 256), IGNORE)
  # The prediction panel is grey everywhere: the red disk the model missed does not show in colour.
  assert np.all(painted_prediction.max(axis=-1) - painted_prediction.min(axis=-1) <= 1)
  # The truth panel colours the disk with the disk's colour, and the ignored columns in stripes
  # that are no class's colour.
  disk = plots.upscaled(label, 256) == 1
  assert (painted_truth[disk].astype(int) - painted_prediction[disk]).any(axis=-1).all()
  ignored = painted_truth[plots.upscaled(label, 256) == IGNORE]
  stripes = {tuple(c) for c in np.unique(ignored, axis=0)}
  assert len(stripes) == 2 and not stripes & {tuple(c) for c in visualize.colorize(np.arange(21))}
  # Both panels are in the figure as painted.
  rows = [r for r in range(drawn.shape[0] - side + 1)
          if np.array_equal(drawn[r:r + side, side + 8:2 * side + 8], painted_truth)]
  assert rows and np.array_equal(drawn[rows[0]:rows[0] + side, 2 * (side + 8):3 * side + 16], painted_prediction)


@pytest.mark.parametrize("names, expected", [
    (("background", "disk"), ["0 background", "1 disk", "ignored"]),
    (("0", "1"), ["0", "1", "ignored"]),  # a run without names passes its ids as names: "1", not "1 1"
    (None, ["0", "1", "ignored"]),
])
def test_the_legend_names_classes_where_the_run_has_names_and_the_ignore_label_ignored(names, expected):
  assert [visualize.class_label(c, names, IGNORE) for c in (0, 1, IGNORE)] == expected


def test_a_28_px_patch_is_enlarged_by_whole_pixels_to_256_or_more():
  patch = np.arange(28 * 28, dtype=np.int32).reshape(28, 28)
  big = plots.upscaled(patch, visualize.MIN_SIDE)
  assert big.shape == (280, 280)
  np.testing.assert_array_equal(big[::10, ::10], patch)  # nearest neighbour: ids stay ids
  assert plots.upscaled(np.zeros((300, 500)), 256).shape == (300, 500)  # large enough already


def test_counts_that_do_not_fit_their_cells_are_written_compactly_or_left_out():
  assert [plots.compact_count(n) for n in (999, 4374, 12345, 999_960, 4_374_839)] == [
      "999", "4.4k", "12k", "1.0M", "4.4M"]
  confusion = np.full((21, 21), 30_000, np.int64)
  np.fill_diagonal(confusion, 4_374_839)
  names = [f"class {i}" for i in range(21)]
  report = plots.confusion_matrix_figure(confusion, names)
  assert "4.4M" in [t.get_text() for t in report.axes[0].texts]
  renderer = report.canvas.get_renderer()
  cell = report.axes[0].get_window_extent(renderer).width / 21
  assert max(t.get_window_extent(renderer).width for t in report.axes[0].texts) < cell
  plots.save(report, "/dev/null")
  # TensorBoard's, 480 px wide: the names stay (on ticks), the counts would not be legible.
  tensorboard = plots.confusion_matrix_figure(confusion, names, width=plots.TENSORBOARD_WIDTH / 100)
  assert [t.get_text() for t in tensorboard.axes[0].get_yticklabels()] == names
  assert not tensorboard.axes[0].texts
  assert plots.image(tensorboard).shape[1] == plots.TENSORBOARD_WIDTH


def test_hardest_triplets_are_the_farthest_same_and_nearest_other_identity():
  embeddings = np.array([[0.0], [1.0], [3.0], [0.5], [2.0], [10.0]])
  labels = np.array([0, 0, 0, 1, 1, 2])
  anchors, positives, negatives, positive_distances, negative_distances = (
      triplet_metrics.hardest_triplets(embeddings, labels))
  assert anchors.tolist() == [0, 1, 2, 3, 4]  # 5 has no positive
  assert positives.tolist() == [2, 2, 0, 4, 3]
  assert negatives.tolist() == [3, 3, 4, 0, 1]  # ties: the first
  np.testing.assert_allclose(positive_distances, [3, 2, 3, 1.5, 1.5])
  np.testing.assert_allclose(negative_distances, [0.5, 0.5, 1, 0.5, 1])
