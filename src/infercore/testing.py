"""A small public test kit: build model repositories on disk from text.

    repo = RepositoryBuilder(tmp_path / "models")
    repo.add_model("add_sub", config=ADD_SUB_CONFIG, model_py=ADD_SUB_PY)
    with Server(model_repository=repo.path) as server: ...

Python model sources are written exactly as Triton users write them, so tests exercise
the same code paths as real repositories.
"""

from __future__ import annotations

import textwrap
from collections.abc import Iterable
from pathlib import Path

__all__ = ["RepositoryBuilder"]


class RepositoryBuilder:
    """Writes model folders (config.pbtxt + version folders) under one repository path."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)

    def add_model(
        self,
        name: str,
        *,
        config: str | None = None,
        model_py: str | None = None,
        versions: Iterable[int] = (1,),
        files: dict[str, str | bytes] | None = None,
    ) -> Path:
        """Create ``<repo>/<name>`` with an optional config.pbtxt and model.py per version.

        ``config`` and ``model_py`` are dedented. ``files`` maps paths relative to the
        model folder to extra contents (e.g. ``{"1/helper.py": "..."}``).
        """
        model_dir = self.path / name
        model_dir.mkdir(parents=True, exist_ok=True)
        if config is not None:
            (model_dir / "config.pbtxt").write_text(textwrap.dedent(config))
        for version in versions:
            version_dir = model_dir / str(version)
            version_dir.mkdir(exist_ok=True)
            if model_py is not None:
                (version_dir / "model.py").write_text(textwrap.dedent(model_py))
        for relative, content in (files or {}).items():
            target = model_dir / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            if isinstance(content, bytes):
                target.write_bytes(content)
            else:
                target.write_text(textwrap.dedent(content))
        return model_dir
