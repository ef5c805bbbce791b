"""Writing a benchmark's figures into its own marked section of docs/performance.md."""

from __future__ import annotations

from pathlib import Path


def write_section(path: Path, begin: str, end: str, block: str) -> None:
    """Replace the ``begin`` ... ``end`` section of ``path`` with ``block`` (which starts
    with ``begin`` and ends with ``end``), or append it; touch nothing else."""
    text = path.read_text() if path.exists() else "# Performance\n"
    start = text.find(begin)
    stop = text.find(end, start) if start >= 0 else -1
    if start >= 0 and stop >= 0:
        text = text[:start] + block + text[stop + len(end):]
    else:
        text = text.rstrip() + "\n\n" + block + "\n"
    path.write_text(text)


def publish(section: str, path: Path | None, begin: str, end: str) -> None:
    """Print ``section``; with ``path``, also put it between ``begin`` and ``end`` there."""
    print(section)
    if path is not None:
        write_section(path, begin, end, f"{begin}\n{section}\n{end}")
