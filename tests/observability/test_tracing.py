"""Trace settings: Triton's names and JSON shapes, global values and per-model overrides."""

from __future__ import annotations

import re

import pytest

from infercore import InvalidArgumentError
from infercore.observability.tracing import TraceSettingsStore


def test_defaults_match_tritons_json_shape():
    assert TraceSettingsStore().get() == {
        "trace_file": "", "trace_level": ["OFF"], "trace_rate": "1000",
        "trace_count": "-1", "log_frequency": "0", "trace_mode": "triton",
    }


def test_model_overrides_fall_back_to_global_values():
    store = TraceSettingsStore({**TraceSettingsStore().get(), "trace_file": "/tmp/t.json"})
    store.update({"trace_rate": 5})
    updated = store.update({"trace_level": ["TIMESTAMPS", "TENSORS"], "trace_count": "10"},
                           model="add_sub")
    assert updated["trace_level"] == ["TIMESTAMPS", "TENSORS"]
    assert updated["trace_rate"] == "5" and updated["trace_count"] == "10"
    assert store.get()["trace_level"] == ["OFF"]
    cleared = store.update({"trace_level": None}, model="add_sub")
    assert cleared["trace_level"] == ["OFF"] and cleared["trace_count"] == "10"


@pytest.mark.parametrize(
    ("changes", "message"),
    [({"trace_level": ["OFF", "TIMESTAMPS"]}, "Expect only one trace level 'OFF' is specified"),
     ({"trace_rate": "x"}, "Unable to parse 'trace_rate', got: x"),
     ({"trace_count": "-2"}, "Unable to parse 'trace_count'. Expecting value >= -1, got: -2"),
     ({"trace_rate": "4294967296"}, "Unable to parse 'trace_rate', value is out of range "
                                    "[ 0, 4294967295 ], got: 4294967296"),
     ({"trace_level": ["TIMESTAMPS"]},
      "Attempting to set invalid trace setting :trace file name is not given"),
     ({"trace_mode": "zipkin"}, "unknown trace setting 'trace_mode'"),
     ({"nope": "1"}, "unknown trace setting 'nope'")],
)
def test_bad_values_raise_and_change_nothing(changes, message):
    store = TraceSettingsStore()
    with pytest.raises(InvalidArgumentError, match=re.escape(message)):
        store.update(changes)
    assert store.get() == TraceSettingsStore().get()


def test_numbers_are_read_as_tritonserver_reads_them():
    store = TraceSettingsStore()
    assert store.update({"trace_rate": " 12abc"})["trace_rate"] == "12"
    assert store.update({"trace_rate": "-1"})["trace_rate"] == "4294967295"
    assert store.update({"log_frequency": "+3"})["log_frequency"] == "3"


def test_level_lists_naming_no_level_change_nothing():
    store = TraceSettingsStore({**TraceSettingsStore().get(), "trace_file": "/tmp/t.json"})
    store.update({"trace_level": ["TENSORS", "TIMESTAMPS", "TENSORS"]})
    for ignored in (["LOUD"], [], ["timestamps"]):
        assert store.update({"trace_level": ignored})["trace_level"] == ["TIMESTAMPS", "TENSORS"]


def test_cleared_settings_go_back_to_the_start_up_values():
    start = {**TraceSettingsStore().get(), "trace_rate": "50"}
    store = TraceSettingsStore(start)
    store.update({"trace_rate": "7", "trace_count": "3"})
    assert store.update({"trace_rate": None})["trace_rate"] == "50"
    store.update({"trace_rate": "9"}, model="m")
    assert store.update({"trace_rate": None}, model="m")["trace_rate"] == "50"
    assert store.overrides("m") == frozenset()
