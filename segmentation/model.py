"""A fully-convolutional encoder-decoder for semantic segmentation.

Encoder: conv-BN-ReLU blocks, each level after the first halving the
resolution with a stride-2 convolution. Decoder: Conv2DTranspose upsampling,
concatenated with the encoder's skip at the same resolution. The input size
must be divisible by total_stride(widths); logits are float32 under mixed
precision.
"""
import keras

from common.normalization import Normalize


def total_stride(widths):
  return 2 ** (len(widths) - 1)


def _conv_bn_relu(x, filters, strides, regularizer, name):
  x = keras.layers.Conv2D(filters, 3, strides=strides, padding="same", use_bias=False,
                          kernel_initializer="he_normal", kernel_regularizer=regularizer,
                          name=f"{name}_conv")(x)
  x = keras.layers.BatchNormalization(name=f"{name}_bn")(x)
  return keras.layers.ReLU(name=f"{name}_relu")(x)


def build_model(num_classes, widths=(32, 64, 128), weight_decay=0.0, normalization="unit",
                name="segmenter"):
  """Builds the model for uint8 images [B, H, W, 3] of any H, W divisible by total_stride(widths)."""
  regularizer = keras.regularizers.L2(weight_decay) if weight_decay else None
  inputs = keras.Input((None, None, 3), dtype="uint8", name="image")
  x = Normalize(normalization, name="normalize")(inputs)
  skips = []
  for level, width in enumerate(widths):
    x = _conv_bn_relu(x, width, 1 if level == 0 else 2, regularizer, f"enc{level}_a")
    x = _conv_bn_relu(x, width, 1, regularizer, f"enc{level}_b")
    skips.append(x)
  for level in range(len(widths) - 2, -1, -1):
    x = keras.layers.Conv2DTranspose(widths[level], 3, strides=2, padding="same",
                                     kernel_initializer="he_normal", kernel_regularizer=regularizer,
                                     name=f"dec{level}_up")(x)
    x = keras.layers.Concatenate(name=f"dec{level}_skip")([x, skips[level]])
    x = _conv_bn_relu(x, widths[level], 1, regularizer, f"dec{level}")
  logits = keras.layers.Conv2D(num_classes, 1, kernel_initializer="he_normal", dtype="float32",
                               name="logits")(x)
  return keras.Model(inputs, logits, name=name)
