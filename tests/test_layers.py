import keras
import numpy as np
import pytest
import tensorflow as tf

from common.nn import layers


def _run(layer, images, upstream, training):
  layer.build(images.shape)
  channels = images.shape[-1]
  layer.beta.assign(np.linspace(-1.0, 1.0, channels))
  layer.moving_mean.assign(np.linspace(0.0, 1.0, channels))
  layer.moving_variance.assign(np.linspace(0.5, 2.0, channels))
  with tf.GradientTape() as tape:
    tape.watch(images)
    outputs = layer(images, training=training)
    loss = tf.reduce_sum(tf.cast(outputs, tf.float32) * upstream)
  op_types = {op.type for op in tf.function(lambda x: layer(x, training=training))
              .get_concrete_function(images).graph.get_operations()}
  return ([outputs, *tape.gradient(loss, [images, layer.beta]), layer.moving_mean,
           layer.moving_variance], op_types)


@pytest.mark.parametrize("policy", ["float32", "mixed_float16"])
@pytest.mark.parametrize("training", [True, False])
def test_batch_norm_matches_keras(policy, training):
  # The fused kernel in place of Keras' ops: same outputs, gradients and moving statistics.
  rng = np.random.default_rng(0)
  dtype = "float16" if policy == "mixed_float16" else "float32"
  images = tf.constant(rng.normal(2.0, 3.0, (8, 7, 5, 6)), dtype)
  upstream = tf.constant(rng.normal(size=images.shape), tf.float32)
  kwargs = dict(momentum=0.9, scale=False, dtype=policy)
  expected, _ = _run(keras.layers.BatchNormalization(**kwargs), images, upstream, training)
  got, op_types = _run(layers.BatchNorm(**kwargs), images, upstream, training)
  tolerance = 2e-2 if dtype == "float16" else 1e-4
  for name, want, value in zip(["outputs", "input gradient", "beta gradient", "moving mean",
                                "moving variance"], expected, got):
    assert value.dtype == want.dtype, name
    np.testing.assert_allclose(np.float32(value), np.float32(want), rtol=tolerance,
                               atol=tolerance, err_msg=name)
  # Training mode is the fused kernel; inference mode (no deterministic GPU gradient) is Keras'.
  assert ("FusedBatchNormV3" in op_types) == training


def test_l2_is_keras_l2_in_one_op():
  kernel = tf.constant(np.arange(-3.0, 3.0).reshape(2, 3), tf.float32)
  assert float(layers.L2(2e-5)(kernel)) == pytest.approx(2e-5 * 19)
  assert float(layers.L2(2e-5)(kernel)) == pytest.approx(float(keras.regularizers.L2(2e-5)(kernel)))
  assert layers.l2_regularizer(0.0) is None
