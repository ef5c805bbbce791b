"""Dynamic batching and instances, infercore against real Triton, with perf_analyzer.

The models of ``benchmarks/batching.py`` (plain Triton Python-backend ``model.py`` files),
served over HTTP by real Triton 2.51 and by ``infercore serve`` from a repository this
script generates, one server at a time, driven by NVIDIA's perf_analyzer through the bench
harness (see ``perf_compare.py`` and ``harness_models.py``):

- ``qgemv_unbatched`` / ``qgemv_batched``: the batching-friendly model (FP32 [2048] times a
  [2048, 2048] matrix of 8-bit codebook weights decoded once per execution), 1 instance,
  without and with ``dynamic_batching { }``;
- ``gemm_x1`` / ``_x2`` / ``_x4``: FP32 [64, 512] times [512, 512] per request, 1, 2 and 4
  instances, no batching;
- ``qgemv_assembled`` (infercore only): ``qgemv_batched`` with infercore's batch assembly
  (one matmul per batch), which real Triton's Python backend does not have.

BLAS runs single-threaded in both servers (``--blas-threads``), so parallelism comes from
instances: Triton runs each in its own stub process, infercore each in its own thread.
The figures and the infercore/Triton ratios go to ``docs/performance.md`` between
``<!-- perf-batching:begin -->`` and ``<!-- perf-batching:end -->``.

    python benchmarks/perf_batching.py --bench /tmp/bench          # full grid, ~10 min
    python benchmarks/perf_batching.py --bench /tmp/bench --quick --no-write \\
        --models qgemv_unbatched,qgemv_batched --concurrency 1,16     # smoke run
    python benchmarks/perf_batching.py --results run.json          # re-render a run
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
from batching import build_repository
from perf_compare import (
    DEFAULT_BENCH,
    LEGEND,
    PERFORMANCE_MD,
    comparison_table,
    infercore_command,
    prepare_bench,
    run_line,
    summarize,
    write_protocol_section,
)

HERE = Path(__file__).resolve().parent
SECTION = "batching"  # the marked section perf-batching in docs/performance.md

# model -> what it is (for the doc); the order is the doc's
MODELS = {
    "qgemv_unbatched": "FP32 [2048] x [2048, 2048] codebook-decoded weights, 1 instance, "
                       "no dynamic batching",
    "qgemv_batched": "FP32 [2048] x [2048, 2048] codebook-decoded weights, 1 instance, "
                     "`dynamic_batching { }` (max_batch_size 32; the model still loops "
                     "over the batch's requests, sharing the decode)",
    "qgemv_assembled": "`qgemv_batched` with infercore's batch assembly "
                       "(`infercore.batch_assembly: concat`: one matmul per batch); "
                       "infercore only",
    "gemm_x1": "FP32 [64, 512] x [512, 512], 1 instance, no dynamic batching",
    "gemm_x2": "FP32 [64, 512] x [512, 512], 2 instances, no dynamic batching",
    "gemm_x4": "FP32 [64, 512] x [512, 512], 4 instances, no dynamic batching",
}
INFERCORE_ONLY = {"qgemv_assembled"}  # uses a parameter real Triton does not have
# (label, model, baseline model): the scaling the issue sets targets for
SCALING = [
    ("dynamic batching / none", "qgemv_batched", "qgemv_unbatched"),
    ("batch assembly / none", "qgemv_assembled", "qgemv_unbatched"),
    ("2 instances / 1", "gemm_x2", "gemm_x1"),
    ("4 instances / 1", "gemm_x4", "gemm_x1"),
]


def build_repositories(root: Path) -> tuple[Path, Path]:
    """(Triton's repository, infercore's): the same models, plus infercore's extra."""
    ours, theirs = root / "infercore", root / "triton"
    build_repository(ours, "batching")
    build_repository(ours, "instances")
    shutil.copytree(ours, theirs, ignore=shutil.ignore_patterns(*INFERCORE_ONLY))
    return theirs, ours


def reference_weight(model: str) -> np.ndarray:
    """The weight matrix ``model``'s ``initialize`` builds (see batching.py's sources)."""
    rng = np.random.default_rng(0)
    if model.startswith("qgemv"):
        codes = rng.integers(0, 256, (2048, 2048), dtype=np.uint8)
        codebook = rng.standard_normal(256).astype(np.float32)
        return codebook.take(codes)
    return rng.random((512, 512), dtype=np.float32)


def write_reference(path: Path, models: list[str]) -> None:
    """One request's input and its expected output per model, for the answer check."""
    rng = np.random.default_rng(1)
    arrays = {}
    for model in models:
        shape = (1, 2048) if model.startswith("qgemv") else (1, 64, 512)
        x = rng.random(shape, dtype=np.float32)
        arrays[f"{model}.x"] = x
        arrays[f"{model}.y"] = x @ reference_weight(model)
    np.savez(path, **arrays)


def harness_run(bench: Path, args: argparse.Namespace, repo: Path, reference: Path,
                servers: str, server: str, models: list[str], out: Path) -> dict[str, Any]:
    """One harness invocation on ``repo`` (through harness_models.py); its results."""
    command = [str(bench / ".venv" / "bin" / "python"), str(HERE / "harness_models.py"),
               "--bench", str(bench), "--repo", str(repo), "--reference", str(reference),
               "--", "--servers", servers, "--server", server, "--models", ",".join(models),
               "--protocols", args.protocol, "--concurrency", args.concurrency,
               "--rounds", str(args.rounds), "--out", str(out),
               "--quiet-wait", str(args.quiet_wait)]
    if args.quick:
        command += ["--interval-ms", "1000", "--max-trials", "3"]
    else:
        command += ["--interval-ms", str(args.interval_ms)]
    blas = str(args.blas_threads)
    env = {**os.environ, "OPENBLAS_NUM_THREADS": blas, "OMP_NUM_THREADS": blas,
           "MKL_NUM_THREADS": blas, "PYTHONUNBUFFERED": "1"}
    print("[perf_batching] " + " ".join(shlex.quote(c) for c in command), flush=True)
    subprocess.run(command, check=True, env=env)
    return json.loads(out.read_text())


def run(args: argparse.Namespace, models: list[str]) -> tuple[dict[str, Any], Path]:
    """Both servers on the portable models, then infercore alone on its extra ones."""
    bench = prepare_bench(Path(args.bench).resolve())
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    out = Path(args.out) if args.out else bench / "results" / f"perf-batching-{stamp}.json"
    with tempfile.TemporaryDirectory(prefix="perf-batching-") as scratch:
        theirs, ours = build_repositories(Path(scratch))
        reference = Path(scratch) / "reference.npz"
        write_reference(reference, models)
        server = (f"infercore[{args.protocol}]="
                  f"{infercore_command([args.protocol], shlex.quote(str(ours)))}")
        portable = [m for m in models if m not in INFERCORE_ONLY]
        extra = [m for m in models if m in INFERCORE_ONLY]
        parts = []
        if portable:
            parts.append(harness_run(bench, args, theirs, reference, "triton", server,
                                     portable, Path(scratch) / "both.json"))
        if extra:
            parts.append(harness_run(bench, args, ours, reference, "", server, extra,
                                     Path(scratch) / "infercore.json"))
    results = {"meta": {**parts[0]["meta"],
                        "duration_s": sum(p["meta"].get("duration_s", 0) for p in parts),
                        "blas_threads": args.blas_threads},
               "rows": [row for part in parts for row in part["rows"]]}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=1))
    return results, out


def _ratio(summary: dict[str, dict[tuple[str, str, int], dict[str, Any]]], model: str,
           base: str, server: str, protocol: str, conc: int) -> str:
    top = summary.get(model, {}).get((server, protocol, conc))
    bottom = summary.get(base, {}).get((server, protocol, conc))
    if not top or not bottom:
        return "n/a"
    return f"{top['throughput_infer_s'] / bottom['throughput_infer_s']:.2f}x"


def render(results: dict[str, Any], protocol: str, command: str) -> str:
    """The Markdown section: the scaling ratios per server, then each model's table."""
    rows = results["rows"]
    present = [m for m in MODELS if any(r.get("model") == m for r in rows)]
    summary = {model: summarize(rows, model) for model in present}
    levels = sorted({conc for by_cell in summary.values() for (_, proto, conc) in by_cell
                     if proto == protocol})
    blas = results["meta"].get("blas_threads", "?")
    lines = [
        f"## infercore vs Triton: dynamic batching and instances over {protocol}",
        "",
        f"Command: `{command}`  ",
        run_line(results["meta"]),
        "",
        "The models of `benchmarks/batching.py` (plain Triton Python-backend `model.py` "
        "files, one generated repository), served by real Triton and by `infercore serve`, "
        "one at a time, loaded by perf_analyzer (batch size 1 per request). BLAS runs with "
        f"{blas} thread(s) in both servers, so parallelism comes from instances: Triton runs "
        "each instance in its own stub process, infercore in its own thread of one process.",
        "",
        "Throughput relative to the baseline model, per server (targets from issue 5: "
        "dynamic batching at least 3x at concurrency 16; two instances at least 1.7x):",
        "",
        "| scaling | server | " + " | ".join(f"c={c}" for c in levels) + " |",
        "|---|---|" + "---:|" * len(levels),
    ]
    for label, model, base in SCALING:
        if model not in summary or base not in summary:
            continue
        for server in ("triton", "infercore"):
            if model in INFERCORE_ONLY and server == "triton":
                continue
            cells = [_ratio(summary, model, base, server, protocol, c) for c in levels]
            lines.append(f"| {label} (`{model}` / `{base}`) | {server} | "
                         + " | ".join(cells) + " |")
    for model in present:
        lines += ["", f"**`{model}`**: {MODELS[model]}.", "",
                  *comparison_table(summary[model], protocol)]
    lines += ["", LEGEND]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bench", default=str(DEFAULT_BENCH),
                        help="the bench harness folder (default: ../shared/bench)")
    parser.add_argument("--models", default=",".join(MODELS),
                        help=f"comma list of {', '.join(MODELS)}")
    parser.add_argument("--protocol", default="http", choices=["http", "http-json", "grpc"])
    parser.add_argument("--concurrency", default="1,4,16,32")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--interval-ms", type=int, default=2000,
                        help="perf_analyzer's measurement window")
    parser.add_argument("--quiet-wait", type=int, default=60,
                        help="before each cell, wait up to this many seconds for other "
                             "processes to leave the CPUs (the machine is shared)")
    parser.add_argument("--blas-threads", type=int, default=1,
                        help="BLAS threads in each server process")
    parser.add_argument("--quick", action="store_true",
                        help="1 s windows, 3 trials (smoke run)")
    parser.add_argument("--out", help="where to keep the run's JSON results")
    parser.add_argument("--results", help="render this JSON instead of running")
    parser.add_argument("--write", default=str(PERFORMANCE_MD),
                        help="the Markdown file to update (default docs/performance.md)")
    parser.add_argument("--no-write", action="store_true", help="print, do not write")
    args = parser.parse_args()
    models = [m for m in args.models.split(",") if m]
    for model in models:
        if model not in MODELS:
            parser.error(f"unknown model {model!r} (known: {', '.join(MODELS)})")
    command = "python benchmarks/perf_batching.py " + " ".join(shlex.quote(a)
                                                                for a in sys.argv[1:])
    if args.results:
        results = json.loads(Path(args.results).read_text())
    else:
        results, out = run(args, models)
        print(f"[perf_batching] results: {out}")
    section = render(results, args.protocol, command.strip())
    print("\n" + section)
    if not args.no_write:
        write_protocol_section(Path(args.write), SECTION, section)
        print(f"\n[perf_batching] updated {args.write}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
