"""The golden test vectors of format v1 (tests/vectors/v1): contents, rules, reproducibility."""

from __future__ import annotations

import filecmp
import importlib.util
import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from index_edits import reencode

import arrowshuffle
from arrowshuffle.format.errors import FormatError
from arrowshuffle.format.index import decode_index
from arrowshuffle.readers.validate import validate_file

VECTORS = Path(__file__).parent / "vectors" / "v1"
EXPECTED: dict[str, Any] = json.loads((VECTORS / "expected.json").read_text())
ALL = EXPECTED["vectors"]
GOOD = sorted(name for name, v in ALL.items() if v["kind"] == "good")
VALID_VARIANTS = sorted(name for name, v in ALL.items() if v["kind"] == "valid")
INVALID = sorted(name for name, v in ALL.items() if v["kind"] == "invalid")
# The rules of the format that sit on the index alone: a reader refuses these at open.
INDEX_RULES = {"V1", "V2", "V3", "V4", "V5", "V6", "V7"}


def load_generator() -> ModuleType:
    name = "arrowshuffle_vectors_v1_generate"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, VECTORS / "generate.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "arrowshuffle.cli", *args],
        capture_output=True,
        text=True,
        check=False,
    )


def as_lists(table: pa.Table) -> dict[str, list[Any]]:
    return {name: table.column(name).to_pylist() for name in table.column_names}


def expected_range(vector: dict[str, Any], subpartitions: range) -> dict[str, list[Any]]:
    """What reading a contiguous run gives, derived from the file order and the row counts.

    Region by region, each subpartition's rows in ascending subpartition order; a broadcast
    chunk's rows once per subpartition of the run.
    """
    file_rows = vector["file_rows"]
    out: dict[str, list[Any]] = {name: [] for name in file_rows}
    at = 0
    for region, counts in enumerate(vector["rows"]):
        if vector["broadcast_regions"][region]:
            n = counts[0]
            for _ in subpartitions:
                for name in out:
                    out[name].extend(file_rows[name][at : at + n])
            at += n
            continue
        starts = np.concatenate([[0], np.cumsum(counts)]) + at
        for s in subpartitions:
            for name in out:
                out[name].extend(file_rows[name][starts[s] : starts[s + 1]])
        at = int(starts[-1])
    return out


# ---------------------------------------------------------------------- good vectors


@pytest.mark.parametrize("name", GOOD + VALID_VARIANTS)
def test_good_vector_reads_back_expected(name: str) -> None:
    entry = ALL[name]
    vector = ALL[entry.get("base", name)] if entry["kind"] == "valid" else entry
    path = VECTORS / entry["data"]
    with arrowshuffle.open_file(path) as f:
        assert f.num_subpartitions == vector["num_subpartitions"]
        assert f.num_regions == vector["num_regions"]
        assert f.num_rows == vector["total_rows"]
        assert f.compression == vector["compression"]
        stats = f.stats()
        rows = np.zeros((vector["num_regions"], vector["num_subpartitions"]), dtype=np.int64)
        rows[stats["region"].to_numpy(), stats["subpartition"].to_numpy()] = stats["rows"]
        assert rows.tolist() == vector["rows"]
        for s in range(vector["num_subpartitions"]):
            assert as_lists(f.read(s, verify=True)) == vector["subpartitions"][s]
        everything = range(vector["num_subpartitions"])
        assert as_lists(f.read(everything)) == expected_range(vector, everything)
        middle = range(1, vector["num_subpartitions"] - 1)
        assert as_lists(f.read(middle)) == expected_range(vector, middle)
    # Any Arrow reader sees every stored row, in file order.
    assert as_lists(pa.ipc.open_file(path).read_all()) == vector["file_rows"]


@pytest.mark.parametrize("name", GOOD + VALID_VARIANTS)
def test_good_vector_validates_deep(name: str) -> None:
    report = validate_file(VECTORS / ALL[name]["data"], deep=True)
    assert report.ok, report.violations
    assert report.summary["rows"] == ALL[ALL[name].get("base", name)]["total_rows"]


def test_good_vectors_cover_what_the_readme_promises() -> None:
    kinds = {
        name: (ALL[name]["compression"], any(ALL[name]["broadcast_regions"]), ALL[name]["rows"])
        for name in GOOD
    }
    assert {c for c, _, _ in kinds.values()} == {"none", "zstd", "lz4"}
    assert any(b for _, b, _ in kinds.values())
    assert any(r and min(min(row) for row in r) == 0 for _, _, r in kinds.values())
    assert any(not r for _, _, r in kinds.values())
    basic = ALL["good_basic"]
    assert (basic["num_regions"], basic["num_subpartitions"]) == (3, 4)


# ---------------------------------------------------------------------- broken vectors


@pytest.mark.parametrize("name", INVALID)
def test_broken_vector_fails_validate_with_its_rule(name: str) -> None:
    entry = ALL[name]
    path = VECTORS / entry["data"]
    report = validate_file(path, deep=entry["deep"])
    assert not report.ok
    assert report.violations[0].rule == entry["rule"], report.violations
    if entry["deep"]:
        # Deep-only damage: the index and the footer are fine.
        assert validate_file(path).ok


@pytest.fixture(scope="module")
def cli_runs() -> dict[str, subprocess.CompletedProcess[str]]:
    """``arrowshuffle validate`` once per broken vector, a few processes at a time."""

    def run(name: str) -> subprocess.CompletedProcess[str]:
        entry = ALL[name]
        return cli("validate", *(["--deep"] if entry["deep"] else []), str(VECTORS / entry["data"]))

    with ThreadPoolExecutor(max_workers=4) as pool:
        return dict(zip(INVALID, pool.map(run, INVALID), strict=True))


@pytest.mark.parametrize("name", INVALID)
def test_broken_vector_fails_cli_validate(
    name: str, cli_runs: dict[str, subprocess.CompletedProcess[str]]
) -> None:
    entry = ALL[name]
    path = str(VECTORS / entry["data"])
    result = cli_runs[name]
    assert result.returncode == 1, result.stderr
    assert result.stdout.startswith(f"INVALID {path}: [{entry['rule']}] ")
    assert result.stdout.count("\n") == 1
    assert "Traceback" not in result.stderr


# A reader that decodes a whole index checks its entries through the whole-index checksum only
# (spec.md, section 5.10, step 9); an entry block whose own checksum alone is wrong is a
# validator's finding.
READER_REFUSES = sorted(
    n for n in INVALID if ALL[n]["rule"] in INDEX_RULES and n != "bad_entry_block_crc"
)


@pytest.mark.parametrize("name", READER_REFUSES)
def test_reader_refuses_broken_index(name: str) -> None:
    with pytest.raises(FormatError) as caught:
        arrowshuffle.open_file(VECTORS / ALL[name]["data"])
    assert caught.value.rule == ALL[name]["rule"]


def test_cli_validates_all_vectors_in_one_call() -> None:
    names = GOOD + VALID_VARIANTS + INVALID
    paths = [str(VECTORS / ALL[n]["data"]) for n in names]
    result = cli("validate", "--deep", "--json", *paths)
    assert result.returncode == 1
    reports = {Path(r["path"]).name: r for r in json.loads(result.stdout)}
    for name in GOOD + VALID_VARIANTS:
        assert reports[ALL[name]["data"]]["ok"] is True
    for name in INVALID:
        report = reports[ALL[name]["data"]]
        assert report["ok"] is False
        assert report["violations"][0]["rule"] == ALL[name]["rule"]


# ---------------------------------------------------------------------- reproducibility


@pytest.mark.parametrize("name", GOOD)
def test_codec_reencodes_good_index_byte_for_byte(name: str) -> None:
    raw = (VECTORS / ALL[name]["index"]).read_bytes()
    index = decode_index(raw)
    assert index.header.file_id.hex() == ALL[name]["file_id"]
    assert reencode(index) == raw


def test_generator_reproduces_the_vectors(tmp_path: Path) -> None:
    """Regenerate everything; compare bytes when pyarrow is the version that wrote them.

    The data files are pyarrow's IPC writer output, which another pyarrow (or its zstd/lz4
    libraries) may encode differently; then the expected contents must still match and every
    broken vector must still break its rule.
    """
    generator = load_generator()
    document = generator.generate(tmp_path)
    committed = dict(EXPECTED)
    assert {k: v for k, v in document.items() if k != "pyarrow"} == {
        k: v for k, v in committed.items() if k != "pyarrow"
    }
    names = sorted(p.name for p in VECTORS.iterdir() if p.suffix in (".arrow", ".idx"))
    assert names == sorted(p.name for p in tmp_path.iterdir() if p.suffix in (".arrow", ".idx"))
    if pa.__version__ == EXPECTED["pyarrow"]:
        _, mismatch, errors = filecmp.cmpfiles(VECTORS, tmp_path, names, shallow=False)
        assert mismatch == [] and errors == []
    else:
        for name in INVALID:
            entry = document["vectors"][name]
            report = validate_file(tmp_path / entry["data"], deep=entry["deep"])
            assert report.violations[0].rule == entry["rule"]
        for name in GOOD:
            assert validate_file(tmp_path / ALL[name]["data"], deep=True).ok
