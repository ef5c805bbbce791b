"""The caller's lines in the server log, and the caller's metrics with the server's."""

from __future__ import annotations

import inspect
import logging
import urllib.request

import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

import infercore
from infercore import (
    InvalidArgumentError,
    LogLevel,
    Metric,
    MetricFamily,
    MetricKind,
    Server,
    UnavailableError,
    UnsupportedError,
)

ONES = np.ones((1, 4), np.float32)


def line_here() -> int:
    frame = inspect.currentframe()
    assert frame is not None and frame.f_back is not None
    return frame.f_back.f_lineno


# -- logs ------------------------------------------------------------------------------------
def test_the_callers_lines_reach_the_server_log_with_its_file_and_line(add_sub_repo,
                                                                       tmp_path):
    log = tmp_path / "server.log"
    with Server(model_repository=add_sub_repo.path, log_file=str(log)) as server:
        line = line_here() + 1
        server.log(LogLevel.INFO, "application started")
        server.log("warning", "queue is long")
        infercore.log_message(LogLevel.ERROR, "module-level line", filename="/src/app.py",
                              line=7)
    ours = [text for text in log.read_text().splitlines()
            if text.endswith(('"application started"', '"queue is long"',
                              '"module-level line"'))]
    assert len(ours) == 3  # among the server's own lines
    assert ours[0].startswith("I") and ours[0].endswith(
        f' test_logs_metrics.py:{line}] "application started"')
    assert ours[1].startswith("W") and ours[1].endswith(
        f' test_logs_metrics.py:{line + 1}] "queue is long"')
    assert ours[2].startswith("E") and ours[2].endswith(' app.py:7] "module-level line"')


def test_each_switch_decides_for_its_level(add_sub_repo, tmp_path):
    log = tmp_path / "server.log"
    options = {"log_file": str(log), "log_info": False, "log_warn": True, "log_error": False}
    with Server(model_repository=add_sub_repo.path, **options) as server:
        assert [server.log_enabled(level) for level in LogLevel] == [False, True, False,
                                                                     False]
        assert infercore.log_enabled("WARN") and not infercore.log_enabled("info")
        for level in LogLevel:
            server.log(level, f"a {level.name} line")
        server.update_log_settings(log_verbose_level=1, log_error=True)
        assert server.log_enabled(LogLevel.VERBOSE) and server.log_enabled("ERROR")
        server.log(LogLevel.VERBOSE, "a verbose line")
        server.log(LogLevel.ERROR, "an error line")
    written = [line.split("] ", 1)[1] for line in log.read_text().splitlines()
               if "test_logs_metrics.py" in line]
    assert written == ['"a WARN line"', '"a verbose line"', '"an error line"']


def test_without_a_server_the_infercore_logger_decides(caplog):
    with caplog.at_level(logging.WARNING, logger="infercore"):
        assert infercore.log_enabled(LogLevel.WARN)
        assert not infercore.log_enabled(LogLevel.INFO)
        infercore.log_message("warn", "no server yet")
        infercore.log_message("info", "not written")
    messages = [record.getMessage() for record in caplog.records]
    assert "no server yet" in messages and "not written" not in messages


@pytest.mark.parametrize(("level", "message", "error"), [
    ("LOUD", "x", "unknown logging level 'LOUD'"),
    (3, "x", "unknown logging level '3'"),
    (LogLevel.INFO, b"bytes", "a log message must be a string"),
])
def test_bad_log_calls_are_refused(add_sub_repo, level, message, error):
    with Server(model_repository=add_sub_repo.path) as server:
        with pytest.raises(InvalidArgumentError, match=error):
            server.log(level, message)
        with pytest.raises(InvalidArgumentError, match=error):
            infercore.log_message(level, message)


# -- metrics ---------------------------------------------------------------------------------
def samples(text: str, name: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    found = {}
    for family in text_string_to_metric_families(text):
        if family.name == name:
            for sample in family.samples:
                found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


def scrape(endpoint: infercore.Endpoint) -> str:
    with urllib.request.urlopen(f"http://{endpoint.url}/metrics", timeout=30) as reply:
        return reply.read().decode()


def test_caller_metrics_are_exported_with_the_servers(add_sub_repo):
    requests = MetricFamily(MetricKind.COUNTER, "api_app_requests", "requests of the app")
    sizes = MetricFamily(MetricKind.HISTOGRAM, "api_app_batch", "batch sizes")
    depth = MetricFamily(MetricKind.GAUGE, "api_app_depth", "queue depth")
    counter = Metric(requests, {"route": "/predict"})
    histogram = Metric(sizes, buckets=[1, 4, 16])
    gauge = Metric(depth)
    with Server(model_repository=add_sub_repo.path) as server:
        server.model("add_sub").infer({"INPUT0": ONES, "INPUT1": ONES}).result()
        counter.increment(3)
        gauge.set_value(2)
        for size in (1, 3, 20):
            histogram.observe(size)
        with server.serve_metrics(address="127.0.0.1", port=0) as endpoint:
            served = scrape(endpoint)
        in_process = server.metrics()
    for text in (served, in_process):
        assert samples(text, "api_app_requests")[
            ("api_app_requests_total", (("route", "/predict"),))] == 3.0
        assert samples(text, "api_app_depth") == {("api_app_depth", ()): 2.0}
        assert samples(text, "api_app_batch") == {
            ("api_app_batch_bucket", (("le", "1.0"),)): 1.0,
            ("api_app_batch_bucket", (("le", "4.0"),)): 2.0,
            ("api_app_batch_bucket", (("le", "16.0"),)): 2.0,
            ("api_app_batch_bucket", (("le", "+Inf"),)): 3.0,
            ("api_app_batch_count", ()): 3.0,
            ("api_app_batch_sum", ()): 24.0,
        }
        count = samples(text, "nv_inference_count")
        assert count[("nv_inference_count_total", (("model", "add_sub"),
                                                   ("version", "1")))] == 1.0


def test_a_deleted_metric_leaves_the_export(add_sub_repo):
    family = MetricFamily(MetricKind.GAUGE, "api_short_lived", "gone soon")
    metric = Metric(family, {"k": "v"})
    metric.set_value(1)
    with Server(model_repository=add_sub_repo.path) as server:
        assert samples(server.metrics(), "api_short_lived")
        del metric, family
        assert "api_short_lived" not in server.metrics()


def test_with_metrics_off_only_the_callers_are_reported(add_sub_repo):
    family = MetricFamily(MetricKind.COUNTER, "api_only_custom", "")
    metric = Metric(family)
    metric.increment(1)
    with Server(model_repository=add_sub_repo.path, metrics=False) as server:
        server.model("add_sub").infer({"INPUT0": ONES, "INPUT1": ONES}).result()
        text = server.metrics()
        assert "nv_inference_count" not in text and "api_only_custom" in text
        with pytest.raises(UnavailableError, match="metrics are disabled"):
            server.serve_metrics(port=0)
        with pytest.raises(UnsupportedError, match="unsupported metric format 'json'"):
            server.metrics("json")
