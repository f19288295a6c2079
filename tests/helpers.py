"""Helpers the test modules share: configs with overrides, TensorBoard events, subprocess runs."""
import glob
import importlib
import os
import subprocess
import sys

import tensorflow as tf
from tensorboard.compat.proto import event_pb2

from common import task as task_lib

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


def read_events(logdir):
  """[(tag, plugin name, step, value proto)] of every summary in a run directory's event files."""
  found = []
  for path in sorted(glob.glob(os.path.join(logdir, "events.out.tfevents*"))):
    for record in tf.data.TFRecordDataset(path):
      event = event_pb2.Event.FromString(record.numpy())
      for value in event.summary.value:
        found.append((value.tag, value.metadata.plugin_data.plugin_name, event.step, value))
  return found


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
