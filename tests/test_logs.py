"""Log settings: Triton's switches applied to the infercore loggers, file and format."""

from __future__ import annotations

import logging

import pytest

from infercore import InvalidArgumentError, Server
from infercore.logs import LogSettings, LogSettingsManager


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
        ({"log_verbose_level": -1}, ">= 0"),
        ({"log_format": "json"}, "invalid argument for log_format"),
    ],
)
def test_bad_settings_raise_and_change_nothing(manager, changes, message):
    before = manager.settings
    with pytest.raises(InvalidArgumentError, match=message):
        manager.update(changes)
    assert manager.settings == before


def test_unwritable_log_file_is_a_clear_error(manager, tmp_path):
    with pytest.raises(InvalidArgumentError, match="failed to open log file"):
        manager.update({"log_file": str(tmp_path / "missing" / "x.log")})


def test_server_exposes_log_settings(add_sub_repo):
    with Server(model_repository=add_sub_repo.path) as server:
        assert server.log_settings() == LogSettings().to_dict()
        assert server.update_log_settings(log_verbose_level=2)["log_verbose_level"] == 2
        assert server.log_settings()["log_verbose_level"] == 2
