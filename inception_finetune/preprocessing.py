"""Inception preprocessing as TF-Slim's `inception_preprocessing.py` does it.

Images come in as uint8 HxWx3 and leave as float32 in [-1, 1]. Resizing uses
TensorFlow 1's kernels (no half-pixel centres, align_corners False), which the
published checkpoints were trained and evaluated with; TF2's `tf.image.resize`
differs from them by up to 0.24 on the [-1, 1] scale.

Training randomness is stateless: the caller passes a seed of shape [2] per image
(e.g. the run's seed and the element's index), so a tf.data pipeline gives the
same images on every run and on resumption.
"""
import tensorflow as tf

from common.data.normalization import to_unit_range
from common.data.normalization import unit_to_symmetric

# TF1's tf.image.resize_images methods 0..3, which slim picks from at random when not in fast mode.
_LEGACY_RESIZE_OPS = (
    tf.raw_ops.ResizeBilinear,
    tf.raw_ops.ResizeNearestNeighbor,
    tf.raw_ops.ResizeBicubic,
    tf.raw_ops.ResizeArea,
)
_BRIGHTNESS_MAX_DELTA = 32.0 / 255.0
_SATURATION_RANGE = (0.5, 1.5)
_HUE_MAX_DELTA = 0.2
_CONTRAST_RANGE = (0.5, 1.5)


def preprocess_for_eval(image, height, width, central_fraction=0.875):
  """uint8 HxWx3 -> float32 height x width x 3 in [-1, 1]: central crop, legacy bilinear resize.

  A batch [N, H, W, 3] of images of one size (a SavedModel's input) is done at once, with no
  per-image loop (which neither ONNX nor LiteRT converters can lower): the same crop and resize.
  """
  image = to_unit_range(image)
  if central_fraction:
    image = tf.image.central_crop(image, central_fraction=central_fraction)
  image = resize_legacy(image, height, width)
  return unit_to_symmetric(image)


def preprocess_for_train(image, height, width, seed, bbox=None, fast_mode=True,
                         min_object_covered=0.1, aspect_ratio_range=(0.75, 1.33),
                         area_range=(0.05, 1.0), max_attempts=100):
  """uint8 HxWx3 -> float32 height x width x 3 in [-1, 1] with slim's random distortions.

  Args:
    image: uint8 HxWx3 tensor.
    height, width: output size.
    seed: int32/int64 tensor of shape [2]; the same seed gives the same output.
    bbox: float32 [1, N, 4] boxes (ymin, xmin, ymax, xmax in [0, 1]) the crop should
      cover; None means the whole image.
    fast_mode: as in slim: only brightness and saturation, bilinear resize. False
      adds hue and contrast in one of four random orders and a random resize method.
    min_object_covered, aspect_ratio_range, area_range, max_attempts: the crop's
      sample_distorted_bounding_box arguments.
  """
  crop_seed, resize_seed, flip_seed, color_seed = tf.unstack(
      tf.random.experimental.stateless_split(seed, num=4))
  image = to_unit_range(image)
  image = distorted_bounding_box_crop(image, bbox, crop_seed, min_object_covered,
                                      aspect_ratio_range, area_range, max_attempts)
  if fast_mode:
    image = resize_legacy(image, height, width)
  else:
    method = _random_index(resize_seed, len(_LEGACY_RESIZE_OPS))
    image = tf.switch_case(method, [
        lambda op=op: resize_legacy(image, height, width, op) for op in _LEGACY_RESIZE_OPS])
  image = tf.image.stateless_random_flip_left_right(image, seed=flip_seed)
  image = distort_color(image, color_seed, fast_mode)
  return unit_to_symmetric(image)


def resize_legacy(image, height, width, resize_op=tf.raw_ops.ResizeBilinear):
  """Resizes an HxWxC float image, or a batch NxHxWxC, with a TF1 kernel (no half-pixel centres,
  corners not aligned)."""
  batch = image if image.shape.rank == 4 else image[tf.newaxis]
  resized = tf.cast(resize_op(images=batch, size=[height, width], align_corners=False), tf.float32)
  resized.set_shape([batch.shape[0], height, width, image.shape[-1]])
  return resized if image.shape.rank == 4 else resized[0]


def distorted_bounding_box_crop(image, bbox, seed, min_object_covered=0.1,
                                aspect_ratio_range=(0.75, 1.33), area_range=(0.05, 1.0),
                                max_attempts=100):
  """Random crop covering at least min_object_covered of `bbox` (None: the whole image)."""
  if bbox is None:
    bbox = tf.constant([[[0.0, 0.0, 1.0, 1.0]]], dtype=tf.float32)
  begin, size, _ = tf.image.stateless_sample_distorted_bounding_box(
      tf.shape(image), bounding_boxes=bbox, seed=seed,
      min_object_covered=min_object_covered, aspect_ratio_range=aspect_ratio_range,
      area_range=area_range, max_attempts=max_attempts, use_image_if_no_bounding_boxes=True)
  return tf.slice(image, begin, size)


def distort_color(image, seed, fast_mode=True):
  """Slim's distort_color on a [0, 1] image; the result is clipped to [0, 1].

  Fast mode: brightness then saturation. Otherwise brightness, saturation, hue and
  contrast in one of slim's four orders, picked at random.
  """
  order_seed, *op_seeds = tf.unstack(tf.random.experimental.stateless_split(seed, num=5))
  distortions = {
      "brightness": lambda x, s: tf.image.stateless_random_brightness(x, _BRIGHTNESS_MAX_DELTA, s),
      "saturation": lambda x, s: tf.image.stateless_random_saturation(x, *_SATURATION_RANGE, s),
      "hue": lambda x, s: tf.image.stateless_random_hue(x, _HUE_MAX_DELTA, s),
      "contrast": lambda x, s: tf.image.stateless_random_contrast(x, *_CONTRAST_RANGE, s),
  }

  def apply_in_order(order):
    distorted = image
    for name, op_seed in zip(order, op_seeds):
      distorted = distortions[name](distorted, op_seed)
    return distorted

  if fast_mode:
    image = apply_in_order(("brightness", "saturation"))
  else:
    orders = (("brightness", "saturation", "hue", "contrast"),
              ("saturation", "brightness", "contrast", "hue"),
              ("contrast", "hue", "brightness", "saturation"),
              ("hue", "saturation", "contrast", "brightness"))
    image = tf.switch_case(_random_index(order_seed, len(orders)),
                           [lambda order=order: apply_in_order(order) for order in orders])
  return tf.clip_by_value(image, 0.0, 1.0)


def _random_index(seed, num_cases):
  return tf.random.stateless_uniform([], seed=seed, maxval=num_cases, dtype=tf.int32)
