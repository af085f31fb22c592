"""Column selection in Spark reads: option ``columns`` and a user-given read schema.

A Python data source is not told which columns a query uses, so a read names them: the reader
then reads and yields only those, and Spark's plan holds only those. Results must equal a full
read followed by ``select``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

pytest.importorskip("pyspark", reason="the Spark data source needs pyspark")

from pyspark.sql.datasource import CaseInsensitiveDict, EqualTo
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (
    ArrayType,
    DoubleType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
)

import arrowshuffle.spark as ash_spark
from arrowshuffle.format.errors import InvalidOptionError, SchemaMismatchError
from arrowshuffle.format.naming import new_file_name
from arrowshuffle.readers.dataset import open_dataset
from arrowshuffle.spark import datasource
from arrowshuffle.spark.datasource import ArrowShuffleDataSource
from arrowshuffle.spark.options import parse_read_options
from arrowshuffle.writers.dataset_writer import commit_dataset, prepare_directory
from arrowshuffle.writers.file_writer import ShuffleFileWriter

N = 5
ROWS = 300


def options(**values: Any) -> CaseInsensitiveDict:
    return CaseInsensitiveDict({k: str(v) for k, v in values.items()})


def write_arrow(path: str, table: pa.Table, ids: list[int]) -> str:
    """A dataset of one file written outside Spark (any Arrow types)."""
    directory = prepare_directory(path, None)
    with ShuffleFileWriter(directory.child(new_file_name(0)).url, table.schema, N) as writer:
        writer.write(table, subpartitions=ids)
    assert writer.written is not None
    commit_dataset(
        directory,
        [writer.written],
        schema=table.schema,
        num_subpartitions=N,
        partitioner={"name": "explicit"},
    )
    return directory.url


def sample_table() -> pa.Table:
    """Spark types plus ``odd``, an interval column Spark has no type for."""
    k = list(range(ROWS))
    return pa.table(
        {
            "k": pa.array(k, pa.int64()),
            "name": pa.array([None if i % 7 == 0 else f"n{i}" for i in k], pa.large_string()),
            "tags": pa.array([[i, i + 1] for i in k], pa.list_(pa.int32())),
            "odd": pa.array([pa.scalar((1, 2, 3), pa.month_day_nano_interval())] * ROWS),
            "v": pa.array([i * 0.5 for i in k], pa.float64()),
        }
    )


@pytest.fixture(scope="module")
def mixed(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = str(tmp_path_factory.mktemp("columns") / "ds")
    return write_arrow(path, sample_table(), [i % N for i in range(ROWS)])


@pytest.fixture(scope="module")
def spark_dataset(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> str:
    """A hash-partitioned dataset written by Spark (for pushdown with a column subset)."""
    ash_spark.register(spark)
    df = spark.range(ROWS).selectExpr(
        "cast(id as int) as k", "concat('s', cast(id as string)) as s", "id * 2 as w"
    )
    path = str(tmp_path_factory.mktemp("columns") / "spark_ds")
    ash_spark.write(df, path, num_subpartitions=N, partition_by=["k"])
    return path


def collected(df: Any) -> list[tuple[Any, ...]]:
    return sorted((tuple(r) for r in df.collect()), key=repr)


def scan_output(df: Any) -> list[str]:
    """The names of the columns the plan's data source scan produces."""
    plan = df._jdf.queryExecution().executedPlan()
    leaves = plan.collectLeaves()
    names = []
    for i in range(leaves.size()):
        output = leaves.apply(i).output()
        names.extend(output.apply(j).name() for j in range(output.size()))
    return names


# ------------------------------------------------------------------------------ in process


def batches_of(reader: Any) -> list[pa.RecordBatch]:
    return [b for p in reader.partitions() for b in reader.read(p)]


def test_option_columns_yields_only_those_columns_in_their_order(mixed: str) -> None:
    source = ArrowShuffleDataSource(options(path=mixed, columns="v, k"))
    struct = source.schema()
    assert struct.fieldNames() == ["v", "k"]
    reader = source.reader(struct)
    target = to_arrow_schema(struct, timezone="UTC")
    got = batches_of(reader)
    assert got and all(b.schema.equals(target) for b in got)
    table = pa.Table.from_batches(got).sort_by("k")
    assert table["k"].to_pylist() == list(range(ROWS))
    assert table["v"].to_pylist() == [i * 0.5 for i in range(ROWS)]


def test_a_column_spark_cannot_type_stops_only_reads_that_select_it(mixed: str) -> None:
    with pytest.raises(SchemaMismatchError, match=r"'odd'.*month_day_nano_interval"):
        ArrowShuffleDataSource(options(path=mixed)).schema()
    struct = ArrowShuffleDataSource(options(path=mixed, columns="name,tags")).schema()
    assert struct.simpleString() == "struct<name:string,tags:array<int>>"


def test_a_read_schema_may_be_a_subset_in_another_order(mixed: str) -> None:
    asked = StructType([StructField("name", StringType()), StructField("k", LongType())])
    reader = ArrowShuffleDataSource(options(path=mixed)).reader(asked)
    target = to_arrow_schema(asked, timezone="UTC")
    got = batches_of(reader)
    assert all(b.schema.equals(target) for b in got)  # string, not the stored large_string
    rows = sorted(pa.Table.from_batches(got).to_pylist(), key=lambda r: r["k"])
    assert rows[:2] == [{"name": None, "k": 0}, {"name": "n1", "k": 1}]
    assert len(rows) == ROWS


@pytest.mark.parametrize(
    ("field", "message"),
    [
        (StructField("k", IntegerType()), "'k'.*reads as Spark type bigint, found int"),
        (StructField("name", LongType()), "'name'.*reads as Spark type string, found bigint"),
        (
            StructField("tags", ArrayType(LongType())),
            "'tags'.*reads as Spark type array<int>, found array<bigint>",
        ),
        (StructField("name", StringType(), nullable=False), "'name'.*may hold nulls"),
        (StructField("zz", StringType()), "has no column 'zz'"),
    ],
)
def test_a_read_schema_of_other_types_is_refused_naming_both(
    mixed: str, field: StructField, message: str
) -> None:
    asked = StructType([StructField("v", DoubleType()), field])
    with pytest.raises(SchemaMismatchError, match=message):
        ArrowShuffleDataSource(options(path=mixed)).reader(asked)


def test_a_nullable_read_schema_over_non_nullable_columns_is_accepted(tmp_path: Path) -> None:
    schema = pa.schema(
        [pa.field("k", pa.int64(), nullable=False), ("xs", pa.list_(pa.field("x", pa.int32())))]
    )
    table = pa.table({"k": [1, 2], "xs": [[1], [2]]}, schema=schema)
    url = write_arrow(str(tmp_path / "ds"), table, [0, 1])
    asked = StructType([StructField("k", LongType()), StructField("xs", ArrayType(IntegerType()))])
    got = batches_of(ArrowShuffleDataSource(options(path=url)).reader(asked))
    assert sorted(pa.Table.from_batches(got)["k"].to_pylist()) == [1, 2]


def test_option_columns_and_a_read_schema_must_agree(mixed: str) -> None:
    asked = StructType([StructField("k", LongType())])
    with pytest.raises(SchemaMismatchError, match=r"option columns names \['v'\]"):
        ArrowShuffleDataSource(options(path=mixed, columns="v")).reader(asked)
    reader = ArrowShuffleDataSource(options(path=mixed, columns="k")).reader(asked)
    assert reader.columns == ["k"]


def test_columns_option_values(mixed: str) -> None:
    assert parse_read_options({"path": "/x", "columns": " a , b "}).columns == ("a", "b")
    assert parse_read_options({"path": "/x", "columns": '["a,b", " c"]'}).columns == (
        "a,b",
        " c",
    )
    assert parse_read_options({"path": "/x"}).columns is None
    for bad, message in [
        ("a,,b", "option columns must be column names"),
        ("a,b,a", "'a' more than once"),
        ("[]", "non-empty JSON list"),
        ('["a", 1]', "non-empty JSON list"),
        ("[a", "JSON list of names"),
    ]:
        with pytest.raises(InvalidOptionError, match=message):
            parse_read_options({"path": "/x", "columns": bad})
    with pytest.raises(SchemaMismatchError, match=r"option columns names 'nope'.*'odd'"):
        ArrowShuffleDataSource(options(path=mixed, columns="k,nope")).schema()


def test_pruning_works_on_a_column_subset(spark_dataset: str) -> None:
    """Pushed equality filters on the key prune with the key among few selected columns."""
    dataset = open_dataset(spark_dataset)
    home = {}
    for s in range(N):
        for k in dataset.read(s, columns=["k"])["k"].to_pylist():
            home[k] = s
    source = ArrowShuffleDataSource(options(path=spark_dataset, pushdown="true", columns="k,w"))
    reader = source.reader(source.schema())
    reader.pushFilters([EqualTo(("k",), 42)])
    assert [s for p in reader.partitions() for s in p.subpartitions] == [home[42]]
    assert reader.columns == ["k", "w"]


# ------------------------------------------------------------------------------ real Spark


@pytest.mark.spark
def test_spark_reads_with_columns_equal_a_full_read_then_select(spark: Any, mixed: str) -> None:
    ash_spark.register(spark)
    full = spark.read.format("arrowshuffle").option("columns", "k,name,tags,v").load(mixed)
    chosen = spark.read.format("arrowshuffle").option("columns", "v,name").load(mixed)
    helper = ash_spark.read(spark, mixed, columns=["v", "name"])
    want = collected(full.select("v", "name"))
    assert len(want) == ROWS
    assert collected(chosen) == want
    assert collected(helper) == want
    assert scan_output(chosen) == ["v", "name"]
    assert scan_output(full) == ["k", "name", "tags", "v"]
    # The ``odd`` column is never read: a full read cannot even be planned.
    with pytest.raises(Exception, match="month_day_nano_interval"):
        spark.read.format("arrowshuffle").load(mixed).collect()


@pytest.mark.spark
def test_spark_read_schema_subset(spark: Any, mixed: str) -> None:
    ash_spark.register(spark)
    df = spark.read.format("arrowshuffle").schema("name string, k long").load(mixed)
    full = spark.read.format("arrowshuffle").option("columns", "k,name,v").load(mixed)
    assert df.columns == ["name", "k"]
    assert collected(df) == collected(full.select("name", "k"))
    assert scan_output(df) == ["name", "k"]
    wrong = spark.read.format("arrowshuffle").schema("name string, k int").load(mixed)
    with pytest.raises(Exception, match="reads as Spark type bigint, found int"):
        wrong.collect()


@pytest.mark.spark
def test_spark_filters_with_a_column_subset(spark: Any, spark_dataset: str) -> None:
    from pyspark.errors import AnalysisException

    ash_spark.register(spark)
    full = spark.read.format("arrowshuffle").load(spark_dataset)
    spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
    try:
        pruned = ash_spark.read(spark, spark_dataset, columns=["k", "s"], pushdown=True)
        assert collected(pruned.filter("k = 42")) == collected(
            full.filter("k = 42").select("k", "s")
        )
        assert collected(pruned.filter("s = 's7'")) == [(7, "s7")]
        # A column the read does not select is not in the DataFrame: Spark refuses the filter.
        without_key = ash_spark.read(spark, spark_dataset, columns=["s", "w"], pushdown=True)
        with pytest.raises(AnalysisException):
            without_key.filter("k = 42").collect()
    finally:
        spark.conf.unset("spark.sql.python.filterPushdown.enabled")


# ------------------------------------------------------------- what each task reads and sends


def write_keys(path: str, keys: range, mode: str = "error") -> None:
    from arrowshuffle import write_dataset

    table = pa.table({"k": pa.array(keys, pa.int64()), "s": [f"v{k}" for k in keys]})
    write_dataset(table, path, num_subpartitions=N, by="k", mode=mode, max_batch_rows=7)


def read_all(reader: Any) -> list[int]:
    return sorted(k for b in batches_of(reader) for k in b.column("k").to_pylist())


def test_tasks_read_the_version_the_query_was_planned_on(tmp_path: Path) -> None:
    from arrowshuffle.writers.vacuum import vacuum

    path = str(tmp_path / "ds")
    write_keys(path, range(40))
    source = ArrowShuffleDataSource(options(path=path))
    reader = source.reader(source.schema())
    assert read_all(reader) == list(range(40))
    write_keys(path, range(100, 110), mode="overwrite")
    # The planned version is still retained: the tasks read it, not the newer one.
    assert read_all(reader) == list(range(40))
    later = ArrowShuffleDataSource(options(path=path))
    assert read_all(later.reader(later.schema())) == list(range(100, 110))
    vacuum(path, older_than=0)  # the planned version and its files are gone now
    datasource._task_datasets.clear()  # as in a new Python worker
    with pytest.raises(InvalidOptionError, match=r"replaced while this query ran.*version 1"):
        read_all(reader)


def test_a_dataset_written_again_at_the_same_path_is_not_read_from_an_earlier_task(
    tmp_path: Path,
) -> None:
    import shutil

    path = str(tmp_path / "ds")
    write_keys(path, range(40))
    first = ArrowShuffleDataSource(options(path=path))
    assert read_all(first.reader(first.schema())) == list(range(40))
    shutil.rmtree(path)
    write_keys(path, range(500, 520))  # version 1 again, other files
    again = ArrowShuffleDataSource(options(path=path))
    assert read_all(again.reader(again.schema())) == list(range(500, 520))


def test_batches_are_joined_up_to_batch_rows(tmp_path: Path) -> None:
    path = str(tmp_path / "ds")
    write_keys(path, range(1000))  # stored in batches of at most 7 rows
    source = ArrowShuffleDataSource(options(path=path, partitioning="subpartition"))
    small = batches_of(source.reader(source.schema()))
    assert sum(b.num_rows for b in small) == 1000
    assert len(small) <= N  # the default joins every subpartition's rows into one batch
    tiny = ArrowShuffleDataSource(options(path=path, partitioning="subpartition", batch_rows=20))
    reader = tiny.reader(tiny.schema())
    got = []
    for partition in reader.partitions():
        sizes = [b.num_rows for b in reader.read(partition)]
        assert all(20 <= n < 27 for n in sizes[:-1]), sizes  # joined batches of <= 7 rows
        got.extend(reader.read(partition))
    assert sorted(k for b in got for k in b.column("k").to_pylist()) == list(range(1000))
    one = ArrowShuffleDataSource(options(path=path, partitioning="subpartition", batch_rows=1))
    assert max(b.num_rows for b in batches_of(one.reader(one.schema()))) <= 7
    with pytest.raises(InvalidOptionError, match="batch_rows must be at least 1"):
        parse_read_options({"path": path, "batch_rows": "0"})


def test_makespan_follows_sparks_order_on_free_slots() -> None:
    from arrowshuffle.spark.datasource import makespan

    assert makespan([10, 10, 10], 2, task_cost=0) == 20  # a second wave
    assert makespan([15, 15], 2, task_cost=0) == 15
    assert makespan([17, 27, 10], 2, task_cost=0) == 27  # the third task fills the first slot
    assert makespan([5, 5], 8, task_cost=1) == 6
    assert makespan([], 2) == 0


def test_a_default_plan_fills_the_slots_in_one_wave(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Uniform subpartitions rarely add up to exactly one slot's share: the plan that fits
    the slots is chosen over one that leaves a small task for a second wave."""
    import numpy as np

    from arrowshuffle import write_dataset
    from arrowshuffle.readers import balance

    monkeypatch.setattr(balance, "DEFAULT_MIN_TARGET_BYTES", 1)  # a small dataset
    rng = np.random.default_rng(7)
    table = pa.table({"k": rng.integers(0, 100_000, 40_000), "v": rng.random(40_000)})
    path = str(tmp_path / "ds")
    write_dataset(table, path, num_subpartitions=64, by="k")
    dataset = open_dataset(path)
    share = -(-int(dataset.subpartition_sizes()[0].sum()) // 2)
    assert len(dataset.plan(share)) == 3  # the share alone: two full tasks and a small one
    source = ArrowShuffleDataSource(options(path=path, parallelism=2))
    reader = source.reader(source.schema())
    parts = reader.partitions()
    assert len(parts) == 2
    assert [s for p in parts for s in p.subpartitions] == list(range(64))
    assert sum(b.num_rows for p in parts for b in reader.read(p)) == 40_000


def test_a_default_plan_cuts_the_slots_evenly_when_no_share_target_does() -> None:
    """63 subpartitions of 1 MiB and one of 1.5 MiB on 2 slots: filling up to the share leaves
    a third task, and 1.1 times the share cuts 35 against 29.5 MiB; a balanced cut's largest
    piece as the target gives two tasks of 32 and 32.5 MiB."""
    import numpy as np

    from arrowshuffle.readers.balance import plan_reads
    from arrowshuffle.spark.datasource import fastest_plan, makespan

    mib = 2**20
    sizes = np.array([mib] * 63 + [3 * mib // 2], dtype=np.int64)
    rows = np.ones(64, dtype=np.int64)

    def plan(target: int) -> list[Any]:
        return plan_reads(sizes, rows, [range(64)], 1, lambda s: None, target_bytes=target)

    config = parse_read_options({"path": "/d", "parallelism": "2"})
    share = -(-int(sizes.sum()) // 2)
    assert len(plan(share)) == 3
    best = fastest_plan(plan, config.plan_targets(sizes), 2)
    assert [t.bytes for t in best] == [32 * mib, 32 * mib + mib // 2]
    # Every candidate the targets used to hold finishes later.
    old = [share, int(share * 1.1), int(share * 1.25)]
    assert makespan([t.bytes for t in fastest_plan(plan, old, 2)], 2) > makespan(
        [t.bytes for t in best], 2
    )
