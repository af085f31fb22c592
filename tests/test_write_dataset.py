"""write_dataset: one more file per call, committed by the manifest; failures leave nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

import arrowshuffle as ash
from arrowshuffle.format.partitioners.spark_hash import spark_partition_ids


def _frame(start: int, n: int) -> Any:
    """A polars frame: these tests write what polars users pass; they skip without polars."""
    pl = pytest.importorskip("polars")
    keys = np.arange(start, start + n)
    return pl.DataFrame({"k": keys, "v": [f"row-{i}" for i in keys]})


def _data_files(path: Path) -> list[str]:
    return sorted(p.name for p in path.iterdir() if p.name.endswith(".arrow"))


def test_overwrite_then_append_from_polars(tmp_path: Path) -> None:
    path = tmp_path / "ds"
    ash.write_dataset(_frame(0, 50), path, num_subpartitions=4, by="k")
    first = _data_files(path)
    reader = ash.open_dataset(path)
    ash.write_dataset(_frame(1000, 30), path, num_subpartitions=4, by="k")  # overwrite
    assert ash.open_dataset(path).num_files == 1
    # The replaced file stays for the reader opened before, until vacuum removes exactly it.
    assert len(first) == 1 and len(_data_files(path)) == 2 and first[0] in _data_files(path)
    assert reader.read().num_rows == 50
    removed = ash.vacuum(path, older_than=0).removed
    assert sorted(n for n in removed if n.endswith(".arrow")) == first
    assert len(_data_files(path)) == 1 and first[0] not in _data_files(path)
    ash.write_dataset(_frame(2000, 20).lazy(), path, num_subpartitions=4, by="k", mode="append")
    ds = ash.open_dataset(path)
    assert ds.num_files == 2 and ds.num_rows == 50
    keys = np.concatenate([np.arange(1000, 1030), np.arange(2000, 2020)])
    expected = spark_partition_ids([pa.array(keys)], 4)
    for s in range(4):
        got = sorted(ds.read(s).column("k").to_pylist())
        assert got == sorted(keys[expected == s].tolist())


def test_incompatible_append_is_refused_and_leaves_no_file(tmp_path: Path) -> None:
    path = tmp_path / "ds"
    ash.write_dataset(_frame(0, 10), path, num_subpartitions=4, by="k")
    before = sorted(p.name for p in path.iterdir())
    with pytest.raises(ash.SchemaMismatchError, match="cannot append"):
        ash.write_dataset(
            _frame(0, 10).select("k"), path, num_subpartitions=4, by="k", mode="append"
        )
    with pytest.raises(ash.InvalidOptionError, match="subpartitions"):
        ash.write_dataset(_frame(0, 10), path, num_subpartitions=8, by="k", mode="append")
    assert sorted(p.name for p in path.iterdir()) == before
    assert ash.open_dataset(path).num_rows == 10


def test_error_and_ignore_modes(tmp_path: Path) -> None:
    path = tmp_path / "ds"
    ash.write_dataset(_frame(0, 10), path, num_subpartitions=2, by="k", mode="error")
    with pytest.raises(ash.InvalidOptionError, match="already exists"):
        ash.write_dataset(_frame(0, 5), path, num_subpartitions=2, by="k", mode="error")
    ash.write_dataset(_frame(0, 5), path, num_subpartitions=2, by="k", mode="ignore")
    assert ash.open_dataset(path).num_rows == 10
    assert len(_data_files(path)) == 1
