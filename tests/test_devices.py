"""The device layer: CUDA_VISIBLE_DEVICES as the CUDA runtime reads it, NVML discovery
(run against a stand-in for the pynvml module), memory figures and the load limit."""

from __future__ import annotations

import sys
from types import SimpleNamespace

import pytest

from infercore import Options
from infercore.devices import (
    DeviceMemory,
    Devices,
    GpuSample,
    NvmlDevices,
    check_load_limit,
    visible_gpus,
)
from infercore.errors import InvalidArgumentError, UnavailableError
from infercore.testing import FakeDevices

UUIDS = ["GPU-aaaa1111", "GPU-bbbb2222", "GPU-bbbc3333"]


@pytest.mark.parametrize(
    ("setting", "expected"),
    [
        (None, [0, 1, 2]),
        ("", []),
        ("-1", []),
        ("2", [2]),
        ("2,0", [2, 0]),
        (" 1 , 2 ", [1, 2]),
        ("0,7,1", [0]),  # the list ends at the first entry that names no GPU
        ("1,1,2", [1]),  # and at a GPU already listed
        ("GPU-bbbc", [2]),  # a unique UUID prefix
        ("GPU-bbb,0", []),  # an ambiguous one names no GPU
        ("GPU-aaaa1111,2", [0, 2]),
        ("MIG-0123", []),
        ("zero", []),
    ],
)
def test_cuda_visible_devices_selects_and_orders_the_gpus(setting, expected):
    assert visible_gpus(setting, UUIDS) == expected


class FakeNvml:
    """What NvmlDevices calls of pynvml, for a host with ``memory`` (free, total) GPUs."""

    def __init__(self, memory: list[tuple[int, int]], fail_init: bool = False) -> None:
        self.memory = memory
        self.fail_init = fail_init
        self.inits = 0

    def nvmlInit(self) -> None:
        self.inits += 1
        if self.fail_init:
            raise RuntimeError("NVML Shared Library Not Found")

    def nvmlDeviceGetCount(self) -> int:
        return len(self.memory)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetUUID(self, handle: int) -> bytes:
        return UUIDS[handle].encode()  # older pynvml releases return bytes

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> SimpleNamespace:
        free, total = self.memory[handle]
        return SimpleNamespace(free=free, total=total, used=0)

    # the sampled figures of host GPU ``handle``: percent, milliwatts and millijoules,
    # as NVML gives them; GPU 2 supports none of them
    def nvmlDeviceGetUtilizationRates(self, handle: int) -> SimpleNamespace:
        self._unsupported(handle)
        return SimpleNamespace(gpu=37 + handle, memory=5)

    def nvmlDeviceGetPowerUsage(self, handle: int) -> int:
        self._unsupported(handle)
        return 71_250 + handle

    def nvmlDeviceGetPowerManagementLimit(self, handle: int) -> int:
        self._unsupported(handle)
        return 700_000

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: int) -> int:
        self._unsupported(handle)
        return 123_456_789

    @staticmethod
    def _unsupported(handle: int) -> None:
        if handle == 2:
            raise RuntimeError("Not Supported")  # pynvml.NVMLError_NotSupported


def test_nvml_devices_count_the_visible_gpus_and_read_their_memory():
    nvml = FakeNvml([(10, 100), (30, 100), (99, 100)])
    devices = NvmlDevices({"CUDA_VISIBLE_DEVICES": "2,1"}, nvml)
    assert devices.gpu_count() == 2
    # GPU 0 is the host's third: used = total - free, as Triton reads cudaMemGetInfo
    assert devices.memory(0) == DeviceMemory(1, 100)
    assert devices.memory(1) == DeviceMemory(70, 100)
    with pytest.raises(UnavailableError, match="GPU 2 is not available"):
        devices.memory(2)
    assert nvml.inits == 1  # discovered once


def test_nvml_devices_sample_the_uuid_utilization_power_and_energy_in_si_units():
    devices = NvmlDevices({"CUDA_VISIBLE_DEVICES": "1,2"}, FakeNvml([(1, 2)] * 3))
    # GPU 0 is the host's second: NVML's percent, milliwatts and millijoules converted
    assert devices.sample(0) == GpuSample(
        "GPU-bbbb2222",
        utilization=0.38,
        power_watts=71.251,
        power_limit_watts=700.0,
        energy_joules=123_456.789,
    )
    # a GPU that supports none of the figures still has its UUID
    assert devices.sample(1) == GpuSample("GPU-bbbc3333")
    with pytest.raises(UnavailableError, match="GPU 2 is not available"):
        devices.sample(2)


def test_fake_devices_sample_what_the_test_sets():
    devices = FakeDevices(2)
    assert devices.sample(1) == GpuSample("GPU-00000000-0000-0000-0000-000000000001")
    devices.set_sample(1, utilization=0.5, energy_joules=10.0)
    devices.set_sample(1, power_watts=90.0)
    assert devices.sample(1) == GpuSample(
        "GPU-00000000-0000-0000-0000-000000000001",
        utilization=0.5,
        power_watts=90.0,
        energy_joules=10.0,
    )
    assert devices.sample_reads == [0, 2]
    with pytest.raises(ValueError, match="takes no \\['uuid'\\]"):
        devices.set_sample(0, uuid="GPU-x")
    with pytest.raises(UnavailableError, match="GPU 2 is not available"):
        devices.sample(2)
    assert isinstance(devices, Devices)


def test_nvml_devices_without_cuda_visible_devices_see_every_gpu():
    assert NvmlDevices({}, FakeNvml([(1, 2), (1, 2), (1, 2)])).gpu_count() == 3


def test_nvml_devices_without_a_driver_see_no_gpus():
    assert NvmlDevices({}, FakeNvml([(1, 2)], fail_init=True)).gpu_count() == 0


def test_nvml_devices_without_pynvml_see_no_gpus(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # importing it raises ImportError
    assert NvmlDevices({}).gpu_count() == 0


def test_a_failed_memory_read_is_unavailable():
    nvml = FakeNvml([(1, 2)])
    devices = NvmlDevices({}, nvml)
    assert devices.gpu_count() == 1
    nvml.memory = []  # the device went away
    with pytest.raises(UnavailableError, match="failed to read the memory of GPU 0"):
        devices.memory(0)


def test_device_memory_exceeds_a_fraction_as_triton_compares():
    memory = DeviceMemory(50, 100)
    assert not memory.exceeds(0.5)  # used > total * fraction
    assert memory.exceeds(0.49)
    assert not DeviceMemory(100, 100).exceeds(1.0)
    assert memory.exceeds(0.0)
    assert not memory.exceeds(float("nan"))
    with pytest.raises(InvalidArgumentError, match="0 <= used <= total"):
        DeviceMemory(101, 100)


def test_load_limit_refuses_with_tritons_message_only_where_a_limit_is_set():
    devices = FakeDevices(2, total_bytes=100, used_bytes=[80, 80])
    check_load_limit(devices, {1: 0.5}, 0, "m_0_0")  # GPU 0 has no limit
    assert devices.memory_reads[0] == 0  # and its memory is not even read
    check_load_limit(devices, {0: 0.8}, 0, "m_0_0")  # 80 is not more than 80
    with pytest.raises(UnavailableError) as caught:
        check_load_limit(devices, {1: 0.5}, 1, "m_0_1")
    assert caught.value.message == (
        "can not create model 'm_0_1': memory limit set for GPU 1 has exceeded, model "
        "loading is rejected."
    )


def test_options_take_a_device_layer_and_refuse_anything_else():
    fake = FakeDevices(3)
    assert Options(devices=fake).devices is fake
    assert isinstance(Options().devices, NvmlDevices)
    with pytest.raises(InvalidArgumentError, match="devices must be an infercore.devices"):
        Options(devices=3)

    class WithoutSample:  # a device layer that cannot feed the GPU metrics
        def gpu_count(self) -> int:
            return 0

        def memory(self, gpu: int) -> DeviceMemory:
            raise UnavailableError("none")

    with pytest.raises(InvalidArgumentError, match=r"\(gpu_count, memory and sample\), got Wi"):
        Options(devices=WithoutSample())
    assert Options(devices=fake).devices is fake


def test_fake_devices_check_their_figures():
    with pytest.raises(ValueError, match="one used figure per GPU"):
        FakeDevices(2, used_bytes=[1])
    devices = FakeDevices(1, total_bytes=10)
    devices.set_used(0, 7)
    assert devices.memory(0) == DeviceMemory(7, 10)
    with pytest.raises(UnavailableError, match="GPU 1 is not available"):
        devices.memory(1)
