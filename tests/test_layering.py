"""The import structure of src/infercore: no import cycles, and the layering contract
(.importlinter) kept. Imports inside functions count; imports under TYPE_CHECKING do not.

Each check is also shown failing on a graph with one import added, so a broken check
cannot pass unnoticed.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import grimp
import pytest

ROOT = Path(__file__).resolve().parents[1]
CONTRACT = ROOT / ".importlinter"


def _graph() -> grimp.ImportGraph:
    # no cache: a cached graph can outlive the edit that changed an import
    return grimp.build_graph("infercore", exclude_type_checking_imports=True, cache_dir=None)


def _components(graph: grimp.ImportGraph) -> Iterator[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    for start in sorted(graph.modules):
        if start in index:
            continue
        work = [(start, iter(sorted(graph.find_modules_directly_imported_by(start))))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            module, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append(
                        (child, iter(sorted(graph.find_modules_directly_imported_by(child)))))
                elif child in on_stack:
                    low[module] = min(low[module], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[module])
            if low[module] == index[module]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == module:
                        break
                if len(component) > 1:
                    yield sorted(component)


def _cycle_text(graph: grimp.ImportGraph, component: list[str]) -> str:
    """One cycle through the component's first module, each import with its line."""
    first = component[0]
    back = min((graph.find_shortest_chain(importer=importer, imported=first) or (), importer)
               for importer in graph.find_modules_directly_imported_by(first)
               if importer in component)
    chain = [first, *back[0]]
    steps = []
    for importer, imported in zip(chain, chain[1:], strict=False):
        lines = sorted(detail["line_number"]
                       for detail in graph.get_import_details(importer=importer,
                                                              imported=imported))
        steps.append(f"  {importer} -> {imported} (line {', '.join(map(str, lines))})")
    return f"{len(component)} modules: {', '.join(component)}\n" + "\n".join(steps)


def import_cycles(graph: grimp.ImportGraph) -> list[str]:
    return [_cycle_text(graph, component) for component in _components(graph)]


def test_no_import_cycles() -> None:
    cycles = import_cycles(_graph())
    assert not cycles, "import cycles in src/infercore (imports inside functions count):\n" + (
        "\n".join(cycles))


def test_a_cycle_is_found_and_listed() -> None:
    graph = _graph()
    graph.add_import(importer="infercore.errors", imported="infercore.tensor", line_number=7,
                     line_contents="from .tensor import Tensor")
    cycles = import_cycles(graph)
    assert len(cycles) == 1
    assert cycles[0].startswith("2 modules: infercore.errors, infercore.tensor")
    assert "infercore.errors -> infercore.tensor (line 7)" in cycles[0]
    assert "infercore.tensor -> infercore.errors" in cycles[0]


# import-linter configures logging when it runs (dictConfig, which disables every logger
# already made, infercore's included), so it runs in a process of its own. With an
# importer and an imported module given, that import is added to the graph it checks.
_LINT = """
import sys
import grimp
from importlinter.cli import lint_imports

if len(sys.argv) == 4:
    build = grimp.build_graph

    def with_import(*args, **kwargs):
        graph = build(*args, **kwargs)
        graph.add_import(importer=sys.argv[2], imported=sys.argv[3], line_number=1,
                         line_contents="import " + sys.argv[3])
        return graph

    grimp.build_graph = with_import
sys.exit(lint_imports(config_filename=sys.argv[1], no_cache=True, no_logo=True))
"""


def _lint(*added_import: str) -> tuple[int, str]:
    done = subprocess.run([sys.executable, "-c", _LINT, str(CONTRACT), *added_import],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    return done.returncode, done.stdout + done.stderr


def test_layering_contract_is_kept() -> None:
    code, out = _lint()
    assert code == 0, out
    assert "0 broken" in out


@pytest.mark.parametrize(("importer", "imported", "contract"), [
    # a value importing a service
    ("infercore.options", "infercore.observability.metrics", "Layers"),
    # a backend importing the engine
    ("infercore.backends.python.backend", "infercore.model", "Layers"),
    # the Ray backend's server side importing observability (only its actor host may)
    ("infercore.backends.ray.model", "infercore.observability.metrics", "Layers"),
    # the engine importing a frontend
    ("infercore.model", "infercore.frontends.http.server", "Nothing but the entry points"),
    # a frontend reaching behind the in-process API
    ("infercore.frontends.http.infer", "infercore.scheduling.base", "frontends/ use"),
    # the two sides of a process-isolated Python instance reaching past ipc/
    ("infercore.backends.python.worker.runtime",
     "infercore.backends.python.isolation.worker_handle", "backends/python: isolation/ and"),
    ("infercore.backends.python.isolation.bls", "infercore.backends.python.worker.bls",
     "backends/python: isolation/ imports"),
    ("infercore.backends.python.ipc.protocol", "infercore.backends.python.backend",
     "backends/python: ipc/"),
])
def test_layering_contract_catches(importer: str, imported: str, contract: str) -> None:
    code, out = _lint(importer, imported)
    assert code == 1, out
    broken = [line for line in out.splitlines() if " BROKEN" in line]
    assert any(line.startswith(contract) for line in broken), out
