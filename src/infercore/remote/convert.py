"""Triton's JSON answers (statistics, repository index) into infercore's values.

Both transports hand over Triton's JSON forms (gRPC messages are turned into the same
dicts first), so a RemoteServer returns what ``Server`` returns: ``ModelStatistics``,
``ModelIndexEntry``. Fields Triton does not report (infercore's per-instance executions
and failure reasons) keep their empty defaults.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..repository.states import ModelIndexEntry, ModelState
from ..stats import BatchStatistics, Duration, MemoryUsage, ModelStatistics, ResponseStatistics

__all__ = ["index_entry_from_json", "statistics_from_json"]

_STATES = {state.value: state for state in ModelState}


def _int(value: Any) -> int:
    # protobuf's JSON form writes 64-bit integers as strings
    return int(value) if value not in (None, "") else 0


def _duration(doc: Mapping[str, Any] | None) -> Duration:
    if not doc:
        return Duration()
    return Duration(_int(doc.get("count")), _int(doc.get("ns")))


def statistics_from_json(doc: Mapping[str, Any]) -> ModelStatistics:
    """One entry of Triton's ``model_stats`` list."""
    inference = doc.get("inference_stats") or {}
    batches = tuple(
        BatchStatistics(_int(b.get("batch_size")), _duration(b.get("compute_input")),
                        _duration(b.get("compute_infer")), _duration(b.get("compute_output")))
        for b in doc.get("batch_stats") or ())
    responses = {
        int(index): ResponseStatistics(
            compute_infer=_duration(r.get("compute_infer")),
            compute_output=_duration(r.get("compute_output")),
            success=_duration(r.get("success")),
            fail=_duration(r.get("fail")),
            empty_response=_duration(r.get("empty_response")),
            cancel=_duration(r.get("cancel")),
        )
        for index, r in (doc.get("response_stats") or {}).items()
    }
    memory = tuple(MemoryUsage(str(m.get("type", "")), _int(m.get("id")),
                               _int(m.get("byte_size")))
                   for m in doc.get("memory_usage") or ())
    version = doc.get("version", "")
    return ModelStatistics(
        name=str(doc.get("name", "")),
        version=int(version) if version not in (None, "") else -1,
        last_inference_ms=_int(doc.get("last_inference")),
        inference_count=_int(doc.get("inference_count")),
        execution_count=_int(doc.get("execution_count")),
        success=_duration(inference.get("success")),
        fail=_duration(inference.get("fail")),
        queue=_duration(inference.get("queue")),
        compute_input=_duration(inference.get("compute_input")),
        compute_infer=_duration(inference.get("compute_infer")),
        compute_output=_duration(inference.get("compute_output")),
        cache_hit=_duration(inference.get("cache_hit")),
        cache_miss=_duration(inference.get("cache_miss")),
        batch_stats=batches,
        response_stats=responses,
        memory_usage=memory,
    )


def index_entry_from_json(row: Mapping[str, Any]) -> ModelIndexEntry:
    """One row of Triton's repository index; a row with only a name is a model that was
    never loaded, as in ``Server.repository_index()``."""
    state = str(row.get("state") or "")
    return ModelIndexEntry(
        name=str(row.get("name", "")),
        version=str(row.get("version") or ""),
        state=_STATES.get(state, ModelState.UNKNOWN),
        reason=str(row.get("reason") or ""),
        name_only=not state,
    )
