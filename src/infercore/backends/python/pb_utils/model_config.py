"""``pb_utils.ModelConfig`` for ``auto_complete_config``, and the config-as-dict helpers.

Models see the config as Triton renders it in JSON (``infercore.config.render``): proto field
names, every field without presence printed (so ``config["input"]`` and
``config["max_batch_size"]`` always exist), enums by name, 64-bit integers as numbers.

``ModelConfig`` keeps that dict as Triton does (models may read and even edit it through
``as_dict()``) and writes it back into the wrapped protobuf message after each mutation, so
the message the server loads is what the model built.
"""

from __future__ import annotations

import json
from typing import Any

from google.protobuf.message import Message
from tritonclient.grpc import model_config_pb2

from ....config.render import model_config_from_json, model_config_to_json
from ....errors import TritonError as CoreTritonError

__all__ = [
    "ModelConfig",
    "config_to_dict",
    "config_to_json",
    "get_input_config_by_name",
    "get_output_config_by_name",
    "using_decoupled_model_transaction_policy",
]

# Printed by Triton even for an all-default config; models index them unconditionally.
_ALWAYS_PRESENT: tuple[tuple[str, Any], ...] = (
    ("name", ""),
    ("max_batch_size", 0),
    ("input", []),
    ("output", []),
)


def config_to_dict(config: model_config_pb2.ModelConfig) -> dict[str, Any]:
    """The config as Triton's JSON rendering, as a dict."""
    data = model_config_to_json(config)
    for key, default in _ALWAYS_PRESENT:
        if key not in data:
            data[key] = list(default) if isinstance(default, list) else default
    return data


def config_to_json(config: model_config_pb2.ModelConfig) -> str:
    """The config as the JSON string Python models get in ``args["model_config"]``."""
    return json.dumps(config_to_dict(config))


def get_input_config_by_name(model_config: dict[str, Any], name: str) -> dict[str, Any] | None:
    """The config entry of input ``name``, or None."""
    for properties in model_config.get("input", ()):
        if properties["name"] == name:
            return properties
    return None


def get_output_config_by_name(model_config: dict[str, Any], name: str) -> dict[str, Any] | None:
    """The config entry of output ``name``, or None."""
    for properties in model_config.get("output", ()):
        if properties["name"] == name:
            return properties
    return None


def using_decoupled_model_transaction_policy(model_config: dict[str, Any]) -> bool:
    """Whether the config sets ``model_transaction_policy { decoupled: true }``."""
    policy = model_config.get("model_transaction_policy")
    return bool(policy and policy.get("decoupled", False))


class ModelConfig:
    """The model configuration ``auto_complete_config`` receives and returns.

    Only ``max_batch_size``, the dynamic batcher, inputs, outputs and the transaction
    policy can be set, with Triton's rules: what the config file already says cannot be
    contradicted.
    """

    def __init__(self, model_config: Message | str | bytes | dict[str, Any]) -> None:
        if isinstance(model_config, Message):
            self._proto = model_config
            self._model_config = config_to_dict(model_config)
        else:
            self._proto = model_config_pb2.ModelConfig()
            if isinstance(model_config, dict):
                self._model_config = model_config
            else:
                self._model_config = json.loads(model_config)
            self._sync()

    def as_dict(self) -> dict[str, Any]:
        """The configuration as a dict (Triton's JSON rendering)."""
        return self._model_config

    @property
    def _name(self) -> str:
        return str(self._model_config.get("name", ""))

    def set_max_batch_size(self, max_batch_size: int) -> None:
        """Set max_batch_size; a larger non-zero value in the config file is an error."""
        current = int(self._model_config.get("max_batch_size", 0))
        if current > max_batch_size:
            raise ValueError(
                f"configuration specified max_batch_size {current}, but in "
                f"auto-complete-config function for model '{self._name}' specified "
                f"max_batch_size {max_batch_size}"
            )
        self._model_config["max_batch_size"] = max_batch_size
        self._sync()

    def set_dynamic_batching(self) -> None:
        """Use the dynamic batcher (with defaults) unless another scheduler is configured."""
        for scheduler in ("sequence_batching", "ensemble_scheduling"):
            if scheduler in self._model_config:
                raise ValueError(
                    f"Configuration specified scheduling_choice as '{scheduler}', but "
                    f"auto-complete-config function for model '{self._name}' tries to set "
                    "scheduling_choice as 'dynamic_batching'"
                )
        if "dynamic_batching" not in self._model_config:
            self._model_config["dynamic_batching"] = {}
            self._sync()

    def add_input(self, input: dict[str, Any]) -> None:  # noqa: A002 (Triton's name)
        """Add an input {"name", "data_type", "dims", optional "optional"}."""
        self._add_tensor("input", input, ("name", "data_type", "dims", "optional"))

    def add_output(self, output: dict[str, Any]) -> None:
        """Add an output {"name", "data_type", "dims"}."""
        self._add_tensor("output", output, ("name", "data_type", "dims"))

    def _add_tensor(self, kind: str, tensor: dict[str, Any], valid: tuple[str, ...]) -> None:
        model = self._name
        if "name" not in tensor:
            raise ValueError(
                f"{kind} in auto-complete-config function for model '{model}' is missing "
                "'name' property."
            )
        name = tensor["name"]
        for key in tensor:
            if key not in valid:
                listed = ", ".join(f"'{v}'" for v in valid[:-1]) + f" and '{valid[-1]}'"
                raise ValueError(
                    f"{kind} '{name}' in auto-complete-config function for model '{model}' "
                    f"contains property other than {listed}."
                )
        for required in ("data_type", "dims"):
            if required not in tensor:
                raise ValueError(
                    f"{kind} '{name}' in auto-complete-config function for model '{model}' "
                    f"is missing '{required}' property."
                )
        entries = self._model_config.setdefault(kind, [])
        for current in entries:
            if current.get("name") != name:
                continue
            data_type = current.get("data_type", "TYPE_INVALID")
            if data_type != "TYPE_INVALID" and data_type != tensor["data_type"]:
                raise ValueError(
                    f"unable to load model '{model}', configuration expects datatype "
                    f"{data_type} for {kind} '{name}', model provides {tensor['data_type']}"
                )
            dims = list(current.get("dims", []))
            if dims and dims != list(tensor["dims"]):
                raise ValueError(
                    f"model '{model}', tensor '{name}': the model expects dims "
                    f"{list(tensor['dims'])} but the model configuration specifies dims {dims}"
                )
            if (
                "optional" in tensor
                and "optional" in current
                and current["optional"] != tensor["optional"]
            ):
                raise ValueError(
                    f"model '{model}', tensor '{name}': the model expects optional "
                    f"{tensor['optional']} but the model configuration specifies optional "
                    f"{current['optional']}"
                )
            current["data_type"] = tensor["data_type"]
            current["dims"] = list(tensor["dims"])
            if "optional" in tensor:
                current["optional"] = tensor["optional"]
            self._sync()
            return
        entries.append(dict(tensor, dims=list(tensor["dims"])))
        self._sync()

    def set_model_transaction_policy(self, transaction_policy_dict: dict[str, Any]) -> None:
        """Set model_transaction_policy ({"decoupled": bool}); a conflicting value is an error."""
        for key in transaction_policy_dict:
            if key != "decoupled":
                raise ValueError(
                    "model transaction property in auto-complete-config function for model "
                    f"'{self._name}' contains property other than 'decoupled'."
                )
        policy = self._model_config.setdefault("model_transaction_policy", {})
        if "decoupled" in transaction_policy_dict:
            wanted = transaction_policy_dict["decoupled"]
            if "decoupled" in policy and policy["decoupled"] != wanted:
                raise ValueError(
                    "trying to change decoupled property in auto-complete-config for model "
                    f"'{self._name}', which is already set to '{policy['decoupled']}'."
                )
            policy["decoupled"] = wanted
        self._sync()

    def _sync(self) -> None:
        """Write the dict into the wrapped protobuf message (all or nothing)."""
        try:
            fresh = model_config_from_json(self._model_config)
        except CoreTritonError as exc:
            raise ValueError(
                f"auto-complete-config function for model '{self._name}' made an invalid "
                f"model configuration: {exc}"
            ) from exc
        self._proto.CopyFrom(fresh)

    def __repr__(self) -> str:
        return f"ModelConfig(name={self._name!r})"
