"""Triton's classification extension: an output's top-k as "value:index[:label]" strings.

A client asks for classification of an output (HTTP: the output parameter
``classification``; gRPC: the same parameter in the requested output). The frontend then
returns, instead of the raw tensor, a BYTES tensor of the k highest values of each batch
item, in descending order, each written as ``"<value>:<index>"`` plus ``":<label>"`` when
the output has a label for that index. Values print as Triton prints them
(``std::to_string``): integers as integers, FP32/FP64 with six decimals. Other datatypes
(BOOL, FP16, BF16, BYTES) have no classification, as in Triton.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..errors import InvalidArgumentError
from ..tensor import DataType, Tensor

__all__ = ["classify"]

_INTEGERS = frozenset({DataType.UINT8, DataType.UINT16, DataType.UINT32, DataType.UINT64,
                       DataType.INT8, DataType.INT16, DataType.INT32, DataType.INT64})
_FLOATS = frozenset({DataType.FP32, DataType.FP64})


def classify(tensor: Tensor, count: int, labels: Sequence[str], *, batched: bool) -> Tensor:
    """The top ``count`` classes of ``tensor`` (per batch item when ``batched``).

    The result has shape ``[batch, k]`` when batched (``[k]`` otherwise), with ``k`` the
    smaller of ``count`` and the number of classes per item.
    """
    if count < 1:
        raise InvalidArgumentError("classification count must be >= 1")
    data_type = tensor.data_type
    if data_type not in _INTEGERS and data_type not in _FLOATS:
        raise InvalidArgumentError(
            f"class result not available for output due to unsupported type '{data_type}'")
    values = tensor.to_numpy()
    if batched and values.ndim:
        batch = values.shape[0]
        rows = values.reshape(batch, int(np.prod(values.shape[1:], dtype=np.int64)))
    else:
        rows = values.reshape(1, values.size)
    k = min(count, rows.shape[1])
    text = "{:d}:{:d}" if data_type in _INTEGERS else "{:f}:{:d}"
    out = np.empty((rows.shape[0], k), dtype=np.object_)
    for r, row in enumerate(rows):
        # stable: equal values keep index order (Triton's sort leaves ties unspecified)
        order = np.argsort(-row.astype(np.float64), kind="stable")[:k]
        for c, index in enumerate(order):
            entry = text.format(row[index].item(), int(index))
            if index < len(labels):
                entry += ":" + labels[index]
            out[r, c] = entry.encode("utf-8")
    return Tensor(DataType.BYTES, out if batched and values.ndim else out.reshape(k))
