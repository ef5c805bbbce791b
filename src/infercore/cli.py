"""The command line: ``infercore serve`` with tritonserver's flags, names and meanings.

A launch script written for tritonserver runs with ``tritonserver`` replaced by
``infercore serve`` (or by bare ``infercore``: a command line that starts with a flag is
a ``serve`` command line). Every tritonserver flag is taken, read as its getopt_long
reads it (long_options.py: ``--flag=value`` or ``--flag value``, unique prefixes) with
its value types (frontends/flag_types.py: booleans true/false, on/off, 1/0; integers as
std::stoi reads them) and its checks after reading; repeatable flags repeat as in
tritonserver. Flags that change nothing here (GPU memory, tritonserver's gRPC handler
pools, ...: ``NO_EFFECT``) are accepted, and the start-up log says so once for each one
given. A bad command line is answered as tritonserver answers it: getopt's complaint
("unrecognized option '--x'") then the usage, or the usage then the parser's complaint
('Bad option: "--x".' and why, "Unexpected argument: x"), exit status 1.

``serve`` itself (frontends, model loading, tables, signals, shutdown) is in launch.py.
"""

from __future__ import annotations

import argparse
import importlib.util
import logging
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn

from ._version import __version__
from .backends.base import FRAMEWORK_EXTRAS, load_backend_directory, parse_backend_config
from .errors import InvalidArgumentError, TritonError
from .frontends import metrics as metrics_frontend
from .frontends import sagemaker, shm, vertex_ai
from .frontends.flag_types import (
    boolean,
    int_bool,
    integer,
    integer64,
    number,
    pair,
    unsigned64,
)
from .launch import ServeExtras, report_creation_failure
from .launch import serve as _serve
from .log_settings import LOG_FORMATS
from .long_options import LongOption
from .long_options import read as read_long_options
from .observability.logs import triton_formatter, triton_handler
from .options import (
    ModelControlMode,
    ModelLoadDeviceLimit,
    Options,
    RateLimiterResource,
    RateLimitMode,
)
from .supervisor import SupervisorPolicy, serve_command, supervise
from .trace_settings import parse_trace_config, parse_trace_item, parse_trace_level

__all__ = ["NO_EFFECT", "build_parser", "check_command_line", "main", "no_effect_notes",
           "options_from_args", "serve_extras"]

logger = logging.getLogger("infercore")

USAGE_EXIT = 1  # tritonserver's exit status for a bad command line


def examples_repository() -> Path:
    """The bundled example repository: shipped in the package, or in a source checkout."""
    here = Path(__file__).resolve().parent
    for candidate in (here / "_examples" / "models", here.parents[1] / "examples" / "models"):
        if candidate.is_dir():
            return candidate
    return here.parents[1] / "examples" / "models"


# -- the parser ------------------------------------------------------------------------------
class TritonArgumentParser(argparse.ArgumentParser):
    """argparse answering bad command lines in tritonserver's words, with its exit status:
    the usage, then the complaint (tritonserver prints its parser's complaints bare)."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(USAGE_EXIT, f"{_triton_wording(message)}\n")


class ServeArgumentParser(TritonArgumentParser):
    """``serve``'s parser: the command line is read as tritonserver's getopt_long reads
    it (long_options.py), then the values are converted by the flags' types, in order.

    The namespace also gets ``flags_given`` (the full names, in order) and
    ``command_line`` (the options as read, in their canonical ``--name=value`` form).
    """

    def parse_known_args(self, args: Sequence[str] | None = None,  # type: ignore[override]
                         namespace: argparse.Namespace | None = None
                         ) -> tuple[argparse.Namespace, list[str]]:
        table = [LongOption(option[2:], action.nargs != 0, id(action))
                 for action in self._actions for option in action.option_strings
                 if option.startswith("--")]
        reading = read_long_options(sys.argv[1:] if args is None else list(args), table)
        # the values before a complaint are converted first: their errors come first
        parsed, _ = super().parse_known_args(reading.options, namespace)
        if reading.error is not None:
            # getopt_long's complaint is printed as it reads, before the usage
            print(f"{self.prog}: {reading.error}", file=sys.stderr)
            self.print_usage(sys.stderr)
            self.exit(USAGE_EXIT)
        if reading.positionals:
            self.error(f"Unexpected argument: {reading.positionals[0]}")
        parsed.flags_given = tuple(reading.given)
        parsed.command_line = tuple(reading.options)
        return parsed, []


_ARGUMENT = re.compile(r"argument ([^:]+): (.*)", re.DOTALL)


def _triton_wording(message: str) -> str:
    """'argument --x: detail' (a value argparse's type refused) as tritonserver words it."""
    match = _ARGUMENT.fullmatch(message)
    if match is None:
        return message
    return f'Bad option: "{match.group(1).split("/")[0]}".\n{match.group(2)}'


def _type(name: str, parse: Callable[[str], Any]) -> Callable[[str], Any]:
    """An argparse type: ``parse`` with its ValueError turned into a usage error."""

    def convert(text: str) -> Any:
        try:
            return parse(text)
        except (ValueError, InvalidArgumentError) as exc:
            detail = exc.message if isinstance(exc, InvalidArgumentError) else str(exc)
            raise argparse.ArgumentTypeError(detail) from None

    convert.__name__ = name
    return convert


def _check_trace_item(text: str) -> str:
    parse_trace_item(text)  # raises InvalidArgumentError with tritonserver's wording
    return text


def _lowered_choice(flag: str, choices: Sequence[str]) -> Callable[[str], str]:
    def parse(text: str) -> str:
        if text.lower() not in choices:
            raise ValueError(f"invalid argument for --{flag}")
        return text.lower()
    return parse


def _parse_log_format(text: str) -> str:
    if text not in LOG_FORMATS:  # "default" or "ISO8601", in that case
        raise ValueError("invalid argument for --log-format")
    return text


def _parse_model_config_name(text: str) -> str:
    if not text:
        raise ValueError("Error: empty argument for --model-config-name")
    return text


def _parse_rate_limit_resource(text: str) -> RateLimiterResource:
    """``<name>:<count>[:<device>]``; the name is kept as given (tritonserver lowers a copy
    it never uses)."""
    parts = text.split(":")
    if len(parts) not in (2, 3):
        raise ValueError("--rate-limit-resource option format is "
                         "'<resource_name>:<count>:<device>' or '<resource_name>:<count>'. "
                         f"Got {text}")
    count = integer(parts[1])
    device = integer(parts[2]) if len(parts) == 3 else -1
    return RateLimiterResource(parts[0], count, device)


def _parse_cache_setting(text: str) -> tuple[str, str, str]:
    """``<cache>,<setting>=<value>``: tritonserver's cache-config form."""
    comma = text.find(",")
    equals = text.find("=", comma + 1)
    if comma <= 0:
        raise ValueError("No cache specified. --cache-config option format is "
                         f"<cache name>,<setting>=<value>. Got {text}")
    setting, value = text[comma + 1:equals], text[equals + 1:]
    if equals < 0 or not setting or not value:
        raise ValueError("--cache-config option format is '<cache name>,<setting>=<value>'. "
                         f"Got {text}")
    return text[:comma], setting, value


def _parse_host_policy(text: str) -> tuple[str, str, str]:
    """``<policy>,<setting>=<value>``: tritonserver's generic setting form."""
    name, comma, setting = text.partition(",")
    key, equals, value = setting.partition("=")
    if not (comma and equals and name and key and value):
        raise ValueError("--host-policy option format is '<policy name>,<setting>=<value>'. "
                         f"Got {text}")
    return name, key, value


def _parse_backend_config(text: str) -> str:
    parse_backend_config([text])  # raises InvalidArgumentError with tritonserver's wording
    return text




def build_parser() -> argparse.ArgumentParser:
    parser = TritonArgumentParser(
        prog="infercore", description="A Triton-compatible inference server in Python.",
        epilog="`infercore --flag ...` (starting with a flag) is `infercore serve --flag ...`.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND",
                                     parser_class=ServeArgumentParser)
    serve = commands.add_parser(
        "serve", help="serve model repositories (tritonserver's command line)",
        usage="%(prog)s [options]", add_help=False,
        description="Serve Triton model repositories over KServe v2 HTTP/REST and gRPC, "
                    "with tritonserver's flags, until SIGINT or SIGTERM.",
        epilog=backends_epilog())
    add_serve_arguments(serve)
    return parser


def backends_epilog() -> str:
    """The backends a model can name here, and what each needs installed (found without
    importing any framework: --help stays instant)."""
    parts = ["python (built in: in-thread, or process-isolated with "
             "--backend-config=python,execution-mode=process)"]
    for backend, (module, extra) in FRAMEWORK_EXTRAS.items():
        if importlib.util.find_spec(module) is not None:
            parts.append(f"{backend} (installed)")
        else:
            parts.append(f"{backend} (not installed: pip install 'infercore[{extra}]')")
    return ("Backends: " + "; ".join(parts) + ". Others are plugins (docs/backends.md); "
            "TensorRT, TensorFlow, OpenVINO and the other Triton backends are not available.")


def add_serve_arguments(serve: argparse.ArgumentParser) -> None:
    """tritonserver's flags, in its groups and its order (getopt_long names the
    possibilities of an ambiguous prefix in that order); the frontends add theirs (HTTP,
    gRPC, SageMaker, Vertex AI, metrics); infercore's own flags close their group."""
    serve.add_argument("--help", action="help", help="print usage")
    group = serve.add_argument_group("Server")
    group.add_argument("--id", dest="server_id", default="triton", metavar="ID",
                       help="identifier of this server (default triton)")
    group.add_argument("--exit-timeout-secs", type=integer, default=30, metavar="SECONDS",
                       help="at shutdown, how long in-flight requests may take before they "
                            "are failed and the server exits (default 30)")

    group = serve.add_argument_group("Logging")
    group.add_argument("--log-verbose", type=int_bool, default=0, metavar="LEVEL",
                       help="verbose logging level; 0 disables (default 0)")
    group.add_argument("--log-info", type=boolean, default=True, metavar="BOOL",
                       help="log info messages (default true)")
    group.add_argument("--log-warning", type=boolean, default=True, metavar="BOOL",
                       help="log warnings (default true)")
    group.add_argument("--log-error", type=boolean, default=True, metavar="BOOL",
                       help="log errors (default true)")
    group.add_argument("--log-format", type=_type("format", _parse_log_format),
                       default="default", metavar="FORMAT",
                       help="default (glog-like) or ISO8601")
    group.add_argument("--log-file", default="", metavar="PATH",
                       help="write the log to this file instead of standard error")

    group = serve.add_argument_group("Model Repository")
    group.add_argument("--model-store", "--model-repository", dest="model_repository",
                       action="append", metavar="PATH",
                       help="a model repository folder (repeatable); default: the bundled "
                            "examples")
    group.add_argument("--exit-on-error", type=boolean, default=True, metavar="BOOL",
                       help="exit when a model fails to load at startup (default true)")
    group.add_argument("--disable-auto-complete-config", action="store_true",
                       help="require complete config.pbtxt files (no auto-complete)")
    group.add_argument("--strict-readiness", type=boolean, default=True, metavar="BOOL",
                       help="true: /v2/health/ready only when every model is ready; false: "
                            "once the startup loads are done (default true)")
    group.add_argument("--model-control-mode", default="none", metavar="MODE",
                       type=_type("mode", _lowered_choice(
                           "model-control-mode", [m.value for m in ModelControlMode])),
                       help="none: load every model at start; poll: also follow repository "
                            "changes; explicit: load --load-model models, then only through "
                            "the model repository API (default none)")
    group.add_argument("--repository-poll-secs", type=integer, default=15, metavar="SECONDS",
                       help="interval between repository polls in poll mode (default 15)")
    group.add_argument("--load-model", action="append", default=[], metavar="NAME",
                       help="model to load at start in explicit mode (repeatable; '*' alone "
                            "loads every model)")
    group.add_argument("--model-config-name", default=None, metavar="NAME",
                       type=_type("name", _parse_model_config_name),
                       help="use configs/NAME.pbtxt in each model folder when present")
    group.add_argument("--model-load-thread-count", type=integer, default=4, metavar="N",
                       help="models loaded at once (default 4)")
    group.add_argument("--model-load-retry-count", type=integer, default=0, metavar="N",
                       help="retries of a failed model load (default 0)")
    group.add_argument("--model-namespacing", type=boolean, default=False, metavar="BOOL",
                       help="serve same-named models of different repositories apart")
    group.add_argument("--enable-peer-access", type=boolean, default=True, metavar="BOOL",
                       help="let GPUs reach each other's memory (default true; no effect "
                            "without GPUs)")
    group.add_argument("--readiness-policy", default="all", metavar="POLICY",
                       help="infercore's: the models strict readiness waits for: all, any "
                            "(one READY model) or listed:<model>,<model> (default all)")

    for module in _frontend_modules():
        module.add_arguments(serve)
    shm.add_arguments(serve)  # one flag for the HTTP and gRPC frontends

    group = serve.add_argument_group("Tracing")
    group.add_argument("--trace-config", action="append", default=[],
                       type=_type("setting", _check_trace_item),
                       metavar="[MODE,]SETTING=VALUE",
                       help="a trace setting (repeatable): level=TIMESTAMPS, rate=1000, "
                            "count=-1, mode=triton|opentelemetry, triton,file=PATH, "
                            "triton,log-frequency=N, opentelemetry,url=URL")

    group = serve.add_argument_group("Backend")
    group.add_argument("--backend-directory", action="append", default=[], metavar="DIR",
                       help="a folder of backend plugin modules (repeatable); tritonserver's "
                            "shared-library folders are skipped")
    group.add_argument("--backend-config", action="append", default=[],
                       type=_type("setting", _parse_backend_config),
                       metavar="BACKEND,SETTING=VALUE",
                       help="a backend setting (repeatable); SETTING=VALUE for every backend")

    group = serve.add_argument_group("Repository Agent")
    group.add_argument("--repoagent-directory", default="", metavar="DIR",
                       help="accepted; infercore has no repository agents")

    group = serve.add_argument_group("Response Cache")
    group.add_argument("--cache-config", action="append", default=[], metavar="CACHE,KEY=VALUE",
                       type=_type("setting", _parse_cache_setting),
                       help="a cache setting (repeatable), e.g. local,size=1048576 for a "
                            "1 MiB local response cache")
    group.add_argument("--cache-directory", default="", metavar="DIR",
                       help="accepted; the local cache is built in")

    group = serve.add_argument_group("Rate Limiter")
    group.add_argument("--rate-limit", default="off", metavar="MODE",
                       type=_type("mode", _lowered_choice(
                           "rate-limit", [m.value for m in RateLimitMode])),
                       help="execution_count: run instances only while the resources they "
                            "declare are free; off (default)")
    group.add_argument("--rate-limit-resource", action="append", default=[],
                       type=_type("resource", _parse_rate_limit_resource),
                       metavar="NAME:COUNT[:DEVICE]",
                       help="size a rate-limiter resource (repeatable); without a device it "
                            "applies to every device and to global resources")

    group = serve.add_argument_group(
        "Memory/Device Management", "GPU settings are accepted, kept in the options and "
        "shown in the options table; only --model-load-gpu-limit has an effect (docs/gpu.md).")
    group.add_argument("--pinned-memory-pool-byte-size", type=integer64, default=1 << 28,
                       metavar="BYTES", help="page-locked host memory for GPU copies "
                       "(default 268435456)")
    group.add_argument("--cuda-memory-pool-byte-size", action="append", default=[],
                       type=pair(integer, unsigned64), metavar="DEVICE:BYTES",
                       help="CUDA memory pool of one GPU (repeatable; default 64 MiB each)")
    group.add_argument("--cuda-virtual-address-size", action="append", default=[],
                       type=pair(integer, unsigned64), metavar="DEVICE:BYTES",
                       help="virtual address space reserved on one GPU (repeatable)")
    group.add_argument("--min-supported-compute-capability", type=number, default=0.0,
                       metavar="VERSION", help="ignore GPUs below this CUDA compute "
                       "capability (default 0.0 here; tritonserver's build sets 6.0)")
    group.add_argument("--buffer-manager-thread-count", type=integer, default=0, metavar="N",
                       help="threads that copy tensors to and from GPUs (default 0)")
    group.add_argument("--host-policy", action="append", default=[], metavar="NAME,SETTING=VALUE",
                       type=_type("policy", _parse_host_policy),
                       help="a host policy setting (repeatable), e.g. pinned,cpu-cores=0-1")
    group.add_argument("--model-load-gpu-limit", action="append", default=[],
                       type=pair(integer, number), metavar="DEVICE:FRACTION",
                       help="refuse to create an instance on GPU DEVICE while more than "
                            "FRACTION of its memory is in use (repeatable)")

    group = serve.add_argument_group("DEPRECATED", "tritonserver's deprecated spellings.")
    group.add_argument("--strict-model-config", type=boolean, default=None, metavar="BOOL",
                       help="use --disable-auto-complete-config")
    group.add_argument("--response-cache-byte-size", type=integer64, default=None,
                       metavar="BYTES", help="use --cache-config=local,size=BYTES")
    group.add_argument("--trace-file", default=None, metavar="PATH",
                       help="use --trace-config triton,file=PATH")
    group.add_argument("--trace-level", action="append", default=[],
                       type=_type("level", parse_trace_level), metavar="LEVEL",
                       help="use --trace-config level=LEVEL")
    group.add_argument("--trace-rate", type=integer, default=None, metavar="N",
                       help="use --trace-config rate=N")
    group.add_argument("--trace-count", type=integer, default=None, metavar="N",
                       help="use --trace-config count=N")
    group.add_argument("--trace-log-frequency", type=integer, default=None, metavar="N",
                       help="use --trace-config triton,log-frequency=N")

    group = serve.add_argument_group(
        "Supervisor", "infercore's own: restart a server that died (docs/operations.md).")
    group.add_argument("--supervise", action="store_true",
                       help="run the server as a child process and restart it when it dies "
                            "after it started serving (a crashing in-thread model)")
    group.add_argument("--supervise-max-restarts", type=integer, default=5, metavar="N",
                       help="restarts allowed within --supervise-window-secs before giving "
                            "up (default 5)")
    group.add_argument("--supervise-window-secs", type=number, default=60.0, metavar="SECONDS",
                       help="the window the restart bound counts in (default 60)")

    group = serve.add_argument_group("Ray", "infercore's own.")
    group.add_argument("--ray-address", default="", metavar="ADDRESS",
                       help="the Ray cluster for instance groups placed on Ray: auto, "
                            "<host>:<port>, ray://<host>:<port> or local (default: the "
                            "RAY_ADDRESS environment variable; docs/ray.md)")


def _frontend_modules() -> list[Any]:
    """Each frontend module adds its flags and builds its frontend from the parsed args
    (SageMaker's and Vertex AI's build none: infercore has neither frontend)."""
    from .frontends import metrics, sagemaker, vertex_ai
    from .frontends.grpc import server as grpc
    from .frontends.http import server as http

    return [http, grpc, sagemaker, vertex_ai, metrics]


# -- parsed flags -> Options -----------------------------------------------------------------
def options_from_args(args: argparse.Namespace) -> Options:
    """The Options the flags ask for; InvalidArgumentError for inconsistent flags (the
    command line's checks) or settings the Options refuse (the server's)."""
    check_command_line(args)
    return _options(args)


def _options(args: argparse.Namespace) -> Options:
    """Values tritonserver takes and then clamps are clamped as it clamps them."""
    repositories = _unique(args.model_repository or [vertex_ai.default_repository()
                                                     or str(examples_repository())])
    strict = args.disable_auto_complete_config or bool(args.strict_model_config)
    return Options(
        model_repository=repositories,
        server_id=args.server_id,
        model_control_mode=ModelControlMode(args.model_control_mode),
        startup_models=tuple(_unique(args.load_model)),
        # read in poll mode only, where tritonserver polls no more with 0 or less
        repository_poll_secs=max(0, args.repository_poll_secs),
        strict_model_config=strict,
        model_config_name=args.model_config_name or "",
        exit_on_error=args.exit_on_error,
        strict_readiness=args.strict_readiness,
        readiness_policy=args.readiness_policy,
        exit_timeout=max(0, args.exit_timeout_secs),
        model_load_thread_count=max(1, args.model_load_thread_count),
        model_load_retry_count=max(0, args.model_load_retry_count),
        model_namespacing=args.model_namespacing,
        enable_peer_access=args.enable_peer_access,
        log_verbose=max(0, args.log_verbose),  # a negative level is 0
        log_info=args.log_info,
        log_warn=args.log_warning,
        log_error=args.log_error,
        log_file=args.log_file,
        log_format=args.log_format,
        rate_limiter_mode=RateLimitMode(args.rate_limit),
        rate_limiter_resources=tuple(args.rate_limit_resource),
        host_policies=_nested(args.host_policy),
        backend_configuration=parse_backend_config(args.backend_config),
        repo_agent_directory=args.repoagent_directory,
        trace_config=parse_trace_config(_trace_items(args)),
        cache_config=_cache_config(args),
        cache_directory=args.cache_directory,
        ray_address=args.ray_address,
        pinned_memory_pool_size=max(0, args.pinned_memory_pool_byte_size),
        # "Subsequent uses will overwrite previous uses for the same GPU device."
        cuda_memory_pool_sizes=dict(args.cuda_memory_pool_byte_size),
        cuda_virtual_address_sizes=dict(args.cuda_virtual_address_size),
        min_supported_compute_capability=args.min_supported_compute_capability,
        buffer_manager_thread_count=max(0, args.buffer_manager_thread_count),
        model_load_device_limits=model_load_limits(args),
        **metrics_frontend.options_from_args(args),
    )


def model_load_limits(args: argparse.Namespace) -> tuple[ModelLoadDeviceLimit, ...]:
    """``--model-load-gpu-limit``: the first limit given for a device holds, in device
    order (tritonserver keeps them in a std::map, filled with emplace)."""
    first: dict[int, float] = {}
    for device, fraction in args.model_load_gpu_limit:
        first.setdefault(device, fraction)
    return tuple(ModelLoadDeviceLimit("GPU", device, fraction)
                 for device, fraction in sorted(first.items()))


def serve_extras(args: argparse.Namespace) -> ServeExtras:
    """What the start-up log shows beside the Options: the GPU settings of the options
    table, and a note for each flag given that has no effect here."""
    return ServeExtras(pinned_memory_pool_byte_size=args.pinned_memory_pool_byte_size,
                       cuda_memory_pool_byte_size=tuple(args.cuda_memory_pool_byte_size),
                       min_supported_compute_capability=args.min_supported_compute_capability,
                       notes=tuple(no_effect_notes(args)))


_NO_GPU = "infercore manages no GPU memory"
# tritonserver's flags that change nothing in infercore, and why (the start-up log says
# so once for each one given; SageMaker and Vertex AI say so when they are turned on)
NO_EFFECT = {
    "enable-peer-access": _NO_GPU,
    "pinned-memory-pool-byte-size": _NO_GPU,
    "cuda-memory-pool-byte-size": _NO_GPU,
    "cuda-virtual-address-size": _NO_GPU,
    "min-supported-compute-capability": _NO_GPU,
    "buffer-manager-thread-count": "tensors are not copied by helper threads here",
    "grpc-infer-thread-count": "the gRPC frontend has no inference handler threads to size",
    "grpc-infer-allocation-pool-size": "the gRPC frontend keeps no pool of request states",
    "grpc-max-response-pool-size": "the gRPC frontend keeps no pool of response objects",
    "repoagent-directory": "infercore has no repository agents",
    "cache-directory": "the local cache is built in; no cache library is loaded",
}


def no_effect_notes(args: argparse.Namespace) -> list[str]:
    """One line for each flag given that changes nothing here, in the order given."""
    given = dict.fromkeys(getattr(args, "flags_given", ()))
    return [f"--{name} has no effect here: {NO_EFFECT[name]}" for name in given
            if name in NO_EFFECT]


def deprecation_warnings(args: argparse.Namespace) -> list[str]:
    """tritonserver's warnings for its deprecated flags."""
    warnings = []
    if args.strict_model_config is not None:
        warnings.append("Warning: '--strict-model-config' has been deprecated! Please use "
                        "'--disable-auto-complete-config' instead.")
        if args.disable_auto_complete_config and not args.strict_model_config:
            warnings.append("Warning: Overriding deprecated '--strict-model-config' from False "
                            "to True in favor of '--disable-auto-complete-config'!")
    if args.response_cache_byte_size is not None:
        size = args.response_cache_byte_size
        warnings.append("Warning: '--response-cache-byte-size' has been deprecated! This will "
                        "default to the 'local' cache implementation with the provided byte "
                        "size for its config. Please use '--cache-config' instead. The "
                        f"equivalent --cache-config CLI args would be: "
                        f"'--cache-config=local,size={size}'")
    for flag, replacement in (("trace_file", "--trace-config triton,file=<path>"),
                              ("trace_level", "--trace-config level=<level>"),
                              ("trace_rate", "--trace-config rate=<rate>"),
                              ("trace_count", "--trace-config count=<count>"),
                              ("trace_log_frequency",
                               "--trace-config triton,log-frequency=<value>")):
        if getattr(args, flag) not in (None, []):
            name = "--" + flag.replace("_", "-")
            warnings.append(f"Warning: '{name}' has been deprecated and will be removed in "
                            f"future releases. Please use '{replacement}' instead.")
    return warnings


def check_command_line(args: argparse.Namespace) -> None:
    """tritonserver's checks after reading the command line, in its order."""
    if args.load_model and args.model_control_mode != ModelControlMode.EXPLICIT.value:
        raise InvalidArgumentError(
            "Error: Use of '--load-model' requires setting '--model-control-mode=explicit' "
            "as well.")
    if args.response_cache_byte_size is not None and args.cache_config:
        raise InvalidArgumentError(
            "Error: Incompatible flags --response-cache-byte-size and --cache-config both "
            "provided. Please provide one or the other.")
    _check_ports(args)


def _check_ports(args: argparse.Namespace) -> None:
    """Two enabled services may not listen at one address and port, and a SageMaker safe
    port range holds the other services at its address (tritonserver's check, in its
    order of services)."""
    # (name, address, port, the range others must keep to or None)
    services: list[tuple[str, str, int, tuple[int, int] | None]] = []
    if args.allow_http:
        services.append(("HTTP", args.http_address, args.http_port, None))
    if args.allow_grpc:
        services.append(("GRPC", args.grpc_address, args.grpc_port, None))
    if args.allow_metrics:
        services.append(("metrics", args.metrics_address or args.http_address,
                         args.metrics_port, None))
    sagemaker_options = sagemaker.options_from_args(args)
    if sagemaker_options.enabled:
        services.append(("SageMaker", sagemaker_options.address, sagemaker_options.port,
                         sagemaker_options.safe_port_range))
    vertex_options = vertex_ai.options_from_args(args)
    if vertex_options.enabled:
        services.append(("Vertex AI", vertex_options.address, vertex_options.port, None))
    for index, (name, address, port, allowed) in enumerate(services):
        # a service with a range is checked against every other; the rest against later ones
        others = services if allowed is not None else services[index + 1:]
        for other, other_address, other_port, _ in others:
            if other == name or other_address != address:
                continue
            if allowed is not None and not allowed[0] <= other_port <= allowed[1]:
                raise InvalidArgumentError(
                    f"The server cannot listen to {other} requests at port {other_port}, "
                    f"allowed port range is [{allowed[0]}, {allowed[1]}]")
            if port == other_port and port != 0:  # 0: each gets a free port of its own
                raise InvalidArgumentError(
                    f"The server cannot listen to {name} requests and {other} requests at "
                    f"the same address and port {address}:{port}")


def _unique(values: Sequence[str]) -> list[str]:
    return list(dict.fromkeys(values))  # tritonserver keeps these in sets


def _nested(settings: Sequence[tuple[str, str, str]]) -> dict[str, dict[str, str]]:
    nested: dict[str, dict[str, str]] = {}
    for name, key, value in settings:
        nested.setdefault(name, {})[key] = value
    return nested


def _cache_config(args: argparse.Namespace) -> dict[str, dict[str, str]]:
    if args.response_cache_byte_size is not None:
        return {"local": {"size": str(args.response_cache_byte_size)}}
    return _nested(args.cache_config)


def _trace_items(args: argparse.Namespace) -> list[str]:
    """The deprecated trace flags as --trace-config items, before the real ones (which win)."""
    # one --trace-level=OFF turns tracing off whatever the others say (tritonserver's
    # explicit_disable_trace)
    levels = ["OFF"] if "OFF" in args.trace_level else args.trace_level
    items = [f"level={level}" for level in levels]
    if args.trace_rate is not None:
        items.append(f"rate={args.trace_rate}")
    if args.trace_count is not None:
        items.append(f"count={args.trace_count}")
    if args.trace_file is not None:
        items.append(f"triton,file={args.trace_file}")
    if args.trace_log_frequency is not None:
        items.append(f"triton,log-frequency={args.trace_log_frequency}")
    return items + list(args.trace_config)


# -- entry point -----------------------------------------------------------------------------
def normalize_argv(argv: Sequence[str]) -> list[str]:
    """A tritonserver-style command line (flags first) becomes a ``serve`` command line."""
    argv = list(argv)
    if argv and argv[0].startswith("--") and argv[0] not in ("--help", "--version"):
        return ["serve", *argv]
    return argv


_SUPERVISOR_FLAGS = ("--supervise", "--supervise-max-restarts=", "--supervise-window-secs=")


def _without_supervisor_flags(command_line: Sequence[str]) -> list[str]:
    """The options as read (``--name=value`` each) without the supervisor's own: the
    child's command line."""
    return [item for item in command_line
            if item != _SUPERVISOR_FLAGS[0] and not item.startswith(_SUPERVISOR_FLAGS[1:])]


def _subparser(parser: argparse.ArgumentParser, command: str) -> argparse.ArgumentParser:
    for action in parser._subparsers._group_actions if parser._subparsers else ():
        if isinstance(action, argparse._SubParsersAction):
            return action.choices[command]  # type: ignore[no-any-return]
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    own_command_line = argv is None
    args = parser.parse_args(normalize_argv(sys.argv[1:] if argv is None else argv))
    serve = _subparser(parser, args.command)
    for warning in deprecation_warnings(args):
        print(warning, file=sys.stderr)
    try:
        check_command_line(args)
    except TritonError as exc:
        serve.error(exc.message)
    try:
        model_load_limits(args)
    except TritonError as exc:  # refused as tritonserver builds its options, before the rest
        report_creation_failure(exc, "setting model load GPU limit")
        return 1
    try:
        options = _options(args)
    except TritonError as exc:  # what tritonserver's server options refuse
        report_creation_failure(exc)
        return 1
    # Records propagate from the "infercore" logger (whose level the server sets) to this
    # handler, in Triton's line format; other libraries stay at WARNING.
    triton_formatter().log_format = options.log_format
    logging.basicConfig(level=logging.WARNING,
                        handlers=[triton_handler(logging.StreamHandler(sys.stderr))])
    if args.supervise:
        logging.getLogger("infercore.supervisor").setLevel(logging.INFO)
        policy = SupervisorPolicy(args.supervise_max_restarts, args.supervise_window_secs)
        return supervise(serve_command(_without_supervisor_flags(args.command_line)), policy)
    for directory in args.backend_directory:
        if not Path(directory).is_dir():
            # tritonserver checks the folder only when a model needs a backend from it.
            logger.warning("backend directory '%s' does not exist; using the built-in "
                           "backends", directory)
            continue
        try:
            load_backend_directory(directory)
        except TritonError as exc:
            serve.error(exc.message)
    if own_command_line:
        # In-thread Python models run in this interpreter; like Triton's stub they see no
        # command line (`unittest.main()` in a model must not read the server's flags).
        sys.argv = [""]
    return _serve(options, args, frontend_modules=_frontend_modules(), extras=serve_extras(args))


if __name__ == "__main__":
    sys.exit(main())
