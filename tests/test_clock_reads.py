"""The engine reads time only through its injectable clock (infercore.clock's rule).

An AST scan of ``src/infercore`` finds every read of the ``time`` module's clocks (a call
or a reference such as ``clock=time.monotonic_ns``, through any alias or ``from time
import``) and every ``time.sleep``. A read outside the edges must be on ``ALLOWED`` with
its reason; an entry nothing matches any more fails too, so the list stays true.
"""

from __future__ import annotations

import ast
from pathlib import Path

import infercore

SOURCE = Path(infercore.__file__).resolve().parent

CLOCK_READS = frozenset(("monotonic", "monotonic_ns", "perf_counter", "perf_counter_ns",
                         "time", "time_ns", "process_time", "process_time_ns", "sleep"))

# Not the engine (clock.py's rule): network frontends, the client, the process's own
# start and stop, and code that runs in another process with no clock handed in.
EDGES = ("frontends/", "remote/", "launch.py", "serving.py", "cli.py", "supervisor.py",
         "backends/python/worker/runtime.py", "backends/ray/host.py")

# (module, function) -> why it may read time itself
ALLOWED = {
    ("clock.py", "MonotonicClock"): "the real clock itself",
    ("clock.py", "MonotonicClock.wait"): "the real clock itself",
    ("stats.py", "ModelStats.record_success"):
        "last_inference is wall-clock ms since the epoch, as Triton reports it",
    ("stats.py", "ModelStats.record_execution"):
        "last_inference is wall-clock ms since the epoch, as Triton reports it",
    ("observability/trace_export.py", "OtelExporter.__init__"):
        "OpenTelemetry spans are wall time: the offset from the engine's clock",
    ("response.py", "ResponseStream._next"):
        "the caller's own wait for its answer, in the caller's seconds",
    ("response.py", "ResponseStream.result"):
        "the caller's own wait for its answer, in the caller's seconds",
    ("request_trace.py", "Trace.report_activity"):
        "a caller's custom activity, documented on time.monotonic_ns's clock",
    ("backends/python/isolation/worker_handle.py", "WorkerHandle.finalize"):
        "bounds waiting for the worker process to exit (an OS wait no clock can wake)",
}


def clock_reads(tree: ast.AST) -> list[tuple[str, int, str]]:
    """(enclosing qualified name, line, what) for every clock read in ``tree``."""
    modules: set[str] = set()  # names bound to the time module
    functions: dict[str, str] = {}  # local name -> time's function
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules.update(a.asname or a.name for a in node.names if a.name == "time")
        elif isinstance(node, ast.ImportFrom) and node.module == "time":
            functions.update({a.asname or a.name: a.name for a in node.names
                              if a.name in CLOCK_READS})
    found: list[tuple[str, int, str]] = []

    def visit(node: ast.AST, scope: tuple[str, ...]) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            scope = (*scope, node.name)
        where = ".".join(scope) or "<module>"
        if (isinstance(node, ast.Attribute) and node.attr in CLOCK_READS
                and isinstance(node.value, ast.Name) and node.value.id in modules):
            found.append((where, node.lineno, f"time.{node.attr}"))
        elif isinstance(node, ast.Name) and node.id in functions:
            found.append((where, node.lineno, f"time.{functions[node.id]}"))
        elif isinstance(node, ast.ImportFrom) and node.module == "time" and any(
                a.name in CLOCK_READS for a in node.names):
            found.append((where, node.lineno, "from time import"))
        for child in ast.iter_child_nodes(node):
            visit(child, scope)

    visit(tree, ())
    return found


def _engine_reads() -> dict[tuple[str, str], list[str]]:
    reads: dict[tuple[str, str], list[str]] = {}
    for path in sorted(SOURCE.rglob("*.py")):
        relative = path.relative_to(SOURCE).as_posix()
        if relative.startswith(EDGES):
            continue
        for where, line, what in clock_reads(ast.parse(path.read_text(), relative)):
            reads.setdefault((relative, where), []).append(f"{relative}:{line} {what}")
    return reads


def test_the_engine_reads_time_only_through_its_clock() -> None:
    unexpected = [hit for key, hits in _engine_reads().items() if key not in ALLOWED
                  for hit in hits]
    assert not unexpected, (
        "engine code read the time module's clock directly; use the Clock it is given "
        "(infercore.clock), or add the function to ALLOWED with the reason it is not "
        "engine time:\n" + "\n".join(unexpected))


def test_every_allowed_read_still_exists() -> None:
    stale = sorted(set(ALLOWED) - set(_engine_reads()))
    assert not stale, f"ALLOWED names functions that no longer read time: {stale}"


def test_the_scan_sees_every_form_of_a_read() -> None:
    source = '''
import time as t
from time import perf_counter as pc, sleep

class A:
    def run(self, clock=t.monotonic_ns):
        return pc()

def f():
    sleep(1)
    return t.time()
'''
    reads = clock_reads(ast.parse(source))
    assert [(where, what) for where, _, what in reads] == [
        ("<module>", "from time import"),
        ("A.run", "time.monotonic_ns"),
        ("A.run", "time.perf_counter"),
        ("f", "time.sleep"),
        ("f", "time.time"),
    ]
