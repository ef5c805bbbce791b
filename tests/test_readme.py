"""The README's two set-up commands stay true: CI runs the test command verbatim."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    section = text.split("## Set up", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```sh\n(.+?)\n```", section)


def test_readme_has_exactly_two_setup_commands():
    serve, test = _commands()
    assert "infercore serve" in serve
    assert "pytest" in test


def test_ci_runs_the_readme_test_command():
    _, test = _commands()
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert test in ci


def test_the_python_snippet_runs_from_any_directory(tmp_path):
    text = (ROOT / "README.md").read_text()
    section = text.split("## Use it from Python", 1)[1].split("\n## ", 1)[0]
    (snippet,) = re.findall(r"```python\n(.+?)\n```", section, re.DOTALL)
    result = subprocess.run([sys.executable, "-c", snippet + "\nimport asyncio\n"
                             "asyncio.run(main())\n"], cwd=tmp_path, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "[[2. 2. 2." in result.stdout
