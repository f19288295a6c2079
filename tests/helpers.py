"""Helpers the test modules share: configs with overrides, TensorBoard events, subprocess runs and
servers, stand-in inputs (a VOC folder, a TF-Slim Inception V4 checkpoint)."""
import dataclasses
import glob
import gzip
import importlib
import json
import os
import re
import shlex
import socket
import subprocess
import sys
import time
import urllib.request

import numpy as np
from PIL import Image
import tensorflow as tf
from tensorboard.compat.proto import event_pb2

from common.contract import task as task_lib
from common.training import plots
from inception_finetune import inception_v4
from inception_finetune import slim_checkpoint
from segmentation import visualize

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def make_config(trainer_config, preset="smoke", **overrides):
  """configs/<trainer_config>.py's preset with {dotted.key: value} overrides applied."""
  config = importlib.import_module(f"configs.{trainer_config}").get_config(preset)
  for key, value in overrides.items():
    *parents, leaf = key.split(".")
    node = config
    for part in parents:
      node = node[part]
    node[leaf] = value
  return config


def settings_keys(settings, section):
  """The keys of a config section that its frozen settings (common/contract/settings.read) hold, in
  their groups: a subsection (data.augment) by its own name."""
  keys = []
  for field in dataclasses.fields(settings):
    value = getattr(settings, field.name)
    subsection = field.name in section and hasattr(section[field.name], "keys")
    keys += settings_keys(value, section) if dataclasses.is_dataclass(value) and not subsection else [field.name]
  return keys


def read_events(logdir):
  """[(tag, plugin name, step, value proto)] of every summary in a run directory's event files."""
  found = []
  for path in sorted(glob.glob(os.path.join(logdir, "events.out.tfevents*"))):
    for record in tf.data.TFRecordDataset(path):
      event = event_pb2.Event.FromString(record.numpy())
      for value in event.summary.value:
        found.append((value.tag, value.metadata.plugin_data.plugin_name, event.step, value))
  return found


def ink_heights(image):
  """The heights of the runs of rows that hold dark pixels, top to bottom: a line of text each, or a
  picture."""
  dark = (np.asarray(image)[..., :3].min(axis=-1) < 128).any(axis=1).astype(np.int8)
  edges = np.flatnonzero(np.diff(np.concatenate([[0], dark, [0]])))
  return list(edges[1::2] - edges[::2])


def assert_shown_legibly(image, text_lines):
  """TensorBoard shows the image at least at its own size (within its box), and the given lines of
  text (indices into ink_heights) at least 12 px from ascender to descender."""
  assert image.shape[1] <= plots.TENSORBOARD_BOX[0] and image.shape[0] <= plots.TENSORBOARD_BOX[1], image.shape
  heights = ink_heights(image)
  assert min(heights[i] for i in text_lines) >= 12, heights


def read_scalars(logdir, tag):
  """{step: value} of one scalar summary."""
  return {step: float(tf.make_ndarray(value.tensor))
          for name, _, step, value in read_events(logdir) if name == tag}


def scalar_tags(logdir):
  return {tag for tag, plugin, _, _ in read_events(logdir) if plugin == "scalars"}


def run_python(args, cwd=REPO_ROOT, timeout=900, env=None):
  """Runs `python args...` in cwd as a user would; returns the CompletedProcess (text output)."""
  env = dict(os.environ if env is None else env, TF_CPP_MIN_LOG_LEVEL="2")
  return subprocess.run([sys.executable] + list(args), cwd=cwd, capture_output=True, text=True,
                        timeout=timeout, env=env)


def _doc_files():
  """The documentation's Markdown files, in reading order: README.md, each trainer's README.md
  beside its code, docs/*.md."""
  trainers = sorted(os.path.relpath(path, REPO_ROOT) for path in glob.glob(os.path.join(REPO_ROOT, "*", "README.md")))
  docs = sorted(os.path.relpath(path, REPO_ROOT) for path in glob.glob(os.path.join(REPO_ROOT, "docs", "*.md")))
  return ["README.md"] + trainers + docs


DOC_FILES = _doc_files()


def read_doc(path):
  with open(os.path.join(REPO_ROOT, path), encoding="utf-8") as f:
    return f.read()


def readme_command(start, paths=(), workdir=None):
  """The arguments after `python` of the documentation's one command line that starts with `start`
  (`\\` continuations joined; any of DOC_FILES), each (documented path, path) of `paths` swapped,
  --workdir=workdir last."""
  found = [line.strip() for doc in DOC_FILES for line in re.sub(r"\\\n\s*", " ", read_doc(doc)).splitlines()
           if line.strip().startswith(start)]
  assert len(found) == 1, f"{DOC_FILES}: {len(found)} command lines start with {start!r}"
  args = []
  for word in shlex.split(found[0])[1:]:
    for old, new in paths:
      word = word.replace(old, str(new))
    if not word.startswith("--workdir="):
      args.append(word)
  return args + [f"--workdir={workdir}"] if workdir else args


def free_port():
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def wait_for_json(url, ready, timeout_s):
  """The JSON at url once ready(answer) holds (a server starting up), or the last answer (None if
  it never answered) after timeout_s."""
  answer = None
  deadline = time.time() + timeout_s
  while time.time() < deadline:
    try:
      with urllib.request.urlopen(url, timeout=5) as response:
        body = response.read()
        # The profile plugin gzips its answers whatever the request accepts.
        answer = json.loads(gzip.decompress(body) if response.headers.get("Content-Encoding") == "gzip"
                            else body)
      if ready(answer):
        break
    except OSError:
      pass
    time.sleep(1)
  return answer


def write_slim_inception_checkpoint(path, seed=1):
  """A stand-in for the published TF-Slim Inception V4 checkpoint: its names and shapes (1001
  classes, without the aux head), random weights. Returns the path."""
  tf.keras.utils.set_random_seed(seed)
  source = inception_v4.inception_v4(num_classes=1001, input_shape=(75, 75, 3), aux_logits=False)
  return slim_checkpoint.write_slim_checkpoint(source, path)


def write_voc(root, num_images=4, size=(20, 16)):
  """A Pascal VOC layout with JPEG images and palette masks; returns the masks' indices."""
  rng = np.random.default_rng(1)
  for sub in ("JPEGImages", "SegmentationClass", "ImageSets/Segmentation"):
    (root / sub).mkdir(parents=True)
  masks = []
  for i in range(num_images):
    mask = rng.integers(0, 21, size=size).astype(np.uint8)
    mask[0] = 255  # VOC's object borders
    Image.fromarray(rng.integers(0, 256, size=size + (3,), dtype=np.uint8)).save(
        root / "JPEGImages" / f"2007_{i:06d}.jpg")
    palette_mask = Image.fromarray(mask, mode="P")
    palette_mask.putpalette(visualize.voc_palette())
    palette_mask.save(root / "SegmentationClass" / f"2007_{i:06d}.png")
    masks.append(mask)
  ids = [f"2007_{i:06d}" for i in range(num_images)]
  (root / "ImageSets/Segmentation/train.txt").write_text("\n".join(ids[:-1]) + "\n")
  (root / "ImageSets/Segmentation/val.txt").write_text(ids[-1] + "\n")
  return masks


def loop_task(train_dataset, loss_fn, metrics_fn=None, image_summaries_fn=None):
  """A Task with what the training loop uses, for tests of common/ on models defined in the tests.

  metrics_fn(model) -> {name: float} is the evaluation (none by default).
  """

  def make_predict_fn(model):
    return model

  def evaluate(model, from_saved_model):
    del from_saved_model
    return task_lib.Evaluation(metrics_fn(model) if metrics_fn else {})

  return task_lib.Task(
      name="test", train_dataset=train_dataset, eval_dataset=None, build_model=None,
      make_phases=None, loss_fn=loss_fn, make_predict_fn=make_predict_fn, evaluate=evaluate,
      saved_model_predict_fn=None, export=None, image_summaries_fn=image_summaries_fn)
