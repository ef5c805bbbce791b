"""Real ``infercore serve`` processes on free ports, for every test that starts one.

``ServeProcess`` runs HTTP and gRPC (or one of them) and writes its output to a log file;
``HttpServeProcess`` and ``GrpcServeProcess`` are it with one frontend on a repository;
``ServeOutput`` reads the output lines as they come instead, for tests that wait on what
the server prints. Waiting here is on a separate process, so the only thing to wait on is
its sockets and its output: every wait polls with a deadline and fails with the log.
"""

from __future__ import annotations

import http.client
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import IO

import grpc
from tritonclient.grpc import service_pb2, service_pb2_grpc

from infercore.testing import free_ports

__all__ = ["PYTHON_EXECUTION_MODES", "GrpcServeProcess", "HttpServeProcess", "ServeOutput",
           "ServeProcess", "free_port", "free_ports", "http_status", "refuses_connections",
           "serving_python_models", "wait_for"]

POLL_SECONDS = 0.05


def free_port() -> int:
    return free_ports(1)[0]


def wait_for(condition: Callable[[], bool], timeout: float, describe: Callable[[], str]
             ) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(describe())
        time.sleep(POLL_SECONDS)


def http_status(port: int, path: str, headers: dict[str, str] | None = None,
                method: str = "GET") -> int | None:
    """The status of one request, or None when nothing answers on ``port``."""
    try:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        connection.request(method, path, headers=headers or {})
        status = connection.getresponse().status
        connection.close()
        return status
    except OSError:
        return None


def infer_and_leave(port: int, model: str, body: bytes, *, linger_s: float = 0.0) -> None:
    """POST ``body`` to ``model``'s infer route over a raw socket and close the connection,
    ``linger_s`` later, without reading the answer: a client that went away."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(b"POST /v2/models/%s/infer HTTP/1.1\r\nHost: x\r\n"
                     b"Content-Length: %d\r\n\r\n" % (model.encode(), len(body)) + body)
        if linger_s:
            time.sleep(linger_s)


def refuses_connections(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return False
    except ConnectionRefusedError:
        return True
    except OSError:
        return False


def _start(argv: Sequence[str], stdout: IO[bytes] | int, text: bool = False,
           env: Mapping[str, str] | None = None) -> subprocess.Popen:
    return subprocess.Popen(list(argv), stdout=stdout, stderr=subprocess.STDOUT, text=text,
                            env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})})


def _terminate(process: subprocess.Popen, timeout: float) -> int:
    """SIGTERM (if still running), then the exit status; killed past ``timeout``."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    return process.returncode


class ServeProcess:
    """``python -m infercore serve`` (or another command line) on free ports."""

    # How much of the log's end ``log()`` gives (None: all of it); a test that checks
    # the log for what must not be there checks this much.
    log_tail: int | None = None

    def __init__(self, log_path: Path, *flags: str,
                 command: Callable[[ServeProcess], Sequence[str]] | None = None,
                 metrics: bool = False, http: bool = True, grpc: bool = True,
                 env: Mapping[str, str] | None = None) -> None:
        """``flags`` follow ``infercore serve`` and its ports; or ``command(self)`` is run
        instead (it reads the free ports drawn for it: http_port, grpc_port, metrics_port).
        ``http=False`` or ``grpc=False`` turns that frontend off; ``env`` adds environment
        variables.
        """
        self.http_port, self.grpc_port, self.metrics_port = free_ports(3)
        self.log_path = log_path
        if command is None:
            argv: Sequence[str] = [
                sys.executable, "-m", "infercore", "serve",
                *(["--http-address=127.0.0.1", f"--http-port={self.http_port}"] if http
                  else ["--allow-http=false"]),
                *(["--grpc-address=127.0.0.1", f"--grpc-port={self.grpc_port}"] if grpc
                  else ["--allow-grpc=false"]),
                *([f"--metrics-port={self.metrics_port}"] if metrics
                  else ["--allow-metrics=false"]),
                *flags]
        else:
            argv = command(self)
        self._log = open(log_path, "wb")  # noqa: SIM115 - closed in stop()
        self.process = _start(argv, self._log, env=env)

    @property
    def http_url(self) -> str:
        return f"127.0.0.1:{self.http_port}"

    @property
    def grpc_url(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    def log(self) -> str:
        if not self._log.closed:
            self._log.flush()
        text = self.log_path.read_text(errors="replace")
        return text if self.log_tail is None else text[-self.log_tail:]

    def _exited(self) -> bool:
        return self.process.poll() is not None

    def wait_until(self, reached: Callable[[], bool], failure: str, timeout: float = 60.0
                   ) -> None:
        """Until ``reached()``, the process staying up meanwhile; else ``failure`` and
        the log's end."""
        def up_and_reached() -> bool:
            if self._exited():
                raise RuntimeError(f"infercore serve exited:\n{self.log()[-4000:]}")
            return reached()

        wait_for(up_and_reached, timeout, lambda: f"{failure}:\n{self.log()[-4000:]}")

    def wait_http(self, path: str, status: int, timeout: float = 60.0) -> None:
        """Until ``path`` answers ``status`` (the process must stay up meanwhile)."""
        self.wait_until(lambda: http_status(self.http_port, path) == status,
                        f"{path} never answered {status}", timeout)

    def wait_ready(self, timeout: float = 60.0) -> None:
        self.wait_http("/v2/health/ready", 200, timeout)

    def wait_log(self, text: str, timeout: float = 60.0) -> None:
        wait_for(lambda: text in self.log(), timeout,
                 lambda: f"{text!r} never logged:\n{self.log()[-4000:]}")

    def wait_refusing(self, timeout: float = 30.0) -> None:
        """Until both the HTTP and the gRPC ports refuse new connections."""
        wait_for(lambda: refuses_connections(self.http_port)
                 and refuses_connections(self.grpc_port), timeout,
                 lambda: f"still accepting connections:\n{self.log()[-4000:]}")

    def signal(self, signum: int = signal.SIGTERM) -> None:
        self.process.send_signal(signum)

    def wait_exit(self, timeout: float = 60.0) -> int:
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            raise TimeoutError(f"infercore serve did not exit:\n{self.log()[-4000:]}") from None

    def rss_bytes(self) -> int:
        """The server process's resident memory now (Linux)."""
        with open(f"/proc/{self.process.pid}/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

    def stop(self, timeout: float = 30.0) -> int:
        """SIGTERM (if still running), then the exit status; killed past ``timeout``."""
        code = _terminate(self.process, timeout)
        self._log.close()
        return code


# The Python backend's two ways to run a model's instances, as serve flags.
PYTHON_EXECUTION_MODES: dict[str, tuple[str, ...]] = {
    "in_thread": (),
    "process": ("--backend-config=python,execution-mode=process",),
}


def child_pids(server: ServeProcess) -> list[str]:
    pid = server.process.pid
    with open(f"/proc/{pid}/task/{pid}/children") as children:
        return children.read().split()


@contextmanager
def serving_python_models(root: Path, repository: Path, mode: str, *,
                          ready_timeout: float = 60.0, metrics: bool = False,
                          grpc: bool = True) -> Iterator[ServeProcess]:
    """``infercore serve`` on ``repository`` with Python models run in ``mode`` (a key of
    PYTHON_EXECUTION_MODES), ready, its log under ``root``; stopped on leaving."""
    started = ServeProcess(root / "server.log", f"--model-repository={repository}",
                           "--exit-timeout-secs=5", *PYTHON_EXECUTION_MODES[mode],
                           metrics=metrics, grpc=grpc)
    try:
        started.wait_ready(timeout=ready_timeout)
        # Process-isolated means the models' instances run in the server's child processes.
        assert bool(child_pids(started)) == (mode == "process"), started.log()
        yield started
    finally:
        started.stop()


class HttpServeProcess(ServeProcess):
    """Only HTTP, on a free port, serving ``repository``: ``port`` and ``url`` are its."""

    log_tail = 4000

    def __init__(self, repository: Path, log_path: Path, *extra: str) -> None:
        super().__init__(log_path, f"--model-repository={repository}",
                         "--exit-timeout-secs=5", *extra, grpc=False)
        self.port = self.http_port
        self.url = self.http_url


class GrpcServeProcess(ServeProcess):
    """Only gRPC, on a free port, serving ``repository``: ``port`` and ``url`` are its."""

    log_tail = 6000

    def __init__(self, repository: Path, log_path: Path, *extra: str) -> None:
        super().__init__(log_path, f"--model-repository={repository}",
                         "--exit-timeout-secs=5", *extra, http=False)
        self.port = self.grpc_port
        self.url = self.grpc_url

    def wait_ready(  # type: ignore[override]
            self, channel: grpc.Channel, timeout: float = 30.0) -> None:
        """Poll ServerReady on ``channel`` (which may need TLS) until it answers true."""
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)

        def ready() -> bool:
            try:
                return bool(stub.ServerReady(service_pb2.ServerReadyRequest(), timeout=1).ready)
            except grpc.RpcError:
                return False

        self.wait_until(ready, f"infercore serve not ready after {timeout}s", timeout)


class ServeOutput:
    """``python -m infercore serve *args`` whose output lines are read as they come."""

    def __init__(self, *args: str) -> None:
        self.process = _start([sys.executable, "-m", "infercore", "serve", *args],
                              subprocess.PIPE, text=True)
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.output: list[str] = []
        threading.Thread(target=self._read, name="serve-output", daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def wait_for(self, text: str, timeout: float = 60.0) -> None:
        """Block until a line containing ``text`` is printed (the process says it is up);
        lines already read count, in order."""
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"no '{text}' from infercore serve: {''.join(self.output)}")
            try:
                line = self.lines.get(timeout=remaining)
            except queue.Empty:
                continue
            if line is None:
                raise RuntimeError(f"infercore serve exited: {''.join(self.output)}")
            self.output.append(line)
            if text in line:
                return

    def stop(self, timeout: float = 20.0) -> int:
        return _terminate(self.process, timeout)
