"""One API, four places: in-process ``infer`` vs RemoteServer (HTTP, gRPC) vs real Triton.

    python benchmarks/api_modes.py [--seconds 4] [--rounds 2] [--concurrency 1,16]
                                   [--bench DIR] [--write docs/performance.md]

The same application code (``model.infer(inputs=...).result()`` in a loop, one client
thread per concurrent request) runs against:

- ``in-process``: ``infercore.Server`` in this process;
- ``RemoteServer http`` / ``RemoteServer grpc``: ``infercore serve`` in another process;
- ``RemoteServer grpc -> Triton``: real Triton 2.51 from the bench harness (``--bench``,
  see its README), started and stopped by this script;
- ``tritonclient grpc -> Triton``: Triton's own synchronous gRPC client, one per thread,
  for reference (Triton's throughput without RemoteServer's client costs).

All serve the harness's ``add_sub`` model (Python backend, FP32 [16], dynamic batching,
one instance), copied to a scratch repository. Each cell runs ``--seconds`` after a short
warm-up; modes take turns within each round (rotating order) and the figure is the
median over rounds. Every mode's first answer is checked against numpy. The goal is
in-process at least 5x real Triton's gRPC throughput (the better of the two Triton
clients). ``--write`` puts the table and this command between ``<!-- api-modes:begin
-->`` and ``<!-- api-modes:end -->`` in the given file. The VM is shared: run it when
``uptime`` shows a load under 1.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import shlex
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from perf_compare import DEFAULT_BENCH, prepare_bench
from perf_doc import write_section

import infercore

MARK_BEGIN = "<!-- api-modes:begin -->"
MARK_END = "<!-- api-modes:end -->"
MODEL = "add_sub"
WARMUP_SECONDS = 0.5

INFERCORE_MODES = ("in-process", "RemoteServer http", "RemoteServer grpc")
TRITON_MODES = ("RemoteServer grpc -> Triton", "tritonclient grpc -> Triton")

# One request: (a, b) -> OUTPUT0; what each client thread calls in a loop.
Call = Callable[[np.ndarray, np.ndarray], np.ndarray]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_ready(port: int, process: subprocess.Popen[bytes], what: str, log: Path,
               timeout: float = 120.0) -> None:
    """Poll ``/v2/health/ready`` (a separate process: nothing else to wait on)."""
    import http.client

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"{what} exited; see {log}")
        try:
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=1)
            connection.request("GET", f"/v2/models/{MODEL}/ready")
            if connection.getresponse().status == 200:
                return
        except OSError:
            pass
        time.sleep(0.2)
    raise SystemExit(f"{what} not ready after {timeout:.0f} s; see {log}")


class Process:
    """A server process in its own session, stopped by its process group."""

    def __init__(self, what: str, argv: list[str], http_port: int, log: Path) -> None:
        self.what = what
        self.log = log
        with open(log, "wb") as out:
            self.process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT,
                                            start_new_session=True)
        wait_ready(http_port, self.process, what, log)

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()


def start_infercore(repo: Path, scratch: Path) -> tuple[Process, int, int]:
    http_port, grpc_port = free_port(), free_port()
    argv = [sys.executable, "-m", "infercore", "serve", "--model-repository", str(repo),
            "--http-address", "127.0.0.1", "--http-port", str(http_port),
            "--grpc-address", "127.0.0.1", "--grpc-port", str(grpc_port),
            "--allow-metrics=false", "--log-info=false", "--exit-timeout-secs", "5"]
    return Process("infercore serve", argv, http_port, scratch / "infercore.log"), \
        http_port, grpc_port


def start_triton(bench: Path, repo: Path, scratch: Path) -> tuple[Process, int, int]:
    """Real Triton from the harness's venv, with the harness's own settings."""
    http_port, grpc_port, metrics_port = free_port(), free_port(), free_port()
    command = (
        f"source {shlex.quote(str(bench / 'env.sh'))} && exec \"$TRITON_BIN\" "
        f"--model-repository {shlex.quote(str(repo))} --backend-directory \"$TRITON_BACKENDS\" "
        f"--http-address 127.0.0.1 --grpc-address 127.0.0.1 --metrics-address 127.0.0.1 "
        f"--http-port {http_port} --grpc-port {grpc_port} --metrics-port {metrics_port} "
        "--exit-timeout-secs 5 --log-info false")
    return Process("tritonserver", ["bash", "-c", command], http_port,
                   scratch / "triton.log"), http_port, grpc_port


def api_call(server: Any) -> Call:
    model = server.model(MODEL)

    def call(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return model.infer(inputs={"INPUT0": a, "INPUT1": b}).result().outputs[
            "OUTPUT0"].to_numpy()

    return call


def tritonclient_call(url: str) -> Callable[[], Call]:
    """A factory: each client thread gets its own tritonclient (they are not shared)."""
    import tritonclient.grpc as grpcclient

    def make() -> Call:
        client = grpcclient.InferenceServerClient(url)

        def call(a: np.ndarray, b: np.ndarray) -> np.ndarray:
            inputs = [grpcclient.InferInput("INPUT0", list(a.shape), "FP32"),
                      grpcclient.InferInput("INPUT1", list(b.shape), "FP32")]
            inputs[0].set_data_from_numpy(a)
            inputs[1].set_data_from_numpy(b)
            return client.infer(MODEL, inputs).as_numpy("OUTPUT0")

        return call

    return make


def throughput(make_call: Callable[[], Call], concurrency: int, seconds: float,
               a: np.ndarray, b: np.ndarray) -> float:
    """Requests per second of ``concurrency`` threads calling in a loop for ``seconds``."""
    calls = [make_call() for _ in range(concurrency)]
    counts = [0] * concurrency
    measuring = threading.Event()
    stop = threading.Event()
    failures: list[BaseException] = []

    def client(index: int) -> None:
        call = calls[index]
        try:
            while not stop.is_set():
                call(a, b)
                if measuring.is_set():
                    counts[index] += 1
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            failures.append(exc)
            stop.set()

    threads = [threading.Thread(target=client, args=(i,), daemon=True)
               for i in range(concurrency)]
    for thread in threads:
        thread.start()
    time.sleep(WARMUP_SECONDS)
    measuring.set()
    started = time.perf_counter()
    time.sleep(seconds)
    stop.set()
    elapsed = time.perf_counter() - started
    for thread in threads:
        thread.join()
    if failures:
        raise failures[0]
    return sum(counts) / elapsed


def check(name: str, make_call: Callable[[], Call], a: np.ndarray, b: np.ndarray) -> None:
    got = make_call()(a, b)
    if not np.array_equal(got, a + b):
        raise SystemExit(f"{name}: wrong answer {got} for {a} + {b}")


def run(args: argparse.Namespace) -> dict[str, Any]:
    concurrency = [int(c) for c in args.concurrency.split(",")]
    rng = np.random.default_rng(0)
    a = rng.random((1, 16), dtype=np.float32)
    b = rng.random((1, 16), dtype=np.float32)
    bench = prepare_bench(Path(args.bench)) if not args.no_triton else None
    scratch = Path(tempfile.mkdtemp(prefix="infercore-api-modes-"))
    repo = scratch / "models"
    source = Path(args.bench) / "models" / "triton" / MODEL
    shutil.copytree(source, repo / MODEL, ignore=shutil.ignore_patterns("__pycache__"))
    started: list[Process] = []
    remotes: list[infercore.RemoteServer] = []
    server = infercore.Server(model_repository=repo, log_info=False).start()
    try:
        ours, http_port, grpc_port = start_infercore(repo, scratch)
        started.append(ours)
        http = infercore.RemoteServer(f"127.0.0.1:{http_port}", "http").start()
        grpc = infercore.RemoteServer(f"127.0.0.1:{grpc_port}", "grpc").start()
        remotes += [http, grpc]
        makers: dict[str, Callable[[], Call]] = {
            "in-process": lambda: api_call(server),
            "RemoteServer http": lambda: api_call(http),
            "RemoteServer grpc": lambda: api_call(grpc),
        }
        if bench is not None:
            triton, _, triton_grpc = start_triton(bench, repo, scratch)
            started.append(triton)
            remote_triton = infercore.RemoteServer(f"127.0.0.1:{triton_grpc}", "grpc").start()
            remotes.append(remote_triton)
            makers["RemoteServer grpc -> Triton"] = lambda: api_call(remote_triton)
            makers["tritonclient grpc -> Triton"] = tritonclient_call(
                f"127.0.0.1:{triton_grpc}")
        for name, make in makers.items():
            check(name, make, a, b)
        figures: dict[str, dict[int, list[float]]] = {
            name: {c: [] for c in concurrency} for name in makers}
        names = list(makers)
        for round_index in range(args.rounds):
            shift = round_index % len(names)
            for name in names[shift:] + names[:shift]:
                for c in concurrency:
                    rate = throughput(makers[name], c, args.seconds, a, b)
                    figures[name][c].append(rate)
                    print(f"round {round_index + 1} {name:30s} c={c:<3d} {rate:10,.0f} req/s",
                          flush=True)
    finally:
        for remote in remotes:
            remote.stop()
        server.stop()
        for process in started:
            process.stop()
    return {
        "concurrency": concurrency,
        "median": {name: {c: statistics.median(v) for c, v in per.items()}
                   for name, per in figures.items()},
        "load": os.getloadavg()[0],
    }


def render(results: dict[str, Any], args: argparse.Namespace, command: str,
           load_before: float) -> str:
    concurrency: list[int] = results["concurrency"]
    median: dict[str, dict[int, float]] = results["median"]
    triton = [name for name in TRITON_MODES if name in median]
    lines = [
        MARK_BEGIN,
        "## One API, embedded or remote (add_sub, issue 11)",
        "",
        f"Command: `{command}`  ",
        f"Run: {datetime.date.today()}, Python {platform.python_version()}, numpy "
        f"{np.__version__}, {args.seconds:g} s per cell x {args.rounds} rounds (modes take "
        f"turns), median; load average {load_before:.2f} before, {results['load']:.2f} "
        "after.",
        "",
        "| mode | " + " | ".join(f"c={c} req/s" for c in concurrency) + " |",
        "|---|" + "---:|" * len(concurrency),
    ]
    for name, per in median.items():
        lines.append(f"| {name} | " + " | ".join(f"{per[c]:,.0f}" for c in concurrency) + " |")
    if triton:
        lines += ["", "In-process over real Triton's gRPC (the better Triton client), goal "
                  "5x:", ""]
        for c in concurrency:
            best = max(median[name][c] for name in triton)
            ratio = median["in-process"][c] / best
            verdict = "met" if ratio >= 5 else "not met"
            lines.append(f"- c={c}: **{ratio:.1f}x** ({verdict})")
    lines += [
        "",
        "Each mode runs the same code: `model.infer(inputs=...).result()` in a loop on "
        "one thread per concurrent request (the tritonclient row: `client.infer` with "
        "one synchronous gRPC client per thread). In-process runs the request on the "
        "caller's thread when the instance is idle; remote calls cross to the "
        "RemoteServer's event-loop thread, the network and the server's loop. The model "
        "is the harness's `add_sub` (FP32 [16], Python backend, dynamic batching, one "
        "instance) in every server. The client threads share the VM's 2 cores with the "
        "server processes, as perf_analyzer does in the harness's figures.",
        MARK_END,
    ]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--concurrency", default="1,16")
    parser.add_argument("--bench", default=str(DEFAULT_BENCH),
                        help="the bench harness (real Triton); see its README")
    parser.add_argument("--no-triton", action="store_true",
                        help="leave real Triton out (a smoke run without the harness)")
    parser.add_argument("--write", help="the markdown file to write the section into")
    args = parser.parse_args()
    load_before = os.getloadavg()[0]
    print(f"load average {load_before:.2f}", flush=True)
    results = run(args)
    command = "python benchmarks/api_modes.py " + " ".join(
        shlex.quote(arg) for arg in sys.argv[1:])
    block = render(results, args, command.strip(), load_before)
    print(block)
    if args.write:
        write_section(Path(args.write), MARK_BEGIN, MARK_END, block)
    return 0


if __name__ == "__main__":
    sys.exit(main())
