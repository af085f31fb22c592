"""The ``arrowshuffle`` Spark data source: writer, reader, and Spark's own partitioning as oracle.

Two kinds of tests:

* in-process (no JVM): the data source classes driven directly, as Spark drives them, on
  hypothesis-drawn rows of every Spark type; fast, so they carry the many examples;
* on the shared local SparkSession: few, small jobs. The compatibility promise (subpartition
  ``s`` holds exactly the rows ``df.repartition(n, *cols)`` puts in partition ``s``) is checked
  against Spark itself, through ``spark_partition_id()``, for every key type.
"""

from __future__ import annotations

import datetime as dt
import decimal
import os
import random
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

pytest.importorskip("pyspark", reason="the Spark data source needs pyspark")

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql.datasource import CaseInsensitiveDict
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    ByteType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    ShortType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)

import arrowshuffle.spark as ash_spark
from arrowshuffle.format.errors import InvalidOptionError, MissingObjectError
from arrowshuffle.format.naming import MANIFEST_NAME, VERSIONS_DIR, version_name
from arrowshuffle.readers.dataset import open_dataset
from arrowshuffle.spark.datasource import ArrowShuffleDataSource, plan_partitions
from arrowshuffle.spark.options import parse_read_options, parse_write_options
from arrowshuffle.spark.types import spark_arrow_schema, spark_schema
from arrowshuffle.writers.vacuum import vacuum

#: What commits put beside the pairs: the manifest versions and the compatibility copy.
COMMITTED = {VERSIONS_DIR, MANIFEST_NAME}

# --------------------------------------------------------------------------- shared data

UTC = dt.timezone.utc
TEXTS = ["", "a", "é", "日本語", "🙂 emoji", "naïve café", "a\x00b", "x" * 40, "Ω≈ç√"]
DOUBLES = [0.0, -0.0, 1.5, -2.25, 1e300, -1e-300, float("inf"), float("-inf"), float("nan")]


def _maybe(rng: random.Random, value: Any) -> Any:
    return None if rng.random() < 0.12 else value


def key_rows(count: int = 240, seed: int = 5) -> list[tuple[Any, ...]]:
    """Rows with every key type, edge values and nulls; ``id`` is unique."""
    rng = random.Random(seed)
    rows = []
    for i in range(count):
        rows.append(
            (
                i,
                _maybe(rng, rng.choice([True, False])),
                _maybe(rng, rng.randint(-128, 127)),
                _maybe(rng, rng.randint(-(2**15), 2**15 - 1)),
                _maybe(rng, rng.choice([0, -1, 2**31 - 1, -(2**31), rng.randint(-999, 999)])),
                _maybe(rng, rng.choice([0, -1, 2**63 - 1, -(2**63), rng.getrandbits(40)])),
                _maybe(rng, rng.choice([0.0, -0.0, 3.5, -1.25, float("inf")])),
                _maybe(rng, rng.choice(DOUBLES)),
                _maybe(rng, decimal.Decimal(rng.randint(-(10**9), 10**9)).scaleb(-2)),
                _maybe(rng, decimal.Decimal(rng.randint(-(10**30), 10**30)).scaleb(-6)),
                _maybe(rng, rng.choice(TEXTS) + str(rng.randint(0, 30))),
                _maybe(rng, bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 9)))),
                _maybe(rng, dt.date(1970, 1, 1) + dt.timedelta(days=rng.randint(-40000, 40000))),
                _maybe(
                    rng,
                    dt.datetime(2001, 2, 3, tzinfo=UTC)
                    + dt.timedelta(microseconds=rng.randint(-(10**15), 10**15)),
                ),
                _maybe(
                    rng,
                    dt.datetime(1999, 12, 31, 23, 59)
                    + dt.timedelta(microseconds=rng.randint(-(10**14), 10**14)),
                ),
                _maybe(rng, [rng.randint(0, 9) for _ in range(rng.randint(0, 3))]),
                _maybe(rng, (rng.randint(0, 5), rng.choice(TEXTS))),
                _maybe(rng, {rng.choice(TEXTS): rng.randint(0, 9)}),
            )
        )
    return rows


KEY_SCHEMA = StructType(
    [
        StructField("id", LongType(), False),
        StructField("bool", BooleanType()),
        StructField("byte", ByteType()),
        StructField("short", ShortType()),
        StructField("int", IntegerType()),
        StructField("long", LongType()),
        StructField("float", FloatType()),
        StructField("double", DoubleType()),
        StructField("dec", DecimalType(10, 2)),
        StructField("dec38", DecimalType(38, 6)),
        StructField("str", StringType()),
        StructField("bin", BinaryType()),
        StructField("date", DateType()),
        StructField("ts", TimestampType()),
        StructField("ntz", TimestampNTZType()),
        StructField("arr", ArrayType(IntegerType())),
        StructField(
            "st", StructType([StructField("a", IntegerType()), StructField("b", StringType())])
        ),
        StructField("m", MapType(StringType(), IntegerType())),
    ]
)
N = 7


@pytest.fixture(scope="module")
def keys_df(spark):
    ash_spark.register(spark)
    df = spark.createDataFrame(key_rows(), KEY_SCHEMA).repartition(3)
    df.cache()
    df.count()
    yield df
    df.unpersist()


def expected_subpartitions(df, n: int, cols: list[str]) -> dict[int, set[int]]:
    """Spark's own answer: the ids of the rows ``repartition(n, *cols)`` puts in partition s."""
    from pyspark.sql import functions as F

    table = df.repartition(n, *cols).select("id", F.spark_partition_id().alias("s")).toArrow()
    out: dict[int, set[int]] = {s: set() for s in range(n)}
    for row_id, s in zip(table["id"].to_pylist(), table["s"].to_pylist(), strict=True):
        out[s].add(row_id)
    return out


def stored_subpartitions(path: str, n: int) -> dict[int, set[int]]:
    """What the dataset holds, read with the pyarrow reader, subpartition by subpartition."""
    dataset = open_dataset(path)
    assert dataset.num_subpartitions == n
    out = {}
    for s in range(n):
        ids = dataset.read(s, columns=["id"])["id"].to_pylist()
        assert len(ids) == len(set(ids)), "a row was stored twice"
        out[s] = set(ids)
    return out


# --------------------------------------------------------------------------- compatibility

# Spark computes the ids of the write helper itself, so the key type matters little there;
# the Python hash of the plain format writer must match Spark for every type.
JVM_KEYS = [["int"], ["str"], ["double"], ["dec38"], ["ts", "str"]]
PYTHON_KEYS = [
    ["bool", "byte", "short"],
    ["int"],
    ["long", "float"],
    ["double"],
    ["dec"],
    ["dec38"],
    ["str"],
    ["bin"],
    ["date", "ts", "ntz"],
    ["int", "str"],
]


@pytest.mark.spark
@pytest.mark.parametrize("cols", JVM_KEYS, ids=lambda c: "+".join(c))
def test_write_helper_places_rows_as_spark_repartition(keys_df, tmp_path, cols):
    path = str(tmp_path / "ds")
    ash_spark.write(keys_df, path, num_subpartitions=N, partition_by=cols)
    assert stored_subpartitions(path, N) == expected_subpartitions(keys_df, N, cols)
    assert open_dataset(path).partitioner["columns"] == cols


@pytest.mark.spark
@pytest.mark.parametrize("cols", PYTHON_KEYS, ids=lambda c: "+".join(c))
def test_format_writer_hashes_in_python_as_spark_repartition(keys_df, tmp_path, cols):
    path = str(tmp_path / "ds")
    (
        keys_df.write.format("arrowshuffle")
        .option("num_subpartitions", N)
        .option("partition_by", ",".join(cols))
        .mode("overwrite")
        .save(path)
    )
    assert stored_subpartitions(path, N) == expected_subpartitions(keys_df, N, cols)


# --------------------------------------------------------------------------- round trip


def sorted_rows(df) -> list[dict[str, Any]]:
    table = df.toArrow()
    return sorted(table.to_pylist(), key=lambda r: r["id"])


def same_values(a: Any, b: Any) -> bool:
    """Equality that also holds for NaN, compared element by element."""
    if isinstance(a, float) and isinstance(b, float) and a != a and b != b:
        return True
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same_values(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same_values(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b) and type(a) is type(b)


@pytest.mark.spark
def test_spark_read_returns_the_rows_spark_wrote_for_every_type(spark, keys_df, tmp_path):
    path = str(tmp_path / "ds")
    ash_spark.write(keys_df, path, num_subpartitions=N, partition_by="str", compression="zstd")
    back = spark.read.format("arrowshuffle").load(path)
    assert back.schema == keys_df.schema
    assert back.rdd.getNumPartitions() <= N  # planned: small subpartitions are coalesced
    expected, found = sorted_rows(keys_df), sorted_rows(back)
    assert len(found) == len(expected)
    assert all(same_values(e, f) for e, f in zip(expected, found, strict=True))


@pytest.mark.spark
def test_round_robin_partitioner_and_append_then_overwrite(spark, keys_df, tmp_path):
    path = str(tmp_path / "ds")
    source = keys_df.select("id", "arr", "st", "m")
    writer = (
        source.write.format("arrowshuffle")
        .option("num_subpartitions", 3)
        .option("partitioner", "round_robin")
        .option("max_batch_rows", 16)
    )
    writer.mode("overwrite").save(path)
    writer.mode("append").save(path)
    dataset = open_dataset(path)
    assert dataset.partitioner["name"] == "round_robin"
    assert dataset.num_files == 2 * source.rdd.getNumPartitions()
    back = spark.read.format("arrowshuffle").load(path)
    ids = sorted(r["id"] for r in back.select("id").toArrow().to_pylist())
    assert ids == sorted(list(range(240)) * 2)
    # round robin: per file, subpartition sizes differ by at most one
    for i in range(dataset.num_files):
        sizes = [dataset.file(i).read(s).num_rows for s in range(3)]
        assert max(sizes) - min(sizes) <= 1
    old_files = {n for f in dataset.manifest.files for n in (f.data, f.index)}
    assert set(os.listdir(path)) == old_files | COMMITTED
    source.limit(5).write.format("arrowshuffle").option("num_subpartitions", 3).option(
        "partitioner", "round_robin"
    ).mode("overwrite").save(path)
    assert spark.read.format("arrowshuffle").load(path).count() == 5
    # The replaced files stay for the dataset opened before, which still reads all its rows,
    # until vacuum removes exactly them (with versions 1 and 2, which listed them).
    assert old_files < set(os.listdir(path))
    assert dataset.version == 2 and dataset.read().num_rows == 480
    removed = vacuum(path, older_than=0).removed
    assert set(removed) == old_files | {f"{VERSIONS_DIR}/{version_name(v)}" for v in (1, 2)}
    assert not old_files & set(os.listdir(path))
    assert spark.read.format("arrowshuffle").load(path).count() == 5


@pytest.mark.spark
def test_reader_options_consumers_and_subpartitions(spark, keys_df, tmp_path):
    from pyspark.sql import functions as F

    path = str(tmp_path / "ds")
    ash_spark.write(keys_df, path, num_subpartitions=N, partition_by="int")
    truth = expected_subpartitions(keys_df, N, ["int"])

    def per_partition(df) -> dict[int, set[int]]:
        table = df.select("id", F.spark_partition_id().alias("p")).toArrow()
        out: dict[int, set[int]] = {}
        for row_id, p in zip(table["id"].to_pylist(), table["p"].to_pylist(), strict=True):
            out.setdefault(p, set()).add(row_id)
        return out

    # 3 consumers over 7 subpartitions: [0..2], [3..4], [5..6] (ceil(i*N/P) .. ceil((i+1)*N/P)-1)
    consumers = spark.read.format("arrowshuffle").option("consumers", 3).load(path)
    assert consumers.rdd.getNumPartitions() == 3
    found = per_partition(consumers)
    for p, subs in enumerate([(0, 1, 2), (3, 4), (5, 6)]):
        assert found.get(p, set()) == set().union(*(truth[s] for s in subs))

    picked = ash_spark.read(spark, path, subpartitions="1,4-5", partitioning="subpartition")
    assert picked.rdd.getNumPartitions() == 3
    found = per_partition(picked)
    for p, s in enumerate([1, 4, 5]):
        assert found.get(p, set()) == truth[s]

    one = spark.read.format("arrowshuffle").option("subpartitions", "3").load(path)
    assert {r["id"] for r in one.select("id").toArrow().to_pylist()} == truth[3]

    with pytest.raises(Exception, match="subpartition 9 does not exist"):
        spark.read.format("arrowshuffle").option("subpartitions", "9").load(path).count()

    # With filter pushdown on, an equality on the key reads only the key's subpartition.
    key = "spark.sql.python.filterPushdown.enabled"
    spark.conf.set(key, "true")
    try:
        value = keys_df.where("int IS NOT NULL").select("int").first()[0]
        pruned = (
            spark.read.format("arrowshuffle")
            .option("pushdown", "true")
            .load(path)
            .where(F.col("int") == value)
        )
        assert pruned.rdd.getNumPartitions() == 1
        found_ids = {r["id"] for r in pruned.select("id").toArrow().to_pylist()}
        want = {r["id"] for r in keys_df.where(F.col("int") == value).select("id").collect()}
        assert found_ids == want
    finally:
        spark.conf.unset(key)


@pytest.mark.spark
def test_save_modes(spark, keys_df, tmp_path, monkeypatch):
    path = str(tmp_path / "ds")
    small = keys_df.select("id", "int").limit(10)
    with pytest.raises(Exception, match="UNSUPPORTED_DATA_SOURCE_SAVE_MODE"):
        small.write.format("arrowshuffle").option("num_subpartitions", 2).option(
            "partition_by", "int"
        ).save(path)
    assert not os.path.exists(os.path.join(path, MANIFEST_NAME))
    assert not os.path.exists(os.path.join(path, VERSIONS_DIR))
    ash_spark.write(small, path, num_subpartitions=2, partition_by="int")  # new: the default
    before = snapshot(tmp_path / "ds")
    # The default mode refuses an existing dataset, naming it as typed and the other modes.
    monkeypatch.chdir(tmp_path)
    for mode in ({}, {"mode": "error"}, {"mode": "errorifexists"}):
        with pytest.raises(InvalidOptionError) as refused:
            ash_spark.write(small, "ds", num_subpartitions=2, partition_by="int", **mode)
        message = str(refused.value)
        assert message.startswith("dataset ds already exists")
        assert all(f"mode={m!r}" in message for m in ("overwrite", "append", "ignore"))
    assert snapshot(tmp_path / "ds") == before
    ignored = ash_spark.write(
        keys_df.select("id", "int"), path, num_subpartitions=2, partition_by="int", mode="ignore"
    )
    assert ignored.num_rows == 10
    assert snapshot(tmp_path / "ds") == before
    appended = ash_spark.write(small, path, num_subpartitions=2, partition_by="int", mode="append")
    assert appended.num_rows == 20
    # append with another key is refused on the driver, before any task runs
    with pytest.raises(InvalidOptionError, match=r"^cannot append"):
        ash_spark.write(small, path, num_subpartitions=2, partition_by="id", mode="append")
    assert open_dataset(path).num_rows == 20
    replaced = ash_spark.write(
        small.limit(3), "ds", num_subpartitions=2, partition_by="int", mode="overwrite"
    )
    assert replaced.num_rows == 3 and replaced.version == 3


def snapshot(path: Path) -> dict[str, bytes]:
    """Every file under ``path`` (manifest versions included), by relative name."""
    return {str(p.relative_to(path)): p.read_bytes() for p in path.rglob("*") if p.is_file()}


@pytest.mark.spark
def test_the_save_mode_option_gives_the_dataframe_writer_error_and_ignore(spark, keys_df, tmp_path):
    path = str(tmp_path / "nested" / "ds")  # a dataset creates its directory, parents too
    small = keys_df.select("id", "int").limit(10)

    def save(save_mode: str, spark_mode: str = "overwrite") -> None:
        (
            small.write.format("arrowshuffle")
            .option("num_subpartitions", 2)
            .option("partition_by", "int")
            .option("save_mode", save_mode)
            .mode(spark_mode)
            .save(path)
        )

    save("error")
    before = snapshot(Path(path))
    with pytest.raises(Exception, match="already exists"):
        save("error")
    save("ignore")
    assert snapshot(Path(path)) == before  # ignore: no task wrote a file
    with pytest.raises(Exception, match="save_mode is 'overwrite' but Spark's save mode"):
        save("overwrite", "append")
    assert open_dataset(path).num_rows == 10


def test_save_mode_option_values():
    base = {"path": "/x", "num_subpartitions": "2", "partition_by": "k"}
    assert parse_write_options(base).commit_mode(True) == "overwrite"
    assert parse_write_options(base).commit_mode(False) == "append"
    assert parse_write_options({**base, "save_mode": "ErrorIfExists"}).save_mode == "error"
    assert parse_write_options({**base, "save_mode": "ignore"}).commit_mode(False) == "ignore"
    with pytest.raises(InvalidOptionError, match=r"^option save_mode must be one of"):
        parse_write_options({**base, "save_mode": "replace"})
    with pytest.raises(InvalidOptionError, match="but Spark's save mode is 'overwrite'"):
        parse_write_options({**base, "save_mode": "append"}).commit_mode(True)


def test_errors_spark_wraps_are_found_and_rebuilt_with_their_message():
    from arrowshuffle.format.errors import CorruptFileError, MissingExtraError
    from arrowshuffle.spark.errors import original_error, spark_errors

    def wrapped(line: str) -> Exception:
        return RuntimeError(
            "[PYTHON_DATA_SOURCE_ERROR] Failed to initialize Python data source writer: "
            'Traceback (most recent call last):\n  File "x.py", line 1, in writer\n'
            f"    raise error\n{line}\n SQLSTATE: 38000\n\tat org.apache.spark.Foo(Foo.scala:1)"
        )

    plain = original_error(wrapped("arrowshuffle.format.errors.InvalidOptionError: bad\nvalue"))
    assert type(plain) is InvalidOptionError and str(plain) == "bad\nvalue"
    ruled = original_error(wrapped("arrowshuffle.format.errors.CorruptFileError: [V4] torn"))
    assert type(ruled) is CorruptFileError and ruled.rule == "V4" and ruled.detail == "torn"
    missing = original_error(wrapped("arrowshuffle.format.errors.MissingObjectError: [Errno 2] x"))
    assert (
        type(missing) is MissingObjectError and missing.errno == 2 and str(missing) == "[Errno 2] x"
    )
    # Not ours, not an error class, or one that cannot be rebuilt with its message: None.
    assert original_error(wrapped("ValueError: arrowshuffle.format.errors")) is None
    assert original_error(wrapped("arrowshuffle.format.errors.import_optional: x")) is None
    assert original_error(wrapped(f"{MissingExtraError.__module__}.MissingExtraError: x")) is None
    with pytest.raises(InvalidOptionError, match=r"^bad$") as raised, spark_errors():
        raise wrapped("arrowshuffle.format.errors.InvalidOptionError: bad")
    assert isinstance(raised.value.__cause__, RuntimeError)
    with pytest.raises(RuntimeError, match="SQLSTATE"), spark_errors():
        raise wrapped("java.lang.OutOfMemoryError: heap")


@pytest.mark.spark
def test_option_errors_through_the_helpers_come_first_as_our_class(spark, keys_df, tmp_path):
    path = str(tmp_path / "ds")
    small = keys_df.select("id", "int").limit(10)
    # Refused on the driver before Spark runs anything: no traceback in front of the message.
    with pytest.raises(InvalidOptionError) as bad:
        ash_spark.write(small, path, num_subpartitions=2, partition_by="int", compression="zz")
    assert str(bad.value).startswith("compression must be one of none, lz4, zstd")
    with pytest.raises(InvalidOptionError) as misspelt:
        ash_spark.write(small, path, num_subpartitions=2, partition_by="int", compresion="lz4")
    assert str(misspelt.value).startswith("unknown option(s) ['compresion']")
    with pytest.raises(InvalidOptionError) as missing_key:
        ash_spark.write(small, path, num_subpartitions=2, partition_by="nope")
    assert str(missing_key.value).startswith("option partition_by names 'nope'")
    assert not os.path.exists(os.path.join(path, VERSIONS_DIR))
    ash_spark.write(small, path, num_subpartitions=4, partition_by="int")
    with pytest.raises(InvalidOptionError) as bad_read:
        ash_spark.read(spark, path, partitioning="consumers")
    assert str(bad_read.value).startswith("partitioning 'consumers' needs option consumers")
    with pytest.raises(InvalidOptionError) as out_of_range:
        ash_spark.read(spark, path, subpartitions="2-9")
    assert str(out_of_range.value).startswith("option subpartitions: subpartition 9 does not exist")
    # Raised inside Spark (the source's schema() finds no dataset): our class and message,
    # chained from Spark's exception.
    with pytest.raises(MissingObjectError) as absent:
        ash_spark.read(spark, str(tmp_path / "absent"))
    assert str(absent.value).startswith(f"[Errno 2] {tmp_path / 'absent'} is not an arrowshuffle")
    assert absent.value.__cause__ is not None
    assert "arrowshuffle" not in type(absent.value.__cause__).__module__


@pytest.mark.spark
def test_the_helpers_take_a_relative_path_from_the_current_directory(
    spark, keys_df, tmp_path, monkeypatch
):
    # Spark's Python workers resolve paths in the directory Spark started in, not here.
    monkeypatch.chdir(tmp_path)
    small = keys_df.select("id", "int").limit(10)
    written = ash_spark.write(small, "relative", num_subpartitions=2, partition_by="int")
    assert written.num_rows == 10 and (tmp_path / "relative" / VERSIONS_DIR).is_dir()
    assert ash_spark.read(spark, "relative").count() == 10


@pytest.mark.spark
@pytest.mark.s3
def test_write_and_read_on_object_storage(spark, keys_df, s3_endpoint, s3_bucket):
    options = s3_endpoint.storage_options()
    url = f"{s3_bucket}/shuffle"
    small = keys_df.select("id", "str", "dec").limit(40)
    ash_spark.write(small, url, num_subpartitions=4, partition_by="str", storage_options=options)
    back = ash_spark.read(spark, url, storage_options=options)
    assert sorted(r["id"] for r in back.select("id").toArrow().to_pylist()) == sorted(
        r["id"] for r in small.select("id").toArrow().to_pylist()
    )
    assert open_dataset(url, options).num_files >= 1


# --------------------------------------------------------------------------- in process

SPARK_TYPES: dict[str, tuple[Any, st.SearchStrategy[Any]]] = {
    "bool": (BooleanType(), st.booleans()),
    "byte": (ByteType(), st.integers(-128, 127)),
    "short": (ShortType(), st.integers(-(2**15), 2**15 - 1)),
    "int": (IntegerType(), st.integers(-(2**31), 2**31 - 1)),
    "long": (LongType(), st.integers(-(2**63), 2**63 - 1)),
    "float": (FloatType(), st.floats(width=32, allow_nan=False)),
    "double": (DoubleType(), st.floats(allow_nan=False)),
    "dec": (
        DecimalType(10, 2),
        st.decimals(min_value=-(10**8) + 1, max_value=10**8 - 1, places=2),
    ),
    "dec38": (
        DecimalType(38, 6),
        st.decimals(min_value=-(10**31) + 1, max_value=10**31 - 1, places=6),
    ),
    "str": (StringType(), st.text(max_size=12)),
    "bin": (BinaryType(), st.binary(max_size=12)),
    "date": (DateType(), st.dates()),
    "ts": (
        TimestampType(),
        st.datetimes(
            min_value=dt.datetime(1900, 1, 1),
            max_value=dt.datetime(2200, 1, 1),
            timezones=st.just(UTC),
        ),
    ),
    "ntz": (
        TimestampNTZType(),
        st.datetimes(min_value=dt.datetime(1900, 1, 1), max_value=dt.datetime(2200, 1, 1)),
    ),
    "arr": (ArrayType(LongType()), st.lists(st.integers(-5, 5), max_size=3)),
    "st": (
        StructType([StructField("a", IntegerType()), StructField("b", StringType())]),
        st.fixed_dictionaries({"a": st.integers(0, 9), "b": st.text(max_size=3)}),
    ),
    "m": (
        MapType(StringType(), LongType()),
        st.dictionaries(st.text(max_size=3), st.integers(-(2**63), 2**63 - 1)),
    ),
}


@st.composite
def spark_tables(draw: st.DrawFn) -> tuple[StructType, list[dict[str, Any]]]:
    names = draw(st.lists(st.sampled_from(sorted(SPARK_TYPES)), min_size=1, unique=True))
    nullable = {n: draw(st.booleans()) for n in names}
    struct = StructType(
        [StructField("row", LongType(), False)]
        + [StructField(n, SPARK_TYPES[n][0], nullable[n]) for n in names]
        + [StructField("sub", IntegerType(), False)]
    )
    count = draw(st.integers(0, 30))
    rows = []
    for i in range(count):
        row: dict[str, Any] = {"row": i, "sub": draw(st.integers(0, 4))}
        for n in names:
            value = SPARK_TYPES[n][1]
            row[n] = draw(st.one_of(st.none(), value) if nullable[n] else value)
        rows.append(row)
    return struct, rows


def options(**values: Any) -> CaseInsensitiveDict:
    return CaseInsensitiveDict({k: str(v) for k, v in values.items()})


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    table=spark_tables(),
    batch_rows=st.integers(1, 8),
    tz=st.sampled_from(["UTC", "America/New_York", "Asia/Kolkata"]),
)
def test_in_process_write_commit_read_round_trip(tmp_path_factory, table, batch_rows, tz):
    struct, rows = table
    path = str(tmp_path_factory.mktemp("inproc") / "ds")
    # Spark hands the writer batches whose timestamps carry the session time zone.
    arrow = to_arrow_schema(struct, timezone=tz)
    data = pa.Table.from_pylist(rows, schema=arrow) if rows else arrow.empty_table()
    batches = data.to_batches(max_chunksize=batch_rows)

    source = ArrowShuffleDataSource(
        options(path=path, num_subpartitions=5, subpartition_column="sub", compression="lz4")
    )
    writer = source.writer(struct, overwrite=True)
    half = len(batches) // 2
    messages = [
        writer.write_task(iter(batches[:half]), 0, "a0"),
        writer.write_task(iter(batches[half:]), 1, "a0"),
    ]
    writer.commit(messages)

    reading = ArrowShuffleDataSource(options(path=path, partitioning="subpartition"))
    schema = reading.schema()
    data_fields = [f for f in struct.fields if f.name != "sub"]
    assert schema == StructType(data_fields)
    reader = reading.reader(schema)
    target = to_arrow_schema(schema, timezone="UTC")
    for partition in reader.partitions():
        (s,) = partition.subpartitions
        got = [b for b in reader.read(partition)]
        for batch in got:
            assert batch.schema.equals(target)  # what Spark demands of the first batch
        found = pa.Table.from_batches(got, schema=target).to_pylist()
        want = [{k: v for k, v in r.items() if k != "sub"} for r in rows if r["sub"] == s]
        assert (
            sorted(found, key=lambda r: r["row"])
            == pa.Table.from_pylist(want, schema=target).to_pylist()
        )


def test_in_process_failed_attempt_leaves_nothing_and_retry_commits_once(tmp_path):
    path = tmp_path / "ds"
    struct = StructType([StructField("k", IntegerType()), StructField("v", StringType())])
    arrow = to_arrow_schema(struct, timezone="UTC")
    batch = pa.record_batch([pa.array(range(50), pa.int32()), pa.array(["x"] * 50)], schema=arrow)
    source = ArrowShuffleDataSource(
        options(path=str(path), num_subpartitions=4, partition_by="k", memory="1KiB")
    )
    writer = source.writer(struct, overwrite=True)

    def dying() -> Any:
        yield batch
        yield batch
        raise RuntimeError("executor lost")

    with pytest.raises(RuntimeError, match="executor lost"):
        writer.write(dying())
    assert not path.exists() or os.listdir(path) == []
    first = writer.write(iter([batch]))
    speculative = writer.write(iter([batch]))  # a second successful attempt of the same task
    writer.commit([first, speculative])
    dataset = open_dataset(str(path))
    assert dataset.num_files == 1
    assert dataset.num_rows == 50
    listed = {dataset.manifest.files[0].data, dataset.manifest.files[0].index}
    assert set(os.listdir(path)) == listed | COMMITTED
    assert os.listdir(path / VERSIONS_DIR) == [version_name(1)]  # committed once


def test_arrow_to_spark_schema_maps_large_and_unsigned_types():
    schema = pa.schema(
        [
            pa.field("s", pa.large_string(), nullable=False),
            ("b", pa.large_binary()),
            ("u8", pa.uint8()),
            ("u64", pa.uint64()),
            ("ts_ns", pa.timestamp("ns", tz="Europe/Paris")),
            ("l", pa.large_list(pa.field("item", pa.int16(), nullable=False))),
        ]
    )
    struct = spark_schema(schema)
    assert struct.simpleString() == (
        "struct<s:string,b:binary,u8:smallint,u64:decimal(20,0),ts_ns:timestamp,l:array<smallint>>"
    )
    assert not struct["s"].nullable
    assert not struct["l"].dataType.containsNull
    target = spark_arrow_schema(struct)
    assert target.field("s").type == pa.string()
    assert target.field("ts_ns").type == pa.timestamp("us", tz="UTC")


def test_writer_options_are_checked_with_clear_messages():
    with pytest.raises(InvalidOptionError, match="needs option num_subpartitions"):
        parse_write_options({"path": "/x", "partition_by": "k"})
    with pytest.raises(InvalidOptionError, match="needs option partition_by"):
        parse_write_options({"path": "/x", "num_subpartitions": "4"})
    with pytest.raises(InvalidOptionError, match=r"unknown option\(s\) \['num_subpartition'\]"):
        parse_write_options({"path": "/x", "num_subpartitions": "4", "num_subpartition": "4"})
    remote = parse_write_options(
        {
            "path": "s3://b/k",
            "num_subpartitions": "4",
            "partitioner": "round_robin",
            "anon": "false",
            "storage_options": '{"client_kwargs": {"region_name": "x"}}',
        }
    )
    assert remote.storage_options == {"anon": False, "client_kwargs": {"region_name": "x"}}
    assert parse_write_options(
        {"path": "/x", "num_subpartitions": "4", "partition_by": "a, b", "memory": "1MiB"}
    ).partition_by == ("a", "b")


def test_subpartition_selection_and_consumer_ranges():
    options = parse_read_options({"path": "p", "subpartitions": "1,4-6,4"})
    assert options.selection(8) == (1, 4, 5, 6)
    with pytest.raises(InvalidOptionError, match="reversed"):
        parse_read_options({"path": "p", "subpartitions": "5-2"})
    with pytest.raises(InvalidOptionError, match="expected a number"):
        parse_read_options({"path": "p", "subpartitions": "a"})
    with pytest.raises(InvalidOptionError, match="subpartition 8 does not exist"):
        parse_read_options({"path": "p", "subpartitions": "2-8"}).selection(8)
    # the key-group range formula: start=ceil(i*N/P), end=floor(((i+1)*N-1)/P)
    for n in range(1, 12):
        for p in range(1, 14):
            parts = plan_partitions(list(range(n)), p)
            assert len(parts) == p
            for i, part in enumerate(parts):
                start, end = (i * n + p - 1) // p, ((i + 1) * n - 1) // p
                assert part.subpartitions == tuple(range(start, end + 1))


def test_reader_refuses_a_schema_column_the_dataset_lacks(tmp_path: Path):
    struct = StructType([StructField("k", IntegerType())])
    source = ArrowShuffleDataSource(
        options(path=str(tmp_path), num_subpartitions=2, partitioner="global")
    )
    writer = source.writer(struct, overwrite=True)
    writer.commit([])
    asked = StructType([StructField("k", IntegerType()), StructField("zz", StringType())])
    with pytest.raises(Exception, match="no column 'zz'"):
        ArrowShuffleDataSource(options(path=str(tmp_path))).reader(asked)


# --------------------------------------------------------------------------- the main job


@pytest.mark.spark
def test_the_pipeline_checks_pass_on_small_data(spark, tmp_path):
    from arrowshuffle.pipeline import Report, format_summary, parse_args, run

    args = parse_args(["--rows", "3000", "--subpartitions", "5", "--files", "2", "--keys", "50"])
    report = Report()
    facts = run(args, str(tmp_path / "ds"), report, spark=spark)
    assert report.checks and all(report.checks.values()), report.notes
    assert facts["rows"] == 3000
    assert sum(facts["rows_per_subpartition"]) == 3000
    assert facts["files"] == 2
    summary = format_summary(args, str(tmp_path / "ds"), facts, report)
    assert "skew (max/mean)" in summary


def test_the_pipeline_without_java_stops_with_exit_code_2(tmp_path):
    import subprocess
    import sys

    env = {"PATH": str(tmp_path), "HOME": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-m", "arrowshuffle.pipeline", "--rows", "10"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    assert "Java was not found" in done.stderr
    assert "JAVA_HOME" in done.stderr


def test_in_process_reader_converts_types_spark_lacks(tmp_path):
    """A dataset written outside Spark (unsigned, large, nanosecond types) reads as Spark's."""
    from arrowshuffle.format.naming import new_file_name
    from arrowshuffle.writers.dataset_writer import commit_dataset, prepare_directory
    from arrowshuffle.writers.file_writer import ShuffleFileWriter

    schema = pa.schema(
        [
            pa.field("u64", pa.uint64(), nullable=False),
            ("u8", pa.uint8()),
            ("text", pa.large_string()),
            ("ts", pa.timestamp("ns", tz="Asia/Tokyo")),
            ("items", pa.large_list(pa.uint16())),
        ]
    )
    table = pa.table(
        {
            "u64": pa.array([0, 2**64 - 1, 7], pa.uint64()),
            "u8": pa.array([255, None, 1], pa.uint8()),
            "text": pa.array(["é", None, "日本"], pa.large_string()),
            "ts": pa.array(
                [1_000, None, 1_700_000_000_123_456_000], pa.timestamp("ns", "Asia/Tokyo")
            ),
            "items": pa.array([[65535], None, []], pa.large_list(pa.uint16())),
        },
        schema=schema,
    )
    directory = prepare_directory(str(tmp_path / "ds"), None)
    with ShuffleFileWriter(directory.child(new_file_name(0)).url, schema, 2) as writer:
        writer.write(table, subpartitions=[0, 1, 1])
    assert writer.written is not None
    commit_dataset(
        directory,
        [writer.written],
        schema=schema,
        num_subpartitions=2,
        partitioner={"name": "explicit"},
    )
    source = ArrowShuffleDataSource(options(path=directory.url))
    struct = source.schema()
    assert struct.simpleString() == (
        "struct<u64:decimal(20,0),u8:smallint,text:string,ts:timestamp,items:array<int>>"
    )
    reader = source.reader(struct)
    target = to_arrow_schema(struct, timezone="UTC")
    rows = []
    for partition in reader.partitions():
        for batch in reader.read(partition):
            assert batch.schema.equals(target)
            rows.extend(batch.to_pylist())
    assert [r["u64"] for r in rows] == [0, 2**64 - 1, 7]
    assert [r["u8"] for r in rows] == [255, None, 1]
    assert [r["text"] for r in rows] == ["é", None, "日本"]
    assert rows[0]["ts"] == dt.datetime(1970, 1, 1, 0, 0, 0, 1, tzinfo=dt.timezone.utc)
    assert rows[2]["ts"] == dt.datetime.fromtimestamp(1_700_000_000.123456, tz=dt.timezone.utc)
    assert [r["items"] for r in rows] == [[65535], None, []]


def test_equality_filters_on_the_key_prune_subpartitions(tmp_path):
    from pyspark.sql.datasource import EqualTo, GreaterThan, In

    struct = StructType([StructField("k", IntegerType()), StructField("s", StringType())])
    arrow = to_arrow_schema(struct, timezone="UTC")
    keys = [*range(-20, 20), None]
    batch = pa.record_batch(
        [pa.array(keys, pa.int32()), pa.array([f"v{k}" for k in keys])], schema=arrow
    )
    path = str(tmp_path / "ds")
    source = ArrowShuffleDataSource(options(path=path, num_subpartitions=7, partition_by="k"))
    writer = source.writer(struct, overwrite=True)
    writer.commit([writer.write_task(iter([batch]), 0, "a")])
    dataset = open_dataset(path)
    home = {}  # where the writer actually put each key
    for s in range(7):
        for k in dataset.read(s)["k"].to_pylist():
            home[k] = s

    def selection(*filters: Any) -> list[int]:
        reader = ArrowShuffleDataSource(options(path=path, pushdown="true")).reader(source.schema())
        returned = list(reader.pushFilters(list(filters)))
        assert all(any(r is f for f in filters) for r in returned)  # Spark re-applies them
        return [s for p in reader.partitions() for s in p.subpartitions]

    assert selection(EqualTo(("k",), 5)) == [home[5]]
    assert selection(In(("k",), (3, -7, 5))) == sorted({home[3], home[-7], home[5]})
    assert selection(In(("k",), (3, 4)), EqualTo(("k",), 4)) == [home[4]]
    assert selection(EqualTo(("k",), 3), EqualTo(("k",), 4)) == []  # k = 3 AND k = 4
    assert selection(GreaterThan(("k",), 3)) == list(range(7))  # not an equality
    assert selection(EqualTo(("s",), "v5")) == list(range(7))  # not the key
    assert selection(EqualTo(("k",), "five")) == list(range(7))  # not an int: no pruning


def test_nan_allowed_by_two_filters_keeps_the_subpartition_of_nan() -> None:
    """Spark's = and IN hold for NaN = NaN: two filters that both allow NaN must keep it (two
    NaN objects are not ==, and intersecting the filters' values with == dropped it)."""
    from pyspark.sql.datasource import EqualTo, In

    from arrowshuffle import make_partitioner
    from arrowshuffle.spark.pruning import prune

    n = 16
    partitioner = make_partitioner("hash", num_subpartitions=n, by=["k"])
    keys = pa.record_batch({"k": pa.array([float("nan"), 1.5])})
    nan_home, other_home = (int(s) for s in partitioner.assign(keys))
    filters = [EqualTo(("k",), float("nan")), In(("k",), (float("nan"), 1.5))]
    assert prune(partitioner.spec(), keys.schema, n, filters) == {nan_home}
    assert prune(partitioner.spec(), keys.schema, n, [In(("k",), (1.5,))]) == {other_home}


def test_finer_instants_read_floored_as_the_partitioner_placed_them() -> None:
    """A nanosecond timestamp before 1970 with a sub-microsecond part is placed by its floored
    microsecond (-1500 ns is -2 us), as Spark floors it; read back as Spark's microseconds it
    must be that same value, or a filter pruned by it reads another subpartition. Likewise a
    date64 before 1970 that is not on a day boundary, and a negative nanosecond duration."""
    from arrowshuffle import make_partitioner
    from arrowshuffle.spark.types import conform

    stored = pa.record_batch(
        {
            # The lowest instants floor to microseconds below the lowest nanosecond.
            "ts": pa.array([-1500, -2500, 1500, None, -(2**63) + 1], pa.timestamp("ns", tz="UTC")),
            # 01:30 in New York happens twice on 2020-11-01: no local time to floor in.
            "local": pa.array(
                [1_604_208_600_000_000_500, -1500, None, 0, -(2**63)],
                pa.timestamp("ns", tz="America/New_York"),
            ),
            "day": pa.array([-1, -86_400_001, 86_400_001, None, 0], pa.date64()),
            "span": pa.array([-1500, None, 1500, -(2**63) + 1, -1], pa.duration("ns")),
        }
    )
    target = pa.schema(
        [
            ("ts", pa.timestamp("us", tz="UTC")),
            ("local", pa.timestamp("us", tz="UTC")),
            ("day", pa.date32()),
            ("span", pa.duration("us")),
        ]
    )
    read = conform(stored, target)
    lowest = -(2**63) // 1000  # -9223372036854775.808 us, floored
    ts = read.column("ts").cast(pa.int64()).to_pylist()
    assert ts == [-2, -3, 1, None, lowest]
    local = read.column("local").cast(pa.int64()).to_pylist()
    assert local == [1_604_208_600_000_000, -2, None, 0, lowest]
    assert read.column("day").cast(pa.int32()).to_pylist() == [-1, -2, 1, None, 0]
    spans = read.column("span").cast(pa.int64()).to_pylist()
    assert spans == [-2, None, 1, lowest, -1]
    for column in ("ts", "local", "day", "span"):
        partitioner = make_partitioner("hash", num_subpartitions=64, by=[column])
        placed = partitioner.assign(stored.select([column]))
        seen = partitioner.assign(read.select([column]))
        assert list(placed) == list(seen)
