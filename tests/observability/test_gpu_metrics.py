"""GPU metrics: Triton's nv_gpu_* families from the device layer (FakeDevices), sampled
once per metrics interval, absent without GPUs or with gpu_metrics off."""

from __future__ import annotations

import logging

import pytest
from prometheus_client.parser import text_string_to_metric_families

from infercore import Options, Server
from infercore.devices import DeviceMemory, GpuSample
from infercore.errors import UnavailableError
from infercore.metrics_settings import MetricsSettings
from infercore.observability.metrics import ServerMetrics
from infercore.testing import FakeDevices, ManualClock

GIB = 1 << 30
UUID0 = "GPU-00000000-0000-0000-0000-000000000000"
UUID1 = "GPU-00000000-0000-0000-0000-000000000001"
GPU_FAMILIES = {
    # Triton core's src/metrics.cc: name -> (type, HELP)
    "nv_gpu_utilization": ("gauge", "GPU utilization rate [0.0 - 1.0)"),
    "nv_gpu_memory_total_bytes": ("gauge", "GPU total memory, in bytes"),
    "nv_gpu_memory_used_bytes": ("gauge", "GPU used memory, in bytes"),
    "nv_gpu_power_usage": ("gauge", "GPU power usage in watts"),
    "nv_gpu_power_limit": ("gauge", "GPU power management limit in watts"),
    "nv_energy_consumption": (
        "counter",
        "GPU energy consumption in joules since the Triton Server started",
    ),
}


def gpu_values(text: str) -> dict[tuple[str, str], float]:
    """(family, gpu_uuid) -> value of every GPU family's sample."""
    found = {}
    for family in text_string_to_metric_families(text):
        if family.name in GPU_FAMILIES:
            for sample in family.samples:
                assert set(sample.labels) == {"gpu_uuid"}, sample
                found[family.name, sample.labels["gpu_uuid"]] = sample.value
    return found


def server(repo, devices, **options) -> Server:
    return Server(Options(model_repository=repo.path, devices=devices, **options))


def test_each_gpu_gets_tritons_families_labelled_by_uuid(repo):
    devices = FakeDevices(2, total_bytes=80 * GIB, used_bytes=[GIB, 3 * GIB])
    devices.set_sample(
        0, utilization=0.25, power_watts=71.5, power_limit_watts=700.0, energy_joules=5000.0
    )
    devices.set_sample(
        1, utilization=1.0, power_watts=650.0, power_limit_watts=700.0, energy_joules=9000.0
    )
    with server(repo, devices) as running:
        text = running.metrics()
    for name, (kind, help_text) in GPU_FAMILIES.items():
        assert f"# HELP {name} {help_text}\n# TYPE {name} {kind}\n" in text
    assert gpu_values(text) == {
        ("nv_gpu_utilization", UUID0): 0.25,
        ("nv_gpu_utilization", UUID1): 1.0,
        ("nv_gpu_memory_total_bytes", UUID0): 80 * GIB,
        ("nv_gpu_memory_total_bytes", UUID1): 80 * GIB,
        ("nv_gpu_memory_used_bytes", UUID0): GIB,
        ("nv_gpu_memory_used_bytes", UUID1): 3 * GIB,
        ("nv_gpu_power_usage", UUID0): 71.5,
        ("nv_gpu_power_usage", UUID1): 650.0,
        ("nv_gpu_power_limit", UUID0): 700.0,
        ("nv_gpu_power_limit", UUID1): 700.0,
        # energy used since the server's first sample, not the driver's running total
        ("nv_energy_consumption", UUID0): 0.0,
        ("nv_energy_consumption", UUID1): 0.0,
    }
    # Triton's text: integral values without ".0", the GPU families between the pinned
    # pool's gauges and the CPU's, in the order core's metrics.cc registers them
    assert f'nv_gpu_memory_total_bytes{{gpu_uuid="{UUID0}"}} 85899345920\n' in text
    order = [line.split()[2] for line in text.splitlines() if line.startswith("# TYPE")]
    gpu_order = [name for name in order if name in GPU_FAMILIES]
    assert gpu_order == list(GPU_FAMILIES)
    assert (
        order.index("nv_pinned_memory_pool_used_bytes")
        < order.index("nv_gpu_utilization")
        < order.index("nv_energy_consumption")
        < order.index("nv_cpu_utilization")
    )


def test_figures_are_sampled_once_per_metrics_interval(repo):
    clock = ManualClock()
    devices = FakeDevices(1, total_bytes=16 * GIB, used_bytes=GIB)
    devices.set_sample(0, utilization=0.1, power_watts=50.0, energy_joules=1000.0)
    with server(repo, devices, clock=clock, metrics_interval=500) as running:
        first = gpu_values(running.metrics())
        assert devices.sample_reads == [1]
        devices.set_sample(0, utilization=0.9, power_watts=300.0, energy_joules=1012.5)
        devices.set_used(0, 4 * GIB)
        clock.advance(499_000_000)  # within the interval: the same figures, not re-read
        assert gpu_values(running.metrics()) == first
        assert devices.sample_reads == [1]
        clock.advance(1_000_000)
        second = gpu_values(running.metrics())
        devices.set_sample(0, energy_joules=1020.0)
        clock.advance(500_000_000)
        third = gpu_values(running.metrics())
    assert (first["nv_gpu_utilization", UUID0], second["nv_gpu_utilization", UUID0]) == (0.1, 0.9)
    assert second["nv_gpu_power_usage", UUID0] == 300.0
    assert second["nv_gpu_memory_used_bytes", UUID0] == 4 * GIB
    # the counter grows by what the driver's total grew by: 12.5 J, then 7.5 J more
    assert [sample["nv_energy_consumption", UUID0] for sample in (first, second, third)] == [
        0.0,
        12.5,
        20.0,
    ]
    assert devices.sample_reads == [3]


def test_figures_the_driver_cannot_give_read_zero_and_energy_stands_still(repo):
    clock = ManualClock()
    devices = FakeDevices(1)
    devices.set_sample(
        0, utilization=0.5, power_watts=80.0, power_limit_watts=700.0, energy_joules=100.0
    )
    with server(repo, devices, clock=clock, metrics_interval=1000) as running:
        running.metrics()
        devices.set_sample(
            0, utilization=None, power_watts=None, power_limit_watts=None, energy_joules=None
        )
        clock.advance(1_000_000_000)
        values = gpu_values(running.metrics())
        devices.set_sample(0, energy_joules=104.0)  # the driver says again
        clock.advance(1_000_000_000)
        later = gpu_values(running.metrics())
    assert values == {
        ("nv_gpu_utilization", UUID0): 0.0,
        ("nv_gpu_memory_total_bytes", UUID0): 16 * GIB,
        ("nv_gpu_memory_used_bytes", UUID0): 0.0,
        ("nv_gpu_power_usage", UUID0): 0.0,
        ("nv_gpu_power_limit", UUID0): 0.0,
        ("nv_energy_consumption", UUID0): 0.0,
    }
    assert later["nv_energy_consumption", UUID0] == 4.0


class FlakyDevices(FakeDevices):
    """FakeDevices whose GPU 1 cannot be read while ``broken``."""

    broken = True

    def sample(self, gpu: int) -> GpuSample:
        if gpu == 1 and self.broken:
            raise UnavailableError("the driver is busy")
        return super().sample(gpu)


def test_a_gpu_that_cannot_be_read_keeps_its_figures_or_is_left_out(repo, caplog):
    clock = ManualClock()
    devices = FlakyDevices(2)
    devices.set_sample(0, power_watts=60.0)
    with server(repo, devices, clock=clock) as running:
        with caplog.at_level(logging.WARNING, "infercore.observability.metrics"):
            first = gpu_values(running.metrics())
        assert {uuid for _, uuid in first} == {UUID0}  # GPU 1 never read yet: left out
        assert "Unable to get field values for GPU ID 1: the driver is busy" in caplog.text
        devices.broken = False
        devices.set_sample(1, power_watts=70.0)
        clock.advance(2_000_000_000)
        second = gpu_values(running.metrics())
        assert second["nv_gpu_power_usage", UUID1] == 70.0
        devices.broken = True
        devices.set_sample(1, power_watts=90.0)
        clock.advance(2_000_000_000)
        third = gpu_values(running.metrics())
    assert third["nv_gpu_power_usage", UUID1] == 70.0  # its previous figures stand
    assert third["nv_gpu_power_usage", UUID0] == 60.0


@pytest.mark.parametrize(
    ("devices", "options"),
    [
        (FakeDevices(0), {}),  # a host without GPUs: Triton 2.51 writes no GPU family
        (FakeDevices(2), {"gpu_metrics": False}),  # --allow-gpu-metrics=false
        (FakeDevices(2), {"metrics": False}),
    ],
    ids=["no_gpus", "gpu_metrics_off", "metrics_off"],
)
def test_gpu_families_are_absent_without_gpus_or_when_turned_off(repo, devices, options):
    with server(repo, devices, **options) as running:
        text = running.metrics()
    assert not [name for name in GPU_FAMILIES if name in text]
    assert devices.sample_reads == [0] * devices.gpu_count()  # and no GPU is asked
    if not options:
        assert "nv_cpu_utilization" in text  # the rest is there


def test_the_gpus_are_counted_at_the_first_scrape_not_before():
    class CountingDevices(FakeDevices):
        counted = 0

        def gpu_count(self) -> int:
            self.counted += 1
            return super().gpu_count()

    devices = CountingDevices(1)
    metrics = ServerMetrics(MetricsSettings(cpu=False), list, devices=devices)
    assert devices.counted == 0
    assert ("nv_gpu_utilization", UUID0) in gpu_values(metrics.render())
    metrics.render()
    assert devices.counted == 1
    assert devices.memory(0) == DeviceMemory(0, 16 * GIB)
