"""A file whose partitioner differs from the manifest's (rule M6) is refused by every reader.

Only the manifest's hash seed changes (42 -> 7): every file is intact and every checksum holds,
but the manifest now promises a placement of rows that the files do not have, so a read that
pruned subpartitions by it would silently miss rows.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pyarrow as pa
import pytest

import arrowshuffle
from arrowshuffle.format.errors import FormatError
from arrowshuffle.format.manifest import decode_manifest, encode_manifest
from arrowshuffle.format.naming import MANIFEST_NAME
from arrowshuffle.writers.api import write_dataset


@pytest.fixture
def reseeded(tmp_path: Path) -> Path:
    table = pa.table({"key": pa.array(range(200), pa.int64()), "v": pa.array(range(200))})
    directory = tmp_path / "ds"
    write_dataset(table, directory, num_subpartitions=4, partitioner="hash", by=["key"], seed=42)
    path = directory / MANIFEST_NAME
    manifest = decode_manifest(path.read_bytes())
    assert manifest.partitioner["seed"] == 42
    assert arrowshuffle.open_dataset(directory).read().num_rows == 200  # intact as written
    spec = dict(manifest.partitioner, seed=7)
    path.write_bytes(encode_manifest(dataclasses.replace(manifest, partitioner=spec)))
    return directory


def test_the_reader_refuses_a_file_with_another_partitioner(reseeded: Path) -> None:
    dataset = arrowshuffle.open_dataset(reseeded)  # the manifest alone is valid
    with pytest.raises(FormatError) as caught:
        dataset.read()
    assert caught.value.rule == "M6"
    assert "'seed': 42" in str(caught.value) and "'seed': 7" in str(caught.value)


def test_validation_reports_the_same_rule(reseeded: Path) -> None:
    report = arrowshuffle.validate_dataset(reseeded)
    assert not report.ok
    rules = [v.rule for _, v in report.all_violations]
    assert rules == ["M6"]
