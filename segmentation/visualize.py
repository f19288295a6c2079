"""Class colors (Pascal VOC's color map): predict.py's mask PNGs and the TensorBoard summaries."""
import numpy as np


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
