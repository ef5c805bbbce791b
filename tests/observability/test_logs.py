"""Log settings: Triton's switches applied to the infercore loggers, file and format."""

from __future__ import annotations

import logging
import re

import numpy as np
import pytest

from infercore import InvalidArgumentError, Server
from infercore.log_settings import LogSettings
from infercore.observability.logs import LogSettingsManager, TritonFormatter


@pytest.fixture
def manager():
    manager = LogSettingsManager()
    yield manager
    manager.close()
    logging.getLogger("infercore").setLevel(logging.NOTSET)


def test_levels_follow_the_switches(manager):
    logger = logging.getLogger("infercore.test")
    assert logger.isEnabledFor(logging.INFO) and not logger.isEnabledFor(logging.DEBUG)
    manager.update({"log_verbose_level": 1})
    assert logger.isEnabledFor(logging.DEBUG)
    manager.update({"log_verbose_level": 0, "log_info": False})
    assert not logger.isEnabledFor(logging.INFO) and logger.isEnabledFor(logging.WARNING)
    manager.update({"log_warning": False, "log_error": False})
    assert not logger.isEnabledFor(logging.CRITICAL)


def test_log_file_receives_records_in_the_chosen_format(manager, tmp_path):
    path = tmp_path / "server.log"
    manager.update({"log_file": str(path), "log_format": "ISO8601"})
    logging.getLogger("infercore.model").info("hello from a model")
    manager.update({"log_file": ""})
    text = path.read_text()
    assert "hello from a model" in text
    assert text[:4].isdigit() and "T" in text.split()[0]  # 2026-11-30T...


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"log_nope": True}, "unknown log setting 'log_nope'"),
        ({"log_info": "yes"}, "must be a bool"),
        ({"log_verbose_level": True}, "must be an integer"),
        ({"log_format": "json"}, "invalid argument for log_format"),
    ],
)
def test_bad_settings_raise_and_change_nothing(manager, changes, message):
    before = manager.settings
    with pytest.raises(InvalidArgumentError, match=message):
        manager.update(changes)
    assert manager.settings == before


@pytest.mark.parametrize(("given", "level"), [(3, 3), (-1, 0), ((1 << 32) + 2, 2),
                                               ((1 << 32) - 1, 0), ((1 << 31) - 1, (1 << 31) - 1)])
def test_verbose_levels_are_read_as_tritonservers_c_api_reads_them(manager, given, level):
    assert manager.update({"log_verbose_level": given}).log_verbose_level == level


@pytest.mark.parametrize("where", ["missing/x.log", "", "/proc/self/mem"])
def test_unwritable_log_file_is_a_clear_error_and_changes_nothing(manager, tmp_path, where):
    path = where if where.startswith("/") else str(tmp_path / where)  # "": the folder
    before = manager.settings
    with pytest.raises(InvalidArgumentError, match="failed to open log file"):
        manager.update({"log_file": path, "log_info": False, "log_verbose_level": 1})
    assert manager.settings == before
    assert not logging.getLogger("infercore").isEnabledFor(logging.DEBUG)


def test_a_server_starts_logging_where_it_did_when_its_log_file_cannot_be_opened(
        tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="infercore"):
        manager = LogSettingsManager(LogSettings(log_file=str(tmp_path)))
    try:
        assert manager.settings.log_file == ""
        assert "failed to open log file" in caplog.text
    finally:
        manager.close()


def test_lines_are_written_as_triton_writes_them():
    record = logging.LogRecord("infercore.model", logging.WARNING, "/models/m/1/model.py", 12,
                               'say "%s"\n\x01', ("hi",), None)
    record.created, record.process = 1764620748.949297, 6502
    default = TritonFormatter().format(record)
    assert re.fullmatch(r'W\d{4} \d\d:\d\d:\d\d\.949297 6502 model\.py:12\] '
                        r'"say \\"hi\\"\\n\\u0001"', default), default
    iso = TritonFormatter("ISO8601").format(record)
    assert iso == '2025-12-01T20:25:48Z W 6502 model.py:12] "say \\"hi\\"\\n\\u0001"'
    record.msg, record.args = "\n+---+\n| t |", ()
    assert TritonFormatter().format(record).endswith("model.py:12] \n+---+\n| t |")


def test_server_exposes_log_settings(add_sub_repo):
    with Server(model_repository=add_sub_repo.path) as server:
        assert server.log_settings() == LogSettings().to_dict()
        assert server.update_log_settings(log_verbose_level=2)["log_verbose_level"] == 2
        assert server.log_settings()["log_verbose_level"] == 2


def _messages(log: str) -> list[str]:
    return [line.split('] "', 1)[1].rstrip('"') for line in log.splitlines() if '] "' in line]


@pytest.mark.parametrize("verbose", [0, 1])
def test_loading_running_and_unloading_log_tritons_engine_lines(add_sub_repo, tmp_path,
                                                                 verbose):
    log = tmp_path / "server.log"
    with Server(model_repository=add_sub_repo.path, log_file=str(log),
                log_verbose=verbose) as server:
        x = np.arange(4, dtype=np.float32).reshape(1, 4)
        server.model("add_sub").infer({"INPUT0": x, "INPUT1": x}).result()
    messages = _messages(log.read_text())
    info = ["loading: add_sub:1", "TRITONBACKEND_ModelInstanceInitialize: add_sub_0_0 "
            "(CPU device 0)", "successfully loaded 'add_sub'",
            "successfully unloaded 'add_sub' version 1"]
    engine = [m for m in messages if m in info or "TRITONBACKEND" in m or "instance" in m
              or "Setting state" in m or "backend thread" in m]
    if not verbose:
        assert engine == info
        return
    assert engine == [
        "loading: add_sub:1", "TRITONBACKEND_ModelInitialize: add_sub (version 1)",
        "TRITONBACKEND_ModelInstanceInitialize: add_sub_0_0 (CPU device 0)",
        "Creating instance add_sub_0_0 on CPU using artifact 'model.py'",
        "TRITONBACKEND_ModelInstanceInitialize: instance initialization successful "
        "add_sub_0_0 (device 0)",
        "Starting backend thread for add_sub_0_0 at nice 0 on device 0...",
        "successfully loaded 'add_sub'",
        "[request id: <id_unknown>] Setting state from INITIALIZED to INITIALIZED",
        "[request id: <id_unknown>] Setting state from INITIALIZED to PENDING",
        "[request id: <id_unknown>] Setting state from PENDING to EXECUTING",
        "model add_sub, instance add_sub_0_0, executing 1 requests",
        "[request id: <id_unknown>] Setting state from EXECUTING to RELEASED",
        "TRITONBACKEND_ModelInstanceExecute: model instance name add_sub_0_0 released 1 "
        "requests",
        "Stopping backend thread for add_sub_0_0...",
        "TRITONBACKEND_ModelInstanceFinalize: delete instance state",
        "TRITONBACKEND_ModelFinalize: delete model state",
        "successfully unloaded 'add_sub' version 1"]
