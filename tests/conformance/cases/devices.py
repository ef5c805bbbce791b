"""GPU instance groups, --model-load-gpu-limit and GPU metrics on this host, which has no
GPU: what Triton answers for KIND_GPU, a listed GPU it lacks, KIND_AUTO and the default
group, how its command line takes the load limit, and /metrics without GPUs. (Instances
on GPUs are tested against infercore.testing.FakeDevices in
tests/repository/test_gpu_instances.py, GPU metrics in
tests/observability/test_gpu_metrics.py.)
"""

from __future__ import annotations

from ..case import Case, Grpc, Http, Model, Suite
from ..models import IDENTITY_PY, python_model

AREA = "devices"


def _model(name: str, groups: str) -> Model:
    config = f'''
name: "{name}"
backend: "python"
max_batch_size: 0
input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] }} ]
{groups}
'''
    return python_model(name, config, IDENTITY_PY)


_MODELS = [
    _model("gpu", "instance_group [ { kind: KIND_GPU } ]"),
    _model("gpu_listed", "instance_group [ { kind: KIND_GPU gpus: [ 1 ] count: 2 } ]"),
    _model("auto", "instance_group [ { kind: KIND_AUTO count: 2 } ]"),
    _model("default_group", ""),
    _model("cpu", "instance_group [ { kind: KIND_CPU } ]"),
]


def _infer(name: str) -> Http:
    return Http(
        "POST",
        f"/v2/models/{name}/infer",
        json={
            "inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [2], "data": [1.5, -2.0]}]
        },
    )


def _grpc_infer(name: str) -> Grpc:
    return Grpc(
        "ModelInfer",
        {
            "model_name": name,
            "inputs": [
                {
                    "name": "INPUT0",
                    "datatype": "FP32",
                    "shape": [2],
                    "contents": {"fp32_contents": [1.5, -2.0]},
                }
            ],
        },
    )


_CPU_HOST_CASES = [
    Case("index", [Http("POST", "/v2/repository/index", json={}), Grpc("RepositoryIndex")]),
    Case(
        "ready",
        [
            Http("GET", "/v2/health/ready"),
            Http("GET", "/v2/models/gpu/ready"),
            Http("GET", "/v2/models/auto/ready"),
        ],
    ),
    Case(
        "kind_auto_config",
        [Http("GET", "/v2/models/auto/config"), Http("GET", "/v2/models/default_group/config")],
    ),
    Case(
        "infer_refused_then_served",
        [
            _infer("gpu"),
            _grpc_infer("gpu_listed"),
            _infer("auto"),
            _grpc_infer("default_group"),
            _infer("cpu"),
        ],
    ),
]


def _flags(name: str, *flags: str) -> Suite:
    return Suite(
        f"devices_{name}",
        AREA,
        [_model("cpu", "instance_group [ { kind: KIND_CPU } ]")],
        list(flags),
        startup=True,
    )


def _gpu_metrics(name: str, *flags: str) -> Suite:
    """/metrics on this host without GPUs, served on the cases' HTTP port: no GPU family
    whatever --allow-gpu-metrics says (Triton's log says "DCGM unable to start" with
    true); the CPU families are turned off so the text is the same at every run."""
    return Suite(
        f"devices_{name}",
        AREA,
        flags=[
            "--model-repository={tmp}/models",
            "--grpc-port={grpc_port}",
            "--grpc-address=127.0.0.1",
            "--allow-http=false",
            "--metrics-address=127.0.0.1",
            "--metrics-port={http_port}",
            "--allow-cpu-metrics=false",
            *flags,
        ],
        cases=[Case("metrics_without_gpus", [Http("GET", "/metrics")])],
        ports=False,
        wait_ports=["{http_port}", "{grpc_port}"],
    )


SUITES = [
    Suite(
        "devices_cpu_host",
        AREA,
        _MODELS,
        ["--exit-on-error=false"],
        _CPU_HOST_CASES,
        wait_ready=False,
    ),
    # a load limit refused as tritonserver builds its options
    _flags("gpu_limit_over_one", "--model-load-gpu-limit=0:1.5"),
    _flags("gpu_limit_negative", "--model-load-gpu-limit=0:-0.5"),
    _flags("gpu_limit_negative_device", "--model-load-gpu-limit=-1:0.5"),
    # and taken: the bounds of [0.0, 1.0], NaN (which passes Triton's range check), a
    # device given twice (the first holds), a device this host does not have
    _flags("gpu_limit_zero", "--model-load-gpu-limit=0:0"),
    _flags("gpu_limit_one", "--model-load-gpu-limit=0:1"),
    _flags("gpu_limit_nan", "--model-load-gpu-limit=0:nan"),
    _flags("gpu_limit_repeated", "--model-load-gpu-limit=0:0.5", "--model-load-gpu-limit=0:2"),
    _flags("gpu_limit_absent_device", "--model-load-gpu-limit=7:0.5"),
    # GPU metrics on a host without GPUs: absent, on or off
    _gpu_metrics("gpu_metrics_on", "--pinned-memory-pool-byte-size=0", "--allow-gpu-metrics=true"),
    _gpu_metrics(
        "gpu_metrics_off", "--pinned-memory-pool-byte-size=0", "--allow-gpu-metrics=false"
    ),
    # the pinned pool's gauges without CPU metrics: Triton 2.51 never updates them then,
    # so both read 0 whatever size is asked for (with CPU metrics on, the total reads the
    # size asked for once they are polled: tests/observability/test_metrics.py)
    _gpu_metrics("pinned_pool_default"),
    _gpu_metrics("pinned_pool_sized", "--pinned-memory-pool-byte-size=1048576"),
]
