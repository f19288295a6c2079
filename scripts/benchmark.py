"""Benchmarks the trainers: input pipeline, training step, evaluation, memory, against the machine.

  python scripts/benchmark.py segmentation --preset smoke
  python scripts/benchmark.py all --preset smoke --peers --json results.json
  python scripts/benchmark.py inception_v4 --preset gtx960m --memory_limit_mb 4096
  python scripts/benchmark.py all --preset gtx960m --estimate_only

For each trainer, with its config preset, the table has a row per variant
(float32 and mixed_float16, each without and with XLA) and, for a trainer
with several phases (Inception V4: head, then unfrozen blocks), per phase:
  first step s    tracing, XLA compilation and one step;
  steps/s, train img/s  the trainer's own compiled step
      (common/train_step.make_train_step) on two batches taken from its
      pipeline beforehand, so that input time is not in it;
  loop steps/s    the trainer's whole loop (common/train_loop.train, with
      the preset's steps_per_loop, log and summary settings) over the same
      two batches, in the same process;
  loop/step       their ratio: below 1 by the host work of the loop;
  host peak MiB   the process's resident set high-water mark during the row;
  GPU peak MiB    TensorFlow's allocator peak during the row (with a GPU);
  estimate MiB    scripts/memory_estimate.py for the row (no GPU needed);
  GFLOP/step, GFLOP/s, % of matmul  the step's counted FLOPs (scripts/flops.py),
      per second, as a share of the machine's large float32 matmul rate
      (float16 for mixed rows on a GPU).
Above the table: the input pipeline alone (images/s) and evaluation with the
trainer's predict function (images/s, per precision). Every rate is a median
over timed windows after warm-up. On a machine without a GPU, mixed precision
runs only with XLA unless --variants asks for it (see CPU_SLOW_VARIANTS).

--exports adds a row per export format of scripts/export.py beside the SavedModel (the Keras
model's serving signature): ONNX in onnxruntime, LiteRT float32, float16 and int8 in LiteRT's
interpreter, each timed on one image and on the first evaluation batch (the uint8 images the
SavedModel's evaluation reads), conversions not timed. It needs requirements-export.txt (else one
line says skipped); Inception V4's ONNX conversion takes minutes and ~13.5 GB of memory.

--peers adds the side-by-side comparisons with what people use instead
(a missing peer is reported as skipped): timm's inception_v4 on PyTorch,
pytorch-metric-learning's miners and triplet loss, and a PIL-in-a-generator
input pipeline. The PyTorch peers run in their own virtual environment
(scripts/peers/setup_peer_venv.sh).
"""
from common.runtime import process

if __name__ == "__main__":
  process.start()  # before TensorFlow's import: signals recorded, its C++ start-up lines held back

import argparse  # pylint: disable=g-import-not-at-top,g-bad-import-order
import ast
import copy
import dataclasses
import importlib
import itertools
import json
import math
import os
import pathlib
import sys
import tempfile
import time

import keras
import numpy as np
from PIL import Image
import tensorflow as tf

from common.app import cli
from common.contract import config as config_lib
from common.contract import task as common_task
from common.contract.errors import ConfigError
from common.contract.errors import UserError
from common.nn import optimizers
from common.runtime import hardware
from common.runtime import workdir as workdir_lib
from common.training import distributed
from common.training import train_loop
from common.training import train_step
from scripts import export as export_lib
from scripts import flops as flops_lib
from scripts import memory_estimate
from scripts.peers import measure
from scripts.peers import peer_runner

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]

# trainer: (its config module, its task module). They are imported when the trainer is
# benchmarked, so that benchmarking one trainer needs nothing from the others.
TRAINERS = {"segmentation": ("configs.segmentation", "segmentation.task"),
            "triplet": ("configs.triplet", "triplet.task"),
            "inception_v4": ("configs.inception_v4", "inception_finetune.task")}
VARIANTS = ("float32", "float32+xla", "mixed", "mixed+xla")
BUDGET_MB = 4096  # the GTX 960M
TRIPLET_PEER_SIZES = (128, 512, 1024)
TRIPLET_GROWTH_SIZES = (256, 512, 1024)
TRIPLET_PEER_LOSSES = (("batch_hard", "batch_hard"), ("semi_hard", "semihard"))
WARMUP_STEPS = 1  # the first step, which traces and compiles
INPUT_WARMUP_BATCHES = 5
MAX_AUTO_STEPS = 2000
# The loop's timed windows last at least this long: a progress line and each summary once a window
# cost a few milliseconds of host work each, as they do once every 50 steps or so in a real run.
LOOP_WINDOW_S = 2.0
# Left out on a machine without a GPU unless --variants names them.
CPU_SLOW_VARIANTS = {
    "mixed": ("without XLA, TensorFlow's float16 convolution gradients on a CPU are hundreds of times "
              "slower than float32 (a 3x3 convolution 64->96 at 37x37, batch 16: 20 s against "
              "0.04 s on 2 cores); --variants "
              "float32,float32+xla,mixed,mixed+xla runs it anyway"),
}
MIB = memory_estimate.MIB


# The trainers, through their own config files and tasks.


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
  config_lib.validate_config(config)
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


# Measurements.


def progress(message):
  """A line on stderr, so that a long benchmark shows where it is."""
  print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def gpu_device():
  """The first logical GPU's name for the memory statistics, or None."""
  gpus = tf.config.list_logical_devices("GPU")
  return gpus[0].name.replace("/device:", "") if gpus else None


def measure_matmul(size, dtype="float32", repeats=5):
  """GFLOP/s of a [size, size] x [size, size] matmul on the default device; median of repeats."""
  generator = tf.random.Generator.from_seed(0)
  a = tf.cast(generator.normal([size, size]), dtype)
  b = tf.cast(generator.normal([size, size]), dtype)

  def multiply():
    # Reading one element waits for the matmul on a GPU as on the CPU.
    float(tf.linalg.matmul(a, b)[0, 0])

  seconds = measure.time_windows(multiply, warmup_steps=1, windows=repeats, steps_per_window=1)
  return 2 * size**3 / measure.median(seconds) / 1e9


@dataclasses.dataclass
class Settings:
  steps: int  # timed steps per window; 0: as many as fill min_window_s
  windows: int
  min_window_s: float
  variants: tuple


def time_steps(step, settings, warmup_steps):
  """(median seconds per step over the timed windows, steps per window) after warm-up steps.

  With settings.steps == 0 a window holds as many steps as fill
  settings.min_window_s, judged from one step (which counts as the first
  window when one step fills it).
  """
  for _ in range(warmup_steps):
    step()
  steps, seconds = settings.steps, []
  if not steps:
    probe = measure.time_windows(step, 0, windows=1, steps_per_window=1)[0]
    steps = max(1, min(MAX_AUTO_STEPS, math.ceil(settings.min_window_s / max(probe, 1e-9))))
    if steps == 1:  # the probe is a full window already
      seconds.append(probe)
  seconds += measure.time_windows(step, 0, settings.windows - len(seconds), steps)
  return measure.median(seconds), steps


def measure_input(dataset, batch_size, settings):
  """Images/s of the pipeline alone, after a few batches that fill its buffers."""
  iterator = iter(dataset)
  seconds, _ = time_steps(lambda: next(iterator), settings, INPUT_WARMUP_BATCHES)
  return batch_size / seconds


def _fetch(outputs):
  """Waits for outputs by copying them to the host, as an evaluation loop does."""
  return [np.asarray(t) for t in tf.nest.flatten(outputs)]


def measure_eval(predict_fn, inputs, settings):
  """Images/s of predict_fn over the batches in `inputs`, after one warm-up pass."""
  def one_pass():
    for batch in inputs:
      _fetch(predict_fn(batch))

  seconds, _ = time_steps(one_pass, settings, warmup_steps=1)
  return sum(int(batch.shape[0]) for batch in inputs) / seconds


def time_train_step(train_step, batches, settings):
  """(seconds of the first step, with tracing and compilation; median seconds per step; steps
  per window)."""
  batches = itertools.cycle(batches)

  def run_step():
    metrics = train_step(next(batches))
    float(metrics["loss"])  # waits for the step, as the training loop does

  # The first step is the warm-up (WARMUP_STEPS); it is timed on its own.
  first = measure.time_windows(run_step, 0, windows=1, steps_per_window=1)[0]
  return (first, *time_steps(run_step, settings, warmup_steps=0))


def time_train_loop(task, config, strategy, model, phase, batches, steps_per_window, windows, workdir,
                    jit_compile):
  """Steps/s of the trainer's own loop (common/train_loop.train with the preset's settings) over the
  same batches as the compiled step: the median of `windows` progress windows of steps_per_window
  steps, after one more window that traces and compiles.

  The progress line and each summary come at most once a window of LOOP_WINDOW_S or more (a smoke
  preset writes them every few steps, so that tests see them; a real run every 50 steps or more),
  so that the figure is the loop's own cost per step plus each of those once per window.
  """
  config = copy.deepcopy(config)
  config.train.jit_compile = jit_compile
  config.train.log_every = steps_per_window
  for cadence in ("scalars_every", "images_every", "histograms_every"):
    config.summaries[cadence] = max(config.summaries[cadence], steps_per_window)
  config.train.num_steps = steps_per_window * (windows + 1)
  config.train.eval_every = config.train.checkpoint_every = config.train.num_steps
  config.train.best_metric = ""
  # The batches are small and held in memory, so that input time is not in the figure.
  cycled = tf.data.Dataset.from_tensor_slices(
      tf.nest.map_structure(lambda *parts: tf.stack(parts), *batches)).repeat()
  phases = [dataclasses.replace(phase, num_steps=config.train.num_steps)]
  # The loop's evaluation at its last step is not in the figure (the evaluation row times predict on
  # its own): an empty one, so that the pass does not trace, calibrate and score for nothing.
  skip_evaluation = dict(evaluate=lambda predict, from_saved_model: common_task.Evaluation({}),
                         calibrate=None, make_extra_eval_fn=None)
  results = train_loop.train(config, workdir, strategy=strategy, model=model, phases=phases,
                             task=dataclasses.replace(task, train_dataset=cycled, **skip_evaluation))
  return results["steps_per_second"]


def benchmark_precision(task, eval_inputs, config, strategy, mixed, settings, matmul_rates, batches,
                        workdir):
  """Training rows of one precision (each phase of the trainer, without and with XLA, on one
  model), its evaluation images/s and the largest phase's memory estimate."""
  precision = "mixed" if mixed else "float32"
  keras.mixed_precision.set_global_policy("mixed_float16" if mixed else "float32")
  hardware.set_determinism(config.seed, config.deterministic)
  progress(f"{precision}: building the model")
  with strategy.scope():
    model = task.build_model()
    phases = task.make_phases(model, mixed)
  batch_size = config.train.batch_size
  # From a real batch: a pipeline's static shapes can be partly unknown.
  input_shapes = [tuple(batches[0][0].shape[1:])]
  replica_batches = [distributed.distribute_batch(batch, strategy) for batch in batches]
  peak_rate = matmul_rates.get(precision, matmul_rates["float32"])
  device = gpu_device()
  rows, estimates = [], []
  for phase in phases:
    if phase.prepare:
      phase.prepare()
    with strategy.scope():
      phase.optimizer.build(model.trainable_variables)
    estimates.append(memory_estimate.estimate(model, batch_size, mixed, input_shapes=input_shapes))
    step_flops = flops_lib.count_training_flops(model, batch_size, input_shapes)
    for xla in (False, True):
      name = precision + ("+xla" if xla else "")
      if name not in settings.variants:
        continue
      progress(f"{name} {phase.name}: training step")
      reset_rss = measure.reset_peak_rss()[1]
      if device:
        tf.config.experimental.reset_memory_stats(device)
      step_fn = train_step.make_train_step(model, phase.optimizer, task.loss_fn, strategy,
                                              config.optimizer.clipnorm, jit_compile=xla)
      first, seconds, steps = time_train_step(step_fn, replica_batches, settings)
      progress(f"{name} {phase.name}: the trainer's loop")
      loop_steps = settings.steps or max(steps, math.ceil(LOOP_WINDOW_S / seconds))
      loop_rate = time_train_loop(task, config, strategy, model, phase, batches, loop_steps, settings.windows,
                                  os.path.join(workdir, f"{name}-{phase.name}"), xla)
      row = {
          "variant": name,
          "phase": phase.name,
          "first_step_s": first,
          "train_steps_per_s": 1.0 / seconds,
          "train_images_per_s": batch_size / seconds,
          "loop_steps_per_s": loop_rate,
          "loop_ratio": loop_rate * seconds,
          "host_peak_mib": measure.peak_rss_bytes() / MIB,
          "estimate_mib": estimates[-1].total / MIB,
          "gflop_per_step": step_flops / 1e9,
          "gflops_per_s": step_flops / seconds / 1e9,
      }
      row["matmul_share"] = row["gflops_per_s"] / peak_rate
      if device:
        row["gpu_peak_mib"] = tf.config.experimental.get_memory_info(device)["peak"] / MIB
      row["timed_steps_per_window"] = steps
      if not reset_rss:
        row["host_peak_note"] = "process peak since start (VmHWM cannot be reset here)"
      rows.append(row)
  progress(f"{precision}: evaluation")
  eval_rate = measure_eval(task.make_predict_fn(model), eval_inputs, settings)
  # The largest phase decides whether the preset fits.
  return rows, eval_rate, max(estimates, key=lambda e: e.total)


EXPORTS = (("SavedModel", "saved_model", None), ("ONNX", "onnx", None), ("LiteRT float32", "litert", None),
           ("LiteRT float16", "litert", "float16"), ("LiteRT int8", "litert", "int8"))


def benchmark_exports(task, settings, workdir):
  """A row per export format: ms for one image and images/s on the first evaluation batch of the
  float32 Keras model's SavedModel and of its conversions, each in its own runtime; or
  {"skipped": why} without the export extra."""
  try:
    export_lib.require("onnx")
    export_lib.require("litert")
  except export_lib.ExportError as e:
    return {"skipped": str(e)}
  keras.mixed_precision.set_global_policy("float32")
  saved_model = task.export(task.build_model(), os.path.join(workdir, "saved_model"))
  reference = export_lib.load("saved_model", saved_model)
  first = []

  def keep_first_batch(images):
    first[:] = first or [images.numpy()]
    return reference(images=images)

  export_lib.evaluate(task, keep_first_batch)  # the uint8 images its evaluation reads
  batch = first[0]
  rows = []
  for name, fmt, quantize in EXPORTS:
    progress(f"{name}: converting and timing")
    path = saved_model
    if fmt != "saved_model":
      path = os.path.join(workdir, f"model-{quantize or 'float32'}.{fmt}")
      export_lib.convert(reference, fmt, path, batch.shape[1:3] if fmt == "litert" else None, quantize,
                         list(batch))
    serve = export_lib.load(fmt, path)
    seconds = [time_steps(lambda images=images: _fetch(serve(images)), settings, warmup_steps=1)[0]
               for images in (batch[:1], batch)]
    rows.append({"format": name, "one_image_ms": 1000 * seconds[0],
                 "batch_images_per_s": len(batch) / seconds[1]})
  return {"image_size": batch.shape[1:3], "batch_size": len(batch), "rows": rows}


def benchmark_trainer(trainer, args, strategy, matmul_rates, workdir):
  """Measures one trainer; returns its result dict (rows, input rate, estimate)."""
  config = load_config(trainer, args.preset, args.set, args.batch_size)
  config.data.cache_dir = config.data.cache_dir or os.path.join(args.cache_dir, trainer)
  settings = _settings(args)
  started = time.time()
  progress(f"{trainer}: preparing the data")
  task = make_task(trainer, config, os.path.join(workdir, trainer))
  eval_inputs = _take_inputs(task.eval_dataset)
  batch_size = config.train.batch_size
  progress(f"{trainer}: input pipeline")
  input_rate = measure_input(task.train_dataset, batch_size, settings)
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
  own = estimates.get(config.mixed_precision) or next(iter(estimates.values()))
  exports = benchmark_exports(task, settings, os.path.join(workdir, f"{trainer}-exports")) if args.exports else None
  return {
      "trainer": trainer,
      "preset": args.preset or "default",
      "batch_size": batch_size,
      "describe": task.describe,
      "input_images_per_s": input_rate,
      "eval_images": sum(int(batch.shape[0]) for batch in eval_inputs),
      "eval_images_per_s": eval_rates,
      "rows": rows,
      "not_run": {v: why for v, why in CPU_SLOW_VARIANTS.items()
                  if v not in settings.variants and not gpu_device()},
      "preset_precision": "mixed" if own.mixed_precision else "float32",
      "preset_estimate": dataclasses.asdict(own) | {"total": own.total},
      "preset_estimate_table": own.format_table(budget_bytes=BUDGET_MB * MIB),
      "settings": dataclasses.asdict(settings) | {"warmup_steps": WARMUP_STEPS},
      "seconds": time.time() - started,
      "exports": exports,
      "_task": task,
      "_config": config,
      "_settings": settings,
      "_batches": batches,
  }


def _settings(args):
  return Settings(steps=args.steps, windows=args.windows,
                  min_window_s=args.min_window_s or (0.25 if args.preset == "smoke" else 2.0),
                  variants=tuple(args.variants))


# Peers.


def make_pil_generator_dataset(pairs, patch_size, patches_per_image, batch_size, shuffle_buffer, seed):
  """The input pipeline most people write first: PIL in a Python generator feeding from_generator.

  The same work as segmentation/data.py: decode an image and its mask, cut
  patches_per_image random patch_size crops at the same places, shuffle, batch.
  """
  def generate():
    rng = np.random.default_rng(seed)
    while True:
      for index in rng.permutation(len(pairs)):
        image_path, mask_path = pairs[index]
        image = np.asarray(Image.open(image_path).convert("RGB"))
        mask = np.asarray(Image.open(mask_path))
        for _ in range(patches_per_image):
          y = rng.integers(0, image.shape[0] - patch_size + 1)
          x = rng.integers(0, image.shape[1] - patch_size + 1)
          yield (image[y:y + patch_size, x:x + patch_size],
                 mask[y:y + patch_size, x:x + patch_size].astype(np.int32))

  signature = (tf.TensorSpec([patch_size, patch_size, 3], tf.uint8),
               tf.TensorSpec([patch_size, patch_size], tf.int32))
  dataset = tf.data.Dataset.from_generator(generate, output_signature=signature)
  return (dataset.shuffle(shuffle_buffer, seed=seed).batch(batch_size, drop_remainder=True)
          .prefetch(tf.data.AUTOTUNE))


def peer_segmentation_input(result, settings):
  config, task = result["_config"], result["_task"]
  cfg = config.data
  if not task.train_files:
    return {"skipped": f"the PIL peer reads image files; data.source={cfg.source} has none"}
  if min(Image.open(task.train_files[0][0]).size) < cfg.patch_size:
    return {"skipped": f"the PIL peer cuts no patches from images smaller than data.patch_size="
                       f"{cfg.patch_size}"}
  dataset = make_pil_generator_dataset(task.train_files, cfg.patch_size, cfg.patches_per_image,
                                       config.train.batch_size, cfg.shuffle_buffer, config.seed)
  rate = measure_input(dataset, config.train.batch_size, settings)
  return {"peer": "PIL in a Python generator through from_generator",
          "peer_images_per_s": rate, "ours_images_per_s": result["input_images_per_s"],
          "ratio": result["input_images_per_s"] / rate}


def measure_full_network(result, strategy):
  """Our float32 step with every layer trained (what timm's peer runs).

  Returns ({variant: images/s}, timed steps per window of the last variant).
  """
  task, config, settings = result["_task"], result["_config"], result["_settings"]
  keras.mixed_precision.set_global_policy("float32")
  with strategy.scope():
    model = task.build_model()
    optimizer = optimizers.make_optimizer(config.optimizer, False, config.train.num_steps)
    optimizer.build(model.trainable_variables)
  batches = [distributed.distribute_batch(batch, strategy) for batch in result["_batches"]]
  rates, steps = {}, 1
  for name in ("float32", "float32+xla"):
    if name in settings.variants:
      progress(f"{name} all layers: training step (for the timm peer)")
      step_fn = train_step.make_train_step(model, optimizer, task.loss_fn, strategy,
                                              config.optimizer.clipnorm, jit_compile=name.endswith("xla"))
      _, seconds, steps = time_train_step(step_fn, batches, settings)
      rates[name] = config.train.batch_size / seconds
  return rates, steps


def peer_inception(result, strategy, threads, timeout_s):
  config, settings = result["_config"], result["_settings"]
  missing = peer_runner.missing_peer_venv()
  if missing:  # our full-network step is measured only for the ratio to timm's
    return missing
  ours, steps = measure_full_network(result, strategy)
  progress("timm inception_v4: training step")
  peer = peer_runner.run_peer(
      ["inception", "--batch_size", config.train.batch_size, "--image_size", config.data.image_size,
       "--num_classes", config.data.num_classes, "--optimizer", "adam",
       "--learning_rate", config.optimizer.learning_rate, "--threads", threads,
       "--warmup_steps", WARMUP_STEPS, "--windows", settings.windows, "--steps_per_window", steps],
      timeout_s)
  if "skipped" in peer:
    return peer
  peer["ours_images_per_s"] = ours
  peer["ratios"] = {variant: rate / peer["images_per_second"] for variant, rate in ours.items()}
  return peer


def peer_triplet(threads, timeout_s):
  """Our batch-hard and semi-hard losses and pytorch-metric-learning's, one process per size."""
  rows = []
  for loss, miner in TRIPLET_PEER_LOSSES:
    sizes = sorted(set(TRIPLET_PEER_SIZES) | (set(TRIPLET_GROWTH_SIZES) if loss == "semi_hard" else set()))
    for size in sizes:
      common = ["--batch_size", size, "--threads", threads]
      ours = peer_runner.run_tf_triplet(["--loss", loss] + common, timeout_s)
      peer = (peer_runner.run_peer(["triplet", "--miner", miner] + common, timeout_s)
              if size in TRIPLET_PEER_SIZES else {"skipped": "not compared at this size"})
      rows.append({"loss": loss, "batch_size": size, "ours": ours, "peer": peer})
  return rows


def run_peers(results, args, strategy):
  peers = {}
  threads = args.threads or hardware.usable_cpus()
  for result in results:
    name = result["trainer"]
    progress(f"{name}: peers")
    if name == "segmentation":
      peers[name] = peer_segmentation_input(result, result["_settings"])
    elif name == "inception_v4":
      peers[name] = peer_inception(result, strategy, threads, args.peer_timeout_s)
    elif name == "triplet":
      peers[name] = peer_triplet(threads, args.peer_timeout_s)
  return peers


# Output.


COLUMNS = (
    ("variant", "variant", "{}"),
    ("phase", "phase", "{}"),
    ("first_step_s", "first step s", "{:.1f}"),
    ("train_steps_per_s", "steps/s", "{:.2f}"),
    ("train_images_per_s", "train img/s", "{:.1f}"),
    ("loop_steps_per_s", "loop steps/s", "{:.2f}"),
    ("loop_ratio", "loop/step", "{:.2f}"),
    ("host_peak_mib", "host peak MiB", "{:.0f}"),
    ("gpu_peak_mib", "GPU peak MiB", "{:.0f}"),
    ("estimate_mib", "estimate MiB", "{:.1f}"),
    ("gflop_per_step", "GFLOP/step", "{:.3g}"),
    ("gflops_per_s", "GFLOP/s", "{:.2f}"),
    ("matmul_share", "% of matmul", "{:.1%}"),
)
TEXT_COLUMNS = ("variant", "phase")


def format_header(report, matmul_rates, matmul_size):
  rates = ", ".join(f"{precision} {rate:.1f} GFLOP/s" for precision, rate in matmul_rates.items())
  return f"{report}\nmatmul {matmul_size}x{matmul_size}: {rates}"


def format_table(rows):
  """Aligned columns; those missing from a row (GPU peak without a GPU) are left out, as is the
  phase column of a one-phase trainer."""
  columns = [c for c in COLUMNS if all(c[0] in row for row in rows)]
  if len({row.get("phase") for row in rows}) == 1:
    columns = [c for c in columns if c[0] != "phase"]
  cells = [[title for _, title, _ in columns]]
  cells += [[fmt.format(row[key]) for key, _, fmt in columns] for row in rows]
  widths = [max(len(line[i]) for line in cells) for i in range(len(columns))]
  return "\n".join("  ".join(cell.ljust(width) if key in TEXT_COLUMNS else cell.rjust(width)
                             for (key, _, _), cell, width in zip(columns, line, widths))
                   for line in cells)


def format_trainer(result):
  settings = result["settings"]
  lines = [
      f"== {result['trainer']} (preset {result['preset']}, batch {result['batch_size']}, "
      f"{result['describe']})",
      f"input pipeline alone: {result['input_images_per_s']:.1f} images/s",
      f"evaluation (the trainer's predict function on {result['eval_images']} images held in "
      "memory): " + ", ".join(f"{precision} {rate:.1f} images/s"
                              for precision, rate in result["eval_images_per_s"].items()),
      format_table(result["rows"]),
  ]
  lines += [f"{variant}: not run: {why}" for variant, why in result["not_run"].items()]
  lines += [
      f"(rates: medians of {settings['windows']} timed windows of "
      + (f"{settings['steps']} steps" if settings["steps"] else
         f"at least {settings['min_window_s']:g} s (1 step at least)")
      + f" after warm-up; first step = tracing, compilation and one step; "
      f"{result['seconds']:.0f} s in all)",
      f"memory estimate of the preset's precision ({result['preset_precision']}, largest phase) "
      f"against the {BUDGET_MB} MiB of a GTX 960M:",
      result["preset_estimate_table"],
  ]
  if result["exports"]:
    lines.append(format_exports(result["exports"]))
  for row in result["rows"]:
    if "gpu_peak_mib" in row and row["variant"].split("+")[0] == result["preset_precision"]:
      error = row["estimate_mib"] / row["gpu_peak_mib"] - 1
      lines.append(f"  measured GPU peak ({row['variant']}, {row['phase']}): {row['gpu_peak_mib']:.1f} "
                   f"MiB against the estimate {row['estimate_mib']:.1f} MiB ({error:+.0%})")
  return "\n".join(lines)


def format_exports(exports):
  if "skipped" in exports:
    return f"exports: skipped ({exports['skipped']})"
  height, width = exports["image_size"]
  lines = [f"exports (scripts/export.py; uint8 {height}x{width} images, preprocessing included, "
           f"each in its own runtime):",
           f"{'format':<16}{'1 image ms':>12}{'batch ' + str(exports['batch_size']) + ' img/s':>16}"]
  lines += [f"{row['format']:<16}{row['one_image_ms']:>12.2f}{row['batch_images_per_s']:>16.1f}"
            for row in exports["rows"]]
  return "\n".join(lines)


def _mib(value):
  return "-" if value is None else f"{value / MIB:.1f}"


def format_peers(peers):
  lines = ["== peers"]
  if "segmentation" in peers:
    peer = peers["segmentation"]
    lines.append("segmentation input pipeline vs " + (
        f"skipped ({peer['skipped']})" if "skipped" in peer else
        f"{peer['peer']}: ours {peer['ours_images_per_s']:.1f} images/s, peer "
        f"{peer['peer_images_per_s']:.1f} images/s, ratio {peer['ratio']:.2f}x"))
  if "inception_v4" in peers:
    peer = peers["inception_v4"]
    if "skipped" in peer:
      lines.append(f"inception_v4 training step vs timm: skipped ({peer['skipped']})")
    else:
      ours = ", ".join(f"{v} {r:.2f} images/s ({peer['ratios'][v]:.2f}x)"
                       for v, r in peer["ours_images_per_s"].items())
      lines.append(f"inception_v4 training step, every layer trained, vs timm inception_v4 (torch "
                   f"{peer['torch']}, timm {peer['timm']}, batch {peer['batch_size']}, "
                   f"{peer['image_size']}x{peer['image_size']}, Adam, {peer['threads']} threads): "
                   f"timm {peer['images_per_second']:.2f} images/s; ours (ours/timm): {ours}")
  if "triplet" in peers:
    lines.append("triplet loss + gradient on unit embeddings [B, 128], 4 per class, one process per "
                 "side and row; peak = resident set high-water mark over the steps minus the "
                 "resident size before the first (includes one-time allocations); largest tensor "
                 "and all tensors = static sizes in our step's graph (loss and gradient)")
    lines.append(f"{'loss':<11}{'B':>6}{'ours ms':>10}{'peer ms':>10}{'ours/peer':>10}"
                 f"{'ours peak MiB':>15}{'peer peak MiB':>15}{'largest MiB':>13}{'all MiB':>10}")
    for row in peers["triplet"]:
      ours, peer = row["ours"], row["peer"]
      if "skipped" in ours:
        lines.append(f"{row['loss']:<11}{row['batch_size']:>6}  ours skipped: {ours['skipped']}")
        continue
      peer_ms = None if "skipped" in peer else 1000 * peer["seconds_per_step"]
      speed = "-" if peer_ms is None else f"{peer_ms / (1000 * ours['seconds_per_step']):.2f}x"
      lines.append(
          f"{row['loss']:<11}{row['batch_size']:>6}{1000 * ours['seconds_per_step']:>10.1f}"
          f"{'-' if peer_ms is None else f'{peer_ms:.1f}':>10}{speed:>10}"
          f"{_mib(ours['step_peak_bytes']):>15}{_mib(peer.get('step_peak_bytes')):>15}"
          f"{_mib(ours['largest_tensor_bytes']):>13}{_mib(ours['graph_tensor_bytes']):>10}")
    skipped = {row["peer"]["skipped"] for row in peers["triplet"]
               if "skipped" in row["peer"] and row["batch_size"] in TRIPLET_PEER_SIZES}
    lines += [f"  peer skipped: {why}" for why in sorted(skipped)]
    lines.append("  ours/peer > 1 means ours is faster")
  return "\n".join(lines)


def to_json(value):
  """Results without the private (_) entries, for --json."""
  if isinstance(value, dict):
    return {k: to_json(v) for k, v in value.items() if not str(k).startswith("_")}
  if isinstance(value, (list, tuple)):
    return [to_json(v) for v in value]
  if isinstance(value, (np.integer, np.floating)):
    return value.item()
  return value


# The command line.


def parse_args(argv):
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("trainers", nargs="+", choices=(*TRAINERS, "all"), metavar="TRAINER",
                      help=f"one or more of {', '.join(TRAINERS)}, or all")
  parser.add_argument("--preset", default=None, help="config preset: default, smoke, gtx960m")
  parser.add_argument("--batch_size", type=int, default=0, help="overrides the preset's batch size")
  parser.add_argument("--steps", type=int, default=0,
                      help="timed steps per window (default: as many as fill --min_window_s)")
  parser.add_argument("--min_window_s", type=float, default=0,
                      help="least seconds per timed window when --steps is 0 (default 0.25 with "
                           "the smoke preset, else 2)")
  parser.add_argument("--windows", type=int, default=3, help="timed windows; rates are their medians")
  parser.add_argument("--variants", default="",
                      help=f"comma-separated subset of {','.join(VARIANTS)} (default: all; on a "
                           "machine without a GPU all but mixed)")
  parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                      help="config override, e.g. --set data.image_size=150 (repeatable)")
  parser.add_argument("--json", default="", help="also write the figures to this file")
  parser.add_argument("--memory_limit_mb", type=int, default=0,
                      help="make each GPU a logical device of this size (4096: a GTX 960M)")
  parser.add_argument("--matmul_size", type=int, default=0,
                      help="matmul size for the machine's rate (default 2048 on a CPU, 8192 on a GPU)")
  parser.add_argument("--peers", action="store_true", help="add the side-by-side peer comparisons")
  parser.add_argument("--exports", action="store_true",
                      help="add a row per export format (SavedModel, ONNX, LiteRT float32/float16/"
                           "int8): one image's ms and the evaluation batch's images/s; needs "
                           "requirements-export.txt")
  parser.add_argument("--estimate_only", action="store_true",
                      help="print only the memory estimate of each phase against 4 GB (no timing)")
  parser.add_argument("--threads", type=int, default=0,
                      help="PyTorch peer threads (default: the CPUs this process may use)")
  parser.add_argument("--peer_timeout_s", type=int, default=900)
  parser.add_argument("--cache_dir", default=os.path.join(tempfile.gettempdir(), "benchmark-data"),
                      help="where synthetic data is written once and reused")
  args = parser.parse_args(argv)
  args.trainers = list(TRAINERS) if "all" in args.trainers else list(dict.fromkeys(args.trainers))
  args.variants = [v.strip() for v in args.variants.split(",") if v.strip()] or None
  unknown = sorted(set(args.variants or ()) - set(VARIANTS))
  if unknown:
    parser.error(f"--variants {','.join(unknown)}: choose from {','.join(VARIANTS)}")
  if min(args.windows, args.steps or 1, args.batch_size or 1) < 1:
    parser.error("--windows, --steps and --batch_size must be positive")
  return args


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
    estimate = memory_estimate.estimate(model, config.train.batch_size, config.mixed_precision,
                                        input_shapes=input_shapes)
    estimates[phase.name] = dataclasses.asdict(estimate) | {"total": estimate.total}
    lines += [f"phase {phase.name}:", estimate.format_table(budget_bytes=BUDGET_MB * MIB)]
  keras.mixed_precision.set_global_policy("float32")
  return {"trainer": trainer, "preset": args.preset or "default", "estimates": estimates}, "\n".join(lines)


def run_estimates(args):
  """--estimate_only: the memory estimates against the 4 GB budget, no GPU needed."""
  results = {"trainers": []}
  with tempfile.TemporaryDirectory(prefix="benchmark-") as workdir:
    for trainer in args.trainers:
      result, text = estimate_trainer(trainer, args, workdir)
      results["trainers"].append(result)
      print(text, flush=True)
  return results


def run_benchmark(args):
  """Measures everything args asks for; returns the results and prints the tables."""
  report = hardware.configure_devices(args.memory_limit_mb, memory_growth=True, work="the benchmark")
  if args.estimate_only:
    return _write_json(run_estimates(args), args.json)
  strategy = hardware.make_strategy()
  if args.variants is None:
    slow = () if gpu_device() else tuple(CPU_SLOW_VARIANTS)
    args.variants = [v for v in VARIANTS if v not in slow]
  size = args.matmul_size or (8192 if gpu_device() else 2048)
  matmul_rates = {"float32": measure_matmul(size)}
  if gpu_device():
    matmul_rates["mixed"] = measure_matmul(size, "float16")
  results = {"header": {"devices": report, "matmul_size": size, "matmul_gflops_per_s": matmul_rates},
             "trainers": []}
  print(format_header(report, matmul_rates, size), flush=True)
  with tempfile.TemporaryDirectory(prefix="benchmark-") as workdir:
    for trainer in args.trainers:
      result = benchmark_trainer(trainer, args, strategy, matmul_rates, workdir)
      results["trainers"].append(result)
      print("\n" + format_trainer(result), flush=True)
    if args.peers:
      results["peers"] = run_peers(results["trainers"], args, strategy)
      print("\n" + format_peers(results["peers"]), flush=True)
  return _write_json(results, args.json)


def _write_json(results, path):
  if path:
    with workdir_lib.writing(path, flag="--json"), open(path, "w") as f:
      json.dump(to_json(results), f, indent=2)
  return results


def check_json_path(path):
  """A --json that cannot be written is one line before the run, not a traceback after it."""
  if os.path.isdir(path):
    raise ConfigError(f"--json={path} is a folder; name the file to write")
  workdir_lib.check_writable(os.path.dirname(os.path.abspath(path)), flag="--json")


def main(argv=None):
  args = parse_args(sys.argv[1:] if argv is None else argv)
  try:
    if args.json:
      check_json_path(args.json)
    run_benchmark(args)
  except UserError as e:
    cli.fail(str(e))


if __name__ == "__main__":
  main()
