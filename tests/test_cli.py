"""The command line: every tritonserver flag, its usage errors, the startup tables, and
``infercore serve`` as a real process."""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from infercore import Options, Server, cli
from infercore.cli import (
    build_parser,
    deprecation_warnings,
    examples_repository,
    normalize_argv,
    options_from_args,
    serve_extras,
)
from infercore.errors import InvalidArgumentError
from infercore.frontends import metrics as metrics_frontend
from infercore.frontends import sagemaker, vertex_ai
from infercore.frontends.grpc import server as grpc_frontend
from infercore.frontends.http import server as http_frontend
from infercore.frontends.restricted import Restriction
from infercore.launch import (
    TABLE_WIDTH,
    ServeExtras,
    format_table,
    model_table,
    options_table,
    serving_line,
)
from infercore.options import ModelControlMode, RateLimitMode
from infercore.repository.states import ModelIndexEntry, ModelState

REPO_ROOT = Path(__file__).resolve().parents[1]


def parse(*flags: str):
    return build_parser().parse_args(["serve", *flags])


def options(*flags: str) -> Options:
    return options_from_args(parse(*flags))


# -- flags -> Options ------------------------------------------------------------------------
def test_serve_defaults_are_tritonservers():
    opts = options()
    assert opts.repositories == (examples_repository(),)
    assert (examples_repository() / "add_sub" / "config.pbtxt").is_file()
    assert (opts.server_id, opts.model_control_mode, opts.exit_timeout) == (
        "triton", ModelControlMode.NONE, 30)
    assert opts.strict_readiness and opts.exit_on_error and not opts.strict_model_config
    assert (opts.model_load_thread_count, opts.model_load_retry_count) == (4, 0)
    assert opts.repository_poll_secs == 15.0 and not opts.model_namespacing
    assert opts.cache_config == {} and opts.rate_limiter_mode is RateLimitMode.OFF
    assert (opts.log_verbose, opts.log_info, opts.log_warn, opts.log_error) == (0, True, True,
                                                                                 True)


# (flags, Options attribute, expected value): each flag in both spellings tritonserver takes
FLAG_TABLE = [
    (["--model-repository=/a", "--model-store", "/b", "--model-repository=/a"],
     "repositories", (Path("/a"), Path("/b"))),
    (["--id=edge-1"], "server_id", "edge-1"),
    (["--exit-timeout-secs", "7"], "exit_timeout", 7),
    (["--exit-timeout-secs=-3"], "exit_timeout", 0),
    (["--model-control-mode=EXPLICIT"], "model_control_mode", ModelControlMode.EXPLICIT),
    (["--model-control-mode", "poll"], "model_control_mode", ModelControlMode.POLL),
    (["--model-control-mode=explicit", "--load-model=a", "--load-model", "b",
      "--load-model=a"], "startup_models", ("a", "b")),
    (["--model-control-mode=explicit", "--load-model=*"], "startup_models", ("*",)),
    (["--repository-poll-secs=2"], "repository_poll_secs", 2.0),
    (["--strict-model-config=true"], "strict_model_config", True),
    (["--disable-auto-complete-config"], "strict_model_config", True),
    (["--strict-model-config=false", "--disable-auto-complete-config"],
     "strict_model_config", True),
    (["--model-config-name=h100"], "model_config_name", "h100"),
    (["--strict-readiness=false"], "strict_readiness", False),
    (["--strict-readiness", "OFF"], "strict_readiness", False),
    (["--exit-on-error=0"], "exit_on_error", False),
    (["--model-load-thread-count=2"], "model_load_thread_count", 2),
    (["--model-load-retry-count", "3"], "model_load_retry_count", 3),
    (["--model-namespacing=true"], "model_namespacing", True),
    (["--log-verbose=2"], "log_verbose", 2),
    (["--log-verbose=true"], "log_verbose", 1),
    (["--log-info=false"], "log_info", False),
    (["--log-warning", "false"], "log_warn", False),
    (["--log-error=off"], "log_error", False),
    (["--log-format=ISO8601"], "log_format", "ISO8601"),
    (["--log-file=/tmp/infercore.log"], "log_file", "/tmp/infercore.log"),
    (["--rate-limit=EXECUTION_COUNT"], "rate_limiter_mode", RateLimitMode.EXEC_COUNT),
    (["--cache-config=local,size=1048576"], "cache_config", {"local": {"size": "1048576"}}),
    (["--cache-config", "local,size=10", "--cache-config=redis,host=h"], "cache_config",
     {"local": {"size": "10"}, "redis": {"host": "h"}}),
    (["--response-cache-byte-size=4096"], "cache_config", {"local": {"size": "4096"}}),
    (["--backend-config=python,shm-default-byte-size=1024", "--backend-config=x=1"],
     "backend_configuration", {"python": {"shm-default-byte-size": "1024"}, "": {"x": "1"}}),
    (["--host-policy=pinned,cpu-cores=0-1", "--host-policy", "pinned,numa-node=0"],
     "host_policies", {"pinned": {"cpu-cores": "0-1", "numa-node": "0"}}),
    (["--allow-metrics=false"], "metrics", False),
    (["--allow-cpu-metrics=false"], "cpu_metrics", False),
    (["--metrics-interval-ms=500"], "metrics_interval", 500),
]


@pytest.mark.parametrize("flags, attribute, expected", FLAG_TABLE,
                         ids=[" ".join(f) for f, _, _ in FLAG_TABLE])
def test_each_flag_reaches_its_option(flags, attribute, expected):
    assert getattr(options(*flags), attribute) == expected


def test_rate_limit_resources():
    opts = options("--rate-limit-resource=R:4", "--rate-limit-resource", "G:2:1")
    assert [(r.name, r.count, r.device) for r in opts.rate_limiter_resources] == [
        ("R", 4, -1), ("G", 2, 1)]


def test_trace_flags_and_their_deprecated_spellings():
    trace = options("--trace-config", "level=TIMESTAMPS", "--trace-config", "rate=10",
                    "--trace-config", "triton,file=/tmp/trace.json").trace_config
    assert (trace.level, trace.rate, trace.file) == (("TIMESTAMPS",), 10, "/tmp/trace.json")
    old = options("--trace-file=/tmp/t.json", "--trace-level=max", "--trace-rate=5",
                  "--trace-count=9", "--trace-log-frequency=3").trace_config
    assert (old.level, old.rate, old.count, old.file, old.log_frequency) == (
        ("TIMESTAMPS",), 5, 9, "/tmp/t.json", 3)
    # --trace-config wins over the deprecated flags, as in tritonserver
    assert options("--trace-rate=5", "--trace-config=rate=7").trace_config.rate == 7


def test_deprecated_flags_warn_as_tritonserver():
    warnings = deprecation_warnings(parse("--strict-model-config=false",
                                          "--disable-auto-complete-config",
                                          "--response-cache-byte-size=8", "--trace-rate=1"))
    assert warnings[0].startswith("Warning: '--strict-model-config' has been deprecated!")
    assert "Overriding deprecated '--strict-model-config' from False to True" in warnings[1]
    assert "'--cache-config=local,size=8'" in warnings[2]
    assert warnings[3].startswith("Warning: '--trace-rate' has been deprecated")
    assert deprecation_warnings(parse()) == []


def test_gpu_flags_are_accepted_and_only_shown():
    args = parse("--pinned-memory-pool-byte-size=1024", "--cuda-memory-pool-byte-size=0:64",
                 "--cuda-memory-pool-byte-size", "1:128", "--min-supported-compute-capability=7.5",
                 "--cuda-virtual-address-size=0:1024", "--buffer-manager-thread-count=2",
                 "--model-load-gpu-limit=0:0.5", "--cache-directory=/opt/caches",
                 "--repoagent-directory=/opt/agents", "--allow-gpu-metrics=false",
                 "--grpc-infer-allocation-pool-size=8")
    extras = serve_extras(args)
    assert (extras.pinned_memory_pool_byte_size, extras.cuda_memory_pool_byte_size,
            extras.min_supported_compute_capability) == (1024, ((0, 64), (1, 128)), 7.5)
    opts = options_from_args(args)  # none of them is an error; the Options keep them
    assert (opts.pinned_memory_pool_size, opts.cuda_memory_pool_sizes,
            opts.cuda_virtual_address_sizes) == (1024, {0: 64, 1: 128}, {0: 1024})
    assert (opts.buffer_manager_thread_count, opts.cache_directory,
            opts.repo_agent_directory) == (2, "/opt/caches", "/opt/agents")
    assert [(limit.device, limit.fraction) for limit in opts.model_load_device_limits] == [
        (0, 0.5)]
    # each says once, in the order given, that it changes nothing here
    assert [note.split(" ", 1)[0] for note in extras.notes] == [
        "--pinned-memory-pool-byte-size", "--cuda-memory-pool-byte-size",
        "--min-supported-compute-capability", "--cuda-virtual-address-size",
        "--buffer-manager-thread-count", "--cache-directory",
        "--repoagent-directory", "--grpc-infer-allocation-pool-size"]
    assert all(" has no effect here: " in note for note in extras.notes)
    # --allow-gpu-metrics has an effect: the nv_gpu_* families (docs/observability.md)
    assert opts.gpu_metrics is False
    assert options_from_args(parse()).gpu_metrics is True


def test_the_first_gpu_limit_given_for_a_device_holds_in_device_order():
    # tritonserver keeps the limits in a std::map filled with emplace: the first one wins
    args = parse("--model-load-gpu-limit=1:0.25", "--model-load-gpu-limit=0:0.5",
                 "--model-load-gpu-limit=1:0.75", "--model-load-gpu-limit=0:0")
    assert [(limit.device, limit.fraction)
            for limit in options_from_args(args).model_load_device_limits] == [
        (0, 0.5), (1, 0.25)]


@pytest.mark.parametrize(("flag", "message"), [
    ("0:1.5", "expects limit fraction to be in range [0.0, 1.0], got 1.500000"),
    ("0:-0.5", "expects limit fraction to be in range [0.0, 1.0], got -0.500000"),
    ("-1:0.5", "expects device ID >= 0, got -1"),
])
def test_a_refused_gpu_limit_ends_the_command_as_tritonservers_does(flag, message, capsys):
    status = cli.main([f"--model-load-gpu-limit={flag}"])
    assert status == 1
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        f"error: setting model load GPU limit: Invalid argument - {message}")


def test_frontend_flags_reach_the_frontends():
    args = parse("--allow-http=false", "--grpc-port=9001", "--grpc-address=127.0.0.1",
                 "--http-restricted-api=model-repository,logging:admin=secret",
                 "--grpc-restricted-protocol=inference:infer=k1",
                 "--grpc-restricted-protocol", "health:probe=k2",
                 "--http-header-forward-pattern=^x-", "--grpc-header-forward-pattern=^y-")
    server = Server(model_repository=REPO_ROOT / "examples" / "models")
    assert http_frontend.from_args(server, args) is None
    grpc = grpc_frontend.from_args(server, args)
    assert (grpc.options.port, grpc.options.address) == (9001, "127.0.0.1")
    assert grpc.options.header_forward_pattern == "^y-"
    restricted = grpc.options.restricted
    assert restricted.get("inference") == Restriction("triton-grpc-protocol-infer", "k1")
    assert restricted.get("health") == Restriction("triton-grpc-protocol-probe", "k2")
    assert restricted.get("model-repository") is None
    http_args = parse("--http-restricted-api=model-repository,logging:admin=secret",
                      "--http-port=0", "--http-thread-count=2")
    http = http_frontend.from_args(server, http_args)
    assert http.options.restricted.categories() == ("model-repository", "logging")
    assert http.options.restricted.get("logging") == Restriction("admin", "secret")
    assert http.options.thread_count == 2


def test_metrics_address_defaults_to_the_http_address():
    server = Server(model_repository=REPO_ROOT / "examples" / "models")
    frontend = metrics_frontend.from_args(server, parse("--http-address=127.0.0.1"))
    assert frontend.address == "127.0.0.1"
    frontend = metrics_frontend.from_args(server, parse("--metrics-address=0.0.0.0",
                                                        "--http-address=127.0.0.1"))
    assert frontend.address == "0.0.0.0"


# -- usage errors ----------------------------------------------------------------------------
USAGE_ERRORS = [
    (["serve", "--nope"], "unrecognized option '--nope'"),
    (["serve", "--model-repositry=/m"], "unrecognized option '--model-repositry=/m'"),
    (["serve", "stray"], "Unexpected argument: stray"),
    (["serve", "--http-port"], "option '--http-port' requires an argument"),
    (["serve", "--disable-auto-complete-config=true"], "doesn't allow an argument"),
    (["serve", "--exit-on-error=maybe"],
     'Bad option: "--exit-on-error".\ninvalid value for bool option: maybe'),
    (["serve", "--exit-timeout-secs=soon"], "Invalid option value. Got soon"),
    (["serve", "--model-control-mode=sometimes"], "invalid argument for --model-control-mode"),
    (["serve", "--rate-limit=sometimes"], "invalid argument for --rate-limit"),
    (["serve", "--log-format=json"], "invalid argument for --log-format"),
    (["serve", "--rate-limit-resource=R"], "--rate-limit-resource option format is"),
    (["serve", "--rate-limit-resource=R:x"], "Invalid option value. Got x"),
    (["serve", "--host-policy=pinned"], "--host-policy option format is"),
    (["serve", "--cache-config=size=1"], "No cache specified."),
    (["serve", "--cache-config=local,size"], "--cache-config option format is"),
    (["serve", "--backend-config=novalue"], "--backend-config option format is"),
    (["serve", "--trace-level=loud"], "invalid value for trace level option: loud"),
    (["serve", "--cuda-memory-pool-byte-size=64"], "requires format <first>:<second>"),
    (["serve", "--http-port=99999999999"], "Provided option value is out of bound."),
    (["serve", "--http-restricted-api=health"],
     "--http-restricted-api option format is '<config name>:<setting>=<value>'"),
    (["serve", "--http-restricted-api=healthy:k=v"], "unknown restricted api 'healthy'"),
    (["serve", "--grpc-restricted-protocol=model-reposit,health:k1=v1"],
     "unknown restricted protocol 'model-reposit'"),
    (["serve", "--grpc-restricted-protocol=model-repository,health:k1=v1",
      "--grpc-restricted-protocol=metadata,health:k2=v2"],
     "restricted protocol 'health' can not be specified in multiple config groups"),
    ([], "the following arguments are required"),
]


@pytest.mark.parametrize("argv, message", USAGE_ERRORS, ids=[" ".join(a) for a, _ in
                                                             USAGE_ERRORS])
def test_bad_command_lines_are_usage_errors(argv, message, capsys):
    with pytest.raises(SystemExit) as caught:
        build_parser().parse_args(argv)
    assert caught.value.code == 1  # tritonserver's status for a bad command line
    err = capsys.readouterr().err
    assert "usage:" in err and message in err


@pytest.mark.parametrize("flags, message", [
    (["--load-model=a"],
     "Error: Use of '--load-model' requires setting '--model-control-mode=explicit'"),
    (["--model-control-mode=poll", "--load-model=a"], "requires setting"),
    (["--cache-config=local,size=1", "--response-cache-byte-size=5"],
     "Incompatible flags --response-cache-byte-size and --cache-config both provided"),
    (["--http-port=8000", "--grpc-port=8000"],
     "cannot listen to HTTP requests and GRPC requests at the same address and port"),
    (["--metrics-port=8000", "--http-port=8000"], "HTTP requests and metrics requests"),
    (["--allow-sagemaker=true", "--sagemaker-port=8000"],
     "HTTP requests and SageMaker requests at the same address and port 0.0.0.0:8000"),
    (["--allow-sagemaker=true", "--sagemaker-safe-port-range=9000-9010"],
     r"HTTP requests at port 8000, allowed port range is \[9000, 9010\]"),
    (["--allow-vertex-ai=true", "--vertex-ai-port=8001"],
     "GRPC requests and Vertex AI requests at the same address and port 0.0.0.0:8001"),
])
def test_inconsistent_flags_are_refused(flags, message):
    with pytest.raises(InvalidArgumentError, match=message.replace("*", r"\*")):
        options(*flags)


def test_inconsistent_flags_are_usage_errors_from_main(capsys):
    with pytest.raises(SystemExit) as caught:
        cli.main(["serve", "--load-model=a"])
    assert caught.value.code == 1
    err = capsys.readouterr().err
    assert err.startswith("usage:")
    assert err.endswith("\nError: Use of '--load-model' requires setting "
                        "'--model-control-mode=explicit' as well.\n")


def test_settings_the_server_refuses_end_as_tritonserver_does(capsys):
    # Options refuse it: "error: creating server: ..." as tritonserver's last words
    assert cli.main(["serve", "--cache-config=local,size=big"]) == 1
    assert capsys.readouterr().err == ("error: creating server: Internal - Failed to "
                                       "initialize LocalCache: stoull\n")


# tritonserver clamps these; its parser takes them
@pytest.mark.parametrize("flags, attribute, expected", [
    (["--repository-poll-secs=-1"], "repository_poll_secs", 0),
    (["--model-load-thread-count=0"], "model_load_thread_count", 1),
    (["--model-load-retry-count=-2"], "model_load_retry_count", 0),
    (["--buffer-manager-thread-count=-3"], "buffer_manager_thread_count", 0),
    (["--metrics-interval-ms=0"], "metrics_interval", 1),
    (["--enable-peer-access=false"], "enable_peer_access", False),
    (["--enable-peer-access", "ON"], "enable_peer_access", True),
])
def test_values_tritonserver_clamps_are_clamped(flags, attribute, expected):
    assert getattr(options(*flags), attribute) == expected


# -- reading the command line as tritonserver's getopt_long ----------------------------------
@pytest.mark.parametrize("flags, attribute, expected", [
    (["--id", "--strict-readiness=false"], "server_id", "--strict-readiness=false"),
    (["--strict-read=false"], "strict_readiness", False),  # a unique prefix
    (["--model-repo=/m"], "model_repository", ["/m"]),
    (["--id=a", "--id=b"], "server_id", "b"),  # the last one wins
    (["--exit-timeout-secs=7s"], "exit_timeout_secs", 7),  # std::stoi
    (["--exit-timeout-secs= +5"], "exit_timeout_secs", 5),
    (["--exit-timeout-secs=0x10"], "exit_timeout_secs", 0),
    (["--model-load-thread-count=2.5"], "model_load_thread_count", 2),
    (["--min-supported-compute-capability=0x1p3"], "min_supported_compute_capability", 8.0),
    (["--log-verbose=TRUE"], "log_verbose", 1),
    (["--reuse-http-port=On"], "reuse_http_port", True),
    (["--disable-auto-complete-config", "--", ], "disable_auto_complete_config", True),
])
def test_the_command_line_is_read_as_getopt_long_reads_it(flags, attribute, expected):
    assert getattr(parse(*flags), attribute) == expected


def test_the_flags_given_are_kept_in_order_with_their_full_names():
    args = parse("--strict-read=0", "--id", "x", "--exit-timeout-secs=1", "--id=y")
    assert args.flags_given == ("strict-readiness", "id", "exit-timeout-secs", "id")
    assert args.command_line == ("--strict-readiness=0", "--id=x", "--exit-timeout-secs=1",
                                 "--id=y")


@pytest.mark.parametrize("argv, first_line", [
    (["--log=1"], "infercore serve: option '--log=1' is ambiguous; possibilities: "
                  "'--log-verbose' '--log-info' '--log-warning' '--log-error' "
                  "'--log-format' '--log-file'"),
    (["--http-thread-count"], "infercore serve: option '--http-thread-count' requires an "
                              "argument"),
    (["--disable-auto-complete-config=1"],
     "infercore serve: option '--disable-auto-complete-config' doesn't allow an argument"),
    (["-x"], "infercore serve: invalid option -- 'x'"),
    (["--bogus=1", "--log-info=maybe"], "infercore serve: unrecognized option '--bogus=1'"),
])
def test_getopt_complaints_come_first_then_the_usage(argv, first_line, capsys):
    with pytest.raises(SystemExit) as caught:
        build_parser().parse_args(["serve", *argv])
    assert caught.value.code == 1
    lines = capsys.readouterr().err.splitlines()
    assert lines[0] == first_line and lines[1].startswith("usage:")


@pytest.mark.parametrize("argv, last_lines", [
    # a bad value before an unknown option is the complaint: reading stops at the value
    (["--log-info=maybe", "--bogus"], ['Bad option: "--log-info".',
                                       "invalid value for bool option: maybe"]),
    (["extra", "--id=x"], ["Unexpected argument: extra"]),  # non-options go last
    (["--", "--id=x"], ["Unexpected argument: --id=x"]),
    (["--grpc-infer-thread-count=1"],
     ['Bad option: "--grpc-infer-thread-count".', "invalid argument for "
      "--grpc_infer_thread_count. Must be in the range 2 to 128."]),
    (["--grpc-max-response-pool-size=0"],
     ["Error: --grpc-max-response-pool-size must be greater than 0."]),
    (["--sagemaker-safe-port-range=8000"],
     ["Cannot parse pair option due to incorrect number of inputs.--<pair option> argument "
      "requires format <first>-<second>. Found: 8000"]),
    (["--model-config-name="], ["Error: empty argument for --model-config-name"]),
    (["--exit-timeout-secs=99999999999"],
     ["Provided option value is out of bound. Got 99999999999"]),
])
def test_parser_complaints_come_after_the_usage(argv, last_lines, capsys):
    with pytest.raises(SystemExit) as caught:
        build_parser().parse_args(["serve", *argv])
    assert caught.value.code == 1
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("usage:") and err[-len(last_lines):] == last_lines


def test_sagemaker_and_vertex_ai_flags_reach_their_options():
    args = parse("--allow-sagemaker=true", "--sagemaker-port=9080",
                 "--sagemaker-safe-port-range=8000-8002", "--sagemaker-thread-count=3",
                 "--allow-vertex-ai=1", "--vertex-ai-port=9081", "--vertex-ai-thread-count=4",
                 "--vertex-ai-default-model=simple")
    assert sagemaker.options_from_args(args) == sagemaker.SageMakerOptions(
        True, "0.0.0.0", 9080, (8000, 8002), 3)
    assert vertex_ai.options_from_args(args) == vertex_ai.VertexAIOptions(
        True, "0.0.0.0", 9081, 4, "simple")
    defaults = parse()
    assert sagemaker.options_from_args(defaults) == sagemaker.SageMakerOptions()
    assert vertex_ai.options_from_args(defaults) == vertex_ai.VertexAIOptions()


def test_vertex_ai_environment_sets_tritonservers_defaults(monkeypatch, tmp_path):
    monkeypatch.setenv("AIP_MODE", "PREDICTION")
    monkeypatch.setenv("AIP_HTTP_PORT", "9090")
    monkeypatch.setenv("AIP_STORAGE_URI", str(tmp_path))
    args = parse()
    assert (args.allow_vertex_ai, args.allow_http, args.allow_grpc) == (True, False, False)
    assert args.vertex_ai_port == 9090
    assert options_from_args(args).repositories == (tmp_path,)
    assert parse("--allow-http=true").allow_http  # a flag still wins
    monkeypatch.setenv("AIP_HTTP_PORT", "port")
    with pytest.raises(SystemExit):
        parse()


def test_the_cloud_frontends_are_built_from_their_flags():
    server = Server(model_repository=REPO_ROOT / "examples" / "models")
    args = parse("--allow-sagemaker=true", "--sagemaker-port=9001",
                 "--sagemaker-thread-count=0", "--allow-vertex-ai=true",
                 "--vertex-ai-port=9000", "--vertex-ai-default-model=simple")
    built = sagemaker.from_args(server, args)
    assert isinstance(built, sagemaker.SageMakerFrontend)
    assert (built.options.address, built.options.port, built.options.thread_count) == (
        "0.0.0.0", 9001, 1)  # tritonserver takes 0 threads; one pool thread is the least
    vertex = vertex_ai.from_args(server, args)
    assert isinstance(vertex, vertex_ai.VertexAIFrontend)
    assert (vertex.options.port, vertex.settings.default_model) == (9000, "simple")
    assert vertex.starts_after_load  # it picks its default among the loaded models
    assert sagemaker.from_args(server, parse()) is None
    assert vertex_ai.from_args(server, parse()) is None


def test_help_is_grouped_as_tritonservers(capsys):
    with pytest.raises(SystemExit) as caught:
        cli.main(["serve", "--help"])
    assert caught.value.code == 0
    out = capsys.readouterr().out
    groups = ["Server:", "Logging:", "Model Repository:", "HTTP:", "GRPC:", "Sagemaker:",
              "Vertex:", "Metrics:",
              "Tracing:", "Backend:", "Response Cache:", "Rate Limiter:",
              "Memory/Device Management:", "DEPRECATED:"]
    positions = [out.index(group) for group in groups]
    assert positions == sorted(positions)
    for flag in ("--http-restricted-api", "--grpc-restricted-protocol", "--cache-config",
                 "--repository-poll-secs", "--model-namespacing"):
        assert flag in out


# -- the entry point -------------------------------------------------------------------------
def test_a_command_line_starting_with_a_flag_is_serve():
    assert normalize_argv(["--model-repository=/m"]) == ["serve", "--model-repository=/m"]
    assert normalize_argv(["serve", "--id=x"]) == ["serve", "--id=x"]
    assert normalize_argv(["--help"]) == ["--help"]
    assert normalize_argv([]) == []


def test_main_builds_options_warns_and_serves(monkeypatch, capsys, caplog, tmp_path):
    served = {}

    def fake_serve(opts, args, *, frontend_modules, extras):
        served.update(options=opts, extras=extras, modules=list(frontend_modules))
        return 0

    monkeypatch.setattr(cli, "_serve", fake_serve)
    status = cli.main([f"--model-repository={tmp_path}", "--strict-model-config=true",
                       f"--backend-directory={tmp_path / 'no-such-folder'}",
                       "--pinned-memory-pool-byte-size=64"])
    assert status == 0
    assert served["options"].repositories == (tmp_path,)
    assert served["options"].strict_model_config
    assert served["extras"].pinned_memory_pool_byte_size == 64
    assert [m.__name__.removeprefix("infercore.frontends.") for m in served["modules"]] == [
        "http.server", "grpc.server", "sagemaker", "vertex_ai", "metrics"]
    assert served["extras"].notes == (
        "--pinned-memory-pool-byte-size has no effect here: infercore manages no GPU memory",)
    err = capsys.readouterr().err
    assert "'--strict-model-config' has been deprecated" in err
    # tritonserver checks a backend folder only when a model needs it: a warning, no error
    assert "no-such-folder' does not exist" in caplog.text


# -- the startup tables ----------------------------------------------------------------------
def test_format_table_frames_rows_like_triton():
    table = format_table(["Model", "Version", "Status"], [["add_sub", "1", "READY"]])
    assert table.splitlines() == [
        "+---------+---------+--------+",
        "| Model   | Version | Status |",
        "+---------+---------+--------+",
        "| add_sub | 1       | READY  |",
        "+---------+---------+--------+",
    ]


def test_a_long_value_wraps_inside_its_cell_within_the_table_width():
    reason = "UNAVAILABLE: " + "failed to load model because " * 8 + "x" * 120
    table = format_table(["Model", "Version", "Status"], [["broken", "1", reason],
                                                         ["add_sub", "1", "READY"]])
    lines = table.splitlines()
    assert {len(line) for line in lines} == {TABLE_WIDTH}
    assert all(line[0] in "+|" and line[-1] in "+|" for line in lines)
    status = [line.split("|")[3].strip() for line in lines if line.startswith("| ")]
    # the wrapped pieces, read in order, are the whole value; the next row is its own
    assert " ".join(status[1:-1]).replace(" ", "") == reason.replace(" ", "")
    assert lines[-2].startswith("| add_sub | 1       | READY ") and lines[-2].endswith(" |")


def test_a_traceback_in_a_cell_keeps_its_lines_inside_the_table():
    trace = "Traceback (most recent call last):\n  File \"model.py\", line 3\nValueError: no"
    table = format_table(["Model", "Version", "Status"], [["broken", "1", trace]])
    lines = table.splitlines()
    assert len({len(line) for line in lines}) == 1
    assert lines[3:6] == [
        "| broken | 1       | Traceback (most recent call last): |",
        "|        |         |   File \"model.py\", line 3          |",
        "|        |         | ValueError: no                     |",
    ]


def test_the_serving_line_says_where_each_frontend_listens():
    @dataclasses.dataclass
    class Listening:
        label: str
        address: str
        port: int

    frontends = [Listening("HTTP", "0.0.0.0", 8000), Listening("gRPC", "::", 8001),
                 Listening("metrics", "", 8002)]
    assert serving_line(2, frontends) == (  # type: ignore[arg-type]
        "infercore is serving 2 model version(s) (HTTP at 0.0.0.0:8000, gRPC at [::]:8001, "
        "metrics at 0.0.0.0:8002); press Ctrl-C to stop")
    assert serving_line(0, []) == "infercore is serving 0 model version(s); press Ctrl-C to stop"


def test_model_table_lists_loaded_versions_with_reasons():
    table = model_table([
        ModelIndexEntry("add_sub", "1", ModelState.READY, ""),
        ModelIndexEntry("broken", "1", ModelState.UNAVAILABLE, "no module named x"),
        ModelIndexEntry("spare", "", ModelState.UNKNOWN, "", name_only=True),
    ])
    assert "| add_sub | 1       | READY                          |" in table
    assert "| broken  | 1       | UNAVAILABLE: no module named x |" in table
    assert "spare" not in table  # never loaded: Triton leaves it out


def test_options_table_rows_in_tritonservers_order():
    opts = options("--model-repository=/a", "--model-repository=/b", "--id=t1",
                   "--model-control-mode=explicit", "--load-model=m", "--strict-readiness=0",
                   "--exit-timeout-secs=9", "--rate-limit=execution_count",
                   "--rate-limit-resource=R:4", "--cache-config=local,size=64")
    table = options_table(opts, ServeExtras(cuda_memory_pool_byte_size=((0, 64),),
                                            extensions=("classification", "sequence")))
    rows = [[cell.strip() for cell in line.strip("|").split("|")]
            for line in table.splitlines() if line.startswith("|")]
    assert rows == [
        ["Option", "Value"], ["server_id", "t1"], ["server_version", rows[2][1]],
        ["server_extensions", "classification sequence"],
        ["model_repository_path[0]", "/a"], ["model_repository_path[1]", "/b"],
        ["model_control_mode", "MODE_EXPLICIT"], ["startup_models_0", "m"],
        ["strict_model_config", "0"], ["model_config_name", ""], ["rate_limit", "EXEC_COUNT"],
        ["rate_limit_resource[0]", "R:4:-1"], ["pinned_memory_pool_byte_size", "268435456"],
        ["cuda_memory_pool_byte_size{0}", "64"], ["min_supported_compute_capability", "0.0"],
        ["strict_readiness", "0"], ["exit_timeout", "9"], ["cache_enabled", "1"],
    ]


# -- as a process ----------------------------------------------------------------------------
def _serve(*args: str) -> subprocess.Popen:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    return subprocess.Popen(
        [sys.executable, "-m", "infercore", "serve", "--http-port=0", "--grpc-port=0",
         "--metrics-port=0", *args],
        stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, env=env, cwd=REPO_ROOT,
    )


def _read_until(process: subprocess.Popen, marker: str) -> str:
    seen = []
    for line in process.stderr:  # type: ignore[union-attr]
        seen.append(line)
        if marker in line:
            return "".join(seen)
    raise AssertionError("server exited before printing " + repr(marker) + ":\n" + "".join(seen))


def test_serve_prints_the_tables_and_stops_on_sigterm():
    process = _serve()
    try:
        output = _read_until(process, "press Ctrl-C to stop")
        for model in ("add_sub", "identity_bytes", "row_sum"):
            assert f"| {model}" in output
        assert "READY" in output and "| model_control_mode " in output
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0
    finally:
        if process.poll() is None:
            process.kill()


def test_serve_exits_nonzero_when_a_model_fails_to_load(tmp_path):
    (tmp_path / "broken" / "1").mkdir(parents=True)
    (tmp_path / "broken" / "config.pbtxt").write_text('backend: "python"\nnonsense: 1\n')
    (tmp_path / "broken" / "1" / "model.py").write_text("class TritonPythonModel: pass\n")
    process = _serve("--model-repository", str(tmp_path))
    try:
        _, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 1
    # the config fails Triton's poll: logged with its reason, then tritonserver's last words
    assert "Poll failed for model directory 'broken'" in err and "nonsense" in err
    assert err.rstrip().endswith("error: creating server: Internal - failed to load all models")


def test_serve_exits_nonzero_when_a_port_is_taken():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        process = _serve("--http-address=127.0.0.1", f"--http-port={port}")
        try:
            _, err = process.communicate(timeout=60)
        finally:
            if process.poll() is None:
                process.kill()
    assert process.returncode == 1
    # tritonserver 2.51's words, seen with its HTTP port held by another process (sic,
    # the space at the end): a harness case cannot hold a port while a server starts
    assert (f"failed to start HTTP service: Unavailable - Socket '127.0.0.1:{port}' already "
            'in use "') in err


def test_ray_address_reaches_the_options() -> None:
    assert options_from_args(parse("--ray-address=auto")).ray_address == "auto"
    assert options_from_args(parse()).ray_address == ""


def test_serve_help_describes_every_flag_and_lists_the_backends():
    serve = next(action for action in build_parser()._actions
                 if isinstance(action, argparse._SubParsersAction)).choices["serve"]
    undescribed = [action.option_strings[0] for action in serve._actions
                   if action.option_strings and not action.help]
    assert undescribed == []
    text = serve.format_help()
    assert "Backends: python (built in" in text
    assert "onnxruntime (installed)" in " ".join(text.split())


def test_serve_help_says_how_to_install_a_missing_framework(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "torch" else real(name, *a))
    assert "pytorch (not installed: pip install 'infercore[torch]')" in cli.backends_epilog()


@pytest.mark.parametrize(("flag", "service"), [("--grpc-port", "GRPC"),
                                               ("--metrics-port", "Metrics")])
def test_serve_names_the_endpoint_whose_port_is_taken_as_tritonserver(flag, service):
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        port = taken.getsockname()[1]
        process = _serve("--http-port=0", "--grpc-port=0", "--metrics-port=0", f"{flag}={port}")
        try:
            _, err = process.communicate(timeout=60)
        finally:
            if process.poll() is None:
                process.kill()
    assert process.returncode == 1
    assert (f"failed to start {service} service: Unavailable - Socket '0.0.0.0:{port}' "
            'already in use "') in err, err[-2000:]
