"""``write()``: one shuffle file from every kind of input, read back equal to the input."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import arrowshuffle as ash
from arrowshuffle.format.partitioners import PARTITIONER_NAMES, make_partitioner
from arrowshuffle.writers.api import write
from arrowshuffle.writers.memory_pool import MemoryPool


def sample_table(rows: int = 1000) -> pa.Table:
    rng = np.random.default_rng(rows)
    return pa.table(
        {
            "id": pa.array(np.arange(rows), pa.int64()),
            "k": pa.array(rng.integers(0, 50, rows), pa.int64()),
            "name": pa.array([f"name-{i % 37}-é" if i % 11 else None for i in range(rows)]),
            "x": pa.array(rng.random(rows)),
        }
    )


def read_back(path: Path) -> pa.Table:
    """Every row of the file, through the shuffle reader, in id order."""
    f = ash.open_file(path)
    table = pa.concat_tables(f.read(s) for s in range(f.num_subpartitions))
    return table.sort_by("id")


class StreamOnly:
    """An object that exposes its rows only through the Arrow PyCapsule stream interface."""

    def __init__(self, table: pa.Table) -> None:
        self._table = table

    def __arrow_c_stream__(self, requested_schema: Any = None) -> Any:
        reader = pa.RecordBatchReader.from_batches(
            self._table.schema, self._table.to_batches(max_chunksize=128)
        )
        return reader.__arrow_c_stream__(requested_schema)


def as_pyarrow_input(kind: str, table: pa.Table) -> Any:
    if kind == "table":
        return table
    if kind == "record_batch":
        return table.combine_chunks().to_batches()[0]
    if kind == "reader":
        return pa.RecordBatchReader.from_batches(table.schema, table.to_batches(max_chunksize=97))
    if kind == "capsule":
        return StreamOnly(table)
    raise AssertionError(kind)


@pytest.mark.parametrize("kind", ["table", "record_batch", "reader", "capsule"])
def test_write_pyarrow_inputs_reads_back_equal(tmp_path: Path, kind: str) -> None:
    table = sample_table()
    path = tmp_path / "out.arrow"
    written = write(as_pyarrow_input(kind, table), path, num_subpartitions=6, by="k")
    assert written.rows == table.num_rows
    assert read_back(path).equals(table)
    spec = ash.open_file(path).partitioner
    assert spec["name"] == "hash" and spec["columns"] == ["k"]


def test_write_polars_dataframe(tmp_path: Path) -> None:
    pl = pytest.importorskip("polars")
    table = sample_table()
    frame = pl.from_arrow(table)
    assert isinstance(frame, pl.DataFrame)
    path = tmp_path / "out.arrow"
    write(frame, path, num_subpartitions=4, partitioner="key_group", by=["k", "name"])
    back = pl.from_arrow(read_back(path))
    assert isinstance(back, pl.DataFrame)
    assert back.equals(frame)


def test_write_polars_lazyframe_in_batches(tmp_path: Path) -> None:
    pl = pytest.importorskip("polars")
    table = sample_table(5000)
    source = tmp_path / "source.parquet"
    pl.from_arrow(table).write_parquet(source)  # type: ignore[union-attr]
    lazy = pl.scan_parquet(source).filter(pl.col("k") < 40).with_columns(y=pl.col("x") * 2)
    path = tmp_path / "out.arrow"
    written = write(lazy, path, num_subpartitions=5, by="id", max_batch_rows=700, memory="64KiB")
    expected = lazy.collect()
    assert written.rows == expected.height
    assert written.regions > 1  # rows arrived in several batches and spilled several times
    back = pl.from_arrow(read_back(path))
    assert isinstance(back, pl.DataFrame)
    assert back.equals(expected.sort("id"))
    with pa.ipc.open_file(path) as data:
        assert max(data.get_batch(i).num_rows for i in range(data.num_record_batches)) <= 700


def test_empty_lazyframe_writes_an_empty_file(tmp_path: Path) -> None:
    pl = pytest.importorskip("polars")
    lazy = pl.LazyFrame({"id": [1, 2], "s": ["a", "b"]}).filter(pl.col("id") > 5)
    written = write(lazy, tmp_path / "e.arrow", num_subpartitions=3)
    assert written.rows == 0
    f = ash.open_file(tmp_path / "e.arrow")
    assert f.schema.names == ["id", "s"] and f.read().num_rows == 0


def test_write_decodes_dictionary_columns(tmp_path: Path) -> None:
    pl = pytest.importorskip("polars")
    table = sample_table(300)
    encoded = table.set_column(2, "name", pc.dictionary_encode(table.column("name")))
    frame = pl.from_arrow(table).with_columns(pl.col("name").cast(pl.Categorical))
    write(encoded, tmp_path / "a.arrow", num_subpartitions=3, by="name")
    write(frame, tmp_path / "b.arrow", num_subpartitions=3, by="name")
    assert read_back(tmp_path / "a.arrow").equals(table)
    assert (
        read_back(tmp_path / "b.arrow").column("name").to_pylist()
        == table.column("name").to_pylist()
    )


def test_partitioner_defaults_and_options(tmp_path: Path) -> None:
    table = sample_table(200)
    write(table, tmp_path / "a.arrow", num_subpartitions=3)
    assert ash.open_file(tmp_path / "a.arrow").partitioner["name"] == "round_robin"
    write(table, tmp_path / "b.arrow", num_subpartitions=3, partitioner="random", seed=9)
    assert ash.open_file(tmp_path / "b.arrow").partitioner == {
        "name": "random",
        "seed": 9,
        "num_subpartitions": 3,
    }
    obj = make_partitioner("global", num_subpartitions=3)
    write(table, tmp_path / "c.arrow", num_subpartitions=3, partitioner=obj)
    assert ash.open_file(tmp_path / "c.arrow").read(0).num_rows == 200
    with pytest.raises(ash.InvalidOptionError, match="given by name"):
        write(table, tmp_path / "d.arrow", num_subpartitions=3, partitioner=obj, by="k")
    with pytest.raises(ash.InvalidOptionError, match="unknown partitioner 'nope'"):
        write(table, tmp_path / "d.arrow", num_subpartitions=3, partitioner="nope")
    with pytest.raises(ash.InvalidOptionError, match="unknown option colour; write takes"):
        write(table, tmp_path / "d.arrow", num_subpartitions=3, by="k", colour=1)
    # A misspelled writer option is named as such, with the closest spelling.
    with pytest.raises(
        ash.InvalidOptionError, match=r"unknown option compresion \(did you mean compression\?\)"
    ):
        write(table, tmp_path / "d.arrow", num_subpartitions=3, by="k", compresion="zstd")
    with pytest.raises(
        ash.InvalidOptionError, match=r"unknown option seeed \(did you mean seed\?\)"
    ):
        write(table, tmp_path / "d.arrow", num_subpartitions=3, by="k", seeed=3)
    with pytest.raises(ash.InvalidOptionError, match="takes a pyarrow Table"):
        write([1, 2, 3], tmp_path / "d.arrow", num_subpartitions=3)
    assert not (tmp_path / "d.arrow").exists()


def test_range_over_a_table_samples_all_of_it(tmp_path: Path) -> None:
    # Sorted input: the first batch alone holds only the smallest keys.
    table = pa.table({"id": pa.array(np.arange(8000), pa.int64())})
    write(
        table,
        tmp_path / "r.arrow",
        num_subpartitions=4,
        partitioner="range",
        by="id",
        max_batch_rows=500,
    )
    f = ash.open_file(tmp_path / "r.arrow")
    counts = [f.read(s).num_rows for s in range(4)]
    assert counts == [2000, 2000, 2000, 2000]
    # A stream is sampled from its first batch, so its boundaries fall inside that batch.
    reader = pa.RecordBatchReader.from_batches(table.schema, table.to_batches(max_chunksize=500))
    write(reader, tmp_path / "s.arrow", num_subpartitions=4, partitioner="range", by="id")
    assert max(ash.open_file(tmp_path / "s.arrow").partitioner["boundaries"]) < 500


def test_write_with_a_memory_pool(tmp_path: Path) -> None:
    pool = MemoryPool("1MiB")
    table = sample_table(20_000)
    written = write(
        table,
        tmp_path / "p.arrow",
        num_subpartitions=4,
        by="k",
        memory_pool=pool,
        memory=0,
        max_batch_rows=1000,
    )
    assert written.regions >= table.nbytes // (1024 * 1024)
    assert pool.num_local_pools == 0
    assert read_back(tmp_path / "p.arrow").equals(table)


def test_pyarrow_input_does_not_import_polars(tmp_path: Path) -> None:
    code = (
        "import sys, pyarrow as pa\n"
        "from arrowshuffle.writers.api import write\n"
        f"write(pa.table({{'a': [1, 2, 3]}}), {str(tmp_path / 'x.arrow')!r}, "
        "num_subpartitions=2, by='a')\n"
        "print('polars' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.stdout.strip() == "False", out.stderr


KEYED = {"hash", "key_group", "range"}


@given(
    st.lists(
        st.tuples(st.integers(-(2**40), 2**40), st.one_of(st.none(), st.text(max_size=12))),
        max_size=200,
    ),
    st.sampled_from([n for n in PARTITIONER_NAMES if n != "column"]),
    st.integers(1, 9),
    st.integers(1, 64),
)
@settings(max_examples=40, deadline=None)
def test_write_round_trips_any_rows(
    rows: list[tuple[int, str | None]], name: str, n: int, batch_rows: int
) -> None:
    table = pa.table(
        {
            "id": pa.array(range(len(rows)), pa.int64()),
            "k": pa.array([r[0] for r in rows], pa.int64()),
            "s": pa.array([r[1] for r in rows], pa.string()),
        }
    )
    options: dict[str, Any] = {"by": "k"} if name in KEYED else {}
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "f.arrow"
        reader = pa.RecordBatchReader.from_batches(
            table.schema, table.to_batches(max_chunksize=batch_rows)
        )
        write(
            reader,
            path,
            num_subpartitions=n,
            partitioner=name,
            max_batch_rows=batch_rows,
            **options,
        )
        f = ash.open_file(path)
        assert f.num_rows == len(rows)
        if name == "broadcast":
            assert f.read(n - 1).equals(table)
        else:
            assert read_back(path).equals(table)
