"""How scripts/benchmark.py times things: medians of timed windows after warm-up, for the input
pipeline, evaluation, the compiled step, the trainer's loop and the machine's matmul."""
import copy
import dataclasses
import itertools
import math
import sys
import time

import numpy as np
import tensorflow as tf

from common.contract import task as common_task
from common.training import train_loop
from scripts.peers import measure

WARMUP_STEPS = 1  # the first step, which traces and compiles
INPUT_WARMUP_BATCHES = 5
MAX_AUTO_STEPS = 2000
# The loop's timed windows last at least this long: a progress line and each summary once a window
# cost a few milliseconds of host work each, as they do once every 50 steps or so in a real run.
LOOP_WINDOW_S = 2.0


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


def fetch(outputs):
  """Waits for outputs by copying them to the host, as an evaluation loop does."""
  return [np.asarray(t) for t in tf.nest.flatten(outputs)]


def measure_eval(predict_fn, inputs, settings):
  """Images/s of predict_fn over the batches in `inputs`, after one warm-up pass."""
  def one_pass():
    for batch in inputs:
      fetch(predict_fn(batch))

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
  """Steps/s of the trainer's own loop (common/training/train_loop.train with the preset's settings) over the
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
