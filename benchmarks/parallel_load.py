"""Parallel model loading: a repository of slow-loading models, loaded side by side and
one by one, by infercore and by real Triton (issue #25, item 8).

    python benchmarks/parallel_load.py                               # infercore only
    python benchmarks/parallel_load.py --bench /tmp/bench            # and Triton
    python benchmarks/parallel_load.py --bench /tmp/bench --write docs/performance.md

The repository holds ``--models`` Triton Python-backend models whose ``initialize`` sleeps
``--sleep`` seconds (the stand-in for reading weights). Each server is started on free
ports with ``--model-load-thread-count`` at its default (4: side by side) and at 1 (one
by one), and two figures are taken: the *load window*, from the first "loading:" line
of the server's log to the last "successfully loaded" line (both servers write Triton's
lines), and the time from starting the process to ``/v2/health/ready`` answering 200
(every model loaded; Triton opens its ports only then, infercore at once), which also
holds what the start-up costs besides the loads (infercore's imports). The speed-up is
one by one / side by side of the load window, per server.

``--write FILE`` puts the table, with this command, between ``<!-- parallel-load:begin
-->`` and ``<!-- parallel-load:end -->`` in FILE.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import re
import shlex
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from perf_doc import publish

MARK_BEGIN = "<!-- parallel-load:begin -->"
MARK_END = "<!-- parallel-load:end -->"

CONFIG = """
name: "{name}"
backend: "python"
max_batch_size: 0
input [ {{ name: "X", data_type: TYPE_FP32, dims: [ 1 ] }} ]
output [ {{ name: "Y", data_type: TYPE_FP32, dims: [ 1 ] }} ]
instance_group [ {{ count: 1, kind: KIND_CPU }} ]
"""

MODEL_PY = """
import time

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        time.sleep({sleep})

    def execute(self, requests):
        return [pb_utils.InferenceResponse(
            [pb_utils.Tensor("Y", pb_utils.get_input_tensor_by_name(r, "X").as_numpy())])
            for r in requests]
"""


def write_repository(root: Path, models: int, sleep: float) -> None:
    for index in range(models):
        name = f"slow_{index}"
        (root / name / "1").mkdir(parents=True)
        (root / name / "config.pbtxt").write_text(CONFIG.format(name=name))
        (root / name / "1" / "model.py").write_text(MODEL_PY.format(sleep=sleep))


# a log line's time of day, as both servers write it: I1202 15:10:46.242431 4138 ...
_STAMP = re.compile(r"^[IWE]\d{4} (\d\d):(\d\d):(\d\d\.\d+) ")


def load_window(log: Path) -> float:
    """Seconds from the first "loading:" line to the last "successfully loaded" one."""
    def seconds(line: str) -> float:
        match = _STAMP.match(line)
        if match is None:
            raise SystemExit(f"a log line without its time: {line!r} in {log}")
        hours, minutes, rest = match.groups()
        return int(hours) * 3600 + int(minutes) * 60 + float(rest)

    lines = log.read_text(errors="replace").splitlines()
    starts = [seconds(line) for line in lines if '"loading: ' in line]
    ends = [seconds(line) for line in lines if '"successfully loaded ' in line]
    if not starts or not ends:
        raise SystemExit(f"no loading / successfully loaded lines in {log}")
    return max(ends) - min(starts)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _ready(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2) as sock:
            sock.sendall(b"GET /v2/health/ready HTTP/1.1\r\nHost: x\r\n\r\n")
            return sock.recv(64).split()[1] == b"200"
    except (OSError, IndexError):
        return False


def server_command(kind: str, bench: Path | None) -> tuple[list[str], dict[str, str]]:
    env = dict(os.environ)
    if kind == "infercore":
        return [sys.executable, "-m", "infercore", "serve"], env
    assert bench is not None
    venv = bench / ".venv"
    site = subprocess.check_output(
        [str(venv / "bin" / "python"), "-c",
         "import sysconfig; print(sysconfig.get_paths()['purelib'])"], text=True).strip()
    home = Path(site) / "pytriton" / "tritonserver"
    env["LD_LIBRARY_PATH"] = ":".join([str(Path(site) / "nvidia_pytriton.libs"),
                                       str(venv / "lib" / "cuda"),
                                       env.get("LD_LIBRARY_PATH", "")])
    env["PATH"] = f"{venv / 'bin'}:{env.get('PATH', '')}"  # the stub's python
    return [str(home / "bin" / "tritonserver"),
            f"--backend-directory={home / 'backends'}"], env


def time_to_ready(kind: str, bench: Path | None, repo: Path, threads: int,
                  log: Path) -> tuple[float, float]:
    """(load window, seconds from starting the server to ready 200)."""
    argv, env = server_command(kind, bench)
    port = _free_port()
    argv += [f"--model-repository={repo}", f"--http-port={port}",
             f"--grpc-port={_free_port()}", f"--metrics-port={_free_port()}",
             f"--model-load-thread-count={threads}"]
    started = time.monotonic()
    with open(log, "wb") as out:
        process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env)
    try:
        while not _ready(port):
            if process.poll() is not None:
                raise SystemExit(f"{kind} exited with {process.returncode}: see {log}")
            if time.monotonic() - started > 300:
                raise SystemExit(f"{kind} was not ready within 300 s: see {log}")
            time.sleep(0.02)
        ready = time.monotonic() - started
    finally:
        process.terminate()
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    return load_window(log), ready


def render(results: dict[str, dict[int, list[tuple[float, float]]]],
           args: argparse.Namespace, command: str) -> str:
    load = os.getloadavg()[0]
    lines = [
        "## Parallel model loading (issue #25)",
        "",
        f"`{command}`, {datetime.date.today().isoformat()}, {platform.node()}, "
        f"{os.cpu_count()} CPUs (load average {load:.1f} at the end: the machine is "
        f"shared); {args.models} Python models whose initialize sleeps {args.sleep:g} s, "
        f"{args.rounds} round(s), medians. *load window*: from the log's first \"loading:\" "
        "line to its last \"successfully loaded\" one; *to ready*: from starting the "
        "process to `/v2/health/ready` answering 200. The speed-up is of the load window.",
        "",
        "| server | 4 load threads: load window / to ready s | 1 thread: load window / "
        "to ready s | speed-up |",
        "|---|---:|---:|---:|",
    ]
    for kind, runs in results.items():
        (p_load, p_ready), (s_load, s_ready) = (
            tuple(statistics.median(column) for column in zip(*runs[threads], strict=True))
            for threads in (4, 1))
        lines.append(f"| {kind} | {p_load:.2f} / {p_ready:.2f} | {s_load:.2f} / "
                     f"{s_ready:.2f} | {s_load / p_load:.1f}x |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bench", help="a set-up copy of the shared bench (for Triton)")
    parser.add_argument("--models", type=int, default=4)
    parser.add_argument("--sleep", type=float, default=2.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--write", help="a Markdown file to put the table in")
    args = parser.parse_args()
    bench = Path(args.bench).resolve() if args.bench else None
    kinds = ["infercore"] + (["triton"] if bench is not None else [])
    results: dict[str, dict[int, list[tuple[float, float]]]] = {
        kind: {4: [], 1: []} for kind in kinds}
    with tempfile.TemporaryDirectory(prefix="parallel-load-") as scratch:
        repo = Path(scratch) / "models"
        write_repository(repo, args.models, args.sleep)
        for _ in range(args.rounds):
            for kind in kinds:  # alternating, so a busy moment of the machine hits both
                for threads in (4, 1):
                    window, ready = time_to_ready(kind, bench, repo, threads,
                                                  Path(scratch) / f"{kind}-{threads}.log")
                    results[kind][threads].append((window, ready))
                    print(f"{kind} threads={threads}: load window {window:.2f} s, ready "
                          f"after {ready:.2f} s", file=sys.stderr)
    command = "python benchmarks/parallel_load.py " + " ".join(
        shlex.quote(a) for a in sys.argv[1:])
    publish(render(results, args, command), Path(args.write) if args.write else None,
            MARK_BEGIN, MARK_END)


if __name__ == "__main__":
    main()
