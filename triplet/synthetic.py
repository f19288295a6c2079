"""Built-in synthetic identities for the triplet trainer: random glyphs drawn as PNG folders, one per
identity (LFW's layout), plus an LFW-style pairs.txt; written once under a cache folder."""
import collections
import os

import numpy as np
from PIL import Image
from PIL import ImageDraw

from common.data import sources
from triplet import lfw_pairs

SyntheticData = collections.namedtuple("SyntheticData", ["train_dir", "eval_dir", "pairs_path"])


def make_synthetic_identities(cache_dir, num_train, num_eval, images_per_identity, image_size,
                              seed, num_folds=10, pairs_per_fold=30, grid_size=4):
  """Writes (once) synthetic identities as PNG folders plus an LFW-style pairs file.

  An identity is a random glyph: cells of a grid_size x grid_size grid, at
  least 3 cells apart (Hamming distance) from every other identity's glyph.
  Each image draws it with random position, scale, colors (a bright glyph on
  a dark background) and pixel noise, so that only the glyph's shape tells identities
  apart. Evaluation identities are disjoint from training ones. Returns
  SyntheticData(train_dir, eval_dir, pairs_path) under cache_dir, in a folder
  named after the arguments; an existing folder is reused.
  """

  def write(directory):
    rng = np.random.default_rng(seed)
    glyphs = _make_glyphs(num_train + num_eval, grid_size, rng)
    for split, split_glyphs in (("train", glyphs[:num_train]), ("eval", glyphs[num_train:])):
      for i, glyph in enumerate(split_glyphs):
        name = f"{split}{i:05d}"
        os.makedirs(os.path.join(directory, split, name))
        for j in range(1, images_per_identity + 1):
          Image.fromarray(_render_glyph(glyph, image_size, rng)).save(
              os.path.join(directory, split, name, f"{name}_{j:04d}.png"))
    lfw_pairs.write_pairs_file(os.path.join(directory, "pairs.txt"),
                               {f"eval{i:05d}": images_per_identity for i in range(num_eval)},
                               num_folds, pairs_per_fold, rng)

  key = (f"synthetic_seed{seed}_train{num_train}_eval{num_eval}_k{images_per_identity}_"
         f"{image_size}px_grid{grid_size}_pairs{num_folds}x{pairs_per_fold}")
  directory = sources.write_once(cache_dir, key, write)
  return SyntheticData(os.path.join(directory, "train"), os.path.join(directory, "eval"),
                       os.path.join(directory, "pairs.txt"))


def _make_glyphs(count, grid_size, rng, min_cells=3, min_hamming=3):
  """`count` distinct boolean grids, pairwise at least min_hamming cells apart."""
  glyphs = []
  for _ in range(1000 * count):
    glyph = rng.random((grid_size, grid_size)) < 0.5
    if glyph.sum() >= min_cells and all(np.sum(glyph != g) >= min_hamming for g in glyphs):
      glyphs.append(glyph)
      if len(glyphs) == count:
        return glyphs
  raise ValueError(f"cannot draw {count} glyphs {min_hamming} cells apart on a "
                   f"{grid_size}x{grid_size} grid; use a larger grid")


def _render_glyph(glyph, size, rng, noise_std=10.0):
  """One image of an identity: the glyph with random placement, scale, colors and noise.

  The glyph is always brighter than the background: with both polarities a
  small network needs far longer to learn the shapes.
  """
  background = tuple(int(c) for c in rng.integers(0, 110, 3))
  foreground = tuple(int(c) for c in rng.integers(150, 256, 3))
  grid_size = glyph.shape[0]
  cell = size * 0.6 * rng.uniform(0.8, 1.1) / grid_size
  left, top = size / 2 + rng.uniform(-0.08, 0.08, 2) * size - cell * grid_size / 2
  image = Image.new("RGB", (size, size), background)
  draw = ImageDraw.Draw(image)
  for row, column in zip(*np.nonzero(glyph)):
    x, y = left + column * cell, top + row * cell
    draw.rectangle([x, y, x + cell - 1, y + cell - 1], fill=foreground)
  pixels = np.asarray(image, np.float32) + rng.normal(0.0, noise_std, (size, size, 3))
  return np.clip(pixels, 0, 255).astype(np.uint8)
