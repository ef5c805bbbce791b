"""Expensive and rejected requests against a running server: the stall they cause other
clients, and the memory they leave behind (issue #22, items 4 and 5).

    python benchmarks/load_probes.py                            # infercore, every probe
    python benchmarks/load_probes.py --server triton --bench /tmp/bench
    python benchmarks/load_probes.py --probes grpc_256mib,http_chunked_80mib --rounds 3
    python benchmarks/load_probes.py --write docs/performance.md   # both servers, written

The script writes a small repository (``add_sub``: INT32 [16] in and out; ``text``: one
BYTES [1] input; both Triton Python-backend models), starts the server on free ports
(``infercore serve`` with this interpreter, or real Triton from a set-up copy of the
shared bench harness), and runs each probe once per round:

- stall: while the probe's request is sent and answered, a second process checks the
  server's health on its own connection (HTTP ``GET /v2/health/ready``, or gRPC
  ``ServerReady`` for the gRPC probes) every 2 ms; the figure is the slowest of those
  checks, in ms (the quiet figure, a few hundred checks with no probe, is ``idle``).
- memory: the server's resident memory (``VmRSS`` of ``/proc/PID/status``) before the
  probe and 3 s after its answer, and its peak meanwhile (``VmHWM``, reset first through
  ``/proc/PID/clear_refs``), in MiB; at the end, the RSS after the whole corpus against
  its start.

Every probe's request is refused by the server (its answer is in the table), except the
pipelined one, whose 5,000 small requests should each be answered 200 (the table counts
those that were). For Triton the process is ``tritonserver`` itself (its Python stubs
never see the refused requests).

``--write FILE`` runs infercore and Triton (``--bench`` is then needed) one after the
other and puts both tables, with this command, between ``<!-- load-probes:begin -->`` and
``<!-- load-probes:end -->`` in FILE.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shlex
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import grpc
from perf_doc import publish
from tritonclient.grpc import service_pb2

MARK_BEGIN = "<!-- load-probes:begin -->"
MARK_END = "<!-- load-probes:end -->"
MIB = 1024 * 1024
SETTLE_S = 3.0  # how long after a refused request its memory is read
PROBE_INTERVAL_S = 0.002
HTTP_LIMIT = 64 * MIB  # Triton's default --http-max-input-size

ADD_SUB_CONFIG = """
name: "add_sub"
backend: "python"
max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 16 ] },
        { name: "INPUT1" data_type: TYPE_INT32 dims: [ 16 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 16 ] },
         { name: "OUTPUT1" data_type: TYPE_INT32 dims: [ 16 ] } ]
instance_group [ { count: 1 kind: KIND_CPU } ]
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
TEXT_CONFIG = """
name: "text"
backend: "python"
max_batch_size: 0
input [ { name: "TEXT" data_type: TYPE_STRING dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_STRING dims: [ 1 ] } ]
instance_group [ { count: 1 kind: KIND_CPU } ]
"""
TEXT_PY = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor(
            "OUT", pb_utils.get_input_tensor_by_name(request, "TEXT").as_numpy())])
            for request in requests]
"""


def write_repository(root: Path) -> Path:
    repo = root / "models"
    for name, config, code in (("add_sub", ADD_SUB_CONFIG, ADD_SUB_PY),
                               ("text", TEXT_CONFIG, TEXT_PY)):
        (repo / name / "1").mkdir(parents=True)
        (repo / name / "config.pbtxt").write_text(config)
        (repo / name / "1" / "model.py").write_text(code)
    return repo


# -- the server -------------------------------------------------------------------------
def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Target:
    name: str
    process: subprocess.Popen[bytes]
    http_port: int
    grpc_port: int

    def status(self, key: str) -> int:
        """A ``kB`` field of /proc/PID/status, in bytes."""
        with open(f"/proc/{self.process.pid}/status") as status:
            for line in status:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024
        raise KeyError(key)

    def reset_peak(self) -> None:
        with open(f"/proc/{self.process.pid}/clear_refs", "w") as clear:
            clear.write("5")  # resets VmHWM to the current RSS

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def start_server(kind: str, repo: Path, bench: Path | None, log: Path) -> Target:
    http_port, grpc_port, metrics_port = _free_port(), _free_port(), _free_port()
    ports = ["--http-port", str(http_port), "--grpc-port", str(grpc_port),
             "--metrics-port", str(metrics_port)]
    env = dict(os.environ)
    if kind == "infercore":
        argv = [sys.executable, "-m", "infercore", "serve"]
    else:
        if bench is None:
            raise SystemExit("--server triton needs --bench (a set-up bench harness)")
        venv = bench / ".venv"
        site = subprocess.check_output(
            [str(venv / "bin" / "python"), "-c",
             "import sysconfig; print(sysconfig.get_paths()['purelib'])"], text=True).strip()
        home = Path(site) / "pytriton" / "tritonserver"
        env["LD_LIBRARY_PATH"] = ":".join([str(Path(site) / "nvidia_pytriton.libs"),
                                           str(venv / "lib" / "cuda"),
                                           env.get("LD_LIBRARY_PATH", "")])
        env["PATH"] = f"{venv / 'bin'}:{env.get('PATH', '')}"  # the stub's python
        argv = [str(home / "bin" / "tritonserver"), f"--backend-directory={home / 'backends'}"]
    argv += ["--model-repository", str(repo), *ports]
    with open(log, "wb") as out:
        process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env)
    target = Target(kind, process, http_port, grpc_port)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"{kind} exited with {process.returncode}: see {log}")
        if all(_http_status(http_port, f"/v2/models/{m}/ready") == 200
               for m in ("add_sub", "text")):
            return target
        time.sleep(0.2)
    target.stop()
    raise SystemExit(f"{kind} was not ready within 120 s: see {log}")


def _http_status(port: int, path: str) -> int:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
            sock.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
            return int(sock.recv(4096).split()[1])
    except (OSError, IndexError, ValueError):
        return 0


# -- the health checker (a process of its own, so the client's work is not in it) -------
def check_health(protocol: str, port: int) -> None:
    """Time a health check every PROBE_INTERVAL_S until stdin closes; print (start, s)
    pairs as JSON."""
    stop = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
    samples: list[tuple[float, float]] = []
    if protocol == "grpc":
        channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        ready = channel.unary_unary("/inference.GRPCInferenceService/ServerReady",
                                    request_serializer=None, response_deserializer=None)
        request = service_pb2.ServerReadyRequest().SerializeToString()

        def check() -> None:
            ready(request, timeout=60)
    else:
        connection = [socket.create_connection(("127.0.0.1", port), timeout=60)]
        request = b"GET /v2/health/ready HTTP/1.1\r\nHost: x\r\n\r\n"

        def check() -> None:
            try:
                ask(connection[0])
            except ConnectionError:  # Triton resets connections under a pipelined flood:
                connection[0].close()  # the check, reconnecting, goes on (and is timed)
                connection[0] = socket.create_connection(("127.0.0.1", port), timeout=60)
                ask(connection[0])

        def ask(sock: socket.socket) -> None:
            sock.sendall(request)
            answer = b""
            while not answer.endswith(b"\r\n\r\n"):  # the answer has no body
                data = sock.recv(4096)
                if not data:
                    raise ConnectionResetError("closed")
                answer += data
    check()  # connected
    print("ready", flush=True)
    while not stop.is_set():
        start = time.monotonic()
        check()
        samples.append((start, time.monotonic() - start))
        time.sleep(PROBE_INTERVAL_S)
    print(json.dumps(samples))


class HealthChecker:
    """The checker process: started connected, stopped by closing its stdin."""

    def __init__(self, protocol: str, port: int) -> None:
        self._process = subprocess.Popen(
            [sys.executable, __file__, "--check-health", protocol, str(port)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        assert self._process.stdout is not None
        if self._process.stdout.readline() != b"ready\n":
            raise SystemExit("the health checker could not reach the server")

    def stop(self) -> list[tuple[float, float]]:
        out, _ = self._process.communicate(timeout=600)
        return [(start, seconds) for start, seconds in json.loads(out)]


# -- the probes' requests -----------------------------------------------------------------
def _http_post(port: int, path: str, body: bytes, headers: dict[str, str]) -> int:
    head = f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n" + "".join(
        f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n"
    with socket.create_connection(("127.0.0.1", port), timeout=120) as sock:
        sock.sendall(head.encode() + body)
        return _read_status(sock)


def _read_status(sock: socket.socket) -> int:
    answer = b""
    while b"\r\n" not in answer:
        data = sock.recv(65536)
        if not data:
            return 0
        answer += data
    return int(answer.split()[1])


def _binary_http(header: dict[str, object], data: bytes) -> tuple[bytes, dict[str, str]]:
    head = json.dumps(header).encode()
    return head + data, {"Inference-Header-Content-Length": str(len(head))}


EMPTY_STRINGS = struct.pack("<I", 0) * 4_000_000  # 4 million empty BYTES elements


def http_bytes_mismatch(target: Target) -> str:
    body, headers = _binary_http({"inputs": [{
        "name": "TEXT", "shape": [1], "datatype": "BYTES",
        "parameters": {"binary_data_size": len(EMPTY_STRINGS)}}]}, EMPTY_STRINGS)
    return str(_http_post(target.http_port, "/v2/models/text/infer", body, headers))


def http_unknown_inputs(target: Target) -> str:
    inputs = [{"name": f"X{i}", "shape": [1], "datatype": "INT32", "data": [0]}
              for i in range(100_000)]
    body = json.dumps({"inputs": inputs}).encode()
    return str(_http_post(target.http_port, "/v2/models/add_sub/infer", body, {}))


def http_json_values(target: Target) -> str:
    values = "[" + ",".join(["0"] * 8_000_000) + "]"
    body = ('{"inputs":[{"name":"INPUT0","shape":[16],"datatype":"INT32","data":' + values
            + '},{"name":"INPUT1","shape":[16],"datatype":"INT32","data":' + values[:34]
            + "]}]}").encode()
    return str(_http_post(target.http_port, "/v2/models/add_sub/infer", body, {}))


def http_pipelined(target: Target) -> str:
    body = json.dumps({"inputs": [
        {"name": n, "shape": [16], "datatype": "INT32", "data": list(range(16))}
        for n in ("INPUT0", "INPUT1")]}).encode()
    one = (b"POST /v2/models/add_sub/infer HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n"
           % len(body)) + body
    count = 5000
    answered = ok = 0
    reset = ""
    with socket.create_connection(("127.0.0.1", target.http_port), timeout=120) as sock:
        try:
            sock.sendall(one * count)
            tail = b""  # an answer's status line may be split between reads
            while answered < count:
                data = sock.recv(1 << 20)
                if not data:
                    break
                answered += (tail + data).count(b"HTTP/1.1 ")
                ok += (tail + data).count(b"HTTP/1.1 200")
                tail = data[-11:]
        except ConnectionError:  # (Triton, at times)
            reset = ", then reset"
    return f"{ok} of {count} ok{reset}"


def http_chunked_80mib(target: Target) -> str:
    piece = b"0" * MIB
    chunk = b"%x\r\n%s\r\n" % (len(piece), piece)
    head = (b"POST /v2/models/add_sub/infer HTTP/1.1\r\nHost: x\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n")
    with socket.create_connection(("127.0.0.1", target.http_port), timeout=120) as sock:
        sock.sendall(head)
        try:
            for _ in range(80):
                sock.sendall(chunk)
            sock.sendall(b"0\r\n\r\n")
        except OSError:  # refused at the limit and closed: the answer is waiting
            pass
        return str(_read_status(sock))


def _grpc_infer(target: Target, request: service_pb2.ModelInferRequest) -> str:
    options = [("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1)]
    data = request.SerializeToString()
    del request
    with grpc.insecure_channel(f"127.0.0.1:{target.grpc_port}", options=options) as channel:
        infer = channel.unary_unary("/inference.GRPCInferenceService/ModelInfer",
                                    request_serializer=None, response_deserializer=None)
        try:
            infer(data, timeout=120)
        except grpc.RpcError as exc:
            return exc.code().name
    return "OK"


def _grpc_raw(model: str, name: str, datatype: str, shape: list[int], data: bytes
              ) -> service_pb2.ModelInferRequest:
    request = service_pb2.ModelInferRequest(model_name=model)
    request.inputs.add(name=name, datatype=datatype, shape=shape)
    request.raw_input_contents.append(data)
    return request


def grpc_bytes_mismatch(target: Target) -> str:
    return _grpc_infer(target, _grpc_raw("text", "TEXT", "BYTES", [1], EMPTY_STRINGS))


def grpc_unknown_inputs(target: Target) -> str:
    request = service_pb2.ModelInferRequest(model_name="add_sub")
    for i in range(100_000):
        request.inputs.add(name=f"X{i}", datatype="INT32", shape=[1]).contents.int_contents \
            .append(0)
    return _grpc_infer(target, request)


def _grpc_large(size: int) -> Callable[[Target], str]:
    def probe(target: Target) -> str:
        request = _grpc_raw("add_sub", "INPUT0", "INT32", [16], bytes(size))
        request.inputs.add(name="INPUT1", datatype="INT32", shape=[16])
        request.raw_input_contents.append(bytes(64))
        return _grpc_infer(target, request)
    return probe


@dataclass(frozen=True)
class Probe:
    name: str
    protocol: str  # of the health checks
    send: Callable[[Target], str]
    what: str


PROBES = [
    Probe("http_bytes_mismatch", "http", http_bytes_mismatch,
          "4M empty BYTES elements for a [1] input (16 MB binary body)"),
    Probe("grpc_bytes_mismatch", "grpc", grpc_bytes_mismatch,
          "4M empty BYTES elements for a [1] input (16 MB raw_input_contents)"),
    Probe("http_unknown_inputs", "http", http_unknown_inputs, "100k unknown JSON inputs"),
    Probe("grpc_unknown_inputs", "grpc", grpc_unknown_inputs, "100k unknown inputs"),
    Probe("http_json_values", "http", http_json_values,
          "8M JSON values for an INT32 [16] input"),
    Probe("http_pipelined", "http", http_pipelined,
          "5,000 pipelined JSON add_sub requests on one connection"),
    Probe("http_chunked_80mib", "http", http_chunked_80mib,
          "an 80 MiB chunked body (limit 64 MiB)"),
    Probe("grpc_64mib", "grpc", _grpc_large(64 * MIB), "a 64 MiB INT32 [16] input"),
    Probe("grpc_256mib", "grpc", _grpc_large(256 * MIB), "a 256 MiB INT32 [16] input"),
]


# -- running ------------------------------------------------------------------------------
@dataclass
class Figures:
    answers: list[str] = field(default_factory=list)
    stall_ms: list[float] = field(default_factory=list)
    idle_ms: list[float] = field(default_factory=list)
    kept_mib: list[float] = field(default_factory=list)
    peak_mib: list[float] = field(default_factory=list)


def run_probe(target: Target, probe: Probe) -> tuple[str, float, float, float, float]:
    """(answer, stall ms, idle ms, RSS kept MiB, peak above the start MiB)."""
    port = target.http_port if probe.protocol == "http" else target.grpc_port
    before = target.status("VmRSS")
    target.reset_peak()
    checker = HealthChecker(probe.protocol, port)
    time.sleep(0.5)  # idle checks first: the quiet figure
    started = time.monotonic()
    answer = probe.send(target)
    ended = time.monotonic()
    time.sleep(0.1)
    samples = checker.stop()
    return answer, *_stall(samples, started, ended), *_memory(target, before)


def _stall(samples: list[tuple[float, float]], started: float, ended: float
           ) -> tuple[float, float]:
    during = [s for t, s in samples if started - 0.05 <= t <= ended]
    idle = [s for t, s in samples if t < started - 0.05]
    return (max(during, default=0.0) * 1e3,
            (statistics.median(idle) if idle else 0.0) * 1e3)


def _memory(target: Target, before: int) -> tuple[float, float]:
    peak = target.status("VmHWM")
    time.sleep(SETTLE_S)
    after = target.status("VmRSS")
    return (after - before) / MIB, (max(peak, after) - before) / MIB


def warm_up(target: Target) -> None:
    """One good request per protocol: first-use imports and pools are not the probes'."""
    body = json.dumps({"inputs": [
        {"name": n, "shape": [16], "datatype": "INT32", "data": list(range(16))}
        for n in ("INPUT0", "INPUT1")]}).encode()
    for _ in range(20):
        assert _http_post(target.http_port, "/v2/models/add_sub/infer", body, {}) == 200
        request = _grpc_raw("add_sub", "INPUT0", "INT32", [16], bytes(64))
        request.inputs.add(name="INPUT1", datatype="INT32", shape=[16])
        request.raw_input_contents.append(bytes(64))
        assert _grpc_infer(target, request) == "OK"


@dataclass
class Run:
    server: str
    figures: dict[str, Figures]
    start_mib: float
    end_mib: float


def run_server(kind: str, probes: list[Probe], rounds: int, bench: Path | None) -> Run:
    with tempfile.TemporaryDirectory(prefix="load-probes-") as scratch:
        repo = write_repository(Path(scratch))
        target = start_server(kind, repo, bench, Path(scratch) / "server.log")
        try:
            warm_up(target)
            time.sleep(1.0)
            start = target.status("VmRSS")
            figures = {probe.name: Figures() for probe in probes}
            for round_ in range(rounds):
                for probe in probes:
                    answer, stall, idle, kept, peak = run_probe(target, probe)
                    one = figures[probe.name]
                    one.answers.append(answer)
                    one.stall_ms.append(stall)
                    one.idle_ms.append(idle)
                    one.kept_mib.append(kept)
                    one.peak_mib.append(peak)
                    print(f"{kind} round {round_ + 1} {probe.name}: {answer}, stall "
                          f"{stall:.0f} ms (idle {idle:.1f}), RSS {kept:+.0f} MiB "
                          f"(peak +{peak:.0f})", file=sys.stderr, flush=True)
            end = target.status("VmRSS")
        finally:
            target.stop()
    return Run(kind, figures, start / MIB, end / MIB)


def render(runs: list[Run], probes: list[Probe], rounds: int, command: str) -> str:
    lines = ["## Expensive and rejected requests: stall and memory (issue #22)", "",
             f"`{command}`, {datetime.date.today()}, {platform.node()}, "
             f"{os.cpu_count()} CPUs (load average {os.getloadavg()[0]:.1f} at the end: "
             f"the machine is shared); {rounds} round(s), medians. *stall*: the slowest "
             "health check of another client while the request is sent and answered "
             f"(*idle*: a quiet check); *kept*: RSS {SETTLE_S:.0f} s after the answer "
             "minus RSS before; *peak*: the highest RSS meanwhile, above the start.", ""]
    servers = " | ".join(f"{run.server} stall ms (idle) | kept / peak MiB" for run in runs)
    lines += [f"| probe | answer | {servers} |",
              "|---|---|" + "---|---|" * len(runs)]
    for probe in probes:
        cells = []
        answer = ""
        for run in runs:
            one = run.figures[probe.name]
            answer = answer or "/".join(sorted(set(one.answers)))
            cells.append(f"{statistics.median(one.stall_ms):.0f} "
                         f"({statistics.median(one.idle_ms):.1f})")
            cells.append(f"{statistics.median(one.kept_mib):+.0f} / "
                         f"+{statistics.median(one.peak_mib):.0f}")
        lines.append(f"| {probe.what} | {answer} | " + " | ".join(cells) + " |")
    lines.append("")
    for run in runs:
        change = (run.end_mib - run.start_mib) / run.start_mib * 100
        lines.append(f"- {run.server}: RSS {run.start_mib:.0f} MiB after warm-up, "
                     f"{run.end_mib:.0f} MiB after the corpus ({change:+.0f}%)")
    return "\n".join(lines)


def main() -> int:
    if len(sys.argv) == 4 and sys.argv[1] == "--check-health":
        check_health(sys.argv[2], int(sys.argv[3]))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--server", choices=("infercore", "triton"), default="infercore")
    parser.add_argument("--bench", help="a set-up copy of the shared bench (for Triton)")
    parser.add_argument("--probes", default="all",
                        help="comma-separated: " + ",".join(p.name for p in PROBES))
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--write", help="run both servers; write the tables into this file")
    args = parser.parse_args()
    probes = PROBES if args.probes == "all" else [
        p for p in PROBES if p.name in args.probes.split(",")]
    bench = Path(args.bench).resolve() if args.bench else None
    servers = ["infercore", "triton"] if args.write else [args.server]
    runs = [run_server(kind, probes, args.rounds, bench) for kind in servers]
    command = "python benchmarks/load_probes.py " + " ".join(shlex.quote(a)
                                                             for a in sys.argv[1:])
    publish(render(runs, probes, args.rounds, command), Path(args.write) if args.write
            else None, MARK_BEGIN, MARK_END)
    return 0


if __name__ == "__main__":
    sys.exit(main())
