"""Dynamic batching and instance scaling, in-process, on GIL-releasing numpy models.

    python benchmarks/batching.py [--seconds 3] [--write docs/performance.md]

Two experiments, each in one process and one run (compare within it):

1. Batching: "gemv" multiplies each request's FP32 [1024] vector by a 1024x1024 matrix
   (4 MiB: memory-bound, so a batch reads the matrix once for all its rows). Served
   without dynamic batching, with it (each request answered by the model's loop, the
   unchanged Triton API), and with it plus batch assembly (one matmul for the batch).
2. Instances: "gemm" multiplies each request's [64, 256] matrix by a 256x256 matrix
   (compute-bound), with 1, 2 and 4 instances.

BLAS runs single-threaded (OPENBLAS_NUM_THREADS=1 etc., set before numpy loads) so that
parallelism comes from instances, as on a server running several models. Load: C client
threads, each sending requests back to back for the given time; figures are requests/s and
the median and p99 latency seen by the clients.
"""

from __future__ import annotations

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import datetime  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

import infercore  # noqa: E402
from infercore.testing import RepositoryBuilder  # noqa: E402

MARK_BEGIN = "<!-- batching:begin -->"
MARK_END = "<!-- batching:end -->"

LOOP_MODEL = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        rng = np.random.default_rng(0)
        self.weight = rng.random(({k}, {n}), dtype=np.float32)

    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
            responses.append(pb_utils.InferenceResponse(
                [pb_utils.Tensor("Y", x @ self.weight)]))
        return responses
"""

ASSEMBLED_MODEL = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        rng = np.random.default_rng(0)
        self.weight = rng.random(({k}, {n}), dtype=np.float32)

    def execute(self, requests):
        x = pb_utils.get_input_tensor_by_name(requests[0], "X").as_numpy()
        return [pb_utils.InferenceResponse([pb_utils.Tensor("Y", x @ self.weight)])]
"""


def _config(name: str, dims: list[int], out_dims: list[int], batching: str, count: int,
            extra: str = "") -> str:
    return f"""
name: "{name}"
backend: "python"
max_batch_size: 32
input [ {{ name: "X", data_type: TYPE_FP32, dims: {dims} }} ]
output [ {{ name: "Y", data_type: TYPE_FP32, dims: {out_dims} }} ]
instance_group [ {{ count: {count} kind: KIND_CPU }} ]
{batching}
{extra}
"""


def build_repository(root: Path) -> None:
    repo = RepositoryBuilder(root)
    gemv = LOOP_MODEL.format(k=1024, n=1024)
    repo.add_model("gemv_unbatched", model_py=gemv,
                   config=_config("gemv_unbatched", [1024], [1024], "", 1))
    repo.add_model("gemv_batched", model_py=gemv,
                   config=_config("gemv_batched", [1024], [1024], "dynamic_batching { }", 1))
    repo.add_model(
        "gemv_assembled", model_py=ASSEMBLED_MODEL.format(k=1024, n=1024),
        config=_config("gemv_assembled", [1024], [1024], "dynamic_batching { }", 1,
                       'parameters: { key: "infercore.batch_assembly" '
                       'value: { string_value: "concat" } }'))
    gemm = LOOP_MODEL.format(k=256, n=256)
    for count in (1, 2, 4):
        name = f"gemm_x{count}"
        repo.add_model(name, model_py=gemm, config=_config(name, [64, 256], [64, 256], "", count))


def drive(model: infercore.Model, x: np.ndarray, concurrency: int, seconds: float
          ) -> tuple[float, float, float]:
    """(requests/s, p50 ms, p99 ms) with ``concurrency`` client threads."""
    latencies: list[list[int]] = [[] for _ in range(concurrency)]
    start_line = threading.Barrier(concurrency + 1)
    stop_at = [0.0]

    def client(index: int) -> None:
        mine = latencies[index]
        clock = time.perf_counter_ns
        start_line.wait()
        while time.perf_counter() < stop_at[0]:
            begin = clock()
            model.infer(inputs={"X": x}).result()
            mine.append(clock() - begin)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(concurrency)]
    for thread in threads:
        thread.start()
    began = time.perf_counter()
    stop_at[0] = began + seconds
    start_line.wait()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - began
    every = sorted(v for per_client in latencies for v in per_client)
    if not every:
        return 0.0, 0.0, 0.0
    p99 = every[min(len(every) - 1, int(len(every) * 0.99))]
    return len(every) / elapsed, statistics.median(every) / 1e6, p99 / 1e6


def run(seconds: float, levels: list[int]) -> dict[str, dict[int, tuple[float, float, float]]]:
    results: dict[str, dict[int, tuple[float, float, float]]] = {}
    rng = np.random.default_rng(1)
    with tempfile.TemporaryDirectory() as tmp:
        build_repository(Path(tmp))
        with infercore.Server(model_repository=tmp, exit_on_error=False) as server:
            failed = [e for e in server.repository_index() if e.state.value != "READY"]
            for entry in failed:
                print(f"skipping {entry.name}: {entry.reason}", file=sys.stderr)
            ready = {e.name for e in server.repository_index() if e.state.value == "READY"}
            inputs = {"gemv": rng.random((1, 1024), dtype=np.float32),
                      "gemm": rng.random((1, 64, 256), dtype=np.float32)}
            for name in sorted(ready):
                x = inputs[name.split("_")[0]]
                model = server.model(name)
                drive(model, x, 2, 0.3)  # warm up
                results[name] = {c: drive(model, x, c, seconds) for c in levels}
                print(name, {c: round(v[0]) for c, v in results[name].items()},
                      file=sys.stderr)
    return results


def render(results: dict[str, dict[int, tuple[float, float, float]]], command: str,
           levels: list[int]) -> str:
    def table(names: list[str], base: str) -> list[str]:
        head = "| model | " + " | ".join(f"c={c} infer/s (p50 ms)" for c in levels) + \
               f" | c={levels[-2]} vs {base} |"
        rows = [head, "|---|" + "---:|" * (len(levels) + 1)]
        for name in names:
            if name not in results:
                continue
            cells = [f"{results[name][c][0]:,.0f} ({results[name][c][1]:.2f})" for c in levels]
            ratio_level = levels[-2]
            ratio = results[name][ratio_level][0] / results[base][ratio_level][0] \
                if base in results else float("nan")
            rows.append(f"| {name} | " + " | ".join(cells) + f" | {ratio:.2f}x |")
        return rows

    lines = [
        MARK_BEGIN,
        "## Dynamic batching and instances (in-process, numpy models)",
        "",
        f"Command: `{command}`  ",
        f"Run: {datetime.date.today().isoformat()}, single-threaded BLAS, client threads in "
        "the same process (see the script's docstring).",
        "",
        "Batching (gemv: FP32 [1024] x [1024, 1024] per request):",
        "",
        *table(["gemv_unbatched", "gemv_batched", "gemv_assembled"], "gemv_unbatched"),
        "",
        "Instances (gemm: FP32 [64, 256] x [256, 256] per request, no batching):",
        "",
        *table(["gemm_x1", "gemm_x2", "gemm_x4"], "gemm_x1"),
        MARK_END,
    ]
    return "\n".join(lines)


def write_section(path: Path, section: str) -> None:
    text = path.read_text() if path.exists() else "# Performance\n"
    if MARK_BEGIN in text and MARK_END in text:
        head, rest = text.split(MARK_BEGIN, 1)
        text = head + section + rest.split(MARK_END, 1)[1]
    else:
        text = text.rstrip() + "\n\n" + section + "\n"
    path.write_text(text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--concurrency", default="1,4,16,32")
    parser.add_argument("--write", type=Path)
    args = parser.parse_args()
    levels = [int(c) for c in args.concurrency.split(",")]
    results = run(args.seconds, levels)
    command = "python benchmarks/batching.py " + " ".join(sys.argv[1:])
    section = render(results, command.strip(), levels)
    print(section)
    if args.write:
        write_section(args.write, section)


if __name__ == "__main__":
    main()
