"""The inference endpoint: body -> InferRequest -> engine -> response body.

``InferHandler.infer`` is a coroutine that the connection starts at once, on the
frontend's event-loop thread. It awaits the request's ResponseStream, which lets the
engine execute short models inline on this thread (no thread crossing, and the
coroutine finishes without ever waiting) and otherwise parks on a future that the
engine resolves; only then does the connection step it on (http_eager, no Task).
Cancelling it there (the client went away) cancels the request through the stream.
A body that costs much to decode (large_requests.py) is decoded and started on the
frontend's large-request thread instead, so that the loop serves the other clients
meanwhile; any body over ``LARGE_REQUEST_BYTES`` refused is followed by
``release_refused``.

As in Triton, the model is looked up (a decoupled one refused) and the headers read before
the body, and those errors are answered ``text/plain``; errors found in the body or by the
model's validator are ``application/json``; errors of the answer itself (the model
failed, an output cannot be sent) are ``text/plain`` again, as Triton sends them.

An ``InferDialect`` says how a frontend frames bodies: KServe's (the size of the JSON
header of a binary body in ``Inference-Header-Content-Length``, compression honoured) or
a cloud frontend's (SageMaker, Vertex AI: the size in a ``Content-Type`` of the form
``<binary_mime><size>``, bodies neither decompressed nor compressed, as Triton's
frontends for them take every body as identity-encoded).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ...caller import Caller
from ...errors import InternalError, InvalidArgumentError, TritonError, UnsupportedError
from ...kserve.status import as_triton_error
from ...response import InferResponse, ResponseStream
from ...server import Server
from ..header_forward import compile_forward_pattern
from ..large_requests import LARGE_REQUEST_BYTES, LargeRequests, costs_much
from ..shm import RegionUse, SystemSharedMemory
from ..trace_stamps import (
    HTTP_RECV_END,
    HTTP_RECV_START,
    INFER_RESPONSE_COMPLETE,
    held_trace,
    release,
)
from .busy_poll import BusyPoll, hold_while_a_thread_answers
from .decode import DecodedInfer, decode_infer, parse_header_length, raw_infer
from .encode import encode_infer
from .header_cache import HeaderCache
from .messages import (
    HttpRequest,
    HttpResponse,
    accepted_encoding,
    compress,
    decompress,
    error_response,
)

if TYPE_CHECKING:
    from ...observability.trace_record import Trace

__all__ = ["InferDialect", "InferHandler", "KSERVE"]

logger = logging.getLogger(__name__)

_DECOUPLED = "HTTP end point doesn't support models with decoupled transaction policy"
_UNSUPPORTED_ENCODING = "Unsupported compression type"
_TEXT = b"text/plain"
_ACCEPT_ENCODING_HINT = b"accept-encoding: gzip, deflate\r\n"
_CONTENT_ENCODING = {"gzip": b"content-encoding: gzip\r\n",
                     "deflate": b"content-encoding: deflate\r\n"}


@dataclass(frozen=True, slots=True)
class InferDialect:
    """How inference bodies are framed. ``binary_mime`` None: KServe's framing; else the
    Content-Type prefix whose suffix is the JSON header's size (the cloud frontends'),
    and with ``binary_reply_mime`` a binary answer is labelled so too (SageMaker's;
    Vertex AI answers with KServe's headers)."""

    binary_mime: bytes | None = None
    binary_reply_mime: bool = False

    def header_length(self, request: HttpRequest, body: bytes,
                      decompressed: bool = False) -> int | None:
        """The size of the JSON header of ``body``: None, all of it; 0: raw inputs."""
        if self.binary_mime is None:
            # Triton measures the body by its Content-Length field unless it decompressed
            # it; the two differ only for a body framed by Transfer-Encoding as well
            declared = request.headers.get(b"content-length")
            length = len(body) if decompressed or declared is None else int(declared)
            header = parse_header_length(
                request.headers.get(b"inference-header-content-length"), length)
            return length if header is None and length != len(body) else header
        # Triton's GetInferenceHeaderLength of its SageMaker and Vertex AI frontends
        content_type = request.headers.get(b"content-type")
        position = -1 if content_type is None else content_type.find(self.binary_mime)
        if position < 0:
            return len(body)
        assert content_type is not None
        if position > 0:
            raise InvalidArgumentError(
                f"expect MIME type for binary data starts with "
                f"'{self.binary_mime.decode()}', got: {content_type.decode('latin-1')}")
        # the size is read with atoi and range-checked as Inference-Header-Content-Length
        return parse_header_length(content_type[len(self.binary_mime):], len(body))


KSERVE = InferDialect()


class InferHandler:
    """Serves ``POST /v2/models/{model}[/versions/{version}]/infer``, and the cloud
    frontends' inference routes in their ``dialect``."""

    def __init__(self, server: Server, shm: SystemSharedMemory, *, max_input_size: int,
                 header_forward_pattern: str = "", busy_poll: BusyPoll | None = None,
                 dialect: InferDialect = KSERVE, large: LargeRequests | None = None,
                 caller: Caller = Caller.LOOP) -> None:
        self._server = server
        self._caller = caller  # the loop's: requests started on it (dispatch.py)
        self._dialect = dialect
        self._busy_poll = busy_poll
        self._large = large  # None: every body is decoded on the loop
        self._shm = shm
        self._max_input_size = max_input_size
        self._forward = compile_forward_pattern(header_forward_pattern,
                                                "http-header-forward-pattern")
        self._headers = HeaderCache()

    async def infer(self, request: HttpRequest, model: str, version: int, *,
                    json_request_errors: bool = False) -> HttpResponse:
        """The answer to an inference request. ``json_request_errors``: the errors found
        before the model runs are all declared JSON (SageMaker's multi-model invoke)."""
        received = None  # set once Triton would have sampled the request for tracing
        try:  # what Triton checks before it declares a JSON answer: errors are text/plain
            if self._server.model(model, version).decoupled:
                raise UnsupportedError(_DECOUPLED)
            received = request.received
            body = request.body
            encoding = request.headers.get(b"content-encoding")
            if encoding is not None and self._dialect is KSERVE:
                body = decompress(body, encoding, self._max_input_size)
            # ("identity" leaves the body as it came: measured by its Content-Length)
            header_length = self._dialect.header_length(request, body,
                                                         body is not request.body)
        except TritonError as exc:
            if received is not None:
                self._server.tracer.refused(model, _received_stamps(received))
            if json_request_errors:
                return error_response(exc)
            refusal = error_response(exc, content_type=_TEXT)
            if isinstance(exc, UnsupportedError) and exc.message == _UNSUPPORTED_ENCODING:
                refusal.extra_headers = _ACCEPT_ENCODING_HINT
            return refusal
        except Exception as exc:  # noqa: BLE001 - any failure becomes a 500, never a crash
            return error_response(as_triton_error(exc), content_type=_TEXT)
        regions = self._shm.use()  # the shared memory the request uses until answered
        try:
            return await self._run(request, model, version, body, header_length, regions)
        finally:
            regions.release()

    async def _run(self, request: HttpRequest, model: str, version: int, body: bytes,
                   header_length: int | None, regions: RegionUse) -> HttpResponse:
        large = self._large
        if large is not None and not costs_much(
                body, len(body) if header_length is None else header_length, len(body)):
            large = None
        try:
            if large is None:
                decoded, stream = self._start(request, model, version, body, header_length,
                                              regions, self._caller)
            else:  # off the loop, which serves every other client meanwhile
                decoded, stream = await large.run(
                    self._start, request, model, version, body, header_length, regions,
                    Caller.LOOP)  # a thread that serves every client: never stalled
        except Exception as exc:  # noqa: BLE001 - any failure is answered
            if self._large is not None and len(body) > LARGE_REQUEST_BYTES:
                # once this coroutine (holding the body) has ended
                asyncio.get_running_loop().call_soon(self._large.release_refused)
            error = as_triton_error(exc)
            # Triton's verbose line for a request refused before it runs (its QA checks
            # that an unescaped log shows the message as it is: log_format_test.py)
            logger.debug("[request id: <id_unknown>] Infer failed: %s", error.message)
            return error_response(error)
        trace = None if request.received is None else held_trace(decoded.request)
        if trace is None:
            return await self._answer(request, stream, decoded)
        try:
            reply = await self._answer(request, stream, decoded, trace)
        except BaseException:  # cancelled: the client went away
            trace.frontend_done()
            raise
        reply.trace = trace  # the connection stamps the send and lets the trace end
        return reply

    async def _answer(self, request: HttpRequest, stream: ResponseStream,
                      decoded: DecodedInfer, trace: Trace | None = None) -> HttpResponse:
        """The answer of a request that started."""
        try:  # the answer's own errors: Triton sends them without a content type
            # a thread of ours answers: the loop must leave it the GIL meanwhile
            held = hold_while_a_thread_answers(self._busy_poll, stream)
            try:
                response = await stream.__anext__()
            finally:
                if held is not None:
                    held.release()
            if not response.final:
                # Not decoupled, yet answering through its response sender (Triton's Python
                # backend allows it): the final flag may follow alone, later.
                async for later in stream:
                    response = later
            if trace is not None:
                trace.frontend_stamp(INFER_RESPONSE_COMPLETE)
            if response.error is not None:
                return error_response(response.error, content_type=_TEXT)
            return self._reply(request, response, decoded)
        except StopAsyncIteration:
            return error_response(InternalError("expected a single response, got 0"),
                                  content_type=_TEXT)
        except TritonError as exc:
            return error_response(exc, content_type=_TEXT)
        except Exception as exc:  # noqa: BLE001
            return error_response(as_triton_error(exc), content_type=_TEXT)

    def _start(self, request: HttpRequest, model: str, version: int, body: bytes,
               header_length: int | None, regions: RegionUse, caller: Caller
               ) -> tuple[DecodedInfer, ResponseStream]:
        """Decode the request and start it in the engine; raises the error to answer."""
        received = request.received
        if received is None:
            decoded = self._decode(request, model, version, body, header_length, regions)
            # caller: awaited at once, so no instance thread is woken in vain
            return decoded, self._server.infer(decoded.request, raise_on_error=False,
                                               caller=caller)
        stamps = _received_stamps(received)
        try:
            decoded = self._decode(request, model, version, body, header_length, regions)
        except BaseException:
            self._server.tracer.refused(model, stamps)  # as Triton, which sampled it
            raise
        decoded.request.frontend_stamps = stamps
        try:
            return decoded, self._server.infer(decoded.request, raise_on_error=False,
                                               caller=caller)
        except BaseException:
            # Refused by the model's checks: Triton writes nothing of its trace (the
            # receive timestamps too are lost), nor does infercore; sampled, then
            # refused: its trace ends now.
            release(decoded.request)
            raise

    def _decode(self, request: HttpRequest, model: str, version: int, body: bytes,
                header_length: int | None, regions: RegionUse) -> DecodedInfer:
        if header_length == 0 or (header_length is None and not body):
            decoded = raw_infer(model, version, body)
        else:
            decoded = decode_infer(model, version, body, header_length, regions,
                                   self._headers)
        if self._forward is not None and request.raw_headers:
            parameters = decoded.request.parameters
            for name, value in request.raw_headers:
                key = name.decode("latin-1")
                if self._forward.search(key):
                    parameters[key] = value.decode("latin-1")
        return decoded

    def _reply(self, request: HttpRequest, response: InferResponse,
               decoded: DecodedInfer) -> HttpResponse:
        classes = _no_classification
        if any(plan.classification for plan in decoded.outputs.values()):
            model = self._server.model(response.model, response.model_version)

            def classes(output: str) -> tuple[list[str], bool]:
                config: dict[str, Any] = model.config()
                return model.labels(output), int(config.get("max_batch_size", 0)) > 0

        encoded = encode_infer(response, decoded, classes)
        parts: list[Any] = [encoded.header, *encoded.binary]
        extra = b""
        content_type = b"application/json"
        if encoded.binary and self._dialect.binary_reply_mime:
            assert self._dialect.binary_mime is not None
            content_type = self._dialect.binary_mime + b"%d" % len(encoded.header)
        elif encoded.binary:
            content_type = b"application/octet-stream"
            extra = b"inference-header-content-length: %d\r\n" % len(encoded.header)
        accept = request.headers.get(b"accept-encoding")
        if accept is not None and self._dialect is KSERVE:
            encoding = accepted_encoding(accept)
            if encoding != "identity":
                parts = [compress(parts, encoding)]
                extra += _CONTENT_ENCODING[encoding]
        return HttpResponse(200, parts, content_type, extra)


def _received_stamps(received: tuple[int, int]) -> list[tuple[str, int]]:
    return [(HTTP_RECV_START, received[0]), (HTTP_RECV_END, received[1])]


def _no_classification(output: str) -> tuple[list[str], bool]:
    raise InternalError(f"no classification was requested for output '{output}'")
