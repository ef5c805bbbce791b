"""The in-process Server's async twins (lifecycle.ServerAPI): those of calls that block
(load, unload) leave the event loop free while they run; the others answer at once.

What they answer is checked beside RemoteServer's in tests/api_shared/test_api_shared.py.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest
from sample_models import ADD_SUB_CONFIG, ADD_SUB_PY, install_gate

from infercore import ModelControlMode, Server
from infercore.testing import RepositoryBuilder

# add_sub whose initialize sets ``gate.entered`` and waits (up to 10 s) for
# ``gate.release``, recording whether it came; finalize does the same with the
# ``unloading`` and ``unload`` events.
SLOW_INIT_PY = ADD_SUB_PY.replace("class TritonPythonModel:", '''class TritonPythonModel:
    def initialize(self, args):
        import async_twins_gate as gate
        gate.entered.set()
        gate.released_in_time = gate.release.wait(10)

    def finalize(self):
        import async_twins_gate as gate
        gate.unloading.set()
        gate.unloaded_in_time = gate.unload.wait(10)
''')


@pytest.fixture
def gate(monkeypatch: pytest.MonkeyPatch):
    module = install_gate(monkeypatch, "async_twins_gate")
    module.unloading = threading.Event()
    module.unload = threading.Event()
    yield module
    module.release.set()
    module.unload.set()


@pytest.fixture
def server(tmp_path: Path):
    repo = RepositoryBuilder(tmp_path / "models")
    repo.add_model("slow_init", config=ADD_SUB_CONFIG.replace('"add_sub"', '"slow_init"'),
                   model_py=SLOW_INIT_PY)
    with Server(model_repository=repo.path, model_control_mode=ModelControlMode.EXPLICIT,
                log_info=False) as running:
        yield running


async def test_aload_and_aunload_leave_the_loop_free_while_they_block(server: Server,
                                                                      gate) -> None:
    loading = asyncio.create_task(server.aload("slow_init"))
    # initialize waits for the release: this coroutine can give it only if the loop runs
    assert await asyncio.to_thread(gate.entered.wait, 10)
    assert not loading.done()
    gate.release.set()
    model = await loading
    assert gate.released_in_time is True
    assert await model.aready() is True

    unloading = asyncio.create_task(server.aunload("slow_init"))
    assert await asyncio.to_thread(gate.unloading.wait, 10)
    assert not unloading.done()
    gate.unload.set()
    await unloading
    assert gate.unloaded_in_time is True
    assert await server.model("slow_init").aready() is False


async def test_the_twins_of_calls_that_do_not_block_answer_as_they_do(server: Server,
                                                                      gate) -> None:
    gate.release.set()
    gate.unload.set()
    await server.aload("slow_init")
    assert await server.alive() is server.live() is True
    assert await server.aready() is server.ready() is True
    assert await server.ametadata() == server.metadata()
    assert await server.amodels() == server.models()
    assert await server.arepository_index() == server.repository_index()
    assert await server.astatistics() == server.statistics()
    assert await server.alog_settings() == server.log_settings()
    assert await server.atrace_settings("slow_init") == server.trace_settings("slow_init")
    changed = await server.aupdate_trace_settings("slow_init", log_frequency=2)
    assert changed["log_frequency"] == "2" == server.trace_settings("slow_init")["log_frequency"]


async def test_astop_takes_stops_timeout(tmp_path: Path) -> None:
    repo = RepositoryBuilder(tmp_path / "models")
    repo.add_model("add_sub", config=ADD_SUB_CONFIG, model_py=ADD_SUB_PY)
    server = await Server(model_repository=repo.path, log_info=False).astart()
    assert server.model("add_sub").ready()
    await server.astop(timeout=1.0)
    assert server.live() is False
