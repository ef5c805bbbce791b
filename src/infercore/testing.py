"""A small public test kit: build model repositories on disk from text, draw free ports,
move time by hand (ManualClock), stand in for GPUs (FakeDevices).

    repo = RepositoryBuilder(tmp_path / "models")
    repo.add_model("add_sub", config=ADD_SUB_CONFIG, model_py=ADD_SUB_PY)
    with Server(model_repository=repo.path) as server: ...

Python model sources are written exactly as Triton users write them, so tests exercise
the same code paths as real repositories.
"""

from __future__ import annotations

import dataclasses
import socket
import textwrap
import threading
from collections.abc import Iterable, Sequence
from pathlib import Path

from .devices import DeviceMemory, GpuSample
from .errors import UnavailableError

__all__ = ["FakeDevices", "ManualClock", "RepositoryBuilder", "free_ports"]


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """``count`` distinct TCP ports free on ``host`` now, for a server started next. The
    sockets stay bound until all are drawn: drawn one by one, the kernel may hand the same
    ephemeral port out twice."""
    sockets = [socket.socket(socket.AF_INET, socket.SOCK_STREAM) for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind((host, 0))
        return [int(sock.getsockname()[1]) for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


class RepositoryBuilder:
    """Writes model folders (config.pbtxt + version folders) under one repository path."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)

    def add_model(
        self,
        name: str,
        *,
        config: str | None = None,
        model_py: str | None = None,
        versions: Iterable[int] = (1,),
        files: dict[str, str | bytes] | None = None,
    ) -> Path:
        """Create ``<repo>/<name>`` with an optional config.pbtxt and model.py per version.

        ``config`` and ``model_py`` are dedented. ``files`` maps paths relative to the
        model folder to extra contents (e.g. ``{"1/helper.py": "..."}``).
        """
        model_dir = self.path / name
        model_dir.mkdir(parents=True, exist_ok=True)
        if config is not None:
            (model_dir / "config.pbtxt").write_text(textwrap.dedent(config))
        for version in versions:
            version_dir = model_dir / str(version)
            version_dir.mkdir(exist_ok=True)
            if model_py is not None:
                (version_dir / "model.py").write_text(textwrap.dedent(model_py))
        for relative, content in (files or {}).items():
            target = model_dir / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            if isinstance(content, bytes):
                target.write_bytes(content)
            else:
                target.write_text(textwrap.dedent(content))
        return model_dir


class ManualClock:
    """A Clock that moves only when ``advance`` is called (see infercore.clock).

    Threads waiting through it with a deadline wake when ``advance`` passes the deadline
    (or when their condition is notified); ``wait_for_sleepers(n)`` lets a test wait until
    ``n`` threads are parked, so tests synchronise on events, never on sleeps.
    """

    def __init__(self, start_ns: int = 1_000_000_000) -> None:
        self._now = start_ns
        self._lock = threading.Lock()
        self._parked = threading.Condition(self._lock)
        self._conditions: dict[int, threading.Condition] = {}
        self._sleepers = 0

    def now_ns(self) -> int:
        return self._now

    def wait(self, condition: threading.Condition, deadline_ns: int | None) -> None:
        if deadline_ns is not None and deadline_ns <= self._now:
            return
        with self._lock:
            self._conditions[id(condition)] = condition
            self._sleepers += 1
            self._parked.notify_all()
        try:
            condition.wait()
        finally:
            with self._lock:
                self._sleepers -= 1

    def advance(self, ns: int = 0, *, us: int = 0, ms: int = 0, seconds: float = 0) -> None:
        """Move time forward and wake every waiter so it can check its deadline."""
        with self._lock:
            self._now += ns + us * 1_000 + ms * 1_000_000 + int(seconds * 1e9)
            conditions = list(self._conditions.values())
        for condition in conditions:
            with condition:
                condition.notify_all()

    def wait_for_sleepers(self, count: int, timeout: float = 10.0) -> None:
        """Block until at least ``count`` threads are parked in ``wait``."""
        with self._lock:
            if not self._parked.wait_for(lambda: self._sleepers >= count, timeout):
                raise TimeoutError(f"{self._sleepers} threads parked, expected {count}")


class FakeDevices:
    """GPUs that are not there, for tests (``Options(devices=FakeDevices(2))``; see
    infercore.devices): ``count`` GPUs of ``total_bytes`` each, with ``used_bytes`` in use
    (one figure for all, or one per GPU). ``set_used(gpu, bytes)`` changes a GPU's figure
    at any time, from any thread; ``memory_reads`` counts the reads of each GPU.

    ``sample(gpu)`` (the GPU metrics) answers GPU ``i`` with UUID
    ``GPU-00000000-0000-0000-0000-<i, 12 digits>`` and no utilization, power or energy
    figures until ``set_sample(gpu, utilization=..., power_watts=...,
    power_limit_watts=..., energy_joules=...)`` gives some (None: the driver cannot say);
    ``sample_reads`` counts the samples of each GPU."""

    def __init__(self, count: int = 1, *, total_bytes: int = 16 << 30,
                 used_bytes: int | Sequence[int] = 0) -> None:
        used = [used_bytes] * count if isinstance(used_bytes, int) else list(used_bytes)
        if count < 0 or len(used) != count:
            raise ValueError("FakeDevices needs count >= 0 and one used figure per GPU")
        self._total = total_bytes
        self._lock = threading.Lock()
        self._memory = [DeviceMemory(u, total_bytes) for u in used]
        self.memory_reads = [0] * count
        self._samples = [GpuSample(f"GPU-00000000-0000-0000-0000-{gpu:012d}")
                         for gpu in range(count)]
        self.sample_reads = [0] * count

    def __repr__(self) -> str:
        return f"FakeDevices({len(self._memory)})"

    def gpu_count(self) -> int:
        return len(self._memory)

    def memory(self, gpu: int) -> DeviceMemory:
        with self._lock:
            if not 0 <= gpu < len(self._memory):
                raise UnavailableError(f"GPU {gpu} is not available (this server sees "
                                       f"{len(self._memory)} GPUs)")
            self.memory_reads[gpu] += 1
            return self._memory[gpu]

    def set_used(self, gpu: int, used_bytes: int) -> None:
        with self._lock:
            self._memory[gpu] = DeviceMemory(used_bytes, self._total)

    def sample(self, gpu: int) -> GpuSample:
        with self._lock:
            if not 0 <= gpu < len(self._samples):
                raise UnavailableError(f"GPU {gpu} is not available (this server sees "
                                       f"{len(self._samples)} GPUs)")
            self.sample_reads[gpu] += 1
            return self._samples[gpu]

    def set_sample(self, gpu: int, **figures: float | None) -> None:
        """Change some of GPU ``gpu``'s sampled figures (GpuSample's fields but uuid)."""
        unknown = set(figures) - {"utilization", "power_watts", "power_limit_watts",
                                  "energy_joules"}
        if unknown:
            raise ValueError(f"FakeDevices.set_sample takes no {sorted(unknown)}")
        with self._lock:
            self._samples[gpu] = dataclasses.replace(self._samples[gpu],
                                                     **figures)  # type: ignore[arg-type]
