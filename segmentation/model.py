"""A fully-convolutional encoder-decoder for semantic segmentation.

Encoder: conv-BN-ReLU blocks, each level after the first halving the
resolution with a stride-2 convolution. Decoder: bilinear 2x upsampling, concatenated
with the encoder's skip at the same resolution, then a conv-BN-ReLU (resize-then-convolve:
unlike a 3x3 Conv2DTranspose of stride 2, whose taps overlap unevenly, it leaves no
checkerboard of every other row and column in the masks). With output_stride > 1 a
non-overlapping output_stride x output_stride convolution (kernel = stride, so no
checkerboard either) first brings the image down to the resolution of the logits, which are
upsampled bilinearly at the end: for objects many pixels wide, the network runs on
output_stride**2 times fewer pixels. The input size must be divisible by
total_stride(widths, output_stride); logits are float32 under mixed precision.
"""
import keras
import tensorflow as tf

from common.data.normalization import Normalize
from common.nn.layers import BatchNorm, l2_regularizer


def total_stride(widths, output_stride=1):
  return output_stride * 2 ** (len(widths) - 1)


class BilinearUpsampling(keras.layers.Layer):
  """Bilinear upsampling by an integer factor, for inputs whose size is known only at run time.

  keras.layers.UpSampling2D's bilinear mode needs a static size, and the SavedModel takes images of
  any size.
  """

  def __init__(self, factor, **kwargs):
    super().__init__(**kwargs)
    self.factor = factor

  def call(self, x):
    # In float32 both ways: resize returns float32 anyway, and XLA refuses its float16 gradient.
    resized = tf.image.resize(tf.cast(x, tf.float32), tf.shape(x)[1:3] * self.factor, method="bilinear")
    return tf.cast(resized, self.compute_dtype)

  def get_config(self):
    return {**super().get_config(), "factor": self.factor}


def _conv_bn_relu(x, filters, strides, regularizer, sync_batch_norm, name, kernel_size=3):
  x = keras.layers.Conv2D(filters, kernel_size, strides=strides, padding="same", use_bias=False,
                          kernel_initializer="he_normal", kernel_regularizer=regularizer,
                          name=f"{name}_conv")(x)
  x = BatchNorm(synchronized=sync_batch_norm, name=f"{name}_bn")(x)
  return keras.layers.ReLU(name=f"{name}_relu")(x)


def build_model(num_classes, widths=(32, 64, 128), weight_decay=0.0, normalization="unit",
                sync_batch_norm=False, output_stride=1, name="segmenter"):
  """The model for uint8 images [B, H, W, 3] of any H, W divisible by total_stride(widths, output_stride)."""
  regularizer = l2_regularizer(weight_decay)
  inputs = keras.Input((None, None, 3), dtype="uint8", name="image")
  x = Normalize(normalization, name="normalize")(inputs)
  if output_stride > 1:
    x = _conv_bn_relu(x, widths[0], output_stride, regularizer, sync_batch_norm, "stem", output_stride)
  skips = []
  for level, width in enumerate(widths):
    x = _conv_bn_relu(x, width, 1 if level == 0 else 2, regularizer, sync_batch_norm, f"enc{level}_a")
    x = _conv_bn_relu(x, width, 1, regularizer, sync_batch_norm, f"enc{level}_b")
    skips.append(x)
  for level in range(len(widths) - 2, -1, -1):
    x = BilinearUpsampling(2, name=f"dec{level}_up")(x)
    x = keras.layers.Concatenate(name=f"dec{level}_skip")([x, skips[level]])
    x = _conv_bn_relu(x, widths[level], 1, regularizer, sync_batch_norm, f"dec{level}")
  logits = keras.layers.Conv2D(num_classes, 1, kernel_initializer="he_normal", dtype="float32",
                               name="logits")(x)
  if output_stride > 1:
    logits = BilinearUpsampling(output_stride, dtype="float32", name="logits_up")(logits)
  return keras.Model(inputs, logits, name=name)
