"""A real ``infercore serve`` process with HTTP and gRPC on free ports, for the tests of the
command line, the lifecycle and the restricted APIs.

Waiting here is on a separate process, so the only thing to wait on is its sockets and
its log: every wait polls with a deadline and fails with the server's log.
"""

from __future__ import annotations

import http.client
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

__all__ = ["ServeProcess", "free_port", "http_status", "refuses_connections", "wait_for"]

POLL_SECONDS = 0.05


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


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


def refuses_connections(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return False
    except ConnectionRefusedError:
        return True
    except OSError:
        return False


class ServeProcess:
    """``python -m infercore serve`` (or another command line) on free ports."""

    def __init__(self, log_path: Path, *flags: str,
                 command: Callable[[ServeProcess], Sequence[str]] | None = None,
                 metrics: bool = False) -> None:
        """``flags`` follow ``infercore serve`` and its ports; or ``command(self)`` is run
        instead (it reads the free ports drawn for it: http_port, grpc_port, metrics_port).
        """
        self.http_port = free_port()
        self.grpc_port = free_port()
        self.metrics_port = free_port()
        self.log_path = log_path
        if command is None:
            argv: Sequence[str] = [
                sys.executable, "-m", "infercore", "serve",
                "--http-address=127.0.0.1", f"--http-port={self.http_port}",
                "--grpc-address=127.0.0.1", f"--grpc-port={self.grpc_port}",
                *([f"--metrics-port={self.metrics_port}"] if metrics
                  else ["--allow-metrics=false"]),
                *flags]
        else:
            argv = command(self)
        self._log = open(log_path, "wb")  # noqa: SIM115 - closed in stop()
        self.process = subprocess.Popen(list(argv), stdout=self._log,
                                        stderr=subprocess.STDOUT,
                                        env={**os.environ, "PYTHONUNBUFFERED": "1"})

    @property
    def http_url(self) -> str:
        return f"127.0.0.1:{self.http_port}"

    @property
    def grpc_url(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    def log(self) -> str:
        if not self._log.closed:
            self._log.flush()
        return self.log_path.read_text(errors="replace")

    def _exited(self) -> bool:
        return self.process.poll() is not None

    def wait_http(self, path: str, status: int, timeout: float = 60.0) -> None:
        """Until ``path`` answers ``status`` (the process must stay up meanwhile)."""
        def reached() -> bool:
            if self._exited():
                raise RuntimeError(f"infercore serve exited:\n{self.log()[-4000:]}")
            return http_status(self.http_port, path) == status

        wait_for(reached, timeout, lambda: f"{path} never answered {status}:\n"
                 f"{self.log()[-4000:]}")

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

    def stop(self, timeout: float = 30.0) -> int:
        """SIGTERM (if still running), then the exit status; killed past ``timeout``."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._log.close()
        return self.process.returncode
