"""Backend, platform and default model file names, resolved as Triton does from the config.

Triton fills 'backend', 'platform' and 'default_model_filename' from each other (and from
the files in the first version directory) in ``AutoCompleteBackendFields``. The rules that
need only the config live here; looking inside version directories is the repository's job.
"""

from __future__ import annotations

from tritonclient.grpc import model_config_pb2

__all__ = [
    "ENSEMBLE_PLATFORM",
    "default_model_filename",
    "resolve_backend",
]

ENSEMBLE_PLATFORM = "ensemble"

TENSORFLOW_GRAPHDEF_PLATFORM = "tensorflow_graphdef"
TENSORFLOW_SAVEDMODEL_PLATFORM = "tensorflow_savedmodel"
TENSORRT_PLATFORM = "tensorrt_plan"
ONNXRUNTIME_PLATFORM = "onnxruntime_onnx"
PYTORCH_PLATFORM = "pytorch_libtorch"

TENSORFLOW_BACKEND = "tensorflow"
TENSORRT_BACKEND = "tensorrt"
ONNXRUNTIME_BACKEND = "onnxruntime"
OPENVINO_BACKEND = "openvino"
PYTORCH_BACKEND = "pytorch"
PYTHON_BACKEND = "python"

_GRAPHDEF_FILENAME = "model.graphdef"
_SAVEDMODEL_FILENAME = "model.savedmodel"

# Backends whose model file name does not depend on the platform.
_FILENAMES: dict[str, str] = {
    PYTHON_BACKEND: "model.py",
    ONNXRUNTIME_BACKEND: "model.onnx",
    PYTORCH_BACKEND: "model.pt",
    TENSORRT_BACKEND: "model.plan",
    OPENVINO_BACKEND: "model.xml",
}
_TENSORFLOW_FILENAMES: dict[str, str] = {
    TENSORFLOW_GRAPHDEF_PLATFORM: _GRAPHDEF_FILENAME,
    TENSORFLOW_SAVEDMODEL_PLATFORM: _SAVEDMODEL_FILENAME,
}

# Checked in Triton's order when the backend is empty: (backend, platforms, file name).
_BACKEND_HINTS: tuple[tuple[str, frozenset[str], str], ...] = (
    (TENSORRT_BACKEND, frozenset({TENSORRT_PLATFORM}), "model.plan"),
    (ONNXRUNTIME_BACKEND, frozenset({ONNXRUNTIME_PLATFORM}), "model.onnx"),
    (OPENVINO_BACKEND, frozenset(), "model.xml"),
    (PYTORCH_BACKEND, frozenset({PYTORCH_PLATFORM}), "model.pt"),
    (PYTHON_BACKEND, frozenset(), "model.py"),
)

# The platform Triton writes for a backend given without one.
_DEFAULT_PLATFORMS: dict[str, str] = {
    TENSORRT_BACKEND: TENSORRT_PLATFORM,
    ONNXRUNTIME_BACKEND: ONNXRUNTIME_PLATFORM,
    PYTORCH_BACKEND: PYTORCH_PLATFORM,
}

# Backends Triton knows by name and the only platforms it pairs them with; any other
# backend (python, openvino, custom ones) may come with any platform.
KNOWN_BACKEND_PLATFORMS: dict[str, frozenset[str]] = {
    TENSORFLOW_BACKEND: frozenset({TENSORFLOW_GRAPHDEF_PLATFORM, TENSORFLOW_SAVEDMODEL_PLATFORM}),
    TENSORRT_BACKEND: frozenset({TENSORRT_PLATFORM}),
    ONNXRUNTIME_BACKEND: frozenset({ONNXRUNTIME_PLATFORM}),
    PYTORCH_BACKEND: frozenset({PYTORCH_PLATFORM}),
}


def default_model_filename(backend: str, platform: str) -> str:
    """Triton's default model file for a backend/platform pair, or "" when it has none."""
    if backend == TENSORFLOW_BACKEND or (not backend and platform in _TENSORFLOW_FILENAMES):
        return _TENSORFLOW_FILENAMES.get(platform, "")
    return _FILENAMES.get(backend, "")


def resolve_backend(config: model_config_pb2.ModelConfig) -> str:
    """Fill ``config.backend`` (and the platform, where Triton does) and return the backend.

    Only the config is consulted; a backend Triton would guess from the files in a version
    directory (e.g. a lone ``model.py``) is left for the caller. Ensembles keep backend "".
    """
    filename = config.default_model_filename

    if not config.platform and config.backend in ("", TENSORFLOW_BACKEND):
        if filename == _SAVEDMODEL_FILENAME:
            config.platform = TENSORFLOW_SAVEDMODEL_PLATFORM
        elif filename == _GRAPHDEF_FILENAME:
            config.platform = TENSORFLOW_GRAPHDEF_PLATFORM
    if config.platform in _TENSORFLOW_FILENAMES:
        if not config.backend:
            config.backend = TENSORFLOW_BACKEND
        return config.backend

    if not config.backend:
        for backend, platforms, hint_filename in _BACKEND_HINTS:
            if config.platform in platforms or filename == hint_filename:
                config.backend = backend
                break

    default_platform = _DEFAULT_PLATFORMS.get(config.backend)
    if default_platform is not None and not config.platform:
        config.platform = default_platform
    return config.backend
