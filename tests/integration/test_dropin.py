"""Drop-in: a launch script written for tritonserver runs with infercore in its place.

The script below uses the flags as Triton's documentation spells them. The only change
made to it is the program name: ``tritonserver`` becomes ``infercore serve`` (or bare
``infercore``, which reads a command line that starts with a flag as ``serve``). It then
serves the same repository to the unchanged tritonclient, over HTTP and gRPC, with
metrics on their own port, and stops cleanly on SIGTERM.
"""

from __future__ import annotations

import http.client
import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from sample_models import ADD_SUB_CONFIG, ADD_SUB_PY
from serve_process import ServeProcess

from infercore.testing import RepositoryBuilder

LAUNCH_SCRIPT = """#!/bin/sh
# Start Triton on the model repository; load only add_sub.
exec tritonserver \\
    --model-repository={repository} \\
    --model-control-mode=explicit \\
    --load-model=add_sub \\
    --http-port={http_port} \\
    --grpc-port={grpc_port} \\
    --metrics-port={metrics_port} \\
    --log-verbose=1 \\
    --strict-readiness=true \\
    --exit-timeout-secs=10 \\
    --backend-config=python,shm-default-byte-size=1048576 \\
    --cache-config=local,size=1048576 \\
    --model-load-thread-count=2 \\
    --allow-gpu-metrics=false \\
    --pinned-memory-pool-byte-size=268435456 \\
    --id=triton
"""


def _infercore(subcommand: bool) -> str:
    """How an operator runs infercore: its console script, else ``python -m infercore``."""
    script = Path(sys.executable).parent / "infercore"
    program = [str(script)] if script.exists() else [sys.executable, "-m", "infercore"]
    return shlex.join(program + (["serve"] if subcommand else []))


def _inputs(module: object) -> list:
    a = np.array([[1, 2, 3, 4]], dtype=np.float32)
    b = np.array([[4, 3, 2, 1]], dtype=np.float32)
    tensors = []
    for name, value in (("INPUT0", a), ("INPUT1", b)):
        tensor = module.InferInput(name, [1, 4], "FP32")  # type: ignore[attr-defined]
        tensor.set_data_from_numpy(value)
        tensors.append(tensor)
    return tensors


@pytest.mark.parametrize("subcommand", [True, False], ids=["infercore-serve", "infercore"])
def test_a_tritonserver_launch_script_runs_unchanged(tmp_path, subcommand):
    repo = RepositoryBuilder(tmp_path / "models")
    repo.add_model("add_sub", config=ADD_SUB_CONFIG, model_py=ADD_SUB_PY)
    repo.add_model("spare", config=ADD_SUB_CONFIG.replace('"add_sub"', '"spare"'),
                   model_py=ADD_SUB_PY)

    def launch_script(server: ServeProcess) -> list[str]:
        script = LAUNCH_SCRIPT.format(repository=repo.path, http_port=server.http_port,
                                      grpc_port=server.grpc_port,
                                      metrics_port=server.metrics_port)
        launch = tmp_path / "launch.sh"
        launch.write_text(script.replace("exec tritonserver", "exec " + _infercore(subcommand)))
        return ["/bin/sh", str(launch)]

    server = ServeProcess(tmp_path / "server.log", command=launch_script)
    try:
        server.wait_ready()
        http_client = httpclient.InferenceServerClient(server.http_url)
        grpc_client = grpcclient.InferenceServerClient(server.grpc_url)
        try:
            assert http_client.get_server_metadata()["name"] == "triton"
            result = http_client.infer("add_sub", _inputs(httpclient))
            np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), [[5, 5, 5, 5]])
            result = grpc_client.infer("add_sub", _inputs(grpcclient))
            np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), [[-3, -1, 1, 3]])
            # explicit mode: only the --load-model model is loaded
            index = {m["name"]: m.get("state") for m in
                     http_client.get_model_repository_index()}
            assert index == {"add_sub": "READY", "spare": None}
            assert not grpc_client.is_model_ready("spare")
        finally:
            http_client.close()
            grpc_client.close()
        metrics = http.client.HTTPConnection("127.0.0.1", server.metrics_port,
                                             timeout=10)
        metrics.request("GET", "/metrics")
        response = metrics.getresponse()
        assert response.status == 200
        assert b'nv_inference_request_success{model="add_sub",version="1"} 2' in response.read()
        log = server.log()
        # Triton's startup tables
        assert "| add_sub | 1       | READY  |" in log
        for option, value in (("model_control_mode", "MODE_EXPLICIT"),
                              ("startup_models_0", "add_sub"), ("strict_readiness", "1"),
                              ("exit_timeout", "10"), ("cache_enabled", "1"),
                              ("pinned_memory_pool_byte_size", "268435456")):
            assert any(line.startswith(f"| {option} ") and f"| {value} " in line
                       for line in log.splitlines()), option
    finally:
        status = server.stop()
    assert status == 0, server.log()[-3000:]


def test_the_launch_script_fails_as_tritonserver_does_on_a_typo(tmp_path):
    script = "exec tritonserver --model-repositry=/models --http-port=1\n"
    launch = tmp_path / "launch.sh"
    launch.write_text(script.replace("exec tritonserver", "exec " + _infercore(True)))
    done = subprocess.run(["/bin/sh", str(launch)], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 1
    assert "unrecognized option '--model-repositry=/models'" in done.stderr
