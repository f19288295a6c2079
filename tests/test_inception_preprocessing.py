"""Inception preprocessing: slim's evaluation kernel against NumPy; seeded training distortions."""
import numpy as np
import pytest
import tensorflow as tf

from common.data.normalization import to_unit_range
from inception_finetune import preprocessing


def random_image(height, width, seed=0):
  return np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)


def central_crop_numpy(image, fraction):
  height, width = image.shape[:2]
  top = int((height - height * fraction) / 2)
  left = int((width - width * fraction) / 2)
  return image[top:height - top, left:width - left]


def legacy_bilinear_numpy(image, out_height, out_width):
  """TF1's resize_bilinear: source coordinate = destination * in/out, no half-pixel offset."""
  def axis(out_size, in_size):
    source = np.arange(out_size, dtype=np.float32) * np.float32(in_size / out_size)
    lower = np.floor(source).astype(np.int64)
    upper = np.minimum(lower + 1, in_size - 1)
    return lower, upper, (source - lower).astype(np.float32)

  y0, y1, dy = axis(out_height, image.shape[0])
  x0, x1, dx = axis(out_width, image.shape[1])
  dx = dx[np.newaxis, :, np.newaxis]
  top = image[y0][:, x0] + (image[y0][:, x1] - image[y0][:, x0]) * dx
  bottom = image[y1][:, x0] + (image[y1][:, x1] - image[y1][:, x0]) * dx
  return top + (bottom - top) * dy[:, np.newaxis, np.newaxis]


@pytest.mark.parametrize("in_shape, out_shape", [((50, 37), (29, 31)), ((40, 64), (75, 90))])
def test_eval_equals_numpy_central_crop_and_legacy_bilinear(in_shape, out_shape):
  image = random_image(*in_shape)
  actual = preprocessing.preprocess_for_eval(tf.constant(image), *out_shape).numpy()
  crop = central_crop_numpy(image.astype(np.float32) / 255.0, 0.875)
  expected = (legacy_bilinear_numpy(crop, *out_shape) - 0.5) * 2.0
  assert actual.shape == (*out_shape, 3) and actual.dtype == np.float32
  np.testing.assert_allclose(actual, expected, rtol=0, atol=2e-6)
  # TF2's half-pixel resize is another function: the test tells the kernels apart.
  half_pixel = (tf.image.resize(crop[np.newaxis], out_shape)[0].numpy() - 0.5) * 2.0
  assert np.abs(half_pixel - expected).max() > 0.05


def test_eval_without_central_crop_keeps_the_whole_image():
  image = random_image(16, 16)
  actual = preprocessing.preprocess_for_eval(tf.constant(image), 16, 16, central_fraction=None)
  np.testing.assert_allclose(actual.numpy(), (image / 255.0 - 0.5) * 2.0, atol=1e-6)


@pytest.mark.parametrize("in_shape, out_size, central_fraction", [
    ((64, 64), 75, 0.875), ((50, 37), 29, 0.875), ((40, 90), 75, 0.5), ((33, 21), 16, None)])
def test_a_batch_at_once_equals_each_image_alone(in_shape, out_size, central_fraction):
  # The SavedModel's signature does a batch at once (no map_fn, which converters cannot lower),
  # traced for any size as the signature is; each image alone is what training's evaluation does.
  images = np.stack([random_image(*in_shape, seed=seed) for seed in range(3)])
  batched = tf.function(
      lambda x: preprocessing.preprocess_for_eval(x, out_size, out_size, central_fraction),
      input_signature=[tf.TensorSpec([None, None, None, 3], tf.uint8)])(tf.constant(images)).numpy()
  alone = np.stack([preprocessing.preprocess_for_eval(tf.constant(image), out_size, out_size,
                                                      central_fraction).numpy() for image in images])
  assert batched.shape == (3, out_size, out_size, 3) and batched.dtype == np.float32
  np.testing.assert_allclose(batched, alone, rtol=0, atol=1e-6)


@pytest.mark.parametrize("fast_mode", [True, False])
def test_train_is_seeded_and_in_range(fast_mode):
  image = tf.constant(random_image(60, 80))

  def run(seed):
    return preprocessing.preprocess_for_train(image, 33, 35, seed=tf.constant(seed),
                                              fast_mode=fast_mode).numpy()

  first, again, other = run([1, 2]), run([1, 2]), run([1, 3])
  assert first.shape == (33, 35, 3) and first.dtype == np.float32
  assert first.min() >= -1.0 and first.max() <= 1.0
  np.testing.assert_array_equal(first, again)
  assert not np.array_equal(first, other)


def test_train_in_tf_data_with_per_element_seeds_is_reproducible():
  images = tf.data.Dataset.from_tensors(random_image(48, 48)).repeat(6)

  def pipeline():
    return images.enumerate().map(
        lambda index, image: preprocessing.preprocess_for_train(
            image, 24, 24, seed=tf.stack([tf.constant(7, tf.int64), index]), fast_mode=False))

  first = np.stack(list(pipeline().as_numpy_iterator()))
  again = np.stack(list(pipeline().as_numpy_iterator()))
  np.testing.assert_array_equal(first, again)
  assert first.shape == (6, 24, 24, 3)
  assert len({element.tobytes() for element in first}) == 6  # each element distorted differently


def test_train_crop_covers_the_given_box():
  # A white box on black: with min_object_covered=1.0 every crop holds all of it.
  image = np.zeros((64, 64, 3), np.uint8)
  image[24:40, 24:40] = 255
  box = tf.constant([[[24 / 64, 24 / 64, 40 / 64, 40 / 64]]], tf.float32)
  for seed in range(5):
    cropped = preprocessing.distorted_bounding_box_crop(
        to_unit_range(tf.constant(image)), box, tf.constant([seed, 0]),
        min_object_covered=1.0)
    assert float(tf.reduce_sum(cropped)) == pytest.approx(16 * 16 * 3)
