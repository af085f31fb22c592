"""Per-subpartition totals in the manifest (1.1): written at commit, summed on append, M9."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from manifest_edits import read_manifest_bytes, replace_manifest

import arrowshuffle as ash
from arrowshuffle.format.errors import CorruptFileError
from arrowshuffle.format.manifest import SubpartitionTotals, decode_manifest, encode_manifest

N = 6


def table(start: int, rows: int) -> pa.Table:
    keys = np.arange(start, start + rows, dtype=np.int64)
    return pa.table({"k": keys % 17, "v": keys})


def index_totals(path: Path) -> np.ndarray:
    """Bytes and rows per subpartition, summed from every file's index by the reader."""
    ds = ash.open_dataset(path)
    totals = np.zeros((2, N), dtype=np.int64)
    for f in range(ds.num_files):
        entries = ds.file(f).entries()
        totals[0] += entries["length"].sum(axis=1).astype(np.int64)
        totals[1] += entries["rows"].sum(axis=1).astype(np.int64)
    return totals


def listed(path: Path) -> np.ndarray:
    manifest = decode_manifest(read_manifest_bytes(path))
    assert manifest.sizes is not None
    return np.array([manifest.sizes.bytes, manifest.sizes.rows], dtype=np.int64)


def test_commit_records_the_sums_of_the_indexes_and_append_adds_to_them(tmp_path: Path) -> None:
    path = tmp_path / "ds"
    ash.write_dataset(table(0, 5000), path, num_subpartitions=N, by="k", memory="64KiB")
    first = listed(path)
    assert (first == index_totals(path)).all()
    assert first[1].sum() == 5000
    ash.write_dataset(table(5000, 3000), path, num_subpartitions=N, by="k", mode="append")
    both = listed(path)
    assert (both == index_totals(path)).all()
    assert both[1].sum() == 8000 and (both >= first).all()
    assert ash.validate_dataset(path).ok


def test_an_append_to_a_manifest_without_totals_records_none(tmp_path: Path) -> None:
    path = tmp_path / "ds"
    ash.write_dataset(table(0, 1000), path, num_subpartitions=N, by="k")
    old = decode_manifest(read_manifest_bytes(path))
    replace_manifest(path, dataclasses.replace(old, sizes=None))
    ash.write_dataset(table(1000, 1000), path, num_subpartitions=N, by="k", mode="append")
    assert decode_manifest(read_manifest_bytes(path)).sizes is None
    # Readers fall back to the indexes.
    sizes, rows = ash.open_dataset(path).subpartition_sizes()
    assert (np.stack([sizes, rows]) == index_totals(path)).all()


def test_totals_that_disagree_with_the_indexes_break_m9(tmp_path: Path) -> None:
    path = tmp_path / "ds"
    ash.write_dataset(table(0, 2000), path, num_subpartitions=N, by="k")
    manifest = decode_manifest(read_manifest_bytes(path))
    assert manifest.sizes is not None
    rows = list(manifest.sizes.rows)
    rows[2] += 1
    wrong = SubpartitionTotals(manifest.sizes.bytes, tuple(rows))
    replace_manifest(path, dataclasses.replace(manifest, sizes=wrong))
    report = ash.validate_dataset(path)
    assert [v.rule for v in report.violations] == ["M9"]
    assert "subpartition 2" in report.violations[0].message
    # A plan built on wrong totals is unbalanced at worst: it still reads every row once.
    ds = ash.open_dataset(path)
    got = pa.concat_tables([ds.read(task=t) for t in ds.plan(1)])
    assert got.num_rows == 2000


@pytest.mark.parametrize(
    "subpartitions",
    [
        {"bytes": [1] * N},
        {"bytes": [1] * (N - 1), "rows": [1] * N},
        {"bytes": [1] * N, "rows": [1.0] * N},
        {"bytes": [1] * N, "rows": [-1] * N},
        {"bytes": [True] * N, "rows": [1] * N},
        [1, 2, 3],
    ],
)
def test_malformed_totals_are_refused_as_m1(tmp_path: Path, subpartitions: object) -> None:
    import json

    path = tmp_path / "ds"
    ash.write_dataset(table(0, 100), path, num_subpartitions=N, by="k")
    doc = json.loads(read_manifest_bytes(path))
    doc["subpartitions"] = subpartitions
    with pytest.raises(CorruptFileError) as info:
        decode_manifest(json.dumps(doc).encode())
    assert info.value.rule == "M1"


def test_encode_decode_round_trip_keeps_totals(tmp_path: Path) -> None:
    path = tmp_path / "ds"
    ash.write_dataset(table(0, 100), path, num_subpartitions=N, by="k")
    manifest = decode_manifest(read_manifest_bytes(path))
    assert decode_manifest(encode_manifest(manifest)) == manifest
