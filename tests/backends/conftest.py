"""Fixtures of the backend tests."""

from __future__ import annotations

import sys

import pytest

from infercore.backends import base


@pytest.fixture
def isolated_registry():
    """The test starts from the built-in backend registry and leaves it as it found it."""
    registry, loaded, modules = dict(base._REGISTRY), dict(base._LOADED), set(sys.modules)
    yield
    base._REGISTRY.clear()
    base._REGISTRY.update(registry)
    base._LOADED.clear()
    base._LOADED.update(loaded)
    for name in set(sys.modules) - modules:
        if name.startswith(("_infercore_backend_", "plugin_", "infercore_example_backend")):
            del sys.modules[name]
