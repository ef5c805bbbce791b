"""Triton's frontend timestamps on a traced request's trace.

Triton's frontends add their own timestamps to a sampled request's trace: HTTP_RECV_START
and HTTP_RECV_END (or GRPC_WAITREAD_START and GRPC_WAITREAD_END) for reading the
request, INFER_RESPONSE_COMPLETE when its response is complete, and HTTP_SEND_START /
HTTP_SEND_END (GRPC_SEND_START / GRPC_SEND_END, once per message of a stream) around
sending it. QA tools (qa/common/trace_summary.py) count a trace only if it has them.

A frontend reads the clock for the receive timestamps only while ``Tracer.active`` (some
scope may sample), and hands them to the request (``frontend_stamps``) before starting
it; a request the model samples then has a trace that waits for ``frontend_done``
(observability/trace_record.py), so the send timestamps still make it into the file.
Untraced requests cost the frontend one flag read.

Threads: the frontend's threads (event loop, completion-queue thread, the thread that
finishes a request); the trace's lock guards what it holds.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..request import InferRequest

if TYPE_CHECKING:
    from ..observability.trace_record import Trace

__all__ = ["GRPC_SEND_END", "GRPC_SEND_START", "GRPC_WAITREAD_END", "GRPC_WAITREAD_START",
           "HTTP_RECV_END", "HTTP_RECV_START", "HTTP_SEND_END", "HTTP_SEND_START",
           "INFER_RESPONSE_COMPLETE", "held_trace", "release"]

HTTP_RECV_START = "HTTP_RECV_START"
HTTP_RECV_END = "HTTP_RECV_END"
HTTP_SEND_START = "HTTP_SEND_START"
HTTP_SEND_END = "HTTP_SEND_END"
GRPC_WAITREAD_START = "GRPC_WAITREAD_START"
GRPC_WAITREAD_END = "GRPC_WAITREAD_END"
GRPC_SEND_START = "GRPC_SEND_START"
GRPC_SEND_END = "GRPC_SEND_END"
INFER_RESPONSE_COMPLETE = "INFER_RESPONSE_COMPLETE"


def held_trace(request: InferRequest) -> Trace | None:
    """The trace of ``request`` if it waits for this frontend's timestamps (only a trace
    the server sampled, trace_record.Trace, has ``held``; frontends see it through the
    request, not by importing the engine's modules)."""
    trace = request.trace
    if getattr(trace, "held", False):
        return trace  # type: ignore[return-value]
    return None


def release(request: InferRequest) -> None:
    """The frontend will not answer ``request`` (refused, abandoned): let its trace end."""
    trace = held_trace(request)
    if trace is not None:
        trace.frontend_done()
