"""Where a server writes its log and its traces: its command line says, never a client.

As tritonserver, infercore refuses a log or trace file location over HTTP (501) and gRPC
(UNIMPLEMENTED), an empty one or a cleared one included, so no client can make the server
open a path of its choosing (a symlink planted somewhere, a file in /proc, a directory).
The command line's paths are the operator's: relative to the server's working directory
and through symlinks as the operator made them; one that cannot be opened (a directory,
/proc/self/mem, a missing folder) leaves the log on standard error, as tritonserver
does, where infercore also says why.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from serve_process import ServeProcess
from tritonclient.utils import InferenceServerException


def _serve(tmp_path: Path, *flags: str) -> ServeProcess:
    repository = tmp_path / "models"
    repository.mkdir(exist_ok=True)
    server = ServeProcess(tmp_path / "output.txt", f"--model-repository={repository}", *flags)
    server.wait_ready()
    return server


def test_clients_cannot_choose_where_the_server_writes(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("untouched\n")
    link = tmp_path / "link.log"
    link.symlink_to(victim)
    log, trace = tmp_path / "server.log", tmp_path / "trace.json"
    server = _serve(tmp_path, f"--log-file={log}", f"--trace-config=triton,file={trace}")
    try:
        http = httpclient.InferenceServerClient(server.http_url)
        grpc = grpcclient.InferenceServerClient(server.grpc_url)
        for path in (str(link), "/proc/self/mem", str(tmp_path), ""):
            with pytest.raises(InferenceServerException,
                               match="log file location can not be updated"):
                http.update_log_settings({"log_file": path})
            with pytest.raises(InferenceServerException,
                               match="log file location can not be updated") as refused:
                grpc.update_log_settings({"log_file": path})
            assert refused.value.status() == "StatusCode.UNIMPLEMENTED"
            for client in (http, grpc):
                with pytest.raises(InferenceServerException,
                                   match="trace file location can not be updated"):
                    client.update_trace_settings(settings={"trace_file": path})
        with pytest.raises(InferenceServerException, match="trace file location"):
            grpc.update_trace_settings(settings={"trace_file": None})  # a clear, refused too
        # nothing moved, nothing was written through the link
        assert http.get_log_settings()["log_file"] == str(log)
        assert grpc.get_log_settings(as_json=True)["settings"]["log_file"]["string_param"] \
            == str(log)
        assert http.get_trace_settings()["trace_file"] == str(trace)
        assert victim.read_text() == "untouched\n"
        assert "infercore is serving" in log.read_text()
    finally:
        assert server.stop() == 0


@pytest.mark.parametrize("unusable", ["directory", "/proc/self/mem", "missing/server.log"])
def test_a_log_file_that_cannot_be_opened_leaves_the_log_on_standard_error(tmp_path,
                                                                           unusable):
    path = {"directory": str(tmp_path)}.get(unusable, unusable)
    if not path.startswith("/"):
        path = str(tmp_path / path)
    server = _serve(tmp_path, f"--log-file={path}")
    try:
        assert httpclient.InferenceServerClient(server.http_url).get_log_settings()[
            "log_file"] == ""
        server.wait_log("infercore is serving")
        assert "failed to open log file" in server.log()
    finally:
        assert server.stop() == 0


def test_the_operators_paths_are_relative_to_the_working_directory_and_follow_links(
        tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the server's working directory
    (tmp_path / "logs").mkdir()
    os.symlink(tmp_path / "logs", tmp_path / "current")
    server = _serve(tmp_path, "--log-file=current/server.log")
    try:
        client = httpclient.InferenceServerClient(server.http_url)
        assert client.get_log_settings()["log_file"] == "current/server.log"  # as given
    finally:
        assert server.stop() == 0
    assert "infercore is serving" in (tmp_path / "logs" / "server.log").read_text()
