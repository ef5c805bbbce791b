"""What a conformance case is: a small repository, server flags, and requests in order.

A ``Suite`` is one server: its models, its flags, and the cases that run against it in
the order given (a case may rely on the state an earlier case of its suite left). A
``Case`` is a name and a sequence of steps; each step yields one answer, and the answers
are what the recorder writes down from real Triton and the replay compares infercore's
against. A step is an HTTP request (``Http``), a gRPC call (``Grpc``, or ``GrpcStream``
for ModelStreamInfer), a local action on shared memory (``Shm``) whose answer is what
the action saw, a look at a log file the server writes (``LogFile``) or at a Triton trace
file (``TraceFile``); ``Settled``
repeats an HTTP or gRPC step until the server's state settles.

Two kinds of case do not compare with what Triton 2.51 answered:
- ``newer``: current Triton answers otherwise than 2.51 (a default or a check added
  since); the citation says where current Triton's behaviour is documented, and
  ``expect`` gives the answers per step (only the fields given are compared).
- ``departure``: infercore answers differently on purpose; the reason is recorded in the
  golden file next to Triton's answer, and ``expect`` gives infercore's.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["Case", "Grpc", "GrpcStream", "Http", "LogFile", "Model", "RepoFile", "Settled",
           "Shm", "Step", "TraceFile",
           "Suite", "binary_body", "b64", "raw_tensor"]


@dataclass(frozen=True)
class Model:
    """One model folder: ``config`` is config.pbtxt (None: no config file); ``files``
    maps paths under the model folder (``"1/model.py"``) to their text."""

    name: str
    config: str | None
    files: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Http:
    """One HTTP request on a new connection.

    ``body`` is sent with a Content-Length unless ``chunks`` is given (then the body is
    sent chunked, ``trailers`` after the last chunk) or ``raw`` is (then those bytes are
    the whole request, sent as they are, and ``responses`` answers are read from it).
    ``half_close``: the client shuts its side for writing once everything is sent (the
    server reads the end of the stream). ``json`` is a shorthand for a compact JSON body.
    Placeholders ``{http_port}``, ``{grpc_port}``, ``{tmp}`` in the path, headers, body,
    chunks and trailers are filled in per run.
    """

    method: str
    path: str
    json: Any = None
    body: bytes | str | None = None
    headers: Sequence[tuple[str, str]] = ()
    chunks: Sequence[bytes] | None = None
    trailers: Sequence[tuple[str, str]] = ()
    raw: bytes | None = None
    responses: int = 1
    half_close: bool = False

    def payload(self) -> bytes | None:
        if self.json is not None:
            return json.dumps(self.json, separators=(",", ":")).encode()
        if isinstance(self.body, str):
            return self.body.encode()
        return self.body


@dataclass(frozen=True)
class Grpc:
    """One unary call of ``inference.GRPCInferenceService``: ``method`` (``"ModelInfer"``)
    and its request in protobuf's JSON form; ``raw`` becomes ``raw_input_contents``.
    A method the service does not have (or a full ``/package.Service/Method`` path) is
    called with an empty message, and only its status is the answer. ``compression``
    (``"gzip"``, ``"deflate"``) compresses the request message."""

    method: str
    request: Mapping[str, Any] = field(default_factory=dict)
    raw: Sequence[bytes] = ()
    metadata: Sequence[tuple[str, str]] = ()
    compression: str | None = None


@dataclass(frozen=True)
class GrpcStream:
    """One ModelStreamInfer call: the requests are written, then the stream is closed for
    writing; the answer is every message the server streamed back, then the status."""

    requests: Sequence[Mapping[str, Any]]
    raw: Sequence[Sequence[bytes]] = ()
    metadata: Sequence[tuple[str, str]] = ()
    compression: str | None = None  # as Grpc's


@dataclass(frozen=True)
class Shm:
    """A local action on POSIX shared memory: ``create`` (key, size, data at offset 0),
    ``read`` (size bytes at offset: the answer), ``unlink``, ``truncate`` (to size) or
    ``symlink`` (``key`` made a link in /dev/shm to ``target``, a path under {tmp})."""

    op: str
    key: str
    size: int = 0
    data: bytes = b""
    offset: int = 0
    target: str = ""


@dataclass(frozen=True)
class Settled:
    """``step`` sent again, up to ``timeout_s``, while its answer still contains
    ``pending`` (or, with ``until``, does not contain ``until`` yet); the answer is the
    last one. For state a server changes after it answered: Triton's unload returns while
    the model is still UNLOADING in the index; a poll finds a change a while after it."""

    step: Http | Grpc
    pending: str = "UNLOADING"
    timeout_s: float = 30.0
    until: str | None = None


@dataclass(frozen=True)
class RepoFile:
    """A change to a file of the run's folder (``{tmp}``; the repository is
    ``{tmp}/models``): ``write`` ``text`` to ``path`` (folders made as needed) or
    ``remove`` it (a folder with everything in it). For what a polling server finds."""

    op: str
    path: str
    text: str = ""


@dataclass(frozen=True)
class LogFile:
    """The lines of the file at ``path`` (a server's ``--log-file``) that contain
    ``contains``. A server may write a line after it answered the request that caused it
    (the Python backend's log lines travel from the model's process), so the step first
    waits, a few seconds at most, for a line containing ``until`` (default: ``contains``).
    ``messages``: the answer is the lines' messages (``log_messages``), for lines whose
    source location is Triton's C++ file in one and infercore's Python in the other."""

    path: str
    contains: str
    until: str | None = None
    messages: bool = False  # compare the messages only (log_prefix): not the locations
    # the lines sorted by what follows their prefix: lines logged by loads that run side by
    # side (Triton's and infercore's) come in any order
    sort: bool = False


@dataclass(frozen=True)
class TraceFile:
    """What the Triton trace file at ``path`` holds, counted (its timestamps are volatile):
    the number of traces per model and of timestamps per name. A server writes a trace
    after it answered the request, so the step first waits, a few seconds at most, for
    the file to exist and hold a complete JSON array; ``{"trace_file": "missing"}``
    otherwise. ``names``: the timestamp names counted (all when empty). ``summary``: also
    what Triton's QA summary (qa/common/trace_summary.py) makes of the file: per frontend
    (a root trace with HTTP_RECV_START or GRPC_WAITREAD_START, and its children), the
    traces per model that have REQUEST_START and REQUEST_END, and every span whose end
    comes before its start."""

    path: str
    names: tuple[str, ...] = ()
    summary: bool = False


Step = Http | Grpc | GrpcStream | Shm | Settled | LogFile | TraceFile | RepoFile


@dataclass(frozen=True)
class Case:
    name: str
    steps: Sequence[Step]
    note: str = ""
    newer: str | None = None
    departure: str | None = None
    expect: Sequence[Mapping[str, Any] | None] | None = None

    def __post_init__(self) -> None:
        if (self.newer or self.departure) and self.expect is None:
            raise ValueError(f"case {self.name}: newer/departure cases give `expect`")


@dataclass(frozen=True)
class Suite:
    """One server run. ``startup=True``: the server is expected to stop by itself (a bad
    command line, a repository that fails with --exit-on-error); its answer is the exit
    status and the error line, and ``cases`` must be empty. ``ports=False``: the suite's
    flags set the ports and addresses themselves (``{http_port}`` ... placeholders);
    ``wait_ports`` then names the placeholders of the ports the cases need listening
    before they start (a server may open one port a moment after another).
    ``infercore_flags`` go to infercore alone, after ``flags``: flags current Triton has
    and Triton 2.51 refuses as unknown (``--allow-client-shm=true`` for the suites that use
    shared memory), so both servers are asked for the same behaviour. ``env``: environment
    variables both servers start with (placeholders filled in), for settings tritonserver
    reads from its environment (SageMaker's and Vertex AI's)."""

    name: str
    area: str
    models: Sequence[Model] = ()
    flags: Sequence[str] = ()
    cases: Sequence[Case] = ()
    infercore_flags: Sequence[str] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    startup: bool = False
    ports: bool = True
    wait_ports: Sequence[str] = ()
    wait_ready: bool = True
    startup_note: str = ""
    startup_newer: str | None = None
    startup_departure: str | None = None
    startup_expect: Mapping[str, Any] | None = None

    def __post_init__(self) -> None:
        names = [case.name for case in self.cases]
        if len(names) != len(set(names)):
            raise ValueError(f"suite {self.name}: duplicate case names")
        if self.startup and self.cases:
            raise ValueError(f"suite {self.name}: a startup suite has no cases")


# -- request builders ------------------------------------------------------------------------
def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def raw_tensor(array: np.ndarray) -> bytes:
    """An array's bytes as the binary-tensor extension and raw_input_contents carry them
    (BYTES: each element length-prefixed, little-endian uint32)."""
    if array.dtype == np.object_ or array.dtype.kind in "SU":
        out = bytearray()
        for item in array.reshape(-1):
            data = item if isinstance(item, bytes) else str(item).encode()
            out += len(data).to_bytes(4, "little") + data
        return bytes(out)
    return np.ascontiguousarray(array).tobytes()


def binary_body(header: Mapping[str, Any], *tensors: bytes,
                header_length: int | None = None) -> tuple[bytes, tuple[tuple[str, str], ...]]:
    """(body, headers) of a request with a JSON header followed by binary tensors."""
    head = json.dumps(header, separators=(",", ":")).encode()
    length = len(head) if header_length is None else header_length
    return head + b"".join(tensors), (("Inference-Header-Content-Length", str(length)),)
