"""Process-isolated Python instances against in-thread ones, in one process, in one run.

    python benchmarks/isolation.py [--seconds 4] [--rounds 3] [--write docs/performance.md]

(b) throughput: a CPU-heavy pure-Python model (a loop of ``--loop`` iterations per request,
    holding the GIL all along) with 2 instances, in-thread vs isolated (each instance in
    its own worker process), driven by 4 in-process client threads (``infer().result()``)
    for ``--seconds`` per round; modes alternate within each round, the figure is the
    median over rounds. On 2 cores the in-thread instances share one GIL; the isolated
    ones run on both cores. Target: isolated >= 1.7x in-thread.
Start-up: the time to load a 1-instance model (the worker's start + ``initialize``), per
    start method; the fork server's first use includes starting the fork server itself.
Overhead: the median latency of one small request (add_sub, FP32 [1,16], sync, one client),
    in-thread vs isolated: what crossing to a worker and back costs.
(c) with ``--bench DIR`` (a set-up copy of the shared bench harness, see its README):
    perf_analyzer over HTTP on the harness's add_sub model (1 instance, dynamic batching),
    real Triton's Python backend (process-isolated stubs) against ``infercore serve`` with
    the same model made isolated (the config plus ``infercore.execution_mode: process``),
    and ``infercore serve`` in-thread for reference. Target: isolated >= Triton.

``--write`` puts the figures and this command between ``<!-- isolation:begin -->`` and
``<!-- isolation:end -->`` in the given file (replaced if present, appended otherwise).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
from perf_doc import publish

from infercore import Server
from infercore.testing import RepositoryBuilder

MARK_BEGIN = "<!-- isolation:begin -->"
MARK_END = "<!-- isolation:end -->"
CLIENTS = 4

PROCESS = 'parameters: { key: "infercore.execution_mode" value: { string_value: "process" } }'

CPU_CONFIG = """
name: "{name}"
backend: "python"
input [ {{ name: "N", data_type: TYPE_INT64, dims: [ 1 ] }} ]
output [ {{ name: "OUT", data_type: TYPE_INT64, dims: [ 1 ] }} ]
instance_group [ {{ count: {count}, kind: KIND_CPU }} ]
{extra}
"""

CPU_PY = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            n = int(pb_utils.get_input_tensor_by_name(request, "N").as_numpy()[0])
            total = 0
            for i in range(n):  # pure Python: holds the GIL throughout
                total += i * i % 7
            out = pb_utils.Tensor("OUT", np.array([total], dtype=np.int64))
            responses.append(pb_utils.InferenceResponse([out]))
        return responses
"""

ADD_SUB_CONFIG = """
name: "{name}"
backend: "python"
input [
  {{ name: "INPUT0", data_type: TYPE_FP32, dims: [ 1, 16 ] }},
  {{ name: "INPUT1", data_type: TYPE_FP32, dims: [ 1, 16 ] }}
]
output [
  {{ name: "OUTPUT0", data_type: TYPE_FP32, dims: [ 1, 16 ] }},
  {{ name: "OUTPUT1", data_type: TYPE_FP32, dims: [ 1, 16 ] }}
]
instance_group [ {{ count: 1, kind: KIND_CPU }} ]
{extra}
"""

ADD_SUB_PY = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            a = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            b = pb_utils.get_input_tensor_by_name(request, "INPUT1").as_numpy()
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("OUTPUT0", a + b), pb_utils.Tensor("OUTPUT1", a - b)]))
        return responses
"""


def _process(method: str | None = None) -> str:
    if method is None:
        return PROCESS
    return (PROCESS + '\nparameters: { key: "infercore.worker_start_method" '
            f'value: {{ string_value: "{method}" }} }}')


def build_repository(root: Path) -> RepositoryBuilder:
    repo = RepositoryBuilder(root)
    repo.add_model("cpu_thread", config=CPU_CONFIG.format(name="cpu_thread", count=2, extra=""),
                   model_py=CPU_PY)
    repo.add_model("cpu_process",
                   config=CPU_CONFIG.format(name="cpu_process", count=2, extra=_process()),
                   model_py=CPU_PY)
    repo.add_model("add_sub_thread", config=ADD_SUB_CONFIG.format(name="add_sub_thread",
                                                                  extra=""), model_py=ADD_SUB_PY)
    repo.add_model("add_sub_process", config=ADD_SUB_CONFIG.format(name="add_sub_process",
                                                                   extra=_process()),
                   model_py=ADD_SUB_PY)
    for method in ("forkserver", "spawn"):
        name = f"start_{method}"
        repo.add_model(name, config=ADD_SUB_CONFIG.format(name=name, extra=_process(method)),
                       model_py=ADD_SUB_PY)
    repo.add_model("start_thread", config=ADD_SUB_CONFIG.format(name="start_thread", extra=""),
                   model_py=ADD_SUB_PY)
    return repo


def throughput(server: Server, model: str, loop: int, seconds: float, *, warm: int = 1
               ) -> float:
    """Requests per second of CLIENTS threads, each sending one request at a time, to a
    CPU_PY model, after ``warm`` requests."""
    handle = server.model(model)
    inputs = {"N": np.array([loop], dtype=np.int64)}
    for _ in range(warm):
        handle.infer(inputs).result()
    stop = time.monotonic() + seconds
    counts = [0] * CLIENTS
    start_line = threading.Barrier(CLIENTS + 1)

    def client(index: int) -> None:
        start_line.wait()
        while time.monotonic() < stop:
            handle.infer(inputs).result()
            counts[index] += 1

    threads = [threading.Thread(target=client, args=(i,)) for i in range(CLIENTS)]
    for thread in threads:
        thread.start()
    begin = time.monotonic()
    start_line.wait()
    for thread in threads:
        thread.join()
    return sum(counts) / (time.monotonic() - begin)


def load_seconds(server: Server, model: str, times: int) -> list[float]:
    samples = []
    for _ in range(times):
        begin = time.perf_counter()
        server.load(model)
        samples.append(time.perf_counter() - begin)
        server.unload(model)
    return samples


def latency_us(server: Server, model: str, inputs: dict[str, np.ndarray], calls: int
               ) -> float:
    """Median µs of one sync request with ``inputs``, after up to 200 warm-up calls."""
    handle = server.model(model)
    for _ in range(min(200, calls)):
        handle.infer(inputs).result()
    samples = []
    clock = time.perf_counter_ns
    for _ in range(calls):
        begin = clock()
        handle.infer(inputs).result()
        samples.append(clock() - begin)
    return statistics.median(samples) / 1000


def run(args: argparse.Namespace) -> dict[str, object]:
    with tempfile.TemporaryDirectory(prefix="isolation-bench-") as scratch:
        repo = build_repository(Path(scratch) / "models")
        with Server(model_repository=repo.path, model_control_mode="explicit",
                    log_info=False) as server:
            # The fork server's first use: loading the first isolated model starts it.
            begin = time.perf_counter()
            server.load("start_forkserver")
            first = time.perf_counter() - begin
            server.unload("start_forkserver")
            startup = {
                "forkserver (first use)": [first],
                "forkserver": load_seconds(server, "start_forkserver", args.loads),
                "spawn": load_seconds(server, "start_spawn", args.loads),
                "in-thread (reference)": load_seconds(server, "start_thread", args.loads),
            }
            for name in ("cpu_thread", "cpu_process", "add_sub_thread", "add_sub_process"):
                server.load(name)
            rounds: dict[str, list[float]] = {"cpu_thread": [], "cpu_process": []}
            for index in range(args.rounds):
                order = ["cpu_thread", "cpu_process"]
                if index % 2:
                    order.reverse()  # drift hits both modes alike
                for name in order:
                    rounds[name].append(throughput(server, name, args.loop, args.seconds))
            ones = np.ones((1, 16), np.float32)
            pair = {"INPUT0": ones, "INPUT1": ones}
            latency = {"in-thread": latency_us(server, "add_sub_thread", pair, args.calls),
                       "isolated": latency_us(server, "add_sub_process", pair, args.calls)}
    return {"startup": startup, "rounds": rounds, "latency": latency}


def serve_command(repo: str, *flags: str) -> str:
    """The harness ``--server`` command line for ``infercore serve`` on ``repo`` (``{repo}``:
    the harness's own repository), on the harness's ports."""
    return shlex.join([sys.executable, "-m", "infercore", "serve", "--http-address",
                       "{host}", "--http-port", "{http_port}", "--grpc-port", "{grpc_port}",
                       "--metrics-port", "{metrics_port}", "--log-info", "false", *flags,
                       "--model-repository", repo])


def isolated_add_sub(bench: Path, root: Path) -> Path:
    """A repository at ``root`` with the harness's add_sub made process-isolated."""
    shutil.copytree(bench / "models" / "triton" / "add_sub", root / "add_sub")
    config = root / "add_sub" / "config.pbtxt"
    config.chmod(0o644)
    config.write_text(config.read_text() + "\n" + PROCESS + "\n")
    return root


def harness_summary(bench: Path, servers: list[tuple[str, str]], concurrency: str,
                    rounds: int, scratch: Path, *, triton: bool = True
                    ) -> list[dict[str, object]]:
    """perf_analyzer over HTTP on the harness's add_sub against each ``(name, command)``
    server (and real Triton), servers alternating per round: the harness's summary rows."""
    python = bench / ".venv" / "bin" / "python"
    if not python.exists():
        raise SystemExit(f"{bench} is not set up: run its setup.sh first (see its README)")
    out = scratch / "results.json"
    command = [str(python), str(bench / "bench.py"), "--servers", "triton" if triton else ""]
    for name, serve in servers:
        command += ["--server", f"{name}[http]={serve}"]
    command += ["--models", "add_sub", "--protocols", "http", "--concurrency", concurrency,
                "--rounds", str(rounds), "--out", str(out), "--workdir", str(scratch / "work"),
                # other people's benchmarks share this machine: wait for them before each cell
                "--quiet-wait", "120"]
    subprocess.run(command, check=True)
    summary: list[dict[str, object]] = json.loads(out.read_text())["summary"]
    return summary


def run_perf_analyzer(args: argparse.Namespace) -> list[dict[str, object]]:
    """(c): the bench harness on add_sub over HTTP; its summary rows."""
    bench = Path(args.bench).resolve()
    with tempfile.TemporaryDirectory(prefix="isolation-pa-") as scratch:
        isolated_repo = isolated_add_sub(bench, Path(scratch) / "models")
        servers = [("infercore-isolated", serve_command(str(isolated_repo))),
                   ("infercore-thread", serve_command("{repo}"))]
        return harness_summary(bench, servers, args.concurrency, args.pa_rounds,
                               Path(scratch))


def render_perf_analyzer(summary: list[dict[str, object]], args: argparse.Namespace) -> list[str]:
    cells = {(row["server"], row["concurrency"]): row for row in summary}
    servers = ("triton", "infercore-isolated", "infercore-thread")
    lines = [
        "",
        "**(c) perf_analyzer, HTTP, add_sub** (the bench harness's model: FP32 [16], 1 "
        "instance, dynamic batching; `--bench` harness, "
        f"{args.pa_rounds} round(s), median): infer/s, p50 / p99 µs",
        "",
        "| concurrency | Triton Python backend | infercore isolated | isolated / Triton "
        "| infercore in-thread |",
        "|---:|---:|---:|---:|---:|",
    ]
    for concurrency in sorted({int(str(c)) for _, c in cells}):
        row = [cells.get((server, concurrency)) for server in servers]
        text = []
        for cell in row:
            if cell is None or not cell.get("throughput_infer_s"):
                text.append("n/a")
                continue
            mark = "" if cell.get("all_stable") else "~"
            text.append(f"{mark}{float(str(cell['throughput_infer_s'])):,.0f} "
                        f"({cell['p50_us']} / {cell['p99_us']})")
        triton, isolated = row[0], row[1]
        ratio = "n/a"
        if triton and isolated and triton.get("throughput_infer_s"):
            value = (float(str(isolated["throughput_infer_s"]))
                     / float(str(triton["throughput_infer_s"])))
            ratio = f"{value:.2f}x"
        lines.append(f"| {concurrency} | {text[0]} | {text[1]} | {ratio} | {text[2]} |")
    lines.append("")
    lines.append("`~`: perf_analyzer did not stabilise (the machine was busy).")
    return lines


def render(results: dict[str, object], args: argparse.Namespace, command: str) -> str:
    rounds: dict[str, list[float]] = results["rounds"]  # type: ignore[assignment]
    startup: dict[str, list[float]] = results["startup"]  # type: ignore[assignment]
    latency: dict[str, float] = results["latency"]  # type: ignore[assignment]
    thread = statistics.median(rounds["cpu_thread"])
    process = statistics.median(rounds["cpu_process"])
    load = ", ".join(f"{value:.2f}" for value in os.getloadavg())
    lines = [
        "## Process-isolated Python instances",
        "",
        f"Command: `{command}`  ",
        f"Run: {datetime.date.today().isoformat()}, Python {platform.python_version()}, "
        f"{os.cpu_count()} cores, load average before the run {args.load_before}, after "
        f"{load}.",
        "",
        f"**(b) CPU-heavy pure-Python model, 2 instances, {CLIENTS} in-process clients** "
        f"(a {args.loop:,}-iteration Python loop per request; {args.seconds:g} s per mode "
        f"per round, median of {args.rounds} rounds):",
        "",
        "| mode | requests/s | rounds |",
        "|---|---:|---|",
        f"| in-thread (one GIL) | {thread:.1f} | "
        + ", ".join(f"{value:.1f}" for value in rounds["cpu_thread"]) + " |",
        f"| isolated (2 worker processes) | {process:.1f} | "
        + ", ".join(f"{value:.1f}" for value in rounds["cpu_process"]) + " |",
        "",
        f"Isolated / in-thread: **{process / thread:.2f}x** (target 1.7x).",
        "",
        "**Start-up**: loading a 1-instance model (worker start + `initialize`), median of "
        f"{args.loads} loads:",
        "",
        "| start method | load (ms) |",
        "|---|---:|",
    ]
    for name, samples in startup.items():
        lines.append(f"| {name} | {statistics.median(samples) * 1000:.0f} |")
    lines += [
        "",
        "**Overhead**: median latency of one add_sub request (FP32 [1,16], sync, one "
        f"client, {args.calls} calls): in-thread {latency['in-thread']:.0f} µs, isolated "
        f"{latency['isolated']:.0f} µs (+{latency['isolated'] - latency['in-thread']:.0f} µs "
        "for the crossing to the worker and back).",
    ]
    summary = results.get("perf_analyzer")
    if summary:
        lines += render_perf_analyzer(summary, args)  # type: ignore[arg-type]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--loop", type=int, default=200_000)
    parser.add_argument("--loads", type=int, default=5)
    parser.add_argument("--calls", type=int, default=3000)
    parser.add_argument("--write", type=Path, help="the performance page to update")
    parser.add_argument("--bench", help="a set-up bench harness: also run (c)")
    parser.add_argument("--concurrency", default="1,4,16", help="(c) concurrencies")
    parser.add_argument("--pa-rounds", type=int, default=1, help="(c) rounds")
    parser.add_argument("--skip-inprocess", action="store_true",
                        help="only (c) (with --bench); nothing is written")
    args = parser.parse_args()
    args.load_before = ", ".join(f"{value:.2f}" for value in os.getloadavg())
    if args.skip_inprocess:
        if not args.bench:
            parser.error("--skip-inprocess needs --bench")
        print("\n".join(render_perf_analyzer(run_perf_analyzer(args), args)))
        return 0
    results = run(args)
    if args.bench:
        results["perf_analyzer"] = run_perf_analyzer(args)
    command = "python benchmarks/isolation.py " + " ".join(sys.argv[1:])
    section = render(results, args, command.strip())
    publish(section, args.write, MARK_BEGIN, MARK_END)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
