"""Inputs at the edges of what readers and writers take: each gets its answer or a clear error."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import arrowshuffle as ash
from arrowshuffle.format.errors import InvalidOptionError, SchemaMismatchError


def test_a_projection_of_a_repeated_column_name_is_refused_as_ambiguous(tmp_path: Path) -> None:
    table = pa.table([pa.array([1, 2, 3]), pa.array(["x", "y", "z"])], names=["a", "a"])
    path = tmp_path / "dup.arrow"
    with ash.ShuffleFileWriter(path, table.schema, 2) as writer:
        writer.write(table, subpartitions=np.array([0, 1, 1]))
    with ash.open_file(path) as shuffle:
        assert shuffle.read(1).equals(table.slice(1))  # the whole rows read as written
        with pytest.raises(InvalidOptionError, match="'a' is ambiguous: the data has 2 columns"):
            shuffle.read(1, columns=["a"])


def test_a_numpy_integer_selects_one_subpartition_as_an_int_does(tmp_path: Path) -> None:
    table = pa.table({"k": [0, 1, 1, 2], "v": [10, 11, 12, 13]})
    path = tmp_path / "t.arrow"
    ash.write(table, path, num_subpartitions=3, partitioner="column", by="k")
    with ash.open_file(path) as shuffle:
        for s in range(3):
            assert shuffle.read(np.int64(s)).equals(shuffle.read(s))
            assert shuffle.read(np.int32(s)).column("v").to_pylist() == [
                v for k, v in zip([0, 1, 1, 2], [10, 11, 12, 13], strict=True) if k == s
            ]


def test_a_polars_column_arrow_cannot_import_is_named(tmp_path: Path) -> None:
    pl = pytest.importorskip("polars")
    frame = pl.DataFrame({"k": [1, 2, 3], "big": pl.Series([1, 2, 3], dtype=pl.Int128)})
    try:
        frame.to_arrow()
    except pa.ArrowException:
        pass
    else:
        pytest.skip("this pyarrow imports polars' Int128")
    for data in (frame, frame.lazy()):
        with pytest.raises(SchemaMismatchError, match=r"'big' \(Int128\)"):
            ash.write(data, tmp_path / "i128.arrow", num_subpartitions=2, overwrite=True)
    assert not (tmp_path / "i128.arrow").exists()


def test_polars_scans_refuse_a_fixed_size_list_of_size_0(tmp_path: Path) -> None:
    pytest.importorskip("polars")
    asp = pytest.importorskip("arrowshuffle.polars")
    empty_lists = pa.Array.from_buffers(
        pa.list_(pa.int32(), 0), 4, [None], children=[pa.array([], pa.int32())]
    )
    table = pa.table({"k": [0, 1, 0, 1], "e": empty_lists})
    path = tmp_path / "fsl0.arrow"
    ash.write(table, path, num_subpartitions=2, partitioner="column", by="k")
    with ash.open_file(path) as shuffle:
        assert shuffle.read(0).column("e").equals(table.column("e").slice(0, 2))
    with pytest.raises(SchemaMismatchError, match=r"column 'e' .* fixed-size lists of size 0"):
        asp.scan(path, subpartitions=0).collect()


def test_subpartition_ids_given_as_any_integer_arrow_array_place_rows_alike(
    tmp_path: Path,
) -> None:
    """Ids as a run-end encoded, dictionary encoded or chunked integer array are their plain
    values; ids of another type, or a null id, are refused by name, with nothing written."""
    import pyarrow.compute as pc

    table = pa.table({"k": pa.array(range(8), pa.int64())})
    plain = pa.array([1, 0, 0, 1, 2, 2, 2, 0], pa.int8())
    encoded = {
        "run_end": pc.run_end_encode(plain),
        "dictionary": pc.dictionary_encode(plain),
        "chunked": pa.chunked_array([plain.slice(0, 3), plain.slice(3)]),
    }
    expected = [[1, 2, 7], [0, 3], [4, 5, 6]]
    for name, ids in encoded.items():
        path = str(tmp_path / f"{name}.arrow")
        with ash.ShuffleFileWriter(path, table.schema, 3) as writer:
            writer.write(table, subpartitions=ids)
        got = [ash.open_file(path).read(s)["k"].to_pylist() for s in range(3)]
        assert got == expected, name
    refused = {
        "string": pa.array(["1", "0", "0", "1", "2", "2", "2", "0"]),
        "boolean": pa.array([True, False] * 4),
        "decimal": pa.array([1, 0, 0, 1, 2, 2, 2, 0], pa.decimal128(5, 0)),
        "run-end encoded string": pc.run_end_encode(pa.array(["a"] * 8)),
    }
    for name, ids in refused.items():
        path = tmp_path / "refused.arrow"
        with (
            pytest.raises(
                InvalidOptionError, match="the subpartition ids must be integers, found type"
            ),
            ash.ShuffleFileWriter(str(path), table.schema, 3) as writer,
        ):
            writer.write(table, subpartitions=ids)
        assert not list(tmp_path.glob("refused*")), name
    with_null = pc.run_end_encode(pa.array([1, None, 0, 1, 2, 2, 2, 0], pa.int8()))
    with (
        pytest.raises(
            InvalidOptionError,
            match="the subpartition ids must not contain nulls, found one at row 1",
        ),
        ash.ShuffleFileWriter(str(tmp_path / "null.arrow"), table.schema, 3) as writer,
    ):
        writer.write(table, subpartitions=with_null)
