"""The pictures of the reports and TensorBoard: plots drawn with matplotlib (headless: its Agg
backend, no display), and images captioned or enlarged with PIL and numpy. No TensorFlow: scripts
that only draw (scripts/make_real_sets.py's masks) import it without TensorFlow's start-up.

matplotlib because its axes, colour bars, log scales and text placement are what a hand-drawn
PIL image got wrong or lacked (counts, a colour scale, a readable false-accept axis).
"""
import csv
import os

import matplotlib

matplotlib.use("Agg")  # before pyplot: files only, no window (and no display needed on a server)

from matplotlib import pyplot as plt  # noqa: E402 (after the backend is chosen)
import numpy as np  # noqa: E402
from PIL import Image  # noqa: E402
from PIL import ImageDraw  # noqa: E402
from PIL import ImageFont  # noqa: E402

# TensorBoard shows an image at the width of its card (335 px at least, a few to a screen) unless
# asked for its actual size: its images are drawn this wide, so their text reads as drawn.
TENSORBOARD_WIDTH = 480
# TensorBoard (2.21) shows every image 350 px wide in its Images tab, and fits it into about
# 366 x 213 px in Time Series: an example drawn within this box, its text CAPTION_PX high, is shown
# at least at its own size in both: its letters and digits about 12 px high.
TENSORBOARD_BOX = (350, 213)
CAPTION_PX = 16
_DPI = 100  # the reports' PNGs
_MIN_FONT = 7  # points (about 10 px at _DPI): smaller text is left out, not written unreadable
_FONT = 9  # the largest text in a cell or on a tick
_LABEL_CHARS = 16  # longer names are cut


def compact_count(count):
  """A count in at most 4 characters: 999, 4.4k, 12k, 4.4M."""
  for unit, size in (("G", 10**9), ("M", 10**6), ("k", 10**3)):
    value = count / size
    if count >= 1000 and round(value, 1) >= 1:  # 999,960 is 1.0M, not 1000k
      return f"{value:.1f}{unit}" if round(value, 1) < 10 else f"{round(value)}{unit}"
  return str(count)


def row_fractions(confusion):
  """Each count as a fraction of its row (its true class): rows sum to 1, a class never seen stays 0."""
  confusion = np.asarray(confusion, np.int64)
  return confusion / np.maximum(confusion.sum(axis=1, keepdims=True), 1)


def confusion_matrix_figure(confusion, class_names, title="confusion matrix", width=None, fractions_in_cells=False):
  """Rows: true classes, columns: predicted; colour: the fraction of the row (its true class), so a
  rare class reads as clearly as a common one; the counts written in the cells where they fit (as
  4.4M where 4,374,839 would not), or with fractions_in_cells the fractions (0.23: what share of a
  class is taken for which, where counts run to millions of pixels), the class names on the axes
  where they fit (else ids at a stride). width: of the figure in inches, by default growing with the
  classes (the report's PNG); TensorBoard's is TENSORBOARD_WIDTH pixels (confusion_matrix_image).
  Returns the figure."""
  confusion = np.asarray(confusion, np.int64)
  count = len(confusion)
  fractions = row_fractions(confusion)
  width = width or min(5.5 + 0.35 * count, 17.5)
  figure, axes = plt.subplots(figsize=(width, 0.85 * width), dpi=_DPI)
  shown = axes.imshow(fractions, cmap="Blues", vmin=0, vmax=1, interpolation="nearest")
  figure.colorbar(shown, ax=axes, fraction=0.046, pad=0.04, label="fraction of the true class")
  axes.set_xlabel("predicted class")
  axes.set_ylabel("true class")
  axes.set_title(title)
  # Laid out with the names first, then the cells measured: names that do not fit give way to ids.
  names = [str(name)[:_LABEL_CHARS] for name in class_names]
  _set_ticks(axes, range(count), names, _FONT)
  figure.tight_layout()
  if 0.75 * _cell_points(figure, axes, count) < _MIN_FONT:
    stride = int(-(-_MIN_FONT // (0.75 * _cell_points(figure, axes, count))))
    _set_ticks(axes, range(0, count, stride), [str(i) for i in range(0, count, stride)], _MIN_FONT)
  else:
    _set_ticks(axes, range(count), names, min(_FONT, 0.75 * _cell_points(figure, axes, count)))
  figure.tight_layout()
  cell = _cell_points(figure, axes, count)
  exact = ([f"{f:.2f}" for f in fractions.ravel()] if fractions_in_cells else
           [f"{c:,}" for c in confusion.ravel()])  # where they fit at full size; else 4.4M (the CSV has them)
  texts = exact if fractions_in_cells or _fitting_font(figure, cell, exact) >= _FONT else [
      compact_count(int(c)) for c in confusion.ravel()]
  font = _fitting_font(figure, cell, texts)
  if font >= _MIN_FONT:
    for k, text in enumerate(texts):
      row, column = divmod(k, count)
      axes.text(column, row, text, ha="center", va="center", fontsize=font,
                color="white" if fractions[row, column] > 0.5 else "black")
  return figure


def _cell_points(figure, axes, count):
  """The side of a cell of the matrix, in points."""
  axes.apply_aspect()  # its square cells, as drawn (a tall title narrows them; drawing would do it later)
  return axes.get_window_extent().width * 72 / figure.dpi / count


def _fitting_font(figure, cell, texts):
  """The font size (points, at most _FONT) at which the widest of the texts fills 85% of a cell's
  width, and a line of it three quarters of its height."""
  probe = figure.text(0, 0, max(texts, key=len), fontsize=_FONT)
  widest = probe.get_window_extent(figure.canvas.get_renderer()).width * 72 / figure.dpi
  probe.remove()
  return min(_FONT, 0.75 * cell, _FONT * 0.85 * cell / widest)


def _set_ticks(axes, ticks, labels, font):
  axes.set_xticks(list(ticks), labels, rotation=90, fontsize=font)
  axes.set_yticks(list(ticks), labels, fontsize=font)


def confusion_matrix_image(confusion, class_names, title="confusion matrix", fractions_in_cells=False):
  """The confusion matrix as TensorBoard shows it: [1, H, W, 3] uint8, TENSORBOARD_WIDTH wide."""
  return image(confusion_matrix_figure(confusion, class_names, title, TENSORBOARD_WIDTH / _DPI,
                                       fractions_in_cells))[None]


def image(figure, width=TENSORBOARD_WIDTH):
  """The figure as a [H, W, 3] uint8 array (a TensorBoard image) `width` pixels wide, and frees it.
  Drawn at the width TensorBoard shows it, so that it needs no "actual size" to be read."""
  figure.set_dpi(width / figure.get_size_inches()[0])
  figure.canvas.draw()
  pixels = np.asarray(figure.canvas.buffer_rgba())[..., :3].copy()
  plt.close(figure)
  return pixels


def save(figure, path):
  """Writes the figure as a PNG and frees it (pyplot keeps every open figure otherwise)."""
  figure.savefig(path, dpi=_DPI)
  plt.close(figure)
  return path


def write_confusion_matrix(directory, confusion, class_names, title="confusion matrix", fractions_in_cells=False):
  """confusion_matrix.csv (rows: true class, columns: predicted, counts) and its figure,
  confusion_matrix.png (confusion_matrix_figure), in directory; returns their paths."""
  path = os.path.join(directory, "confusion_matrix.csv")
  with open(path, "w", newline="") as f:
    writer = csv.writer(f)
    writer.writerow(["true \\ predicted", *class_names])
    for name, row in zip(class_names, confusion):
      writer.writerow([name, *(int(c) for c in row)])
  figure = confusion_matrix_figure(confusion, class_names, title, fractions_in_cells=fractions_in_cells)
  return [path, save(figure, os.path.join(directory, "confusion_matrix.png"))]


def roc_figure(curves, far_mark=None, title="ROC: verification pairs"):
  """True accept rate against false accept rate on a logarithmic axis, where VAL@FAR lives (a
  linear axis squeezes FAR < 1e-2 into its first pixels). curves: {label: (far, tar)}, the trained
  network's first; far_mark: a FAR to mark with a line and each curve's VAL there (the highest true
  accept rate at a false accept rate at most far_mark)."""
  figure, axes = plt.subplots(figsize=(5.5, 4.5), dpi=_DPI)
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
  axes.legend(loc="lower right", fontsize=_FONT)
  figure.tight_layout()
  return figure


# Panels for TensorBoard and the reports, drawn with PIL: pixels kept as they are, text below.


def captioned(image, lines):
  """uint8 [H, W, 3] fitted into TENSORBOARD_BOX (fitted) above lines of (text, colour) CAPTION_PX
  high, on white as wide as the box (or a longer line): the Images tab shows it at its own size, and
  images of one summary have one width."""
  font = ImageFont.load_default(size=CAPTION_PX)
  line = CAPTION_PX + 4
  box_width, box_height = TENSORBOARD_BOX
  image = fitted(image, box_width, box_height - line * len(lines) - 4)
  width = max([box_width] + [int(font.getlength(text)) + 4 for text, _ in lines])
  canvas = Image.new("RGB", (width, image.shape[0] + line * len(lines) + 4), "white")
  canvas.paste(Image.fromarray(image), (0, 0))
  draw = ImageDraw.Draw(canvas)
  for i, (text, colour) in enumerate(lines):
    draw.text((2, image.shape[0] + 2 + line * i), text, fill=colour, font=font)
  return np.asarray(canvas)


def fitted(image, width, height):
  """[H, W, ...] -> the largest that fits width x height, enlarged or shrunk by nearest neighbour
  (class ids stay ids)."""
  image = np.asarray(image)
  factor = min(width / image.shape[1], height / image.shape[0])
  rows = (np.arange(max(1, int(image.shape[0] * factor))) / factor).astype(int)
  columns = (np.arange(max(1, int(image.shape[1] * factor))) / factor).astype(int)
  return image[rows][:, columns]


def to_uint8(images):
  """Float images in [0, 1] (or uint8 ones) -> uint8."""
  images = np.asarray(images)
  return images if images.dtype == np.uint8 else (np.clip(images, 0, 1) * 255).round().astype(np.uint8)


def upscaled(image, at_least):
  """[H, W, ...] -> the image enlarged by a whole factor (nearest neighbour: pixels stay square, class
  ids stay ids) until its longer side is at least at_least pixels; unchanged if it already is."""
  factor = max(1, -(-at_least // max(image.shape[:2])))
  return np.repeat(np.repeat(image, factor, axis=0), factor, axis=1)
