"""infercore against real Triton, side by side in one run, with NVIDIA's perf_analyzer.

Drives the bench harness (``<bench>/run.sh``, see its README): for each round it starts
real Triton and ``infercore serve`` one at a time on the harness's ``add_sub`` model
repository, runs perf_analyzer at each concurrency, and records throughput and latency.
This script then writes both tables and the infercore/Triton ratios into
``docs/performance.md`` between ``<!-- perf-<protocol>:begin -->`` and ``:end -->``
markers (one section per protocol; replaced if present, appended otherwise).

    python benchmarks/perf_compare.py                        # http, c 1,4,16, 2 rounds
    python benchmarks/perf_compare.py --protocols http,grpc --rounds 1
    python benchmarks/perf_compare.py --quick --no-write     # a smoke run, nothing written
    python benchmarks/perf_compare.py --protocols grpc --ceiling  # + a constant-answer server

``--ceiling`` adds the harness's constant-answer Python server (``limits/echo_server.py
--mode fixed``: uvicorn for HTTP, grpc.aio for gRPC, the request ignored) to each round:
what a Python server on the usual stack does with no work at all on this machine.

The harness comes from ``--bench`` (default: ``../shared/bench`` next to the checkout),
copied to a scratch folder and set up (``setup.sh``) when it has no ``.venv`` or is not
writable. ``infercore serve`` runs with this interpreter (``sys.executable``).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from perf_doc import write_section

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_BENCH = ROOT.parent / "shared" / "bench"
PERFORMANCE_MD = ROOT / "docs" / "performance.md"
PROTOCOLS = ("http", "http-json", "grpc")  # the harness's names


def _accepts(flag: str) -> bool:
    """Whether ``infercore serve`` has ``flag`` (frontends add theirs as they arrive)."""
    sys.path.insert(0, str(ROOT / "src"))
    from infercore.cli import build_parser

    _, unknown = build_parser().parse_known_args(["serve", flag])
    return not unknown


def infercore_command(protocols: list[str], repo: str = "{repo}") -> str:
    """The harness ``--server`` command that starts ``infercore serve`` on its ports
    (serving the harness's repository unless ``repo`` names another, shell-quoted)."""
    parts = [shlex.quote(sys.executable), "-m", "infercore", "serve", "--model-repository",
             repo, "--http-address", "{host}", "--http-port", "{http_port}",
             "--log-info", "false"]
    if _accepts("--grpc-port=1"):
        parts += ["--grpc-port", "{grpc_port}"]
        if _accepts("--grpc-address=x"):
            parts += ["--grpc-address", "{host}"]
    elif "grpc" in protocols:
        raise SystemExit("infercore serve has no --grpc-port yet: cannot benchmark grpc")
    if _accepts("--metrics-port=1"):
        parts += ["--metrics-port", "{metrics_port}"]
    return " ".join(parts)


def prepare_bench(source: Path) -> Path:
    """A writable, set-up copy of the harness (``source`` itself when it already is)."""
    if (source / ".venv").is_dir() and os.access(source, os.W_OK):
        return source
    target = Path(tempfile.mkdtemp(prefix="infercore-bench-")) / "bench"
    shutil.copytree(source, target, ignore=shutil.ignore_patterns(".venv", "results"))
    (target / "results").mkdir(exist_ok=True)
    print(f"[perf_compare] setting up the harness in {target}", flush=True)
    subprocess.run([str(target / "setup.sh")], cwd=target, check=True)
    return target


def run_harness(bench: Path, args: argparse.Namespace, out: Path) -> dict[str, Any]:
    protocols = args.protocols.split(",")
    server = f"infercore[{','.join(protocols)}]={infercore_command(protocols)}"
    command = [str(bench / "run.sh"), "--servers", "triton", "--server", server,
               "--models", "add_sub", "--protocols", ",".join(protocols),
               "--concurrency", args.concurrency, "--rounds", str(args.rounds),
               "--out", str(out),
               "--quiet-wait", str(args.quiet_wait)]
    if args.ceiling:
        command += ["--server", f"{CEILING}[{','.join(protocols)}]={{bench}}/.venv/bin/python "
                    "{bench}/limits/echo_server.py --mode fixed --host {host} "
                    "--http-port {http_port} --grpc-port {grpc_port}"]
    if args.quick:
        command += ["--interval-ms", "1000", "--max-trials", "3"]
    print("[perf_compare] " + " ".join(shlex.quote(c) for c in command), flush=True)
    subprocess.run(command, check=True, cwd=bench)
    return json.loads(out.read_text())


CEILING = "echo-fixed"  # the harness's constant-answer server (--ceiling)
QUIET_CORES = 0.25  # other processes' CPU (cores) above which a measurement is noisy


def summarize(rows: list[dict[str, Any]], model: str = "add_sub"
              ) -> dict[tuple[str, str, int], dict[str, Any]]:
    """Per (server, protocol, concurrency) of ``model``: the median over the quiet rounds.

    The machine is shared: a round during which other processes used more than
    QUIET_CORES is left out when a quieter round of the same cell exists (such figures
    mostly measure the neighbours). Cells with only noisy rounds keep them, marked.
    """
    cells: dict[tuple[str, str, int], list[dict[str, Any]]] = {}
    for row in rows:
        if row.get("throughput_infer_s") is None or row.get("model", "add_sub") != model:
            continue
        key = (row["server"], row["protocol"], row["concurrency"])
        cells.setdefault(key, []).append(row)
    summary = {}
    for key, group in cells.items():
        quiet = [r for r in group if (r.get("other_cpu_cores") or 0.0) <= QUIET_CORES]
        used = quiet or group
        used.sort(key=lambda r: r["throughput_infer_s"])
        middle = used[(len(used) - 1) // 2]  # the lower median: a real measurement
        summary[key] = {**middle, "rounds_used": len(used), "rounds": len(group),
                        "noisy": not quiet}
    return summary


def _figure(row: dict[str, Any] | None, key: str) -> str:
    if row is None:
        return "n/a"
    mark = "" if row.get("stable", True) else "~"
    mark += "" if row.get("verified", True) else "!"
    mark += "*" if row.get("noisy") else ""
    return f"{mark}{row[key]:,.0f}"


def run_line(meta: dict[str, Any]) -> str:
    """How the figures were taken: when, rounds, machine, perf_analyzer and its windows."""
    analyzer = meta.get("perf_analyzer", {})
    return (f"Run: {meta.get('started', '?')}, {meta.get('rounds', '?')} round(s) (servers "
            f"alternating, the lower median of the quiet rounds shown), "
            f"{meta.get('cpus', '?')} CPUs ({meta.get('cpu_model', '?')}), Python "
            f"{platform.python_version()}, perf_analyzer {analyzer.get('binary', '?')}, "
            f"{analyzer.get('interval_ms', '?')} ms windows.")


def comparison_table(summary: dict[tuple[str, str, int], dict[str, Any]], protocol: str
                     ) -> list[str]:
    """Markdown rows: Triton's and infercore's figures per concurrency, and their ratios
    (and the constant-answer ceiling's, when it ran)."""
    concurrencies = sorted({conc for (_, proto, conc) in summary if proto == protocol})
    ceiling = any(server == CEILING for (server, proto, _) in summary if proto == protocol)
    head = ("| conc | Triton infer/s | p50 µs | p99 µs | infercore infer/s | p50 µs | p99 µs "
            "| throughput × | p50 × |")
    rule = "|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    if ceiling:
        head += " ceiling infer/s | infercore / ceiling |"
        rule += "---:|---:|"
    lines = [head + " rounds used (T / i) |", rule + "---:|"]
    for conc in concurrencies:
        triton = summary.get(("triton", protocol, conc))
        ours = summary.get(("infercore", protocol, conc))
        ratio = p50_ratio = ""
        if triton and ours:
            ratio = f"{ours['throughput_infer_s'] / triton['throughput_infer_s']:.2f}"
            p50_ratio = f"{ours['p50_us'] / triton['p50_us']:.2f}"
        used = " / ".join(f"{c['rounds_used']} of {c['rounds']}" if c else "-"
                          for c in (triton, ours))
        line = (
            f"| {conc} | {_figure(triton, 'throughput_infer_s')} | {_figure(triton, 'p50_us')} "
            f"| {_figure(triton, 'p99_us')} | {_figure(ours, 'throughput_infer_s')} "
            f"| {_figure(ours, 'p50_us')} | {_figure(ours, 'p99_us')} | {ratio} "
            f"| {p50_ratio} |")
        if ceiling:
            top = summary.get((CEILING, protocol, conc))
            share = (f"{ours['throughput_infer_s'] / top['throughput_infer_s']:.2f}"
                     if top and ours else "")
            line += f" {_figure(top, 'throughput_infer_s')} | {share} |"
        lines.append(f"{line} {used} |")
    return lines


LEGEND = (
    "throughput ×: infercore / Triton (above 1 is better); p50 ×: infercore / Triton "
    "latency (below 1 is better). A round is *quiet* when other processes used at most "
    f"{QUIET_CORES} core during it (the VM is shared); `*`: no quiet round, figure from "
    "the noisy ones; `~`: perf_analyzer did not stabilise; `!`: an answer failed the "
    "harness's check.")


def render(results: dict[str, Any], protocol: str, command: str) -> str:
    """One Markdown section: the two servers' figures per concurrency and their ratios."""
    lines = [
        f"## infercore vs Triton: add_sub over {protocol}",
        "",
        f"Command: `{command}`  ",
        run_line(results["meta"]),
        "",
        *comparison_table(summarize(results["rows"]), protocol),
        "",
        LEGEND + " The servers ran alone, one after the other, on the same machine "
        "and model repository (Triton with its dynamic batcher, as configured; infercore's "
        "dynamic batcher too)."
        + (" ceiling: the harness's constant-answer Python server (`limits/echo_server.py "
           "--mode fixed`; uvicorn for HTTP, grpc.aio for gRPC), which ignores the request "
           "(so its `!` is expected: the constant answer fails the harness's check)."
           if any(row.get("server") == CEILING for row in results["rows"]) else ""),
    ]
    return "\n".join(lines)


def _load(value: Any) -> str:
    return f"{value[0]:.2f}" if isinstance(value, list) and value else "?"


def write_protocol_section(path: Path, protocol: str, section: str) -> None:
    """Replace (or append) the ``perf-<protocol>`` marked section; touch nothing else."""
    begin, end = f"<!-- perf-{protocol}:begin -->", f"<!-- perf-{protocol}:end -->"
    write_section(path, begin, end, f"{begin}\n{section}\n{end}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bench", default=str(DEFAULT_BENCH),
                        help="the bench harness folder (default: ../shared/bench)")
    parser.add_argument("--protocols", default="http",
                        help=f"comma list of {', '.join(PROTOCOLS)}")
    parser.add_argument("--concurrency", default="1,4,16")
    parser.add_argument("--quiet-wait", type=int, default=60,
                        help="before each cell, wait up to this many seconds for other "
                             "processes to leave the CPUs (the machine is shared)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="short windows (smoke run)")
    parser.add_argument("--ceiling", action="store_true",
                        help="also run the harness's constant-answer server (echo-fixed)")
    parser.add_argument("--out", help="where the harness writes its JSON results")
    parser.add_argument("--results", help="render this harness JSON instead of running")
    parser.add_argument("--write", default=str(PERFORMANCE_MD),
                        help="the Markdown file to update (default docs/performance.md)")
    parser.add_argument("--no-write", action="store_true", help="print, do not write")
    args = parser.parse_args()
    for protocol in args.protocols.split(","):
        if protocol not in PROTOCOLS:
            parser.error(f"unknown protocol {protocol!r}")
    command = "python benchmarks/perf_compare.py " + " ".join(shlex.quote(a)
                                                               for a in sys.argv[1:])
    if args.results:
        results = json.loads(Path(args.results).read_text())
    else:
        bench = prepare_bench(Path(args.bench).resolve())
        stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
        out = Path(args.out) if args.out else bench / "results" / f"perf-compare-{stamp}.json"
        results = run_harness(bench, args, out)
        print(f"[perf_compare] results: {out}")
    for protocol in args.protocols.split(","):
        section = render(results, protocol, command.strip())
        print("\n" + section)
        if not args.no_write:
            write_protocol_section(Path(args.write), protocol, section)
    if not args.no_write:
        print(f"\n[perf_compare] updated {args.write}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
