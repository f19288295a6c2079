"""Every pixel-scaling scheme in one place; configs name one of SCHEMES."""
import keras
import tensorflow as tf

from common.contract.errors import ConfigError


def to_unit_range(image):
  """uint8 (or float in [0, 255]) -> float32 in [0, 1]."""
  if image.dtype == tf.uint8:
    return tf.image.convert_image_dtype(image, tf.float32)
  return tf.cast(image, tf.float32) / 255.0


def unit_to_symmetric(image):
  """float in [0, 1] -> float in [-1, 1] (Inception's and TF-Slim's convention)."""
  return (image - 0.5) * 2.0


def _symmetric(image):
  return unit_to_symmetric(to_unit_range(image))


def _per_image_standardization(image):
  return tf.image.per_image_standardization(to_unit_range(image))


SCHEMES = {
    "unit": to_unit_range,  # [0, 1]
    "symmetric": _symmetric,  # [-1, 1]
    "per_image_standardization": _per_image_standardization,  # zero mean, unit variance per image
}


def get_normalizer(name):
  """Returns the function uint8 image(s) -> float32 for a scheme name."""
  try:
    return SCHEMES[name]
  except KeyError:
    raise ConfigError(
        f"normalization '{name}' is unknown; choose one of {sorted(SCHEMES)}") from None


def normalize(image, name):
  return get_normalizer(name)(image)


class Normalize(keras.layers.Layer):
  """The scheme as the model's first layer, so that the model (and its SavedModel) takes uint8 images."""

  def __init__(self, scheme, **kwargs):
    super().__init__(**kwargs)
    self.scheme = scheme
    self._fn = get_normalizer(scheme)

  def call(self, images):
    return tf.cast(self._fn(images), self.compute_dtype)

  def get_config(self):
    return dict(super().get_config(), scheme=self.scheme)
