"""Per-request overhead of the in-process API on add_sub, against calling numpy directly.

    python benchmarks/inprocess.py [--calls 20000] [--rounds 5] [--write docs/performance.md]

Each round times every call with perf_counter_ns and takes the median; the reported figure
is the median over rounds. "direct" runs the model's computation (np.add + np.subtract on
two FP32 [1,16] arrays) in the caller; "sync" is ``model.infer(...).result()``; "async" is
``await model.async_infer(...)`` in one asyncio task; "sync, via instance thread" is
``result(timeout=60)``, which never runs inline, so each request crosses threads twice.
Overhead = mode - direct. Everything runs in one process in one invocation, so the ratios
are comparable on a noisy machine.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import gc
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np
from perf_doc import write_section

import infercore

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "examples" / "models"
MARK_BEGIN = "<!-- inprocess:begin -->"
MARK_END = "<!-- inprocess:end -->"


def _median_ns(samples: list[int]) -> float:
    return float(statistics.median(samples))


def bench_direct(a: np.ndarray, b: np.ndarray, calls: int) -> float:
    clock = time.perf_counter_ns
    samples = []
    for _ in range(calls):
        start = clock()
        np.add(a, b)
        np.subtract(a, b)
        samples.append(clock() - start)
    return _median_ns(samples)


def bench_sync(model: infercore.Model, inputs: dict, calls: int,
               timeout: float | None = None) -> float:
    clock = time.perf_counter_ns
    samples = []
    for _ in range(calls):
        start = clock()
        model.infer(inputs=inputs).result(timeout)
        samples.append(clock() - start)
    return _median_ns(samples)


async def _bench_async(model: infercore.Model, inputs: dict, calls: int) -> float:
    clock = time.perf_counter_ns
    samples = []
    for _ in range(calls):
        start = clock()
        await model.async_infer(inputs=inputs)
        samples.append(clock() - start)
    return _median_ns(samples)


def bench_async(model: infercore.Model, inputs: dict, calls: int) -> float:
    return asyncio.run(_bench_async(model, inputs, calls))


def run(calls: int, rounds: int) -> dict[str, float]:
    a = np.random.default_rng(0).random((1, 16), dtype=np.float32)
    b = np.random.default_rng(1).random((1, 16), dtype=np.float32)
    inputs = {"INPUT0": a, "INPUT1": b}
    results: dict[str, list[float]] = {"direct": [], "sync": [], "async": [], "threaded": []}
    with infercore.Server(model_repository=EXAMPLES) as server:
        model = server.model("add_sub")
        for _ in range(1000):  # warm up caches and the allocator
            model.infer(inputs=inputs).result()
        gc.collect()
        for _ in range(rounds):
            results["direct"].append(bench_direct(a, b, calls))
            results["sync"].append(bench_sync(model, inputs, calls))
            results["async"].append(bench_async(model, inputs, calls))
            results["threaded"].append(bench_sync(model, inputs, calls, timeout=60.0))
    return {mode: statistics.median(values) for mode, values in results.items()}


def render(figures: dict[str, float], command: str, calls: int, rounds: int) -> str:
    direct = figures["direct"]
    lines = [
        MARK_BEGIN,
        "## In-process API overhead (add_sub)",
        "",
        f"Command: `{command}`  ",
        f"Run: {datetime.date.today().isoformat()}, Python {platform.python_version()}, "
        f"numpy {np.__version__}, {calls} calls x {rounds} rounds, median of per-call medians.",
        "",
        "| mode | median per request (µs) | overhead over direct (µs) |",
        "|---|---:|---:|",
    ]
    labels = {"direct": "direct", "sync": "sync", "async": "async",
              "threaded": "sync, via instance thread"}
    for mode, label in labels.items():
        value = figures[mode]
        overhead = "" if mode == "direct" else f"{(value - direct) / 1000:.1f}"
        lines.append(f"| {label} | {value / 1000:.1f} | {overhead} |")
    lines += [
        "",
        "direct: `np.add` + `np.subtract` in the caller. sync: `model.infer(...).result()`, "
        "run inline by the blocked caller on the idle instance (no thread crossing). async: "
        "`await model.async_infer(...)`, run inline on the loop's thread once the model's "
        "recent executions are known to be short. sync, via instance thread: "
        "`result(timeout=60)`, which never runs inline: the request crosses threads twice "
        "(caller -> instance thread -> caller).",
        MARK_END,
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--write", type=Path, help="update this Markdown file's section")
    args = parser.parse_args()
    figures = run(args.calls, args.rounds)
    command = "python benchmarks/inprocess.py " + " ".join(sys.argv[1:])
    section = render(figures, command.strip(), args.calls, args.rounds)
    print(section)
    if args.write:
        write_section(args.write, MARK_BEGIN, MARK_END, section)


if __name__ == "__main__":
    main()
