"""The evaluation reports' plots, drawn with matplotlib (headless: its Agg backend, no display).

matplotlib because its axes, colour bars, log scales and text placement are what a hand-drawn
PIL image got wrong or lacked (counts, a colour scale, a readable false-accept axis).
"""
import matplotlib

matplotlib.use("Agg")  # before pyplot: files only, no window (and no display needed on a server)

from matplotlib import pyplot as plt  # noqa: E402 (after the backend is chosen)
import numpy as np  # noqa: E402

# Counts are written in the cells up to this many classes, names on the axes up to this many.
MAX_ANNOTATED_CLASSES = 30
MAX_NAMED_CLASSES = 40
_LABEL_CHARS = 16  # longer names are cut


def confusion_matrix_figure(confusion, class_names, title="confusion matrix"):
  """Rows: true classes, columns: predicted; colour: the fraction of the row (its true class), so a
  rare class reads as clearly as a common one; the counts are written in the cells (up to
  MAX_ANNOTATED_CLASSES classes). Returns the matplotlib figure."""
  confusion = np.asarray(confusion, np.int64)
  count = len(confusion)
  fractions = confusion / np.maximum(confusion.sum(axis=1, keepdims=True), 1)
  side = min(4 + 0.35 * count, 16)
  figure, axes = plt.subplots(figsize=(side + 1.5, side))
  shown = axes.imshow(fractions, cmap="Blues", vmin=0, vmax=1, interpolation="nearest")
  figure.colorbar(shown, ax=axes, fraction=0.046, pad=0.04, label="fraction of the true class")
  if count <= MAX_NAMED_CLASSES:
    labels = [str(name)[:_LABEL_CHARS] for name in class_names]
    ticks = range(count)
  else:  # ids at a stride that stays readable
    ticks = range(0, count, -(-count // MAX_NAMED_CLASSES))
    labels = [str(i) for i in ticks]
  axes.set_xticks(list(ticks), labels, rotation=90)
  axes.set_yticks(list(ticks), labels)
  axes.set_xlabel("predicted class")
  axes.set_ylabel("true class")
  axes.set_title(title)
  if count <= MAX_ANNOTATED_CLASSES:
    for row in range(count):
      for column in range(count):
        axes.text(column, row, f"{confusion[row, column]:,}", ha="center", va="center", fontsize=8,
                  color="white" if fractions[row, column] > 0.5 else "black")
  figure.tight_layout()
  return figure


def save(figure, path):
  """Writes the figure as a PNG and frees it (pyplot keeps every open figure otherwise)."""
  figure.savefig(path, dpi=100)
  plt.close(figure)
  return path
