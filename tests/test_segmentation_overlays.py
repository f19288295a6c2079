"""Segmentation's own action in the loop (segmentation/overlays.py, its Task.make_actions): the overlays
of fixed evaluation images come at the steps eval.overlays_every names, and one step per compiled call
and calls of up to 100 steps train bit-identical weights with it on."""
import hashlib

import numpy as np

from common.app import startup
from common.training import train_loop
from helpers import make_config
from helpers import read_events
from segmentation import task as segmentation_task

STEPS = 6
# The overlays every 2 steps; every other cadence at the run's end alone.
QUIET = {"train.num_steps": STEPS, "eval.overlays_every": 2, "train.seconds_per_loop": 0.0,
         "train.log_every": STEPS, "train.eval_every": STEPS, "train.checkpoint_every": STEPS,
         "summaries.scalars_every": STEPS, "summaries.images_every": 1000, "summaries.max_outputs": 2}


def train(workdir, cache_dir, steps_per_loop):
  """The smoke preset trained through the shared loop as segmentation/train.py does; the weights' digest."""
  config = make_config("segmentation", "smoke", **QUIET, **{"train.steps_per_loop": steps_per_loop,
                                                             "data.cache_dir": str(cache_dir)})
  strategy = startup.prepare_run(config, str(workdir))
  task = segmentation_task.make_task(config, str(workdir))
  with strategy.scope():
    model = task.build_model()
    phases = task.make_phases(model, config.mixed_precision)
  train_loop.train(config, str(workdir), strategy=strategy, model=model, phases=phases, task=task)
  return hashlib.sha256(b"".join(np.asarray(v).tobytes() for v in model.weights)).hexdigest()


def overlays(logdir):
  """{step: sorted tags} of the overlay images in a run's train/ events."""
  found = {}
  for name, _, step, _ in read_events(logdir):
    if name.startswith("overlays/"):
      found.setdefault(step, []).append(name)
  return {step: sorted(tags) for step, tags in found.items()}


def test_overlays_come_at_their_cadence_and_change_no_weight(tmp_path):
  weights = {}
  for steps_per_loop in (1, 100):
    workdir = tmp_path / f"loop{steps_per_loop}"
    weights[steps_per_loop] = train(workdir, tmp_path / "data", steps_per_loop)
    assert overlays(workdir / "train") == {step: ["overlays/0", "overlays/1"] for step in (2, 4, 6)}
  assert weights[1] == weights[100]

