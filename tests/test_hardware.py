"""Tests for common/runtime/hardware.py: CUDA architectures, nvidia-smi, device report, determinism.

The GPU diagnosis and its warning: tests/test_gpu_warning.py.
"""
import os

import numpy as np
import pytest
import tensorflow as tf

from common.runtime import hardware

TF_2_21 = ["sm_60", "sm_70", "sm_80", "sm_89", "compute_90"]


@pytest.mark.parametrize("capability,archs,arch", [
    ((8, 6), ["compute_80", "sm_86"], "sm_86"),
    ((8, 6), TF_2_21, "sm_80"),  # a cubin runs on the same major, higher minor
    ((9, 0), ["sm_80", "compute_90"], "compute_90"),
    ((12, 0), TF_2_21, "compute_90"),  # PTX is compiled for newer GPUs
])
def test_supported_capabilities(capability, archs, arch):
  assert hardware.find_kernel_arch(capability, archs) == arch


@pytest.mark.parametrize("capability,archs", [
    ((9, 0), ["sm_80", "sm_89"]),  # a cubin never runs on a higher major
    ((8, 6), ["sm_90a"]),
    ((7, 5), ["compute_80"]),  # PTX never runs on a lower capability
])
def test_unsupported_capabilities(capability, archs):
  assert hardware.find_kernel_arch(capability, archs) is None


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


def test_configure_devices_reports_on_cpu(monkeypatch):
  monkeypatch.setattr(hardware, "query_nvidia_smi", lambda: [])
  report = hardware.configure_devices(memory_limit_mb=0, memory_growth=True)
  assert f"tensorflow {tf.__version__}" in report
  assert f"{hardware.usable_cpus()} logical cores usable of {os.cpu_count()}" in report
  assert hardware.cpu_name() in report
  if not tf.config.list_physical_devices("GPU"):
    assert "GPU: none" in report


def test_device_report_shows_gpus_tensorflow_ignored(monkeypatch):
  report = hardware.device_report(hardware.installed_build(), [
      hardware.GpuInfo(0, "GeForce GTX 960M", (5, 0), source="nvidia-smi")])
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
