"""The file reader: metadata, stats, projections, and what it does with missing or bad files."""

from __future__ import annotations

import os
import shutil
import struct
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import arrowshuffle as ash
from arrowshuffle.format.index import ENTRY_DTYPE

SCHEMA = pa.schema(
    [
        ("key", pa.int64()),
        ("value", pa.float64()),
        ("name", pa.string()),
        ("tags", pa.list_(pa.int32())),
    ]
)
NUM_SUBPARTITIONS = 6


def make_batch(n: int, start: int = 0) -> pa.RecordBatch:
    keys = np.arange(start, start + n, dtype=np.int64)
    tags = pa.ListArray.from_arrays(
        pa.array(np.arange(0, 2 * n + 1, 2, dtype=np.int32)), pa.array(np.zeros(2 * n, np.int32))
    )
    return pa.record_batch(
        [
            pa.array(keys),
            pa.array(keys * 1.5),
            pa.array(np.char.add("n", keys.astype(str)).astype(object)),
            tags,
        ],
        schema=SCHEMA,
    )


@pytest.fixture
def written(tmp_path: Path) -> tuple[Path, np.ndarray]:
    """A file of 3 regular regions and one broadcast region; returns its path and the ids."""
    path = tmp_path / "part.arrow"
    rng = np.random.default_rng(5)
    ids = []
    with ash.ShuffleFileWriter(
        path, SCHEMA, NUM_SUBPARTITIONS, memory="64MiB", max_batch_rows=40, compression="none"
    ) as writer:
        for i in range(3):
            batch_ids = rng.integers(0, NUM_SUBPARTITIONS - 1, 100)  # the last id stays empty
            writer.write(make_batch(100, 100 * i), subpartitions=batch_ids)
            writer.flush_region()
            ids.append(batch_ids)
        writer.write_broadcast(make_batch(7, 1000))
    return path, np.concatenate(ids)


# --------------------------------------------------------------------------- metadata


def test_metadata(written: tuple[Path, np.ndarray]) -> None:
    path, _ = written
    with ash.open_file(path) as shuffle:
        assert shuffle.schema.equals(SCHEMA)
        assert shuffle.num_regions == 4
        assert shuffle.num_subpartitions == NUM_SUBPARTITIONS
        assert shuffle.num_rows == 307
        assert shuffle.compression == "none"
        assert shuffle.partitioner == {"name": "explicit"}
        assert shuffle.url == str(path)
        text = repr(shuffle)
        for part in (str(path), "regions=4", f"subpartitions={NUM_SUBPARTITIONS}", "rows=307"):
            assert part in text


def test_open_file_accepts_str_and_pathlike(written: tuple[Path, np.ndarray]) -> None:
    path, _ = written
    assert ash.open_file(str(path)).read().equals(ash.open_file(path).read())


def test_stats_table(written: tuple[Path, np.ndarray]) -> None:
    path, ids = written
    shuffle = ash.open_file(path)
    stats = shuffle.stats()
    assert stats.column_names == [
        "region",
        "subpartition",
        "offset",
        "bytes",
        "rows",
        "batches",
        "broadcast",
    ]
    assert [f.type for f in stats.schema] == [pa.int64()] * 6 + [pa.bool_()]
    assert stats.num_rows == 4 * NUM_SUBPARTITIONS
    # Every (region, subpartition) pair once.
    pairs = set(
        zip(
            stats.column("region").to_pylist(),
            stats.column("subpartition").to_pylist(),
            strict=True,
        )
    )
    assert pairs == {(r, s) for r in range(4) for s in range(NUM_SUBPARTITIONS)}
    regular = stats.filter(pa.compute.invert(stats.column("broadcast")))
    broadcast = stats.filter(stats.column("broadcast"))
    assert set(broadcast.column("region").to_pylist()) == {3}
    # Regular rows per subpartition are the rows written with that id.
    per_subpartition = regular.group_by("subpartition").aggregate([("rows", "sum")])
    got = dict(
        zip(
            *(per_subpartition.column(c).to_pylist() for c in ("subpartition", "rows_sum")),
            strict=True,
        )
    )
    assert got == {s: int((ids == s).sum()) for s in range(NUM_SUBPARTITIONS)}
    assert set(broadcast.column("rows").to_pylist()) == {7}
    # Bytes and batches: every chunk inside the file, the batches those of the IPC file.
    offsets = stats.column("offset").to_numpy()
    sizes = stats.column("bytes").to_numpy()
    assert (offsets + sizes <= path.stat().st_size).all()
    with pa.ipc.open_file(path) as reader:
        num_batches = reader.num_record_batches
    stored_batches = regular.column("batches").to_numpy().sum() + 1  # broadcast: one batch
    assert stored_batches == num_batches
    assert (sizes[stats.column("batches").to_numpy() == 0] == 0).all()
    # The empty subpartition has no bytes in any regular region.
    last = regular.filter(pa.compute.equal(regular.column("subpartition"), NUM_SUBPARTITIONS - 1))
    assert last.column("bytes").to_pylist() == [0, 0, 0]


def test_entries(written: tuple[Path, np.ndarray]) -> None:
    path, _ = written
    shuffle = ash.open_file(path)
    everything = shuffle.entries()
    assert everything.dtype == ENTRY_DTYPE
    assert everything.shape == (NUM_SUBPARTITIONS, 4)
    np.testing.assert_array_equal(shuffle.entries(2, 5), everything[2:5])
    assert shuffle.entries(3, 3).shape == (0, 4)
    stats = shuffle.stats()
    np.testing.assert_array_equal(everything["rows"].reshape(-1), stats.column("rows").to_numpy())
    with pytest.raises(ash.InvalidOptionError, match="outside"):
        shuffle.entries(0, NUM_SUBPARTITIONS + 1)


def test_reads_match_the_written_rows(written: tuple[Path, np.ndarray]) -> None:
    path, ids = written
    shuffle = ash.open_file(path)
    broadcast_keys = list(range(1000, 1007))
    for s in range(NUM_SUBPARTITIONS):
        keys = shuffle.read(s).column("key").to_pylist()
        assert keys == np.flatnonzero(ids == s).tolist() + broadcast_keys
    batches = list(shuffle.iter_batches(2))
    assert all(b.num_rows <= 40 for b in batches)
    assert pa.Table.from_batches(batches).equals(shuffle.read(2))


def test_read_options_do_not_change_results(written: tuple[Path, np.ndarray]) -> None:
    path, _ = written
    shuffle = ash.open_file(path)
    expected = shuffle.read([0, 2, 3, 5])
    for options in (
        ash.ReadOptions(max_gap=0, max_block=1),
        ash.ReadOptions(max_gap=10**9, max_block=10**9),
        ash.ReadOptions(max_in_flight=1),
        ash.ReadOptions(io_threads=1),
    ):
        assert shuffle.read([0, 2, 3, 5], options=options).equals(expected), options
        # The same tuning given at open.
        again = ash.open_file(path, options=options).read([0, 2, 3, 5])
        assert again.equals(expected), options


def test_plan_reads_a_broadcast_chunk_once(written: tuple[Path, np.ndarray]) -> None:
    path, _ = written
    shuffle = ash.open_file(path)
    plan = shuffle.chunk_ranges([0, 1, 4])  # two runs: [0, 2) and [4, 5)
    broadcast = [cr for cr in plan if cr.broadcast]
    assert len(broadcast) == 1 and broadcast[0].repeat == 3
    assert [cr.offset for cr in plan] == sorted(cr.offset for cr in plan)
    # A contiguous range: one byte range per region.
    assert len(shuffle.chunk_ranges(range(0, NUM_SUBPARTITIONS))) == 4


# --------------------------------------------------------------------------- projections


def test_columns_project_in_the_given_order(written: tuple[Path, np.ndarray]) -> None:
    path, _ = written
    shuffle = ash.open_file(path)
    full = shuffle.read(1)
    projected = shuffle.read(1, columns=["tags", "key"])
    assert projected.column_names == ["tags", "key"]
    assert projected.equals(full.select(["tags", "key"]))
    assert shuffle.read(range(0, 3), columns=["name"]).column_names == ["name"]


def test_bad_columns_are_refused(written: tuple[Path, np.ndarray]) -> None:
    path, _ = written
    shuffle = ash.open_file(path)
    with pytest.raises(ash.InvalidOptionError, match=r"'nope'.*key") as info:
        shuffle.read(0, columns=["key", "nope"])
    assert isinstance(info.value, ValueError)
    with pytest.raises(ash.InvalidOptionError, match="list of names"):
        shuffle.read(0, columns="key")
    with pytest.raises(ash.InvalidOptionError):
        list(shuffle.iter_batches(0, columns=["missing"]))


def test_bad_subpartitions_are_refused(written: tuple[Path, np.ndarray]) -> None:
    path, _ = written
    shuffle = ash.open_file(path)
    for selection in (NUM_SUBPARTITIONS, -1, [0, 99], range(3, 9)):
        with pytest.raises(ash.InvalidOptionError, match="does not exist"):
            shuffle.read(selection)


# --------------------------------------------------------------------------- missing and bad files


def test_missing_file_names_the_path(tmp_path: Path) -> None:
    path = tmp_path / "nothing.arrow"
    with pytest.raises(ash.MissingObjectError) as info:
        ash.open_file(path)
    assert str(tmp_path / "nothing.arrow") in str(info.value)
    assert isinstance(info.value, FileNotFoundError)


def test_missing_data_file_names_the_path(written: tuple[Path, np.ndarray]) -> None:
    path, _ = written
    shuffle = ash.open_file(path)
    shuffle.read(0)
    shuffle.close()
    path.unlink()
    # The index is open, the data file is gone: the read names it.
    with pytest.raises(ash.MissingObjectError) as info:
        shuffle.read(0)
    assert str(path) in str(info.value)
    with pytest.raises(ash.MissingObjectError, match=str(path)):
        ash.open_file(path).read(1)


def test_missing_index_names_the_index(written: tuple[Path, np.ndarray]) -> None:
    path, _ = written
    Path(str(path) + ".idx").unlink()
    with pytest.raises(ash.MissingObjectError) as info:
        ash.open_file(path)
    assert str(path) + ".idx" in str(info.value)


@pytest.mark.parametrize("change", ["append", "truncate"])
def test_data_file_of_the_wrong_size_is_v13(written: tuple[Path, np.ndarray], change: str) -> None:
    path, _ = written
    size = path.stat().st_size
    if change == "append":
        with path.open("ab") as f:
            f.write(b"\0" * 8)
    else:
        with path.open("r+b") as f:
            f.truncate(size - 8)
    with pytest.raises(ash.FormatError) as info:
        ash.open_file(path).read(0)
    assert info.value.rule == "V13"
    assert str(size) in str(info.value)


def test_index_of_another_file_is_refused_or_harmless(tmp_path: Path) -> None:
    """An index paired with a data file of another length fails V13 on the first read."""
    a, b = tmp_path / "a.arrow", tmp_path / "b.arrow"
    for path, n in ((a, 50), (b, 80)):
        with ash.ShuffleFileWriter(path, SCHEMA, 2) as writer:
            writer.write(make_batch(n), subpartitions=np.arange(n) % 2)
    shutil.copy(str(b) + ".idx", str(a) + ".idx")
    with pytest.raises(ash.FormatError) as info:
        ash.open_file(a).read(0)
    assert info.value.rule == "V13"


def replace_file(path: Path, data: bytes) -> None:
    """Write a new file and rename it over ``path``.

    Tables read earlier are zero-copy views of the old file's memory map; rewriting the file in
    place would change them under the test's feet (and truncating it would fault).
    """
    temp = path.with_name(path.name + ".new")
    temp.write_bytes(data)
    os.replace(temp, path)


def test_corrupted_chunk_fails_verification(written: tuple[Path, np.ndarray]) -> None:
    path, ids = written
    good = ash.open_file(path).read(verify=True)
    # Damage the stored keys of subpartition 2 (uncompressed: the int64 values are in the file).
    keys = np.flatnonzero(ids == 2)[:2].astype("<i8").tobytes()
    data = bytearray(path.read_bytes())
    assert data.count(keys) == 1
    data[data.index(keys)] ^= 0xFF
    replace_file(path, bytes(data))
    shuffle = ash.open_file(path)
    with pytest.raises(ash.ChecksumMismatchError) as info:
        shuffle.read(2, verify=True)
    assert info.value.rule == "V16"
    assert isinstance(info.value, ValueError)
    assert str(path) in str(info.value)
    # Other subpartitions' chunks are intact and still verify.
    for s in (0, 1, 3, 4, 5):
        shuffle.read(s, verify=True)
    # Without verification the damage decodes: wrong values, same shape.
    damaged = shuffle.read(verify=False)
    assert damaged.num_rows == good.num_rows
    assert not damaged.equals(good)
    assert damaged.drop_columns(["key"]).equals(good.drop_columns(["key"]))


@pytest.mark.parametrize("compression", ["none", "lz4", "zstd"])
def test_any_damaged_chunk_byte_is_caught_by_verify(tmp_path: Path, compression: str) -> None:
    path = tmp_path / "part.arrow"
    with ash.ShuffleFileWriter(path, SCHEMA, 3, compression=compression) as writer:
        writer.write(make_batch(60), subpartitions=np.arange(60) % 3)
    stats = ash.open_file(path).stats().to_pylist()
    clean = path.read_bytes()
    rng = np.random.default_rng(1)
    for row in stats:
        for position in rng.integers(row["offset"], row["offset"] + row["bytes"], 8):
            data = bytearray(clean)
            data[int(position)] ^= 1 << int(rng.integers(0, 8))
            replace_file(path, bytes(data))
            with pytest.raises(ash.ChecksumMismatchError):
                ash.open_file(path).read(row["subpartition"], verify=True)


def _damage_first_chunk(path: Path, edit: str) -> None:
    """Edit the first chunk of subpartition 0: its message header or its first body buffer."""
    offset = ash.open_file(path).stats().column("offset")[0].as_py()
    data = bytearray(path.read_bytes())
    continuation, metadata_length = struct.unpack_from("<Ii", data, offset)
    assert continuation == 0xFFFFFFFF
    if edit == "zero metadata length":
        struct.pack_into("<i", data, offset + 4, 0)
    else:
        # A compressed buffer starts with its uncompressed length (int64); claim 2**62 bytes.
        struct.pack_into("<q", data, offset + 8 + metadata_length, 2**62)
    replace_file(path, bytes(data))


@pytest.mark.parametrize(
    ("compression", "edit"),
    [
        ("none", "zero metadata length"),  # pyarrow: EOFError
        ("zstd", "huge uncompressed length"),  # pyarrow: ArrowMemoryError
        ("lz4", "huge uncompressed length"),
    ],
)
def test_undecodable_chunk_without_verify_is_a_format_error(
    tmp_path: Path, compression: str, edit: str
) -> None:
    path = tmp_path / "part.arrow"
    with ash.ShuffleFileWriter(path, SCHEMA, 2, compression=compression) as writer:
        writer.write(make_batch(300), subpartitions=np.arange(300) % 2)
    _damage_first_chunk(path, edit)
    with pytest.raises(ash.ChecksumMismatchError):
        ash.open_file(path).read(0, verify=True)
    with pytest.raises(ash.CorruptFileError) as info:
        ash.open_file(path).read(0)
    assert info.value.rule == "V17"


@pytest.mark.parametrize(
    ("vector", "rule"),
    [
        ("chunk_past_end", "V8"),
        ("overlapping_chunks", "V9"),
        ("broadcast_mismatch", "V10"),
        ("pair_mismatch", "V14"),
        ("schema_mismatch", "V15"),
    ],
)
def test_reader_refuses_layouts_its_checksums_cannot_vouch_for(vector: str, rule: str) -> None:
    """A layout or pairing that checksums cannot vouch for is a format error, not an IO one."""
    path = Path(__file__).parent / "vectors" / "v1" / f"{vector}.arrow"
    # A broken region table is refused at open, a broken entry when its read is planned.
    with pytest.raises(ash.CorruptFileError) as info:
        ash.open_file(path).read()
    assert info.value.rule == rule
