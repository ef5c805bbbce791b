import os
from pathlib import Path

import pytest
from tritonclient.grpc import model_config_pb2

from infercore.errors import InternalError, InvalidArgumentError
from infercore.repository import (
    DUPLICATE_MODEL_REASON,
    ModelSource,
    check_model_name,
    directory_fingerprint,
    find_models,
    list_versions,
    model_file_path,
    no_version_reason,
    resolve_inside,
    scan_repositories,
    select_versions,
    snapshot_model,
    version_dir,
)


def make_model(repo: Path, name: str, versions: tuple[str, ...] = ("1",)) -> Path:
    model = repo / name
    model.mkdir(parents=True)
    (model / "config.pbtxt").write_text(f'name: "{name}"\n')
    for version in versions:
        (model / version).mkdir()
        (model / version / "model.py").write_text("# model\n")
    return model


def latest(n: int) -> model_config_pb2.ModelVersionPolicy:
    policy = model_config_pb2.ModelVersionPolicy()
    policy.latest.num_versions = n
    return policy


def all_versions() -> model_config_pb2.ModelVersionPolicy:
    policy = model_config_pb2.ModelVersionPolicy()
    policy.all.SetInParent()
    return policy


def specific(*versions: int) -> model_config_pb2.ModelVersionPolicy:
    policy = model_config_pb2.ModelVersionPolicy()
    policy.specific.versions.extend(versions)
    return policy


# scan_repositories


def test_scan_finds_each_model_folder_with_its_source(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    make_model(repo, "add_sub")
    make_model(repo, "identity")

    models, problems = scan_repositories([repo])

    assert list(models) == ["add_sub", "identity"]
    assert models["add_sub"] == ModelSource("add_sub", repo / "add_sub", repo)
    assert problems == {}


def test_scan_takes_hidden_folders_as_triton_does_and_ignores_plain_files(
        tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    make_model(repo, "add_sub")
    (repo / ".ipynb_checkpoints").mkdir()
    (repo / "README.md").write_text("not a model")
    (repo / ".DS_Store").write_text("")

    models, problems = scan_repositories([str(repo)])

    assert list(models) == [".ipynb_checkpoints", "add_sub"]
    assert problems == {}


def test_scan_follows_symlinked_model_folders(tmp_path: Path) -> None:
    elsewhere = make_model(tmp_path / "store", "real")
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "linked").symlink_to(elsewhere, target_is_directory=True)

    models, _ = scan_repositories([repo])

    assert list(models) == ["linked"]
    assert models["linked"].path == repo / "linked"


def test_scan_reports_a_name_in_two_repositories_and_leaves_it_out(tmp_path: Path) -> None:
    first, second = tmp_path / "a", tmp_path / "b"
    make_model(first, "shared")
    make_model(first, "only_a")
    make_model(second, "shared")
    make_model(second, "only_b")

    models, problems = scan_repositories([first, second])

    assert sorted(models) == ["only_a", "only_b"]
    assert models["only_a"].repository == first
    assert models["only_b"].repository == second
    assert problems == {"shared": DUPLICATE_MODEL_REASON}
    assert DUPLICATE_MODEL_REASON == "model appears in two or more repositories"


def test_scan_counts_the_same_repository_listed_twice_once(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    make_model(repo, "m")

    models, problems = scan_repositories([repo, str(repo) + "/", tmp_path / "." / "repo"])

    assert list(models) == ["m"] and problems == {}


def test_scan_rejects_a_missing_repository(tmp_path: Path) -> None:
    missing = tmp_path / "nope"
    with pytest.raises(InternalError, match=f"failed to stat file {missing}"):
        scan_repositories([missing])


def test_scan_rejects_a_repository_that_is_a_file(tmp_path: Path) -> None:
    good = tmp_path / "good"
    make_model(good, "m")
    file = tmp_path / "file"
    file.write_text("")
    with pytest.raises(InvalidArgumentError, match="repository path is not a valid directory"):
        scan_repositories([good, file])


def test_scan_of_an_empty_repository_finds_nothing(tmp_path: Path) -> None:
    assert scan_repositories([tmp_path]) == ({}, {})


# check_model_name


@pytest.mark.parametrize("name", ["add_sub", "model.v2", "a-b", "x y", ".hidden", "a.b", "a\\b",
                                  "a\0b"])
def test_check_model_name_accepts_plain_names(name: str) -> None:
    check_model_name(name)


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("", "must not be empty"),
        ("   ", "only whitespace"),
        ("\t\n", "only whitespace"),
        ("..", "path traversal"),
        ("../etc", "path traversal"),
        ("a..b", "path traversal"),
        ("a/b", "path traversal"),
        ("/abs", "path traversal"),
    ],
)
def test_check_model_name_rejects_bad_names(name: str, message: str) -> None:
    with pytest.raises(InvalidArgumentError, match=message):
        check_model_name(name)


# list_versions


def test_list_versions_keeps_numeric_folders_only_sorted_numerically(tmp_path: Path) -> None:
    model = make_model(tmp_path, "m", versions=("10", "2", "1", "0", "warmup", "configs", "v3"))
    (model / "3").write_text("a file, not a folder")
    (model / ".5").mkdir()

    assert list_versions(model) == [0, 1, 2, 10]


@pytest.mark.parametrize("name", ["01", "007", "00", "+3", "-1", " 4", "5abc", "1e3", "٣"])
def test_list_versions_ignores_leading_zeros_signs_and_non_digits(
    tmp_path: Path, name: str
) -> None:
    model = make_model(tmp_path, "m", versions=("7", name))

    assert list_versions(model) == [7]


def test_list_versions_ignores_numbers_beyond_int64(tmp_path: Path) -> None:
    model = make_model(tmp_path, "m", versions=(str(2**63 - 1), str(2**63)))

    assert list_versions(model) == [2**63 - 1]


def test_list_versions_of_a_missing_folder_raises(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgumentError, match="failed to open directory"):
        list_versions(tmp_path / "missing")


# select_versions


def test_unset_policy_selects_the_highest_version() -> None:
    policy = model_config_pb2.ModelVersionPolicy()
    assert select_versions([3, 1, 2], policy, model_name="m") == ([3], {})


def test_policy_of_a_config_without_version_policy_acts_as_latest_one() -> None:
    config = model_config_pb2.ModelConfig(name="m")
    assert select_versions([1, 5], config.version_policy, model_name="m") == ([5], {})


def test_latest_selects_the_n_highest_ascending() -> None:
    assert select_versions([1, 7, 3, 5], latest(2), model_name="m") == ([5, 7], {})


def test_latest_larger_than_available_selects_all() -> None:
    assert select_versions([2, 1], latest(5), model_name="m") == ([1, 2], {})


def test_latest_zero_selects_nothing() -> None:
    assert select_versions([1, 2], latest(0), model_name="m") == ([], {})


def test_all_selects_every_version() -> None:
    assert select_versions([3, 1, 2], all_versions(), model_name="m") == ([1, 2, 3], {})


def test_specific_selects_listed_versions_that_exist_and_reports_missing_ones() -> None:
    selected, problems = select_versions([1, 2, 4], specific(4, 3, 1, 9), model_name="m")

    assert selected == [1, 4]
    assert problems == {
        3: "version 3 is specified for model 'm', but the version directory is not present",
        9: "version 9 is specified for model 'm', but the version directory is not present",
    }


def test_specific_with_repeated_versions_selects_each_once() -> None:
    assert select_versions([1, 2], specific(2, 2, 1), model_name="m") == ([1, 2], {})


@pytest.mark.parametrize(
    "policy", [model_config_pb2.ModelVersionPolicy(), latest(3), all_versions(), specific(1)]
)
def test_no_versions_available_selects_nothing(
    policy: model_config_pb2.ModelVersionPolicy,
) -> None:
    selected, _ = select_versions([], policy, model_name="m")
    assert selected == []


def test_no_version_reason_is_tritons_text() -> None:
    assert no_version_reason("simple") == (
        "at least one version must be available under the version policy of model 'simple'"
    )


# paths


def test_version_dir_and_model_file_path(tmp_path: Path) -> None:
    assert version_dir(tmp_path / "m", 3) == tmp_path / "m" / "3"
    assert model_file_path(tmp_path / "m", 3, "model.onnx") == tmp_path / "m" / "3" / "model.onnx"
    assert (
        model_file_path(tmp_path / "m", 1, "sub/model.pt") == tmp_path / "m" / "1" / "sub/model.pt"
    )


@pytest.mark.parametrize("filename", ["", "/etc/passwd", "../other/model.py", "a/../../b"])
def test_model_file_path_rejects_names_leaving_the_version_dir(
    tmp_path: Path, filename: str
) -> None:
    with pytest.raises(InvalidArgumentError, match="default_model_filename"):
        model_file_path(tmp_path, 1, filename)


def test_resolve_inside_resolves_paths_under_base(tmp_path: Path) -> None:
    (tmp_path / "1").mkdir()
    (tmp_path / "1" / "model.py").write_text("")

    assert resolve_inside(tmp_path, "1/model.py") == (tmp_path / "1" / "model.py").resolve()
    assert resolve_inside(tmp_path, "1/../1/model.py") == (tmp_path / "1" / "model.py").resolve()
    assert resolve_inside(tmp_path, "not/yet/there.py") == (
        tmp_path.resolve() / "not" / "yet" / "there.py"
    )


@pytest.mark.parametrize("relative", ["../x", "1/../../x", "..", "a/../../../etc/passwd"])
def test_resolve_inside_rejects_dot_dot_escapes(tmp_path: Path, relative: str) -> None:
    base = tmp_path / "repo"
    base.mkdir()
    with pytest.raises(InvalidArgumentError, match="outside"):
        resolve_inside(base, relative)


def test_resolve_inside_rejects_absolute_paths(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgumentError, match="absolute"):
        resolve_inside(tmp_path, str(tmp_path / "inside.py"))


def test_resolve_inside_rejects_a_sibling_sharing_the_prefix(tmp_path: Path) -> None:
    base = tmp_path / "repo"
    base.mkdir()
    (tmp_path / "repo2").mkdir()
    with pytest.raises(InvalidArgumentError, match="outside"):
        resolve_inside(base, "../repo2/model.py")


def test_resolve_inside_rejects_symlinks_pointing_out(tmp_path: Path) -> None:
    base = tmp_path / "repo"
    (base / "1").mkdir(parents=True)
    secret = tmp_path / "secret.py"
    secret.write_text("")
    (base / "1" / "model.py").symlink_to(secret)
    (base / "outdir").symlink_to(tmp_path, target_is_directory=True)

    with pytest.raises(InvalidArgumentError, match="outside"):
        resolve_inside(base, "1/model.py")
    with pytest.raises(InvalidArgumentError, match="outside"):
        resolve_inside(base, "outdir/secret.py")


def test_resolve_inside_accepts_a_base_reached_through_a_symlink(tmp_path: Path) -> None:
    real = tmp_path / "real_repo"
    (real / "1").mkdir(parents=True)
    (real / "1" / "model.py").write_text("")
    link = tmp_path / "repo"
    link.symlink_to(real, target_is_directory=True)

    assert resolve_inside(link, "1/model.py") == (real / "1" / "model.py").resolve()


def test_resolve_inside_allows_symlinks_staying_inside(tmp_path: Path) -> None:
    base = tmp_path / "repo"
    (base / "shared").mkdir(parents=True)
    (base / "shared" / "util.py").write_text("")
    (base / "link.py").symlink_to(base / "shared" / "util.py")

    assert resolve_inside(base, "link.py") == (base / "shared" / "util.py").resolve()


# directory_fingerprint


def test_fingerprint_is_stable_without_changes(tmp_path: Path) -> None:
    model = make_model(tmp_path, "m", versions=("1", "2"))
    assert directory_fingerprint(model) == directory_fingerprint(model)


def test_fingerprint_changes_when_a_file_is_rewritten_at_the_same_size(tmp_path: Path) -> None:
    model = make_model(tmp_path, "m")
    before = directory_fingerprint(model)
    target = model / "1" / "model.py"
    st = target.stat()
    target.write_text("# MODEL\n")
    os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))

    assert target.stat().st_size == st.st_size
    assert directory_fingerprint(model) != before


def test_fingerprint_changes_when_a_file_grows(tmp_path: Path) -> None:
    model = make_model(tmp_path, "m")
    target = model / "1" / "model.py"
    st = target.stat()
    before = directory_fingerprint(model)
    target.write_text("# model, edited\n")
    # The old mtime is put back: the new size (and ctime) must tell.
    os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns))

    assert directory_fingerprint(model) != before


def test_fingerprint_changes_when_files_or_versions_are_added_or_removed(tmp_path: Path) -> None:
    model = make_model(tmp_path, "m")
    first = directory_fingerprint(model)
    (model / "2").mkdir()
    second = directory_fingerprint(model)
    (model / "2" / "model.py").write_text("")
    third = directory_fingerprint(model)
    (model / "2" / "model.py").unlink()
    (model / "2").rmdir()
    (model / "config.pbtxt").unlink()
    fourth = directory_fingerprint(model)

    assert len({first, second, third, fourth}) == 4


def test_fingerprint_ignores_pycache(tmp_path: Path) -> None:
    model = make_model(tmp_path, "m")
    before = directory_fingerprint(model)
    (model / "1" / "__pycache__").mkdir()
    (model / "1" / "__pycache__" / "model.cpython-311.pyc").write_bytes(b"\0" * 10)

    assert directory_fingerprint(model) == before


def test_fingerprint_survives_a_symlink_cycle(tmp_path: Path) -> None:
    model = make_model(tmp_path, "m")
    (model / "1" / "loop").symlink_to(model, target_is_directory=True)

    assert isinstance(directory_fingerprint(model), int)


# find_models


def test_find_models_keeps_every_source_of_a_name_in_repository_order(tmp_path: Path) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    make_model(first, "shared")
    make_model(second, "shared")
    make_model(second, "only")

    found = find_models([second, first])

    assert list(found) == ["only", "shared"]
    assert [s.repository for s in found["shared"]] == [second, first]
    assert found["only"] == [ModelSource("only", second / "only", second)]


# snapshot_model


def test_snapshot_tells_which_version_changed(tmp_path: Path) -> None:
    model = make_model(tmp_path, "m", versions=("1", "2"))
    before = snapshot_model(model)
    (model / "2" / "model.py").write_text("# version two, edited\n")
    after = snapshot_model(model)

    assert before.shared == after.shared
    assert before.changed_versions(after) == {2}
    assert before.changed_versions(snapshot_model(model)) == {2}
    assert after.changed_versions(snapshot_model(model)) == set()


def test_snapshot_counts_added_and_removed_versions(tmp_path: Path) -> None:
    model = make_model(tmp_path, "m", versions=("1", "2"))
    before = snapshot_model(model)
    (model / "3").mkdir()
    (model / "2" / "model.py").unlink()
    (model / "2").rmdir()

    assert before.changed_versions(snapshot_model(model)) == {2, 3}


def test_snapshot_changes_every_version_when_anything_else_changes(tmp_path: Path) -> None:
    model = make_model(tmp_path, "m", versions=("1", "2"))
    before = snapshot_model(model)
    (model / "labels.txt").write_text("cat\ndog\n")

    assert before.changed_versions(snapshot_model(model)) == {1, 2}
    middle = snapshot_model(model)
    (model / "config.pbtxt").write_text('name: "m"\nmax_batch_size: 4\n')
    assert middle.changed_versions(snapshot_model(model)) == {1, 2}


def test_snapshot_ignores_pycache_and_treats_odd_version_names_as_shared(tmp_path: Path) -> None:
    model = make_model(tmp_path, "m")
    before = snapshot_model(model)
    (model / "__pycache__").mkdir()
    (model / "1" / "__pycache__").mkdir()
    assert snapshot_model(model) == before
    (model / "007").mkdir()
    after = snapshot_model(model)

    assert set(after.versions) == {1} and after.shared != before.shared


def test_snapshot_of_a_missing_folder_is_empty(tmp_path: Path) -> None:
    snapshot = snapshot_model(tmp_path / "gone")

    assert snapshot.versions == {} and snapshot == snapshot_model(tmp_path / "also_gone")
