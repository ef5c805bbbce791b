"""The CPU an isolated worker spends per request, in process, without sockets or wake-ups.

    python benchmarks/worker_execute.py [--batch 1,8,32] [--requests 20000] [--write F]

A process-isolated instance's worker turns each EXECUTE frame into pb_utils requests,
runs the model's ``execute``, and copies the responses' outputs into its output ring
(backends/python/worker/runtime.py). This drives that code, ``WorkerRuntime._execute``,
directly in this process: the inputs staged once in an input arena, the frames' sends
discarded, the ring's chunks marked consumed after each execution as the server would.
The model is add_sub answering each request separately (as the bench harness's model
does), so what is measured is the serving code around a tiny ``execute``.

What it leaves out is what a real worker also pays per execution: one ``recv`` of the
payload, one ``send`` of DONE, and being woken (``wakeup_latency.py``). Under
perf_analyzer at c16 the worker's thread CPU per request is about twice this figure.

Why it matters: with one instance, the worker's time sits on the critical path of every
batch (docs/process_isolation.md, "Performance"). To compare two versions, run it with
each one's ``src`` on ``PYTHONPATH``, alternating.

``--write`` puts the figures and this command between ``<!-- worker-execute:begin -->``
and ``<!-- worker-execute:end -->`` in the given file.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import shlex
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from google.protobuf import text_format
from isolation import ADD_SUB_CONFIG, ADD_SUB_PY
from perf_doc import publish
from tritonclient.grpc import model_config_pb2

from infercore.backends.base import InstanceInfo, ModelContext
from infercore.backends.python.backend import PythonBackend
from infercore.backends.python.ipc.arena import (
    ArenaView,
    InputArena,
    OutputRing,
    create_memory_file,
)
from infercore.backends.python.ipc.protocol import (
    EXECUTE,
    FrameReader,
    read_outputs,
    stage_inputs,
)
from infercore.backends.python.worker.runtime import WorkerRuntime, _Outbox
from infercore.tensor import DataType, Tensor
from infercore.testing import RepositoryBuilder

MARK_BEGIN = "<!-- worker-execute:begin -->"
MARK_END = "<!-- worker-execute:end -->"
RING_SIZE = 1 << 22

# add_sub answering each request separately, as isolation.py's in-process runs use it
CONFIG = ADD_SUB_CONFIG.format(name="add_sub", extra="")
MODEL_PY = ADD_SUB_PY


class _DiscardingSocket:
    """Stands for the worker's channels: what the worker sends goes nowhere (the last
    write is kept, for a check)."""

    last: bytes = b""

    def sendall(self, data: bytes) -> None:
        self.last = data


class WorkerUnderTest:
    """A worker runtime over add_sub, its channels replaced, its shared memory real."""

    def __init__(self, repository: Path) -> None:
        config = model_config_pb2.ModelConfig()
        text_format.Parse((repository / "add_sub" / "config.pbtxt").read_text(), config)
        context = ModelContext(name="add_sub", version=1, config=config,
                               model_dir=repository / "add_sub",
                               version_dir=repository / "add_sub" / "1",
                               repository=repository)
        self._model = PythonBackend().create_in_thread_model(context)
        instance = self._model.create_instance(
            InstanceInfo("add_sub_0", "add_sub", 0, "KIND_CPU", 0))
        self._arena = InputArena("bench-in", 1 << 20, 1 << 20)
        ring_fd = create_memory_file("bench-out", RING_SIZE)
        self._ring = OutputRing(os.dup(ring_fd), RING_SIZE, RING_SIZE)
        self._ring_view = ArenaView(ring_fd, RING_SIZE)
        # Set up as WorkerRuntime.run does after INIT, minus the sockets and threads.
        self.answers = _DiscardingSocket()
        runtime = WorkerRuntime.__new__(WorkerRuntime)
        runtime._inputs = ArenaView(os.dup(self._arena.fd), self._arena.size)
        runtime._outbox = _Outbox(self.answers, _DiscardingSocket(),  # type: ignore[arg-type]
                                  self._ring, False, "add_sub")
        runtime._model_name = "add_sub"
        runtime._decoupled = False
        runtime._iterative = False
        runtime._levels = ()
        runtime._instance = instance
        self._runtime = runtime

    def frame(self, batch: int) -> tuple:
        """An EXECUTE frame of ``batch`` requests, each FP32 [1,16] x 2, staged once."""
        ones = np.ones((1, 16), np.float32)
        records = []
        for slot in range(1, batch + 1):
            block, descriptors = stage_inputs(
                self._arena, {"INPUT0": Tensor(DataType.FP32, ones),
                              "INPUT1": Tensor(DataType.FP32, ones * 2)}, False)
            records.append((slot, block, "", 0, False, False, 0, {}, None, 1, descriptors))
        return (EXECUTE, 1, (), self._arena.size, tuple(records))

    def run(self, frame: tuple, executions: int) -> None:
        execute = self._runtime._execute
        consumed = self._ring_view.mark_consumed
        ring = self._ring
        for _ in range(executions):
            execute(frame)
            consumed(ring._sequence)  # as the server does once it copied them out

    def last_answer(self) -> list[dict[str, np.ndarray]]:
        """The outputs of each response in the last DONE the worker sent."""
        frames = FrameReader._parse(bytearray(self.answers.last))
        (_, _, responses, _), = frames
        return [{name: tensor.to_numpy() for name, tensor in
                 read_outputs(self._ring_view, response[6], response[5]).items()}
                for response in responses]

    def close(self) -> None:
        self._model.finalize()
        self._arena.close()
        self._ring.close()
        self._ring_view.close()


def per_request_us(worker: WorkerUnderTest, batch: int, requests: int, rounds: int) -> float:
    """The best of ``rounds`` timings of ``requests`` requests in batches of ``batch``."""
    frame = worker.frame(batch)
    executions = max(1, requests // batch)
    worker.run(frame, max(1, 2000 // batch))  # warm up
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        worker.run(frame, executions)
        best = min(best, (time.perf_counter() - start) / (executions * batch))
    return best * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batch", default="1,8,32", help="batch sizes")
    parser.add_argument("--requests", type=int, default=20000, help="per timing")
    parser.add_argument("--rounds", type=int, default=7, help="timings per batch size")
    parser.add_argument("--write", type=Path, help="the performance page to update")
    args = parser.parse_args()
    batches = [int(b) for b in args.batch.split(",")]

    with tempfile.TemporaryDirectory() as tmp:
        repository = RepositoryBuilder(Path(tmp) / "models")
        repository.add_model("add_sub", config=CONFIG, model_py=MODEL_PY)
        worker = WorkerUnderTest(repository.path)
        try:
            figures = {b: per_request_us(worker, b, args.requests, args.rounds)
                       for b in batches}
        finally:
            worker.close()

    command = "python benchmarks/worker_execute.py " + shlex.join(sys.argv[1:])
    rows = "\n".join(f"| {b} | {us:.2f} |" for b, us in figures.items())
    section = (
        "## Isolated worker: CPU per request inside the worker\n\n"
        f"Command: `{command.strip()}`  \n"
        f"Run: {datetime.date.today()}, Python {platform.python_version()}, "
        f"{os.cpu_count()} cores, best of {args.rounds} timings of {args.requests} "
        "requests.\n\n"
        "The worker's side of add_sub (FP32 [1,16] x 2, one response per request), "
        "driven in process: no sockets, no wake-ups (see the script's docstring).\n\n"
        "| batch | µs per request |\n|---:|---:|\n" + rows
    )
    publish(section, args.write, MARK_BEGIN, MARK_END)


if __name__ == "__main__":
    main()
