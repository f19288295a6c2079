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
      (common/training/train_step.make_train_step) on two batches taken from its
      pipeline beforehand, so that input time is not in it;
  loop steps/s    the trainer's whole loop (common/training/train_loop.train, with
      the preset's steps_per_loop, log and summary settings) over the same
      two batches, in the same process;
  loop/step       their ratio: below 1 by the host work of the loop;
  host peak MiB   the process's resident set high-water mark during the row;
  GPU peak MiB    TensorFlow's allocator peak during the row (with a GPU);
  estimate MiB    scripts/benchmarking/memory_estimate.py for the row (no GPU needed);
  GFLOP/step, GFLOP/s, % of matmul  the step's counted FLOPs (scripts/benchmarking/flops.py),
      per second, as a share of the machine's large float32 matmul rate
      (float16 for mixed rows on a GPU).
Above the table: the input pipeline alone (images/s, and how many times over it feeds a GTX 960M
whose step runs at the card's float32 peak, GTX960M_GFLOPS, over the step's GFLOP per image) and
evaluation with the trainer's predict function (images/s, per precision). Every rate is a median
over timed windows after warm-up. On a machine without a GPU, mixed precision
runs only with XLA unless --variants asks for it (see CPU_SLOW_VARIANTS in
scripts/benchmarking/trainers.py).

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

This file is the command line; its pieces are scripts/benchmarking/, one module a job.
"""
if not __package__:  # run as a file (python scripts/x.py): this repository's packages first
  import repository_root  # pylint: disable=unused-import

from common.runtime import process

if __name__ == "__main__":
  process.start()  # before TensorFlow's import: signals recorded, its C++ start-up lines held back

import argparse  # pylint: disable=g-import-not-at-top,g-bad-import-order
import contextlib
import json
import os
import sys
import tempfile

from common.app import cli
from common.contract.errors import ConfigError
from common.runtime import hardware
from common.runtime import signals
from common.runtime import workdir as workdir_lib
from scripts.benchmarking import estimates
from scripts.benchmarking import peers
from scripts.benchmarking import tables
from scripts.benchmarking import timing
from scripts.benchmarking import trainers
from scripts.benchmarking.trainers import TRAINERS
from scripts.benchmarking.trainers import VARIANTS


# The command line.


class _Parser(argparse.ArgumentParser):
  def error(self, message):
    """A bad flag is the commands' one `error:` line and exit code 2 (not argparse's usage line first)."""
    cli.fail(message)


def parse_args(argv):
  parser = _Parser(description=__doc__.split("\n")[0])
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



def run_benchmark(args):
  """Measures everything args asks for; returns the results and prints the tables."""
  report = hardware.configure_devices(args.memory_limit_mb, memory_growth=True, work="the benchmark")
  if args.estimate_only:
    return _write_json(estimates.run_estimates(args), args.json)
  strategy = hardware.make_strategy()
  if args.variants is None:
    slow = () if timing.gpu_device() else tuple(trainers.CPU_SLOW_VARIANTS)
    args.variants = [v for v in VARIANTS if v not in slow]
  size = args.matmul_size or (8192 if timing.gpu_device() else 2048)
  matmul_rates = {"float32": timing.measure_matmul(size)}
  if timing.gpu_device():
    matmul_rates["mixed"] = timing.measure_matmul(size, "float16")
  results = {"header": {"devices": report, "matmul_size": size, "matmul_gflops_per_s": matmul_rates},
             "trainers": []}
  print(tables.format_header(report, matmul_rates, size), flush=True)
  with tempfile.TemporaryDirectory(prefix="benchmark-") as workdir:
    for trainer in args.trainers:
      signals.check("")  # between trainers; the loop's own between its calls
      result = trainers.benchmark_trainer(trainer, args, strategy, matmul_rates, workdir)
      results["trainers"].append(result)
      print("\n" + tables.format_trainer(result), flush=True)
    if args.peers:
      results["peers"] = peers.run_peers(results["trainers"], args, strategy)
      print("\n" + peers.format_peers(results["peers"]), flush=True)
  return _write_json(results, args.json)


def _write_json(results, path):
  """Writes --json whole (a temporary file renamed): a disk that fills up leaves nothing of it."""
  if path:
    with workdir_lib.writing(path, flag="--json"):
      try:
        with open(path + ".tmp", "w") as f:
          json.dump(tables.to_json(results), f, indent=2)
        os.replace(path + ".tmp", path)
      except OSError as e:
        with contextlib.suppress(OSError):
          os.remove(path + ".tmp")
        raise OSError(e.errno, e.strerror, path) from None
  return results


def check_json_path(path):
  """A --json that cannot be written is one line before the run, not a traceback after it."""
  if os.path.isdir(path):
    raise ConfigError(f"--json={path} is a folder; name the file to write")
  workdir_lib.check_writable(os.path.dirname(os.path.abspath(path)), flag="--json")


def main(argv=None):
  """The command behind the commands' guard: a bad input is one line and exit 2, a signal one line
  and 128 + N (start-up, between trainers, between the timed loop's calls, or after the end)."""
  cli.run_guarded(_benchmark, parse_args(sys.argv[1:] if argv is None else argv))


def _benchmark(args):
  if args.json:
    check_json_path(args.json)
  try:
    run_benchmark(args)
  except signals.Interrupted as e:  # the timed loop's line would name a checkpoint of its temporary run
    raise signals.Interrupted(e.signum, "during the benchmark; nothing was written") from None
  signals.finish("after the benchmark; every figure is printed" + (f" and in {args.json}" if args.json else ""))


if __name__ == "__main__":
  main()
