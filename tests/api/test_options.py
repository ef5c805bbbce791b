"""Options: every server flag of the command line has a field, validated when made."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from sample_models import gated_identity_model, install_gate

from infercore import (
    InternalError,
    InvalidArgumentError,
    LogFormat,
    ModelControlMode,
    ModelLoadDeviceLimit,
    Options,
    RateLimiterResource,
    RateLimitMode,
    Server,
    TraceConfig,
    UnavailableError,
)
from infercore.cli import build_parser

# Each flag of `infercore serve` that configures the server (not a network frontend) ->
# the Options field it sets. A new flag without an entry here fails the test below.
FLAG_FIELDS = {
    "server_id": "server_id",
    "exit_timeout_secs": "exit_timeout",
    "log_verbose": "log_verbose",
    "log_info": "log_info",
    "log_warning": "log_warn",
    "log_error": "log_error",
    "log_format": "log_format",
    "log_file": "log_file",
    "model_repository": "model_repository",
    "exit_on_error": "exit_on_error",
    "disable_auto_complete_config": "strict_model_config",
    "strict_model_config": "strict_model_config",
    "strict_readiness": "strict_readiness",
    "readiness_policy": "readiness_policy",
    "model_control_mode": "model_control_mode",
    "repository_poll_secs": "repository_poll_secs",
    "load_model": "startup_models",
    "model_config_name": "model_config_name",
    "model_load_thread_count": "model_load_thread_count",
    "model_load_retry_count": "model_load_retry_count",
    "model_namespacing": "model_namespacing",
    "enable_peer_access": "enable_peer_access",
    "ray_address": "ray_address",
    "allow_metrics": "metrics",
    "allow_gpu_metrics": "gpu_metrics",
    "allow_cpu_metrics": "cpu_metrics",
    "metrics_interval_ms": "metrics_interval",
    "metrics_config": "metrics_configuration",
    "trace_config": "trace_config",
    "trace_file": "trace_config",
    "trace_level": "trace_config",
    "trace_rate": "trace_config",
    "trace_count": "trace_config",
    "trace_log_frequency": "trace_config",
    "backend_directory": "backend_directory",
    "backend_config": "backend_configuration",
    "repoagent_directory": "repo_agent_directory",
    "cache_config": "cache_config",
    "response_cache_byte_size": "cache_config",
    "cache_directory": "cache_directory",
    "rate_limit": "rate_limiter_mode",
    "rate_limit_resource": "rate_limiter_resources",
    "host_policy": "host_policies",
    "pinned_memory_pool_byte_size": "pinned_memory_pool_size",
    "cuda_memory_pool_byte_size": "cuda_memory_pool_sizes",
    "cuda_virtual_address_size": "cuda_virtual_address_sizes",
    "min_supported_compute_capability": "min_supported_compute_capability",
    "buffer_manager_thread_count": "buffer_manager_thread_count",
    "model_load_gpu_limit": "model_load_device_limits",
}
# Flags of the network frontends: Server.serve_http / serve_grpc / serve_metrics take them.
# groups of the process, not of the Server: its frontends, and the supervisor around it
FRONTEND_GROUPS = {"HTTP", "GRPC", "Sagemaker", "Vertex", "Shared Memory", "Supervisor"}
FRONTEND_FLAGS = {"metrics_address", "metrics_port", "help"}


def serve_flags() -> list[str]:
    parser = build_parser()
    serve = next(action for action in parser._subparsers._group_actions).choices["serve"]
    return [action.dest for group in serve._action_groups
            if group.title not in FRONTEND_GROUPS for action in group._group_actions
            if action.dest not in FRONTEND_FLAGS]


def test_every_server_flag_of_the_command_line_has_an_options_field():
    fields = set(Options.__dataclass_fields__)
    missing = [flag for flag in serve_flags() if flag not in FLAG_FIELDS]
    assert missing == [], f"flags without an Options field: {missing}"
    assert {FLAG_FIELDS[flag] for flag in serve_flags()} <= fields


def test_defaults_are_tritonservers():
    options = Options()
    assert (options.server_id, options.exit_timeout, options.model_load_thread_count) == (
        "triton", 30, 4)
    assert options.model_control_mode is ModelControlMode.NONE
    assert options.rate_limiter_mode is RateLimitMode.OFF
    assert options.pinned_memory_pool_size == 1 << 28
    assert options.strict_readiness and options.exit_on_error and options.metrics
    assert options.trace_config == TraceConfig()


def test_values_are_normalised_to_one_form():
    options = Options(
        model_repository="models", model_control_mode="EXPLICIT", startup_models="add_sub",
        rate_limiter_mode="execution_count", log_file=None, log_verbose=True,
        log_format=LogFormat.ISO8601, backend_directory="plugins",
        cache_config={"local": {"size": 1024}},
        backend_configuration={"python": {"shm-default-byte-size": 4096, "flag": True}},
        trace_config=["level=TIMESTAMPS", "rate=1", "triton,file=/tmp/t.json"])
    assert options.repositories == (Path("models"),)
    assert options.model_control_mode is ModelControlMode.EXPLICIT
    assert options.startup_models == ("add_sub",)
    assert options.rate_limiter_mode is RateLimitMode.EXEC_COUNT
    assert (options.log_file, options.log_verbose, options.log_format) == ("", 1, "ISO8601")
    assert options.backend_directory == ("plugins",)
    assert options.cache_config == {"local": {"size": "1024"}}
    assert options.backend_configuration == {
        "python": {"shm-default-byte-size": "4096", "flag": "true"}}
    assert options.trace_config == TraceConfig(level=("TIMESTAMPS",), rate=1,
                                               file="/tmp/t.json")
    assert Options(trace_config={"level": "TENSORS", "rate": 5}).trace_config == TraceConfig(
        level=("TENSORS",), rate=5)


def test_caller_collections_are_copied():
    policies = {"pinned": {"cpu-cores": "0"}}
    options = Options(host_policies=policies)
    policies["pinned"]["cpu-cores"] = "1"
    assert options.host_policies == {"pinned": {"cpu-cores": "0"}}


@pytest.mark.parametrize(("fields", "message"), [
    ({"model_control_mode": "sometimes"}, "invalid model_control_mode 'sometimes'"),
    ({"rate_limiter_mode": "fast"}, "invalid rate_limiter_mode 'fast'"),
    ({"exit_timeout": -1}, "exit_timeout must be >= 0 seconds"),
    ({"exit_timeout": "30"}, "exit_timeout must be an integer"),
    ({"model_load_thread_count": 0}, "model_load_thread_count must be >= 1"),
    ({"model_load_retry_count": True}, "model_load_retry_count must be an integer"),
    ({"strict_model_config": "yes"}, "strict_model_config must be True or False"),
    ({"repository_poll_secs": -1}, "repository_poll_secs must be >= 0"),
    ({"log_verbose": -1}, "log_verbose must be >= 0"),
    ({"log_format": "xml"}, "invalid log_format 'xml'"),
    ({"metrics_interval": 0}, "metrics_interval must be >= 1 milliseconds"),
    ({"server_id": 7}, "server_id must be a string"),
    ({"pinned_memory_pool_size": -1}, "pinned_memory_pool_size must be >= 0"),
    ({"cuda_memory_pool_sizes": {0: -5}}, "the size of device 0"),
    ({"min_supported_compute_capability": -1.0}, "min_supported_compute_capability"),
    ({"model_repository": [""]}, "model_repository entries must be non-empty paths"),
    ({"model_repository": 5}, "model_repository must be a path"),
    ({"rate_limiter_resources": [("R", 1)]}, "must be a list of RateLimiterResource"),
    ({"host_policies": {"pinned": "0-1"}}, "host_policies must map names to"),
    ({"backend_configuration": {"python": {"k": None}}}, "invalid backend_configuration"),
    ({"cache_config": {"local": {"size": "-3"}}}, "it cannot be negative"),
    ({"cache_config": {"local": {}}}, "the local cache needs a size"),
    ({"metrics_configuration": {"": {"summary_latencies": "maybe"}}},
     "summary_latencies must be true or false"),
    ({"trace_config": ["level=LOUD"]}, "invalid value for trace level option: loud"),
    ({"trace_config": {"rate": -1}}, "trace rate must be an integer in"),
    ({"trace_config": {"speed": 1}}, "unknown trace_config setting 'speed'"),
    ({"trace_config": {"batch": {"bsp_max_queue_size": 0}}}, "must be a positive integer"),
    ({"trace_config": 42}, "trace_config must be a TraceConfig"),
    ({"model_load_device_limits": [ModelLoadDeviceLimit("GPU", 0, 0.5), "0:1"]},
     "must be a list of ModelLoadDeviceLimit"),
])
def test_bad_values_are_refused_when_the_options_are_made(fields, message):
    with pytest.raises(InvalidArgumentError, match=message):
        Options(**fields)


@pytest.mark.parametrize(("make", "message"), [
    (lambda: RateLimiterResource(b"R", 1), "name must be a string"),
    (lambda: RateLimiterResource("R", -1), "count of rate limiter resource 'R'"),
    # Triton's words (TRITONSERVER_ServerOptionsSetModelLoadDeviceLimit)
    (lambda: ModelLoadDeviceLimit("GPU", 0, 1.5),
     r"expects limit fraction to be in range \[0.0, 1.0\], got 1.500000"),
    (lambda: ModelLoadDeviceLimit("GPU", 0, -0.5), r"in range \[0.0, 1.0\], got -0.500000"),
    (lambda: ModelLoadDeviceLimit("GPU", -1, 0.5), "expects device ID >= 0, got -1"),
    (lambda: ModelLoadDeviceLimit("CPU", 0, 0.5), "GPU devices only"),
])
def test_option_values_check_themselves(make, message):
    with pytest.raises(InvalidArgumentError, match=message):
        make()


def test_the_installation_and_the_file_system_are_checked_later(tmp_path):
    options = Options(model_repository=tmp_path / "missing",
                      cache_config={"redis": {"host": "h"}})  # made: fine
    with pytest.raises(InvalidArgumentError, match="unsupported cache implementation 'redis'"):
        Server(options)
    server = Server(Options(model_repository=tmp_path / "missing"))
    with pytest.raises(InternalError, match="failed to stat file"):
        server.start()
    (tmp_path / "models").mkdir()
    server = Server(model_repository=tmp_path / "models", model_control_mode="explicit",
                    startup_models=["*", "add_sub"])
    with pytest.raises(InvalidArgumentError, match="Wildcard model name '\\*' must be the ONLY"):
        server.start()
    server.stop()


@pytest.mark.parametrize("kind", ["missing", "a_file"])
def test_without_exit_on_error_an_unreadable_repository_serves_neither_live_nor_ready(
        tmp_path, kind):
    path = tmp_path / "models"
    if kind == "a_file":
        path.write_text("not a folder")
    server = Server(model_repository=path, exit_on_error=False)
    try:
        assert server.start() is server  # no raise: Triton's "failed to initialize"
        assert not server.live() and not server.ready()
        assert type(server.initialization_failure) is (
            InternalError if kind == "missing" else InvalidArgumentError)
        calls = [lambda: server.model("simple").ready(), lambda: server.model("simple").metadata(),
                 lambda: server.model("simple").statistics(), server.repository_index,
                 server.statistics, server.models,
                 lambda: server.model("simple").infer({"X": np.zeros(1, np.float32)})]
        for call in calls:
            with pytest.raises(UnavailableError, match="^Server not ready$"):
                call()
        assert server.metadata()["name"] == "triton"  # the server's own calls answer
        assert server.log_settings()["log_verbose_level"] == 0
    finally:
        server.stop()
    with pytest.raises(InvalidArgumentError if kind == "a_file" else InternalError,
                       match="repository path is not a valid directory$|failed to stat"):
        Server(model_repository=path).start()  # exit_on_error: start raises


def test_a_backend_directory_registers_its_backends_at_start(repo, tmp_path):
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "doubler.py").write_text(DOUBLER_BACKEND)
    repo.add_model("double", config=DOUBLE_CONFIG)
    with Server(model_repository=repo.path, backend_directory=str(plugins)) as server:
        result = server.model("double").infer({"X": np.array([1.5, 2.0], np.float32)}).result()
        assert result.outputs["Y"].to_numpy().tolist() == [3.0, 4.0]


DOUBLE_CONFIG = """
name: "double"
backend: "doubler"
max_batch_size: 0
input [ { name: "X", data_type: TYPE_FP32, dims: [ 2 ] } ]
output [ { name: "Y", data_type: TYPE_FP32, dims: [ 2 ] } ]
"""

DOUBLER_BACKEND = """
from infercore import DataType, Tensor


class _Instance:
    def execute(self, payload):
        for request in payload.requests:
            x = request.inputs["X"].to_numpy()
            request.sender.send({"Y": Tensor(DataType.FP32, x * 2)})

    def finalize(self):
        pass


class _Model:
    def create_instance(self, info):
        return _Instance()

    def finalize(self):
        pass


class _Backend:
    name = "doubler"
    supports_batching = False

    def auto_complete_config(self, config, model_dir, version_dir):
        pass

    def create_model(self, context):
        return _Model()


def create_backend(settings):
    return _Backend()
"""


# -- set_exit_timeout ----------------------------------------------------------------------
GATE_CONFIG, GATE_PY = gated_identity_model("api_options_gate")


@pytest.fixture
def gate(monkeypatch):
    module = install_gate(monkeypatch, "api_options_gate")
    yield module
    module.release.set()


def _inside_the_gate(repo, gate, exit_timeout: float) -> tuple[Server, Any]:
    """A started server and the stream of a request now inside the gate model's execute."""
    repo.add_model("gate", config=GATE_CONFIG, model_py=GATE_PY)
    server = Server(model_repository=repo.path, exit_timeout=exit_timeout).start()
    stream = server.model("gate").infer({"X": np.array([1.0], np.float32)},
                                        raise_on_error=False)
    assert gate.entered.wait(30)
    return server, stream


def test_set_exit_timeout_replaces_the_option_for_the_next_stop(repo, gate):
    server, stream = _inside_the_gate(repo, gate, 600)
    server.set_exit_timeout(0)
    assert server.exit_timeout == 0.0 and server.options.exit_timeout == 600
    stopper = threading.Thread(target=server.stop)
    stopper.start()
    try:
        # With 600 s the request would be waited for; with 0 it is failed at once, while
        # the model is still inside execute.
        response = stream.result(30)
        assert not gate.release.is_set()
        assert isinstance(response.error, UnavailableError)
        assert "unloaded before the request completed" in str(response.error)
    finally:
        gate.release.set()
        stopper.join(60)
    assert not server.live()


def test_stop_does_not_wait_for_an_execute_that_outlives_the_exit_timeout(repo, gate):
    server, stream = _inside_the_gate(repo, gate, 0)
    stopper = threading.Thread(target=server.stop)
    stopper.start()
    try:
        # The model ignores cancellation and stays in execute for up to 60 s; the stop
        # gives it the exit timeout and a second of grace, not finalize's own 30 s.
        stopper.join(20)
        assert not stopper.is_alive()
        assert not gate.release.is_set()
        assert isinstance(stream.result(5).error, UnavailableError)
    finally:
        gate.release.set()
        stopper.join(60)


@pytest.mark.parametrize("seconds", [-1, "5", None, True, float("nan")])
def test_set_exit_timeout_refuses_what_is_not_seconds(add_sub_repo, seconds):
    server = Server(model_repository=add_sub_repo.path)
    with pytest.raises(InvalidArgumentError, match="exit timeout must be a number"):
        server.set_exit_timeout(seconds)
    assert server.exit_timeout == 30.0
