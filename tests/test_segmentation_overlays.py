"""Segmentation's own action in the loop (segmentation/overlays.py, its Task.make_actions): the overlays
of fixed evaluation images come at the steps eval.overlays_every names, and one step per compiled call
and calls of up to 100 steps train bit-identical weights with it on; on two workers the chief alone
writes them, at the same steps."""
import hashlib
import os
import re

import numpy as np
import pytest

from common.app import startup
from common.training import train_loop
from helpers import make_config
from helpers import read_events
from segmentation import task as segmentation_task
import test_multi_worker

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


@pytest.mark.slow
def test_overlays_come_at_their_cadence_and_change_no_weight(tmp_path):
  weights = {}
  for steps_per_loop in (1, 100):
    workdir = tmp_path / f"loop{steps_per_loop}"
    weights[steps_per_loop] = train(workdir, tmp_path / "data", steps_per_loop)
    assert overlays(workdir / "train") == {step: ["overlays/0", "overlays/1"] for step in (2, 4, 6)}
  assert weights[1] == weights[100]



# `python -c SAYS_OVERLAYS module flags...` runs the trainer module; each worker prints a line each
# time its overlay action runs (the loop's chief_only decides where it runs, not the action).
SAYS_OVERLAYS = """
import dataclasses, runpy, sys
from segmentation import overlays
make = overlays.make_overlay_actions

def saying(run):
  def wrapped(call):
    print("overlays at step", call.step, flush=True)
    return run(call)
  return wrapped

overlays.make_overlay_actions = lambda *args: [dataclasses.replace(a, run=saying(a.run)) for a in make(*args)]
sys.argv = sys.argv[1:]
runpy.run_module(sys.argv[0], run_name="__main__", alter_sys=True)
"""


@pytest.mark.slow
def test_on_two_workers_the_chief_alone_writes_them_at_their_cadence(tmp_path):
  workdir = tmp_path / "run"
  flags = [f"--config.{key}={value}" for key, value in QUIET.items()]
  code, output = test_multi_worker.launch(["-c", SAYS_OVERLAYS, "segmentation.train",
                                           "--config=configs/segmentation.py:smoke", f"--workdir={workdir}",
                                           *flags], tmp_path / "tmp")
  assert code == 0, output[-3000:]
  said = re.findall(r"^\[worker (\d+)\] overlays at step (\d+)$", output, re.M)
  assert said == [("0", "2"), ("0", "4"), ("0", "6")], output[-3000:]
  # Written once a step (a second writer's events would repeat the tags), in the run's train/ alone.
  assert overlays(workdir / "train") == {step: ["overlays/0", "overlays/1"] for step in (2, 4, 6)}
  assert os.listdir(tmp_path / "tmp") == []
