"""Every Arrow type through write -> compact -> read, on every reading surface.

Each type is written as two files of a dataset (hash-partitioned on a row id, a small memory
budget so that files hold several regions), compacted into one file, and read back with
``open_file``, ``open_dataset`` (verify on and off), ``open_dataset`` on the local S3
endpoint, ``arrowshuffle.polars.scan_dataset`` and Spark. The pyarrow readers return every
column in the type it was written in; polars and Spark get the plain form (see README, Types)
or a ``SchemaMismatchError`` naming the column, for types they cannot hold.
"""

from __future__ import annotations

import contextlib
import decimal
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import arrowshuffle as ash
from arrowshuffle.format.arrow_types import (
    child_types,
    compact_views,
    concat_arrays,
    concatenates,
    gather,
    has_dictionary,
    holds_views,
    plain_type,
    take_batch,
    takes,
    to_plain,
    with_child_types,
)
from arrowshuffle.format.errors import InvalidOptionError, SchemaMismatchError

N = 30
SUBPARTITIONS = 4
# Empty, short, inline (<= 12 bytes) and out-of-line (> 12 bytes) view values, non-ASCII too.
TEXT = [
    "",
    "a",
    None,
    "naïve café ünïcode",
    "short",
    "x" * 40,
    "日本語のテキストです",
    "12 bytes !!!",
]


def _text(i: int) -> str | None:
    return TEXT[i % len(TEXT)]


def _blob(i: int) -> bytes | None:
    value = _text(i)
    return None if value is None else value.encode()


def _ints(i: int) -> list[int | None] | None:
    return None if i % 5 == 3 else [i, None, 2 * i][: i % 4]


def _strings(i: int) -> list[str | None] | None:
    return None if i % 5 == 3 else [_text(i + j) for j in range(i % 4)]


T0 = 1_700_000_000_000_000
BUILDERS: dict[str, Callable[[], pa.Array]] = {
    "string_view": lambda: pa.array([_text(i) for i in range(N)], pa.string_view()),
    "binary_view": lambda: pa.array([_blob(i) for i in range(N)], pa.binary_view()),
    "list_view": lambda: pa.array([_ints(i) for i in range(N)], pa.list_view(pa.int32())),
    "large_list_view": lambda: pa.array(
        [_strings(i) for i in range(N)], pa.large_list_view(pa.string_view())
    ),
    "run_end_encoded": lambda: pa.RunEndEncodedArray.from_arrays(
        pa.array([3, 7, 8, 20, N], pa.int32()),
        pa.array(["x" * 20, None, "", "é", "tail"], pa.string()),
    ),
    "run_end_encoded_view": lambda: pa.RunEndEncodedArray.from_arrays(
        pa.array([5, 6, N], pa.int16()), pa.array(["y" * 30, None, "z"], pa.string_view())
    ),
    "dictionary": lambda: pa.array([_text(i) for i in range(N)]).dictionary_encode(),
    "dictionary_of_views": lambda: pa.array(
        [_text(i) for i in range(N)], pa.string_view()
    ).dictionary_encode(),
    "dictionary_in_struct": lambda: pa.StructArray.from_arrays(
        [pa.array([_text(i) for i in range(N)]).dictionary_encode()], names=["d"]
    ),
    "extension_uuid": lambda: pa.array(
        [None if i % 7 == 0 else uuid.UUID(int=i * 7919).bytes for i in range(N)], pa.uuid()
    ),
    "extension_json": lambda: pa.array(
        [None if i % 6 == 0 else f'{{"n": {i}}}' for i in range(N)], pa.json_()
    ),
    "struct": lambda: pa.array(
        [None if i % 6 == 1 else {"a": i, "b": _text(i), "c": {"d": _ints(i)}} for i in range(N)]
    ),
    "struct_of_views": lambda: pa.StructArray.from_arrays(
        [
            pa.array([_text(i) for i in range(N)], pa.string_view()),
            pa.array([_ints(i) for i in range(N)], pa.list_view(pa.int64())),
        ],
        names=["s", "l"],
        mask=pa.array([i % 9 == 4 for i in range(N)]),
    ),
    "list_of_struct": lambda: pa.array(
        [None if i % 6 == 1 else [{"a": i, "b": _text(i)}] for i in range(N)]
    ),
    "list_of_string_view": lambda: pa.array(
        [_strings(i) for i in range(N)], pa.list_(pa.string_view())
    ),
    "map": lambda: pa.array(
        [None if i % 6 == 1 else [(f"k{i}", _ints(i)), ("é", None)] for i in range(N)],
        pa.map_(pa.string(), pa.list_(pa.int64())),
    ),
    "map_of_views": lambda: pa.array(
        [None if i % 6 == 1 else [(f"key-{i}-long-enough", _text(i))] for i in range(N)],
        pa.map_(pa.string_view(), pa.string_view()),
    ),
    "decimal32": lambda: pa.array(
        [None if i % 4 == 0 else decimal.Decimal(i) / 4 for i in range(N)], pa.decimal32(7, 2)
    ),
    "decimal64": lambda: pa.array(
        [None if i % 4 == 0 else decimal.Decimal(-i) / 8 for i in range(N)], pa.decimal64(15, 3)
    ),
    "decimal128": lambda: pa.array(
        [None if i % 4 == 0 else decimal.Decimal(10**30 + i) for i in range(N)],
        pa.decimal128(38, 2),
    ),
    "decimal256": lambda: pa.array(
        [None if i % 4 == 0 else decimal.Decimal(10**45 + i) for i in range(N)],
        pa.decimal256(50, 2),
    ),
    "timestamp_tz": lambda: pa.array(
        [None if i % 5 == 0 else T0 + i * 3_600_000_000 for i in range(N)],
        pa.timestamp("us", "Europe/Paris"),
    ),
    "timestamp_ns_utc": lambda: pa.array(
        [None if i % 5 == 0 else (T0 + i) * 1000 for i in range(N)], pa.timestamp("ns", "UTC")
    ),
    # A fixed-offset zone: valid Arrow, which polars cannot hold.
    "timestamp_offset_zone": lambda: pa.array(
        [None if i % 5 == 0 else T0 + i for i in range(N)], pa.timestamp("us", "+05:30")
    ),
    "timestamp_s": lambda: pa.array(
        [None if i % 5 == 0 else 1_700_000_000 + i for i in range(N)], pa.timestamp("s")
    ),
    "duration_s": lambda: pa.array(
        [None if i % 5 == 0 else i - 10 for i in range(N)], pa.duration("s")
    ),
    "duration_ns": lambda: pa.array(
        [None if i % 5 == 0 else i * 1000 for i in range(N)], pa.duration("ns")
    ),
    "large_string": lambda: pa.array([_text(i) for i in range(N)], pa.large_string()),
    "large_binary": lambda: pa.array([_blob(i) for i in range(N)], pa.large_binary()),
    "fixed_size_binary": lambda: pa.array(
        [None if i % 3 == 0 else bytes([i, 255 - i, 0, 7]) for i in range(N)], pa.binary(4)
    ),
    "fixed_size_list": lambda: pa.array(
        [None if i % 3 == 0 else [i, None, 3] for i in range(N)], pa.list_(pa.int16(), 3)
    ),
    "null": lambda: pa.nulls(N),
    "date32": lambda: pa.array([None if i % 5 == 0 else 19_000 + i for i in range(N)], pa.date32()),
    "time64": lambda: pa.array([None if i % 5 == 0 else i for i in range(N)], pa.time64("us")),
    "float16": lambda: pa.array(
        [None if i % 5 == 0 else i / 2 for i in range(N)], pa.float32()
    ).cast(pa.float16()),
    "interval": lambda: pa.array(
        [None if i % 5 == 0 else (i, -i, i * 1000) for i in range(N)],
        pa.month_day_nano_interval(),
    ),
    "dense_union": lambda: pa.UnionArray.from_dense(
        pa.array([i % 2 for i in range(N)], pa.int8()),
        pa.array([i // 2 for i in range(N)], pa.int32()),
        [pa.array(range(N), pa.int64()), pa.array([_text(i) for i in range(N)])],
        ["n", "s"],
    ),
}

#: Types polars cannot hold: the polars reader refuses them.
POLARS_REFUSES = {"decimal256", "interval", "dense_union", "timestamp_offset_zone"}
#: Types Spark has no equivalent for: the Spark source refuses them.
SPARK_REFUSES = {"decimal256", "time64", "interval", "dense_union"}
#: What the pyarrow readers return when it is not the input type (dictionaries are decoded).
STORED_AS = {
    "dictionary": pa.string(),
    "dictionary_of_views": pa.string_view(),
    "dictionary_in_struct": pa.struct([("d", pa.string())]),
}


def table_of(name: str) -> pa.Table:
    return pa.table({"i": pa.array(range(N), pa.int64()), "v": BUILDERS[name]()})


def by_row(ids: pa.ChunkedArray | pa.Array, values: pa.ChunkedArray | pa.Array) -> dict[int, Any]:
    """Values by row id, as Python objects; UUIDs as bytes and maps as lists of pairs."""
    out = {}
    for i, v in zip(ids.to_pylist(), values.to_pylist(), strict=True):
        out[i] = _normal(v)
    return out


def _normal(v: Any) -> Any:
    if isinstance(v, uuid.UUID):
        return v.bytes
    if isinstance(v, dict):
        return {k: _normal(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_normal(x) for x in v]
    if isinstance(v, np.floating):
        return float(v)
    return v


def write_and_compact(table: pa.Table, url: str, options: dict[str, Any] | None = None) -> None:
    half = N // 2
    for k, part in enumerate((table.slice(0, half), table.slice(half))):
        ash.write_dataset(
            part,
            url,
            num_subpartitions=SUBPARTITIONS,
            by="i",
            memory=600,  # a region every few rows: chunks of one row and empty ones
            mode="append" if k else "overwrite",
            storage_options=options,
        )
    report = ash.compact(url, storage_options=options)
    assert report.files_after == 1


@pytest.fixture(scope="module")
def datasets(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("types")
    paths = {}
    for name in BUILDERS:
        paths[name] = str(root / name)
        write_and_compact(table_of(name), paths[name])
    return paths


def expected_type(name: str) -> pa.DataType:
    return STORED_AS.get(name, BUILDERS[name]().type)


@pytest.mark.parametrize("name", list(BUILDERS))
def test_pyarrow_readers_return_every_type_as_written(datasets: dict[str, str], name: str) -> None:
    table = table_of(name)
    want = by_row(table["i"], table["v"])
    dataset = ash.open_dataset(datasets[name])
    assert dataset.schema.field("v").type == expected_type(name)
    for verify in (False, True):
        got = dataset.read(range(SUBPARTITIONS), verify=verify)
        assert got.schema.field("v").type == expected_type(name)
        assert by_row(got["i"], got["v"]) == want
    # The one file of the compacted dataset (the files it replaced stay until vacuum).
    (entry,) = dataset.manifest.files
    only = Path(datasets[name]) / entry.data
    whole = ash.open_file(str(only))
    rows: dict[int, Any] = {}
    for s in range(SUBPARTITIONS):
        part = whole.read(s, verify=True)
        rows.update(by_row(part["i"], part["v"]))
    assert rows == want
    # every rule of spec.md, every chunk's CRC32C and every row's subpartition
    report = ash.validate_dataset(datasets[name], deep=True)
    assert report.ok, report.to_dict()
    # Any Arrow reader opens the data file (for view types, a reader that knows them).
    assert by_row(*pa.ipc.open_file(str(only)).read_all().select(["i", "v"]).columns) == want


@pytest.mark.s3
def test_every_type_on_object_storage(s3_endpoint: Any, s3_bucket: str) -> None:
    options = s3_endpoint.storage_options()
    table = pa.table({"i": pa.array(range(N), pa.int64())})
    for name in BUILDERS:
        table = table.append_column(name, BUILDERS[name]())
    url = f"{s3_bucket}/types"
    write_and_compact(table, url, options)
    dataset = ash.open_dataset(url, options)
    for verify in (False, True):
        got = dataset.read(range(SUBPARTITIONS), verify=verify)
        for name in BUILDERS:
            assert got.schema.field(name).type == expected_type(name), name
            assert by_row(got["i"], got[name]) == by_row(table["i"], table[name]), name


@pytest.mark.parametrize("name", list(BUILDERS))
def test_polars_reads_the_plain_form_or_refuses_by_name(
    datasets: dict[str, str], name: str
) -> None:
    pl = pytest.importorskip("polars")
    import arrowshuffle.polars as ashpl

    if name in POLARS_REFUSES:
        with pytest.raises(SchemaMismatchError, match=r"column 'v' has type .*polars cannot"):
            ashpl.scan_dataset(datasets[name])
        return
    frame = ashpl.scan_dataset(datasets[name]).collect()
    table = table_of(name)
    want = by_row(table["i"], table["v"])
    got = {i: _normal(v) for i, v in zip(frame["i"].to_list(), frame["v"].to_list(), strict=True)}
    if name.startswith("map"):  # polars gives a map as a dict
        got = {i: None if v is None else [[k, x] for k, x in v.items()] for i, v in got.items()}
    assert got == want
    # projection and predicates still apply
    some = ashpl.scan_dataset(datasets[name]).filter(pl.col("i") < 5).select("v").collect()
    assert some.height == 5


@pytest.mark.spark
def test_spark_reads_every_type_it_has(spark: Any, tmp_path: Path) -> None:
    import arrowshuffle.spark as ashspark

    ashspark.register(spark)
    names = [n for n in BUILDERS if n not in SPARK_REFUSES]
    table = pa.table({"i": pa.array(range(N), pa.int64())})
    for name in names:
        table = table.append_column(name, BUILDERS[name]())
    path = str(tmp_path / "spark")
    write_and_compact(table, path)
    df = spark.read.format("arrowshuffle").load(path)
    got = df.toArrow()
    assert got.num_rows == N
    for name in names:
        assert by_row(got["i"], got[name]) == by_row(table["i"], table[name]), name
    # The DataFrame writer stores what Spark hands it (Spark's types) with the same values.
    again = str(tmp_path / "again")
    (
        df.write.format("arrowshuffle")
        .option("num_subpartitions", SUBPARTITIONS)
        .option("partition_by", "string_view")
        .mode("overwrite")
        .save(again)
    )
    back = ash.open_dataset(again).read(range(SUBPARTITIONS))
    assert back.schema.field("string_view").type == pa.string()
    for name in names:
        assert by_row(back["i"], back[name]) == by_row(table["i"], table[name]), name


@pytest.mark.spark
def test_spark_reads_run_end_encoded_columns_longer_than_their_run_ends(
    spark: Any, tmp_path: Path
) -> None:
    # The reader joins a task's batches (48,000 rows here) before Spark takes them: an int16
    # run-end encoded column holds at most 32,767 rows, and pyarrow cannot join one of uuids.
    import arrowshuffle.spark as ashspark

    ashspark.register(spark)
    batches = []
    for b, rows in enumerate((20_000, 20_000, 8_000)):
        ids = np.arange(b * 20_000, b * 20_000 + rows, dtype=np.int64)
        ends = pa.array(np.arange(100, rows + 1, 100, dtype=np.int16))
        uuids = pa.array([i.to_bytes(16, "big") for i in range(rows // 100)], pa.binary(16))
        batches.append(
            pa.record_batch(
                {
                    "i": ids,
                    "top": pa.RunEndEncodedArray.from_arrays(ends, pa.array(ids[::100] // 100)),
                    "ids": pa.RunEndEncodedArray.from_arrays(
                        ends.cast(pa.int32()), uuids.cast(pa.uuid())
                    ),
                }
            )
        )
    table = pa.Table.from_batches(batches)
    path = str(tmp_path / "runs")
    ash.write_dataset(table, path, num_subpartitions=1, by="i")
    got = spark.read.format("arrowshuffle").load(path).toArrow()
    assert got.num_rows == table.num_rows
    assert by_row(got["i"], got["top"]) == by_row(table["i"], table["top"])
    assert by_row(got["i"], got["ids"]) == by_row(table["i"], table["ids"])


@pytest.mark.spark
@pytest.mark.parametrize("name", sorted(SPARK_REFUSES))
def test_spark_refuses_types_it_lacks_by_name(
    spark: Any, datasets: dict[str, str], name: str
) -> None:
    import arrowshuffle.spark as ashspark

    ashspark.register(spark)
    with pytest.raises(
        Exception,
        match=r"SchemaMismatchError: field 'v'.*no Spark|SchemaMismatchError: field 'v'.*38 digits",
    ):
        spark.read.format("arrowshuffle").load(datasets[name]).schema  # noqa: B018


# ---------------------------------------------------------------------- keys


KEY_TYPES = {
    "string_view": lambda: pa.array([_text(i) for i in range(N)], pa.string_view()),
    "binary_view": lambda: pa.array([_blob(i) for i in range(N)], pa.binary_view()),
    "run_end_encoded": BUILDERS["run_end_encoded"],
    "extension_uuid": BUILDERS["extension_uuid"],
    "dictionary_of_views": lambda: pa.array(
        [_text(i) for i in range(N)], pa.string_view()
    ).dictionary_encode(),
    "large_string": BUILDERS["large_string"],
    "decimal32": BUILDERS["decimal32"],
}


@pytest.mark.spark
def test_hash_keys_of_view_encoded_and_extension_types_partition_like_spark(
    spark: Any, tmp_path: Path
) -> None:
    """Subpartition s holds the rows Spark's repartition(n, k) puts in partition s."""
    from pyspark.sql import functions as F

    import arrowshuffle.spark as ashspark

    ashspark.register(spark)
    for name, build in KEY_TYPES.items():
        table = pa.table({"i": pa.array(range(N), pa.int64()), "k": build()})
        path = str(tmp_path / name)
        ash.write_dataset(table, path, num_subpartitions=7, by="k")
        dataset = ash.open_dataset(path)
        ours = {}
        for s in range(7):
            for i in dataset.read(s)["i"].to_pylist():
                ours[i] = s
        df = spark.read.format("arrowshuffle").load(path)
        theirs = df.repartition(7, "k").select("i", F.spark_partition_id().alias("p")).toArrow()
        assert dict(zip(theirs["i"].to_pylist(), theirs["p"].to_pylist(), strict=True)) == ours, (
            name
        )


@pytest.mark.parametrize(
    ("name", "partitioner"),
    [
        ("list_view", "hash"),
        ("struct_of_views", "hash"),
        ("map", "key_group"),
        ("interval", "hash"),
        ("interval", "range"),
        ("extension_uuid", "range"),
        ("dense_union", "range"),
    ],
)
def test_key_columns_of_types_without_a_hash_or_order_are_refused_by_name(
    tmp_path: Path, name: str, partitioner: str
) -> None:
    table = pa.table({"i": pa.array(range(N)), "k": BUILDERS[name]()})
    with pytest.raises(InvalidOptionError, match=r"key column 'k' has type|sortable key"):
        ash.write(table, tmp_path / "f.arrow", num_subpartitions=4, partitioner=partitioner, by="k")
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("name", ["decimal32", "decimal64", "string_view", "binary_view"])
def test_range_keys_of_narrow_decimals_and_views(tmp_path: Path, name: str) -> None:
    table = pa.table({"i": pa.array(range(N)), "k": BUILDERS[name]()})
    ash.write(table, tmp_path / "f.arrow", num_subpartitions=4, partitioner="range", by="k")
    assert ash.open_file(tmp_path / "f.arrow").read(range(4)).num_rows == N


# ---------------------------------------------------------------------- writers


def test_parquet_with_view_types_writes_as_read(tmp_path: Path) -> None:
    """pyarrow reads Parquet written from view types back as view types."""
    source = pa.table(
        {
            "l_orderkey": pa.array(range(N), pa.int64()),
            "l_comment": pa.array([_text(i) for i in range(N)], pa.string_view()),
            "l_shipmode": pa.array([_blob(i) for i in range(N)], pa.binary_view()),
        }
    )
    pq.write_table(source, tmp_path / "lineitem.parquet")
    table = pq.read_table(tmp_path / "lineitem.parquet")
    assert table.schema.field("l_comment").type == pa.string_view()
    ash.write_dataset(table, tmp_path / "ds", num_subpartitions=8, by="l_comment")
    got = ash.open_dataset(tmp_path / "ds").read(range(8))
    assert got.schema == table.schema
    assert by_row(got["l_orderkey"], got["l_comment"]) == by_row(
        table["l_orderkey"], table["l_comment"]
    )


def test_file_writer_takes_view_batches_with_explicit_ids(tmp_path: Path) -> None:
    table = table_of("struct_of_views")
    ids = np.arange(N) % 3
    with ash.ShuffleFileWriter(tmp_path / "f.arrow", table.schema, 3, memory=500) as writer:
        for batch in table.to_batches(max_chunksize=7):
            writer.write(batch, subpartitions=ids[: batch.num_rows])
    f = ash.open_file(tmp_path / "f.arrow")
    assert f.schema == table.schema
    assert f.read(range(3)).num_rows == N


def test_polars_frames_write_and_read_back(tmp_path: Path) -> None:
    pl = pytest.importorskip("polars")
    import arrowshuffle.polars as ashpl

    frame = pl.DataFrame(
        {"i": list(range(N)), "s": [_text(i) for i in range(N)], "b": [_blob(i) for i in range(N)]}
    )
    ash.write_dataset(frame, tmp_path / "ds", num_subpartitions=4, by="s")
    back = ashpl.scan_dataset(tmp_path / "ds").sort("i").collect()
    assert back.equals(frame)


def test_sliced_run_end_encoded_beside_a_dictionary_column(tmp_path: Path) -> None:
    """Decoding the dictionary column leaves the other columns (a cast would lose the slice)."""
    table = pa.table(
        {"i": pa.array(range(N)), "r": BUILDERS["run_end_encoded"](), "d": BUILDERS["dictionary"]()}
    )
    part = table.slice(N // 2)
    ash.write(part, tmp_path / "f.arrow", num_subpartitions=3, by="i")
    got = ash.open_file(tmp_path / "f.arrow").read(range(3))
    assert by_row(got["i"], got["r"]) == by_row(part["i"], part["r"])
    assert by_row(got["i"], got["d"]) == by_row(part["i"], part["d"])


def _dictionary_containers() -> dict[str, pa.Array]:
    """Columns holding a dictionary inside a container, with null rows, ``N`` rows each."""
    words = pa.array([_text(i) for i in range(3 * N)]).dictionary_encode()
    views = pa.DictionaryArray.from_arrays(words.indices, words.dictionary.cast(pa.string_view()))
    runs = pa.RunEndEncodedArray.from_arrays(
        pa.array(np.arange(3, N + 1, 3, dtype=np.int32)), pa.array(range(N // 3))
    )
    mask = pa.array(np.arange(N) % 7 == 3)
    offsets = pa.array(np.arange(0, 3 * N + 1, 3, dtype=np.int32))
    return {
        # A cast of the struct also cast its run-end encoded child, dropping the slice offset.
        "struct_of_runs_and_dictionary": pa.StructArray.from_arrays(
            [runs, words[:N]], ["r", "d"], mask=mask
        ),
        "struct_of_view_dictionary": pa.StructArray.from_arrays([views[:N]], ["d"], mask=mask),
        "list_of_view_dictionary": pa.ListArray.from_arrays(offsets, views, mask=mask),
        "map_of_dictionary": pa.MapArray.from_arrays(
            offsets, pa.array([f"k{i}" for i in range(3 * N)]), words
        ),
        "large_list_view_of_dictionary": pa.LargeListViewArray.from_arrays(
            pa.array(np.arange(N, dtype=np.int64)[::-1].copy()),
            pa.array(np.arange(N, dtype=np.int64) % 4),
            words,
            mask=mask,
        ),
        "fixed_size_list_of_view_dictionary": pa.FixedSizeListArray.from_arrays(
            views[: 2 * N], 2, mask=mask
        ),
        "run_end_encoded_of_dictionary": pa.RunEndEncodedArray.from_arrays(
            runs.run_ends, words[: N // 3]
        ),
    }


@pytest.mark.parametrize("name", list(_dictionary_containers()))
def test_dictionaries_inside_containers_are_decoded_and_nothing_else_changes(
    tmp_path: Path, name: str
) -> None:
    values = _dictionary_containers()[name]
    table = pa.table({"i": pa.array(range(N), pa.int64()), "v": values})
    for part in (table, table.slice(N // 2 - 1)):
        path = tmp_path / f"{len(part)}.arrow"
        ash.write(part, path, num_subpartitions=3, by="i")
        got = ash.open_file(path).read(range(3), verify=True)
        assert not has_dictionary(got.schema.field("v").type)
        assert by_row(got["i"], got["v"]) == by_row(part["i"], part["v"])
        assert ash.validate_file(path, deep=True).ok


@pytest.mark.parametrize("name", ["dictionary", "dictionary_of_views"])
def test_range_keys_of_dictionaries_sample_the_decoded_values(tmp_path: Path, name: str) -> None:
    table = pa.table({"i": pa.array(range(N)), "k": BUILDERS[name]()})
    ash.write(table, tmp_path / "f.arrow", num_subpartitions=3, partitioner="range", by="k")
    assert ash.open_file(tmp_path / "f.arrow").read(range(3)).num_rows == N


def test_unions_holding_views_are_refused_by_name(tmp_path: Path) -> None:
    union = pa.UnionArray.from_sparse(
        pa.array([0, 1] * (N // 2), pa.int8()),
        [pa.array(range(N)), pa.array([_text(i) for i in range(N)], pa.string_view())],
    )
    table = pa.table({"i": pa.array(range(N)), "u": union})
    with pytest.raises(SchemaMismatchError, match=r"column 'u' has type sparse_union"):
        ash.write(table, tmp_path / "f.arrow", num_subpartitions=2)


# ---------------------------------------------------------------------- the gather kernel


@pytest.mark.parametrize("name", list(BUILDERS))
@pytest.mark.parametrize("window", [(0, N), (5, 17)])
def test_gather_and_plain_forms_keep_every_value(name: str, window: tuple[int, int]) -> None:
    array = BUILDERS[name]().slice(*window)
    rows = np.random.default_rng(len(name)).integers(0, len(array), 3 * len(array))
    gathered = gather(array, rows)
    gathered.validate(full=True)
    assert gathered.type == array.type
    assert _normal(gathered.to_pylist()) == [_normal(array[int(r)].as_py()) for r in rows]
    if name == "dense_union":
        return
    plain = to_plain(array)
    plain.validate(full=True)
    assert plain.type == plain_type(array.type)
    assert _normal(plain.to_pylist()) == _normal(array.to_pylist())


def test_take_batch_is_take_where_take_works() -> None:
    table = pa.table({n: BUILDERS[n]() for n in ("struct", "list_view", "decimal128")})
    batch = table.to_batches()[0]
    order = pc.array_sort_indices(pa.array(np.arange(N)[::-1] % 4, pa.uint8()))
    assert all(takes(t) for t in batch.schema.types)
    assert take_batch(batch, order).equals(batch.take(order))
    assert not takes(pa.struct([("s", pa.string_view())]))
    assert takes(pa.list_view(pa.string_view()))  # a list view's take moves offsets only


# ---------------------------------------------------------------------- compact views


def _ipc_size(array: pa.Array) -> int:
    batch = pa.RecordBatch.from_arrays([array], names=["v"])
    return len(batch.serialize())


@pytest.mark.parametrize("name", list(BUILDERS))
@pytest.mark.parametrize("window", [(0, N), (37, 23), (1000, 5)])
def test_compact_views_keeps_every_value_and_drops_unused_bytes(
    name: str, window: tuple[int, int]
) -> None:
    # 200 copies concatenated: views keep each copy's buffers, more than is worth compacting.
    array = pa.concat_arrays([BUILDERS[name]()] * 200).slice(*window)
    compact = compact_views(array)
    compact.validate(full=True)
    assert compact.type == array.type
    assert _normal(compact.to_pylist()) == _normal(array.to_pylist())
    if not holds_views(array.type) or pa.types.is_dictionary(array.type):
        assert compact is array
    elif not pa.types.is_union(array.type):
        # about as small as the same rows built afresh in offset-based types, where the slice
        # carried all 200 copies
        fresh = pa.array(array.to_pylist(), _offset_based(array.type))
        assert _ipc_size(compact) <= 2 * _ipc_size(fresh) + 1024
        assert _ipc_size(compact) <= _ipc_size(array)


def _offset_based(t: pa.DataType) -> pa.DataType:
    """``t`` with its view types replaced by their offset-based twins."""
    if pa.types.is_string_view(t):
        return pa.string()
    if pa.types.is_binary_view(t):
        return pa.binary()
    children = [_offset_based(c) for c in child_types(t)]
    if pa.types.is_list_view(t):
        return pa.list_(t.value_field.with_type(children[0]))
    if pa.types.is_large_list_view(t):
        return pa.large_list(t.value_field.with_type(children[0]))
    return with_child_types(t, children) if children else t


@pytest.mark.parametrize(
    "name", ["string_view", "binary_view", "large_list_view", "struct_of_views", "map_of_views"]
)
def test_files_of_view_columns_are_as_small_as_their_offset_based_twins(
    tmp_path: Path, name: str
) -> None:
    # 64 subpartitions, batches of 1,000 rows: each subpartition's chunk is cut out of every
    # sorted batch, whose views point into buffers that hold all the batch's rows.
    copies = 500
    values = pa.concat_arrays([BUILDERS[name]()] * copies)
    table = pa.table({"i": pa.array(range(len(values)), pa.int64()), "v": values})
    twin_type = _offset_based(values.type)
    twin = pa.table({"i": table["i"], "v": pa.array(values.to_pylist(), twin_type)})
    sizes = {}
    for label, t in (("views", table), ("twin", twin)):
        path = tmp_path / f"{label}.arrow"
        batches = pa.RecordBatchReader.from_batches(t.schema, t.to_batches(max_chunksize=1000))
        ash.write(batches, path, num_subpartitions=64, by="i", compression="none")
        sizes[label] = path.stat().st_size
        got = ash.open_file(path).read(range(64))
        assert got.schema == t.schema
        assert by_row(got["i"], got["v"]) == by_row(t["i"], t["v"])
    assert sizes["views"] <= 2 * sizes["twin"], sizes  # a view is 16 bytes, an offset 4


class _Tagged(pa.ExtensionType):
    """A user's own extension type: pyarrow 26 cannot hash it (it compares by value)."""

    def __init__(self, storage: pa.DataType) -> None:
        super().__init__(storage, "arrowshuffle.test.tagged")

    def __arrow_ext_serialize__(self) -> bytes:
        return str(self.storage_type).encode()

    @classmethod
    def __arrow_ext_deserialize__(cls, storage_type: pa.DataType, serialized: bytes) -> _Tagged:
        return cls(storage_type)


def _edge_columns() -> dict[str, pa.Array]:
    """Columns that broke the writer or its view compaction once, 300 rows each."""
    n = 300
    blobs = pa.array(
        [None if i % 7 == 3 else b"blob-%04d-" % i + b"\x01" * (i % 30) for i in range(n)],
        pa.binary_view(),
    )
    reversed_offsets = pa.array(np.arange(n, dtype=np.int32)[::-1].copy())
    sizes = pa.array((np.arange(n) % 3 == 0).astype(np.int32))
    windows = np.minimum(np.arange(n, dtype=np.int32), n - 20)  # overlapping: values shared
    inner = pa.ListViewArray.from_arrays(reversed_offsets, sizes, blobs)
    ends = pa.array(np.arange(3, n + 1, 3, dtype=np.int32))
    runs = pa.RunEndEncodedArray.from_arrays(
        ends, pa.array([f"run-{i}" if i % 5 else None for i in range(n // 3)])
    )
    tagged = pa.ExtensionArray.from_storage(
        _Tagged(pa.int64()), pa.array([i if i % 4 else None for i in range(n)], pa.int64())
    )
    list_sizes = np.arange(n, dtype=np.int32) % 3
    return {
        "tagged_int": pa.ExtensionArray.from_storage(_Tagged(pa.int64()), pa.array(range(n))),
        "tagged_view": pa.ExtensionArray.from_storage(_Tagged(pa.binary_view()), blobs),
        "list_view_of_tagged_view": pa.ListViewArray.from_arrays(
            reversed_offsets,
            sizes,
            pa.ExtensionArray.from_storage(_Tagged(pa.binary_view()), blobs),
            mask=pa.array(np.arange(n) % 11 == 5),
        ),
        "empty_fixed_size_lists": pa.array(
            [None if i % 4 == 1 else [] for i in range(n)], pa.list_(pa.string_view(), 0)
        ),
        "overlapping_list_views": pa.ListViewArray.from_arrays(
            pa.array(windows), pa.array(np.full(n, 20, np.int32)), pa.array(np.arange(n))
        ),
        "nested_list_views": pa.LargeListViewArray.from_arrays(
            pa.array(np.arange(n, dtype=np.int64)[::-1] // 2),
            pa.array(np.arange(n, dtype=np.int64) % 4),
            inner,
        ),
        "struct_of_run_end_encoded": pa.StructArray.from_arrays(
            [runs, pa.array(range(n))], ["r", "n"], mask=pa.array(np.arange(n) % 7 == 2)
        ),
        "map_of_run_end_encoded": pa.MapArray.from_arrays(
            pa.array(np.arange(n + 1, dtype=np.int32)), pa.array([f"k{i}" for i in range(n)]), runs
        ),
        # pyarrow's concatenation has no builder for an extension inside run-end encoding.
        "run_end_encoded_of_tagged": pa.RunEndEncodedArray.from_arrays(ends, tagged[: n // 3]),
        "run_end_encoded_of_json": pa.RunEndEncodedArray.from_arrays(
            ends, pa.array([f'{{"run": {i}}}' for i in range(n // 3)]).cast(pa.json_())
        ),
        "list_of_run_end_encoded_of_tagged": pa.ListArray.from_arrays(
            pa.array(np.concatenate(([0], np.cumsum(list_sizes))).astype(np.int32)),
            pa.RunEndEncodedArray.from_arrays(
                pa.array(np.arange(1, int(list_sizes.sum()) + 1, dtype=np.int32)),
                tagged[: int(list_sizes.sum())],
            ),
            mask=pa.array(np.arange(n) % 9 == 4),
        ),
        "union_with_list_view": pa.UnionArray.from_dense(
            pa.array([i % 2 for i in range(n)], pa.int8()),
            pa.array([i // 2 for i in range(n)], pa.int32()),
            [pa.array(range(n), pa.int64()), inner],
            ["n", "l"],
        ),
    }


@pytest.mark.parametrize("name", list(_edge_columns()))
def test_edge_columns_write_and_read_back_and_compact_no_larger(tmp_path: Path, name: str) -> None:
    with contextlib.suppress(pa.ArrowKeyError):  # registered by an earlier case
        pa.register_extension_type(_Tagged(pa.null()))
    values = _edge_columns()[name]
    table = pa.table({"i": pa.array(range(len(values)), pa.int64()), "v": values})
    for part in (values, values.slice(40, 200)):
        compact = compact_views(part)
        compact.validate(full=True)
        assert compact.type == part.type
        assert compact.to_pylist() == part.to_pylist()
        assert _ipc_size(compact) <= _ipc_size(part)
    path = tmp_path / "f.arrow"
    batches = pa.RecordBatchReader.from_batches(table.schema, table.to_batches(max_chunksize=50))
    ash.write(batches, path, num_subpartitions=4, by="i", compression="none", memory=4096)
    got = ash.open_file(path).read(range(4), verify=True)
    assert got.schema == table.schema
    assert by_row(got["i"], got["v"]) == by_row(table["i"], table["v"])
    assert ash.validate_file(path, deep=True).ok


@pytest.mark.parametrize(
    "name",
    ["run_end_encoded_of_tagged", "run_end_encoded_of_json", "list_of_run_end_encoded_of_tagged"],
)
def test_run_end_encoded_extensions_compact_into_fewer_batches(tmp_path: Path, name: str) -> None:
    # Re-batching concatenates the tiny chunks of two appends: pyarrow's own concatenation
    # raises for an extension inside run-end encoding.
    with contextlib.suppress(pa.ArrowKeyError):
        pa.register_extension_type(_Tagged(pa.null()))
    values = _edge_columns()[name]
    table = pa.table({"i": pa.array(range(len(values)), pa.int64()), "v": values})
    url = str(tmp_path / "d")
    for k, part in enumerate((table.slice(0, 140), table.slice(140))):
        ash.write_dataset(
            part, url, num_subpartitions=4, by="i", memory=2048, mode="append" if k else "overwrite"
        )
    before = ash.open_dataset(url).read(range(4)).to_batches()
    report = ash.compact(url, rebatch=True)
    assert report.files_after == 1
    after = ash.open_dataset(url).read(range(4), verify=True)
    assert len(after.to_batches()) < len(before)
    assert by_row(after["i"], after["v"]) == by_row(table["i"], table["v"])
    assert ash.validate_dataset(url, deep=True).ok


def _runs_of(values: pa.Array, rng: np.random.Generator) -> pa.Array:
    """``values`` run-end encoded: runs of random lengths, each holding its first value."""
    n = len(values)
    cuts = np.flatnonzero(rng.random(n - 1) < 0.4) + 1 if n > 1 else np.zeros(0, np.int64)
    starts = np.concatenate(([0], cuts)).astype(np.int64) if n else np.zeros(0, np.int64)
    ends = np.append(cuts, n).astype(np.int32) if n else np.zeros(0, np.int32)
    return pa.RunEndEncodedArray.from_arrays(pa.array(ends), values.take(pa.array(starts)))


def _holding_runs(kind: str, n: int, rng: np.random.Generator) -> pa.Array:
    """``n`` rows of ``kind``, a type that holds a user's extension inside run-end encoding."""

    def tagged(m: int) -> pa.Array:
        ints = pa.array(rng.integers(0, 5, m), mask=rng.random(m) < 0.2)
        return pa.ExtensionArray.from_storage(_Tagged(pa.int64()), ints)

    mask = pa.array(rng.random(n) < 0.2)
    sizes = rng.integers(0, 3, n)
    offsets = pa.array(np.concatenate(([0], np.cumsum(sizes))).astype(np.int32))
    m = int(sizes.sum())
    if kind == "runs":
        return _runs_of(tagged(n), rng)
    if kind == "struct":
        return pa.StructArray.from_arrays([_runs_of(tagged(n), rng)], ["r"], mask=mask)
    if kind == "list":
        return pa.ListArray.from_arrays(offsets, _runs_of(tagged(m), rng), mask=mask)
    if kind == "map":
        keys = pa.array(np.arange(m, dtype=np.int64))
        return pa.MapArray.from_arrays(offsets, keys, _runs_of(tagged(m), rng))
    if kind == "fixed_size_list":
        return pa.FixedSizeListArray.from_arrays(_runs_of(tagged(2 * n), rng), 2, mask=mask)
    starts = rng.integers(0, 2 * n + 1, n)
    view_sizes = rng.integers(0, 2 * n - starts + 1)
    return pa.ListViewArray.from_arrays(
        pa.array(starts.astype(np.int32)),
        pa.array(view_sizes.astype(np.int32)),
        _runs_of(tagged(2 * n), rng),
    )


@settings(max_examples=150, deadline=None)
@given(
    kind=st.sampled_from(["runs", "struct", "list", "map", "fixed_size_list", "list_view"]),
    seed=st.integers(0, 2**32 - 1),
)
def test_concat_arrays_joins_slices_pyarrow_cannot(kind: str, seed: int) -> None:
    rng = np.random.default_rng(seed)
    pieces = []
    for _ in range(int(rng.integers(1, 5))):
        whole = _holding_runs(kind, int(rng.integers(1, 12)), rng)
        start = int(rng.integers(0, len(whole) + 1))
        pieces.append(whole.slice(start, int(rng.integers(0, len(whole) - start + 1))))
    assert not concatenates(pieces[0].type)
    joined = concat_arrays(pieces)
    joined.validate(full=True)
    assert joined.type == pieces[0].type
    assert joined.to_pylist() == [row for piece in pieces for row in piece.to_pylist()]


def _narrow_runs_batches() -> list[pa.RecordBatch]:
    """Four batches of 12,000 rows with 16-bit run ends: at top level, and inside lists of two."""
    batches = []
    for b in range(4):
        rows = 12_000
        ids = np.arange(b * rows, (b + 1) * rows, dtype=np.int64)
        top = pa.RunEndEncodedArray.from_arrays(
            pa.array(np.arange(100, rows + 1, 100, dtype=np.int16)), pa.array(ids[::100] // 100)
        )
        inner = pa.RunEndEncodedArray.from_arrays(
            pa.array(np.append(np.arange(7, 2 * rows, 7), 2 * rows).astype(np.int16)),
            pa.array(np.arange(-(-2 * rows // 7), dtype=np.int64) + b * 10_000),
        )
        nested = pa.ListArray.from_arrays(
            pa.array(np.arange(0, 2 * rows + 1, 2, dtype=np.int32)), inner
        )
        batches.append(pa.record_batch({"i": ids, "top": top, "nested": nested}))
    return batches


def test_narrow_run_ends_never_overflow_when_batches_are_joined(tmp_path: Path) -> None:
    # 48,000 rows of one subpartition, with 16-bit run ends (at most 32,767 rows, or values
    # inside lists, per array): the writer and compaction's re-batching join batches only
    # while the run ends fit.
    batches = _narrow_runs_batches()
    table = pa.Table.from_batches(batches)
    want = {k: by_row(table["i"], table[k]) for k in ("top", "nested")}
    url = str(tmp_path / "d")
    for k in range(2):
        part = pa.Table.from_batches(batches[2 * k : 2 * k + 2])
        ash.write_dataset(
            part, url, num_subpartitions=1, by="i", mode="append" if k else "overwrite"
        )
    for step in ("written", "compacted"):
        got = ash.open_dataset(url).read(0, verify=True)
        for batch in got.to_batches():
            batch.validate(full=True)
        assert {k: by_row(got["i"], got[k]) for k in ("top", "nested")} == want, step
        assert ash.validate_dataset(url, deep=True).ok
        if step == "written":
            assert ash.compact(url, rebatch=True).files_after == 1


def test_compact_views_reads_a_views_buffer_longer_than_its_rows() -> None:
    # A valid array may have more view bytes than 16 per row (here one spare view, half of it).
    values = pa.array(["x" * 40, None, "short", "y" * 5000], pa.string_view())
    validity, views, *data = values.buffers()
    longer = pa.py_buffer(views.to_pybytes() + b"\0" * 8)
    array = pa.Array.from_buffers(
        pa.string_view(), 3, [validity, longer, *data], null_count=1, offset=0
    )
    array.validate(full=True)
    assert compact_views(array).to_pylist() == ["x" * 40, None, "short"]


@given(
    values=st.lists(st.one_of(st.none(), st.binary(max_size=40)), min_size=1, max_size=60),
    rows=st.lists(
        st.tuples(st.integers(0, 59), st.integers(0, 60), st.booleans()), min_size=1, max_size=60
    ),
    window=st.tuples(st.integers(0, 40), st.integers(0, 40)),
    large=st.booleans(),
)
@settings(max_examples=200, deadline=None)
def test_compact_views_of_random_list_views(
    values: list[bytes | None],
    rows: list[tuple[int, int, bool]],
    window: tuple[int, int],
    large: bool,
) -> None:
    # Out-of-order, overlapping and empty views, null rows with any offset and size.
    child = pa.array(values, pa.binary_view())
    starts = [start % len(values) for start, _, _ in rows]
    sizes = [
        min(size, len(values) - start) for start, (_, size, _) in zip(starts, rows, strict=True)
    ]
    index = pa.int64() if large else pa.int32()
    kind = pa.LargeListViewArray if large else pa.ListViewArray
    array = kind.from_arrays(
        pa.array(starts, index),
        pa.array(sizes, index),
        child,
        mask=pa.array([null for _, _, null in rows]),
    )
    part = array.slice(min(window[0], len(array)), window[1])
    compact = compact_views(part)
    compact.validate(full=True)
    assert compact.type == part.type
    assert compact.to_pylist() == part.to_pylist()
    # shared values stay shared (a few bytes of buffer padding may differ)
    assert _ipc_size(compact) <= _ipc_size(part) + 64
