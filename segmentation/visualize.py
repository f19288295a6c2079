"""Colors for class-id maps: summaries and predict.py."""
import numpy as np

# Distinct colors for class ids; 255 (ignore) is drawn white.
PALETTE = np.array([
    [0, 0, 0], [230, 25, 75], [60, 180, 75], [255, 225, 25], [0, 130, 200], [245, 130, 48],
    [145, 30, 180], [70, 240, 240], [240, 50, 230], [210, 245, 60], [250, 190, 212], [0, 128, 128],
    [220, 190, 255], [170, 110, 40], [255, 250, 200], [128, 0, 0], [170, 255, 195], [128, 128, 0],
    [255, 215, 180], [0, 0, 128], [128, 128, 128]], np.uint8)


def colorize(class_ids):
  """[..., H, W] class ids -> [..., H, W, 3] uint8 colors; ids beyond the palette wrap around."""
  class_ids = np.asarray(class_ids)
  colors = PALETTE[np.mod(class_ids, len(PALETTE))]
  colors[class_ids == 255] = 255
  return colors
