"""What a wheel carries: the bundled example repository `infercore serve` serves by default,
so a non-editable install serves it too (a checkout's examples/models links to it)."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

from infercore.cli import examples_repository

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "src" / "infercore" / "_examples" / "models"


def test_the_checkout_link_and_the_package_hold_one_example_repository():
    assert (ROOT / "examples" / "models").resolve() == EXAMPLES
    assert examples_repository().resolve() == EXAMPLES


def test_the_wheel_carries_every_file_of_the_example_repository(tmp_path):
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                    "-q", "-w", str(tmp_path), str(ROOT)], check=True, timeout=300)
    (wheel,) = tmp_path.glob("infercore-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    expected = {"infercore/_examples/models/" + path.relative_to(EXAMPLES).as_posix()
                for path in EXAMPLES.rglob("*") if path.is_file()
                and "__pycache__" not in path.parts}
    assert expected and expected <= names
