"""What TensorBoard shows of a segmentation run: training and evaluation images, the confusion matrix,
the config as text and the HParams, read back from the event files."""
import glob
import importlib.util
import io
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request

from unittest import mock

from absl import flags
from ml_collections import config_flags
import numpy as np
from PIL import Image
import pytest
import tensorflow as tf
from tensorboard.plugins.hparams import metadata as hparams_metadata

from common.training import evaluation
from common.training import plots
from common.training import summaries
import helpers
from inception_finetune import metrics as inception_metrics
from inception_finetune import task as inception_task
from segmentation import train


def images_of(events, tag):
  """The decoded PNGs of one image summary's last step, as uint8 arrays."""
  values = [value for name, plugin, _, value in events if name == tag and plugin == "images"]
  assert values, tag
  return [np.asarray(Image.open(io.BytesIO(png))) for png in values[-1].tensor.string_val[2:]]


def post_json(url, request):
  post = urllib.request.Request(url, json.dumps(request).encode(), {"Content-Type": "application/json"})
  with urllib.request.urlopen(post, timeout=30) as response:
    return json.load(response)


@pytest.fixture(scope="module")
def segmentation_run(module_tmp):
  """(runs folder, its one workdir, config, results) of a short segmentation run, its config from a
  command line parsed as the trainer's is (the HParams show what it set)."""
  runs = module_tmp("runs")
  # Fewer steps than summaries.images_every: the training images still come, at the evaluation.
  argv = ["segmentation.train", f"--config={helpers.REPO_ROOT}/configs/segmentation.py:smoke",
          "--config.train.num_steps=10", "--config.summaries.images_every=1000",
          "--config.summaries.activation_stats=True", "--config.train.profile_steps=(4,8)"]
  command_line = flags.FlagValues()
  config_flag = config_flags.DEFINE_config_file("config", flag_values=command_line, lock_config=True,
                                                sys_argv=argv)
  command_line(argv)
  with mock.patch.object(flags, "FLAGS", command_line):
    results = train.train_and_evaluate(config_flag.value, str(runs / "segmentation"))
  return runs, runs / "segmentation", config_flag.value, results


def test_a_segmentation_run_shows_images_confusion_matrix_config_and_hparams(segmentation_run):
  _, tmp_path, config, results = segmentation_run
  max_outputs = config.summaries.max_outputs

  train_events = helpers.read_events(tmp_path / "train")
  patches = images_of(train_events, "patches")  # photo, truth, prediction, their captions above
  assert len(patches) == max_outputs
  helpers.assert_shown_legibly(patches[0], [0])
  assert {"activations/" in tag for tag in helpers.scalar_tags(tmp_path / "train")} == {True, False}

  eval_events = helpers.read_events(tmp_path / "eval")
  for i in range(max_outputs):  # image, truth and prediction side by side, as the report's overlays
    assert images_of(eval_events, f"examples/{i}")  # (TensorBoard serves them legibly: below)
  assert not [tag for tag, _, _, _ in eval_events if tag == f"examples/{max_outputs}"]
  (confusion,) = images_of(eval_events, "confusion_matrix")  # as wide as TensorBoard shows it
  assert confusion.shape[1] == plots.TENSORBOARD_WIDTH and (confusion < 128).any()  # drawn: text, dark cells

  root_events = helpers.read_events(tmp_path)
  (text,) = [value for tag, plugin, _, value in root_events if plugin == "text"]
  assert text.tag == "config"
  shown = tf.make_ndarray(text.tensor).item().decode()
  with open(tmp_path / "config.json") as f:
    assert json.loads("\n".join(line[4:] for line in shown.splitlines())) == json.load(f)

  hparams = {tag: value.metadata.plugin_data.content for tag, plugin, _, value in root_events
             if plugin == "hparams"}
  session = hparams_metadata.parse_session_start_info_plugin_data(
      hparams[hparams_metadata.SESSION_START_INFO_TAG])
  # What a person varies, named as in the config, and what the command line set; no paths.
  assert session.hparams["preset"].string_value == "smoke"
  assert session.hparams["train.num_steps"].number_value == 10
  assert session.hparams["model.widths"].string_value == "(8, 16, 32)"
  assert session.hparams["optimizer.learning_rate"].number_value == config.optimizer.learning_rate
  assert session.hparams["summaries.images_every"].number_value == 1000  # set on the command line
  assert "data.cache_dir" not in session.hparams and "data.source" not in session.hparams
  experiment = hparams_metadata.parse_experiment_plugin_data(hparams[hparams_metadata.EXPERIMENT_TAG])
  columns = [info.name for info in experiment.hparam_infos]
  assert set(columns) <= set(summaries.HPARAM_KEYS) | {"preset", "train.num_steps", "summaries.images_every", "train.profile_steps",
                                                       "summaries.activation_stats"}
  # The plugin shows a metric's last value in the group's run: the final evaluation's.
  miou = helpers.read_scalars(tmp_path / "eval", "miou")
  assert miou[max(miou)] == pytest.approx(results["eval"]["miou"], rel=1e-6)  # float32 summaries


@pytest.mark.slow
def test_tensorboard_serves_chance_lines_named_trials_and_the_columns_shown(segmentation_run):
  """What TensorBoard's pages get over HTTP: the chance levels as lines on their metric's chart,
  the trial's name, the columns the HParams table shows by default, the final metrics."""
  runs, _, _, results = segmentation_run
  port = helpers.free_port()
  # The parent of the workdirs, as to compare runs (with the workdir itself as the logdir the plugin
  # looks for "./eval" and finds no metric values).
  server = subprocess.Popen([sys.executable, "-m", "tensorboard.main", "--logdir", str(runs),
                             "--host", "127.0.0.1", "--port", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
  try:
    url = f"http://127.0.0.1:{port}/data/plugin"
    assert helpers.wait_for_json(f"{url}/text/tags", lambda tags: tags, 120) == {"segmentation": ["config"]}
    # A chart per tag, a line per run: the chance levels are lines on miou's and pixel_accuracy's charts.
    tags = helpers.wait_for_json(f"{url}/scalars/tags", lambda tags: "segmentation/eval/chance" in tags, 60)
    assert sorted(tags["segmentation/eval/chance"]) == ["miou", "pixel_accuracy"]
    assert {"miou", "pixel_accuracy"} <= set(tags["segmentation/eval"])
    assert not [tag for run in tags.values() for tag in run if "chance" in tag]
    chance = helpers.wait_for_json(f"{url}/scalars/scalars?run=segmentation/eval/chance&tag=miou", bool, 10)
    assert [step for _, step, _ in chance] == sorted(helpers.read_scalars(runs / "segmentation" / "eval", "miou"))
    assert chance[-1][2] == pytest.approx(results["eval"]["chance_miou"])

    # The columns the HParams table shows by default: its first five hyperparameters (by name, of the
    # preset, the usual ones and the keys set on the command line) and five metrics (the headline ones first).
    experiment = post_json(f"{url}/hparams/experiment", {"experimentName": ""})
    assert [info["name"] for info in experiment["hparamInfos"][:5]] == [
        "optimizer.learning_rate", "optimizer.name", "preset", "summaries.activation_stats", "summaries.images_every"]
    metrics = [info["name"] for info in experiment["metricInfos"]]
    assert metrics[:2] == [{"group": "eval", "tag": "miou"}, {"group": "eval", "tag": "pixel_accuracy"}]
    assert {"group": "eval", "tag": "iou/00_background"} in metrics and not [
        name for name in metrics if "chance" in name["tag"]]

    request = {"experimentName": "", "startIndex": 0, "sliceSize": 10,
               "allowedStatuses": ["STATUS_UNKNOWN", "STATUS_SUCCESS", "STATUS_FAILURE", "STATUS_RUNNING"],
               "colParams": [{"metric": {"tag": "miou", "group": "eval"}}, {"hparam": "train.num_steps"}]}
    deadline = time.time() + 60
    while True:  # until the server has read eval/ too
      (group,) = post_json(f"{url}/hparams/session_groups", request)["sessionGroups"]
      if group["metricValues"] or time.time() > deadline:
        break
      time.sleep(1)
    assert group["name"] == "segmentation"  # the trial: the workdir's folder
    assert [session["name"] for session in group["sessions"]] == ["segmentation"]
    assert group["hparams"]["train.num_steps"] == 10
    (miou,) = [m for m in group["metricValues"] if m["name"] == {"group": "eval", "tag": "miou"}]
    assert (miou["trainingStep"], miou["value"]) == (results["step"], pytest.approx(results["eval"]["miou"]))
    # An evaluation example as the Images tab gets it: shown at least at its own size, its text legible.
    (example,) = helpers.wait_for_json(f"{url}/images/images?run=segmentation/eval&tag=examples/0", bool, 10)
    with urllib.request.urlopen(f"{url}/images/individualImage?{example['query']}", timeout=30) as response:
      helpers.assert_shown_legibly(np.asarray(Image.open(io.BytesIO(response.read()))), [0])
    # train.profile_steps's profile, in the Profile tab's list (with the profile extra; CI installs it).
    (profile,) = glob.glob(str(runs / "segmentation" / "train" / "plugins" / "profile" / "*" / "*.xplane.pb"))
    if importlib.util.find_spec("tensorboard_plugin_profile"):
      session = os.path.basename(os.path.dirname(profile))
      assert helpers.wait_for_json(f"{url}/profile/runs", lambda found: found, 60) == [
          f"segmentation/train/{session}"]
  finally:
    server.send_signal(signal.SIGTERM)
    server.wait(timeout=30)


def test_inception_evaluation_images_are_the_evaluated_ones_with_their_labels():
  """The sampler keeps the first examples an evaluation scored, with the outputs it scored them by."""
  images = tf.random.stateless_uniform([5, 20, 24, 3], [1, 2], minval=-1, maxval=1)
  labels = tf.constant([0, 1, 2, 1, 0])
  dataset = tf.data.Dataset.from_tensor_slices((images, labels)).batch(2)
  calls = []

  def predict(batch):  # class 1 for every image: right for the second and fourth
    calls.append(len(batch))
    return tf.one_hot(tf.ones([len(batch)], tf.int32), 3)

  sampler = evaluation.EvalSampler(dataset, predict, 3)
  result = inception_metrics.evaluate(sampler.predict, sampler.batches(), 3)
  assert calls == [2, 2, 1] and result.top1 == pytest.approx(2 / 5)  # no extra forward pass
  shown = inception_task.evaluation_summaries(sampler, result.confusion, ["cat", "dog", "owl"])
  assert sorted(shown) == ["confusion_matrix", "examples/0", "examples/1", "examples/2"]
  for i, label in enumerate([0, 1, 2]):
    (example,) = shown[f"examples/{i}"]
    assert example.dtype == np.uint8
    helpers.assert_shown_legibly(example, [-1])  # "predicted: ...", the last line
    # Enlarged to fill the box above two caption lines (213 - 2 * 20 - 4 px): the image at its pixels' centres.
    scale = 169 / 20
    centres = [((np.arange(n) + 0.5) * scale).astype(int) for n in (20, 24)]
    np.testing.assert_array_equal(example[centres[0]][:, centres[1]], plots.to_uint8((images[i].numpy() + 1) / 2))
    red = (example[169:, :, 0] > 200) & (example[169:, :, 1] < 80)  # a wrong prediction's line
    assert red.any() == (label != 1)
  assert shown["confusion_matrix"].shape[:1] + shown["confusion_matrix"].shape[2:] == (1, plots.TENSORBOARD_WIDTH, 3)


def test_inception_chance_levels_are_lines_on_the_top1_chart():
  """Each chance level goes to a run of its own under its metric's tag; a name that is no metric's
  chance stays a chart of its own."""
  names = ["top1", "top5", "chance_top1_majority", "chance_top1_uniform", "chance_miou"]  # no miou
  assert summaries.chance_runs(names) == {"chance_top1_majority": ("chance_majority", "top1"),
                                          "chance_top1_uniform": ("chance_uniform", "top1")}
