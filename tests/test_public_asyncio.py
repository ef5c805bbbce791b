"""No private asyncio API in src/ (issue 23): a scan that names the line of any use.

``asyncio._get_running_loop`` was replaced by a thread check in response.py (cheaper,
benchmarks/asyncio_private.py) and ``asyncio.get_running_loop`` elsewhere; the future
protocol's ``_asyncio_future_blocking`` by ``asyncio.isfuture`` (frontends/http_eager.py).
"""

from __future__ import annotations

import re
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "infercore"

# `asyncio._x`, `asyncio.events._x`, ..., `_asyncio_future_blocking`, the C `_asyncio` module
PRIVATE = re.compile(r"\basyncio(?:\.\w+)*\._\w+|_asyncio_future_blocking|\bimport _asyncio\b"
                     r"|\bfrom _asyncio\b")


def test_src_uses_no_private_asyncio_api():
    found = [f"{path.relative_to(SRC)}:{number}: {line.strip()}"
             for path in sorted(SRC.rglob("*.py"))
             for number, line in enumerate(path.read_text().splitlines(), 1)
             if PRIVATE.search(line)]
    assert found == [], "private asyncio APIs:\n" + "\n".join(found)


def test_the_scan_catches_what_it_is_for():
    for line in ("if asyncio._get_running_loop() is loop:",
                 "loop = asyncio.events._get_running_loop()",
                 "future._asyncio_future_blocking = False",
                 "from _asyncio import Task"):
        assert PRIVATE.search(line), line
    for line in ("asyncio.get_running_loop()", "asyncio.isfuture(waiting)"):
        assert not PRIVATE.search(line), line
