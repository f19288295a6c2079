"""Tests for common/hardware.py: kernel check (pure), device report, determinism."""
import os

import numpy as np
import pytest
import tensorflow as tf

from common import hardware
from scripts import check_gpu

TF_2_21 = ["sm_60", "sm_70", "sm_80", "sm_89", "compute_90"]
TF_2_16 = ["sm_50", "sm_60", "sm_70", "sm_80", "compute_90"]


def test_gtx960m_on_2_21_recommends_2_16_2():
  check = hardware.describe_kernel_support(
      (5, 0), TF_2_21, "2.21.0", "GPU 0 (GeForce GTX 960M)")
  assert not check.ok
  assert "GPU 0 (GeForce GTX 960M) has compute capability 5.0" in check.message
  assert "tensorflow 2.21.0" in check.message
  assert "tensorflow[and-cuda]==2.16.2" in check.message
  assert "sm_50" in check.message


def test_gtx960m_on_2_16_2_is_ok():
  check = hardware.describe_kernel_support((5, 0), TF_2_16, "2.16.2")
  assert check.ok
  assert "sm_50" in check.message


@pytest.mark.parametrize("capability,archs,arch", [
    ((8, 6), ["compute_80", "sm_86"], "sm_86"),
    ((8, 6), TF_2_21, "sm_80"),  # a cubin runs on the same major, higher minor
    ((9, 0), ["sm_80", "compute_90"], "compute_90"),
    ((12, 0), TF_2_21, "compute_90"),  # PTX is compiled for newer GPUs
])
def test_supported_capabilities(capability, archs, arch):
  check = hardware.describe_kernel_support(capability, archs, "2.21.0")
  assert check.ok
  assert arch in check.message
  assert hardware.find_kernel_arch(capability, archs) == arch


@pytest.mark.parametrize("capability,archs", [
    ((9, 0), ["sm_80", "sm_89"]),  # a cubin never runs on a higher major
    ((8, 6), ["sm_90a"]),
    ((7, 5), ["compute_80"]),  # PTX never runs on a lower capability
])
def test_unsupported_capabilities(capability, archs):
  assert hardware.find_kernel_arch(capability, archs) is None
  assert not hardware.describe_kernel_support(capability, archs, "2.21.0").ok


def test_capability_no_release_supports():
  check = hardware.describe_kernel_support((3, 5), TF_2_16, "2.16.2")
  assert not check.ok
  assert "no tensorflow release from 2.16.2 to 2.21.0" in check.message


def test_cpu_only_build():
  check = hardware.describe_kernel_support((8, 6), [], "2.21.0")
  assert not check.ok
  assert "without CUDA" in check.message


def test_parse_arch():
  assert hardware.parse_arch("sm_86") == ("sm", (8, 6), False)
  assert hardware.parse_arch("compute_90") == ("compute", (9, 0), False)
  assert hardware.parse_arch("sm_100") == ("sm", (10, 0), False)
  assert hardware.parse_arch("sm_90a") == ("sm", (9, 0), True)
  with pytest.raises(ValueError, match="gfx90a"):
    hardware.parse_arch("gfx90a")


def test_parse_nvidia_smi():
  text = "0, NVIDIA GeForce GTX 960M, 5.0\n1, NVIDIA H200, 9.0\n2, Old GPU, [N/A]\n"
  gpus = hardware.parse_nvidia_smi(text)
  assert [(g.index, g.name, g.capability) for g in gpus] == [
      (0, "NVIDIA GeForce GTX 960M", (5, 0)), (1, "NVIDIA H200", (9, 0)), (2, "Old GPU", None)]
  assert all(g.source == "nvidia-smi" for g in gpus)


def test_check_gpu_kernels_on_given_gpus():
  gpus = [hardware.GpuInfo(0, "Tiny GPU", (1, 0)), hardware.GpuInfo(1, "Mystery GPU", None)]
  checks = hardware.check_gpu_kernels(gpus)
  assert [c.ok for c in checks] == [False, False]
  assert "GPU 0 (Tiny GPU) has compute capability 1.0" in checks[0].message
  assert "unknown" in checks[1].message


def test_configure_devices_reports_on_cpu(monkeypatch):
  monkeypatch.setattr(hardware, "query_nvidia_smi", lambda: [])
  report = hardware.configure_devices(memory_limit_mb=0, memory_growth=True)
  assert f"tensorflow {tf.__version__}" in report
  assert f"{hardware.usable_cpus()} logical cores usable of {os.cpu_count()}" in report
  assert hardware.cpu_name() in report
  if not tf.config.list_physical_devices("GPU"):
    assert "GPU: none" in report


def test_device_report_shows_gpus_tensorflow_ignored(monkeypatch):
  monkeypatch.setattr(hardware, "list_tf_gpus", lambda: [])
  monkeypatch.setattr(hardware, "query_nvidia_smi", lambda: [
      hardware.GpuInfo(0, "GeForce GTX 960M", (5, 0), source="nvidia-smi")])
  report = hardware.device_report()
  assert "GPU 0: GeForce GTX 960M, compute capability 5.0 (seen by the driver, NOT used" in report


def test_determinism_repeats_random_draws():
  def draw():
    hardware.set_determinism(seed=123, deterministic=True)
    return (np.random.rand(3), tf.random.uniform([3]).numpy(),
            tf.keras.initializers.GlorotUniform()((2, 2)).numpy())
  for first, second in zip(draw(), draw()):
    np.testing.assert_array_equal(first, second)


def test_make_strategy_default_on_one_device(monkeypatch):
  monkeypatch.delenv("TF_CONFIG", raising=False)
  if len(tf.config.list_logical_devices("GPU")) > 1:
    pytest.skip("several GPUs: MirroredStrategy is expected")
  assert hardware.make_strategy() is tf.distribute.get_strategy()


# scripts/check_gpu.py
BUILD_2_21 = {"is_cuda_build": True, "cuda_version": "12.5.1", "cudnn_version": "9",
              "cuda_compute_capabilities": TF_2_21}


def test_check_gpu_gtx960m_ignored_by_2_21():
  gpu = hardware.GpuInfo(0, "NVIDIA GeForce GTX 960M", (5, 0), source="nvidia-smi")
  lines, usable = check_gpu.diagnose("linux", "2.21.0", BUILD_2_21, [], [gpu])
  text = "\n".join(lines)
  assert not usable
  assert "CUDA 12.5.1, cuDNN 9" in text
  assert "GPU 0: NVIDIA GeForce GTX 960M, compute capability 5.0" in text
  assert 'fix: pip install "tensorflow[and-cuda]==2.16.2"' in text
  assert "mixed precision saves memory there, not time" in text


def test_check_gpu_usable_gpu():
  gpu = hardware.GpuInfo(0, "NVIDIA H200", (9, 0))
  lines, usable = check_gpu.diagnose("linux", "2.21.0", BUILD_2_21, [gpu], [])
  assert usable
  assert "compute_90" in lines[-1]


def test_check_gpu_driver_sees_gpu_tensorflow_does_not():
  gpu = hardware.GpuInfo(0, "NVIDIA GeForce RTX 3060", (8, 6), source="nvidia-smi")
  lines, usable = check_gpu.diagnose("linux", "2.21.0", BUILD_2_21, [], [gpu])
  assert not usable
  assert 'CUDA libraries are missing' in lines[-1]
  assert 'pip install "tensorflow[and-cuda]==2.21.0"' in lines[-1]


def test_check_gpu_native_windows_points_to_wsl2():
  gpu = hardware.GpuInfo(0, "NVIDIA GeForce GTX 960M", (5, 0), source="nvidia-smi")
  lines, usable = check_gpu.diagnose("win32", "2.16.2", {"is_cuda_build": False}, [], [gpu])
  assert not usable
  assert "no GPU support" in lines[-1] and "WSL2" in lines[-1]


def test_check_gpu_without_gpu_exits_1(monkeypatch, capsys):
  monkeypatch.setattr(hardware, "list_tf_gpus", lambda: [])
  monkeypatch.setattr(hardware, "query_nvidia_smi", lambda: [])
  assert check_gpu.main() == 1
  out = capsys.readouterr().out
  assert f"tensorflow {tf.__version__}" in out
  assert "no NVIDIA GPU found" in out
