"""ModelInfer: one request in, one response out; the gRPC frontend's hot path.

The handler receives the serialized request (grpc does no deserialization, so a malformed
message becomes INVALID_ARGUMENT rather than an unexpected handler error), looks the model
up first (an unknown model is NOT_FOUND whatever the body holds, as in Triton), decodes
the request and starts it in the engine saying who calls (``caller=Caller.LOOP``: the
completion-queue or the large-request thread, each serving many clients), which lets the
engine execute a short model inline on the calling thread: a typical request never
crosses threads. The handler, ``model_infer_direct``, is grpc_core's
``DirectUnary``: it runs on the completion-queue thread. When the model ran inline it
answers at once; otherwise it watches the call for cancellation and the instance thread
that finishes the request sends the answer. Cancelling the RPC (client cancel, deadline,
shutdown) cancels the engine request.

A message over ``LARGE_REQUEST_BYTES`` has its raw tensors split off first (grpc_codec),
and when the rest costs much to decode (large_requests.py) it is parsed, decoded and
started on the frontend's large-request thread, so that the thread serving
every client is not held up by it; any message over ``LARGE_REQUEST_BYTES`` refused is
followed by ``release_refused``. The shared-memory regions a request names are in use
(``Prepared.regions``) until its answer is serialized.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass

import grpc
from google.protobuf.message import DecodeError
from tritonclient.grpc import service_pb2 as pb

from ...caller import Caller
from ...errors import InternalError, InvalidArgumentError, UnsupportedError
from ...handle import Model
from ...kserve.status import as_triton_error, grpc_status
from ...response import InferResponse, ResponseStream
from ...server import Server
from ..header_forward import compile_forward_pattern
from ..large_requests import LARGE_REQUEST_BYTES, LargeRequests, costs_much
from ..shm import RegionUse, SystemSharedMemory
from ..trace_stamps import (
    GRPC_SEND_END,
    GRPC_SEND_START,
    GRPC_WAITREAD_END,
    GRPC_WAITREAD_START,
    INFER_RESPONSE_COMPLETE,
    held_trace,
    release,
)
from .codec import (
    DecodedRequest,
    decode_request,
    parse_version,
    split_raw_contents,
)
from .core import DirectUnary, UnaryCall, compression_metadata
from .encode import LabelsFor, encode_response, serialize_response

__all__ = ["InferService", "Prepared", "prepare"]

logger = logging.getLogger(__name__)

_DECOUPLED = "ModelInfer RPC doesn't support models with decoupled transaction policy"
_parse = pb.ModelInferRequest.FromString
_FIELDS_SPLIT_HERE = 64  # top-level fields read on the completion-queue thread, at most


@dataclass(slots=True)
class Prepared:
    """A decoded request and what answering it needs from its model."""

    decoded: DecodedRequest
    model: Model
    decoupled: bool
    batched: bool  # max_batch_size > 0: classification works per batch item
    regions: RegionUse  # the shared memory it reads and writes, released once answered

    def labels_for(self) -> LabelsFor | None:
        """The classification label lookup, when some output asks for classification."""
        if not self.decoded.outputs:
            return None
        model, batched = self.model, self.batched
        return lambda output: (model.labels(output), batched)


def parse_request(data: bytes) -> pb.ModelInferRequest:
    try:
        return _parse(data)
    except DecodeError as exc:
        raise InvalidArgumentError(f"failed to parse the inference request: {exc}") from None


def prepare(server: Server, shm: SystemSharedMemory, msg: pb.ModelInferRequest,
            forward: re.Pattern[str] | None = None,
            metadata: tuple[tuple[str, str | bytes], ...] | None = None,
            raw_contents: Sequence[bytes | memoryview] | None = None) -> Prepared:
    """Resolve the model of ``msg`` and decode it; raises the error to answer with.

    ``forward`` names request headers (from ``metadata``) to pass on as string
    parameters, as tritonserver's ``--grpc-header-forward-pattern`` does;
    ``raw_contents``: its ``raw_input_contents`` split off (grpc_codec).
    """
    model = server.model(msg.model_name, parse_version(msg.model_version))
    decoupled = model.decoupled  # raises NotFoundError / UnavailableError first
    batching = model.max_batch_size > 0
    regions = shm.use()
    try:
        decoded = decode_request(msg, regions, raw_contents)
    except BaseException:
        regions.release()
        raise
    if decoded.outputs:  # output regions are written later, but in use from now on
        for spec in decoded.outputs.values():
            if spec.region:
                regions.hold(spec.region)
    if forward is not None and metadata:
        parameters = decoded.request.parameters
        for key, value in metadata:
            if forward.search(key):
                parameters[key] = value if isinstance(value, str) else value.decode("latin-1")
    return Prepared(decoded, model, decoupled, batching, regions)


class InferService:
    """The ModelInfer RPC."""

    def __init__(self, server: Server, shm: SystemSharedMemory, large: LargeRequests, *,
                 compression: grpc.Compression | None = None,
                 header_forward_pattern: str = "") -> None:
        self._server = server
        self._shm = shm
        self._large = large
        self._compression = compression
        self._forward = compile_forward_pattern(header_forward_pattern,
                                                "grpc-header-forward-pattern")
        self._reply_metadata = compression_metadata(compression)
        self._tracer = server.tracer

    @property
    def forward_pattern(self) -> re.Pattern[str] | None:
        return self._forward

    @property
    def compression(self) -> grpc.Compression | None:
        return self._compression

    def direct(self) -> DirectUnary:
        """The handler for grpc_core's completion-queue thread."""
        return DirectUnary(self.model_infer_direct)

    def model_infer_direct(self, call: UnaryCall, data: bytes) -> None:
        split = None
        if len(data) > LARGE_REQUEST_BYTES:
            # a few fields around large tensors are split here; many go to the thread
            split = split_raw_contents(data, _FIELDS_SPLIT_HERE)
            if split is None or costs_much(split[0], len(split[0]), len(data)):
                self._large.submit(self._infer_large, call, data)
                return
        if self._infer_direct(call, data, split) and split is not None:
            self._large.release_refused()  # large, though cheap to decode

    def _infer_large(self, call: UnaryCall, data: bytes) -> None:
        """``_infer_direct`` on the large-request thread (it must answer the call)."""
        try:
            refused = self._infer_direct(call, data)
        except Exception as exc:  # a bug: still answer, or the call would hang
            logger.exception("gRPC: unexpected error in ModelInfer")
            call.fail(grpc.StatusCode.UNKNOWN, f"Unexpected {type(exc)}: {exc}")
            refused = True
        if refused:
            self._large.release_refused()

    def _infer_direct(self, call: UnaryCall, data: bytes,
                      split: tuple[bytes, list[memoryview]] | None = None) -> bool:
        """Start the request of ``data`` (``split``: its raw tensors split off) and answer
        ``call``, now or when it is done; True when it was refused before it started."""
        tracer = self._tracer
        read_start = tracer.now_ns() if tracer.active else 0
        try:
            prepared, stream = self._start(data, call.metadata, split, read_start=read_start)
        except Exception as exc:  # noqa: BLE001 - every failure is answered as a status
            # in a function of its own: a local here naming the error would make a cycle
            # with its traceback, keeping this frame and its data until a full collection
            _fail(call, exc)
            return True
        # Watch for a cancel before an instance thread may answer (UnaryCall's rule);
        # a request the model ran inline (the common case) needs no watch.
        if not stream.done:
            call.watch_cancel(stream.cancel)
            if stream.when_ready(lambda: self._answer(call, stream, prepared)):
                return False
        self._answer(call, stream, prepared)
        return False

    def _start(self, data: bytes, metadata: tuple[tuple[str, str | bytes], ...] | None,
               split: tuple[bytes, list[memoryview]] | None = None, read_start: int = 0
               ) -> tuple[Prepared, ResponseStream]:
        """Parse, decode and start a ModelInfer request; raises the error to answer with.
        ``read_start``: when the call's message came (trace clock; 0: not traced)."""
        if split is None and len(data) > LARGE_REQUEST_BYTES:
            split = split_raw_contents(data)
        if split is None:
            msg, raw = parse_request(data), None
        else:  # the tensors stay where they were received (grpc_codec)
            msg, raw = parse_request(split[0]), split[1]
        prepared = prepare(self._server, self._shm, msg, self._forward,
                           metadata if self._forward is not None else None, raw)
        request = prepared.decoded.request
        if read_start:
            request.frontend_stamps = [(GRPC_WAITREAD_START, read_start),
                                       (GRPC_WAITREAD_END, self._tracer.now_ns())]
        try:
            if prepared.decoupled:
                raise UnsupportedError(_DECOUPLED)
            # Caller.LOOP: the stream is read as soon as the request is done, on the
            # completion-queue or the large-request thread, which must not block
            return prepared, self._server.infer(request, raise_on_error=False,
                                                caller=Caller.LOOP)
        except BaseException:
            prepared.regions.release()  # not started: nothing else will release them
            if read_start:
                release(request)  # sampled, then refused: its trace ends now
            raise

    def _answer(self, call: UnaryCall, stream: ResponseStream, prepared: Prepared) -> None:
        """Send the (only) response of a finished request; on whichever thread has it."""
        request = prepared.decoded.request
        trace = None if request.frontend_stamps is None else held_trace(request)
        if trace is not None:
            trace.frontend_stamp(INFER_RESPONSE_COMPLETE)
        try:
            response = stream.next_nowait()
            if response is None:
                raise InternalError("expected a single response, got 0")
            if response.error is not None:
                raise response.error
            serialized = self._serialize(response, prepared)
        except Exception as exc:  # noqa: BLE001 - every failure is answered as a status
            _fail(call, exc)
            if trace is not None:
                trace.frontend_done()
            return
        finally:
            prepared.regions.release()
        if trace is None:
            call.reply(serialized, self._reply_metadata)
            return
        trace.frontend_stamp(GRPC_SEND_START)
        call.reply(serialized, self._reply_metadata)
        trace.frontend_stamp(GRPC_SEND_END)
        trace.frontend_done()

    def _serialize(self, response: InferResponse, prepared: Prepared) -> bytes:
        specs = prepared.decoded.outputs
        if specs is None:
            serialized = serialize_response(response)  # the common case, written directly
            if serialized is not None:
                return serialized
        out = pb.ModelInferResponse()
        encode_response(response, out, specs, self._shm, prepared.labels_for())
        return out.SerializeToString()


def _fail(call: UnaryCall, exc: BaseException) -> None:
    """End ``call`` with the status of ``exc``."""
    error = as_triton_error(exc)
    call.fail(grpc_status(error), error.message)
