"""Dynamic batching and instance scaling, in-process, on GIL-releasing numpy models.

    python benchmarks/batching.py [--seconds 3] [--write docs/performance.md]

Two experiments, each in its own process, each comparing its models side by side in one
run. BLAS runs single-threaded (its threads would fight the instance and client threads for
the cores), so parallelism comes from instances.

1. Batching: "qgemv" multiplies each request's FP32 [2048] vector by a 2048x2048 weight
   matrix stored as 8-bit codes into a 256-entry codebook and decoded to FP32 once per
   execution, as quantized layers do, so a batch shares that work. Served without
   dynamic batching, with it (each request still answered by the model's loop: the
   unchanged Triton API), and with it plus batch assembly (one matmul for the batch).
2. Instances: "gemm" multiplies each request's [64, 512] matrix by a 512x512 matrix
   (compute-bound), with 1, 2 and 4 instances.

Load: C client threads in the same process, each sending requests back to back for the
given time; figures are requests/s and the median and p99 latency seen by the clients.
"""

from __future__ import annotations

import os
import sys

if "--child" in sys.argv:
    # BLAS threads would fight the instance and client threads for the 2 cores (OpenBLAS
    # spins while waiting): parallelism comes from instances.
    for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[_var] = "1"

import argparse  # noqa: E402
import datetime  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
from perf_doc import write_section  # noqa: E402

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

QUANT_LOOP_MODEL = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        rng = np.random.default_rng(0)
        self.codes = rng.integers(0, 256, ({k}, {n}), dtype=np.uint8)
        self.codebook = rng.standard_normal(256).astype(np.float32)

    def execute(self, requests):
        # 8-bit codebook weights decoded once per execution, as quantized layers do
        weight = self.codebook.take(self.codes)
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("Y", x @ weight)]))
        return responses
"""

QUANT_ASSEMBLED_MODEL = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        rng = np.random.default_rng(0)
        self.codes = rng.integers(0, 256, ({k}, {n}), dtype=np.uint8)
        self.codebook = rng.standard_normal(256).astype(np.float32)

    def execute(self, batch):
        weight = self.codebook.take(self.codes)
        x = pb_utils.get_input_tensor_by_name(batch, "X").as_numpy()
        return pb_utils.InferenceResponse([pb_utils.Tensor("Y", x @ weight)])
"""

ASSEMBLED_MODEL = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        rng = np.random.default_rng(0)
        self.weight = rng.random(({k}, {n}), dtype=np.float32)

    def execute(self, batch):
        # batch assembly: one request-like object holding the whole batch's rows
        x = pb_utils.get_input_tensor_by_name(batch, "X").as_numpy()
        return pb_utils.InferenceResponse([pb_utils.Tensor("Y", x @ self.weight)])
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


def build_repository(root: Path, experiment: str) -> None:
    repo = RepositoryBuilder(root)
    if experiment == "batching":
        loop = QUANT_LOOP_MODEL.format(k=2048, n=2048)
        repo.add_model("qgemv_unbatched", model_py=loop,
                       config=_config("qgemv_unbatched", [2048], [2048], "", 1))
        repo.add_model("qgemv_batched", model_py=loop,
                       config=_config("qgemv_batched", [2048], [2048],
                                      "dynamic_batching { }", 1))
        repo.add_model(
            "qgemv_assembled", model_py=QUANT_ASSEMBLED_MODEL.format(k=2048, n=2048),
            config=_config("qgemv_assembled", [2048], [2048], "dynamic_batching { }", 1,
                           'parameters: { key: "infercore.batch_assembly" '
                           'value: { string_value: "concat" } }'))
        return
    gemm = LOOP_MODEL.format(k=512, n=512)
    for count in (1, 2, 4):
        name = f"gemm_x{count}"
        repo.add_model(name, model_py=gemm, config=_config(name, [64, 512], [64, 512], "", count))


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


def run(experiment: str, seconds: float, levels: list[int]
        ) -> dict[str, dict[int, tuple[float, float, float]]]:
    results: dict[str, dict[int, tuple[float, float, float]]] = {}
    rng = np.random.default_rng(1)
    x = (rng.random((1, 2048), dtype=np.float32) if experiment == "batching"
         else rng.random((1, 64, 512), dtype=np.float32))
    with tempfile.TemporaryDirectory() as tmp:
        build_repository(Path(tmp), experiment)
        with infercore.Server(model_repository=tmp) as server:
            for entry in sorted(server.repository_index(), key=lambda e: e.name):
                model = server.model(entry.name)
                drive(model, x, 2, 0.3)  # warm up
                results[entry.name] = {c: drive(model, x, c, seconds) for c in levels}
                print(entry.name, {c: round(v[0]) for c, v in results[entry.name].items()},
                      file=sys.stderr)
    return results


def run_child(experiment: str, seconds: float, levels: list[int]
              ) -> dict[str, dict[int, tuple[float, float, float]]]:
    """Run one experiment in a fresh process (its BLAS thread count set at start)."""
    out = subprocess.run(
        [sys.executable, __file__, "--child", experiment, "--seconds", str(seconds),
         "--concurrency", ",".join(map(str, levels))],
        check=True, capture_output=True, text=True)
    raw = json.loads(out.stdout)
    return {name: {int(c): tuple(v) for c, v in by_level.items()}  # type: ignore[misc]
            for name, by_level in raw.items()}


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
        f"Run: {datetime.date.today().isoformat()}, client threads in the same process "
        "(see the script's docstring).",
        "",
        "Batching (qgemv: FP32 [2048] x a [2048, 2048] matrix of 8-bit codebook weights "
        "decoded once per execution):",
        "",
        *table(["qgemv_unbatched", "qgemv_batched", "qgemv_assembled"], "qgemv_unbatched"),
        "",
        "Instances (gemm: FP32 [64, 512] x [512, 512] per request, no batching):",
        "",
        *table(["gemm_x1", "gemm_x2", "gemm_x4"], "gemm_x1"),
        MARK_END,
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--concurrency", default="1,4,16,32")
    parser.add_argument("--write", type=Path)
    parser.add_argument("--child", choices=["batching", "instances"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    levels = [int(c) for c in args.concurrency.split(",")]
    if args.child:
        print(json.dumps(run(args.child, args.seconds, levels)))
        return
    results = run_child("batching", args.seconds, levels)
    results.update(run_child("instances", args.seconds, levels))
    command = "python benchmarks/batching.py " + " ".join(sys.argv[1:])
    section = render(results, command.strip(), levels)
    print(section)
    if args.write:
        write_section(args.write, MARK_BEGIN, MARK_END, section)


if __name__ == "__main__":
    main()
