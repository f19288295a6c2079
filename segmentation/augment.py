"""Training augmentation of segmentation images and masks inside tf.data, stateless and seeded.

Every draw is a function of the element's seed (input_pipeline.make_train: the run's seed and the
image's place in the stream), so a resumed run draws what the uninterrupted one drew. Each
augmentation is off at its default; with all of them off the patches are
common/data/pipeline.sample_patches' own, op for op.

The patches (random_patches, each patch its own draws):
  scale: the image scaled by a factor whose logarithm is uniform over the log of scale_range (with
    (0.5, 2.0) half the patches shrink the scene and half enlarge it), the image sampled bilinearly
    and the mask at the nearest pixel (a label is never a blend of two);
  crop padding: crop_padding pixels around the scaled image (image 0, mask the ignore label), so that
    a patch can shift the scene by up to that much; a patch larger than the padded image holds all
    of it, at a random place, with the same padding around it;
  rotation: the patch turned about its centre by an angle uniform within rotation degrees either way;
  flip: left and right swapped in image and mask together, half the time.
tf.image.crop_and_resize samples them all but the rotation and the crop in one op for the image and
one for the mask, at the patch's pixels only: scaling the whole image first and cutting it after cost
twice as much. A rotation needs a projective warp, which samples the same way at about 3.5 times the
CPU (so only rotation uses it). At scale 1 a patch starts on a whole pixel, so that shifts and flips copy
pixels exactly.
Then, on the image's patches alone:
  photometric distortion: brightness, contrast, saturation and hue jitter, one draw for the patches
    of an image (tf.image.stateless_random_*).
"""
import dataclasses
import math

import tensorflow as tf

from common.contract import checks
from common.data import pipeline

# Each draw's seed is the element's seed folded with its own number, so that no two draws share one
# and sample_patches' crop (which takes the element's seed itself) shares none.
GEOMETRY, BRIGHTNESS, CONTRAST, SATURATION, HUE, ROTATION = range(1, 7)
# data.augment.scale_range's bound: at 4 an image has 16 times its pixels to resize before the crop.
MAX_SCALE = 4.0


@dataclasses.dataclass(frozen=True)
class Augmentation:
  """What configs/segmentation.py's data.augment section says, read and checked by
  segmentation/data.read_settings (the TrainSettings' augment); the defaults are all off."""
  scale_range: tuple = (1.0, 1.0)  # (low, high) factors
  crop_padding: int = 0  # pixels around the scaled image
  flip: bool = False
  rotation: float = 0.0  # patches turned by up to this many degrees either way
  brightness: float = 0.0  # at most this is added to pixels in [0, 1]
  contrast: float = 0.0  # each image's contrast times a factor in [1 - contrast, 1 + contrast]
  saturation: float = 0.0  # saturation times a factor in [1 - saturation, 1 + saturation]
  hue: float = 0.0  # hue turned by at most this fraction of the colour wheel

  CHECKS = {
      "scale_range": checks.Check(
          lambda v: (isinstance(v, (tuple, list)) and len(v) == 2 and all(checks.POSITIVE.ok(x) for x in v)
                     and v[0] <= v[1] <= MAX_SCALE), f"(low, high) with 0 < low <= high <= {MAX_SCALE:g}"),
      "crop_padding": checks.NON_NEGATIVE_INT,
      "flip": checks.BOOL,
      "rotation": checks.number(0, 180),
      "brightness": checks.FRACTION,
      "contrast": checks.FRACTION,
      "saturation": checks.FRACTION,
      "hue": checks.number(0, 0.5),  # half the colour wheel either way reaches every hue
  }

  @property
  def moves(self):
    return tuple(self.scale_range) != (1.0, 1.0) or self.crop_padding > 0 or self.flip or self.rotation > 0

  @property
  def distorts_colours(self):
    return any((self.brightness, self.contrast, self.saturation, self.hue))


def patches(image, mask, augmentation, patch_size, count, seed, ignore_label):
  """`count` patch_size patches of a uint8 image [h, w, 3] and its mask [h, w], placed, scaled and
  flipped as `augmentation` says, their colours distorted; seed: int64 [2], the element's.

  Returns (uint8 [count, p, p, 3], uint8 [count, p, p]); padding is 0 in the image, ignore_label in
  the mask.
  """
  if augmentation.moves:
    images, masks = random_patches(image, mask, augmentation, patch_size, count, seed, ignore_label)
  else:
    images, masks = pipeline.sample_patches(image, mask, patch_size, count, seed, ignore_label)
  return distort_colours(images, augmentation, seed), masks


def random_patches(image, mask, augmentation, patch_size, count, seed, ignore_label):
  """The patches of the scale, crop padding, rotation and flip draws (see the module's docstring)."""
  draws = tf.random.stateless_uniform([count, 4], _fold(seed, GEOMETRY))
  low, high = (math.log(factor) for factor in augmentation.scale_range)
  scale = tf.exp(low + draws[:, 0] * (high - low))[:, None]  # [count, 1]
  size = tf.cast(tf.shape(mask), tf.float32)  # [2]: height, width
  # The patch's first pixel, in pixels of the scaled image: anywhere from crop_padding before it to
  # crop_padding past its end, on a whole pixel.
  room = tf.round(size * scale) + 2 * augmentation.crop_padding - patch_size  # [count, 2]
  start = (tf.minimum(room, 0.0) + tf.floor(draws[:, 1:3] * (tf.abs(room) + 1))
           - augmentation.crop_padding)
  # The source position of the patch's centre (row, column) and the source step of one patch
  # pixel (negative along a row: mirrored).
  middle = (patch_size - 1) / 2
  centre = (start + middle + 0.5) / scale - 0.5  # [count, 2]
  mirror = tf.where(draws[:, 3:] < 0.5, -1.0, 1.0) if augmentation.flip else tf.ones([count, 1])
  step = tf.concat([1 / scale, mirror / scale], axis=1)  # [count, 2]
  if augmentation.rotation:
    sample = _turned(centre, step, middle, patch_size,
                     tf.random.stateless_uniform([count], _fold(seed, ROTATION), -1, 1)
                     * math.radians(augmentation.rotation))
  else:  # a box from the first pixel centre to the last; one from right to left samples mirrored
    boxes = tf.concat([centre - middle * step, centre + middle * step], axis=1) / tf.tile(
        tf.maximum(size - 1, 1.0), [2])
    sample = lambda tensor, method, outside: tf.image.crop_and_resize(
        tensor[None], boxes, tf.zeros([count], tf.int32), [patch_size, patch_size], method, outside)
  images = tf.saturate_cast(tf.round(sample(image, "bilinear", 0.0)), tf.uint8)
  masks = tf.cast(sample(mask[..., None], "nearest", ignore_label)[..., 0], tf.uint8)
  return images, masks


def _turned(centre, step, middle, patch_size, angle):
  """A sampler of patches turned by `angle` (radians [count]) about their centres: a patch pixel's
  offset (row, column) from the middle times `step`, turned, plus `centre` is its source position.
  crop_and_resize cannot turn; this warp costs about 3.5 times its CPU a patch, so only rotation uses it."""
  cos, sin = tf.cos(angle), tf.sin(angle)
  # ImageProjectiveTransformV3 maps an output (x, y), x the column, to the source
  # (a0 x + a1 y + a2, b0 x + b1 y + b2).
  a0, a1 = cos * step[:, 1], -sin * step[:, 0]
  b0, b1 = sin * step[:, 1], cos * step[:, 0]
  zeros = tf.zeros_like(angle)
  transforms = tf.stack([a0, a1, centre[:, 1] - middle * (a0 + a1), b0, b1, centre[:, 0] - middle * (b0 + b1),
                         zeros, zeros], axis=1)

  def sample(tensor, method, outside):
    tensors = tf.broadcast_to(tf.cast(tensor, tf.float32)[None], tf.concat([tf.shape(angle), tf.shape(tensor)], 0))
    return tf.raw_ops.ImageProjectiveTransformV3(
        images=tensors, transforms=transforms, output_shape=[patch_size, patch_size],
        interpolation=method.upper(), fill_mode="CONSTANT", fill_value=float(outside))
  return sample


def distort_colours(images, augmentation, seed):
  """uint8 images [..., h, w, 3] with the photometric jitter of `augmentation`, one draw for them all
  (the patches of one image); in float [0, 1] between the first op and the last, rounded once."""
  if not augmentation.distorts_colours:
    return images
  pixels = tf.image.convert_image_dtype(images, tf.float32)
  if augmentation.brightness:
    pixels = tf.image.stateless_random_brightness(pixels, augmentation.brightness, _fold(seed, BRIGHTNESS))
  if augmentation.contrast:
    pixels = tf.image.stateless_random_contrast(pixels, 1 - augmentation.contrast, 1 + augmentation.contrast,
                                                _fold(seed, CONTRAST))
  if augmentation.saturation:
    pixels = tf.image.stateless_random_saturation(pixels, 1 - augmentation.saturation,
                                                  1 + augmentation.saturation, _fold(seed, SATURATION))
  if augmentation.hue:
    pixels = tf.image.stateless_random_hue(pixels, augmentation.hue, _fold(seed, HUE))
  return tf.image.convert_image_dtype(pixels, tf.uint8, saturate=True)  # clipped to [0, 255]


def _fold(seed, draw):
  return tf.random.experimental.stateless_fold_in(seed, draw)
