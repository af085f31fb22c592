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
    ash.write_dataset(_frame(1000, 30), path, num_subpartitions=4, by="k", mode="overwrite")
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


def _snapshot(path: Path) -> dict[str, bytes]:
    """Every file under ``path`` (manifest versions included), by relative name."""
    return {str(p.relative_to(path)): p.read_bytes() for p in path.rglob("*") if p.is_file()}


def _table(start: int, n: int) -> pa.Table:
    keys = np.arange(start, start + n)
    return pa.table({"k": keys, "v": [f"row-{i}" for i in keys]})


def test_the_default_mode_refuses_an_existing_dataset_and_leaves_it_byte_for_byte(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    ash.write_dataset(_table(0, 60), "ds", num_subpartitions=4, by="k")  # a new dataset: fine
    before = _snapshot(tmp_path / "ds")
    with pytest.raises(ash.InvalidOptionError) as refused:
        ash.write_dataset(_table(100, 3), "ds", num_subpartitions=4, by="k")
    message = str(refused.value)
    # The path as the caller typed it, and every mode that would have written.
    assert message.startswith("dataset ds already exists")
    for mode in ("overwrite", "append", "ignore"):
        assert f"mode={mode!r}" in message
    assert _snapshot(tmp_path / "ds") == before  # not a byte written, not even a temp file
    assert ash.open_dataset("ds").num_rows == 60


def test_the_default_mode_is_checked_before_the_input_is_read(tmp_path: Path) -> None:
    ash.write_dataset(_table(0, 5), tmp_path / "ds", num_subpartitions=2, by="k")

    def batches():
        raise AssertionError("the input was read")
        yield  # a generator: reading it is what must not happen

    stream = pa.RecordBatchReader.from_batches(_table(0, 1).schema, batches())
    with pytest.raises(ash.InvalidOptionError, match="already exists"):
        ash.write_dataset(stream, tmp_path / "ds", num_subpartitions=2, by="k")


def test_spark_spellings_of_the_error_mode_and_an_unknown_mode(tmp_path: Path) -> None:
    path = tmp_path / "ds"
    ash.write_dataset(_table(0, 5), path, num_subpartitions=2, by="k", mode="ErrorIfExists")
    for mode in ("error", "errorifexists", "default"):
        with pytest.raises(ash.InvalidOptionError, match="already exists"):
            ash.write_dataset(_table(0, 5), path, num_subpartitions=2, by="k", mode=mode)
    with pytest.raises(ash.InvalidOptionError, match="mode must be one of"):
        ash.write_dataset(_table(0, 5), tmp_path / "other", num_subpartitions=2, mode="replace")
    assert not (tmp_path / "other").exists()  # an unknown mode creates no directory


def test_each_explicit_mode_over_an_existing_dataset(tmp_path: Path) -> None:
    path = tmp_path / "ds"
    ash.write_dataset(_table(0, 60), path, num_subpartitions=4, by="k")
    kept = ash.write_dataset(_table(100, 3), path, num_subpartitions=4, by="k", mode="ignore")
    assert kept.version == 1 and ash.open_dataset(path).num_rows == 60
    assert len(_data_files(path)) == 1  # ignore wrote nothing
    appended = ash.write_dataset(_table(200, 5), path, num_subpartitions=4, by="k", mode="append")
    assert appended.version == 2 and ash.open_dataset(path).num_rows == 65
    replaced = ash.write_dataset(
        _table(300, 3), path, num_subpartitions=4, by="k", mode="overwrite"
    )
    assert replaced.version == 3
    assert sorted(ash.open_dataset(path).read().column("k").to_pylist()) == [300, 301, 302]
    # Every mode writes a dataset that does not exist yet.
    for mode in ("overwrite", "append", "ignore", "error"):
        fresh = tmp_path / f"new-{mode}"
        ash.write_dataset(_table(0, 4), fresh, num_subpartitions=2, by="k", mode=mode)
        assert ash.open_dataset(fresh).num_rows == 4
