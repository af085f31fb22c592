"""The region-sorted writer: publishing, cleanup, argument checks, batch sizes, regions."""

from __future__ import annotations

import os
from pathlib import Path

import google_crc32c
import numpy as np
import pyarrow as pa
import pytest

import arrowshuffle as ash
from arrowshuffle.format.index import decode_index

SCHEMA = pa.schema([("key", pa.int64()), ("value", pa.float64()), ("name", pa.string())])


def make_batch(n: int, start: int = 0) -> pa.RecordBatch:
    keys = np.arange(start, start + n, dtype=np.int64)
    return pa.record_batch(
        [
            pa.array(keys),
            pa.array(keys * 0.5),
            pa.array(np.char.add("name-", keys.astype(str)).astype(object)),
        ],
        schema=SCHEMA,
    )


def ids_for(n: int, num_subpartitions: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, num_subpartitions, n)


def ipc_batches(path: Path) -> list[pa.RecordBatch]:
    with pa.ipc.open_file(path) as reader:
        return [reader.get_batch(i) for i in range(reader.num_record_batches)]


def listing(directory: Path) -> list[str]:
    return sorted(os.listdir(directory))


# --------------------------------------------------------------------------- publishing


def test_clean_exit_publishes_data_and_index(tmp_path: Path) -> None:
    path = tmp_path / "part-0.arrow"
    with ash.ShuffleFileWriter(path, SCHEMA, 4, memory="1MiB") as writer:
        writer.write(make_batch(100), subpartitions=ids_for(100, 4))
        # Nothing under the final names while the writer is open: only hidden temporaries.
        assert not path.exists()
        assert not Path(str(path) + ".idx").exists()
        assert all(name.startswith(".") for name in listing(tmp_path))
    assert listing(tmp_path) == ["part-0.arrow", "part-0.arrow.idx"]
    written = writer.written
    assert written is not None
    assert written.rows == 100
    assert written.data_size == path.stat().st_size
    index_bytes = (tmp_path / "part-0.arrow.idx").read_bytes()
    assert written.index_size == len(index_bytes)
    assert written.index_crc32c == google_crc32c.value(index_bytes[:-16])
    assert written.data_url == str(path)
    assert written.index_url == str(path) + ".idx"


def test_data_is_published_before_the_index(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    published: list[str] = []
    real_replace = os.replace

    def spying_replace(src: str, dst: str) -> None:
        real_replace(src, dst)
        published.append(os.path.basename(dst))

    monkeypatch.setattr(os, "replace", spying_replace)
    with ash.ShuffleFileWriter(tmp_path / "a.arrow", SCHEMA, 2) as writer:
        writer.write(make_batch(10), subpartitions=ids_for(10, 2))
    assert published == ["a.arrow", "a.arrow.idx"]


def test_failed_index_publish_withdraws_the_data_file(tmp_path: Path) -> None:
    path = tmp_path / "a.arrow"
    # A directory where the index should go: renaming the index onto it fails.
    (tmp_path / "a.arrow.idx").mkdir()
    writer = ash.ShuffleFileWriter(path, SCHEMA, 2)
    writer.write(make_batch(10), subpartitions=ids_for(10, 2))
    with pytest.raises(OSError):
        writer.close()
    assert listing(tmp_path) == ["a.arrow.idx"]
    assert not any((tmp_path / "a.arrow.idx").iterdir())


class Boom(Exception):
    pass


@pytest.mark.parametrize("regions_before", [0, 1, 5])
def test_exception_in_block_leaves_nothing(tmp_path: Path, regions_before: int) -> None:
    path = tmp_path / "part.arrow"
    with pytest.raises(Boom), ash.ShuffleFileWriter(path, SCHEMA, 3, memory=1) as writer:
        for i in range(regions_before + 1):
            writer.write(make_batch(50, 50 * i), subpartitions=ids_for(50, 3, i))
        assert writer.num_regions == regions_before
        raise Boom
    assert listing(tmp_path) == []


def test_abort_leaves_nothing_and_closes(tmp_path: Path) -> None:
    writer = ash.ShuffleFileWriter(tmp_path / "x.arrow", SCHEMA, 2, memory=1)
    writer.write(make_batch(30), subpartitions=ids_for(30, 2))
    writer.write(make_batch(30), subpartitions=ids_for(30, 2))
    writer.abort()
    assert listing(tmp_path) == []
    writer.abort()  # twice is fine
    with pytest.raises(ash.InvalidOptionError, match="closed"):
        writer.write(make_batch(1), subpartitions=[0])
    with pytest.raises(ash.InvalidOptionError, match="closed"):
        writer.close()


def test_write_after_close_is_refused(tmp_path: Path) -> None:
    writer = ash.ShuffleFileWriter(tmp_path / "x.arrow", SCHEMA, 2)
    writer.close()
    with pytest.raises(ash.InvalidOptionError, match="closed"):
        writer.write(make_batch(1), subpartitions=[0])
    with pytest.raises(ash.InvalidOptionError, match="closed"):
        writer.write_broadcast(make_batch(1))
    with pytest.raises(ash.InvalidOptionError, match="closed"):
        writer.flush_region()


def test_a_missing_parent_directory_is_refused_naming_it(tmp_path: Path) -> None:
    # As open() and pyarrow's file writers: a typo in a path must not create a tree.
    path = tmp_path / "a" / "b" / "part.arrow"
    with pytest.raises(ash.MissingObjectError, match=rf"the directory {tmp_path / 'a' / 'b'} does"):
        ash.ShuffleFileWriter(str(path), SCHEMA, 1)
    with pytest.raises(ash.MissingObjectError, match="does not exist"):
        ash.write(make_batch(3), path, num_subpartitions=1)
    assert listing(tmp_path) == []
    # A dataset creates its own directory, parents included, as Spark's writers do.
    manifest = ash.write_dataset(make_batch(3), tmp_path / "x" / "ds", num_subpartitions=1)
    assert ash.open_dataset(tmp_path / "x" / "ds").read().num_rows == manifest.total_rows == 3


def test_existing_files_are_replaced_with_overwrite(tmp_path: Path) -> None:
    path = tmp_path / "part.arrow"
    for n in (10, 4):
        with ash.ShuffleFileWriter(path, SCHEMA, 2, overwrite=True) as writer:
            writer.write(make_batch(n), subpartitions=ids_for(n, 2))
    assert ash.open_file(path).read().num_rows == 4
    assert listing(tmp_path) == ["part.arrow", "part.arrow.idx"]


def test_data_file_carries_the_index_file_id(tmp_path: Path) -> None:
    path = tmp_path / "part.arrow"
    with ash.ShuffleFileWriter(path, SCHEMA, 2) as writer:
        writer.write(make_batch(5), subpartitions=ids_for(5, 2))
    header = decode_index((tmp_path / "part.arrow.idx").read_bytes()).header
    with pa.ipc.open_file(path) as reader:
        assert reader.metadata[b"arrowshuffle.file_id"] == header.file_id.hex().encode()
    # Two writers never share a file id.
    other = tmp_path / "other.arrow"
    with ash.ShuffleFileWriter(other, SCHEMA, 2):
        pass
    assert decode_index((tmp_path / "other.arrow.idx").read_bytes()).header.file_id != (
        header.file_id
    )


# --------------------------------------------------------------------------- arguments


def test_schema_mismatch_names_both_schemas(tmp_path: Path) -> None:
    writer = ash.ShuffleFileWriter(tmp_path / "x.arrow", SCHEMA, 2)
    other = pa.record_batch([pa.array([1, 2])], names=["key"])
    with pytest.raises(ash.SchemaMismatchError) as info:
        writer.write(other, subpartitions=[0, 1])
    assert isinstance(info.value, ValueError)
    message = str(info.value)
    assert "expected" in message and "found" in message and "value" in message
    # Nullability is part of the schema.
    strict = pa.schema([pa.field(f.name, f.type, nullable=False) for f in SCHEMA])
    with pytest.raises(ash.SchemaMismatchError):
        writer.write(make_batch(2).cast(strict), subpartitions=[0, 1])
    writer.abort()


def test_schema_metadata_does_not_matter(tmp_path: Path) -> None:
    path = tmp_path / "x.arrow"
    with ash.ShuffleFileWriter(path, SCHEMA, 2) as writer:
        batch = make_batch(4)
        batch = batch.replace_schema_metadata({"pandas": "{}"})
        writer.write(batch, subpartitions=[0, 1, 0, 1])
    assert ash.open_file(path).read().num_rows == 4


@pytest.mark.parametrize(
    "field_type",
    [
        pa.dictionary(pa.int32(), pa.string()),
        pa.list_(pa.dictionary(pa.int8(), pa.string())),
        pa.struct([("d", pa.dictionary(pa.int16(), pa.binary()))]),
    ],
)
def test_dictionary_types_are_refused(tmp_path: Path, field_type: pa.DataType) -> None:
    schema = pa.schema([("key", pa.int64()), ("d", field_type)])
    with pytest.raises(ash.SchemaMismatchError, match=r"'d'.*dictionary"):
        ash.ShuffleFileWriter(tmp_path / "x.arrow", schema, 2)
    assert listing(tmp_path) == []


@pytest.mark.parametrize(
    ("ids", "message"),
    [
        (np.array([0, 1, 4]), "ids must be in \\[0, 4\\), found 4 at row 2"),
        (np.array([0, -1, 2]), "ids must be in \\[0, 4\\), found -1 at row 1"),
        (np.array([0, 1]), "one subpartition id per row \\(3\\)"),
        (np.array([0, 1, 2, 3]), "one subpartition id per row \\(3\\)"),
        (np.array([[0, 1, 2]]), "one subpartition id per row"),
        (np.array([0.0, 1.0, 2.0]), "integers.*float64"),
        (np.array([True, False, True]), "integers.*bool"),
        (np.array(["0", "1", "2"]), "integers"),
        (pa.array([0, None, 1]), "nulls"),
        (pa.chunked_array([[0, 1], [None]]), "nulls"),
        (np.array([0, 1, 2**40]), f"found {2**40} at row 2"),
        (np.array([0, 1, 2**64 - 1], dtype=np.uint64), f"found {2**64 - 1} at row 2"),
    ],
)
def test_bad_ids_are_refused(tmp_path: Path, ids: object, message: str) -> None:
    writer = ash.ShuffleFileWriter(tmp_path / "x.arrow", SCHEMA, 4)
    with pytest.raises(ash.InvalidOptionError, match=message) as info:
        writer.write(make_batch(3), subpartitions=ids)
    assert isinstance(info.value, ValueError)
    # A refused write adds nothing.
    writer.write(make_batch(2, 100), subpartitions=[3, 3])
    written = writer.close()
    assert written.rows == 2
    assert ash.open_file(tmp_path / "x.arrow").read(3).column("key").to_pylist() == [100, 101]


def test_ids_of_every_integer_kind_are_accepted(tmp_path: Path) -> None:
    path = tmp_path / "x.arrow"
    forms: list[object] = [
        np.array([2, 0, 1], dtype=np.int8),
        np.array([2, 0, 1], dtype=np.uint8),
        np.array([2, 0, 1], dtype=np.uint64),
        pa.array([2, 0, 1], pa.int16()),
        pa.chunked_array([[2], [0, 1]], pa.uint32()),
        [2, 0, 1],
        range(2, -1, -1),
    ]
    with ash.ShuffleFileWriter(path, SCHEMA, 3) as writer:
        for i, ids in enumerate(forms):
            writer.write(make_batch(3, 10 * i), subpartitions=ids)
    shuffle = ash.open_file(path)
    firsts = [10 * i for i in range(len(forms))]
    # Form 6 (range(2, -1, -1)) sends key 60 to subpartition 2, 61 to 1 and 62 to 0.
    assert shuffle.read(2).column("key").to_pylist() == [*firsts[:-1], 60]
    assert shuffle.read(0).column("key").to_pylist() == [k + 1 for k in firsts[:-1]] + [62]


def test_empty_batch_with_empty_id_list(tmp_path: Path) -> None:
    with ash.ShuffleFileWriter(tmp_path / "x.arrow", SCHEMA, 2) as writer:
        writer.write(make_batch(0), subpartitions=[])
    assert ash.open_file(tmp_path / "x.arrow").num_rows == 0


def test_write_without_ids_or_partitioner_is_refused(tmp_path: Path) -> None:
    writer = ash.ShuffleFileWriter(tmp_path / "x.arrow", SCHEMA, 2)
    with pytest.raises(ash.InvalidOptionError, match="subpartitions=ids"):
        writer.write(make_batch(3))
    writer.abort()


@pytest.mark.parametrize("data", [{"key": [1]}, [1, 2], "rows", None])
def test_write_takes_only_arrow_data(tmp_path: Path, data: object) -> None:
    writer = ash.ShuffleFileWriter(tmp_path / "x.arrow", SCHEMA, 2)
    with pytest.raises(ash.InvalidOptionError, match="RecordBatch or Table"):
        writer.write(data, subpartitions=[0])  # type: ignore[arg-type]
    writer.abort()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"num_subpartitions": 0}, "num_subpartitions"),
        ({"num_subpartitions": -3}, "num_subpartitions"),
        ({"num_subpartitions": 2**31}, "num_subpartitions"),
        ({"num_subpartitions": True}, "num_subpartitions"),
        ({"num_subpartitions": 4.0}, "num_subpartitions"),
        ({"max_batch_rows": 0}, "max_batch_rows"),
        ({"max_batch_rows": True}, "max_batch_rows"),
        ({"max_batch_rows": 1.5}, "max_batch_rows"),
        ({"compression": "gzip"}, "compression.*gzip"),
        ({"memory": "lots"}, "memory.*lots"),
        ({"memory": -1}, "memory"),
        ({"memory": True}, "memory"),
    ],
)
def test_bad_options_are_refused(tmp_path: Path, kwargs: dict[str, object], message: str) -> None:
    arguments: dict[str, object] = {"num_subpartitions": 4, **kwargs}
    num = arguments.pop("num_subpartitions")
    with pytest.raises(ash.InvalidOptionError, match=message):
        ash.ShuffleFileWriter(tmp_path / "x.arrow", SCHEMA, num, **arguments)  # type: ignore[arg-type]
    assert listing(tmp_path) == []


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        (None, "none"),
        ("uncompressed", "none"),
        ("LZ4", "lz4"),
        ("lz4_frame", "lz4"),
        ("ZSTD", "zstd"),
    ],
)
def test_compression_names_are_normalized(tmp_path: Path, given: str | None, expected: str) -> None:
    path = tmp_path / "x.arrow"
    with ash.ShuffleFileWriter(path, SCHEMA, 2, compression=given) as writer:
        assert writer.compression == expected
        writer.write(make_batch(10), subpartitions=ids_for(10, 2))
    assert ash.open_file(path).compression == expected


def test_memory_accepts_sizes_with_units(tmp_path: Path) -> None:
    writer = ash.ShuffleFileWriter(tmp_path / "x.arrow", SCHEMA, 2, memory="1.5 KiB")
    assert writer.memory_budget() == 1536
    writer.abort()
    writer = ash.ShuffleFileWriter(tmp_path / "y.arrow", SCHEMA, 2, memory="2MB")
    assert writer.memory_budget() == 2_000_000
    writer.abort()


# --------------------------------------------------------------------------- contents


def test_table_input_with_several_chunks(tmp_path: Path) -> None:
    path = tmp_path / "x.arrow"
    table = pa.Table.from_batches([make_batch(7), make_batch(0, 7), make_batch(5, 7)])
    ids = np.array([0, 1, 2, 0, 1, 2, 0, 2, 2, 1, 0, 0])
    with ash.ShuffleFileWriter(path, SCHEMA, 3) as writer:
        writer.write(table, subpartitions=ids)
    shuffle = ash.open_file(path)
    for s in range(3):
        assert shuffle.read(s).column("key").to_pylist() == np.flatnonzero(ids == s).tolist()


def test_empty_file_is_valid_everywhere(tmp_path: Path) -> None:
    path = tmp_path / "empty.arrow"
    with ash.ShuffleFileWriter(path, SCHEMA, 5) as writer:
        writer.write(make_batch(0), subpartitions=np.zeros(0, dtype=np.int64))
    assert writer.written is not None and writer.written.regions == 0
    with pa.ipc.open_file(path) as reader:
        assert reader.schema.equals(SCHEMA)
        assert reader.num_record_batches == 0
        assert reader.read_all().num_rows == 0
    pl = pytest.importorskip("polars")
    frame = pl.read_ipc(path)
    assert frame.height == 0 and frame.columns == SCHEMA.names
    shuffle = ash.open_file(path)
    assert shuffle.num_regions == 0 and shuffle.num_rows == 0
    assert shuffle.num_subpartitions == 5
    for s in range(5):
        table = shuffle.read(s)
        assert table.num_rows == 0 and table.schema.equals(SCHEMA)
    assert shuffle.read(range(0, 5)).num_rows == 0
    stats = shuffle.stats()
    assert stats.num_rows == 0
    assert stats.column_names == [
        "region",
        "subpartition",
        "offset",
        "bytes",
        "rows",
        "batches",
        "broadcast",
    ]


def test_max_batch_rows_is_respected_and_small_pieces_are_joined(tmp_path: Path) -> None:
    path = tmp_path / "x.arrow"
    with ash.ShuffleFileWriter(path, SCHEMA, 1, memory="64MiB", max_batch_rows=64) as writer:
        for i in range(100):
            writer.write(make_batch(10, 10 * i), subpartitions=np.zeros(10, dtype=np.int64))
    sizes = [b.num_rows for b in ipc_batches(path)]
    # One region, one chunk: the 10-row pieces are joined into full batches.
    assert sizes == [64] * 15 + [40]
    assert ash.open_file(path).read(0).column("key").to_pylist() == list(range(1000))


@pytest.mark.parametrize("max_batch_rows", [1, 3, 1000])
def test_no_batch_exceeds_max_batch_rows(tmp_path: Path, max_batch_rows: int) -> None:
    path = tmp_path / "x.arrow"
    ids = ids_for(500, 7)
    with ash.ShuffleFileWriter(
        path, SCHEMA, 7, memory=4000, max_batch_rows=max_batch_rows
    ) as writer:
        writer.write(make_batch(500), subpartitions=ids)
    batches = ipc_batches(path)
    assert all(0 < b.num_rows <= max_batch_rows for b in batches)
    assert sum(b.num_rows for b in batches) == 500
    # Within a chunk, only the last batch may be short: count short batches per chunk.
    stats = ash.open_file(path).stats()
    chunks = sum(1 for rows in stats.column("rows").to_pylist() if rows)
    short = sum(1 for b in batches if b.num_rows < max_batch_rows)
    assert short <= chunks
    assert sum(stats.column("batches").to_pylist()) == len(batches)


def test_budget_bounds_regions(tmp_path: Path) -> None:
    batches = [make_batch(100, 100 * i) for i in range(20)]
    one_batch = batches[0].nbytes
    cases = {"64MiB": (1, 1), one_batch: (20, 20), 5 * one_batch: (4, 5), 1: (20, 20)}
    for budget, (low, high) in cases.items():
        path = tmp_path / f"{budget}.arrow"
        with ash.ShuffleFileWriter(path, SCHEMA, 4, memory=budget) as writer:
            for i, batch in enumerate(batches):
                writer.write(batch, subpartitions=ids_for(100, 4, i))
        shuffle = ash.open_file(path)
        assert low <= shuffle.num_regions <= high, (budget, shuffle.num_regions)
        assert shuffle.read().num_rows == 2000


def test_flush_region_cuts_a_region(tmp_path: Path) -> None:
    path = tmp_path / "x.arrow"
    with ash.ShuffleFileWriter(path, SCHEMA, 3, memory="64MiB") as writer:
        writer.write(make_batch(10), subpartitions=ids_for(10, 3))
        writer.flush_region()
        writer.flush_region()  # nothing buffered: no empty region
        writer.write(make_batch(10, 10), subpartitions=ids_for(10, 3, 1))
    shuffle = ash.open_file(path)
    assert shuffle.num_regions == 2
    regions = shuffle.stats().group_by("region").aggregate([("rows", "sum")])
    assert sorted(regions.column("rows_sum").to_pylist()) == [10, 10]


def test_compression_shrinks_compressible_data(tmp_path: Path) -> None:
    sizes = {}
    batch = pa.record_batch(
        [
            pa.array(np.zeros(20_000, dtype=np.int64)),
            pa.array(np.ones(20_000)),
            pa.array(["same"] * 20_000),
        ],
        schema=SCHEMA,
    )
    for compression in ("none", "lz4", "zstd"):
        path = tmp_path / f"{compression}.arrow"
        with ash.ShuffleFileWriter(path, SCHEMA, 2, compression=compression) as writer:
            writer.write(batch, subpartitions=ids_for(20_000, 2))
        sizes[compression] = path.stat().st_size
        assert pa.ipc.open_file(path).read_all().num_rows == 20_000
        # Every row is the same, so any order of them equals the input.
        assert ash.open_file(path).read().equals(pa.Table.from_batches([batch]))
    assert sizes["zstd"] < sizes["none"] / 4
    assert sizes["lz4"] < sizes["none"] / 2


def test_broadcast_rows_are_stored_once(tmp_path: Path) -> None:
    path = tmp_path / "x.arrow"
    with ash.ShuffleFileWriter(path, SCHEMA, 6) as writer:
        writer.write(make_batch(12), subpartitions=ids_for(12, 6))
        writer.write_broadcast(make_batch(5, 100))
        writer.write(make_batch(12, 200), subpartitions=ids_for(12, 6, 1))
    with pa.ipc.open_file(path) as reader:
        keys = reader.read_all().column("key").to_pylist()
    assert sorted(keys) == [*range(12), *range(100, 105), *range(200, 212)]
    shuffle = ash.open_file(path)
    assert shuffle.num_rows == 29
    stats = shuffle.stats()
    broadcast = stats.filter(stats.column("broadcast"))
    assert broadcast.num_rows == 6
    assert set(broadcast.column("offset").to_pylist()) == {broadcast.column("offset")[0].as_py()}
    for s in range(6):
        got = shuffle.read(s).column("key").to_pylist()
        assert [k for k in got if 100 <= k < 105] == list(range(100, 105))
