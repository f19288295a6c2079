"""A GPU the installed TensorFlow cannot use: hardware.diagnose_gpu, the one warning line every run
starts with, and scripts/check_gpu.py, with the detection faked (the test machine has no GPU)."""
import logging

import pytest

from common.contract import config as config_lib
from common.runtime import hardware
from common.app import startup
from helpers import REPO_ROOT
from scripts import check_gpu

KERNELS = dict(hardware.RELEASE_KERNELS)
CUDA_2_21 = hardware.TfBuild("2.21.0", {
    "is_cuda_build": True, "cuda_version": "12.5.1", "cudnn_version": "9",
    "cuda_compute_capabilities": list(KERNELS["2.21.0"])}, "linux")
CUDA_2_16 = hardware.TfBuild("2.16.2", {
    "is_cuda_build": True, "cuda_version": "12.3", "cudnn_version": "8",
    "cuda_compute_capabilities": list(KERNELS["2.16.2"])}, "linux")
CPU_2_21 = hardware.TfBuild("2.21.0", {"is_cuda_build": False}, "linux")
GTX_960M = hardware.GpuInfo(0, "NVIDIA GeForce GTX 960M", (5, 0), source="nvidia-smi")
RTX_3060 = hardware.GpuInfo(0, "NVIDIA GeForce RTX 3060", (8, 6), source="nvidia-smi")
RTX_3060_IN_TF = hardware.GpuInfo(0, "NVIDIA GeForce RTX 3060", (8, 6))

# The two lines a GPU user most likely meets, in full.
CPU_BUILD_GTX_960M = (
    "GPU 0 (NVIDIA GeForce GTX 960M, compute capability 5.0) is not used: tensorflow 2.21.0 was "
    'built without CUDA; fix: pip install "tensorflow[and-cuda]==2.16.2" (the last release built '
    "with sm_50)")
NO_CUDA_LIBRARIES_RTX_3060 = (
    "GPU 0 (NVIDIA GeForce RTX 3060, compute capability 8.6) is not used: tensorflow 2.21.0 has "
    "kernels for it (sm_80) but does not see it: its CUDA libraries are missing or do not match "
    'the driver; fix: pip install "tensorflow[and-cuda]==2.21.0" (brings CUDA 12.5.1 and cuDNN 9; '
    "the NVIDIA driver must support CUDA 12.5.1)")


@pytest.fixture
def fake_machine(monkeypatch):
  """fake_machine(build, gpus): the installed TfBuild, and GPUs as TensorFlow or nvidia-smi lists them."""
  def fake(build, gpus):
    monkeypatch.setattr(hardware, "installed_build", lambda: build)
    monkeypatch.setattr(hardware, "list_tf_gpus", lambda: [g for g in gpus if g.source == "tensorflow"])
    monkeypatch.setattr(hardware, "query_nvidia_smi", lambda: [g for g in gpus if g.source != "tensorflow"])
  return fake


def gpu_warnings(caplog):
  return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and "GPU" in r.getMessage()]


@pytest.mark.parametrize("build,gpus,warning", [
    (CPU_2_21, [GTX_960M], CPU_BUILD_GTX_960M),
    (CUDA_2_21, [RTX_3060], NO_CUDA_LIBRARIES_RTX_3060),
    (CUDA_2_21, [GTX_960M], "tensorflow 2.21.0 has kernels for sm_60, sm_70, sm_80, sm_89, compute_90 "
                            'only; fix: pip install "tensorflow[and-cuda]==2.16.2" (the last release'),
    (CUDA_2_16, [GTX_960M], 'but does not see it: its CUDA libraries are missing or do not match the '
                            'driver; fix: pip install "tensorflow[and-cuda]==2.16.2" (brings CUDA 12.3'),
    (CUDA_2_21, [RTX_3060_IN_TF], None),
    (CUDA_2_21, [], None),
], ids=["cpu_build_gtx960m", "no_cuda_libraries_rtx3060", "no_kernels_gtx960m",
        "no_cuda_libraries_gtx960m_on_2_16_2", "usable", "no_gpu"])
def test_run_start_warns_once_per_unusable_gpu(fake_machine, caplog, build, gpus, warning):
  fake_machine(build, gpus)
  with caplog.at_level(logging.INFO):
    hardware.configure_devices()
  if warning is None:
    assert not gpu_warnings(caplog)
  else:
    [line] = gpu_warnings(caplog)
    assert warning in line


def test_every_run_starts_with_the_warning(fake_machine, caplog):
  fake_machine(CUDA_2_21, [RTX_3060])
  with caplog.at_level(logging.INFO):
    startup.prepare_run(config_lib.base_config())
  assert gpu_warnings(caplog) == [NO_CUDA_LIBRARIES_RTX_3060]


def test_check_gpu_prints_the_fix_and_exits_1(fake_machine, capsys):
  fake_machine(CPU_2_21, [GTX_960M])
  assert check_gpu.main() == 1
  lines = capsys.readouterr().out.splitlines()
  assert lines[0] == "tensorflow 2.21.0: built without CUDA"
  assert CPU_BUILD_GTX_960M in lines  # the run-start warning's line, word for word
  assert "GPU 0 has no tensor cores: mixed precision saves memory there, not time" in lines
  assert lines[-1] == "result: no usable GPU"


def test_check_gpu_usable_gpu_exits_0(fake_machine, capsys):
  fake_machine(CUDA_2_21, [RTX_3060_IN_TF])
  assert check_gpu.main() == 0
  out = capsys.readouterr().out
  assert ("GPU 0 (NVIDIA GeForce RTX 3060, compute capability 8.6): tensorflow 2.21.0 has kernels "
          "for it (sm_80)") in out
  assert "result: tensorflow can use the GPU" in out


def test_check_gpu_without_gpu_exits_1(fake_machine, capsys):
  fake_machine(CUDA_2_21, [])
  assert check_gpu.main() == 1
  out = capsys.readouterr().out
  assert "tensorflow 2.21.0: built with CUDA 12.5.1, cuDNN 9, kernels for sm_60" in out
  assert "no NVIDIA GPU found" in out


@pytest.mark.parametrize("gpu,build,usable,words", [
    (GTX_960M, CUDA_2_16, False, "tensorflow 2.16.2 has kernels for it (sm_50)"),
    (hardware.GpuInfo(0, "GTX 960M", (5, 0)), CUDA_2_16, True,
     "tensorflow 2.16.2 has kernels for it (sm_50)"),
    (hardware.GpuInfo(0, "H200", (9, 0)), CUDA_2_21, True, "through compute_90 PTX, compiled by the driver"),
    (hardware.GpuInfo(0, "Future GPU", (12, 0)), CUDA_2_21, True, "through compute_90 PTX"),
    (hardware.GpuInfo(0, "K80", (3, 7), source="nvidia-smi"), CUDA_2_16, False,
     "no tensorflow release from 2.16.2 to 2.21.0 has kernels for it: use the CPU or build tensorflow"),
    (hardware.GpuInfo(0, "Old GPU", None, source="nvidia-smi"), CUDA_2_21, False,
     "nvidia-smi is too old to report its compute capability"),
    (GTX_960M, hardware.TfBuild("2.16.2", {"is_cuda_build": False}, "win32"), False,
     "tensorflow 2.16.2 on native Windows has no GPU support (2.10 was the last with it); fix: in WSL2 "
     '(Ubuntu, with the Windows NVIDIA driver) run pip install "tensorflow[and-cuda]==2.16.2"'),
    (RTX_3060, hardware.TfBuild("2.21.0", {"is_cuda_build": True}, "linux"), False,
     'built without CUDA; fix: pip install "tensorflow[and-cuda]==2.21.0" (the newest release '
     "built with sm_80)"),
])
def test_diagnose_gpu(gpu, build, usable, words):
  diagnosis = hardware.diagnose_gpu(gpu, build)
  assert diagnosis.usable == usable
  assert words in diagnosis.message
  assert ("fix: " in diagnosis.message) == bool(diagnosis.fix)


@pytest.mark.parametrize("argv,gpus,advice", [
    (["--config=configs/segmentation.py:gtx960m"], [],
     "on a CPU take --config=configs/segmentation.py:default or --config.mixed_precision=False"),
    (["--config=configs/segmentation.py", "--config.mixed_precision=True"], [],
     "on a CPU take --config.mixed_precision=False"),  # the CPU preset already
    (["--config=configs/segmentation.py:gtx960m"], [RTX_3060_IN_TF], None),
], ids=["gpu_preset_on_a_cpu", "cpu_preset_in_mixed_precision", "gpu_preset_on_a_gpu"])
def test_a_gpu_preset_on_a_cpu_says_what_it_costs_and_the_cpu_preset(fake_machine, caplog, monkeypatch,
                                                                     argv, gpus, advice):
  fake_machine(CUDA_2_21, gpus)
  monkeypatch.chdir(REPO_ROOT)
  monkeypatch.setattr("sys.argv", ["segmentation/train.py", *argv])
  config = config_lib.base_config()
  config.mixed_precision = True
  with caplog.at_level(logging.INFO):
    startup.prepare_run(config)
  lines = [r.getMessage() for r in caplog.records if "mixed precision without a GPU" in r.getMessage()]
  if advice is None:
    assert not lines
  else:
    [line] = lines
    assert "40-80 s a step on 2 cores, 10 s in float32, and the first step traces too" in line
    assert line.endswith(advice), line
