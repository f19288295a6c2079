"""Optimizers and learning-rate schedules: each schedule against its formula, each optimizer
training the segmentation smoke preset with the rate in TensorBoard following the formula."""
import math

import keras
import numpy as np
import pytest

from common.nn import optimizers
from configs import inception_v4 as inception_config
from inception_finetune import task as inception_task
from segmentation import train
from tests.helpers import make_config, read_scalars


def expected_rate(opt, num_steps, step, learning_rate):
  """The schedules as their papers and TF-Slim write them, with the step counted from 0."""
  if opt.schedule == "constant":
    rate = learning_rate
  elif opt.schedule == "exponential":
    exponent = step / opt.decay_steps
    rate = learning_rate * opt.decay_rate**(math.floor(exponent) if opt.staircase else exponent)
  elif opt.schedule == "cosine":
    progress = min(step, num_steps) / num_steps
    rate = learning_rate * (opt.final_fraction + (1 - opt.final_fraction) * 0.5 * (1 + math.cos(math.pi * progress)))
  elif opt.schedule == "piecewise":
    rate = learning_rate * opt.decay_rate**sum(step > boundary for boundary in opt.boundaries)
  else:
    end = learning_rate * opt.final_fraction
    rate = (learning_rate - end) * (1 - min(step, num_steps) / num_steps)**opt.power + end
  if step < opt.warmup_steps:
    rate *= (step + 1) / opt.warmup_steps
  return rate


SETTINGS = {  # one optimizer with each schedule; warm-up on some
    "adam-constant-warmup": {"optimizer.name": "adam", "optimizer.schedule": "constant",
                             "optimizer.warmup_steps": 10},
    "adamw-cosine-warmup": {"optimizer.name": "adamw", "optimizer.schedule": "cosine",
                            "optimizer.warmup_steps": 5, "optimizer.final_fraction": 0.1},
    "sgd-nesterov-piecewise": {"optimizer.name": "sgd", "optimizer.sgd.nesterov": True,
                               "optimizer.learning_rate": 0.05, "optimizer.schedule": "piecewise",
                               "optimizer.boundaries": (10, 20), "optimizer.decay_rate": 0.3},
    "rmsprop-exponential-staircase": {"optimizer.name": "rmsprop", "optimizer.learning_rate": 0.05,
                                      "optimizer.schedule": "exponential", "optimizer.decay_steps": 8,
                                      "optimizer.decay_rate": 0.5, "optimizer.staircase": True},
    "sgd-polynomial": {"optimizer.name": "sgd", "optimizer.learning_rate": 0.05,
                       "optimizer.schedule": "polynomial", "optimizer.power": 2.0,
                       "optimizer.final_fraction": 0.05},
}


@pytest.mark.parametrize("name", sorted(SETTINGS))
def test_schedule_follows_its_formula_at_every_step(name):
  config = make_config("segmentation", **SETTINGS[name])
  opt, steps = config.optimizer, 40
  schedule = optimizers.make_schedule(opt, steps, opt.learning_rate)
  got = [float(schedule(step)) for step in range(steps + 5)]  # past the end too
  want = [expected_rate(opt, steps, step, opt.learning_rate) for step in range(steps + 5)]
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-12)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(SETTINGS))
def test_each_optimizer_trains_the_smoke_preset_and_logs_its_rate(tmp_path, name):
  config = make_config("segmentation", **SETTINGS[name], **{"summaries.scalars_every": 1})
  results = train.train_and_evaluate(config, str(tmp_path))
  assert results["step"] == config.train.num_steps
  losses = read_scalars(str(tmp_path / "train"), "loss")
  assert all(math.isfinite(v) for v in losses.values())
  assert np.mean([losses[s] for s in range(21, 31)]) < np.mean([losses[s] for s in range(1, 11)])
  # The rate in TensorBoard at step s is the schedule's after s updates (the next update's).
  rates = read_scalars(str(tmp_path / "train"), "learning_rate")
  assert sorted(rates) == list(range(1, config.train.num_steps + 1))
  want = [expected_rate(config.optimizer, config.train.num_steps, s, config.optimizer.learning_rate)
          for s in sorted(rates)]
  np.testing.assert_allclose([rates[s] for s in sorted(rates)], want, rtol=1e-5, atol=1e-12)


def test_inception_default_preset_takes_tf_slims_rmsprop():
  config = inception_config.get_config("default")
  config.optimizer.name = "rmsprop"
  inception_task.validate_config(config)
  head, unfrozen = inception_task.make_phases(config, model=None, mixed_precision=False)
  for phase, rate in ((head, config.optimizer.learning_rate), (unfrozen, config.finetune.learning_rate)):
    inner = phase.optimizer.inner_optimizer
    assert type(inner).__name__ == "RMSprop"
    # TF-Slim's train_image_classifier.py: rmsprop_decay 0.9, rmsprop_momentum 0.9, opt_epsilon 1.0.
    assert (inner.rho, inner.momentum, inner.epsilon) == (0.9, 0.9, 1.0)
    assert float(inner.learning_rate) == pytest.approx(rate)


def test_adamw_decays_kernels_only():
  config = make_config("segmentation", **{"optimizer.name": "adamw"})
  optimizer = optimizers.make_optimizer(config.optimizer, False, 10)
  dense, norm = keras.layers.Dense(3), keras.layers.BatchNormalization()
  norm(dense(np.zeros((1, 2), np.float32)))
  variables = dense.trainable_weights + norm.trainable_weights
  for v in variables:
    v.assign(np.ones(v.shape, np.float32))
  optimizer.apply([np.zeros(v.shape, np.float32) for v in variables], variables)  # only the decay moves
  shrunk = {v.name: bool(np.all(v.numpy() < 1.0)) for v in variables}
  assert shrunk == {"kernel": True, "bias": False, "gamma": False, "beta": False}
