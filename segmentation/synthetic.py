"""Synthetic segmentation scenes: textured shapes on a textured background, per-pixel labels.

Classes differ by shape and texture only: every shape, and the background, gets its own colour
drawn at random from most of the RGB cube, so that a pixel's colour says nothing about its class
and a model has to learn the textures (flat, stripes, checks) and outlines (disk, rectangle,
triangle, diamond) a 28x28 patch shows. Scenes are drawn with NumPy, deterministically from a
seed, and written once as PNG files (images and class-id masks), so that training reads them from
files like real data.
"""
import os

import numpy as np
from PIL import Image

from common.data import sources

CLASS_NAMES = ("background", "disk", "rectangle", "triangle", "diamond")
# Colours are drawn per channel from this range; the margin to 0 and 255 leaves the texture room.
_COLOR_RANGE = (35.0, 220.0)
# A shape's colour is the first of a few draws this far (RGB distance) from the background's, so
# that shapes stand out from their background as in photos; the same rule for every class.
_MIN_CONTRAST = 60.0
_TEXTURE_AMPLITUDE = (20.0, 35.0)  # per instance
_NOISE_STDDEV = 8.0
_SHAPES_PER_SCENE = (3, 6)  # inclusive range
_SHAPE_RADIUS = (0.1, 0.25)  # fraction of the image size
# Bump when the drawing changes, so that old caches are not reused.
_VERSION = 2


def _texture(label, yy, xx, rng):
  """A pattern in [-1, 1] for each class, at every pixel; the periodic ones at a random phase."""
  if label == 0:  # grain: a random value in each 2x2 block
    height, width = yy.shape
    blocks = rng.uniform(-1, 1, size=((height + 1) // 2, (width + 1) // 2))
    return np.repeat(np.repeat(blocks, 2, axis=0), 2, axis=1)[:height, :width]
  if label == 1:  # plain
    return np.zeros_like(yy)
  yy, xx = yy + rng.uniform(0, 12), xx + rng.uniform(0, 12)  # 12: a multiple of every period
  if label == 2:  # horizontal stripes, period 4
    return np.where((yy.astype(np.int32) // 2) % 2 == 0, 1.0, -1.0)
  if label == 3:  # checkerboard of 3x3 squares
    return np.where((yy.astype(np.int32) // 3 + xx.astype(np.int32) // 3) % 2 == 0, 1.0, -1.0)
  return np.sin((yy + xx) * (2 * np.pi / 6))  # diagonal stripes, period 6 along each axis


def _shape_mask(label, yy, xx, cy, cx, radius, rng):
  """Boolean mask of the shape of a class centered at (cy, cx)."""
  if label == 1:
    return (yy - cy) ** 2 + (xx - cx) ** 2 <= radius ** 2
  if label == 2:
    half_h, half_w = radius * rng.uniform(0.6, 1.0, size=2)
    return (np.abs(yy - cy) <= half_h) & (np.abs(xx - cx) <= half_w)
  if label == 3:
    angles = rng.uniform(0, 2 * np.pi) + np.array([0, 2, 4]) * np.pi / 3
    vy, vx = cy + radius * np.sin(angles), cx + radius * np.cos(angles)
    # Inside when on the same side of all three edges.
    sides = [(xx - vx[i]) * (vy[(i + 1) % 3] - vy[i]) - (yy - vy[i]) * (vx[(i + 1) % 3] - vx[i])
             for i in range(3)]
    return ((sides[0] >= 0) & (sides[1] >= 0) & (sides[2] >= 0)) | (
        (sides[0] <= 0) & (sides[1] <= 0) & (sides[2] <= 0))
  return np.abs(yy - cy) + np.abs(xx - cx) <= radius


def _contrasting_color(background, rng):
  """A random colour at least _MIN_CONTRAST from the background's (the farthest of a few draws)."""
  candidates = rng.uniform(*_COLOR_RANGE, size=(8, 3))
  distances = np.linalg.norm(candidates - background, axis=1)
  far = np.flatnonzero(distances >= _MIN_CONTRAST)
  return candidates[far[0] if far.size else distances.argmax()]


def _paint(image, where, label, color, yy, xx, rng):
  shade = color + rng.uniform(*_TEXTURE_AMPLITUDE) * _texture(label, yy, xx, rng)[..., None]
  image[where] = shade[where]


def draw_scene(size, num_classes, rng):
  """One scene: (uint8 image [size, size, 3], uint8 class ids [size, size])."""
  yy, xx = np.mgrid[0:size, 0:size].astype(np.float32)
  image = np.empty((size, size, 3), np.float32)
  labels = np.zeros((size, size), np.uint8)
  background = rng.uniform(*_COLOR_RANGE, size=3)
  _paint(image, np.ones_like(labels, bool), 0, background, yy, xx, rng)
  for _ in range(rng.integers(_SHAPES_PER_SCENE[0], _SHAPES_PER_SCENE[1] + 1)):
    label = int(rng.integers(1, num_classes))
    cy, cx = rng.uniform(0, size, size=2)
    radius = size * rng.uniform(*_SHAPE_RADIUS)
    where = _shape_mask(label, yy, xx, cy, cx, radius, rng)
    _paint(image, where, label, _contrasting_color(background, rng), yy, xx, rng)
    labels[where] = label
  image += rng.normal(0, _NOISE_STDDEV, size=image.shape)
  return np.clip(np.round(image), 0, 255).astype(np.uint8), labels


def _write_split(folder, count, size, num_classes, rng):
  images_dir, masks_dir = os.path.join(folder, "images"), os.path.join(folder, "masks")
  os.makedirs(images_dir)
  os.makedirs(masks_dir)
  for i in range(count):
    image, labels = draw_scene(size, num_classes, rng)
    Image.fromarray(image).save(os.path.join(images_dir, f"{i:05d}.png"))
    Image.fromarray(labels).save(os.path.join(masks_dir, f"{i:05d}.png"))


def write_scenes(cache_dir, seed, size, num_train, num_eval, num_classes):
  """Writes the scenes once; returns {'train': (images_dir, masks_dir), 'eval': (...)}.

  The folder name holds every parameter, so a run with other settings writes
  its own scenes; an existing folder is reused (common.data.sources.write_once).
  """
  if not 2 <= num_classes <= len(CLASS_NAMES):
    raise ValueError(f"synthetic scenes have 2 to {len(CLASS_NAMES)} classes, got {num_classes}")
  name = f"synthetic-v{_VERSION}-seed{seed}-size{size}-train{num_train}-eval{num_eval}-classes{num_classes}"

  def write(folder):
    for split, count in (("train", num_train), ("eval", num_eval)):
      _write_split(os.path.join(folder, split), count, size, num_classes,
                   np.random.default_rng([seed, 0 if split == "train" else 1]))

  root = sources.write_once(cache_dir, name, write)
  return {split: (os.path.join(root, split, "images"), os.path.join(root, split, "masks"))
          for split in ("train", "eval")}
