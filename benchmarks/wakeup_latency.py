"""What one process waking another costs on this machine: the floor under isolated instances.

    python benchmarks/wakeup_latency.py [--rounds 20000]

Two processes bounce a 64-byte message over a Unix socket pair, as the server and an
isolated worker do for every payload (each side blocks in ``recv`` until the other
sends). Measured twice: the processes free to run on any CPU (the scheduler mostly puts
them on different CPUs, so every wake-up crosses CPUs), then both pinned to one CPU.

The gap between the two is the price of a cross-CPU wake-up (on a VM, an inter-processor
interrupt and the idle vCPU's exit from halt). Triton's Python backend pays it too; what
it means for process isolation is discussed in docs/process_isolation.md, "Performance".
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import time

MESSAGE = b"x" * 64


def round_trip_us(rounds: int, cpu: int | None) -> tuple[float, float]:
    """Median and 90th percentile µs of one round trip between two processes."""
    ours, theirs = socket.socketpair()
    pid = os.fork()
    if pid == 0:  # the echoing process
        ours.close()
        if cpu is not None:
            os.sched_setaffinity(0, {cpu})
        while True:
            data = theirs.recv(len(MESSAGE))
            if not data:
                os._exit(0)
            theirs.sendall(data)
    theirs.close()
    previous = os.sched_getaffinity(0)
    if cpu is not None:
        os.sched_setaffinity(0, {cpu})
    try:
        clock = time.perf_counter_ns
        samples = []
        for _ in range(rounds):
            begin = clock()
            ours.sendall(MESSAGE)
            ours.recv(len(MESSAGE))
            samples.append(clock() - begin)
    finally:
        os.sched_setaffinity(0, previous)
        ours.close()
        os.waitpid(pid, 0)
    samples.sort()
    return statistics.median(samples) / 1000, samples[len(samples) * 9 // 10] / 1000


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=20_000)
    args = parser.parse_args()
    cpus = sorted(os.sched_getaffinity(0))
    print(f"{len(cpus)} CPUs available; {args.rounds} round trips each")
    for label, cpu in (("free (mostly across CPUs)", None), (f"pinned to CPU {cpus[0]}", cpus[0])):
        median, p90 = round_trip_us(args.rounds, cpu)
        print(f"{label:28s} round trip p50 {median:6.1f} µs   p90 {p90:6.1f} µs")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
