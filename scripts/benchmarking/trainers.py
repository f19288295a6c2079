"""The trainers benchmarked, each through its own config file and task: per precision, variant and
phase, the timed rows of scripts/benchmark.py's table, with the memory estimate and FLOPs."""
import ast
import dataclasses
import importlib
import math
import os
import time

import keras
import tensorflow as tf

from common.app.trainers import find_trainers
from common.contract import checks
from common.contract import config as config_lib
from common.contract.errors import ConfigError
from common.runtime import hardware
from common.training import distributed
from common.training import train_step
from scripts.benchmarking import exports as exports_lib
from scripts.benchmarking import flops as flops_lib
from scripts.benchmarking import memory_estimate
from scripts.benchmarking import timing
from scripts.peers import measure

# trainer (its task's NAME): (its config module, its task module), of every trainer of the repository
# (one new_trainer.py made included). They are imported when the trainer is benchmarked, so that
# benchmarking one trainer needs nothing from the others.
TRAINERS = {trainer.name: (trainer.config_module, f"{trainer.package}.task") for trainer in find_trainers()}
VARIANTS = ("float32", "float32+xla", "mixed", "mixed+xla")
BUDGET_MB = 4096  # the GTX 960M
# The GTX 960M's float32 peak: 640 CUDA cores, a multiply-add (2 FLOP) each per cycle at the 1,176
# MHz boost clock. A step bound by FLOPs alone would take the images of that rate, the most the card
# can ask of the input pipeline.
GTX960M_GFLOPS = 640 * 2 * 1.176
# Left out on a machine without a GPU unless --variants names them.
CPU_SLOW_VARIANTS = {
    "mixed": ("without XLA, TensorFlow's float16 convolution gradients on a CPU are hundreds of times "
              "slower than float32 (a 3x3 convolution 64->96 at 37x37, batch 16: 20 s against "
              "0.04 s on 2 cores); --variants "
              "float32,float32+xla,mixed,mixed+xla runs it anyway"),
}


def load_config(trainer, preset, overrides, batch_size):
  """The trainer's config with the preset, KEY=VALUE overrides and batch size applied."""
  config = importlib.import_module(TRAINERS[trainer][0]).get_config(preset)
  for override in overrides:
    key, sep, text = override.partition("=")
    if not sep:
      raise ConfigError(f"--set {override}: write KEY=VALUE, e.g. data.image_size=150")
    config_lib.set_value(config, key, _parse_value(text))
  if batch_size:
    if trainer == "triplet":  # the batch is P identities x K images
      k = config.data.images_per_identity
      if batch_size % k:
        raise ConfigError(f"--batch_size {batch_size} is not a multiple of data.images_per_identity={k}")
      config.data.identities_per_batch = batch_size // k
    else:
      config.train.batch_size = batch_size
  checks.validate_config(config)
  return config


def _parse_value(text):
  try:
    return ast.literal_eval(text)
  except (ValueError, SyntaxError):
    return text


def make_task(trainer, config, workdir):
  """The trainer's Task (common/contract/task.py), from its own task module."""
  return importlib.import_module(TRAINERS[trainer][1]).make_task(config, workdir)


def _take_inputs(dataset, max_batches=4):
  """The first batches' inputs (of (inputs, targets) batches, or of inputs alone)."""
  return [element[0] if isinstance(element, tuple) else element
          for element in dataset.take(max_batches)]


def benchmark_precision(task, eval_inputs, config, strategy, mixed, settings, matmul_rates, batches,
                        workdir):
  """Training rows of one precision (each phase of the trainer, without and with XLA, on one
  model), its evaluation images/s and the largest phase's memory estimate."""
  precision = "mixed" if mixed else "float32"
  keras.mixed_precision.set_global_policy("mixed_float16" if mixed else "float32")
  hardware.set_determinism(config.seed, config.deterministic)
  timing.progress(f"{precision}: building the model")
  with strategy.scope():
    model = task.build_model()
    phases = task.make_phases(model, mixed)
  batch_size = config.train.batch_size
  # From a real batch: a pipeline's static shapes can be partly unknown.
  input_shapes = [tuple(batches[0][0].shape[1:])]
  replica_batches = [distributed.distribute_batch(batch, strategy) for batch in batches]
  peak_rate = matmul_rates.get(precision, matmul_rates["float32"])
  device = timing.gpu_device()
  rows, estimates = [], []
  for phase in phases:
    if phase.prepare:
      phase.prepare()
    with strategy.scope():
      phase.optimizer.build(model.trainable_variables)
    # The activations of one micro-batch are held at a time (train.accumulate_steps).
    estimates.append(memory_estimate.estimate(model, batch_size // config.train.accumulate_steps, mixed,
                                              input_shapes=input_shapes))
    step_flops = flops_lib.count_training_flops(model, batch_size, input_shapes)
    for xla in (False, True):
      name = precision + ("+xla" if xla else "")
      if name not in settings.variants:
        continue
      timing.progress(f"{name} {phase.name}: training step")
      reset_rss = measure.reset_peak_rss()[1]
      if device:
        tf.config.experimental.reset_memory_stats(device)
      step_fn = train_step.make_train_step(model, phase.optimizer, task.loss_fn, strategy,
                                              config.optimizer.clipnorm, jit_compile=xla,
                                              accumulate_steps=config.train.accumulate_steps)
      first, seconds, steps = timing.time_train_step(step_fn, replica_batches, settings)
      timing.progress(f"{name} {phase.name}: the trainer's loop")
      loop_steps = settings.steps or max(steps, math.ceil(timing.LOOP_WINDOW_S / seconds))
      loop_rate = timing.time_train_loop(task, config, strategy, model, phase, batches, loop_steps,
                                         settings.windows, os.path.join(workdir, f"{name}-{phase.name}"), xla)
      row = {
          "variant": name,
          "phase": phase.name,
          "first_step_s": first,
          "train_steps_per_s": 1.0 / seconds,
          "train_images_per_s": batch_size / seconds,
          "loop_steps_per_s": loop_rate,
          "loop_ratio": loop_rate * seconds,
          "host_peak_mib": measure.peak_rss_bytes() / memory_estimate.MIB,
          "estimate_mib": estimates[-1].total / memory_estimate.MIB,
          "gflop_per_step": step_flops / 1e9,
          "gflops_per_s": step_flops / seconds / 1e9,
      }
      row["matmul_share"] = row["gflops_per_s"] / peak_rate
      if device:
        row["gpu_peak_mib"] = tf.config.experimental.get_memory_info(device)["peak"] / memory_estimate.MIB
      row["timed_steps_per_window"] = steps
      if not reset_rss:
        row["host_peak_note"] = "process peak since start (VmHWM cannot be reset here)"
      rows.append(row)
  timing.progress(f"{precision}: evaluation")
  eval_rate = timing.measure_eval(task.make_predict_fn(model), eval_inputs, settings)
  # The largest phase decides whether the preset fits.
  return rows, eval_rate, max(estimates, key=lambda e: e.total)


def benchmark_trainer(trainer, args, strategy, matmul_rates, workdir):
  """Measures one trainer; returns its result dict (rows, input rate, estimate)."""
  config = load_config(trainer, args.preset, args.set, args.batch_size)
  config.data.cache_dir = config.data.cache_dir or os.path.join(args.cache_dir, trainer)
  settings = _settings(args)
  started = time.time()
  timing.progress(f"{trainer}: preparing the data")
  task = make_task(trainer, config, os.path.join(workdir, trainer))
  eval_inputs = _take_inputs(task.eval_dataset)
  batch_size = config.train.batch_size
  timing.progress(f"{trainer}: input pipeline")
  input_rate = timing.measure_input(task.train_dataset, batch_size, settings)
  iterator = iter(task.train_dataset)
  batches = [next(iterator) for _ in range(2)]
  rows, eval_rates, estimates = [], {}, {}
  for mixed in (False, True):
    precision = "mixed" if mixed else "float32"
    if not any(v.split("+")[0] == precision for v in settings.variants):
      continue
    precision_rows, eval_rates[precision], estimates[mixed] = benchmark_precision(
        task, eval_inputs, config, strategy, mixed, settings, matmul_rates, batches,
        os.path.join(workdir, f"{trainer}-loop-{precision}"))
    rows += precision_rows
  keras.mixed_precision.set_global_policy("float32")
  # The phase of fewest FLOPs per image is the one that would take images the fastest.
  gflop_per_image = min(row["gflop_per_step"] for row in rows) / batch_size
  own = estimates.get(config.mixed_precision) or next(iter(estimates.values()))
  exports = None
  if args.exports:
    exports = exports_lib.benchmark_exports(task, settings, os.path.join(workdir, f"{trainer}-exports"))
  return {
      "trainer": trainer,
      "preset": args.preset or "default",
      "batch_size": batch_size,
      "describe": task.describe,
      "input_images_per_s": input_rate,
      "gtx960m_images_per_s": GTX960M_GFLOPS / gflop_per_image,
      "input_feed_ratio": input_rate * gflop_per_image / GTX960M_GFLOPS,
      "eval_images": sum(int(batch.shape[0]) for batch in eval_inputs),
      "eval_images_per_s": eval_rates,
      "rows": rows,
      "not_run": {v: why for v, why in CPU_SLOW_VARIANTS.items()
                  if v not in settings.variants and not timing.gpu_device()},
      "preset_precision": "mixed" if own.mixed_precision else "float32",
      "preset_estimate": dataclasses.asdict(own) | {"total": own.total},
      "preset_estimate_table": own.format_table(budget_bytes=BUDGET_MB * memory_estimate.MIB),
      "settings": dataclasses.asdict(settings) | {"warmup_steps": timing.WARMUP_STEPS},
      "seconds": time.time() - started,
      "exports": exports,
      "_task": task,
      "_config": config,
      "_settings": settings,
      "_batches": batches,
  }


def _settings(args):
  return timing.Settings(steps=args.steps, windows=args.windows,
                         min_window_s=args.min_window_s or (0.25 if args.preset == "smoke" else 2.0),
                         variants=tuple(args.variants))

