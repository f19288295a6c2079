"""TensorBoard's Projector of a triplet run: the newest evaluation's embeddings of the held-out images,
with their identities, files and thumbnails, as TensorBoard's own projector plugin serves them."""
import glob
import json
import os

from google.protobuf import text_format
import numpy as np
from PIL import Image
import pytest
import tensorflow as tf
from tensorboard.backend.event_processing import data_provider
from tensorboard.backend.event_processing import plugin_event_multiplexer
from tensorboard.plugins import base_plugin
from tensorboard.plugins import projector
from tensorboard.plugins.projector import projector_plugin
from werkzeug import test as werkzeug_test

from common.training import evaluation as evaluation_lib
from common.training import summaries
import helpers
from triplet import data as triplet_data
from triplet import input_pipeline as triplet_pipeline
from triplet import metrics
from triplet import sources as triplet_sources
from triplet import task as triplet_task
from triplet import train


@pytest.fixture(scope="module")
def triplet_run(module_tmp):
  """(runs folder, workdir, config) of a smoke run that evaluates at steps 10 and 20."""
  runs = module_tmp("runs")
  config = helpers.make_config("triplet", "smoke", **{"train.eval_every": 10})
  train.train_and_evaluate(config, str(runs / "triplet"))
  return runs, runs / "triplet", config


def projector_files(eval_dir):
  """(the config's one embedding, its vectors, its metadata rows) as the plugin would read them."""
  with open(os.path.join(eval_dir, "projector_config.pbtxt")) as f:
    (embedding,) = text_format.Parse(f.read(), projector.ProjectorConfig()).embeddings
  vectors = tf.train.load_checkpoint(tf.train.latest_checkpoint(eval_dir)).get_tensor(embedding.tensor_name)
  with open(os.path.join(eval_dir, embedding.metadata_path)) as f:
    rows = [line.rstrip("\n").split("\t") for line in f]
  return embedding, vectors, rows


def plugin_get(logdir):
  """get(route, **query) -> the body of TensorBoard's projector plugin's answer for logdir."""
  multiplexer = plugin_event_multiplexer.EventMultiplexer()
  multiplexer.AddRunsFromDirectory(logdir)
  multiplexer.Reload()
  plugin = projector_plugin.ProjectorPlugin(base_plugin.TBContext(
      logdir=logdir, data_provider=data_provider.MultiplexerDataProvider(multiplexer, logdir)))
  apps = plugin.get_plugin_apps()

  def get(route, **query):
    response = werkzeug_test.Client(apps[route]).get("/", query_string=query)
    assert response.status_code == 200, response.get_data(as_text=True)
    return response.get_data()

  return get


def test_the_eval_folder_holds_the_newest_evaluations_embeddings_of_the_held_out_images(triplet_run):
  _, workdir, config = triplet_run
  eval_dir = str(workdir / "eval")
  embedding, vectors, (header, *rows) = projector_files(eval_dir)
  # One checkpoint, the last evaluation's: step 10's was replaced.
  assert tf.train.latest_checkpoint(eval_dir) == os.path.join(eval_dir, "embeddings-20")
  assert [os.path.basename(p) for p in glob.glob(os.path.join(eval_dir, "embeddings-*.index"))] == [
      "embeddings-20.index"]
  assert embedding.tensor_name == "embeddings_step_20/.ATTRIBUTES/VARIABLE_VALUE"
  assert header == ["identity", "file"]
  files = [file for _, file in rows]
  eval_data = triplet_sources.load_eval_data(triplet_data.read_settings(config.data), config.seed, str(workdir))
  assert files == metrics.images_to_embed(eval_data) and len(files) == 12  # 4 identities x 3 images
  assert [identity for identity, _ in rows] == [os.path.basename(os.path.dirname(f)) for f in files]
  assert len(set(identity for identity, _ in rows)) == 4

  # The embeddings the model of the newest checkpoint (step 20's) gives those images.
  task = triplet_task.make_task(config, str(workdir), for_training=False)
  predict = evaluation_lib.load_predict_fn(task, str(workdir))
  cfg = config.data
  expected = metrics.compute_embeddings(predict, triplet_pipeline.make_eval_dataset(
      files, cfg.load_size, cfg.crop_size, cfg.normalization, cfg.eval_batch_size))
  assert vectors.dtype == np.float32 and vectors.shape == (12, config.model.embedding_size)
  np.testing.assert_allclose(vectors, expected, atol=1e-5)
  np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, rtol=1e-5)

  # The sprite (a JPEG): 4 x 4 cells of the 20 px images (smaller than the thumbnails), row by row,
  # each nearest to its own image (the images are noisy: JPEG keeps their shapes, not every pixel).
  size = cfg.load_size
  assert size < summaries.THUMBNAIL_SIZE and list(embedding.sprite.single_image_dim) == [size, size]
  sprite = np.asarray(Image.open(os.path.join(eval_dir, embedding.sprite.image_path)), np.float64)
  assert sprite.shape == (4 * size, 4 * size, 3)
  images = np.stack([np.asarray(Image.open(file).convert("RGB"), np.float64) for file in files])
  for i in range(len(files)):
    cell = sprite[i // 4 * size:(i // 4 + 1) * size, i % 4 * size:(i % 4 + 1) * size]
    differences = np.abs(images - cell).mean(axis=(1, 2, 3))
    assert differences.argmin() == i and differences[i] < 15, differences
  assert sprite[3 * size:].mean() < 3  # the last row's 4 cells hold no point: black (JPEG: nearly)


def test_tensorboards_projector_plugin_serves_them(triplet_run):
  runs, workdir, config = triplet_run
  embedding, vectors, rows = projector_files(str(workdir / "eval"))
  get = plugin_get(str(runs))
  # Only eval/ has embeddings: train/ and the run's root find no checkpoint (the training's are
  # in checkpoints/, which the plugin does not look into).
  assert json.loads(get("/runs")) == ["triplet/eval"]
  run, name = "triplet/eval", embedding.tensor_name
  (info,) = json.loads(get("/info", run=run))["embeddings"]
  assert info["tensorName"] == name and info["tensorShape"] == [12, config.model.embedding_size]
  np.testing.assert_array_equal(np.frombuffer(get("/tensor", run=run, name=name), np.float32).reshape(
      vectors.shape), vectors)
  assert [line.split("\t") for line in get("/metadata", run=run, name=name).decode().splitlines()] == rows
  with open(workdir / "eval" / embedding.sprite.image_path, "rb") as f:
    assert get("/sprite_image", run=run, name=name) == f.read()


def test_the_evaluation_gives_at_most_max_projector_points(tmp_path):
  for max_points, expected in ((5, 5), (100, 12), (0, None)):
    config = helpers.make_config("triplet", "smoke", **{"summaries.max_projector_points": max_points})
    task = triplet_task.make_task(config, str(tmp_path), for_training=False)
    evaluation = task.evaluate(metrics.raw_pixel_embeddings, False)  # crops as embeddings: no model
    if expected is None:
      assert evaluation.embeddings is None
      continue
    vectors, metadata, thumbnails = evaluation.embeddings()
    crop = config.data.crop_size
    assert vectors.shape == (expected, crop * crop * 3) and vectors.dtype == np.float32
    assert [len(values) for values in metadata.values()] == [expected, expected]
    assert thumbnails.shape == (expected, config.data.load_size, config.data.load_size, 3)


def test_one_metadata_column_has_no_header_and_values_stay_on_their_line(tmp_path):
  config = helpers.make_config("triplet", "smoke")
  budget = summaries.SummaryBudget(str(tmp_path), config.summaries)
  vectors = np.eye(3, dtype=np.float32)
  thumbnails = np.full([3, 8, 8, 3], 200, np.uint8)
  budget.write_embeddings(7, vectors, {"name": ["a\tb", "c\nd", "e"]}, thumbnails)
  embedding, saved, rows = projector_files(str(tmp_path))
  assert rows == [["a b"], ["c d"], ["e"]]
  np.testing.assert_array_equal(saved, vectors)
  get = plugin_get(str(tmp_path))  # no event file: the logdir itself is the run "."
  served = get("/tensor", run=".", name=embedding.tensor_name)
  np.testing.assert_array_equal(np.frombuffer(served, np.float32), vectors.ravel())

  # A running TensorBoard shows the next evaluation's points, not the ones it served before.
  budget.write_embeddings(8, 2 * vectors, {"name": ["x", "y", "z"]}, thumbnails)
  embedding, saved, rows = projector_files(str(tmp_path))
  assert rows == [["x"], ["y"], ["z"]] and os.listdir(tmp_path).count("embeddings-7.index") == 0
  (info,) = json.loads(get("/info", run="."))["embeddings"]
  assert info["tensorName"] == embedding.tensor_name
  served = get("/tensor", run=".", name=embedding.tensor_name)
  np.testing.assert_array_equal(np.frombuffer(served, np.float32), 2 * vectors.ravel())
  assert get("/metadata", run=".", name=embedding.tensor_name) == b"x\ny\nz\n"
  sprite = np.asarray(Image.open(tmp_path / embedding.sprite.image_path), np.float64)
  assert sprite.shape == (16, 16, 3) and list(embedding.sprite.single_image_dim) == [8, 8]
  # Three grey cells from the top left, row by row, and a black one (JPEG: nearly).
  for cell in (sprite[:8, :8], sprite[:8, 8:], sprite[8:, :8]):
    assert np.abs(cell - 200).mean() < 3
  assert sprite[8:, 8:].mean() < 3
