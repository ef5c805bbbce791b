"""The command line: the startup table, and `infercore serve` as a real process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from infercore.cli import build_parser, examples_repository, format_table, options_from_args

REPO_ROOT = Path(__file__).resolve().parents[1]


def test_format_table_frames_rows_like_triton():
    table = format_table(["Model", "Version", "Status"], [["add_sub", "1", "READY"]])
    assert table.splitlines() == [
        "+---------+---------+--------+",
        "| Model   | Version | Status |",
        "+---------+---------+--------+",
        "| add_sub | 1       | READY  |",
        "+---------+---------+--------+",
    ]


def test_serve_defaults_to_the_bundled_examples():
    options = options_from_args(build_parser().parse_args(["serve"]))
    assert options.repositories == (examples_repository(),)
    assert (examples_repository() / "add_sub" / "config.pbtxt").is_file()


def test_flags_map_to_options():
    args = build_parser().parse_args([
        "serve", "--model-repository=/a", "--model-repository", "/b",
        "--strict-model-config=true", "--exit-on-error=false", "--exit-timeout-secs=5",
        "--model-control-mode=explicit", "--load-model=x",
    ])
    options = options_from_args(args)
    assert [str(p) for p in options.repositories] == ["/a", "/b"]
    assert options.strict_model_config and not options.exit_on_error
    assert options.exit_timeout == 5 and options.startup_models == ("x",)


@pytest.mark.parametrize("argv", [["serve", "--exit-on-error=maybe"], ["serve", "--nope"], []])
def test_malformed_flags_exit_with_usage(argv, capsys):
    with pytest.raises(SystemExit) as caught:
        build_parser().parse_args(argv)
    assert caught.value.code == 2
    assert "usage:" in capsys.readouterr().err


def _serve(*args: str) -> subprocess.Popen:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    return subprocess.Popen(
        [sys.executable, "-m", "infercore", "serve", *args],
        stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, env=env, cwd=REPO_ROOT,
    )


def _read_until(process: subprocess.Popen, marker: str) -> str:
    seen = []
    for line in process.stderr:  # type: ignore[union-attr]
        seen.append(line)
        if marker in line:
            return "".join(seen)
    raise AssertionError("server exited before printing " + repr(marker) + ":\n" + "".join(seen))


def test_serve_prints_the_model_table_and_stops_on_sigterm():
    process = _serve()
    try:
        output = _read_until(process, "press Ctrl-C to stop")
        for model in ("add_sub", "identity_bytes", "row_sum"):
            assert f"| {model}" in output
        assert "READY" in output
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
    assert "| broken" in err and "UNAVAILABLE" in err and "nonsense" in err


def test_rate_limit_and_host_policy_flags():
    options = options_from_args(build_parser().parse_args([
        "serve", "--rate-limit=execution_count", "--rate-limit-resource=R:4",
        "--rate-limit-resource", "G:2:1", "--host-policy=pinned,cpu-cores=0-1",
        "--host-policy", "pinned,numa-node=0",
    ]))
    assert options.rate_limiter_mode.value == "execution_count"
    assert [(r.name, r.count, r.device) for r in options.rate_limiter_resources] == [
        ("R", 4, -1), ("G", 2, 1)]
    assert options.host_policies == {"pinned": {"cpu-cores": "0-1", "numa-node": "0"}}


@pytest.mark.parametrize("flag", ["--rate-limit-resource=R", "--rate-limit-resource=R:x",
                                  "--host-policy=pinned", "--rate-limit=sometimes"])
def test_malformed_rate_limit_and_host_policy_flags_exit_with_usage(flag, capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", flag])
    assert "usage:" in capsys.readouterr().err


def test_backend_config_flags():
    options = options_from_args(build_parser().parse_args([
        "serve", "--backend-config=onnxruntime,default-max-batch-size=8",
        "--backend-config", "python,shm-default-byte-size=1024", "--backend-config=x=1"]))
    assert options.backend_configuration == {
        "onnxruntime": {"default-max-batch-size": "8"},
        "python": {"shm-default-byte-size": "1024"}, "": {"x": "1"}}


def test_bad_backend_flags_exit_with_usage(tmp_path, capsys):
    from infercore.cli import main

    for argv in (["serve", "--backend-config=novalue"],
                 ["serve", f"--backend-directory={tmp_path / 'missing'}"]):
        with pytest.raises(SystemExit) as caught:
            main(argv)
        assert caught.value.code == 2
        assert "usage:" in capsys.readouterr().err


def test_metrics_and_trace_flags_reach_the_options():
    options = options_from_args(build_parser().parse_args([
        "serve", "--allow-metrics=false", "--metrics-interval-ms=500",
        "--trace-config", "level=TIMESTAMPS", "--trace-config", "rate=10",
        "--trace-config", "triton,file=/tmp/trace.json"]))
    assert options.metrics is False and options.metrics_interval == 500
    trace = options.trace_config
    assert (trace.level, trace.rate, trace.file) == (("TIMESTAMPS",), 10, "/tmp/trace.json")
