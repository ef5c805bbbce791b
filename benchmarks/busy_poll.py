"""The HTTP frontend's busy polling (``--http-busy-poll-us``), off and on, in one run.

    python benchmarks/busy_poll.py --bench DIR [--window 200] [--rounds 1]
                                   [--write docs/performance.md]

perf_analyzer over HTTP (the bench harness at ``--bench``, set up as its README says) on
the harness's add_sub model, served by ``infercore serve`` with ``--http-busy-poll-us 0``
and with ``--window``, servers alternating per round, for three models that take the
three paths polling distinguishes:

- in-thread: the harness's add_sub as it is; the engine runs it inline on the loop.
- isolated: the same model in a worker process, driven from the loop
  (``infercore.execution_mode: process``).
- a GIL-bound model on instance threads: add_sub that also counts to 20,000 in Python
  (~400 µs a request), 2 instances, answered by instance threads of the server process:
  the case where the loop must not poll (docs/http.md, "Busy polling").

``--write`` puts the table and this command between ``<!-- busy-poll:begin -->`` and
``<!-- busy-poll:end -->`` in the given file (replaced if present, appended otherwise).
"""

from __future__ import annotations

import argparse
import datetime
import platform
import shutil
import sys
import tempfile
from pathlib import Path

from isolation import harness_summary, isolated_add_sub, serve_command
from perf_doc import publish

MARK_BEGIN = "<!-- busy-poll:begin -->"
MARK_END = "<!-- busy-poll:end -->"

# The harness's add_sub, plus a pure-Python count that holds the GIL for ~400 µs.
GIL_BOUND_PY = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            in0 = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            in1 = pb_utils.get_input_tensor_by_name(request, "INPUT1").as_numpy()
            total = 0
            for i in range(20000):
                total += i
            responses.append(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("OUTPUT0", np.add(in0, in1)),
                pb_utils.Tensor("OUTPUT1", np.subtract(in0, in1))]))
        return responses
"""

MODELS = ("in-thread", "isolated", "GIL-bound, 2 instance threads")


def gil_bound_add_sub(bench: Path, root: Path) -> Path:
    """A repository at ``root`` with the GIL-bound add_sub on 2 instances."""
    shutil.copytree(bench / "models" / "triton" / "add_sub", root / "add_sub")
    config = root / "add_sub" / "config.pbtxt"
    config.chmod(0o644)
    config.write_text(config.read_text().replace("count: 1", "count: 2"))
    model = root / "add_sub" / "1" / "model.py"
    model.chmod(0o644)
    model.write_text(GIL_BOUND_PY)
    return root


def run(args: argparse.Namespace) -> dict[tuple[str, int, int], dict[str, object]]:
    """(model, window, concurrency) -> the harness's summary row."""
    bench = Path(args.bench).resolve()
    with tempfile.TemporaryDirectory(prefix="busy-poll-") as scratch:
        repos = {"in-thread": "{repo}",
                 "isolated": str(isolated_add_sub(bench, Path(scratch) / "isolated")),
                 MODELS[2]: str(gil_bound_add_sub(bench, Path(scratch) / "gil"))}
        servers = []
        names = {}
        for index, (model, repo) in enumerate(repos.items()):
            for window in (0, args.window):
                name = f"m{index}-poll{window}"
                names[name] = (model, window)
                servers.append((name, serve_command(repo, "--http-busy-poll-us",
                                                    str(window))))
        rows = harness_summary(bench, servers, args.concurrency, args.rounds, Path(scratch),
                               triton=False)
    return {(*names[str(row["server"])], int(str(row["concurrency"]))): row for row in rows}


def render(cells: dict[tuple[str, int, int], dict[str, object]], args: argparse.Namespace,
           command: str) -> str:
    lines = [
        "## Busy polling in the HTTP frontend",
        "",
        f"Command: `{command}`  ",
        f"Run: {datetime.date.today().isoformat()}, Python {platform.python_version()}, "
        f"perf_analyzer over HTTP on the bench harness's add_sub, {args.rounds} round(s), "
        "servers alternating. infer/s (p50 µs); ratio: polling on / off.",
        "",
        f"| model | concurrency | `--http-busy-poll-us 0` | `{args.window}` | on / off |",
        "|---|---:|---:|---:|---:|",
    ]
    for model in MODELS:
        for concurrency in sorted({c for m, _, c in cells if m == model}):
            off, on = cells.get((model, 0, concurrency)), cells.get(
                (model, args.window, concurrency))
            text = [_figure(off), _figure(on)]
            ratio = "n/a"
            if off and on and off.get("throughput_infer_s") and on.get("throughput_infer_s"):
                value = (float(str(on["throughput_infer_s"]))
                         / float(str(off["throughput_infer_s"])))
                ratio = f"{value:.2f}x"
            lines.append(f"| {model} | {concurrency} | {text[0]} | {text[1]} | {ratio} |")
    lines += ["", "`~`: perf_analyzer did not stabilise (the machine was busy)."]
    return "\n".join(lines)


def _figure(cell: dict[str, object] | None) -> str:
    if cell is None or not cell.get("throughput_infer_s"):
        return "n/a"
    mark = "" if cell.get("all_stable") else "~"
    return f"{mark}{float(str(cell['throughput_infer_s'])):,.0f} ({cell['p50_us']})"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bench", required=True, help="a set-up bench harness")
    parser.add_argument("--window", type=int, default=200, help="µs of polling when on")
    parser.add_argument("--concurrency", default="1,4,16")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--write", type=Path, help="the performance page to update")
    args = parser.parse_args()
    if args.window <= 0:
        parser.error("--window must be positive (0 is the 'off' column already)")
    command = "python benchmarks/busy_poll.py " + " ".join(sys.argv[1:])
    section = render(run(args), args, command.strip())
    publish(section, args.write, MARK_BEGIN, MARK_END)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
