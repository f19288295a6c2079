"""The reports' plots hold what they claim: row fractions as colour, counts in the cells, a colour
bar, class names on the axes (ids at a stride for many classes)."""
import numpy as np

from common.training import plots
from triplet import metrics


def test_confusion_matrix_colours_rows_writes_counts_and_has_a_colour_bar(tmp_path):
  confusion = np.array([[3, 1, 0], [0, 0, 0], [2, 0, 2000]])
  figure = plots.confusion_matrix_figure(confusion, ["pug", "beagle", "akita"])
  grid, colour_bar = figure.axes
  np.testing.assert_allclose(grid.images[0].get_array(),
                             [[0.75, 0.25, 0], [0, 0, 0], [2 / 2002, 0, 2000 / 2002]])
  assert colour_bar.get_ylabel() == "fraction of the true class"
  assert [t.get_text() for t in grid.texts] == ["3", "1", "0", "0", "0", "0", "2", "0", "2,000"]
  assert [t.get_text() for t in grid.get_yticklabels()] == ["pug", "beagle", "akita"]
  assert (grid.get_xlabel(), grid.get_ylabel()) == ("predicted class", "true class")
  path = plots.save(figure, str(tmp_path / "confusion.png"))
  assert open(path, "rb").read(8) == b"\x89PNG\r\n\x1a\n"


def test_confusion_matrix_can_write_each_rows_fractions_in_its_cells():
  """Segmentation's: pixel counts run to millions; what share of a class is taken for which is read."""
  confusion = np.array([[900, 60, 40], [10, 30, 60], [0, 0, 0]])
  figure = plots.confusion_matrix_figure(confusion, ["background", "digit_0", "digit_1"], fractions_in_cells=True)
  grid = figure.axes[0]
  shown = np.asarray(grid.images[0].get_array())
  np.testing.assert_allclose(shown.sum(axis=1), [1, 1, 0])  # a class never seen stays empty
  assert [t.get_text() for t in grid.texts] == ["0.90", "0.06", "0.04", "0.10", "0.30", "0.60",
                                                "0.00", "0.00", "0.00"]
  assert [t.get_text() for t in grid.get_xticklabels()] == ["background", "digit_0", "digit_1"]
  assert [t.get_text() for t in grid.get_yticklabels()] == ["background", "digit_0", "digit_1"]
  plots.save(figure, "/dev/null")


def test_many_classes_get_ids_at_a_stride_and_no_counts():
  figure = plots.confusion_matrix_figure(np.eye(120, dtype=np.int64), [f"breed_{i}" for i in range(120)])
  grid = figure.axes[0]
  labels = [t.get_text() for t in grid.get_xticklabels()]
  stride = int(labels[1])  # 120 names do not fit: every stride-th id
  assert stride > 1 and labels == [str(i) for i in range(0, 120, stride)]
  assert not grid.texts  # nor do counts
  plots.save(figure, "/dev/null")


def test_roc_has_a_log_false_accept_axis_and_marks_each_curves_rate_there():
  # 1000 different pairs: FAR steps of 1e-3. "good" accepts 9 of 10 same pairs before any different one.
  is_same = np.r_[np.ones(10, bool), np.zeros(1000, bool)]
  good = np.r_[np.arange(9), 2000, np.arange(1000) + 10.0]
  bad = np.r_[np.arange(10) + 500.0, np.arange(1000.0)]
  curves = {name: metrics.roc_curve(d, is_same) for name, d in (("trained", good), ("untrained", bad))}
  figure = plots.roc_figure(curves, far_mark=1e-3)
  axes = figure.axes[0]
  assert axes.get_xscale() == "log"
  labels = [t.get_text() for t in axes.get_legend().get_texts()]
  # Brute force: the highest true accept rate among thresholds accepting at most 1 different pair.
  assert labels == ["trained (TAR 0.900 at FAR 0.001)", "untrained (TAR 0.000 at FAR 0.001)", "FAR = 0.001"]
  plots.save(figure, "/dev/null")
