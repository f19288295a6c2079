"""Sliding-window inference and test-time augmentation (segmentation/inference.py): one window over
the image gives the whole image's logits, any tiling of a network of 1x1 convolutions is exact,
flipping is undone, scales come back to the image's size; the object vote gives each connected object
its majority class and leaves its outline; bad eval.* values are one line each; a
photo over data.eval_max_pixels is refused naming eval.window, and predicted in tiles with it by the
real command line."""
import keras
import numpy as np
from PIL import Image
import pytest
import tensorflow as tf

from common.contract import config as config_lib
from common.contract.errors import ConfigError
from common.contract.errors import DataError
import helpers
from segmentation import data as data_lib
from segmentation import inference as inference_lib
from segmentation import predict as predict_lib
from segmentation import task as task_lib
import test_predict


def smoke_forward(seed=0):
  """forward(images) of the smoke preset's network (random weights, total stride 4)."""
  config = helpers.make_config("segmentation", "smoke")
  keras.utils.set_random_seed(seed)
  model = task_lib.build_model(config, data_lib.read_settings(config.data))
  return task_lib.model_forward(model, task_lib.pad_multiple(config))


def pointwise_forward():
  """forward(images) of a network of 1x1 convolutions: each pixel's logits are its own alone."""
  inputs = keras.Input((None, None, 3), dtype="uint8")
  x = keras.layers.Rescaling(1 / 255)(inputs)
  x = keras.layers.Conv2D(6, 1, activation="relu")(x)
  model = keras.Model(inputs, keras.layers.Conv2D(4, 1)(x))
  return lambda images: model(images, training=False)


def random_images(batch, height, width, seed=0):
  return tf.constant(np.random.default_rng(seed).integers(0, 256, (batch, height, width, 3)), tf.uint8)


def logits(forward, images, **options):
  return inference_lib.image_logits(forward, images, inference_lib.Inference(**options)).numpy()


def test_window_starts_step_by_the_stride_and_the_last_ends_at_the_edge():
  assert inference_lib.window_starts(37, 16, 5).numpy().tolist() == [0, 5, 10, 15, 20, 21]
  assert inference_lib.window_starts(32, 16, 16).numpy().tolist() == [0, 16]
  assert inference_lib.window_starts(16, 16, 7).numpy().tolist() == [0]


def test_one_window_over_the_image_gives_the_whole_images_logits():
  forward, images = smoke_forward(), random_images(2, 32, 32)
  whole = logits(forward, images)
  assert whole.shape == (2, 32, 32, 5)
  np.testing.assert_allclose(logits(forward, images, window=32, stride=16), whole, atol=1e-5)


@pytest.mark.parametrize("window,stride,max_pixels", [
    (16, 5, 16 * 16 * 2),  # overlapping windows, one per call of the network (a batch of 2 images)
    (16, 16, 4096),  # side by side, several per call
    (64, 8, 64 * 64 * 2),  # one window larger than the image, which is padded to it
])
def test_any_tiling_of_a_pointwise_network_is_exact(window, stride, max_pixels):
  forward, images = pointwise_forward(), random_images(2, 37, 53, seed=1)
  tiled = logits(forward, images, window=window, stride=stride, max_pixels=max_pixels)
  np.testing.assert_allclose(tiled, logits(forward, images), rtol=1e-5, atol=1e-6)


def test_flip_is_undone_and_averaged_and_scales_come_back_to_the_images_size():
  forward, images = smoke_forward(), random_images(1, 24, 36, seed=2)
  flipped = logits(forward, images, flip=True)
  by_hand = (logits(forward, images) + logits(forward, images[:, :, ::-1])[:, :, ::-1]) / 2
  np.testing.assert_allclose(flipped, by_hand, atol=1e-5)
  # Mirroring the input mirrors the augmented logits; a flip-equivariant network gains nothing.
  np.testing.assert_allclose(logits(forward, images[:, :, ::-1], flip=True), flipped[:, :, ::-1], atol=1e-5)
  pointwise = pointwise_forward()
  np.testing.assert_allclose(logits(pointwise, images, flip=True), logits(pointwise, images), atol=1e-6)
  # A uniform image stays uniform at every scale, in windows too.
  uniform = tf.fill([1, 37, 53, 3], tf.constant(90, tf.uint8))
  scaled = logits(pointwise, uniform, scales=(0.75, 1.0, 1.25), window=16, stride=12)
  assert scaled.shape == (1, 37, 53, 4)
  np.testing.assert_allclose(scaled, logits(pointwise, uniform), atol=1e-5)


def test_streamed_class_ids_are_the_argmax_of_the_whole_photos_logits():
  """Predict's strips of windows (streamed_class_ids: one strip's logits held, not the photo's) give
  each pixel the class of the averaged logits of every window over it: overlapping strips, the last
  aligned to the edge, a photo lower than a window, flipped too."""
  forward, image = smoke_forward(), random_images(1, 37, 53, seed=3)
  for window, stride, flip in ((16, 5, False), (16, 16, True), (24, 7, True), (64, 8, False)):
    inference = inference_lib.Inference(window=window, stride=stride, flip=flip, max_pixels=4096)
    assert inference.streams
    whole = logits(forward, image, window=window, stride=stride, flip=flip, max_pixels=4096)[0]
    seen, predict = [], task_lib.make_predict_fn(forward, inference)

    def strip_logits(strip):
      seen.append(tuple(strip.shape))
      return predict(strip)

    streamed = inference_lib.streamed_class_ids(strip_logits, image.numpy()[0], inference)
    assert streamed.shape == (37, 53) and streamed.dtype == np.uint8
    # The network's function saw strips of a window's rows (the photo's, when lower), never the photo.
    assert sorted(set(seen)) == [(1, min(window, 37), 53, 3)], seen
    top2 = np.sort(whole, axis=-1)[..., -2:]
    clear = top2[..., 1] - top2[..., 0] > 1e-4  # float sums in another order may swap a tie
    assert clear.mean() > 0.95, (window, stride)
    np.testing.assert_array_equal(streamed[clear], whole.argmax(-1)[clear])
  assert not inference_lib.Inference(window=16, stride=8, scales=(1.0, 1.5)).streams
  assert not inference_lib.Inference(window=16, stride=8, object_vote=True).streams  # an object spans strips


def flood_fill_regions(mask):
  """connected_regions by hand: a breadth-first fill of each 8-connected region, labelled with its
  last pixel's flat index."""
  labels = np.full(mask.shape, -1)
  for start in zip(*np.nonzero(mask)):
    if labels[start] >= 0:
      continue
    region, queue = [start], [start]
    labels[start] = 0
    while queue:
      b, y, x = queue.pop()
      for dy in (-1, 0, 1):
        for dx in (-1, 0, 1):
          n = (b, y + dy, x + dx)
          if 0 <= n[1] < mask.shape[1] and 0 <= n[2] < mask.shape[2] and mask[n] and labels[n] < 0:
            labels[n] = 0
            region.append(n)
            queue.append(n)
    labels[tuple(np.array(region).T)] = max(np.ravel_multi_index(p, mask.shape) for p in region)
  return labels


def test_connected_regions_are_a_flood_fill_of_8_connected_pixels():
  """Random masks (many small regions, diagonal contacts), a one-pixel spiral whose path is ten times
  its side, a maze of blocks, and two images of a batch, whose regions never join."""
  rng = np.random.default_rng(4)
  spiral = np.zeros((1, 41, 41), bool)
  top, bottom, left, right = 0, 40, 0, 40
  while top <= bottom and left <= right:
    spiral[0, top, left:right + 1] = spiral[0, top:bottom + 1, right] = True
    spiral[0, bottom, left:right + 1] = True
    spiral[0, top + 2:bottom + 1, left] = True
    top, bottom, left, right = top + 2, bottom - 2, left + 2, right - 2
  maze = np.kron(rng.random((1, 12, 16)) < 0.5, np.ones((1, 4, 4), bool))  # blocks joined at corners
  for mask in (rng.random((2, 23, 31)) < 0.45, rng.random((1, 40, 40)) < 0.6, spiral, maze):
    places = inference_lib.connected_regions(tf.constant(mask)).numpy()
    np.testing.assert_array_equal(np.flatnonzero(mask)[places], flood_fill_regions(mask)[mask])


def test_the_object_vote_gives_each_object_its_majority_class_and_keeps_its_outline_and_scores():
  """Two digits' worth of pixels called 3 and 5, mostly 3, and a separate object called 7 and 2, mostly
  7: each object ends as its majority class; each pixel's scores are its own in another order; the
  background and the objects' outlines stay as they were; on a whole batch, images apart."""
  rng = np.random.default_rng(5)
  called = np.zeros((2, 12, 16), np.int64)
  called[0, 1:6, 1:5] = 3
  called[0, 2:4, 2] = 5  # 2 of 20 pixels of the first object
  called[0, 6, 5] = 5  # touches the first object only at a corner: one object
  called[0, 7:11, 9:14] = 7
  called[0, 8, 9:13] = 2  # 4 of 20
  called[1, 0:3, 0:3] = 2  # the second image: one object of its own
  scores = rng.normal(size=(2, 12, 16, 8)).astype(np.float32)
  scores += 10 * np.eye(8, dtype=np.float32)[called]  # each pixel's top score is its called class
  voted = inference_lib.object_vote(tf.constant(scores)).numpy()
  expected = called.copy()
  expected[0][np.isin(called[0], (3, 5))] = 3
  expected[0][np.isin(called[0], (2, 7))] = 7
  np.testing.assert_array_equal(voted.argmax(-1), expected)
  np.testing.assert_array_equal(np.sort(voted, -1), np.sort(scores, -1))
  np.testing.assert_array_equal(voted[called == 0], scores[called == 0])
  untouched = tf.zeros([1, 4, 4, 3])  # nothing but background: nothing to vote on
  np.testing.assert_array_equal(inference_lib.object_vote(untouched).numpy(), untouched.numpy())
  on = logits(pointwise_forward(), random_images(1, 9, 9), object_vote=True)
  assert on.shape == (1, 9, 9, 4)


@pytest.mark.parametrize("overrides,line", [
    ({"eval.window": -1}, "eval.window=-1 must be an integer >= 0"),
    ({"eval.window": 32}, "eval.stride=0 must be in [1, eval.window=32]"),
    ({"eval.window": 32, "eval.stride": 48}, "eval.stride=48 must be in [1, eval.window=32]"),
    ({"eval.window": 4096, "eval.stride": 4096}, "eval.window=4096 is 16,777,216 pixels, more than data.eval_max_pixels=8,388,608"),
    ({"eval.scales": ()}, "eval.scales=() must be a non-empty sequence of scales in (0, 4]"),
    ({"eval.scales": (0.0, 1.0)}, "eval.scales=(0.0, 1.0) must be a non-empty sequence of scales in (0, 4]"),
])
def test_bad_eval_values_are_one_line(overrides, line):
  config = helpers.make_config("segmentation", "smoke", **overrides)
  with pytest.raises(ConfigError) as error:
    task_lib.validate_config(config)
  assert str(error.value).startswith(line) and "\n" not in str(error.value), str(error.value)


def test_a_photo_over_eval_max_pixels_is_refused_naming_eval_window_and_tiled_with_it(tmp_path, capsys):
  """The real command line, on a smoke run's workdir: a 70x90 photo over data.eval_max_pixels=1024
  is one line naming eval.window; with a window of 32 it is predicted in tiles, a mask of its size."""
  config, run = test_predict.segmentation_run(tmp_path)
  photo, pixels = tmp_path / "wide.png", random_images(1, 70, 90)
  Image.fromarray(pixels.numpy()[0]).save(photo)
  config_lib.set_value(config, "data.eval_max_pixels", 1024)
  line = test_predict.error_line(capsys, predict_lib.predict_files, [str(photo)], str(tmp_path / "refused"),
                                 config, workdir=run)
  assert line == (f"error: {photo}: 70x90 is 6,300 pixels, more than --max_pixels=1,024, the bound on the "
                  "memory of one whole image; resize it or raise --max_pixels, or set eval.window to evaluate "
                  "it in tiles")
  assert not (tmp_path / "refused").exists()
  result = helpers.run_python([
      "-m", "segmentation.predict", f"--workdir={run}", f"--output_dir={tmp_path / 'masks'}",
      "--config.data.eval_max_pixels=1024", "--config.eval.window=32", "--config.eval.stride=24", str(photo)])
  assert result.returncode == 0, result.stderr
  tiled = predict_lib.load_workdir(run, config, data_lib.read_settings(config.data, for_training=False),
                                   inference_lib.Inference(window=32, stride=24, max_pixels=1024))
  with Image.open(tmp_path / "masks" / "wide_mask.png") as mask:
    np.testing.assert_array_equal(np.asarray(mask), tiled(pixels.numpy()[0])[0])  # 70x90: the photo's size
