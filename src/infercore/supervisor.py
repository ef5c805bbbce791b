"""``infercore serve --supervise``: restart a server that died, with a bounded rate.

In-thread Python models share the server's process, so a model that calls ``os._exit``,
segfaults or aborts ends the server (Triton's stubs are processes of their own). The
supervisor is a small parent process that runs the real server as its child with the
same command line (minus the supervisor's flags) and, when the child dies without being
asked to, starts it again: the child binds the same ports afresh.

- The child tells the parent it is serving by writing one line to a pipe whose write end
  it inherits (``INFERCORE_SUPERVISOR_FD``); ``notify_serving`` is that write. A child
  that exits before it ever served (a bad command line, a repository that fails with
  --exit-on-error) is not restarted: the parent exits with its status, as the server
  alone would.
- Restarts are bounded: at most ``max_restarts`` within ``window_s`` seconds; past that,
  the supervisor gives up and exits with the child's status. A restarted child that dies
  before it serves again counts as a restart too.
- SIGINT and SIGTERM are passed on to the child; once the child exits after one of them,
  the parent exits with its status and restarts nothing.

Threads: one, the main thread (signal handlers run there and only set a flag and
forward the signal).
"""

from __future__ import annotations

import logging
import os
import select
import signal
import subprocess
import sys
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from types import FrameType

__all__ = ["SupervisorPolicy", "notify_serving", "supervise"]

logger = logging.getLogger("infercore.supervisor")

FD_VARIABLE = "INFERCORE_SUPERVISOR_FD"
_SERVING = b"serving\n"


@dataclass(frozen=True, slots=True)
class SupervisorPolicy:
    max_restarts: int = 5
    window_s: float = 60.0


def notify_serving() -> None:
    """Tell a supervising parent (if any) that this server now serves; once."""
    text = os.environ.pop(FD_VARIABLE, None)
    if not text:
        return
    try:
        fd = int(text)
        os.write(fd, _SERVING)
        os.close(fd)
    except (ValueError, OSError):  # no parent listening any more: nothing to tell
        pass


def _describe(status: int) -> str:
    if status < 0:
        try:
            return f"killed by {signal.Signals(-status).name}"
        except ValueError:
            return f"killed by signal {-status}"
    return f"exited with status {status}"


def _exit_status(status: int) -> int:
    """The parent's own exit status for a child's: a signal's death as a shell reports it."""
    return 128 - status if status < 0 else status


class _Child:
    def __init__(self, argv: Sequence[str]) -> None:
        read_fd, write_fd = os.pipe()
        env = {**os.environ, FD_VARIABLE: str(write_fd)}
        self.process = subprocess.Popen(list(argv), env=env, pass_fds=(write_fd,))
        os.close(write_fd)
        self._pipe = read_fd
        self.serving = False

    def wait(self) -> int:
        """Until the child exits; its status. Notes whether it said it serves."""
        pipe_open = True
        while pipe_open and self.process.poll() is None:
            ready, _, _ = select.select([self._pipe], [], [], 0.5)
            if ready:
                data = os.read(self._pipe, len(_SERVING))
                self.serving = self.serving or data == _SERVING
                pipe_open = bool(data) and not self.serving
        if not self.serving:
            # The child may have said so and exited between two polls: its line is still
            # in the pipe (never block here: a grandchild may hold the write end open).
            ready, _, _ = select.select([self._pipe], [], [], 0)
            if ready:
                self.serving = os.read(self._pipe, len(_SERVING)) == _SERVING
        os.close(self._pipe)
        # a signal arriving meanwhile runs its handler (which forwards it) and the wait
        # goes on (PEP 475)
        return self.process.wait()


def supervise(argv: Sequence[str], policy: SupervisorPolicy = SupervisorPolicy()) -> int:
    """Run ``argv`` (a server command line) as a child, restarting it as described above;
    the exit status the supervisor itself should end with."""
    stop_requested: list[int] = []
    child: _Child | None = None

    def forward(signum: int, _frame: FrameType | None) -> None:
        stop_requested.append(signum)
        if child is not None and child.process.poll() is None:
            child.process.send_signal(signum)

    previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGINT, signal.SIGTERM)}
    restarts: deque[float] = deque()
    ever_served = False
    try:
        while True:
            child = _Child(argv)
            logger.info("supervisor: started server process %d", child.process.pid)
            status = child.wait()
            ever_served = ever_served or child.serving
            if stop_requested:
                return _exit_status(status)
            if not ever_served:
                logger.error("supervisor: the server %s before it served; not restarting",
                             _describe(status))
                return _exit_status(status)
            now = time.monotonic()
            while restarts and now - restarts[0] > policy.window_s:
                restarts.popleft()
            if len(restarts) >= policy.max_restarts:
                logger.error("supervisor: the server %s; %d restarts in the last %.0f s, "
                             "giving up", _describe(status), len(restarts), policy.window_s)
                return _exit_status(status) or 1
            restarts.append(now)
            logger.warning("supervisor: the server process %d %s; restarting it (%d of %d "
                           "allowed within %.0f s)", child.process.pid, _describe(status),
                           len(restarts), policy.max_restarts, policy.window_s)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def serve_command(argv: Sequence[str]) -> list[str]:
    """The child's command line: this interpreter running ``infercore serve argv``."""
    return [sys.executable, "-m", "infercore", "serve", *argv]
