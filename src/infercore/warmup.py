"""Model warmup (``model_warmup`` in the config): samples built at load, run on each instance.

    warmup_samples(config, model_dir) -> [WarmupSample]   parse and validate, build the tensors
    run_warmup(name, version, samples, instances, clock, run)   execute them before serving

As Triton does (backend_model_instance.cc):

- a sample with ``batch_size`` 0 is skipped; ``count`` 0 runs the sample once;
- a sample of batch size N is N requests executed together in one payload, each holding the
  sample's inputs once (batch dimension 1 for a batching model, none otherwise), so models
  see what a batch of N clients would send them;
- ``zero_data`` is zeros (empty strings for BYTES); ``random_data`` is random bytes read as the
  datatype (BYTES falls back to zero data, i.e. empty strings); ``input_data_file`` is read
  raw from ``<model_dir>/warmup/<file>`` (BYTES: elements as 4-byte little-endian length plus
  bytes), and must hold at least the bytes the dims need (extra bytes are ignored);
- inputs that are not model inputs (sequence control tensors) are passed through as given;
- the requests are validated (datatype, shape, reshape) like clients' requests;
- warmup runs on every active (non-passive) instance; the first sample whose responses carry
  an error ends warmup and fails the load ("failed to run warmup sample '<name>': <errors>");
- warmup executions are recorded in the model's statistics like any other: Triton's warmup
  requests collect statistics (request and queue start are captured before each run).

Departures: Triton does not check ``batch_size`` against ``max_batch_size``; here a sample
above ``max_batch_size`` (or above 1 for a model that does not batch, as model_config.proto
asks) is rejected at load, since the backend would receive a batch no client can send.
Random floats are random bit patterns with the non-finite ones (NaN, infinity) set to 0, and
random BOOLs are True/False, rather than arbitrary bytes. A file name must stay inside the
model's ``warmup`` folder.

Threads: both functions run on the loading thread. ``run_warmup`` executes each payload
through ``run`` (dispatch.py's ``Dispatch.run``: it reserves the instance, its ``busy``
lock and its rate-limiter resources, as Triton's warmup payloads go through the rate
limiter), so it is safe whether or not the instance threads run (the scheduler is not
admitting requests yet). A decoupled model may answer from threads of its
own: each warmup request ends when its final flag arrives, waited for with a deadline.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePath

import numpy as np
from tritonclient.grpc import model_config_pb2

from .errors import InvalidArgumentError, TritonError
from .instance import ModelInstance
from .payload import Payload
from .request import InferRequest
from .response import ResponseSender, ResponseStream
from .tensor import DataType, Tensor, deserialize_bytes_tensor
from .validation import RequestValidator

__all__ = ["WARMUP_FOLDER", "WarmupSample", "run_warmup", "warmup_samples"]

logger = logging.getLogger(__name__)

WARMUP_FOLDER = "warmup"  # input_data_file is read from <model_dir>/warmup/
# The exponent bits of each float type: all set means infinity or NaN.
_FLOAT_EXPONENTS: dict[DataType, tuple[type[np.unsignedinteger], int]] = {
    DataType.FP16: (np.uint16, 0x7C00),
    DataType.BF16: (np.uint16, 0x7F80),
    DataType.FP32: (np.uint32, 0x7F80_0000),
    DataType.FP64: (np.uint64, 0x7FF0_0000_0000_0000),
}


@dataclass(frozen=True, slots=True)
class WarmupSample:
    """One ``model_warmup`` entry, ready to run.

    ``batch_size`` requests, each with ``inputs`` (already validated and in the backend's
    shape: with a batch dimension of 1 when the model batches), form one execution; it is
    repeated ``count`` times on each instance.
    """

    name: str
    count: int
    batch_size: int
    inputs: Mapping[str, Tensor]

    def __repr__(self) -> str:
        return (
            f"WarmupSample(name={self.name!r}, count={self.count}, "
            f"batch_size={self.batch_size}, inputs={list(self.inputs)})"
        )


def warmup_samples(
    config: model_config_pb2.ModelConfig,
    model_dir: Path,
    *,
    rng: np.random.Generator | None = None,
) -> list[WarmupSample]:
    """Parse, validate and build every ``model_warmup`` sample of ``config``.

    ``model_dir`` is the model's folder (``<repository>/<name>``); ``rng`` draws random data.

    Raises:
        InvalidArgumentError: a sample is malformed, its data file is missing, too short or
            outside ``<model_dir>/warmup``, or its requests would not pass validation. The
            message names the model and the sample.
    """
    if not config.model_warmup:
        return []
    rng = rng if rng is not None else np.random.default_rng()
    validator = RequestValidator(config)
    batching = config.max_batch_size > 0
    samples = []
    for setting in config.model_warmup:
        if setting.batch_size == 0:
            logger.debug("skipping batch 0 warmup sample '%s' of model '%s'", setting.name,
                         config.name)
            continue
        samples.append(_build_sample(config, Path(model_dir), setting, validator, batching, rng))
    return samples


def _build_sample(
    config: model_config_pb2.ModelConfig,
    model_dir: Path,
    setting: model_config_pb2.ModelWarmup,
    validator: RequestValidator,
    batching: bool,
    rng: np.random.Generator,
) -> WarmupSample:
    prefix = f"model '{config.name}' warmup sample '{setting.name}': "
    limit = config.max_batch_size if batching else 1
    if setting.batch_size > limit:
        raise InvalidArgumentError(
            prefix + f"batch_size {setting.batch_size} exceeds the model's "
            + (f"max_batch_size {config.max_batch_size}" if batching
               else "limit of 1 for a model that does not support batching")
        )
    original: dict[str, Tensor] = {}
    control: dict[str, Tensor] = {}
    for name, meta in setting.inputs.items():
        try:
            tensor = _build_input(name, meta, model_dir, batching, rng)
        except InvalidArgumentError as exc:
            raise InvalidArgumentError(prefix + exc.message) from exc
        (original if name in validator.inputs else control)[name] = tensor
    request = InferRequest(config.name, original)
    try:
        validator.validate(request)
    except InvalidArgumentError as exc:
        raise InvalidArgumentError(prefix + exc.message) from exc
    except ValueError as exc:  # a reshape numpy cannot do
        raise InvalidArgumentError(prefix + str(exc)) from exc
    inputs = dict(request.inputs)
    inputs.update(control)  # control tensors go to the backend as given, like Triton's overrides
    return WarmupSample(
        name=setting.name,
        count=max(int(setting.count), 1),
        batch_size=int(setting.batch_size),
        inputs=inputs,
    )


def _build_input(
    name: str,
    meta: model_config_pb2.ModelWarmup.Input,
    model_dir: Path,
    batching: bool,
    rng: np.random.Generator,
) -> Tensor:
    """One request's tensor for warmup input ``name`` (batch dimension 1 when batching)."""
    data_type = DataType.from_config(model_config_pb2.DataType.Name(meta.data_type))
    dims = tuple(int(d) for d in meta.dims)
    if any(d < 0 for d in dims):
        raise InvalidArgumentError(
            "warmup setting expects all variable-size dimensions are specified for input "
            f"'{name}'"
        )
    shape = ((1,) + dims) if batching else dims
    count = int(np.prod(shape, dtype=np.int64))
    kind = meta.WhichOneof("input_data_type")
    if kind is None:
        raise InvalidArgumentError(
            f"warmup setting expects input '{name}' to have input_data_type set"
        )
    if kind == "input_data_file":
        array = _read_file(name, meta.input_data_file, model_dir, data_type, count)
        return Tensor(data_type, array.reshape(shape))
    if data_type is DataType.BYTES:  # zero data; random data falls back to zero data
        empty = np.empty(count, dtype=np.object_)
        empty[:] = [b""] * count
        return Tensor(data_type, empty.reshape(shape))
    if kind == "zero_data":
        return Tensor(data_type, np.zeros(shape, dtype=data_type.numpy_dtype))
    return Tensor(data_type, _random_array(data_type, shape, count, rng))


def _random_array(
    data_type: DataType, shape: tuple[int, ...], count: int, rng: np.random.Generator
) -> np.ndarray:
    """Random bytes read as ``data_type``, as Triton fills its random buffer."""
    raw = np.frombuffer(bytearray(rng.bytes(count * data_type.byte_size)), dtype=np.uint8)
    if data_type is DataType.BOOL:
        return (raw & 1).astype(np.bool_).reshape(shape)
    exponent = _FLOAT_EXPONENTS.get(data_type)
    if exponent is not None:  # zero the NaNs and infinities, read from the bits
        bits_type, mask = exponent
        bits = raw.view(bits_type)
        bits[(bits & bits_type(mask)) == mask] = 0
    return raw.view(data_type.numpy_dtype).reshape(shape)


def _read_file(
    name: str, file_name: str, model_dir: Path, data_type: DataType, count: int
) -> np.ndarray:
    """The flat array of ``count`` elements held by ``<model_dir>/warmup/<file_name>``."""
    relative = PurePath(file_name)
    folder = model_dir / WARMUP_FOLDER
    path = folder / relative
    if (not file_name or relative.is_absolute() or ".." in relative.parts
            or not path.resolve().is_relative_to(folder.resolve())):
        raise InvalidArgumentError(
            f"input_data_file '{file_name}' of input '{name}' must name a file inside the "
            f"model's '{WARMUP_FOLDER}' folder"
        )
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise InvalidArgumentError(
            f"failed to open text file for read {path}: {exc.strerror}"
        ) from exc
    if data_type is DataType.BYTES:
        try:
            return deserialize_bytes_tensor(data, count)
        except InvalidArgumentError as exc:
            raise InvalidArgumentError(
                f"input_data_file '{file_name}' of input '{name}': {exc.message}"
            ) from exc
    needed = count * data_type.byte_size
    if len(data) < needed:
        raise InvalidArgumentError(
            f"warmup setting expects {needed} bytes, but the data provided from {file_name} "
            f"only has {len(data)} bytes"
        )
    raw = np.frombuffer(bytearray(data[:needed]), dtype=np.uint8)
    if data_type is DataType.BOOL:
        return raw != 0
    return raw.view(data_type.numpy_dtype)


def run_warmup(
    model_name: str,
    version: int,
    samples: Sequence[WarmupSample],
    instances: Sequence[ModelInstance],
    clock: Callable[[], int],
    run: Callable[[ModelInstance, Payload], None],
    *,
    timeout: float | None = 300.0,
) -> None:
    """Run every sample ``count`` times on each active instance, on the calling thread
    (``run(instance, payload)`` reserves the instance and executes the payload).

    ``timeout`` (seconds) bounds the wait for each execution's final responses (they may
    come later than ``execute`` returns from a decoupled model); None waits as long as it
    takes, as Triton does.

    Raises:
        InvalidArgumentError: a response carried an error, or the final response did not
            arrive in time: "failed to load '<model>' version <v>: failed to run warmup
            sample '<name>': <error>; ...".
    """
    if not samples:
        return
    for instance in instances:
        if instance.info.passive:
            continue
        for sample in samples:
            for iteration in range(1, sample.count + 1):
                logger.debug("model '%s' instance %s is running warmup sample '%s' for "
                             "iteration %d", model_name, instance.name, sample.name, iteration)
                errors = _run_once(model_name, version, sample, instance, clock, run,
                                   timeout)
                if errors:
                    logger.debug("model '%s' instance %s failed to run warmup sample '%s'",
                                 model_name, instance.name, sample.name)
                    raise InvalidArgumentError(
                        f"failed to load '{model_name}' version {version}: failed to run "
                        f"warmup sample '{sample.name}': " + "; ".join(errors) + ";"
                    )


def _run_once(
    model_name: str,
    version: int,
    sample: WarmupSample,
    instance: ModelInstance,
    clock: Callable[[], int],
    run: Callable[[ModelInstance, Payload], None],
    timeout: float | None,
) -> list[str]:
    """Execute one payload of the sample on ``instance``; the error texts of its responses."""
    pending = [sample.batch_size]
    pending_lock = threading.Lock()
    finished = threading.Event()

    def on_close(_request: InferRequest) -> None:
        with pending_lock:
            pending[0] -= 1
            if pending[0] == 0:
                finished.set()

    requests: list[InferRequest] = []
    streams: list[ResponseStream] = []
    for _ in range(sample.batch_size):
        request = InferRequest(model_name, sample.inputs, model_version=version)
        request.batch_size = 1  # each request holds the sample once, as the validator sets it
        stream = ResponseStream(request, raise_on_error=False)
        request.sender = ResponseSender(request, stream, model_name, version, on_close)
        now = clock()
        request.request_start_ns = now
        request.queue_start_ns = now
        requests.append(request)
        streams.append(stream)
    run(instance, Payload(requests, clock))
    if not finished.wait(timeout):
        for request in requests:
            request.cancel()
        return [f"the final response did not arrive within {timeout} s"]
    # Every stream is done: reading it never blocks (no runner is set, nothing runs inline).
    errors: list[str] = []
    for stream in streams:
        for response in stream:
            error: TritonError | None = response.error
            if error is not None:
                errors.append(error.message)
    return errors
