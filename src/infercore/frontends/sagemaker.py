"""tritonserver's SageMaker flags: parsed, checked and handed on as ``SageMakerOptions``.

``add_arguments`` adds ``--allow-sagemaker``, ``--sagemaker-port``,
``--sagemaker-safe-port-range`` and ``--sagemaker-thread-count`` with tritonserver's
value types and defaults; ``options_from_args`` gives the ``SageMakerOptions`` a SageMaker
frontend is built from (the command line also checks its port against the other
services', safe range included, as tritonserver does). infercore has no SageMaker
frontend: ``from_args`` says so in the start-up log when one is asked for, and serves on
without it.
"""

from __future__ import annotations

import argparse
import logging
from dataclasses import dataclass

from ..server import Server
from .flag_types import boolean, integer, pair

__all__ = ["SageMakerOptions", "add_arguments", "from_args", "options_from_args"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class SageMakerOptions:
    """What tritonserver's SageMaker frontend listens on (its defaults)."""

    enabled: bool = False
    address: str = "0.0.0.0"  # tritonserver has no flag for it
    port: int = 8080
    # --sagemaker-safe-port-range: the ports the other services may use (None: any)
    safe_port_range: tuple[int, int] | None = None
    thread_count: int = 8


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """tritonserver's SageMaker flags."""
    defaults = SageMakerOptions()
    group = parser.add_argument_group(
        "Sagemaker", "Accepted and checked as tritonserver does; infercore has no SageMaker "
                     "frontend.")
    group.add_argument("--allow-sagemaker", type=boolean, default=defaults.enabled,
                       metavar="BOOL", help="serve SageMaker requests (default false)")
    group.add_argument("--sagemaker-port", type=integer, default=defaults.port, metavar="PORT",
                       help=f"default {defaults.port}")
    group.add_argument("--sagemaker-safe-port-range", type=pair(integer, integer, "-"),
                       default=None, metavar="LOW-HIGH",
                       help="the ports the other services may listen on")
    group.add_argument("--sagemaker-thread-count", type=integer,
                       default=defaults.thread_count, metavar="N",
                       help=f"threads for SageMaker requests (default {defaults.thread_count})")


def options_from_args(args: argparse.Namespace) -> SageMakerOptions:
    return SageMakerOptions(enabled=args.allow_sagemaker, port=args.sagemaker_port,
                            safe_port_range=args.sagemaker_safe_port_range,
                            thread_count=args.sagemaker_thread_count)


def from_args(server: Server, args: argparse.Namespace) -> None:
    """No SageMaker frontend to start; asking for one is logged."""
    options = options_from_args(args)
    if options.enabled:
        logger.warning("--allow-sagemaker=true has no effect: infercore has no SageMaker "
                       "frontend, nothing listens on %s:%d", options.address, options.port)
