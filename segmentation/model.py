"""A fully-convolutional encoder-decoder for semantic segmentation.

Encoder: conv-BN-ReLU blocks, each level after the first halving the
resolution with a stride-2 convolution. Decoder: bilinear 2x upsampling, concatenated
with the encoder's skip at the same resolution, then a conv-BN-ReLU (resize-then-convolve:
unlike a 3x3 Conv2DTranspose of stride 2, whose taps overlap unevenly, it leaves no
checkerboard of every other row and column in the masks). With output_stride > 1 a
non-overlapping output_stride x output_stride convolution (kernel = stride, so no
checkerboard either) first brings the image down to the resolution of the logits, which are
upsampled bilinearly at the end: for objects many pixels wide, the network runs on
output_stride**2 times fewer pixels. With context_rates, the deepest level ends in a context module
(DeepLab v3's atrous spatial pyramid pooling): parallel 3x3 convolutions dilated by each rate, a 1x1
one, and the image's mean features (image pooling) broadcast back, concatenated and mixed by a 1x1
convolution, so that every pixel sees its whole object (a digit of 200 px is 6 cells at stride 32)
and the photo around it. The input size must be divisible by
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


class ImagePooling(keras.layers.Layer):
  """The mean of each channel over the image, broadcast back to every pixel: [B, H, W, C] -> same shape."""

  def call(self, x):
    return tf.broadcast_to(tf.reduce_mean(x, axis=[1, 2], keepdims=True), tf.shape(x))


def _conv_bn_relu(x, filters, strides, regularizer, sync_batch_norm, name, kernel_size=3, dilation_rate=1):
  x = keras.layers.Conv2D(filters, kernel_size, strides=strides, padding="same", use_bias=False,
                          dilation_rate=dilation_rate, kernel_initializer="he_normal",
                          kernel_regularizer=regularizer, name=f"{name}_conv")(x)
  x = BatchNorm(synchronized=sync_batch_norm, name=f"{name}_bn")(x)
  return keras.layers.ReLU(name=f"{name}_relu")(x)


def _context(x, rates, regularizer, sync_batch_norm):
  """The context module (see the module's docstring) on the deepest level's features x."""
  width = x.shape[-1]
  args = (regularizer, sync_batch_norm)
  branches = [_conv_bn_relu(x, width, 1, *args, "context_1x1", kernel_size=1)]
  branches += [_conv_bn_relu(x, width, 1, *args, f"context_rate{rate}", dilation_rate=rate) for rate in rates]
  # The 1x1 convolution of the image's mean runs after broadcasting, at every cell of the deepest level
  # (a few dozen at 192 px): one graph shape for every branch, at a negligible cost.
  branches.append(_conv_bn_relu(ImagePooling(name="context_pool")(x), width, 1, *args, "context_image", kernel_size=1))
  x = keras.layers.Concatenate(name="context_concat")(branches)
  return _conv_bn_relu(x, width, 1, *args, "context_mix", kernel_size=1)


def build_model(num_classes, widths=(32, 64, 128), weight_decay=0.0, normalization="unit",
                sync_batch_norm=False, output_stride=1, context_rates=(), name="segmenter"):
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
  if context_rates:
    x = _context(x, context_rates, regularizer, sync_batch_norm)
  for level in range(len(widths) - 2, -1, -1):
    x = BilinearUpsampling(2, name=f"dec{level}_up")(x)
    x = keras.layers.Concatenate(name=f"dec{level}_skip")([x, skips[level]])
    x = _conv_bn_relu(x, widths[level], 1, regularizer, sync_batch_norm, f"dec{level}")
  logits = keras.layers.Conv2D(num_classes, 1, kernel_initializer="he_normal", dtype="float32",
                               name="logits")(x)
  if output_stride > 1:
    logits = BilinearUpsampling(output_stride, dtype="float32", name="logits_up")(logits)
  return keras.Model(inputs, logits, name=name)
