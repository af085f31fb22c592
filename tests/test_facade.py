"""``import arrowshuffle`` is light: only the error classes load until a name is used."""

from __future__ import annotations

import json
import subprocess
import sys

import arrowshuffle

#: What ``import arrowshuffle`` may load of the package: the facade and the error classes.
ALLOWED = ["arrowshuffle", "arrowshuffle.format", "arrowshuffle.format.errors"]


def _run(code: str) -> object:
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    return json.loads(done.stdout)


def test_import_loads_only_the_facade_and_the_errors() -> None:
    loaded = _run(
        "import json, sys\n"
        "import arrowshuffle\n"
        "ours = sorted(m for m in sys.modules if m.split('.')[0] == 'arrowshuffle')\n"
        "heavy = sorted(m for m in ('pyarrow', 'numpy', 'fsspec') if m in sys.modules)\n"
        "print(json.dumps([ours, heavy]))\n"
    )
    assert loaded == [ALLOWED, []]


def test_a_name_loads_its_module_on_first_use() -> None:
    loaded = _run(
        "import json, sys\n"
        "import arrowshuffle\n"
        "arrowshuffle.assign\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('arrowshuffle.'))))\n"
    )
    assert isinstance(loaded, list)
    assert "arrowshuffle.readers.assign" in loaded
    assert not any(m.startswith("arrowshuffle.writers") for m in loaded)


def test_every_public_name_resolves_and_is_listed() -> None:
    for name in arrowshuffle.__all__:
        assert getattr(arrowshuffle, name) is not None, name
    assert set(arrowshuffle.__all__) <= set(dir(arrowshuffle))


def test_dir_lists_the_public_names_only() -> None:
    # Importing submodules and lazy names must not leak into what a user browses.
    import arrowshuffle.format.naming

    arrowshuffle.write_dataset  # noqa: B018
    names = dir(arrowshuffle)
    assert names == sorted(arrowshuffle.__all__)
    for private in ("annotations", "format", "readers", "writers", "importlib", "TYPE_CHECKING"):
        assert private not in names
    assert arrowshuffle.open_file.__module__ == "arrowshuffle.readers.file_reader"
    assert arrowshuffle.MissingExtraError.__module__ == "arrowshuffle.format.errors"


def test_an_unknown_name_is_an_attribute_error() -> None:
    try:
        arrowshuffle.no_such_name  # noqa: B018
    except AttributeError as exc:
        assert "no_such_name" in str(exc)
    else:
        raise AssertionError("arrowshuffle.no_such_name resolved")
    # Submodules still import as submodules, not through the name table.
    from arrowshuffle import cli

    assert cli.__name__ == "arrowshuffle.cli"
