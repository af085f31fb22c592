"""Projected reads fetch only the selected columns' buffers, and return what a full read does.

Every projected read is compared with a full read of the same selection followed by a select,
and the bytes it fetched (remote) or planned to touch through the memory map (local) with the
full read's.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import arrowshuffle as ash
from arrowshuffle.format.errors import CorruptFileError
from arrowshuffle.readers.projection import field_buffer_spans, parse_layout
from arrowshuffle.readers.scheduler import ReadOptions

N = 5
ROWS = 3000


def _types_table(rows: int, seed: int = 0) -> pa.Table:
    rng = np.random.default_rng(seed)
    ints = rng.integers(-(10**6), 10**6, rows)
    valid = rng.random(rows) > 0.2
    words = np.char.add("w", (ints % 997).astype(str)).astype(object)
    words[~valid] = None
    lists = [None if not v else list(range(int(i) % 4)) for i, v in zip(ints, valid, strict=True)]
    return pa.table(
        {
            "i64": pa.array(ints),
            "i32_nulls": pa.array(ints.astype(np.int32), mask=~valid),
            "f64": pa.array(ints * 0.5),
            "flag": pa.array(ints % 3 == 0),
            "s": pa.array(words, pa.string()),
            "ls": pa.array(words, pa.large_string()),
            "sv": pa.array(
                np.char.add(words.astype(str), "-a-longer-tail-than-12"), pa.string_view()
            ),
            "mp": pa.array(
                [None if not v else [("k", int(i))] for i, v in zip(ints, valid, strict=True)],
                pa.map_(pa.string(), pa.int64()),
            ),
            "lst": pa.array(lists, pa.list_(pa.int64())),
            "st": pa.StructArray.from_arrays(
                [pa.array(ints), pa.array(words, pa.string())], names=["a", "b"]
            ),
            "nothing": pa.nulls(rows),
            "bin": pa.array([w.encode() if w else None for w in words], pa.binary()),
            "ts": pa.array(ints, pa.timestamp("us")),
            "dec": pa.array(
                [None if not v else int(i) for i, v in zip(ints, valid, strict=True)],
                pa.decimal128(12, 2),
            ),
            "fsl": pa.FixedSizeListArray.from_arrays(pa.array(np.repeat(ints, 2)), 2),
            "big": pa.array(rng.integers(0, 2**40, rows)),
        }
    )


def _write(path: Path, table: pa.Table, compression: str = "lz4", **options) -> np.ndarray:
    ids = np.random.default_rng(1).integers(0, N, table.num_rows)
    with ash.ShuffleFileWriter(
        path, table.schema, N, memory="256KiB", compression=compression, **options
    ) as writer:
        start = 0
        for batch in table.to_batches(max_chunksize=700):
            writer.write(batch, subpartitions=ids[start : start + batch.num_rows])
            start += batch.num_rows
    return ids


@pytest.fixture(scope="module")
def typed_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("proj") / "typed.arrow"
    _write(path, _types_table(ROWS))
    return path


FOUR = ["sv", "i64", "mp", "st"]


@pytest.mark.parametrize("compression", ["none", "lz4", "zstd"])
def test_projected_read_equals_full_read_then_select(tmp_path: Path, compression: str) -> None:
    path = tmp_path / "c.arrow"
    _write(path, _types_table(ROWS, seed=3), compression=compression)
    for columns in (FOUR, ["nothing"], ["lst", "i32_nulls", "fsl"], ["ls", "s", "bin", "dec"]):
        for selection in (0, range(1, 4), [0, 4]):
            full = ash.open_file(path).read(selection)
            projected = ash.open_file(path).read(selection, columns=columns)
            assert projected.equals(full.select(columns)), (columns, selection)


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    columns=st.lists(st.sampled_from(_types_table(1).schema.names), min_size=1, max_size=6),
    subpartition=st.integers(0, N - 1),
)
def test_any_projection_equals_full_read_then_select(
    typed_file: Path, columns: list[str], subpartition: int
) -> None:
    full = ash.open_file(typed_file).read(subpartition)
    projected = ash.open_file(typed_file).read(subpartition, columns=columns)
    assert projected.equals(full.select(columns))


def _sixteen(rows: int) -> pa.Table:
    rng = np.random.default_rng(7)
    return pa.table({f"c{i}": pa.array(rng.integers(0, 2**60, rows)) for i in range(16)})


@pytest.mark.parametrize("compression", ["lz4", "zstd"])
def test_four_of_sixteen_columns_touch_a_third_of_the_bytes_locally(
    tmp_path: Path, compression: str
) -> None:
    path = tmp_path / "wide.arrow"
    _write(path, _sixteen(20_000), compression=compression)
    whole = ash.open_file(path)
    full = whole.read(2)
    part = ash.open_file(path)
    columns = ["c3", "c0", "c15", "c8"]
    projected = part.read(2, columns=columns)
    assert projected.equals(full.select(columns))
    assert part.data_bytes_read <= 0.35 * whole.data_bytes_read
    # Every column again: no projection, the whole chunks.
    again = ash.open_file(path)
    again.read(2, columns=full.column_names)
    assert again.data_bytes_read == whole.data_bytes_read


def test_a_verified_read_fetches_whole_chunks(tmp_path: Path) -> None:
    path = tmp_path / "wide.arrow"
    _write(path, _sixteen(5000))
    whole = ash.open_file(path)
    whole.read(1, verify=True)
    part = ash.open_file(path)
    projected = part.read(1, columns=["c1", "c2"], verify=True)
    assert part.data_bytes_read == whole.data_bytes_read
    assert projected.equals(ash.open_file(path).read(1).select(["c1", "c2"]))


def test_broadcast_chunks_are_projected_and_repeated(tmp_path: Path) -> None:
    path = tmp_path / "b.arrow"
    table = _types_table(500, seed=9)
    with ash.ShuffleFileWriter(path, table.schema, N, compression="lz4") as writer:
        writer.write(table.slice(0, 300), subpartitions=np.arange(300) % N)
        writer.flush_region()
        writer.write_broadcast(table.slice(300).to_batches()[0])
    full = ash.open_file(path).read(range(N))
    projected = ash.open_file(path).read(range(N), columns=["mp", "sv"])
    assert projected.equals(full.select(["mp", "sv"]))


def test_an_uncompressed_local_read_is_not_projected(tmp_path: Path) -> None:
    # Zero-copy already leaves the other columns untouched: whole chunks are planned.
    path = tmp_path / "plain.arrow"
    _write(path, _sixteen(5000), compression="none")
    whole = ash.open_file(path)
    full = whole.read(1)
    part = ash.open_file(path)
    assert part.read(1, columns=["c4"]).equals(full.select(["c4"]))
    assert part.data_bytes_read == whole.data_bytes_read


def test_a_footer_that_does_not_tile_a_chunk_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "t.arrow"
    _write(path, _sixteen(4000))
    data = bytearray(path.read_bytes())
    layout = parse_layout(bytes(data), 0)
    # Move the second batch's block by 8 bytes in the footer: the batches no longer tile.
    block = layout.batches[1].tobytes()
    at = bytes(data).rindex(block)
    moved = layout.batches[1:2].copy()
    moved["offset"] += 8
    data[at : at + len(block)] = moved.tobytes()
    path.write_bytes(bytes(data))
    reader = ash.open_file(path)
    with pytest.raises(CorruptFileError, match="V17"):
        for s in range(N):
            reader.read(s, columns=["c1"])


def test_buffer_counts_follow_arrows_layout() -> None:
    schema = _types_table(1).schema
    spans = field_buffer_spans(schema, [1])  # one data buffer for the one view column
    assert spans is not None
    counts = dict(zip(schema.names, [len(s) for s in spans], strict=True))
    assert counts == {
        "i64": 2,
        "i32_nulls": 2,
        "f64": 2,
        "flag": 2,
        "s": 3,
        "ls": 3,
        "sv": 3,
        "mp": 8,
        "lst": 4,
        "st": 6,
        "nothing": 0,
        "bin": 3,
        "ts": 2,
        "dec": 2,
        "fsl": 3,
        "big": 2,
    }
    assert field_buffer_spans(schema, []) is None  # a view column without its count


def test_typed_batches_match_the_computed_buffer_layout(typed_file: Path) -> None:
    # A projection of one small column touches far less than the whole: the buffer layout
    # computed from the schema matched every batch's metadata (no whole-body fallback).
    whole = ash.open_file(typed_file)
    whole.read(range(N))
    part = ash.open_file(typed_file)
    part.read(range(N), columns=["flag"])
    assert part.data_bytes_read < 0.1 * whole.data_bytes_read


@pytest.mark.s3
@pytest.mark.parametrize("compression", ["none", "zstd"])
def test_projected_reads_on_s3_fetch_fewer_bytes(s3_endpoint, s3_bucket, compression: str) -> None:
    storage = s3_endpoint.storage_options()
    url = f"{s3_bucket}/wide.arrow"
    table = _sixteen(30_000)  # large enough that the footer (fetched once) is a small part
    ids = np.random.default_rng(1).integers(0, N, table.num_rows)
    with ash.ShuffleFileWriter(
        url, table.schema, N, memory="1MiB", compression=compression, storage_options=storage
    ) as writer:
        writer.write(table, subpartitions=ids)
    # No coalescing across unselected columns and no size threshold: project every read.
    options = ReadOptions(max_gap=0, project_min_bytes=0)
    columns = ["c3", "c0", "c15", "c8"]
    for selection in (1, range(0, N)):
        whole = ash.open_file(url, storage, options=options)
        full = whole.read(selection, verify=False)
        part = ash.open_file(url, storage, options=options)
        projected = part.read(selection, columns=columns, verify=False)
        assert projected.equals(full.select(columns))
        assert part.data_bytes_read <= 0.35 * whole.data_bytes_read
        assert part.read_stats().bytes_read < whole.read_stats().bytes_read
        # The default (verifying) read fetches whole chunks and returns the same rows.
        checked = ash.open_file(url, storage, options=options)
        assert checked.read(selection, columns=columns).equals(projected)
        assert checked.data_bytes_read >= whole.data_bytes_read


@pytest.mark.s3
def test_small_remote_reads_do_not_project_by_default(s3_endpoint, s3_bucket) -> None:
    storage = s3_endpoint.storage_options()
    url = f"{s3_bucket}/small.arrow"
    table = _sixteen(2000)
    with ash.ShuffleFileWriter(url, table.schema, N, storage_options=storage) as writer:
        writer.write(table, subpartitions=np.arange(2000) % N)
    whole = ash.open_file(url, storage)
    full = whole.read(2, verify=False)
    part = ash.open_file(url, storage)
    assert part.read(2, columns=["c1"], verify=False).equals(full.select(["c1"]))
    assert part.read_stats().requests == whole.read_stats().requests


def test_a_sparse_file_serves_reads_inside_a_piece_that_covers_a_smaller_one() -> None:
    # A batch's metadata piece inside a merged body piece: a read in the body past the small
    # piece's end is still served from the big piece, with no request.
    from arrowshuffle.readers.source import SparseFile

    data = bytes(range(256)) * 8
    fetched: list[tuple[int, int]] = []

    def fetch(start: int, end: int) -> bytes:
        fetched.append((start, end))
        return data[start:end]

    pieces = [(100, data[100:1500]), (120, data[120:140]), (1400, data[1400:1700])]
    sparse = SparseFile(len(data), pieces, fetch)
    for start, end in ((130, 600), (125, 135), (1450, 1690), (100, 1500)):
        sparse.seek(start)
        assert sparse.read(end - start) == data[start:end]
    assert fetched == []
    sparse.seek(1800)
    assert sparse.read(10) == data[1800:1810] and fetched == [(1800, 1810)]
