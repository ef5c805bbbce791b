"""tritonserver's Vertex AI flags: parsed, checked and handed on as ``VertexAIOptions``.

``add_arguments`` adds ``--allow-vertex-ai``, ``--vertex-ai-port``,
``--vertex-ai-thread-count`` and ``--vertex-ai-default-model`` with tritonserver's value
types and defaults, including those it takes from Vertex AI's environment (read when the
parser is built): ``AIP_MODE=PREDICTION`` turns Vertex AI on and HTTP and gRPC off unless
their flags say otherwise, ``AIP_HTTP_PORT`` is the default port, and
``AIP_STORAGE_URI`` the repository when no ``--model-repository`` is given
(``default_repository``). ``options_from_args`` gives the ``VertexAIOptions`` a Vertex AI
frontend is built from. infercore has no Vertex AI frontend: ``from_args`` says so in the
start-up log when one is asked for, and serves on without it.
"""

from __future__ import annotations

import argparse
import logging
import os
from dataclasses import dataclass

from ..server import Server
from .flag_types import boolean, integer

__all__ = ["VertexAIOptions", "add_arguments", "default_repository", "from_args",
           "options_from_args"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class VertexAIOptions:
    """What tritonserver's Vertex AI frontend listens on and serves (its defaults)."""

    enabled: bool = False
    address: str = "0.0.0.0"  # tritonserver has no flag for it
    port: int = 8080
    thread_count: int = 8
    default_model: str = ""  # "": the repository's only model


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """tritonserver's Vertex AI flags, and the defaults Vertex AI's environment sets."""
    defaults = VertexAIOptions()
    group = parser.add_argument_group(
        "Vertex", "Accepted and checked as tritonserver does; infercore has no Vertex AI "
                  "frontend.")
    group.add_argument("--allow-vertex-ai", type=boolean, default=defaults.enabled,
                       metavar="BOOL",
                       help="serve Vertex AI requests (default true if AIP_MODE=PREDICTION)")
    # a string default goes through the type, as a flag value would
    group.add_argument("--vertex-ai-port", type=integer,
                       default=os.environ.get("AIP_HTTP_PORT", str(defaults.port)),
                       metavar="PORT", help="default AIP_HTTP_PORT, else 8080")
    group.add_argument("--vertex-ai-thread-count", type=integer,
                       default=defaults.thread_count, metavar="N",
                       help=f"threads for Vertex AI requests (default {defaults.thread_count})")
    group.add_argument("--vertex-ai-default-model", default=defaults.default_model,
                       metavar="NAME", help="the model single-model requests go to")
    if os.environ.get("AIP_MODE") == "PREDICTION":
        parser.set_defaults(allow_vertex_ai=True, allow_http=False, allow_grpc=False)


def default_repository() -> str | None:
    """The repository Vertex AI's environment names (AIP_STORAGE_URI), if any."""
    return os.environ.get("AIP_STORAGE_URI") or None


def options_from_args(args: argparse.Namespace) -> VertexAIOptions:
    return VertexAIOptions(enabled=args.allow_vertex_ai, port=args.vertex_ai_port,
                           thread_count=args.vertex_ai_thread_count,
                           default_model=args.vertex_ai_default_model)


def from_args(server: Server, args: argparse.Namespace) -> None:
    """No Vertex AI frontend to start; asking for one is logged."""
    options = options_from_args(args)
    if options.enabled:
        logger.warning("--allow-vertex-ai=true has no effect: infercore has no Vertex AI "
                       "frontend, nothing listens on %s:%d", options.address, options.port)
