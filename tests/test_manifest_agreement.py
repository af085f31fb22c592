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
from manifest_edits import read_manifest_bytes, replace_manifest

import arrowshuffle
from arrowshuffle.format.errors import FormatError
from arrowshuffle.format.manifest import decode_manifest
from arrowshuffle.format.manifest_rules import check_file_agrees
from arrowshuffle.format.partitioners import dataset_spec, is_recomputable
from arrowshuffle.writers.api import write_dataset


@pytest.fixture
def reseeded(tmp_path: Path) -> Path:
    table = pa.table({"key": pa.array(range(200), pa.int64()), "v": pa.array(range(200))})
    directory = tmp_path / "ds"
    write_dataset(table, directory, num_subpartitions=4, partitioner="hash", by=["key"], seed=42)
    manifest = decode_manifest(read_manifest_bytes(directory))
    assert manifest.partitioner["seed"] == 42
    assert arrowshuffle.open_dataset(directory).read().num_rows == 200  # intact as written
    spec = dict(manifest.partitioner, seed=7)
    replace_manifest(directory, dataclasses.replace(manifest, partitioner=spec))
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


def test_m6_compares_specs_without_the_producer_fields() -> None:
    schema = pa.schema([("v", pa.int64())])
    forward = {"name": "forward", "num_subpartitions": 4}
    for i in range(4):  # every producer's file agrees with the manifest
        found = (schema, 4, dict(forward, producer_index=i))
        assert check_file_agrees("f", (schema, 4, forward), found) == []
    rescale = {"name": "rescale", "num_producers": 3, "num_subpartitions": 4}
    mine = dict(rescale, producer_index=2, targets=[2, 4])
    assert check_file_agrees("f", (schema, 4, rescale), (schema, 4, mine)) == []
    # Fields every producer shares are still compared.
    other = dict(mine, num_producers=2)
    (violation,) = check_file_agrees("f", (schema, 4, rescale), (schema, 4, other))
    assert violation.rule == "M6" and "'num_producers': 2" in violation.message
    seeded = {"name": "hash", "columns": ["k"], "seed": 42, "num_subpartitions": 4}
    (violation,) = check_file_agrees("f", (schema, 4, seeded), (schema, 4, dict(seeded, seed=7)))
    assert violation.rule == "M6"


def test_dataset_spec_drops_only_producer_fields() -> None:
    assert dataset_spec({"name": "forward", "producer_index": 1, "num_subpartitions": 4}) == {
        "name": "forward",
        "num_subpartitions": 4,
    }
    hashed = {"name": "hash", "columns": ["k"], "seed": 42, "num_subpartitions": 4}
    assert dataset_spec(hashed) == hashed
    unknown = {"name": "future", "producer_index": 1}
    assert dataset_spec(unknown) == unknown
    # A forward file that merges producers names none: its rows are not checked one by one.
    assert is_recomputable({"name": "forward", "producer_index": 1, "num_subpartitions": 4})
    assert not is_recomputable({"name": "forward", "num_subpartitions": 4})


def test_a_python_forward_dataset_of_several_producers_validates(tmp_path: Path) -> None:
    directory = tmp_path / "ds"
    table = pa.table({"v": pa.array(range(30), pa.int64())})
    for i in range(3):
        mode = "overwrite" if i == 0 else "append"
        write_dataset(
            table,
            directory,
            num_subpartitions=4,
            partitioner="forward",
            producer_index=i,
            mode=mode,
        )
    manifest = decode_manifest(read_manifest_bytes(directory))
    assert manifest.partitioner == {"name": "forward", "num_subpartitions": 4}
    assert arrowshuffle.validate_dataset(directory, deep=True).ok
    dataset = arrowshuffle.open_dataset(directory)
    assert [dataset.read(s).num_rows for s in range(4)] == [30, 30, 30, 0]
