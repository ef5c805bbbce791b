"""The GPUs a server may place instances on, behind one narrow object.

    Devices.gpu_count()     how many GPUs this process sees, numbered 0..n-1 as CUDA numbers
                            them (what ``instance_group { gpus: [...] }`` refers to)
    Devices.memory(gpu)     that GPU's memory now: used and total bytes
    Devices.sample(gpu)     what else its driver says now: UUID, utilization, power, energy
                            (``GpuSample``, for the nv_gpu_* metrics)

``NvmlDevices`` asks the driver through NVML (the ``nvidia-ml-py`` package, the optional
extra ``infercore[gpu]``, imported on first use), honouring ``CUDA_VISIBLE_DEVICES`` as
the CUDA runtime does, so ``CUDA_VISIBLE_DEVICES=1`` makes the host's second GPU this
server's GPU 0, as it does for Triton (docs/gpu.md). Without the package, a driver or a
GPU it reports no GPUs, which is Triton's behaviour on a CPU-only host. Tests hand the
server ``infercore.testing.FakeDevices`` instead (``Options.devices``).

Who uses it: the repository loader (the GPU count that normalises and validates instance
groups) and each model's load (``--model-load-gpu-limit``: the memory of the GPU an
instance was just created on), and the GPU metrics (observability/metrics.py samples
each GPU at most once per ``--metrics-interval-ms`` when /metrics is read). Threads:
model loading threads and metrics scrapes call in at once; ``NvmlDevices`` initialises
NVML once under its lock and then only reads.
"""

from __future__ import annotations

import importlib
import logging
import math
import os
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from .errors import InvalidArgumentError, UnavailableError

__all__ = [
    "DeviceMemory",
    "Devices",
    "GpuSample",
    "NvmlDevices",
    "check_load_limit",
    "visible_gpus",
]

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class DeviceMemory:
    """One GPU's memory at one moment, in bytes."""

    used_bytes: int
    total_bytes: int

    def __post_init__(self) -> None:
        if not 0 <= self.used_bytes <= self.total_bytes:
            raise InvalidArgumentError(
                f"device memory must have 0 <= used <= total bytes, got used "
                f"{self.used_bytes} of {self.total_bytes}"
            )

    def exceeds(self, fraction: float) -> bool:
        """Whether more than ``fraction`` of the memory is in use (Triton's check:
        used > total * fraction). A NaN fraction, which tritonserver takes, limits nothing."""
        if math.isnan(fraction):
            return False
        return self.used_bytes > int(self.total_bytes * fraction)


@dataclass(frozen=True, slots=True)
class GpuSample:
    """What one GPU's driver says at one moment, beside its memory (Triton's GPU metrics).

    ``uuid`` is the driver's name for the GPU (``GPU-...``, the ``gpu_uuid`` label);
    ``utilization`` is the fraction of the last sample period the GPU was busy, 0..1;
    ``power_watts`` the power drawn now and ``power_limit_watts`` the power management
    limit; ``energy_joules`` the driver's running total of energy used (since the driver
    loaded; metrics report what was used since the server started). A figure the driver
    cannot give (an older GPU, no permission) is None.
    """

    uuid: str
    utilization: float | None = None
    power_watts: float | None = None
    power_limit_watts: float | None = None
    energy_joules: float | None = None


@runtime_checkable
class Devices(Protocol):
    """What the server asks about its GPUs (module docstring)."""

    def gpu_count(self) -> int:
        """GPUs this process sees, numbered 0..n-1."""
        ...

    def memory(self, gpu: int) -> DeviceMemory:
        """GPU ``gpu``'s memory now.

        Raises:
            UnavailableError: there is no such GPU, or the driver could not say.
        """
        ...

    def sample(self, gpu: int) -> GpuSample:
        """GPU ``gpu``'s UUID, utilization, power and energy now.

        Raises:
            UnavailableError: there is no such GPU.
        """
        ...


def visible_gpus(setting: str | None, uuids: list[str]) -> list[int]:
    """The host GPUs (indices into ``uuids``, the driver's order) that ``CUDA_VISIBLE_DEVICES``
    = ``setting`` leaves visible, in the order they become GPU 0, 1, ...

    As the CUDA runtime reads it: unset means every GPU; entries are comma-separated
    indices or UUIDs (``GPU-...``, any unique prefix), and the list ends at the first
    entry that names no GPU (so ``-1`` or ``""`` hides them all). An entry naming a GPU
    already listed ends it too (this layer's choice: a GPU is never two devices).
    """
    if setting is None:
        return list(range(len(uuids)))
    chosen: list[int] = []
    for entry in (part.strip() for part in setting.split(",")):
        index = _entry_index(entry, uuids)
        if index is None or index in chosen:
            break
        chosen.append(index)
    return chosen


def _entry_index(entry: str, uuids: list[str]) -> int | None:
    if entry.isdigit():
        index = int(entry)
        return index if index < len(uuids) else None
    if entry.startswith("GPU-"):
        matches = [i for i, uuid in enumerate(uuids) if uuid.startswith(entry)]
        return matches[0] if len(matches) == 1 else None
    return None  # MIG-... and anything else: not a whole GPU this layer can address


class NvmlDevices:
    """The host's GPUs through NVML, as ``CUDA_VISIBLE_DEVICES`` shows them.

    ``environ`` is read once, when NVML is first asked (default ``os.environ``);
    ``nvml`` is the ``pynvml`` module (default: imported then), given by tests to run
    this code without a GPU. Device numbering follows NVML's order, which is CUDA's when
    ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` (CUDA's default order puts the fastest GPU first;
    on a host whose GPUs differ the two can disagree, docs/gpu.md).
    """

    def __init__(self, environ: Mapping[str, str] | None = None, nvml: Any = None) -> None:
        self._environ = os.environ if environ is None else environ
        self._nvml = nvml
        self._lock = threading.Lock()
        # set once: (NVML handle, UUID) per visible GPU
        self._handles: list[tuple[Any, str]] | None = None

    def __repr__(self) -> str:
        return "NvmlDevices()"

    def gpu_count(self) -> int:
        return len(self._visible())

    def memory(self, gpu: int) -> DeviceMemory:
        handle, _ = self._device(gpu)
        try:
            info = self._nvml.nvmlDeviceGetMemoryInfo(handle)
        except Exception as exc:  # pynvml.NVMLError and its many subclasses
            raise UnavailableError(f"failed to read the memory of GPU {gpu}: {exc}") from exc
        total = int(info.total)
        # Triton reads cudaMemGetInfo's free and total: used = total - free
        return DeviceMemory(max(0, min(total, total - int(info.free))), total)

    def sample(self, gpu: int) -> GpuSample:
        handle, uuid = self._device(gpu)
        nvml = self._nvml
        utilization = self._read(lambda: nvml.nvmlDeviceGetUtilizationRates(handle).gpu)
        power = self._read(lambda: nvml.nvmlDeviceGetPowerUsage(handle))  # milliwatts
        limit = self._read(lambda: nvml.nvmlDeviceGetPowerManagementLimit(handle))
        energy = self._read(lambda: nvml.nvmlDeviceGetTotalEnergyConsumption(handle))  # mJ
        return GpuSample(
            uuid,
            utilization=None if utilization is None else utilization / 100,
            power_watts=None if power is None else power / 1000,
            power_limit_watts=None if limit is None else limit / 1000,
            energy_joules=None if energy is None else energy / 1000,
        )

    @staticmethod
    def _read(call: Callable[[], Any]) -> float | None:
        """One NVML figure, None when this GPU or driver cannot give it."""
        try:
            return float(call())
        except Exception:  # pynvml.NVMLError_NotSupported, _NoPermission, ...
            return None

    def _device(self, gpu: int) -> tuple[Any, str]:
        handles = self._visible()
        if not 0 <= gpu < len(handles):
            raise UnavailableError(
                f"GPU {gpu} is not available (this server sees {len(handles)} GPUs)"
            )
        return handles[gpu]

    def _visible(self) -> list[tuple[Any, str]]:
        with self._lock:
            if self._handles is None:
                self._handles = self._discover()
            return self._handles

    def _discover(self) -> list[tuple[Any, str]]:
        """The handles and UUIDs of the visible GPUs; none when NVML is missing or finds
        none."""
        if self._nvml is None:
            try:
                self._nvml = importlib.import_module("pynvml")
            except ImportError:
                logger.info(
                    "no GPUs: the nvidia-ml-py package (pynvml) is not installed "
                    "(pip install 'infercore[gpu]')"
                )
                return []
        nvml = self._nvml
        try:
            nvml.nvmlInit()
            handles = [
                nvml.nvmlDeviceGetHandleByIndex(i) for i in range(int(nvml.nvmlDeviceGetCount()))
            ]
            uuids = [_text(nvml.nvmlDeviceGetUUID(handle)) for handle in handles]
        except Exception as exc:  # no driver (NVMLError_LibraryNotFound), no device ...
            logger.info("no GPUs: NVML could not be initialized: %s", exc)
            return []
        chosen = visible_gpus(self._environ.get("CUDA_VISIBLE_DEVICES"), uuids)
        for gpu, index in enumerate(chosen):
            logger.info("GPU %d: %s (host GPU %d)", gpu, uuids[index], index)
        return [(handles[index], uuids[index]) for index in chosen]


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def check_load_limit(
    devices: Devices, limits: Mapping[int, float], gpu: int, instance: str
) -> None:
    """``--model-load-gpu-limit``: refuse the instance named ``instance``, just created on
    GPU ``gpu``, when that GPU has a limit and more of its memory is in use.

    Raises:
        UnavailableError: Triton's words (VerifyModelLoadGpuFraction), naming the instance.
    """
    fraction = limits.get(gpu)
    if fraction is None:
        return  # Triton's default limit is 1.0: all of the memory, never exceeded
    if devices.memory(gpu).exceeds(fraction):
        raise UnavailableError(
            f"can not create model '{instance}': memory limit set for GPU {gpu} has "
            "exceeded, model loading is rejected."
        )
