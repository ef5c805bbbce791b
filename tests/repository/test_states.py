import sys
import threading

from infercore.repository import ModelIndexEntry, ModelState, StateTable


def test_model_state_values_are_tritons_strings() -> None:
    assert [s.value for s in ModelState] == [
        "UNKNOWN",
        "READY",
        "UNAVAILABLE",
        "LOADING",
        "UNLOADING",
    ]
    assert ModelState("READY") is ModelState.READY
    assert str(ModelState.LOADING) == "LOADING"
    assert ModelState.READY == "READY"


def test_index_entry_to_dict_has_tritons_keys() -> None:
    entry = ModelIndexEntry("add_sub", "1", ModelState.UNAVAILABLE, "unloaded")
    assert entry.to_dict() == {
        "name": "add_sub",
        "version": "1",
        "state": "UNAVAILABLE",
        "reason": "unloaded",
    }


def test_index_entry_to_dict_leaves_out_empty_version_and_reason() -> None:
    ready = ModelIndexEntry("m", "3", ModelState.READY, "")
    duplicate = ModelIndexEntry(
        "m", "", ModelState.UNAVAILABLE, "model appears in two or more repositories"
    )
    never_loaded = ModelIndexEntry("m", "", ModelState.UNKNOWN, "", name_only=True)

    assert ready.to_dict() == {"name": "m", "version": "3", "state": "READY"}
    assert duplicate.to_dict() == {
        "name": "m",
        "state": "UNAVAILABLE",
        "reason": "model appears in two or more repositories",
    }
    assert never_loaded.to_dict() == {"name": "m"}


def test_get_of_an_unrecorded_version_is_unknown() -> None:
    table = StateTable()
    assert table.get("m", 1) == (ModelState.UNKNOWN, "")


def test_set_replaces_the_state_and_reason() -> None:
    table = StateTable()
    table.set("m", 1, ModelState.LOADING)
    table.set("m", 1, ModelState.UNAVAILABLE, "load failed: boom")

    assert table.get("m", 1) == (ModelState.UNAVAILABLE, "load failed: boom")


def test_versions_are_copied_in_ascending_order() -> None:
    table = StateTable()
    table.set("m", 10, ModelState.READY)
    table.set("m", 2, ModelState.LOADING)
    table.set("other", 1, ModelState.READY)

    versions = table.versions("m")
    versions[99] = (ModelState.READY, "")

    assert list(versions)[:2] == [2, 10]
    assert table.versions("m") == {2: (ModelState.LOADING, ""), 10: (ModelState.READY, "")}
    assert table.versions("missing") == {}


def test_remove_one_version_or_the_whole_model() -> None:
    table = StateTable()
    for version in (1, 2):
        table.set("m", version, ModelState.READY)
    table.set("n", 1, ModelState.READY)

    table.remove("m", 1)
    assert list(table.versions("m")) == [2]
    table.remove("m", 2)
    assert table.versions("m") == {}
    table.remove("n")
    table.remove("never", 3)
    table.remove("never")

    assert table.index() == []
    assert repr(table) == "StateTable(models=0, versions=0)"


def test_index_is_sorted_by_name_then_numeric_version() -> None:
    table = StateTable()
    table.set("zeta", 1, ModelState.READY)
    table.set("alpha", 10, ModelState.READY)
    table.set("alpha", 9, ModelState.UNAVAILABLE, "unloaded")
    table.set("beta", 2, ModelState.LOADING)

    index = table.index()

    assert [(e.name, e.version) for e in index] == [
        ("alpha", "9"),
        ("alpha", "10"),
        ("beta", "2"),
        ("zeta", "1"),
    ]
    assert index[0] == ModelIndexEntry("alpha", "9", ModelState.UNAVAILABLE, "unloaded")


def test_index_ready_only_keeps_ready_versions() -> None:
    table = StateTable()
    table.set("a", 1, ModelState.READY)
    table.set("a", 2, ModelState.LOADING)
    table.set("b", 1, ModelState.UNLOADING)

    assert [(e.name, e.version) for e in table.index(ready_only=True)] == [("a", "1")]


def test_concurrent_writers_and_readers_keep_the_table_consistent() -> None:
    table = StateTable()
    writers, readers, rounds, passes = 8, 4, 500, 30
    start = threading.Barrier(writers + readers, timeout=30)
    stop = threading.Event()
    errors: list[BaseException] = []

    def write(worker: int) -> None:
        try:
            start.wait()
            name = f"model{worker % 4}"
            for i in range(rounds):
                version = worker * rounds + i
                # A state and its reason are written together; readers must never see them
                # mixed from two writes.
                table.set(name, version, ModelState.LOADING, f"loading {version}")
                table.set(name, version, ModelState.READY, f"ready {version}")
                if i % 3 == 0:
                    table.remove(name, version)
            # Keep the table changing until every reader is done.
            scratch = -2 - worker  # -1 is the whole-model row (version "")
            while not stop.is_set():
                table.set(name, scratch, ModelState.LOADING, f"loading {scratch}")
                table.remove(name, scratch)
        except BaseException as exc:  # reported to the main thread
            errors.append(exc)

    def read() -> None:
        try:
            start.wait()
            for _ in range(passes):
                for entry in table.index():
                    expected = "loading" if entry.state is ModelState.LOADING else "ready"
                    if entry.reason != f"{expected} {entry.version}":
                        errors.append(AssertionError(f"torn entry {entry}"))
                        return
                for name in ("model0", "model1", "model2", "model3"):
                    table.versions(name)
        except BaseException as exc:  # reported to the main thread
            errors.append(exc)

    writer_threads = [threading.Thread(target=write, args=(w,)) for w in range(writers)]
    reader_threads = [threading.Thread(target=read) for _ in range(readers)]
    # Switch threads as often as possible so an unguarded dict walk would be interrupted.
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        for thread in reader_threads + writer_threads:
            thread.start()
        for thread in reader_threads:
            thread.join()
        stop.set()
        for thread in writer_threads:
            thread.join()
    finally:
        stop.set()
        sys.setswitchinterval(interval)

    assert errors == []
    expected = {
        (f"model{w % 4}", str(w * rounds + i))
        for w in range(writers)
        for i in range(rounds)
        if i % 3 != 0
    }
    index = table.index()
    assert {(e.name, e.version) for e in index} == expected
    assert all(e.state is ModelState.READY for e in index)
    assert index == sorted(index, key=lambda e: (e.name, int(e.version)))
