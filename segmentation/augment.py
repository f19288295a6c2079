"""Training augmentation of segmentation images and masks inside tf.data, stateless and seeded.

Every draw is a function of the element's seed (input_pipeline.make_train: the run's seed and the
image's place in the stream), so a resumed run draws what the uninterrupted one drew. Each
augmentation is off at its default, and one that is off adds no op: the stream is then the one
without this module.

Before the patch is cut (input_pipeline.make_train cuts it with common/data/pipeline.sample_patches):
  scale: the image resized bilinearly and the mask by nearest neighbour (a label is never a blend of
    two), by a factor whose logarithm is uniform over the log of scale_range: with (0.5, 2.0), half
    the images shrink and half grow;
  crop padding: the image padded by crop_padding pixels on every side (image 0, mask the ignore
    label), so that a crop can shift the scene by up to that much and holds its borders;
  flip: left and right swapped in image and mask together, half the time.
After it, on the image's patches alone:
  photometric distortion: brightness, contrast, saturation and hue jitter, one draw per image.
"""
import dataclasses
import math

import tensorflow as tf

# Each draw's seed is the element's seed folded with its own number, so that no two draws share one
# and the crop (which takes the element's seed itself) shares none.
SCALE, FLIP, BRIGHTNESS, CONTRAST, SATURATION, HUE = range(1, 7)


@dataclasses.dataclass(frozen=True)
class Augmentation:
  """What configs/segmentation.py's data.augment section says, read and checked by
  segmentation/data.read_settings; the defaults are all off."""
  scale_range: tuple = (1.0, 1.0)  # (low, high) factors
  crop_padding: int = 0  # pixels on each side
  flip: bool = False
  brightness: float = 0.0  # at most this is added to pixels in [0, 1]
  contrast: float = 0.0  # each image's contrast times a factor in [1 - contrast, 1 + contrast]
  saturation: float = 0.0  # saturation times a factor in [1 - saturation, 1 + saturation]
  hue: float = 0.0  # hue turned by at most this fraction of the colour wheel

  @property
  def scales(self):
    return tuple(self.scale_range) != (1.0, 1.0)

  @property
  def distorts_colours(self):
    return any((self.brightness, self.contrast, self.saturation, self.hue))


def before_crop(image, mask, augmentation, seed, ignore_label):
  """The image [h, w, 3] and mask [h, w] (uint8) scaled, padded and flipped as `augmentation` says;
  seed: int64 [2], the element's."""
  if augmentation.scales:
    image, mask = random_scale(image, mask, augmentation.scale_range, _fold(seed, SCALE))
  if augmentation.crop_padding:
    padding = [[augmentation.crop_padding] * 2] * 2
    image = tf.pad(image, padding + [[0, 0]])
    mask = tf.pad(mask, padding, constant_values=tf.cast(ignore_label, mask.dtype))
  if augmentation.flip:
    # One seed, one draw: a stateless op flips the image and the mask alike (and a uint8 concat to
    # flip them as one tensor costs more than the flips).
    image = tf.image.stateless_random_flip_left_right(image, _fold(seed, FLIP))
    mask = tf.image.stateless_random_flip_left_right(mask[..., None], _fold(seed, FLIP))[..., 0]
  return image, mask


def random_scale(image, mask, scale_range, seed):
  """Image (bilinear) and mask (nearest) resized by one log-uniform factor in scale_range."""
  low, high = (math.log(factor) for factor in scale_range)
  factor = tf.exp(tf.random.stateless_uniform([], seed, minval=low, maxval=high))
  size = tf.maximum(tf.cast(tf.round(tf.cast(tf.shape(mask), tf.float32) * factor), tf.int32), 1)
  # Both resizes sample at pixel centres, so that a scaled image and mask stay aligned.
  image = tf.saturate_cast(tf.round(tf.image.resize(image, size, method="bilinear")), tf.uint8)
  mask = tf.image.resize(mask[..., None], size, method="nearest")[..., 0]
  return image, mask


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
