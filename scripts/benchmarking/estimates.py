"""benchmark.py --estimate_only: the memory estimate of each phase of a preset against the 4 GB
budget, with segmentation's evaluation in windows; nothing is timed, no GPU needed."""
import dataclasses
import importlib
import os
import tempfile

import keras

from common.runtime import signals
from scripts.benchmarking import memory_estimate
from scripts.benchmarking.trainers import BUDGET_MB
from scripts.benchmarking.trainers import TRAINERS
from scripts.benchmarking.trainers import load_config
from scripts.benchmarking.trainers import make_task


def estimate_trainer(trainer, args, workdir):
  """The memory estimate of each phase of the preset, in its own precision; nothing is timed."""
  config = load_config(trainer, args.preset, args.set, args.batch_size)
  config.data.cache_dir = config.data.cache_dir or os.path.join(args.cache_dir, trainer)
  task = make_task(trainer, config, os.path.join(workdir, trainer))
  keras.mixed_precision.set_global_policy("mixed_float16" if config.mixed_precision else "float32")
  model = task.build_model()
  input_shapes = [tuple(next(iter(task.train_dataset))[0].shape[1:])]
  lines = [f"== {trainer} (preset {args.preset or 'default'}, batch {config.train.batch_size}, "
           f"{task.describe})"]
  estimates = {}
  for phase in task.make_phases(model, config.mixed_precision):
    if phase.prepare:
      phase.prepare()
    estimate = memory_estimate.estimate(model, config.train.batch_size // config.train.accumulate_steps,
                                        config.mixed_precision, input_shapes=input_shapes)
    estimates[phase.name] = dataclasses.asdict(estimate) | {"total": estimate.total}
    lines += [f"phase {phase.name}:", estimate.format_table(budget_bytes=BUDGET_MB * memory_estimate.MIB)]
  if trainer == "segmentation" and config.eval.window:
    tiled = evaluation_in_windows(config, model)
    estimates["evaluation"] = dataclasses.asdict(tiled) | {"largest_image_pixels": tiled.largest_image(
        BUDGET_MB * memory_estimate.MIB)}
    lines.append(tiled.format_table(BUDGET_MB * memory_estimate.MIB))
  keras.mixed_precision.set_global_policy("float32")
  return {"trainer": trainer, "preset": args.preset or "default", "estimates": estimates}, "\n".join(lines)


def evaluation_in_windows(config, model):
  """The memory estimate of segmentation's evaluation in windows (eval.window, eval.scales, eval.flip),
  which bounds the network's part whatever the image's size (memory_estimate.tiled_estimate)."""
  settings = importlib.import_module(TRAINERS["segmentation"][1]).validate_config(config)[1]  # its Inference
  return memory_estimate.tiled_estimate(
      model, settings.window, int(settings.windows_per_call()), config.data.num_classes, config.mixed_precision,
      max(settings.scales), settings.flip or len(settings.scales) > 1)


def run_estimates(args):
  """--estimate_only: the memory estimates against the 4 GB budget, no GPU needed."""
  results = {"trainers": []}
  with tempfile.TemporaryDirectory(prefix="benchmark-") as workdir:
    for trainer in args.trainers:
      signals.check("")  # between trainers (main says what was written)
      result, text = estimate_trainer(trainer, args, workdir)
      results["trainers"].append(result)
      print(text, flush=True)
  return results
