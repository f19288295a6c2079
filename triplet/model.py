"""The embedding CNN: BatchNorm before every ReLU, L2-normalized float32 output.

The layout follows the Zeiler&Fergus-style network of FaceNet (NN1): a
strided stem, then stages of a 1x1 convolution (cheap channel mixing, NN1's
conv2a..conv6a) and a 3x3 convolution, max pooling between stages, global
average pooling and a dense embedding projected onto the unit sphere.
"""
import keras
import tensorflow as tf

from common.nn.layers import BatchNorm, l2_regularizer

# Layer names other modules look up.
RAW_EMBEDDING = "raw_embedding"
EMBEDDING = "embedding"
LOGITS = "logits"


def _conv_bn_relu(x, filters, kernel_size, name, weight_decay, bn_momentum, sync_batch_norm,
                  strides=1):
  """Convolution without bias (BatchNorm's offset replaces it), BatchNorm, then ReLU."""
  x = keras.layers.Conv2D(
      filters, kernel_size, strides=strides, padding="same", use_bias=False,
      kernel_initializer="he_normal", kernel_regularizer=l2_regularizer(weight_decay),
      name=f"{name}_conv")(x)
  x = BatchNorm(momentum=bn_momentum, synchronized=sync_batch_norm, name=f"{name}_bn")(x)
  return keras.layers.ReLU(name=f"{name}_relu")(x)


class L2Normalization(keras.layers.Layer):
  """x / |x| over the last axis, 0 for a zero vector in every runtime. Keras' UnitNormalization
  computes the same in TensorFlow, but its ops give NaN for a zero vector in LiteRT's XNNPACK; the
  converter turns l2_normalize into LiteRT's own L2_NORMALIZATION, which gives 0 as TensorFlow does."""

  def call(self, inputs):
    return tf.math.l2_normalize(inputs, axis=-1)


def build_embedding_model(input_shape=(160, 160, 3), embedding_size=128, widths=(64, 128, 256, 256),
                          weight_decay=5e-4, bn_momentum=0.99, sync_batch_norm=False,
                          name="embedding_model"):
  """Images (normalized float) -> L2-normalized float32 embeddings [B, embedding_size].

  widths[0] is the 3x3 stride-2 stem (followed by a 3x3 stride-2 max pool);
  each further width is a stage: 1x1 conv to the previous width, 3x3 conv to
  this width, and a 2x2 max pool except after the last stage. The dense
  projection is named RAW_EMBEDDING (its norm is a training statistic) and
  computes in float32 under mixed precision, like the normalization after it.
  sync_batch_norm: BatchNorm statistics over all replicas' examples in training.
  """
  if not widths:
    raise ValueError("widths must name at least the stem's width")
  inputs = keras.Input(input_shape, name="images")
  x = _conv_bn_relu(inputs, widths[0], 3, "stem", weight_decay, bn_momentum, sync_batch_norm,
                    strides=2)
  x = keras.layers.MaxPooling2D(3, strides=2, padding="same", name="stem_pool")(x)
  for i, width in enumerate(widths[1:], start=1):
    x = _conv_bn_relu(x, widths[i - 1], 1, f"stage{i}_mix", weight_decay, bn_momentum,
                      sync_batch_norm)
    x = _conv_bn_relu(x, width, 3, f"stage{i}", weight_decay, bn_momentum, sync_batch_norm)
    if i < len(widths) - 1:
      x = keras.layers.MaxPooling2D(2, name=f"stage{i}_pool")(x)
  x = keras.layers.GlobalAveragePooling2D(name="pool")(x)
  raw = keras.layers.Dense(
      embedding_size, kernel_regularizer=l2_regularizer(weight_decay), dtype="float32",
      name=RAW_EMBEDDING)(x)
  embedding = L2Normalization(dtype="float32", name=EMBEDDING)(raw)
  return keras.Model(inputs, embedding, name=name)


def build_training_model(embedding_model):
  """The same layers with two outputs: {EMBEDDING: normalized, RAW_EMBEDDING: before normalization}."""
  return keras.Model(
      embedding_model.input,
      {EMBEDDING: embedding_model.output,
       RAW_EMBEDDING: embedding_model.get_layer(RAW_EMBEDDING).output},
      name="embedding_training_model")


def build_classifier(embedding_model, num_classes, weight_decay=0.0):
  """The softmax sanity check: the same network with a float32 Dense head on the raw embedding.

  Outputs {LOGITS, EMBEDDING, RAW_EMBEDDING}, so that the embedding the
  classifier learns can be evaluated like a triplet-trained one.
  """
  raw = embedding_model.get_layer(RAW_EMBEDDING).output
  logits = keras.layers.Dense(
      num_classes, kernel_regularizer=l2_regularizer(weight_decay), dtype="float32", name=LOGITS)(raw)
  return keras.Model(
      embedding_model.input,
      {LOGITS: logits, EMBEDDING: embedding_model.output, RAW_EMBEDDING: raw},
      name="classifier")


def embedding_part(training_model):
  """The embedding network inside a training model or classifier: the same layers and weights."""
  return keras.Model(training_model.input, training_model.get_layer(EMBEDDING).output,
                     name="embedding_model")
