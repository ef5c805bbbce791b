"""Starting a suite's server: real Triton 2.51 (for recording) or ``infercore serve``.

Both get the same repository (written from the suite's models into a fresh temporary
directory), the same flags, and ports drawn afresh; Triton is started from the shared
bench's installation (``../shared/bench``: ``setup.sh`` then ``env.sh``'s layout) with its
backends and caches directories, the only flags infercore does not get (infercore alone
gets the suite's ``infercore_flags``); both get the suite's ``env``. A server's output
goes to a log file in its temporary directory, read for start-up cases.
"""

from __future__ import annotations

import http.client
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from infercore.testing import free_ports

from .case import Suite
from .normalize import error_line
from .wire import Endpoint

__all__ = ["RunningServer", "ServerKind", "start_server", "triton_paths"]

START_TIMEOUT_S = 90.0
STOP_TIMEOUT_S = 20.0
POLL_S = 0.05


@dataclass(frozen=True)
class ServerKind:
    """How to start one implementation: its command's head and its environment."""

    name: str
    argv: tuple[str, ...]
    env: dict[str, str] = field(default_factory=dict)
    # a line of the server's log that says its first model load is over (None: serving
    # at all says so)
    loaded_marker: str | None = None


def infercore_kind() -> ServerKind:
    return ServerKind("infercore", (sys.executable, "-m", "infercore", "serve"),
                      {"PYTHONUNBUFFERED": "1"}, loaded_marker="infercore is serving")


def triton_paths(bench: Path) -> ServerKind:
    """Real tritonserver as the bench's setup.sh installs it under ``bench/.venv``."""
    venv = bench / ".venv"
    python = venv / "bin" / "python"
    if not python.exists():
        raise SystemExit(f"no bench venv at {venv}: run {bench}/setup.sh first")
    site = subprocess.check_output(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        text=True).strip()
    home = Path(site) / "pytriton" / "tritonserver"
    libs = [str(Path(site) / "nvidia_pytriton.libs"), str(venv / "lib" / "cuda")]
    env = {"LD_LIBRARY_PATH": ":".join(libs + [os.environ.get("LD_LIBRARY_PATH", "")]),
           # the Python backend's stub runs the `python` on PATH: the bench venv's
           "PATH": f"{venv / 'bin'}:{os.environ.get('PATH', '')}", "VIRTUAL_ENV": str(venv)}
    # where the installation keeps its backends and caches (tritonserver looks in
    # /opt/tritonserver otherwise); the cache folder matters only to a --cache-config
    return ServerKind("triton", (str(home / "bin" / "tritonserver"),
                                 f"--backend-directory={home / 'backends'}",
                                 f"--cache-directory={home / 'caches'}"), env)


@dataclass
class RunningServer:
    suite: Suite
    kind: ServerKind
    endpoint: Endpoint
    process: subprocess.Popen
    log_path: Path
    workdir: Path
    exit_code: int | None = None

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")

    def startup_answer(self) -> dict:
        """What a start-up case records: the exit status (None: it kept serving) and the
        line a user reads."""
        if self.exit_code is None:
            return {"exit": None}
        return {"exit": self.exit_code, "error_line": error_line(self.output())}

    def stop(self) -> None:
        self.endpoint.close()
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        shutil.rmtree(self.workdir, ignore_errors=True)


def _write_repository(suite: Suite, root: Path, endpoint: Endpoint) -> None:
    for model in suite.models:
        folder = root / model.name
        folder.mkdir(parents=True, exist_ok=True)
        if model.config is not None:
            (folder / "config.pbtxt").write_text(endpoint.fill(model.config))
        for relative, text in model.files.items():
            path = folder / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(endpoint.fill(text))


def start_server(suite: Suite, kind: ServerKind) -> RunningServer:
    workdir = Path(tempfile.mkdtemp(prefix=f"conf-{kind.name}-"))
    endpoint = Endpoint(*free_ports(3), str(workdir),
                        uuid.uuid4().hex[:12])
    repository = workdir / "models"
    repository.mkdir()
    _write_repository(suite, repository, endpoint)
    argv = list(kind.argv)
    if suite.ports:
        argv += [f"--model-repository={repository}",
                 "--http-address=127.0.0.1", f"--http-port={endpoint.http_port}",
                 "--grpc-address=127.0.0.1", f"--grpc-port={endpoint.grpc_port}",
                 "--metrics-address=127.0.0.1", f"--metrics-port={endpoint.metrics_port}"]
    argv += [endpoint.fill(flag) for flag in suite.flags]
    if kind.name == "infercore":
        argv += [endpoint.fill(flag) for flag in suite.infercore_flags]
    log_path = workdir / "server.log"
    env = {**os.environ, **kind.env, **{k: endpoint.fill(v) for k, v in suite.env.items()}}
    with open(log_path, "wb") as log:
        process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, cwd=workdir,
                                   env=env, start_new_session=True)
    server = RunningServer(suite, kind, endpoint, process, log_path, workdir)
    _wait_started(server)
    return server


def _http_status(port: int, method: str, path: str) -> int | None:
    try:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        connection.request(method, path, body=b"" if method == "POST" else None)
        response = connection.getresponse()
        response.read()
        connection.close()
        return response.status
    except OSError:
        return None


def _listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


def _wait_started(server: RunningServer) -> None:
    """Until the server serves (live, and ready; or, for a suite that does not wait for
    readiness, until no model is loading), or exits; a start-up suite also stops waiting
    once it serves. Triton opens its endpoints only once the first load is over;
    infercore opens them at once and says in its log when the first load is over
    (``loaded_marker``): the cases start after that on either server."""
    deadline = time.monotonic() + START_TIMEOUT_S
    port = server.endpoint.http_port
    while time.monotonic() < deadline:
        code = server.process.poll()
        if code is not None:
            server.exit_code = code
            if not server.suite.startup:
                raise RuntimeError(f"{server.kind.name} exited {code} at start-up of suite "
                                   f"{server.suite.name}:\n{server.output()[-3000:]}")
            return
        if _serving(server, port):
            return
        time.sleep(POLL_S)
    output = server.output()[-3000:]
    server.stop()
    raise TimeoutError(f"{server.kind.name} never served suite {server.suite.name}:\n{output}")


def _serving(server: RunningServer, port: int) -> bool:
    suite = server.suite
    if suite.ports and "--allow-http=false" not in suite.flags:
        if _http_status(port, "GET", "/v2/health/live") != 200:
            return False
        if not _loaded(server):
            return False
        return not suite.wait_ready or _http_status(port, "GET", "/v2/health/ready") == 200
    if suite.wait_ports:
        return _loaded(server) and all(_listening(int(server.endpoint.fill(placeholder)))
                                       for placeholder in suite.wait_ports)
    # no HTTP of ours to ask: the gRPC port (or, for suites with their own ports,
    # whatever the flags named) accepting connections is as far as this can see
    return _loaded(server) and (_listening(server.endpoint.grpc_port) or _listening(port))


# flags that can keep the marker out of the server's output (its log goes to a file, or
# its info lines are off): a suite with them that waits for readiness relies on that alone
_LOG_ELSEWHERE = ("--log-file", "--log-info")


def _loaded(server: RunningServer) -> bool:
    marker = server.kind.loaded_marker
    if marker is None or marker in server.output():
        return True
    return server.suite.wait_ready and any(
        flag.startswith(_LOG_ELSEWHERE) for flag in server.suite.flags)
