"""Checks an InferRequest against its model's config, with tables built once at load.

``RequestValidator`` is made per loaded model version from its (normalised) config; its
``validate`` runs on the caller's thread for every request, so all per-model work (the
input table, datatype lookups, output names, message fragments) happens in ``__init__``.
Messages keep Triton's wording, which clients match on.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tritonclient.grpc import model_config_pb2

from .errors import InvalidArgumentError
from .request import InferRequest, request_label
from .tensor import DataType, Tensor

__all__ = ["InputSpec", "RequestValidator", "datatype_mismatch"]

_BATCH_NOTE = (
    " NOTE: Setting a non-zero max_batch_size in the model config requires a batch "
    "dimension to be prepended to each input shape. If you want to specify the full shape "
    "including the batch dim in your input dims config, try setting max_batch_size to zero. "
    "See the model configuration docs for more info on max_batch_size."
)


def datatype_mismatch(label: str, name: str, got: str, model: str, want: str) -> str:
    """Triton's text for an input of another datatype than the model's (wire names)."""
    return (f"{label}inference input '{name}' data-type is '{got}', but model '{model}' "
            f"expects '{want}'")


def dims_text(dims: Sequence[int]) -> str:
    return "[" + ",".join(str(d) for d in dims) + "]"


@dataclass(frozen=True, slots=True)
class InputSpec:
    """One configured input, as the validator needs it."""

    name: str
    data_type: DataType
    dims: tuple[int, ...]  # without the batch dimension
    reshape: tuple[int, ...] | None  # what the backend sees (without batch dim)
    optional: bool
    fixed: bool  # no -1 in dims

    def matches(self, shape: tuple[int, ...]) -> bool:
        dims = self.dims
        if len(shape) != len(dims):
            return False
        for got, want in zip(shape, dims, strict=False):
            if want != -1 and got != want:
                return False
        return True


class RequestValidator:
    """Validates requests for one model version and puts inputs in the backend's shape."""

    def __init__(self, config: model_config_pb2.ModelConfig) -> None:
        self.model_name = config.name
        self.max_batch_size = int(config.max_batch_size)
        self.inputs: dict[str, InputSpec] = {}
        for inp in config.input:
            reshape = tuple(int(d) for d in inp.reshape.shape) if inp.HasField("reshape") else None
            dims = tuple(int(d) for d in inp.dims)
            self.inputs[inp.name] = InputSpec(
                name=inp.name,
                data_type=DataType.from_config(model_config_pb2.DataType.Name(inp.data_type)),
                dims=dims,
                reshape=reshape,
                optional=bool(inp.optional),
                fixed=all(d >= 0 for d in dims),
            )
        self.required = tuple(name for name, spec in self.inputs.items() if not spec.optional)
        self.output_names = frozenset(out.name for out in config.output)
        self._needs_reshape = any(spec.reshape is not None for spec in self.inputs.values())

    def validate(self, request: InferRequest) -> None:
        """Raise InvalidArgumentError unless ``request`` fits the model; set its batch size."""
        inputs = request.inputs
        specs = self.inputs
        model = self.model_name
        # Triton's core labels what it finds in the inputs with the request's id (not an
        # unknown input's name, checked before it labels).
        if len(inputs) != len(specs) or not inputs.keys() <= specs.keys():
            self._check_input_names(inputs, request.id)
        batching = self.max_batch_size > 0
        batch_size = 0
        for name, tensor in inputs.items():
            spec = specs[name]
            if tensor.data_type is not spec.data_type:
                raise InvalidArgumentError(datatype_mismatch(
                    request_label(request.id), name, tensor.data_type.value, model,
                    spec.data_type.value))
            shape = tensor.shape
            if batching:
                if not shape:
                    raise InvalidArgumentError(self._shape_message(request, name, spec, shape))
                this_batch = shape[0]
                if batch_size == 0:
                    batch_size = this_batch
                elif this_batch != batch_size:
                    raise InvalidArgumentError(
                        f"input '{name}' batch size does not match other inputs for '{model}'"
                    )
                item_shape = shape[1:]
            else:
                item_shape = shape
            if item_shape != spec.dims and not spec.matches(item_shape):  # equal: fixed dims
                raise InvalidArgumentError(self._shape_message(request, name, spec, shape))
        if batching:
            if batch_size < 1 or batch_size > self.max_batch_size:
                raise InvalidArgumentError(
                    f"inference request batch-size must be <= {self.max_batch_size} for "
                    f"'{model}'"
                    if batch_size > self.max_batch_size
                    else f"inference request batch-size must be >= 1 for '{model}'"
                )
        request.batch_size = batch_size if batching else 1
        wanted = request.requested_outputs
        if wanted is not None:
            for name in wanted:
                if name not in self.output_names:
                    raise InvalidArgumentError(
                        f"unexpected inference output '{name}' for model '{model}'"
                    )
        if self._needs_reshape:
            self._apply_reshape(request)

    def _check_input_names(self, inputs: dict[str, Tensor], request_id: str) -> None:
        model = self.model_name
        for name in inputs:
            if name not in self.inputs:
                raise InvalidArgumentError(
                    f"unexpected inference input '{name}' for model '{model}'"
                )
        missing = [name for name in self.required if name not in inputs]
        if missing:
            total = len(self.inputs)
            required = len(self.required)
            if total == required:
                expected = f"expected {total} inputs"
            else:
                expected = f"expected number of inputs between {required} and {total}"
            got = ",".join(f"'{name}'" for name in inputs)
            missing_text = ",".join(f"'{name}'" for name in missing)
            raise InvalidArgumentError(
                f"{request_label(request_id)}{expected} but got {len(inputs)} inputs for model "
                f"'{model}'. Got input(s) "
                f"[{got}], but missing required input(s) [{missing_text}]. Please provide all "
                "required input(s)."
            )

    def _shape_message(self, request: InferRequest, name: str, spec: InputSpec,
                       shape: tuple[int, ...]) -> str:
        expected = ((-1,) + spec.dims) if self.max_batch_size > 0 else spec.dims
        message = (
            f"{request_label(request.id)}unexpected shape for input '{name}' for model "
            f"'{self.model_name}'. Expected "
            f"{dims_text(expected)}, got {dims_text(shape)}."
        )
        if self.max_batch_size > 0:
            message += _BATCH_NOTE
        return message

    def _apply_reshape(self, request: InferRequest) -> None:
        batching = self.max_batch_size > 0
        for name, tensor in list(request.inputs.items()):
            reshape = self.inputs[name].reshape
            if reshape is None:
                continue
            # numpy resolves a single -1 (variable) reshape dim from the element count
            target = ((tensor.shape[0],) + reshape) if batching else reshape
            request.inputs[name] = tensor.reshape(target)
