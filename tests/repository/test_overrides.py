from pathlib import Path

import pytest

from infercore.errors import InvalidArgumentError
from infercore.repository import OverrideDirectory
from infercore.repository.overrides import split_load_parameters


def test_split_load_parameters_separates_the_config_from_the_files() -> None:
    config, files = split_load_parameters({"config": "{}", "file:1/model.py": b"code",
                                           "file:labels.txt": bytearray(b"a")})

    assert config == "{}"
    assert files == {"1/model.py": b"code", "labels.txt": b"a"}
    assert split_load_parameters({}) == (None, {})


@pytest.mark.parametrize(("parameters", "message"), [
    ({"config": b"{}"}, "Config parameter 'config' must have string type"),
    ({"file:1/model.py": "text"}, "File parameter 'file:1/model.py' must have bytes type"),
    ({"colour": "blue"}, "Unrecognized load parameter 'colour' with type 'str'"),
])
def test_split_load_parameters_rejects_what_triton_rejects(parameters, message) -> None:
    with pytest.raises(InvalidArgumentError, match=message):
        split_load_parameters(parameters)


def test_override_files_land_in_a_model_folder_named_after_the_model(tmp_path: Path,
                                                                     monkeypatch) -> None:
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    override = OverrideDirectory("m", {"1/model.py": b"code", "1/deep/data.bin": b"\0\1"})

    assert override.model_dir.name == "m" and override.model_dir.parent == override.root
    assert (override.model_dir / "1" / "model.py").read_bytes() == b"code"
    assert (override.model_dir / "1" / "deep" / "data.bin").read_bytes() == b"\0\1"
    assert override.source.repository == override.root
    override.remove()
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("path", ["../x", "1/../../x", "/../x", "", "x\0", "1/", ".", "/"])
def test_override_paths_that_do_not_name_a_file_inside_are_refused(tmp_path: Path, monkeypatch,
                                                                    path: str) -> None:
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    with pytest.raises(InvalidArgumentError, match="Invalid file parameter"):
        OverrideDirectory("m", {"1/model.py": b"ok", path: b"bad"})
    assert list(tmp_path.iterdir()) == []


def test_an_override_needs_a_valid_name_and_at_least_one_file(tmp_path: Path,
                                                             monkeypatch) -> None:
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    with pytest.raises(InvalidArgumentError, match="path traversal"):
        OverrideDirectory("../m", {"1/model.py": b""})
    with pytest.raises(InvalidArgumentError, match="no model file"):
        OverrideDirectory("m", {})
    assert list(tmp_path.iterdir()) == []
