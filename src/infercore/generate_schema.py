"""Triton's generate extension schema: the shape a flat JSON value takes for an input.

The HTTP frontend shapes a request's values with it; RemoteServer checks beforehand that the
server will rebuild a tensor's own shape.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

__all__ = ["generate_shape"]


def generate_shape(dims: Sequence[int], count: int) -> list[int] | None:
    """The shape Triton's generate schema gives ``count`` elements for metadata ``dims``:
    fixed dimensions as they are, the innermost variable one takes what is left, the other
    variable ones 1. None when no shape fits."""
    fixed = math.prod(d for d in dims if d >= 0)
    variable = [i for i, d in enumerate(dims) if d < 0]
    shape = [1 if d < 0 else d for d in dims]
    if fixed == 0:
        left = 0 if count == 0 else -1
    else:
        left = count // fixed if count % fixed == 0 else -1
    if variable and left >= 0:
        shape[variable[-1]] = left
        return shape
    if left == 1 or (fixed == 0 and left == 0):
        return shape
    return None
