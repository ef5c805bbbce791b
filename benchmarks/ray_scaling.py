"""One local instance against two instances on Ray on two "nodes" of this machine (issue 10).

    python benchmarks/ray_scaling.py [--seconds 4] [--rounds 3] [--write docs/performance.md]

A Ray cluster of two nodes is started on this machine (``ray.cluster_utils.Cluster``: a head
node offering the custom resource ``node_a``, a worker node offering ``node_b``, one CPU
each), and one in-process server joins it.

Throughput: a CPU-heavy pure-Python model (a loop of ``--loop`` iterations per request,
    holding the GIL all along, the model of benchmarks/isolation.py) with 1 local instance
    against 2 instances on Ray (one actor on each node, ``num_cpus`` 1), driven by 4
    in-process client threads (``infer().result()``) for ``--seconds`` per round; modes
    alternate within each round, the figure is the median over rounds. The local instance
    runs on one core; the actors run in their own processes, one per node.
Overhead: the median latency of one request (sync, one client, ``--calls`` calls) to a
    model returning its inputs, with 1 local instance and with 1 instance on Ray, for a
    small tensor (FP32 [1,16], carried inside the Ray call) and a 1 MiB one (through Ray's
    object store): what a Ray call adds to a request.

``--write`` puts the figures and this command between ``<!-- ray_scaling:begin -->`` and
``<!-- ray_scaling:end -->`` in the given file (replaced if present, appended otherwise).
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import sys
import tempfile
from pathlib import Path

import isolation
import numpy as np
from isolation import CLIENTS, CPU_PY
from perf_doc import publish

from infercore import Server
from infercore.testing import RepositoryBuilder

MARK_BEGIN = "<!-- ray_scaling:begin -->"
MARK_END = "<!-- ray_scaling:end -->"
STORE_BYTES = 200 * 1024 * 1024
SMALL = (1, 16)
LARGE = (1, 256 * 1024)  # FP32: 1 MiB

CPU_CONFIG = """
name: "{name}"
backend: "python"
input [ {{ name: "N", data_type: TYPE_INT64, dims: [ 1 ] }} ]
output [ {{ name: "OUT", data_type: TYPE_INT64, dims: [ 1 ] }} ]
instance_group [ {groups} ]
{extra}
"""


ECHO_CONFIG = """
name: "{name}"
backend: "python"
input [ {{ name: "X", data_type: TYPE_FP32, dims: [ 1, -1 ] }} ]
output [ {{ name: "Y", data_type: TYPE_FP32, dims: [ 1, -1 ] }} ]
instance_group [ {groups} ]
{extra}
"""

ECHO_PY = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor(
                    "Y", pb_utils.get_input_tensor_by_name(request, "X").as_numpy())])
                for request in requests]
"""


def _on_ray(groups: dict[str, str], num_cpus: int) -> tuple[str, str]:
    """instance_group entries and their placement parameters, one instance per group."""
    entries = ", ".join(f'{{ name: "{g}", count: 1, kind: KIND_CPU }}' for g in groups)
    parameters = "\n".join(
        f'parameters {{ key: "infercore.ray.{g}" value {{ string_value: '
        f"'{{\"num_cpus\": {num_cpus}, \"resources\": {{\"{node}\": 1}}, "
        f"\"start_timeout_s\": 60}}' }} }}"
        for g, node in groups.items())
    return entries, parameters


LOCAL = ("{ count: 1, kind: KIND_CPU }", "")


def build_repository(root: Path) -> RepositoryBuilder:
    repo = RepositoryBuilder(root)
    for name, (groups, extra) in (("cpu_local", LOCAL),
                                  ("cpu_ray", _on_ray({"a": "node_a", "b": "node_b"}, 1))):
        repo.add_model(name, config=CPU_CONFIG.format(name=name, groups=groups, extra=extra),
                       model_py=CPU_PY)
    # the echo actor asks for no CPU: the CPU-heavy actors hold each node's one CPU
    for name, (groups, extra) in (("echo_local", LOCAL),
                                  ("echo_ray", _on_ray({"b": "node_b"}, 0))):
        repo.add_model(name, config=ECHO_CONFIG.format(name=name, groups=groups, extra=extra),
                       model_py=ECHO_PY)
    return repo


def throughput(server: Server, model: str, loop: int, seconds: float) -> float:
    # one warm request per client: each Ray actor's first call is slow
    return isolation.throughput(server, model, loop, seconds, warm=CLIENTS)


def run(args: argparse.Namespace) -> dict[str, object]:
    import ray
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 1, "resources": {"node_a": 2}, "object_store_memory": STORE_BYTES})
    cluster.add_node(num_cpus=1, resources={"node_b": 2}, object_store_memory=STORE_BYTES)
    cluster.wait_for_nodes()
    try:
        with tempfile.TemporaryDirectory(prefix="ray-bench-") as scratch:
            repo = build_repository(Path(scratch) / "models")
            with Server(model_repository=repo.path, ray_address=cluster.address,
                        log_info=False) as server:
                rounds: dict[str, list[float]] = {"cpu_local": [], "cpu_ray": []}
                for _ in range(args.rounds):
                    for model in rounds:
                        rounds[model].append(throughput(server, model, args.loop,
                                                        args.seconds))
                latency = {(model, size): isolation.latency_us(
                               server, model, {"X": np.ones(shape, np.float32)}, args.calls)
                           for size, shape in (("small", SMALL), ("1 MiB", LARGE))
                           for model in ("echo_local", "echo_ray")}
    finally:
        ray.shutdown()
        cluster.shutdown()
    return {"rounds": rounds, "latency": latency, "ray": ray.__version__}


def render(results: dict[str, object], args: argparse.Namespace, command: str) -> str:
    rounds: dict[str, list[float]] = results["rounds"]  # type: ignore[assignment]
    latency: dict[tuple[str, str], float] = results["latency"]  # type: ignore[assignment]
    local = statistics.median(rounds["cpu_local"])
    remote = statistics.median(rounds["cpu_ray"])
    load = ", ".join(f"{value:.2f}" for value in os.getloadavg())
    lines = [
        "## Instances on Ray: 1 local instance vs 2 on two Ray nodes (issue 10)",
        "",
        f"Command: `{command}`  ",
        f"Run: {datetime.date.today().isoformat()}, Python {platform.python_version()}, "
        f"Ray {results['ray']}, {os.cpu_count()} cores, load average before the run "
        f"{args.load_before}, after {load}. The two Ray nodes are processes of this machine "
        "(`ray.cluster_utils.Cluster`, one CPU each).",
        "",
        f"**CPU-heavy pure-Python model, {CLIENTS} in-process clients** (a "
        f"{args.loop:,}-iteration Python loop per request; {args.seconds:g} s per mode per "
        f"round, median of {args.rounds} rounds):",
        "",
        "| instances | requests/s | rounds |",
        "|---|---:|---|",
        f"| 1 local (in the server) | {local:.1f} | "
        + ", ".join(f"{value:.1f}" for value in rounds["cpu_local"]) + " |",
        f"| 2 on Ray (one actor per node) | {remote:.1f} | "
        + ", ".join(f"{value:.1f}" for value in rounds["cpu_ray"]) + " |",
        "",
        f"2 on Ray / 1 local: **{remote / local:.2f}x**.",
        "",
        f"**Per-request overhead**: median latency of one request to a model returning its "
        f"input (sync, one client, {args.calls} calls), 1 instance:",
        "",
        "| input | local (µs) | on Ray (µs) | Ray adds (µs) |",
        "|---|---:|---:|---:|",
    ]
    for size, shape in (("small", SMALL), ("1 MiB", LARGE)):
        here, there = latency[("echo_local", size)], latency[("echo_ray", size)]
        lines.append(f"| FP32 {list(shape)} ({size}) | {here:.0f} | {there:.0f} | "
                     f"+{there - here:.0f} |")
    lines += [
        "",
        "A small input rides inside the Ray call; a 1 MiB one is put in the object store "
        "once and its result comes back through it (docs/ray.md, \"Tensors\").",
    ]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--loop", type=int, default=200_000)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--write", type=Path, help="the performance page to update")
    args = parser.parse_args()
    args.load_before = ", ".join(f"{value:.2f}" for value in os.getloadavg())
    results = run(args)
    command = "python benchmarks/ray_scaling.py " + " ".join(sys.argv[1:])
    section = render(results, args, command.strip())
    publish(section, args.write, MARK_BEGIN, MARK_END)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
