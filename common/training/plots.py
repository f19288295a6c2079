"""The evaluation reports' plots, drawn with matplotlib (headless: its Agg backend, no display).

matplotlib because its axes, colour bars, log scales and text placement are what a hand-drawn
PIL image got wrong or lacked (counts, a colour scale, a readable false-accept axis).
"""
import csv
import os

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


def image(figure, max_pixels=300_000):
  """The figure as a [H, W, 3] uint8 array (a TensorBoard image) of at most max_pixels (under the
  default summaries.max_summary_bytes of 1 MiB), and frees it."""
  width, height = figure.get_size_inches()
  figure.set_dpi(min(100.0, (max_pixels / (width * height)) ** 0.5))
  figure.canvas.draw()
  pixels = np.asarray(figure.canvas.buffer_rgba())[..., :3].copy()
  plt.close(figure)
  return pixels


def save(figure, path):
  """Writes the figure as a PNG and frees it (pyplot keeps every open figure otherwise)."""
  figure.savefig(path, dpi=100)
  plt.close(figure)
  return path


def write_confusion_matrix(directory, confusion, class_names, title="confusion matrix"):
  """confusion_matrix.csv (rows: true class, columns: predicted, counts) and its figure,
  confusion_matrix.png, in directory; returns their paths."""
  path = os.path.join(directory, "confusion_matrix.csv")
  with open(path, "w", newline="") as f:
    writer = csv.writer(f)
    writer.writerow(["true \\ predicted", *class_names])
    for name, row in zip(class_names, confusion):
      writer.writerow([name, *(int(c) for c in row)])
  figure = confusion_matrix_figure(confusion, class_names, title)
  return [path, save(figure, os.path.join(directory, "confusion_matrix.png"))]


def roc_figure(curves, far_mark=None, title="ROC: verification pairs"):
  """True accept rate against false accept rate on a logarithmic axis, where VAL@FAR lives (a
  linear axis squeezes FAR < 1e-2 into its first pixels). curves: {label: (far, tar)}, the trained
  network's first; far_mark: a FAR to mark with a line and each curve's VAL there (the highest true
  accept rate at a false accept rate at most far_mark)."""
  figure, axes = plt.subplots(figsize=(6.5, 5))
  smallest = 1.0
  for label, (far, tar) in curves.items():
    far, tar = np.asarray(far, np.float64), np.asarray(tar, np.float64)
    positive = far > 0
    smallest = min(smallest, far[positive].min() if positive.any() else 1.0)
    line, = axes.step(np.where(positive, far, np.nan), tar, where="post", label=label)
    if far_mark is not None:
      val = tar[far <= far_mark].max()
      axes.plot([far_mark], [val], "o", color=line.get_color())
      line.set_label(f"{label} (TAR {val:.3f} at FAR {far_mark:g})")
  if far_mark is not None:
    axes.axvline(far_mark, color="grey", linestyle="--", linewidth=1, label=f"FAR = {far_mark:g}")
  axes.set_xscale("log")
  axes.set_xlim(min(smallest, far_mark or 1.0) / 2, 1.0)
  axes.set_ylim(0, 1.01)
  axes.set_xlabel("false accept rate (different pairs accepted)")
  axes.set_ylabel("true accept rate (same pairs accepted)")
  axes.set_title(title)
  axes.grid(True, which="both", alpha=0.3)
  axes.legend(loc="lower right", fontsize=8)
  figure.tight_layout()
  return figure
