"""The server's life when its repository cannot be read, as Triton's QA
(qa/L0_lifecycle) starts it: a repository path that does not exist, or that is a file.

With the default ``--exit-on-error=true`` tritonserver stops at once: exit status 1 and
"error: creating server: ..." (``startup_repository_missing`` in startup.py, and
``qa_lifecycle_repository_is_a_file_exits`` here). With ``--exit-on-error=false`` it logs
the error and serves its endpoints anyway, neither live nor ready: health answers 400
(gRPC: false), every model and repository call "Server not ready", while the server's
metadata and the settings endpoints (logging, trace, shared memory) answer as usual. The
cases of each suite end with such a request that is answered.
"""

from __future__ import annotations

from ..case import Case, Grpc, Http, Suite
from ..models import ADD_SUB_JSON, add_sub

AREA = "lifecycle"
# current Triton refuses clients' shared memory by default; 2.51 has no such flag
_SHM = ("--allow-client-shm=true",)


def _flags(repository: str) -> list[str]:
    # the suite names its own repository (ports=False): the harness's would be a second one
    return [f"--model-repository={repository}", "--exit-on-error=false",
            "--http-address=127.0.0.1", "--http-port={http_port}",
            "--grpc-address=127.0.0.1", "--grpc-port={grpc_port}",
            "--metrics-address=127.0.0.1", "--metrics-port={metrics_port}"]


_NOT_INITIALIZED = [
    Case("http_health", [Http("GET", "/v2/health/live"), Http("GET", "/v2/health/ready")]),
    Case("grpc_health", [Grpc("ServerLive"), Grpc("ServerReady")]),
    Case("http_model_calls", [
        Http("GET", "/v2/models/simple/ready"), Http("GET", "/v2/models/simple"),
        Http("GET", "/v2/models/simple/config"),
        Http("POST", "/v2/models/simple/infer", json=ADD_SUB_JSON),
        Http("GET", "/v2/models/simple/stats"), Http("GET", "/v2/models/stats")]),
    Case("http_repository_calls", [
        Http("POST", "/v2/repository/index", json={}),
        Http("POST", "/v2/repository/models/simple/load", json={}),
        Http("POST", "/v2/repository/models/simple/unload", json={})]),
    Case("grpc_model_calls", [
        Grpc("ModelReady", {"name": "simple"}), Grpc("ModelMetadata", {"name": "simple"}),
        Grpc("ModelConfig", {"name": "simple"}), Grpc("ModelStatistics", {"name": ""}),
        Grpc("RepositoryIndex"), Grpc("RepositoryModelLoad", {"model_name": "simple"}),
        Grpc("RepositoryModelUnload", {"model_name": "simple"})]),
    Case("settings_answered", [
        Http("GET", "/v2"), Grpc("ServerMetadata"), Http("GET", "/v2/logging"),
        Http("GET", "/v2/trace/setting"), Http("GET", "/v2/systemsharedmemory/status")]),
]

SUITES = [
    Suite("qa_lifecycle_missing_repository", AREA,
          flags=_flags("{tmp}/nowhere"), cases=_NOT_INITIALIZED, ports=False,
          infercore_flags=_SHM,
          wait_ports=("{http_port}", "{grpc_port}")),
    # a file where the repository should be: the config.pbtxt of the one model written
    Suite("qa_lifecycle_repository_is_a_file", AREA, [add_sub()],
          flags=_flags("{tmp}/models/simple/config.pbtxt"), cases=_NOT_INITIALIZED,
          ports=False, wait_ports=("{http_port}", "{grpc_port}"), infercore_flags=_SHM),
    Suite("qa_lifecycle_repository_is_a_file_exits", AREA, [add_sub()],
          flags=["--model-repository={tmp}/models/simple/config.pbtxt"], startup=True,
          ports=False),
]
