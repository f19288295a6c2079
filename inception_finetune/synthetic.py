"""Inception's synthetic classes (data.source='synthetic'): procedural images of a hue and a stripe
angle per class, written once as class folders of JPEGs."""
import os

import numpy as np
from PIL import Image

from common.data import sources

# Bump the version when the drawing changes, so that cached images are redrawn.
_SYNTHETIC_VERSION = 1


def draw_synthetic_image(class_id, num_classes, size, rng):
  """A procedural uint8 image of a class: its hue and stripe angle, with random phase and noise."""
  yy, xx = np.mgrid[0:size, 0:size].astype(np.float32) / size
  hue = class_id / num_classes
  angle = np.pi * ((class_id * 7) % num_classes) / num_classes
  frequency = 3.0 + (class_id % 3)
  phase = rng.uniform(0, 2 * np.pi)
  stripes = 0.5 + 0.5 * np.sin(2 * np.pi * frequency * (xx * np.cos(angle) + yy * np.sin(angle)) + phase)
  base = np.array([0.5 + 0.5 * np.cos(2 * np.pi * (hue - shift)) for shift in (0, 1 / 3, 2 / 3)])
  brightness = rng.uniform(0.6, 1.0)
  image = brightness * (0.35 + 0.65 * stripes[..., None]) * base[None, None, :]
  image += rng.normal(0, 0.04, image.shape)
  return np.clip(image * 255, 0, 255).astype(np.uint8)


def write_synthetic_classes(cache_dir, seed, num_classes, images_per_class, size):
  """Writes class folders of synthetic JPEGs once; returns (train_dir, eval_dir).

  A fifth of each class (at least one image) goes to eval, so images_per_class is 2 or more
  (data.read_settings checks it). The folder name holds every parameter, so other settings write
  their own set.
  """
  name = (f"synthetic-classes-v{_SYNTHETIC_VERSION}-seed{seed}-classes{num_classes}-"
          f"images{images_per_class}-size{size}")

  def draw(root):
    num_eval = max(images_per_class // 5, 1)
    for class_id in range(num_classes):
      rng = np.random.default_rng([seed, class_id])
      for index in range(images_per_class):
        folder = os.path.join(root, "eval" if index < num_eval else "train", f"class_{class_id:03d}")
        os.makedirs(folder, exist_ok=True)
        image = draw_synthetic_image(class_id, num_classes, size, rng)
        Image.fromarray(image).save(os.path.join(folder, f"{index:04d}.jpg"), quality=90)

  root = sources.write_once(cache_dir, name, draw)
  return os.path.join(root, "train"), os.path.join(root, "eval")
