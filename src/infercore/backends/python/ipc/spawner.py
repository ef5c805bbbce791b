"""Starting worker processes: forked by a fork server (the default), or spawned afresh.

    forkserver  one helper process per server process, started on first use as a fresh
                interpreter: the threaded server itself is never forked (a child forked
                while another thread holds a lock, the allocator's or logging's, can
                deadlock). The helper imports numpy and the Python backend once and then
                forks one worker per request, so a worker is ready in milliseconds where a
                fresh interpreter spends a quarter of a second importing numpy and
                infercore (figures in docs/process_isolation.md). The helper is
                single-threaded, so forking it is safe.
    spawn       a fresh interpreter per worker (``subprocess``): slower to start, nothing
                inherited from a parent that already imported numpy.

Either way a worker gets its sockets and shared memory files as descriptors and never
outlives the server: it watches its event channel for EOF, and a forked worker also gets
SIGKILL from the kernel when the fork server dies (PR_SET_PDEATHSIG), which the fork server
does as soon as the server process is gone (EOF on its socket).

Threads: ``spawn_worker`` runs on any thread (a loading thread; an event thread restarting a
crashed worker). The fork server's reader thread ("infercore-forkserver") receives its
replies and the exit statuses of its workers; ``_ForkServer._lock`` guards the socket, the
pending spawns and the live workers. Each ``WorkerProcess`` publishes its exit code once,
through an Event.
"""

from __future__ import annotations

import atexit
import itertools
import marshal
import os
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

from ....errors import InternalError

__all__ = ["FORKSERVER", "SPAWN", "START_METHODS", "WorkerProcess", "spawn_worker"]

FORKSERVER = "forkserver"
SPAWN = "spawn"
START_METHODS = (FORKSERVER, SPAWN)

_ENTRY = "from infercore.backends.python.worker.main import main; main()"
_JOIN_TIMEOUT_S = 5.0

# fork server messages (marshal tuples on a SOCK_SEQPACKET socket)
FS_HELLO = "hello"  # (HELLO, pid)
FS_SPAWN = "spawn"  # (SPAWN, token, name) + the worker's descriptors
FS_SPAWNED = "spawned"  # (SPAWNED, token, pid)
FS_FAILED = "failed"  # (FAILED, token, message)
FS_EXITED = "exited"  # (EXITED, pid, exit code as os.waitstatus_to_exitcode gives it)


class WorkerProcess:
    """A started worker process: its pid, and its exit code once it is known."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self._exited = threading.Event()
        self._code: int | None = None
        self._lock = threading.Lock()  # the pidfd is not closed while kill() uses it
        self._pidfd = -1
        pidfd_open = getattr(os, "pidfd_open", None)
        if pidfd_open is not None:
            try:  # a pidfd names this process even after its pid is reused
                self._pidfd = pidfd_open(pid)
            except OSError:
                pass
        self._by_pid = self._pidfd < 0  # no pidfd: signal the pid while it is not reaped

    def wait(self, timeout: float | None = None) -> int | None:
        """The exit code (negative: the signal that killed it); None if not known in time."""
        self._exited.wait(timeout)
        return self._code

    def _set_exit(self, code: int | None) -> None:
        with self._lock:
            pidfd, self._pidfd = self._pidfd, -1
            if pidfd >= 0:
                os.close(pidfd)  # before waiters wake: nothing of the process is left open
            self._code = code
            self._exited.set()

    def kill(self) -> None:
        """SIGKILL the worker unless it has already exited."""
        with self._lock:
            if self._exited.is_set():
                return
            try:
                if self._pidfd >= 0:
                    signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)
                elif self._by_pid:
                    os.kill(self.pid, signal.SIGKILL)
            except OSError:  # gone already
                pass

    def describe_exit(self) -> str:
        """How the process ended, for messages: "was killed by signal 9 (SIGKILL)"."""
        code = self._code
        if code is None:
            return "ended"
        if code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = "unknown signal"
            return f"was killed by signal {-code} ({name})"
        return f"exited with status {code}"


class _SpawnedProcess(WorkerProcess):
    """A worker started as a fresh interpreter; reaped through its Popen."""

    def __init__(self, popen: subprocess.Popen[bytes]) -> None:
        super().__init__(popen.pid)
        self._popen = popen

    def wait(self, timeout: float | None = None) -> int | None:
        if not self._exited.is_set():
            try:
                code = self._popen.wait(timeout)
            except subprocess.TimeoutExpired:
                return None
            self._set_exit(code)
        return self._code

    def kill(self) -> None:
        if self._popen.returncode is None:
            try:
                self._popen.kill()
            except OSError:
                pass


def _child_environment() -> dict[str, str]:
    """The server's environment, with infercore importable in the child however it runs."""
    env = dict(os.environ)
    # the directory holding `infercore` (this file is infercore/backends/python/ipc/...);
    # one level too deep would make infercore's own modules (`model`, `errors`) top-level
    source = str(Path(__file__).resolve().parents[4])
    existing = env.get("PYTHONPATH")
    env["PYTHONPATH"] = source if not existing else source + os.pathsep + existing
    return env


def _start_interpreter(arguments: list[str], fds: list[int]) -> subprocess.Popen[bytes]:
    if not sys.executable:
        raise InternalError("cannot start a Python worker process: sys.executable is unknown")
    return subprocess.Popen(
        [sys.executable, "-c", _ENTRY, *arguments],
        pass_fds=fds,
        stdin=subprocess.DEVNULL,
        env=_child_environment(),
        # Its own session: a terminal's Ctrl-C reaches the server, which then finalizes
        # its workers in order, instead of interrupting models mid-execute.
        start_new_session=True,
    )


class _ForkServer:
    """The fork server of this process, started on first use, shared by every model."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._socket: socket.socket | None = None
        self._popen: subprocess.Popen[bytes] | None = None
        self._reader: threading.Thread | None = None
        self._tokens = itertools.count(1)
        self._pending: dict[int, tuple[threading.Event, list[object]]] = {}
        self._workers: dict[int, WorkerProcess] = {}
        self._registered_exit = False

    def spawn(self, name: str, fds: list[int], timeout: float) -> WorkerProcess:
        done = threading.Event()
        result: list[object] = []
        with self._lock:
            sock = self._started(timeout)
            token = next(self._tokens)
            self._pending[token] = (done, result)
            try:
                socket.send_fds(sock, [marshal.dumps((FS_SPAWN, token, name))], fds)
            except OSError as exc:
                del self._pending[token]
                raise InternalError(f"the Python worker fork server is gone: {exc}") from exc
        if not done.wait(timeout):
            with self._lock:
                self._pending.pop(token, None)
            raise InternalError(
                f"the Python worker fork server did not start '{name}' within {timeout:g} s"
            )
        (outcome,) = result
        if isinstance(outcome, WorkerProcess):
            return outcome
        raise InternalError(f"the Python worker fork server could not start '{name}': {outcome}")

    def _started(self, timeout: float) -> socket.socket:
        """The fork server's socket, starting the server if needed (``_lock`` held)."""
        if self._socket is not None:
            return self._socket
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            popen = _start_interpreter([FORKSERVER, str(theirs.fileno())], [theirs.fileno()])
        finally:
            theirs.close()
        ours.settimeout(timeout)
        try:
            hello = ours.recv(4096)
        except OSError:
            hello = b""
        if not hello or marshal.loads(hello)[0] != FS_HELLO:
            ours.close()
            popen.kill()
            popen.wait()
            raise InternalError("the Python worker fork server failed to start")
        ours.settimeout(None)
        self._socket, self._popen = ours, popen
        self._reader = threading.Thread(
            target=self._read, args=(ours, popen), name="infercore-forkserver", daemon=True
        )
        self._reader.start()
        if not self._registered_exit:
            atexit.register(self.close)
            self._registered_exit = True
        return ours

    def _read(self, sock: socket.socket, popen: subprocess.Popen[bytes]) -> None:
        while True:
            try:
                message = sock.recv(4096)
            except OSError:
                message = b""
            if not message:
                break
            kind, *fields = marshal.loads(message)
            with self._lock:
                if kind == FS_SPAWNED or kind == FS_FAILED:
                    token, value = fields
                    waiting = self._pending.pop(token, None)
                    if kind == FS_SPAWNED:
                        process = WorkerProcess(value)
                        self._workers[value] = process
                        outcome: object = process
                    else:
                        outcome = value
                    if waiting is None:  # the spawner gave up waiting
                        if isinstance(outcome, WorkerProcess):
                            outcome.kill()
                        continue
                    waiting[1].append(outcome)
                    waiting[0].set()
                elif kind == FS_EXITED:
                    pid, code = fields
                    exited = self._workers.pop(pid, None)
                    if exited is not None:
                        exited._set_exit(code)
        # The fork server is gone (the server is exiting, or it crashed): its workers die
        # with it (PR_SET_PDEATHSIG); the next spawn starts a new one.
        with self._lock:
            if self._socket is sock:
                self._socket = None
            for event, result in self._pending.values():
                result.append("the fork server exited")
                event.set()
            self._pending.clear()
            workers, self._workers = self._workers, {}
        for process in workers.values():
            process._set_exit(None)
        sock.close()
        popen.wait()

    def close(self) -> None:
        """End the fork server (at exit): its remaining workers end with it."""
        with self._lock:
            sock, self._socket = self._socket, None
            reader = self._reader
        if sock is not None:
            sock.shutdown(socket.SHUT_RDWR)
        if reader is not None:
            reader.join(_JOIN_TIMEOUT_S)


    def forget(self) -> None:
        """In a child forked from this process (by user code): the parent's fork server is
        not the child's, and the child must not keep its socket open, or the fork server
        would outlive the server. The reader thread did not survive the fork, and the lock
        may have been held by a thread that did not either: start afresh."""
        sock = self._socket
        if sock is not None:
            sock.close()
        self._lock = threading.Lock()
        self._socket = None
        self._popen = None
        self._reader = None
        self._pending = {}
        self._workers = {}


_FORK_SERVER = _ForkServer()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_FORK_SERVER.forget)


def spawn_worker(method: str, name: str, fds: list[int], timeout: float) -> WorkerProcess:
    """Start a worker process running ``worker_main`` over the descriptors ``fds``.

    Raises:
        InternalError: the process could not be started within ``timeout`` seconds.
    """
    if method == FORKSERVER:
        return _FORK_SERVER.spawn(name, fds, timeout)
    try:
        popen = _start_interpreter([SPAWN, name, *map(str, fds)], fds)
    except OSError as exc:
        raise InternalError(f"cannot start the Python worker process '{name}': {exc}") from exc
    return _SpawnedProcess(popen)
