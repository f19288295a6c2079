"""Can the installed TensorFlow train on this machine's GPU? What to install if not.

  python scripts/check_gpu.py

Prints each GPU's name and compute capability (from TensorFlow, or from
nvidia-smi for GPUs TensorFlow ignores), whether the installed TensorFlow has
kernels for it, the CUDA and cuDNN versions it was built with, and the pip
command that fixes what is missing.

Exit code: 0 when TensorFlow can use a GPU; 1 when it cannot (no GPU, no
kernels for it, missing CUDA libraries, native Windows), so that a shell
script can test for a usable GPU. The cause is printed either way.
"""
import pathlib
import re
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

import tensorflow as tf  # pylint: disable=g-import-not-at-top

from common import hardware  # pylint: disable=g-import-not-at-top

LAST_WINDOWS_GPU_RELEASE = (2, 10)
TENSOR_CORES = (7, 0)  # float16 matmuls run faster than float32 from this capability on


def parse_version(version):
  """'2.16.2' -> (2, 16, 2); suffixes such as rc1 are dropped."""
  return tuple(int(p) for p in re.findall(r"\d+", version)[:3])


def pip_install(version):
  return f'pip install "tensorflow[and-cuda]=={version}"'


def diagnose(platform, tf_version, build_info, tf_gpus, driver_gpus):
  """Pure diagnosis; returns (lines to print, whether TensorFlow can use a GPU)."""
  archs = list(build_info.get("cuda_compute_capabilities", []))
  lines = [f"tensorflow {tf_version}: " + (
      f"built with CUDA {build_info.get('cuda_version')}, cuDNN "
      f"{build_info.get('cudnn_version')}, kernels for {', '.join(archs)}"
      if build_info.get("is_cuda_build") else "built without CUDA")]
  gpus = tf_gpus or driver_gpus
  for gpu in gpus:
    seen = "" if gpu.source == "tensorflow" else " (listed by nvidia-smi, not by tensorflow)"
    lines.append(f"GPU {gpu.index}: {gpu.name}, compute capability "
                 f"{hardware.format_capability(gpu.capability)}{seen}")

  if platform == "win32" and parse_version(tf_version)[:2] > LAST_WINDOWS_GPU_RELEASE:
    lines.append(
        f"native Windows: tensorflow after 2.10 has no GPU support (this is {tf_version}). "
        f"Use WSL2 (Ubuntu) with the Windows NVIDIA driver, and there: {pip_install(tf_version)}")
    return lines, False
  if not gpus:
    lines.append("no NVIDIA GPU found: tensorflow lists none and nvidia-smi lists none or is "
                 "not installed; training runs on the CPU")
    return lines, False

  usable = False
  for gpu in gpus:
    label = f"GPU {gpu.index} ({gpu.name})"
    if gpu.capability is None:
      lines.append(f"{label}: compute capability unknown (nvidia-smi too old to report it)")
      continue
    check = hardware.describe_kernel_support(gpu.capability, archs, tf_version, label)
    lines.append(check.message)
    if tuple(gpu.capability) < TENSOR_CORES:
      lines.append(f"{label} has no tensor cores: mixed precision saves memory there, not time")
    if not check.ok:
      advice = hardware.recommend_release(gpu.capability)
      if advice:
        lines.append(f"fix: {pip_install(advice[0])}")
    elif gpu.source != "tensorflow":
      lines.append(
          "tensorflow has kernels for it but does not see it: the CUDA libraries are missing "
          f"or do not match; fix: {pip_install(tf_version)} (brings CUDA and cuDNN; the "
          f"NVIDIA driver must support CUDA {build_info.get('cuda_version')})")
    else:
      usable = True
  return lines, usable


def main():
  tf_gpus = hardware.list_tf_gpus()
  lines, usable = diagnose(sys.platform, tf.__version__, tf.sysconfig.get_build_info(),
                           tf_gpus, [] if tf_gpus else hardware.query_nvidia_smi())
  print("\n".join(lines))
  print("result: " + ("tensorflow can use the GPU" if usable else "no usable GPU"))
  return 0 if usable else 1


if __name__ == "__main__":
  sys.exit(main())
