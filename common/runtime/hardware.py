"""Devices: report, GPU diagnosis, memory limit, determinism, strategy.

TensorFlow silently trains on the CPU when it cannot use the GPU: a build
without CUDA, CUDA libraries it cannot load, or a compute capability below the
smallest one its wheel was built for (a GTX 960M, 5.0, under tensorflow 2.17
and later). diagnose_gpu() says which and the pip command that fixes it, using
nvidia-smi to see GPUs that TensorFlow ignored; every run's start
(configure_devices) and scripts/check_gpu.py print its line.
"""
import dataclasses
import os
import platform
import re
import shutil
import subprocess
import sys

from absl import logging
import keras
import tensorflow as tf

from common.contract.errors import ConfigError

# Kernels in the pip wheels of the supported range, newest release first
# (tf.sysconfig.get_build_info()['cuda_compute_capabilities']); 2.17 to 2.21
# share the first list.
RELEASE_KERNELS = (
    ("2.21.0", ("sm_60", "sm_70", "sm_80", "sm_89", "compute_90")),
    ("2.16.2", ("sm_50", "sm_60", "sm_70", "sm_80", "compute_90")),
)

LAST_WINDOWS_GPU_RELEASE = (2, 10)  # native Windows wheels after it are CPU-only

# The start-up warning of a training run in mixed precision where TensorFlow has no GPU (its advice follows).
MIXED_PRECISION_ON_CPU = (
    "mixed precision without a GPU: TensorFlow's float16 convolutions on the CPU are several times "
    "slower than float32's (segmentation's gtx960m preset: 40-80 s a step on 2 cores, 10 s in float32, "
    "and the first step traces too); this config is sized for a GPU: on a CPU take ")

_ARCH_PATTERN = re.compile(r"^(sm|compute)_(\d+)(\d)([a-z]?)$")


@dataclasses.dataclass(frozen=True)
class GpuInfo:
  """One GPU; source is "tensorflow" or "nvidia-smi" (seen by the driver only)."""
  index: int
  name: str
  capability: tuple | None  # (major, minor), None when unknown
  source: str = "tensorflow"


@dataclasses.dataclass(frozen=True)
class TfBuild:
  """The installed TensorFlow: version, tf.sysconfig.get_build_info() and sys.platform."""
  version: str
  info: dict
  platform: str


@dataclasses.dataclass(frozen=True)
class GpuDiagnosis:
  """Whether TensorFlow can train on one GPU; if not, why and the command that fixes it."""
  gpu: GpuInfo
  usable: bool
  reason: str
  fix: str = ""  # "" when no supported release fixes it

  @property
  def message(self):
    """One line: the GPU, then what TensorFlow does with it and why, then the fix."""
    label = (f"GPU {self.gpu.index} ({self.gpu.name}, compute capability "
             f"{format_capability(self.gpu.capability)})")
    if self.usable:
      return f"{label}: {self.reason}"
    return f"{label} is not used: {self.reason}" + (f"; fix: {self.fix}" if self.fix else "")


def format_capability(capability):
  return "unknown" if capability is None else f"{capability[0]}.{capability[1]}"


def parse_arch(arch):
  """'sm_86' -> ('sm', (8, 6), False); 'compute_90' -> ('compute', (9, 0), False).

  The third item is True for arch-specific cubins ('sm_90a'), which run on
  that exact capability only.
  """
  match = _ARCH_PATTERN.match(arch.strip())
  if not match:
    raise ValueError(f"unrecognized CUDA architecture {arch!r}")
  kind, major, minor, suffix = match.groups()
  return kind, (int(major), int(minor)), suffix == "a"


def arch_runs_on(arch, capability):
  """True when code built for arch runs on a GPU of this capability.

  A cubin (sm_XY) runs on the same major version with minor >= Y; PTX
  (compute_XY) is compiled by the driver for any capability >= X.Y.
  """
  kind, built, exact = parse_arch(arch)
  if kind == "compute":
    return tuple(capability) >= built
  if exact:
    return tuple(capability) == built
  return capability[0] == built[0] and capability[1] >= built[1]


def find_kernel_arch(capability, build_archs):
  """The entry of build_archs that serves capability (a cubin first), or None."""
  usable = [a for a in build_archs if arch_runs_on(a, capability)]
  cubins = [a for a in usable if a.startswith("sm_")]
  return (cubins or usable or [None])[-1]


def recommend_release(capability):
  """(version, arch) of the newest supported release with kernels, or None."""
  for version, archs in RELEASE_KERNELS:
    arch = find_kernel_arch(capability, archs)
    if arch:
      return version, arch
  return None


def parse_version(version):
  """'2.16.2' -> (2, 16, 2); suffixes such as rc1 are dropped."""
  return tuple(int(p) for p in re.findall(r"\d+", version)[:3])


def pip_install(version):
  return f'pip install "tensorflow[and-cuda]=={version}"'


def release_fix(capability):
  """The pip command of the newest supported release with kernels for capability, or ""."""
  advice = recommend_release(capability)
  if not advice:
    return ""
  version, arch = advice
  last = "the newest" if version == RELEASE_KERNELS[0][0] else "the last"
  return f"{pip_install(version)} ({last} release built with {arch})"


def diagnose_gpu(gpu, build):
  """Pure: a GpuDiagnosis of gpu (a GpuInfo) under build (a TfBuild)."""
  if gpu.capability is None:
    if gpu.source == "tensorflow":
      return GpuDiagnosis(gpu, True, f"tensorflow {build.version} uses it")
    return GpuDiagnosis(gpu, False, (
        "tensorflow does not list it and nvidia-smi is too old to report its compute capability"))
  archs = build.info.get("cuda_compute_capabilities", [])
  arch = find_kernel_arch(gpu.capability, archs)
  fix = release_fix(gpu.capability)
  if build.platform == "win32" and parse_version(build.version)[:2] > LAST_WINDOWS_GPU_RELEASE:
    reason = f"tensorflow {build.version} on native Windows has no GPU support (2.10 was the last with it)"
    fix = f"in WSL2 (Ubuntu, with the Windows NVIDIA driver) run {fix}" if fix else ""
  elif not (build.info.get("is_cuda_build") and archs):
    reason = f"tensorflow {build.version} was built without CUDA"
  elif not arch:
    reason = f"tensorflow {build.version} has kernels for {', '.join(archs)} only"
  elif gpu.source != "tensorflow":
    cuda = build.info.get("cuda_version")
    return GpuDiagnosis(gpu, False, (
        f"tensorflow {build.version} has kernels for it ({arch}) but does not see it: its CUDA "
        "libraries are missing or do not match the driver"), (
            f"{pip_install(build.version)} (brings CUDA {cuda} and cuDNN "
            f"{build.info.get('cudnn_version')}; the NVIDIA driver must support CUDA {cuda})"))
  elif arch.startswith("compute_"):
    return GpuDiagnosis(gpu, True, (
        f"tensorflow {build.version} runs on it through {arch} PTX, compiled by the driver at "
        "start-up (the first run can take minutes)"))
  else:
    return GpuDiagnosis(gpu, True, f"tensorflow {build.version} has kernels for it ({arch})")
  if not fix:
    reason += (f"; no tensorflow release from {RELEASE_KERNELS[-1][0]} to {RELEASE_KERNELS[0][0]} "
               "has kernels for it: use the CPU or build tensorflow from source for this capability")
  return GpuDiagnosis(gpu, False, reason, fix)


def parse_nvidia_smi(text):
  """GpuInfo list from `nvidia-smi --query-gpu=index,name,compute_cap --format=csv,noheader`."""
  gpus = []
  for line in text.strip().splitlines():
    parts = [p.strip() for p in line.split(",")]
    if len(parts) != 3 or not parts[0].isdigit():
      continue
    index, name, cap = parts
    match = re.match(r"^(\d+)\.(\d+)$", cap)
    capability = (int(match.group(1)), int(match.group(2))) if match else None
    gpus.append(GpuInfo(int(index), name, capability, source="nvidia-smi"))
  return gpus


def query_nvidia_smi():
  """GPUs the NVIDIA driver sees, whether or not TensorFlow uses them."""
  if not shutil.which("nvidia-smi"):
    return []
  try:
    result = subprocess.run(
        ["nvidia-smi", "--query-gpu=index,name,compute_cap", "--format=csv,noheader"],
        capture_output=True, text=True, timeout=30, check=True)
  except (OSError, subprocess.SubprocessError):
    return []
  return parse_nvidia_smi(result.stdout)


def list_tf_gpus():
  """GPUs TensorFlow will use, with name and compute capability."""
  gpus = []
  for index, device in enumerate(tf.config.list_physical_devices("GPU")):
    details = tf.config.experimental.get_device_details(device)
    gpus.append(GpuInfo(index, details.get("device_name", device.name),
                        details.get("compute_capability")))
  return gpus


def list_gpus():
  """TensorFlow's GPUs, or else the driver's (those TensorFlow ignored)."""
  return list_tf_gpus() or query_nvidia_smi()


def installed_build():
  """The TfBuild of the TensorFlow this process imported."""
  return TfBuild(tf.__version__, dict(tf.sysconfig.get_build_info()), sys.platform)


def warn_unusable_gpus(build, gpus):
  """One warning line per GPU that build cannot train on, naming the fix."""
  for gpu in gpus:
    diagnosis = diagnose_gpu(gpu, build)
    if not diagnosis.usable:
      logging.warning("%s", diagnosis.message)


def configure_devices(memory_limit_mb=0, memory_growth=True, work="training"):
  """Sets GPU memory options; call before anything initializes TensorFlow's GPUs.

  With memory_limit_mb > 0 each GPU becomes one logical device of that size
  (to make a large card behave like a 4 GB one); TensorFlow reserves the limit
  up front then, so memory growth does not apply. Returns the device report, which says where
  `work` (what the command does) runs.
  """
  tf.debugging.set_log_device_placement(False)
  try:
    for gpu in tf.config.list_physical_devices("GPU"):
      if memory_limit_mb > 0:
        tf.config.set_logical_device_configuration(
            gpu, [tf.config.LogicalDeviceConfiguration(memory_limit=memory_limit_mb)])
      elif memory_growth:
        tf.config.experimental.set_memory_growth(gpu, True)
  except RuntimeError as e:
    raise RuntimeError(
        "configure_devices() must run before TensorFlow initializes the GPUs "
        f"(before any op or model is created): {e}") from e
  # Listed once: the report and the warnings describe the same GPUs, nvidia-smi runs once.
  build, gpus = installed_build(), list_gpus()
  report = device_report(build, gpus, memory_limit_mb, work)
  for line in report.splitlines():
    logging.info("%s", line)
  warn_unusable_gpus(build, gpus)
  return report


def device_report(build, gpus, memory_limit_mb=0, work="training"):
  """A few lines: TensorFlow, Python, CPUs, oneDNN setting and each GPU (a GpuInfo list), or that
  `work` runs on the CPU."""
  info = build.info
  cuda = (f"CUDA {info.get('cuda_version')}, cuDNN {info.get('cudnn_version')}"
          if info.get("is_cuda_build") else "no CUDA")
  onednn = os.environ.get("TF_ENABLE_ONEDNN_OPTS", "unset (TensorFlow's default)")
  lines = [
      f"tensorflow {build.version} ({cuda}), keras {keras.__version__}, "
      f"python {platform.python_version()}, {sys.platform} {platform.machine()}",
      f"CPU: {cpu_name()}, {usable_cpus()} logical cores usable of {os.cpu_count()}, "
      f"TF_ENABLE_ONEDNN_OPTS={onednn}",
  ]
  for gpu in gpus:
    if gpu.source != "tensorflow":
      note = " (seen by the driver, NOT used by tensorflow)"
    elif memory_limit_mb > 0:
      note = f", memory limit {memory_limit_mb} MB"
    else:
      note = ""
    lines.append(f"GPU {gpu.index}: {gpu.name}, compute capability "
                 f"{format_capability(gpu.capability)}{note}")
  if len(lines) == 2:
    lines.append(f"GPU: none; {work} runs on the CPU")
  return "\n".join(lines)


def cpu_name():
  """The CPU's model name (/proc/cpuinfo on Linux), else what the platform module says."""
  try:
    with open("/proc/cpuinfo") as f:
      for line in f:
        if line.startswith("model name"):
          return line.split(":", 1)[1].strip()
  except OSError:
    pass
  return platform.processor() or "unknown model"


def usable_cpus():
  """Logical cores this process may run on (a container or taskset can allow fewer than exist)."""
  if hasattr(os, "sched_getaffinity"):
    return len(os.sched_getaffinity(0))
  return os.cpu_count()


def set_determinism(seed, deterministic):
  """Seeds Python, NumPy and TensorFlow; optionally makes ops deterministic."""
  keras.utils.set_random_seed(seed)
  if deterministic:
    tf.config.experimental.enable_op_determinism()


def make_strategy(name="auto"):
  """The tf.distribute strategy of `distribution.strategy` (see common/contract/config.py).

  auto: MultiWorkerMirroredStrategy when TF_CONFIG is set (Kubeflow, scripts/launch_workers.py),
  MirroredStrategy with several local GPUs, else the default one-device strategy. Create it
  before any other op: collective ops are configured at start-up.
  """
  tf_config = os.environ.get("TF_CONFIG")
  if name == "multi_worker" and not tf_config:
    raise ConfigError("distribution.strategy='multi_worker' needs TF_CONFIG (the cluster and this "
                      "worker's index): start the workers with scripts/launch_workers.py or set it")
  if tf_config and name in ("one_device", "mirrored"):
    logging.warning("TF_CONFIG is set but distribution.strategy='%s': this process trains alone", name)
  if name == "multi_worker" or (name == "auto" and tf_config):
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    logging.info("strategy: MultiWorkerMirroredStrategy, worker %d of %d (0 is the chief), %d replicas in all",
                 worker_index(strategy), num_workers(strategy), strategy.num_replicas_in_sync)
    return strategy
  gpus = tf.config.list_logical_devices("GPU")
  if name == "mirrored" or (name == "auto" and len(gpus) > 1):
    strategy = tf.distribute.MirroredStrategy()
    logging.info("strategy: MirroredStrategy over %d local devices", strategy.num_replicas_in_sync)
    return strategy
  logging.info("strategy: default (one device: %s)", gpus[0].name if gpus else "CPU")
  return tf.distribute.get_strategy()


def _cluster(strategy):
  resolver = getattr(strategy, "cluster_resolver", None)
  return resolver.cluster_spec().as_dict() if resolver is not None else {}


def num_workers(strategy):
  """How many worker processes share the strategy's replicas (1 without TF_CONFIG)."""
  cluster = _cluster(strategy)
  return max(1, len(cluster.get("chief", [])) + len(cluster.get("worker", [])))


def worker_index(strategy):
  """This process's index among the workers, a separate chief task first; 0 alone."""
  if num_workers(strategy) == 1:
    return 0
  resolver = strategy.cluster_resolver
  return resolver.task_id + (1 if resolver.task_type == "worker" and _cluster(strategy).get("chief") else 0)


def is_chief(strategy):
  """The one process that writes the workdir: the chief task, or else worker 0."""
  return worker_index(strategy) == 0
