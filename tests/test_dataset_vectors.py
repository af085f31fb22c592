"""The dataset vectors of format v1 (tests/vectors/v1/datasets): manifest rules M1-M8."""

from __future__ import annotations

import filecmp
import json
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from test_vectors import ALL, VECTORS, as_lists, load_generator

from arrowshuffle.format.errors import FormatError
from arrowshuffle.readers.dataset import open_dataset
from arrowshuffle.readers.validate_dataset import validate_dataset

DATASETS = VECTORS / "datasets"
EXPECTED: dict[str, Any] = json.loads((DATASETS / "expected.json").read_text())["datasets"]
INVALID = sorted(name for name, v in EXPECTED.items() if v["kind"] == "invalid")
GOOD = sorted(name for name, v in EXPECTED.items() if v["kind"] == "good")


@pytest.fixture(scope="module")
def cli_runs() -> dict[str, subprocess.CompletedProcess[str]]:
    """``arrowshuffle validate DIR`` once per invalid dataset, a few processes at a time."""

    def run(name: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "arrowshuffle.cli", "validate", str(DATASETS / name)],
            capture_output=True,
            text=True,
            check=False,
            timeout=300,
        )

    with ThreadPoolExecutor(max_workers=4) as pool:
        return dict(zip(INVALID, pool.map(run, INVALID), strict=True))


@pytest.mark.parametrize("name", INVALID)
def test_dataset_vector_fails_cli_validate_with_its_rule(
    name: str, cli_runs: dict[str, subprocess.CompletedProcess[str]]
) -> None:
    entry = EXPECTED[name]
    result = cli_runs[name]
    assert result.returncode == 1, result.stderr
    assert result.stdout.count("\n") == 1
    file_part = f"{entry['pair']}: " if entry["where"] == "file" else ""
    assert result.stdout.startswith(f"INVALID {DATASETS / name}: {file_part}[{entry['rule']}] ")
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("name", INVALID)
def test_dataset_vector_breaks_its_rule_for_validator_and_reader(name: str) -> None:
    entry = EXPECTED[name]
    report = validate_dataset(DATASETS / name)
    assert not report.ok
    assert report.all_violations[0][1].rule == entry["rule"], report.all_violations
    if entry["where"] == "manifest":
        assert report.files == []
        with pytest.raises(FormatError) as caught:
            open_dataset(DATASETS / name)
    elif entry["where"] == "indexes":  # M9: wrong totals never change what a read returns
        assert open_dataset(DATASETS / name).read().num_rows == report.summary["rows"]
        return
    else:
        with pytest.raises(FormatError) as caught:
            open_dataset(DATASETS / name).read()
    assert caught.value.rule == entry["rule"]


@pytest.mark.parametrize("name", GOOD)
def test_good_dataset_vector_is_valid_and_reads_good_basic(name: str) -> None:
    assert validate_dataset(DATASETS / name, deep=True).ok
    table = open_dataset(DATASETS / name).read()
    assert table.num_rows == ALL["good_basic"]["total_rows"]
    # The same rows as the pair holds, in the reader's order (region by region).
    read = {k: sorted(map(repr, v)) for k, v in as_lists(table).items()}
    assert read == {k: sorted(map(repr, v)) for k, v in ALL["good_basic"]["file_rows"].items()}


def test_readme_lists_every_dataset_vector_with_its_rule() -> None:
    readme = (VECTORS / "README.md").read_text()
    for name, entry in EXPECTED.items():
        row = next((line for line in readme.splitlines() if line.startswith(f"| `{name}` ")), "")
        assert row, f"{name} is not listed in the README"
        assert f"| {entry.get('rule', 'valid')} " in row


def test_generator_reproduces_the_dataset_vectors(tmp_path: Path) -> None:
    """From the committed good_basic pair, the generator writes exactly the committed datasets."""
    for name in ("good_basic.arrow", "good_basic.arrow.idx"):
        shutil.copyfile(VECTORS / name, tmp_path / name)
    document = load_generator().generate_datasets(tmp_path)
    assert document["datasets"] == EXPECTED
    for name in EXPECTED:
        committed, fresh = DATASETS / name, tmp_path / "datasets" / name
        names = sorted(p.name for p in committed.iterdir())
        assert names == sorted(p.name for p in fresh.iterdir())
        _, mismatch, errors = filecmp.cmpfiles(committed, fresh, names, shallow=False)
        assert mismatch == [] and errors == [], name
