"""Can the installed TensorFlow train on this machine's GPU? What to install if not.

  python scripts/check_gpu.py

Prints each GPU's name and compute capability (from TensorFlow, or from
nvidia-smi for GPUs TensorFlow ignores), whether the installed TensorFlow has
kernels for it, the CUDA and cuDNN versions it was built with, and the pip
command that fixes what is missing. Each GPU's line is hardware.diagnose_gpu's,
the one a training run warns with at its start.

Exit code: 0 when TensorFlow can use a GPU; 1 when it cannot (no GPU, no
kernels for it, missing CUDA libraries, native Windows), so that a shell
script can test for a usable GPU. The cause is printed either way.
"""
if not __package__:  # run as a file (python scripts/x.py): this repository's packages first
  import repository_root  # pylint: disable=unused-import

from common.runtime import process

if __name__ == "__main__":
  process.start()  # before TensorFlow's import: signals recorded, its C++ start-up lines held back

import sys  # pylint: disable=g-import-not-at-top,g-bad-import-order

from common.app import cli
from common.runtime import hardware
from common.runtime import signals

TENSOR_CORES = (7, 0)  # float16 matmuls run faster than float32 from this capability on


def diagnose(build, gpus):
  """Pure: (lines to print, whether TensorFlow can use a GPU) for a TfBuild and GpuInfo list."""
  archs = build.info.get("cuda_compute_capabilities", [])
  lines = [f"tensorflow {build.version}: " + (
      f"built with CUDA {build.info.get('cuda_version')}, cuDNN "
      f"{build.info.get('cudnn_version')}, kernels for {', '.join(archs)}"
      if build.info.get("is_cuda_build") else "built without CUDA")]
  if not gpus:
    lines.append("no NVIDIA GPU found: tensorflow lists none and nvidia-smi lists none or is "
                 "not installed; training runs on the CPU")
    return lines, False
  diagnoses = [hardware.diagnose_gpu(gpu, build) for gpu in gpus]
  for diagnosis in diagnoses:
    lines.append(diagnosis.message)
    gpu = diagnosis.gpu
    if gpu.capability is not None and tuple(gpu.capability) < TENSOR_CORES:
      lines.append(f"GPU {gpu.index} has no tensor cores: mixed precision saves memory there, not time")
  return lines, any(d.usable for d in diagnoses)


def main():
  lines, usable = diagnose(hardware.installed_build(), hardware.list_gpus())
  print("\n".join(lines))
  print("result: " + ("tensorflow can use the GPU" if usable else "no usable GPU"))
  return 0 if usable else 1


def checked_main():
  """main() behind the commands' guard: a signal (Ctrl-C while nvidia-smi hangs) is one line and
  128 + N at the end, not recorded and ignored."""
  code = main()
  signals.finish("after the check; nothing was written")
  return code


if __name__ == "__main__":
  sys.exit(cli.run_guarded(checked_main))
