"""The start of every run: the shared config check, the workdir, devices, determinism, precision."""
from absl import logging
import keras

from common.app import cli
from common.contract import checks
from common.runtime import hardware
from common.runtime import signals
from common.runtime import workdir as workdir_lib
from common.training import train_step


def prepare_run(config, workdir=None, work="training"):
  """Checks the shared config and the workdir, then devices, determinism and precision policy;
  returns the strategy. The device report says where `work` (what the command does) runs.

  Call first, before any TensorFlow op (GPU options cannot change after) and
  before building the model (the precision policy applies to layers built after it).
  A workdir that cannot be written (a file, read-only, full) fails here, before
  anything is written into it.
  """
  checks.validate_config(config)
  if workdir is not None:
    workdir_lib.check_writable(workdir)
  hardware.configure_devices(config.hardware.memory_limit_mb, config.hardware.memory_growth, work)
  if config.mixed_precision and work == "training" and not hardware.list_tf_gpus():
    logging.warning("%s", hardware.MIXED_PRECISION_ON_CPU + cli.cpu_advice())
  # Before any op: MultiWorkerMirroredStrategy configures the collective ops at start-up.
  strategy = hardware.make_strategy(config.distribution.strategy)
  if work == "training":
    train_step.check_jit_compile(config, strategy)
  signals.reclaim()  # a multi-worker runtime has just taken SIGTERM over
  hardware.set_determinism(config.seed, config.deterministic)
  keras.mixed_precision.set_global_policy("mixed_float16" if config.mixed_precision else "float32")
  return strategy
