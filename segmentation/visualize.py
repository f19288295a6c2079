"""Class colors (Pascal VOC's color map): predict.py's mask PNGs and overlays, the evaluation's
overlays and the TensorBoard summaries."""
import numpy as np
from PIL import Image
from PIL import ImageDraw


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


def overlay_with_legend(image, class_ids, class_names=None, alpha=0.5, swatch=14):
  """The image [H, W, 3] uint8 with its classes' colours blended in (alpha), above a legend: a
  colour swatch and a name (the id without names) for each class present, in id order."""
  blended = (np.asarray(image, np.float32) * (1 - alpha) + colorize(class_ids) * alpha).astype(np.uint8)
  present = [int(c) for c in np.unique(class_ids)]
  labels = [f"{c} {class_names[c]}" if class_names and c < len(class_names) else str(c) for c in present]
  height, width = blended.shape[:2]
  row, entry = swatch + 6, 160  # px per legend row and entry: a small image gets a wider legend
  columns = max(1, width // entry)
  rows = -(-len(present) // columns)
  canvas = Image.new("RGB", (max(width, entry), height + rows * row + 6), "white")
  canvas.paste(Image.fromarray(blended), (0, 0))
  draw = ImageDraw.Draw(canvas)
  for k, (c, label) in enumerate(zip(present, labels)):
    x, y = 4 + (k % columns) * entry, height + 6 + (k // columns) * row
    draw.rectangle([x, y, x + swatch, y + swatch], fill=tuple(int(v) for v in _COLORS[c]), outline="black")
    draw.text((x + swatch + 4, y + 1), label, fill="black")
  return canvas
