"""Entry points of the processes behind process-isolated Python instances.

    python -c "...worker_main import main; main()" forkserver FD
        the fork server (ipc/spawner.py): imports what every worker needs, then forks a
        worker for each SPAWN message received on FD, and reports each worker's exit
    python -c "...worker_main import main; main()" spawn NAME DATA ANSWERS EVENTS INPUT
            OUTPUT BLS
        one worker started as a fresh interpreter

A worker is ``run_worker``: its six descriptors are the data channel's two sockets, the
event channel's socket and the input, output and BLS shared memory files
(worker/runtime.py does the rest).

Threads: the fork server is single-threaded by design (it forks); its only concurrency is
SIGCHLD, which wakes its ``select`` through a pipe (``signal.set_wakeup_fd``). A worker's
threads are described in worker/runtime.py.
"""

from __future__ import annotations

import ctypes
import marshal
import os
import select
import signal
import socket
import sys

from ..ipc.spawner import FS_EXITED, FS_FAILED, FS_HELLO, FS_SPAWNED

__all__ = ["main", "run_worker"]

_PR_SET_PDEATHSIG = 1
_PR_SET_NAME = 15


def _prctl(option: int, value: int | bytes) -> None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(option, value, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: the event channel watchdog still applies
        pass


def run_worker(name: str, fds: list[int], fork_server_pid: int = 0) -> int:
    """Serve one instance over ``fds`` = [payload socket, answer socket, event socket,
    input file, output file, BLS file]."""
    from .runtime import WorkerRuntime

    # `ps` and `top` show which instance a worker runs (the kernel keeps 15 bytes).
    _prctl(_PR_SET_NAME, name.encode("utf-8", "replace")[:15])
    if fork_server_pid:
        # Die with the fork server, which dies with the server. (Only safe because the fork
        # server is single-threaded: the signal fires when the forking *thread* exits.)
        _prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL))
        if os.getppid() != fork_server_pid:  # it died before the prctl took effect
            return 1
    # A model sees the command line of Triton's stub, which has none: `unittest.main()` in
    # a model (as Triton's QA models run it) must not read the worker's own arguments.
    sys.argv = [""]
    data_fd, answer_fd, event_fd, input_fd, output_fd, bls_fd = fds
    data = socket.socket(fileno=data_fd)
    answers = socket.socket(fileno=answer_fd)
    events = socket.socket(fileno=event_fd)
    return WorkerRuntime(data, answers, events, input_fd, output_fd, bls_fd).run()


def _serve_forks(sock: socket.socket) -> None:
    """The fork server's loop: fork workers, report their exits, end at EOF."""
    # Imported once here, inherited by every worker: this is what makes forking fast.
    import numpy  # noqa: F401

    from .. import backend  # noqa: F401
    from . import runtime  # noqa: F401

    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_read, False)
    os.set_blocking(wake_write, False)
    signal.signal(signal.SIGCHLD, lambda signum, frame: None)
    signal.set_wakeup_fd(wake_write)
    own_pid = os.getpid()
    sock.send(marshal.dumps((FS_HELLO, own_pid)))
    while True:
        readable, _, _ = select.select([sock.fileno(), wake_read], [], [])
        if wake_read in readable:
            try:
                while os.read(wake_read, 512):
                    pass
            except BlockingIOError:
                pass
            _report_exits(sock)
        if sock.fileno() not in readable:
            continue
        try:
            message, fds, _, _ = socket.recv_fds(sock, 4096, 8)
        except OSError:
            message, fds = b"", []
        if not message:
            return  # the server is gone; PR_SET_PDEATHSIG ends the workers
        _, token, name = marshal.loads(message)
        try:
            pid = os.fork()
        except OSError as exc:
            for fd in fds:
                os.close(fd)
            sock.send(marshal.dumps((FS_FAILED, token, str(exc))))
            continue
        if pid == 0:
            code = 1
            try:
                signal.set_wakeup_fd(-1)
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                os.close(wake_read)
                os.close(wake_write)
                sock.close()
                code = run_worker(name, list(fds), own_pid)
            finally:
                # Never return into the fork server's loop.
                from .runtime import exit_now

                exit_now(code)
        for fd in fds:
            os.close(fd)
        sock.send(marshal.dumps((FS_SPAWNED, token, pid)))


def _report_exits(sock: socket.socket) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        sock.send(marshal.dumps((FS_EXITED, pid, os.waitstatus_to_exitcode(status))))


def main() -> None:
    mode, *arguments = sys.argv[1:]
    if mode == "forkserver":
        _serve_forks(socket.socket(fileno=int(arguments[0])))
        sys.exit(0)
    if mode == "spawn":
        name, *fds = arguments
        code = run_worker(name, [int(fd) for fd in fds])
        from .runtime import exit_now

        exit_now(code)
    sys.exit(f"unknown worker mode {mode!r}")
