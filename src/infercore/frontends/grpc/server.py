"""The KServe v2 gRPC frontend with Triton's extensions: flags and lifecycle.

``add_arguments`` adds tritonserver's gRPC flags to ``infercore serve``; ``from_args``
builds the frontend they ask for. ``GrpcFrontend`` serves one Server over gRPC core with
the ``inference.GRPCInferenceService`` messages from tritonclient, plus
grpc.health.v1's Check, as tritonserver does.

One transport (grpc/core.py): calls are taken from gRPC core's completion queue on a
thread of its own, which answers ModelInfer there (a ``DirectUnary``); the other methods
are loop handlers (``LoopUnary``, ``LoopStream``) run on the event loop (grpc/bridge.py).

Threads: ``start`` and ``stop`` run on the owner's thread. The frontend owns the thread
``infercore-grpc``, running the event loop on which the methods other than ModelInfer
run, the completion-queue thread ``infercore-grpc-cq``, and a small
pool, ``infercore-grpc-repository-*``, for the blocking model load/unload RPCs. It starts
and joins them all.

Shutdown (``stop(timeout)``): stop accepting connections and new requests on open
streams, let in-flight RPCs finish within ``timeout`` seconds, cancel the rest (which
cancels their inference requests), close the loop and join the threads.

States: created -> started (listening) -> stopped. A stopped frontend cannot restart.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
from tritonclient.grpc import service_pb2 as pb

from ...errors import InvalidArgumentError
from ...server import Server
from ..flag_types import boolean, int_at_least, integer
from ..loop_frontend import LoopThreadFrontend
from ..restricted import GrpcRestrictionAction, RestrictedFeatures, guard_grpc
from ..shm import SystemSharedMemory, for_clients
from .bridge import LoopBridge
from .core import CallContext, CoreServer, Handler, LoopStream
from .infer import InferService
from .service import HEALTH_SERVICE, SERVICE, CommonService, health_handlers
from .stream import StreamSession

__all__ = ["GrpcFrontend", "GrpcOptions", "add_arguments", "from_args"]

logger = logging.getLogger(__name__)

MAX_MESSAGE_SIZE = 2**31 - 1  # tritonserver's fixed limit (INT32_MAX), tritonclient's too

# --grpc-infer-response-compression-level -> the algorithm gRPC core picks for that level
# when the peer accepts gzip and deflate (as every gRPC client does): low is gzip, medium
# and high are deflate. grpc's Python API sets an algorithm per call, not a level.
COMPRESSION_LEVELS = {
    "none": None,
    "low": grpc.Compression.Gzip,
    "medium": grpc.Compression.Deflate,
    "high": grpc.Compression.Deflate,
}


@dataclass(frozen=True, slots=True)
class GrpcOptions:
    """How the gRPC frontend listens; defaults are tritonserver's."""

    address: str = "0.0.0.0"
    port: int = 8001  # 0 picks a free port (see GrpcFrontend.port)
    reuse_port: bool = False
    use_ssl: bool = False
    use_ssl_mutual: bool = False  # implies use_ssl, and requires client certificates
    server_cert: str = ""  # PEM files
    server_key: str = ""
    root_cert: str = ""
    response_compression: str = "none"  # a key of COMPRESSION_LEVELS
    header_forward_pattern: str = ""  # regex: matching headers become request parameters
    max_message_size: int = MAX_MESSAGE_SIZE  # bytes, both directions
    keepalive_time_ms: int = 7_200_000
    keepalive_timeout_ms: int = 20_000
    keepalive_permit_without_calls: bool = False
    http2_max_pings_without_data: int = 2
    http2_min_recv_ping_interval_without_data_ms: int = 300_000
    http2_max_ping_strikes: int = 2
    max_connection_age_ms: int = 0  # 0: unlimited
    max_connection_age_grace_ms: int = 0  # 0: unlimited
    repository_thread_count: int = 4  # threads for blocking load / unload RPCs
    # --grpc-restricted-protocol: methods that answer only calls carrying a metadata key
    restricted: RestrictedFeatures = field(default_factory=RestrictedFeatures)
    # --allow-client-shm: clients may use shared-memory regions (shm.py)
    allow_client_shm: bool = False

    def channel_args(self) -> list[tuple[str, Any]]:
        """The gRPC core server arguments these options stand for."""
        args: list[tuple[str, Any]] = [
            ("grpc.so_reuseport", int(self.reuse_port)),
            ("grpc.max_receive_message_length", self.max_message_size),
            ("grpc.max_send_message_length", self.max_message_size),
            ("grpc.keepalive_time_ms", self.keepalive_time_ms),
            ("grpc.keepalive_timeout_ms", self.keepalive_timeout_ms),
            ("grpc.keepalive_permit_without_calls", int(self.keepalive_permit_without_calls)),
            ("grpc.http2.max_pings_without_data", self.http2_max_pings_without_data),
            ("grpc.http2.min_ping_interval_without_data_ms",
             self.http2_min_recv_ping_interval_without_data_ms),
            ("grpc.http2.max_ping_strikes", self.http2_max_ping_strikes),
        ]
        if self.max_connection_age_ms > 0:
            args.append(("grpc.max_connection_age_ms", self.max_connection_age_ms))
        if self.max_connection_age_grace_ms > 0:
            args.append(("grpc.max_connection_age_grace_ms", self.max_connection_age_grace_ms))
        return args

    def credentials(self) -> grpc.ServerCredentials | None:
        """TLS credentials from the PEM files, or None for plaintext.

        Raises InvalidArgumentError for missing flags and OSError for unreadable files.
        """
        if not (self.use_ssl or self.use_ssl_mutual):
            return None
        if not (self.server_cert and self.server_key):
            raise InvalidArgumentError(
                "gRPC SSL needs --grpc-server-cert and --grpc-server-key")
        if self.use_ssl_mutual and not self.root_cert:
            raise InvalidArgumentError(
                "gRPC mutual SSL needs --grpc-root-cert to verify client certificates")
        key = Path(self.server_key).read_bytes()
        cert = Path(self.server_cert).read_bytes()
        root = Path(self.root_cert).read_bytes() if self.root_cert else None
        return grpc.ssl_server_credentials(
            [(key, cert)], root_certificates=root, require_client_auth=self.use_ssl_mutual)


# -- flags ---------------------------------------------------------------------------------
def _compression_level(text: str) -> str:
    lowered = text.lower()
    if lowered not in COMPRESSION_LEVELS:
        raise argparse.ArgumentTypeError(
            "invalid argument for --grpc_infer_response_compression_level")
    return lowered


def _infer_thread_count(text: str) -> int:
    value = integer(text)
    if not 2 <= value <= 128:
        raise argparse.ArgumentTypeError(
            "invalid argument for --grpc_infer_thread_count. Must be in the range 2 to 128.")
    return value


def _response_pool_size(text: str) -> int:
    value = integer(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(
            "Error: --grpc-max-response-pool-size must be greater than 0.")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """tritonserver's gRPC flags, in its order, then infercore's own."""
    defaults = GrpcOptions()
    group = parser.add_argument_group("GRPC", "The KServe v2 gRPC endpoint with Triton's "
                                       "extensions.")
    add = group.add_argument
    add("--allow-grpc", type=boolean, default=True, metavar="BOOL",
        help="serve gRPC (default true)")
    add("--grpc-address", default=defaults.address, metavar="ADDRESS",
        help=f"address the gRPC endpoint binds (default {defaults.address})")
    add("--grpc-port", type=integer, default=defaults.port, metavar="PORT",
        help=f"gRPC port; 0 picks a free one (default {defaults.port})")
    add("--reuse-grpc-port", type=boolean, default=False, metavar="BOOL",
        help="let several servers bind the gRPC port (SO_REUSEPORT)")
    add("--grpc-header-forward-pattern", default="", metavar="REGEX",
        help="forward request metadata whose key matches (case-insensitively, anywhere in "
             "the key) as inference request parameters")
    # Tuning of tritonserver's C++ handlers, which this frontend does not have: checked
    # as tritonserver checks them, without effect (the start-up log says so).
    add("--grpc-infer-thread-count", type=_infer_thread_count, default=2, metavar="N",
        help="tritonserver's inference handler threads (2 to 128); no effect here")
    add("--grpc-infer-allocation-pool-size", type=integer, default=8, metavar="N",
        help="tritonserver's pool of request/response states; no effect here")
    add("--grpc-max-response-pool-size", type=_response_pool_size, default=None, metavar="N",
        help="tritonserver's limit on queued response objects; no effect here")
    add("--grpc-use-ssl", type=boolean, default=False, metavar="BOOL",
        help="serve gRPC over TLS with --grpc-server-cert/key (default false)")
    add("--grpc-use-ssl-mutual", type=boolean, default=False, metavar="BOOL",
        help="TLS with client certificates; implies --grpc-use-ssl")
    add("--grpc-server-cert", default="", metavar="PEM",
        help="the server's TLS certificate file")
    add("--grpc-server-key", default="", metavar="PEM", help="the server's TLS key file")
    add("--grpc-root-cert", default="", metavar="PEM",
        help="CA certificate that client certificates must chain to (mutual TLS)")
    add("--grpc-infer-response-compression-level", type=_compression_level, default="none",
        metavar="LEVEL", help="compress inference responses: none (default), low, medium or "
                              "high")
    add("--grpc-keepalive-time", type=integer, default=defaults.keepalive_time_ms,
        metavar="MS", help="idle time before a keepalive ping (default 7200000)")
    add("--grpc-keepalive-timeout", type=integer, default=defaults.keepalive_timeout_ms,
        metavar="MS", help="wait for a ping's acknowledgement (default 20000)")
    add("--grpc-keepalive-permit-without-calls", type=boolean, default=False, metavar="BOOL",
        help="allow keepalive pings with no call in flight (default false)")
    add("--grpc-http2-max-pings-without-data", type=integer,
        default=defaults.http2_max_pings_without_data, metavar="N",
        help="pings sent without data before more are held back (0: no limit; default 2)")
    add("--grpc-http2-min-recv-ping-interval-without-data", type=integer,
        default=defaults.http2_min_recv_ping_interval_without_data_ms, metavar="MS",
        help="shorter intervals between received pings are strikes (default 300000)")
    add("--grpc-http2-max-ping-strikes", type=integer,
        default=defaults.http2_max_ping_strikes, metavar="N",
        help="strikes before GOAWAY (0: no limit; default 2)")
    add("--grpc-max-connection-age", type=integer, default=0, metavar="MS",
        help="close connections older than this (default: no limit)")
    add("--grpc-max-connection-age-grace", type=integer, default=0, metavar="MS",
        help="time for a connection's calls to end after its max age (default: no limit)")
    add("--grpc-restricted-protocol", action=GrpcRestrictionAction,
        default=RestrictedFeatures(), metavar="CATEGORIES:KEY=VALUE",
        help="answer the methods of these comma-separated categories (health, metadata, "
             "inference, shared-memory, model-config, model-repository, statistics, trace, "
             "logging) only for calls with the metadata triton-grpc-protocol-KEY: VALUE; "
             "repeatable, one group per flag")
    add("--grpc-max-message-size", type=int_at_least(1), default=MAX_MESSAGE_SIZE,
        metavar="BYTES", help="largest message received or sent (infercore's own flag; "
                              "tritonserver fixes it at 2^31-1, the default)")


def from_args(server: Server, args: argparse.Namespace) -> GrpcFrontend | None:
    """The frontend ``args`` ask for, or None with ``--allow-grpc=false``."""
    if not args.allow_grpc:
        return None
    return GrpcFrontend(server, GrpcOptions(
        address=args.grpc_address, port=args.grpc_port, reuse_port=args.reuse_grpc_port,
        use_ssl=args.grpc_use_ssl, use_ssl_mutual=args.grpc_use_ssl_mutual,
        server_cert=args.grpc_server_cert, server_key=args.grpc_server_key,
        root_cert=args.grpc_root_cert,
        response_compression=args.grpc_infer_response_compression_level,
        header_forward_pattern=args.grpc_header_forward_pattern,
        max_message_size=args.grpc_max_message_size,
        keepalive_time_ms=args.grpc_keepalive_time,
        keepalive_timeout_ms=args.grpc_keepalive_timeout,
        keepalive_permit_without_calls=args.grpc_keepalive_permit_without_calls,
        http2_max_pings_without_data=args.grpc_http2_max_pings_without_data,
        http2_min_recv_ping_interval_without_data_ms=(
            args.grpc_http2_min_recv_ping_interval_without_data),
        http2_max_ping_strikes=args.grpc_http2_max_ping_strikes,
        max_connection_age_ms=args.grpc_max_connection_age,
        max_connection_age_grace_ms=args.grpc_max_connection_age_grace,
        restricted=args.grpc_restricted_protocol,
        allow_client_shm=args.allow_client_shm,
    ))


# -- the frontend --------------------------------------------------------------------------
class GrpcFrontend(LoopThreadFrontend):
    """Serves ``server`` over gRPC until ``stop``; ``start`` returns once listening."""

    kind = "grpc"
    label = "gRPC"
    service_name = "GRPCInferenceService"

    def __init__(self, server: Server, options: GrpcOptions | None = None,
                 shared_memory: SystemSharedMemory | None = None) -> None:
        self.options = options or GrpcOptions()
        if self.options.response_compression not in COMPRESSION_LEVELS:
            raise InvalidArgumentError(
                f"invalid gRPC response compression level "
                f"'{self.options.response_compression}', expected one of "
                + ", ".join(COMPRESSION_LEVELS))
        super().__init__(server, self.options.address, self.options.repository_thread_count,
                         "infercore-grpc-repository")
        # HTTP and gRPC see the same registered regions: one registry per server.
        self._shm = for_clients(server, self.options.allow_client_shm, shared_memory)
        self._accepting = False  # new requests on open streams; read on the loop thread

    def __enter__(self) -> GrpcFrontend:
        self.start()
        return self

    def _address_and_credentials(self) -> tuple[str, grpc.ServerCredentials | None]:
        host = self.options.address
        if ":" in host and not host.startswith("["):
            host = f"[{host}]"  # an IPv6 address
        return f"{host}:{self.options.port}", self.options.credentials()

    async def _serve(self) -> None:
        stop_requested = self._stop_requested = asyncio.Event()
        options = self.options
        restricted = options.restricted
        handlers: dict[str, Handler] = {}
        for service, table in ((SERVICE, self._service_handlers()),
                               (HEALTH_SERVICE, health_handlers(self._server))):
            for name, handler in guard_grpc(table, restricted).items():
                handlers[f"/{service}/{name}"] = handler
        core = CoreServer(options.channel_args(), handlers,
                          LoopBridge(asyncio.get_running_loop()))
        address, credentials = self._address_and_credentials()
        port = core.add_port(address, credentials)
        if not port:
            raise OSError(f"Socket '{address}' already in use")
        core.start()
        self._port = port
        self._accepting = True
        self._listening.set()
        try:
            await stop_requested.wait()
        finally:
            self._accepting = False
            await self._stop_core(core)

    async def _stop_core(self, core: CoreServer) -> None:
        """Refuse new calls, let running ones finish within the grace period, cancel the
        rest (their handlers cancel the engine requests), then end the queue thread."""
        core.shutdown()
        deadline = time.monotonic() + self._stop_timeout
        while core.active and time.monotonic() < deadline:
            await asyncio.sleep(0.005)
        core.cancel_all()
        # Cancelled calls end on this loop (bridged ones) or at once (ModelInfer).
        deadline = time.monotonic() + 5.0
        while core.active and time.monotonic() < deadline:
            await asyncio.sleep(0.005)
        # Large requests still being decoded answer their (cancelled) calls first: no
        # answer may be started once the queue is shut down.
        assert self._large is not None
        await asyncio.to_thread(self._large.shutdown)
        if not await asyncio.to_thread(core.close, 5.0):
            logger.error("the gRPC server did not shut down in time")

    def _service_handlers(self) -> dict[str, Handler]:
        """GRPCInferenceService's handlers: ModelInfer on grpc_core's queue thread, the
        rest on the event loop."""
        assert self._executor is not None and self._large is not None
        options = self.options
        infer = InferService(self._server, self._shm, self._large,
                             compression=COMPRESSION_LEVELS[options.response_compression],
                             header_forward_pattern=options.header_forward_pattern)
        handlers: dict[str, Handler] = dict(
            CommonService(self._server, self._shm, self._executor).handlers())
        handlers["ModelInfer"] = infer.direct()
        forward, compression = infer.forward_pattern, infer.compression

        async def stream_infer(requests: Any, context: CallContext) -> None:
            if compression is not None:
                context.set_compression(compression)
            session = StreamSession(self._server, self._shm, context,
                                    accepting=lambda: self._accepting, forward=forward)
            await session.run(requests)

        # No request deserializer: each session parses requests itself (bad ones are
        # answered in-band).
        handlers["ModelStreamInfer"] = LoopStream(
            stream_infer, pb.ModelStreamInferResponse.SerializeToString)
        return handlers
