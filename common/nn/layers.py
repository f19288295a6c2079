"""Layers shared by the three models."""
import keras
import tensorflow as tf


class BatchNorm(keras.layers.BatchNormalization):
  """Keras' BatchNormalization whose training-mode pass is TensorFlow's fused kernel.

  In training mode Keras 3 normalizes with elementwise ops and reductions, about 35 ops per layer
  forward and back; FusedBatchNormV3 is one op each way (oneDNN's on a CPU, cuDNN's on a GPU), and
  a step of fewer, larger ops waits less on TensorFlow's executor. Same variables, moving-average
  update and numerics (statistics in float32 under mixed precision, as Keras does). Inference
  mode keeps Keras' ops: they are few there, and the fused kernel's gradient in inference mode
  (a frozen layer under a trained one) has no deterministic GPU implementation. Synchronized
  statistics, masks, renorm and non-4D inputs take Keras' own path too.
  """

  def call(self, inputs, training=None, mask=None):
    if not (training and self.trainable) or self.synchronized or self.renorm or mask is not None \
        or len(inputs.shape) != 4 or self.axis not in (-1, 3):
      return super().call(inputs, training=training, mask=mask)
    channels = inputs.shape[-1]
    scale = tf.cast(self.gamma, tf.float32) if self.scale else tf.ones([channels])
    offset = tf.cast(self.beta, tf.float32) if self.center else tf.zeros([channels])
    outputs, mean, variance, *_ = tf.raw_ops.FusedBatchNormV3(
        x=inputs, scale=scale, offset=offset, mean=tf.zeros([0]), variance=tf.zeros([0]),
        epsilon=self.epsilon, is_training=True)
    # The kernel returns the unbiased variance; Keras' moving average takes the batch's own.
    count = tf.cast(tf.size(inputs) // channels, tf.float32)
    variance = variance * (count - 1.0) / count
    self.moving_mean.assign(self.moving_mean * self.momentum + mean * (1.0 - self.momentum))
    self.moving_variance.assign(
        self.moving_variance * self.momentum + variance * (1.0 - self.momentum))
    return tf.cast(outputs, self.compute_dtype)


class L2(keras.regularizers.L2):
  """keras.regularizers.L2, l2 * sum(w**2), as one L2Loss op (sum(w**2) / 2) whose gradient is
  one multiply: Keras' square, sum and scale and their gradients, once per kernel, were about 6%
  of the op time of an Inception V4 training step on a CPU."""

  def __call__(self, x):
    return (2.0 * self.l2) * tf.nn.l2_loss(x)


def l2_regularizer(factor):
  """L2(factor), or None for no weight decay."""
  return L2(factor) if factor else None
