"""The import layers of pyproject.toml hold, and a wrong-way import breaks them."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("importlinter", reason="the layer check needs import-linter (dev extra)")

ROOT = Path(__file__).resolve().parents[1]


def lint_imports(installed: Path) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-c", "from importlinter.cli import lint_imports_command as c; c()"]
    return subprocess.run(
        [*command, "--config", str(ROOT / "pyproject.toml"), "--no-cache"],
        cwd=installed,
        env={"PYTHONPATH": str(installed), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The package as it installs (the folders become arrowshuffle.format, ...readers, ...)."""
    # The module path of the parametrized cases is relative to the installed package.
    target = tmp_path_factory.mktemp("installed")
    source = tmp_path_factory.mktemp("source") / "tree"
    shutil.copytree(
        ROOT,
        source,
        ignore=shutil.ignore_patterns(
            ".git", ".venv*", "build", "tests", "benchmarks", "notebooks"
        ),
    )
    pip = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-compile"]
    subprocess.run(
        [*pip, "--target", str(target), str(source)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    return target


def test_the_tree_keeps_every_layer_contract(installed: Path) -> None:
    result = lint_imports(installed)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "BROKEN" not in result.stdout


@pytest.mark.parametrize(
    ("module", "wrong_way", "contract"),
    [
        ("format/crc.py", "arrowshuffle.readers.storage", "Layers point one way"),
        ("readers/storage.py", "arrowshuffle.readers.dataset", "Inside readers"),
        ("writers/output.py", "arrowshuffle.writers.compact", "Inside writers"),
        ("format/naming.py", "fsspec", "format is pure"),
        ("readers/byte_ranges.py", "polars", "The core never imports an optional engine"),
        ("polars.py", "arrowshuffle.spark.api", "Layers point one way"),
    ],
)
def test_a_wrong_way_import_breaks_a_contract(
    installed: Path, tmp_path: Path, module: str, wrong_way: str, contract: str
) -> None:
    broken = tmp_path / "installed"
    shutil.copytree(installed, broken)
    path = broken / "arrowshuffle" / module
    path.write_text(path.read_text() + f"\nimport {wrong_way}  # noqa\n")
    result = lint_imports(broken)
    assert result.returncode == 1, result.stdout + result.stderr
    broken_section = result.stdout.split("Broken contracts", 1)[1]
    assert contract in broken_section
