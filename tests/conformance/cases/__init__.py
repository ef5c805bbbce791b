"""Every conformance suite, one module per area; each module defines ``SUITES``."""

from __future__ import annotations

import importlib
import pkgutil

from ..case import Suite

__all__ = ["all_suites"]


def all_suites() -> list[Suite]:
    suites: list[Suite] = []
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda i: i.name):
        module = importlib.import_module(f"{__name__}.{info.name}")
        suites.extend(getattr(module, "SUITES", ()))
    names = [suite.name for suite in suites]
    duplicated = {name for name in names if names.count(name) > 1}
    if duplicated:
        raise ValueError(f"suite names used twice: {sorted(duplicated)}")
    return suites
