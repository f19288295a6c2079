"""Class colours (Pascal VOC's colour map) and the pictures drawn with them: predict.py's mask PNGs
and overlays, the evaluation's overlays and the TensorBoard images.

A panel shows the photo in grey and, in colour, only the classes drawn: colour means a class
(predicted, or true), grey means the background, so an object predicted as background looks like
background. (Blending the photo under every class, background included, showed a missed object in
its own colours, as if found; a grey photo also keeps the photo's colours from passing for classes.)
"""
import numpy as np
from PIL import Image
from PIL import ImageDraw
from PIL import ImageFont

from common.training import plots

BACKGROUND = 0  # the class that is no object (VOC's, the synthetic and digit scenes'): not coloured
IGNORED = "ignored"
MIN_SIDE = 256  # panels are enlarged (nearest neighbour) to at least this: a 28 px patch to 280
_IGNORED_STRIPES = np.array([[255, 255, 255], [255, 105, 180]], np.uint8)  # white and pink: no class's
_GAP = 8


def voc_palette():
  """Pascal VOC's color map: 768 ints, the RGB of indices 0..255 (bits of the index spread over RGB)."""
  palette = []
  for index in range(256):
    rgb = [0, 0, 0]
    for bit in range(8):
      for channel in range(3):
        rgb[channel] |= ((index >> (3 * bit + channel)) & 1) << (7 - bit)
    palette.extend(rgb)
  return palette


_COLORS = np.array(voc_palette(), np.uint8).reshape(256, 3)


def colorize(class_ids):
  """[..., H, W] class ids (0..255; masks are 8-bit) -> [..., H, W, 3] uint8 VOC colors, as in VOC's masks."""
  return _COLORS[np.asarray(class_ids)]


def class_label(class_id, class_names=None, ignore_label=None):
  """"ignored" for the ignore label; else the id and its name ("1 disk"), or the id alone where the
  class has no name (or its name is its id, as a run without names gives)."""
  if class_id == ignore_label:
    return IGNORED
  name = str(class_names[class_id]) if class_names is not None and class_id < len(class_names) else ""
  return f"{class_id} {name}" if name and name != str(class_id) else str(class_id)


def paint(image, class_ids, ignore_label=None):
  """[H, W, 3] uint8: the photo in light grey, each class but the background in its colour (a
  quarter of the photo's texture kept), the ignore label in white and pink stripes."""
  luminance = np.asarray(image, np.float32) @ np.array([0.299, 0.587, 0.114], np.float32)
  grey = np.repeat((110 + 0.55 * luminance)[..., None], 3, axis=-1)  # 110..250: no black, no white
  class_ids = np.asarray(class_ids)
  coloured = (class_ids != BACKGROUND) & (class_ids != ignore_label)
  painted = np.where(coloured[..., None], 0.75 * colorize(class_ids) + 0.25 * grey, grey).astype(np.uint8)
  if ignore_label is not None:
    rows, columns = np.indices(class_ids.shape)
    stripes = _IGNORED_STRIPES[((rows + columns) // 6) % 2]
    painted = np.where((class_ids == ignore_label)[..., None], stripes, painted)
  return painted


def figure(image, masks, class_names=None, ignore_label=None, legend_ids=None, width=None):
  """The photo and a panel per mask ({caption: [H, W] class ids}) side by side, captioned above, over
  a legend of the classes in the masks (or legend_ids) in id order, "ignored" last. By default (the
  report's) the panels are enlarged to at least MIN_SIDE and the text is a 40th of the width; a
  TensorBoard image is `width` wide (plots.TENSORBOARD_BOX's), its panels fitted into it and its text
  plots.CAPTION_PX high, so that TensorBoard shows the text at least as drawn. Returns a PIL image."""
  count = len(masks) + 1
  side = width and (width - (count - 1) * _GAP) // count

  def fit(pixels):
    return plots.fitted(pixels, side, side) if side else plots.upscaled(np.asarray(pixels), MIN_SIDE)

  image = fit(np.asarray(image, np.uint8))
  panels = {"photo": image}
  for caption, class_ids in masks.items():
    panels[caption] = paint(image, fit(class_ids), ignore_label)
  if legend_ids is None:
    legend_ids = np.unique(np.concatenate([np.ravel(m) for m in masks.values()]))
  present = sorted((int(c) for c in legend_ids), key=lambda c: (c == ignore_label, c))
  height, panel_width = image.shape[:2]
  total = max(count * panel_width + (count - 1) * _GAP, width or 0)
  size = plots.CAPTION_PX if width else max(13, total // 40)
  font = ImageFont.load_default(size=size)
  row = size + 8
  labels = [class_label(c, class_names, ignore_label) for c in present]
  entry = size + 12 + max(int(font.getlength(label)) for label in labels) + size  # swatch, text, space
  columns = max(1, total // entry)
  canvas = Image.new("RGB", (max(total, entry), row + height + 6 + -(-len(present) // columns) * row), "white")
  draw = ImageDraw.Draw(canvas)
  for k, (caption, panel) in enumerate(panels.items()):
    x = k * (panel_width + _GAP)
    draw.text((x + 2, 2), caption, fill="black", font=font)
    canvas.paste(Image.fromarray(panel), (x, row))
  for k, (c, label) in enumerate(zip(present, labels)):
    x, y = 4 + (k % columns) * entry, row + height + 6 + (k // columns) * row
    swatch = paint(np.full([size, size, 3], 200, np.uint8), np.full([size, size], c), ignore_label)
    canvas.paste(Image.fromarray(swatch), (x, y))
    draw.rectangle([x, y, x + size - 1, y + size - 1], outline="black")
    draw.text((x + size + 6, y), label, fill="black", font=font)
  return canvas
