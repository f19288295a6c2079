"""The embedding CNN: layout, normalization, precision, and the views that share its weights."""
import keras
import numpy as np
import pytest
import tensorflow as tf

from triplet import model as model_lib

SHAPE = (32, 32, 3)
WIDTHS = (8, 16, 16)


@pytest.fixture
def mixed_precision():
  keras.mixed_precision.set_global_policy("mixed_float16")
  yield
  keras.mixed_precision.set_global_policy("float32")


def build(embedding_size=16, **kwargs):
  return model_lib.build_embedding_model(SHAPE, embedding_size, widths=WIDTHS, **kwargs)


def images(n=4, seed=0):
  return np.random.default_rng(seed).normal(size=(n,) + SHAPE).astype(np.float32)


def test_embeddings_are_unit_vectors():
  embeddings = build()(images()).numpy()
  assert embeddings.shape == (4, 16)
  np.testing.assert_allclose(np.linalg.norm(embeddings, axis=1), 1.0, rtol=1e-5)


def test_sync_batch_norm_synchronizes_every_batch_norm_and_keeps_the_variables():
  plain, synced = build(), build(sync_batch_norm=True)
  norms = lambda model: [l for l in model.layers if isinstance(l, keras.layers.BatchNormalization)]
  assert norms(plain) and not any(layer.synchronized for layer in norms(plain))
  assert all(layer.synchronized for layer in norms(synced))
  assert ([(v.path, v.shape) for v in plain.weights] == [(v.path, v.shape) for v in synced.weights])


def test_every_convolution_is_followed_by_batch_norm_then_relu():
  layers = build().layers
  convs = [i for i, layer in enumerate(layers) if isinstance(layer, keras.layers.Conv2D)]
  assert len(convs) == 1 + 2 * (len(WIDTHS) - 1)
  for i in convs:
    assert isinstance(layers[i + 1], keras.layers.BatchNormalization), layers[i + 1].name
    assert isinstance(layers[i + 2], keras.layers.ReLU), layers[i + 2].name
    assert not layers[i].use_bias
    assert isinstance(layers[i].kernel_initializer, keras.initializers.HeNormal)
  assert {layers[i].kernel_size for i in convs} == {(1, 1), (3, 3)}


def test_kernels_carry_l2_regularization():
  model = build(weight_decay=1e-3)
  kernels = [l for l in model.layers if isinstance(l, (keras.layers.Conv2D, keras.layers.Dense))]
  assert len(model.losses) == len(kernels)
  expected = sum(1e-3 * float(tf.reduce_sum(tf.square(l.kernel))) for l in kernels)
  np.testing.assert_allclose(float(tf.add_n(model.losses)), expected, rtol=1e-5)
  assert not build(weight_decay=0.0).losses


def test_outputs_are_float32_under_mixed_precision(mixed_precision):
  model = build()
  assert model.get_layer("stem_conv").compute_dtype == "float16"
  outputs = model_lib.build_training_model(model)(images())
  assert outputs[model_lib.EMBEDDING].dtype == tf.float32
  assert outputs[model_lib.RAW_EMBEDDING].dtype == tf.float32
  logits = model_lib.build_classifier(model, 5)(images())[model_lib.LOGITS]
  assert logits.dtype == tf.float32 and logits.shape == (4, 5)


def test_training_model_shares_weights_and_exposes_the_norm():
  model = build()
  training_model = model_lib.build_training_model(model)
  assert len(training_model.weights) == len(model.weights)
  outputs = training_model(images())
  np.testing.assert_allclose(outputs[model_lib.EMBEDDING], model(images()), atol=1e-6)
  raw = outputs[model_lib.RAW_EMBEDDING].numpy()
  np.testing.assert_allclose(
      outputs[model_lib.EMBEDDING], raw / np.linalg.norm(raw, axis=1, keepdims=True), atol=1e-5)


def test_checkpoint_of_the_training_model_restores_into_the_embedding_model(tmp_path):
  trained = build()
  path = tf.train.Checkpoint(model=model_lib.build_training_model(trained)).save(str(tmp_path / "ckpt"))
  fresh = build()
  tf.train.Checkpoint(model=fresh).restore(path).assert_existing_objects_matched().expect_partial()
  np.testing.assert_allclose(fresh(images()), trained(images()), atol=1e-6)


def test_classifier_trains_the_embedding_layers():
  model = build()
  classifier = model_lib.build_classifier(model, 3)
  head = classifier.get_layer(model_lib.LOGITS)
  assert len(classifier.trainable_weights) == len(model.trainable_weights) + len(head.trainable_weights)


def test_embedding_part_of_a_training_model_or_classifier_is_the_embedding_network():
  model = build()
  for outer in (model_lib.build_training_model(model), model_lib.build_classifier(model, 3)):
    part = model_lib.embedding_part(outer)
    assert len(part.weights) == len(model.weights)
    np.testing.assert_allclose(part(images()), model(images()), atol=1e-6)
