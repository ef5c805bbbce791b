"""Trace settings: Triton's names and JSON shapes, global values and per-model overrides."""

from __future__ import annotations

import pytest

from infercore import InvalidArgumentError
from infercore.tracing import TraceSettingsStore


def test_defaults_match_tritons_json_shape():
    assert TraceSettingsStore().get() == {
        "trace_file": "", "trace_level": ["OFF"], "trace_rate": "1000",
        "trace_count": "-1", "log_frequency": "0", "trace_mode": "triton",
    }


def test_model_overrides_fall_back_to_global_values():
    store = TraceSettingsStore()
    store.update({"trace_rate": 5})
    updated = store.update({"trace_level": ["TIMESTAMPS", "TENSORS"], "trace_count": "10"},
                           model="add_sub")
    assert updated["trace_level"] == ["TIMESTAMPS", "TENSORS"]
    assert updated["trace_rate"] == "5" and updated["trace_count"] == "10"
    assert store.get()["trace_level"] == ["OFF"]
    cleared = store.update({"trace_level": None}, model="add_sub")
    assert cleared["trace_level"] == ["OFF"] and cleared["trace_count"] == "10"


@pytest.mark.parametrize(
    "changes",
    [{"trace_level": ["LOUD"]}, {"trace_level": ["OFF", "TIMESTAMPS"]}, {"trace_rate": "x"},
     {"trace_count": "-2"}, {"trace_mode": "zipkin"}, {"nope": "1"}, {"trace_level": []}],
)
def test_bad_values_raise_and_change_nothing(changes):
    store = TraceSettingsStore()
    with pytest.raises(InvalidArgumentError):
        store.update(changes)
    assert store.get()["trace_level"] == ["OFF"]
