"""Spark reads through read plans: one Spark partition per planned task.

The datasets are skewed (70% of the rows in subpartition 0) and hold broadcast regions, so the
plans coalesce small subpartitions, split the hot one over files or regions, and read broadcast
chunks in several tasks. Every Spark partition must return exactly what
``ShuffleDataset.read(task=...)`` returns for its task, and the whole read what
``ShuffleDataset.read()`` returns.
"""

from __future__ import annotations

import os
import pickle
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

pytest.importorskip("pyspark", reason="the Spark data source needs pyspark")

from dataset_factory import WrittenDataset, write_dataset
from pyspark.sql.datasource import CaseInsensitiveDict

import arrowshuffle as ash
import arrowshuffle.spark as ash_spark
from arrowshuffle.format.errors import InvalidOptionError
from arrowshuffle.readers.balance import DEFAULT_MIN_TARGET_BYTES
from arrowshuffle.spark.datasource import (
    ArrowShuffleDataSource,
    PlannedPartition,
    SubpartitionSelection,
)
from arrowshuffle.spark.options import DEFAULT_MAX_TARGET_BYTES, parse_read_options

N = 8
HOT = 0  # the factory's skew sends most rows here
SKEW = {"skew_factor": 2, "skew_min_bytes": 0}
Row = tuple[Any, ...]


def skewed_dataset(url: str, storage_options: dict[str, Any] | None = None) -> WrittenDataset:
    """4 files x 8 subpartitions, small regions, one broadcast batch per file."""
    return write_dataset(
        url,
        num_files=4,
        num_subpartitions=N,
        batches_per_file=4,
        rows_per_batch=200,
        skew=True,
        broadcast_batches=(1,),
        storage_options=storage_options,
    )


@pytest.fixture(scope="module")
def local_dataset(tmp_path_factory: pytest.TempPathFactory) -> WrittenDataset:
    return skewed_dataset(str(tmp_path_factory.mktemp("plan") / "ds"))


def rows_of(table: pa.Table) -> Counter[Row]:
    """The multiset of a table's rows (broadcast rows come back once per subpartition)."""
    names = ["id", "sp", "file", "value", "name"]
    columns = [table[n].to_pylist() for n in names]
    return Counter(zip(*columns, strict=True))


def by_partition(df: Any) -> dict[int, Counter[Row]]:
    """The rows each Spark partition returned."""
    from pyspark.sql import functions as F

    table = df.select("*", F.spark_partition_id().alias("p")).toArrow()
    out: dict[int, Counter[Row]] = {}
    for p in set(table["p"].to_pylist()):
        out[p] = rows_of(table.filter(pa.compute.equal(table["p"], p)))
    return out


def total(parts: dict[int, Counter[Row]]) -> Counter[Row]:
    return sum(parts.values(), Counter())


# --------------------------------------------------------------------------- Spark


@pytest.fixture
def spark(spark: Any) -> Any:
    """The shared session, with the data source registered."""
    ash_spark.register(spark)
    return spark


@pytest.mark.spark
@pytest.mark.parametrize("target", ["80KiB", "8KiB"], ids=["file-groups", "regions"])
def test_one_spark_partition_per_planned_task(spark, local_dataset, target):
    ds = ash.open_dataset(local_dataset.url)
    plan = ds.plan(target, **SKEW)
    hot_tasks = [t for t in plan if t.subpartitions == range(HOT, HOT + 1)]
    assert len(hot_tasks) > 1, "the plan should split the hot subpartition"
    if target == "8KiB":
        assert any(t.regions is not None for t in hot_tasks)
    else:
        assert any(len(t.subpartitions) > 1 for t in plan), "small ones should be coalesced"

    df = (
        spark.read.format("arrowshuffle")
        .option("target_bytes", target)
        .option("skew_factor", "2")
        .option("skew_min_bytes", "0")
        .load(local_dataset.url)
    )
    assert df.rdd.getNumPartitions() == len(plan)
    parts = by_partition(df)
    for i, task in enumerate(plan):  # partition i is task i, broadcast rows included
        assert parts.get(i, Counter()) == rows_of(ds.read(task=task)), f"task {i}: {task}"
    hot_from = {p for p, rows in parts.items() if any(r[1] == HOT for r in rows)}
    assert len(hot_from) > 1, "the hot subpartition's rows should come from several partitions"

    everything = rows_of(ds.read())
    assert total(parts) == everything
    if target == "80KiB":  # and the default read (its own plan) returns the same rows
        default = spark.read.format("arrowshuffle").load(local_dataset.url)
        assert rows_of(default.toArrow()) == everything


@pytest.mark.spark
def test_subpartitions_option_restricts_the_plan(spark, local_dataset):
    ds = ash.open_dataset(local_dataset.url)
    chosen = [0, 1, 2, 5]
    plan = ds.plan("80KiB", subpartitions=chosen, **SKEW)
    df = ash_spark.read(
        spark, local_dataset.url, subpartitions="0-2,5", target_bytes="80KiB", **SKEW
    )
    assert df.rdd.getNumPartitions() == len(plan)
    parts = by_partition(df)
    assert [parts.get(i, Counter()) for i in range(len(plan))] == [
        rows_of(ds.read(task=t)) for t in plan
    ]
    assert total(parts) == rows_of(ds.read(chosen))


@pytest.mark.spark
def test_subpartition_mode_keeps_partition_s_as_subpartition_s(spark, local_dataset):
    ds = ash.open_dataset(local_dataset.url)
    df = spark.read.format("arrowshuffle").option("partitioning", "subpartition")
    df = df.load(local_dataset.url)
    assert df.rdd.getNumPartitions() == N
    parts = by_partition(df)
    assert {s: parts.get(s, Counter()) for s in range(N)} == {
        s: rows_of(ds.read(s)) for s in range(N)
    }
    # the helper's spelling, limited to a selection: partition i is the i-th selected one
    picked = by_partition(
        ash_spark.read(spark, local_dataset.url, partitioning="subpartition", subpartitions=[3, 6])
    )
    assert picked == {0: rows_of(ds.read(3)), 1: rows_of(ds.read(6))}


@pytest.mark.spark
@pytest.mark.s3
def test_planned_read_on_object_storage(spark, s3_endpoint, s3_bucket):
    options = s3_endpoint.storage_options()
    written = skewed_dataset(f"{s3_bucket}/skewed", options)
    ds = ash.open_dataset(written.url, options)
    plan = ds.plan("80KiB", **SKEW)
    assert sum(t.subpartitions == range(HOT, HOT + 1) for t in plan) > 1
    df = ash_spark.read(spark, written.url, storage_options=options, target_bytes="80KiB", **SKEW)
    assert df.rdd.getNumPartitions() == len(plan)
    parts = by_partition(df)
    assert [parts.get(i, Counter()) for i in range(len(plan))] == [
        rows_of(ds.read(task=t)) for t in plan
    ]
    assert total(parts) == rows_of(ds.read())


@pytest.mark.spark
def test_bad_plan_options_fail_the_query_with_a_clear_error(spark, local_dataset):
    reader = spark.read.format("arrowshuffle").option("target_bytes", "lots")
    with pytest.raises(Exception, match="target_bytes must be a byte count"):
        reader.load(local_dataset.url).count()
    reader = spark.read.format("arrowshuffle").option("consumers", 2)
    with pytest.raises(Exception, match="cannot be combined with partitioning 'subpartition'"):
        reader.option("partitioning", "subpartition").load(local_dataset.url).count()


# --------------------------------------------------------------------------- in process


def options(**values: Any) -> CaseInsensitiveDict:
    return CaseInsensitiveDict({k: str(v) for k, v in values.items()})


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"partitioning": "tasks"}, "partitioning must be one of plan, subpartition, consumers"),
        ({"partitioning": "consumers"}, "partitioning 'consumers' needs option consumers"),
        ({"consumers": "2", "partitioning": "plan"}, "cannot be combined with partitioning"),
        ({"partitioning": "subpartition", "target_bytes": "1MiB"}, "target_bytes tunes"),
        ({"consumers": "2", "max_tasks": "4"}, "max_tasks tunes partitioning 'plan'"),
        ({"target_bytes": "lots"}, "target_bytes must be a byte count"),
        ({"target_bytes": "0"}, "target_bytes must be at least 1 byte, found '0'"),
        ({"skew_factor": "-1"}, "skew_factor must be a finite number above 0, found '-1'"),
        ({"skew_factor": "many"}, "skew_factor must be a number, found 'many'"),
        ({"skew_min_bytes": "-5"}, "skew_min_bytes must be a byte count"),
        ({"max_tasks": "0"}, "max_tasks must be at least 1, found 0"),
        ({"parallelism": "two"}, "parallelism must be an integer, found 'two'"),
    ],
)
def test_bad_reader_options_name_what_was_expected(given, message):
    with pytest.raises(InvalidOptionError, match=message):
        parse_read_options(options(path="/data/ds", **given))


def test_reader_option_modes_and_the_default_target():
    assert parse_read_options(options(path="/d")).partitioning == "plan"
    assert parse_read_options(options(path="/d", consumers=3)).partitioning == "consumers"
    parsed = parse_read_options(options(path="/d", PARTITIONING="Subpartition"))
    assert parsed.partitioning == "subpartition"
    given = parse_read_options(options(path="/d", target_bytes="1MiB", parallelism=64))
    assert given.plan_target(10**12) == 2**20  # an explicit target is kept as is
    spread = parse_read_options(options(path="/d", parallelism=4))
    assert spread.plan_target(400 * 2**20) == 100 * 2**20
    assert spread.plan_target(10**12) == DEFAULT_MAX_TARGET_BYTES
    assert spread.plan_target(1000) == DEFAULT_MIN_TARGET_BYTES
    cores = parse_read_options(options(path="/d"))
    assert cores.plan_target(2**30) == max(
        DEFAULT_MIN_TARGET_BYTES, min(DEFAULT_MAX_TARGET_BYTES, -(-(2**30) // os.cpu_count()))
    )


def test_planned_partitions_are_small_and_read_their_task(local_dataset):
    source = ArrowShuffleDataSource(options(path=local_dataset.url, target_bytes="80KiB", **SKEW))
    reader = source.reader(source.schema())
    ds = ash.open_dataset(local_dataset.url)
    parts = reader.partitions()
    plan = ds.plan("80KiB", **SKEW)
    assert len(parts) == len(plan)
    executor = pickle.loads(pickle.dumps(reader))  # as Spark ships it: without the dataset
    assert executor._dataset is None
    for part, task in zip(parts, plan, strict=True):
        assert isinstance(part, PlannedPartition)
        # A task of every file carries no file list: partitions stay small for many files.
        assert part.files == (None if task.files == tuple(range(ds.num_files)) else task.files)
        again = pickle.loads(pickle.dumps(part))
        assert again.task(ds.num_files) == task
        assert len(pickle.dumps(part)) < 400
        got = pa.Table.from_batches(list(executor.read(again)), schema=reader.target)
        assert rows_of(got) == rows_of(ds.read(task=task))


def test_pushdown_prunes_before_planning(tmp_path: Path):
    """Filters on the key pick subpartitions first; the plan then splits the hot one."""
    from pyspark.sql.datasource import EqualTo, In
    from pyspark.sql.pandas.types import to_arrow_schema
    from pyspark.sql.types import IntegerType, StringType, StructField, StructType

    struct = StructType([StructField("k", IntegerType()), StructField("s", StringType())])
    arrow = to_arrow_schema(struct, timezone="UTC")
    keys = [7] * 600 + list(range(100))
    batch = pa.record_batch([pa.array(keys, pa.int32()), pa.array([f"v{k}" for k in keys])], arrow)
    path = str(tmp_path / "ds")
    source = ArrowShuffleDataSource(options(path=path, num_subpartitions=N, partition_by="k"))
    writer = source.writer(struct, overwrite=True)
    writer.commit([writer.write_task(iter([batch]), f, "a") for f in range(3)])
    ds = ash.open_dataset(path)
    home = {k: s for s in range(N) for k in ds.read(s)["k"].to_pylist()}
    others: dict[int, int] = {}  # three keys of three other subpartitions
    for k in range(100):
        if home[k] != home[7] and home[k] not in others.values() and len(others) < 3:
            others[k] = home[k]
    chosen = sorted({home[7], *others.values()})

    reader = ArrowShuffleDataSource(
        options(path=path, pushdown="true", target_bytes="1KiB", **SKEW)
    ).reader(struct)
    reader.pushFilters([In(("k",), (7, *others))])
    parts = reader.partitions()
    assert sorted({s for p in parts for s in p.subpartitions}) == chosen
    hot = [p for p in parts if p.subpartitions == range(home[7], home[7] + 1)]
    assert len(hot) > 1, "the hot subpartition is split over the files"
    got = [b for p in parts for b in reader.read(p)]
    found = pa.Table.from_batches(got, schema=reader.target)
    assert sorted(found["k"].to_pylist()) == sorted(ds.read(chosen)["k"].to_pylist())

    nothing = ArrowShuffleDataSource(options(path=path, pushdown="true")).reader(struct)
    nothing.pushFilters([EqualTo(("k",), 7), EqualTo(("k",), 8)])  # k = 7 AND k = 8
    (empty,) = nothing.partitions()
    assert isinstance(empty, SubpartitionSelection) and list(nothing.read(empty)) == []


def test_a_shipped_reader_plans_the_version_it_was_built_on(tmp_path: Path):
    """A reader that lost its opened dataset (pickled) plans the same version again, not the
    latest: its tasks check their files against that version's."""
    path = str(tmp_path / "ds")
    table = pa.table({"k": pa.array(range(200), pa.int64())})
    ash.write_dataset(table, path, num_subpartitions=N, by="k")
    source = ArrowShuffleDataSource(options(path=path, target_bytes="1KiB"))
    reader = source.reader(source.schema())
    shipped = pickle.loads(pickle.dumps(reader))
    for _ in range(2):  # two more files: the latest version's plan would name them
        ash.write_dataset(table, path, num_subpartitions=N, by="k", mode="append")
    parts = shipped.partitions()
    rows = [
        r
        for part in parts
        for b in shipped.read(pickle.loads(pickle.dumps(part)))
        for r in b.column("k").to_pylist()
    ]
    assert sorted(rows) == list(range(200))
