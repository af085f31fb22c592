"""Every partitioner through every dataset writer: the dataset validates deep, reads back the
rows written, and compacts into a dataset that does both again.

Writers: the Python ``write_dataset`` (three producers, committed one after another), the
Spark DataFrame writer and ``arrowshuffle.spark.write`` (one producer per Spark partition),
on the shared local SparkSession with small data.
"""

from __future__ import annotations

import datetime as dt
import decimal
import itertools
import json
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

import arrowshuffle as ash
from arrowshuffle.format.errors import InvalidOptionError
from arrowshuffle.format.partitioners import PARTITIONER_NAMES, boundaries_from_sample

N = 4
ROWS = 300
#: Spark partitions of the written DataFrame: at most N, so that ``forward`` applies.
SPARK_PARTITIONS = 3
WRITERS = ("python", "spark_format", "spark_helper")


def table() -> pa.Table:
    """Keys with skew and repeats, an id column for ``column``, a unique payload."""
    i = np.arange(ROWS)
    return pa.table(
        {
            "k": (i * 7919 % 1009) % 211 + np.where(i % 5 == 0, 5000, 0),
            "g": (i % N).astype(np.int32),
            "v": [f"row-{j}" for j in i],
        }
    )


def rows(data: pa.Table) -> Counter[tuple[Any, ...]]:
    """The rows of ``data`` as a multiset (columns in the table's order)."""
    columns = [data.column(name).to_pylist() for name in ("k", "g", "v")]
    return Counter(zip(*columns, strict=True))


def key_options(name: str) -> dict[str, Any]:
    """``by`` for the partitioners that take key columns."""
    if name in ("hash", "key_group", "range"):
        return {"by": "k"}
    if name == "column":
        return {"by": "g"}
    return {}


def write_python(name: str, data: pa.Table, path: Path) -> None:
    """Three producers' files, committed as overwrite, append, append."""
    for i in range(3):
        options = key_options(name)
        if name == "range":  # every producer shares the boundaries of the whole input
            options["boundaries"] = boundaries_from_sample(data.column("k"), N)
        if name == "forward":
            options["producer_index"] = i
        if name == "rescale":
            options.update(producer_index=i, num_producers=3)
        ash.write_dataset(
            data.slice(i * 100, 100),
            path,
            num_subpartitions=N,
            partitioner=name,
            mode="overwrite" if i == 0 else "append",
            **options,
        )


def write_spark_format(name: str, df: Any, path: Path) -> None:
    """``df.write.format("arrowshuffle")`` with the options this partitioner needs there."""
    import arrowshuffle.spark as ash_spark

    writer = df.write.format("arrowshuffle").mode("overwrite").option("num_subpartitions", N)
    by = key_options(name).get("by")
    if by is not None:
        writer = writer.option("partition_by", by)
    partitioner_options: dict[str, Any] = {}
    if name == "range":
        partitioner_options["boundaries"] = ash_spark.range_boundaries(df, "k", N)
    if name == "rescale":
        partitioner_options["num_producers"] = df.rdd.getNumPartitions()
    if partitioner_options:
        writer = writer.option("partitioner_options", json.dumps(partitioner_options))
    writer.option("partitioner", name).save(str(path))


def write_spark_helper(name: str, df: Any, path: Path) -> None:
    import arrowshuffle.spark as ash_spark

    ash_spark.write(
        df,
        path,
        num_subpartitions=N,
        partitioner=name,
        partition_by=key_options(name).get("by"),
    )


@pytest.fixture(scope="module")
def spark_df(spark: Any) -> Any:
    import arrowshuffle.spark as ash_spark

    ash_spark.register(spark)
    return spark.createDataFrame(table()).repartition(SPARK_PARTITIONS).cache()


def check_dataset(path: Path, expected: Counter[tuple[Any, ...]]) -> None:
    """Deep validation passes and a read returns ``expected``."""
    report = ash.validate_dataset(path, deep=True)
    assert report.ok, report
    assert rows(ash.open_dataset(path).read()) == expected


@pytest.mark.parametrize("writer", WRITERS)
@pytest.mark.parametrize("name", PARTITIONER_NAMES)
def test_every_partitioner_validates_reads_back_and_compacts(
    name: str, writer: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    data = table()
    path = tmp_path / "ds"
    if writer == "python":
        write_python(name, data, path)
    else:
        df = request.getfixturevalue("spark_df")
        (write_spark_format if writer == "spark_format" else write_spark_helper)(name, df, path)
    # A read of every subpartition returns a broadcast row once per subpartition.
    copies = N if name == "broadcast" else 1
    expected = Counter({row: count * copies for row, count in rows(data).items()})
    check_dataset(path, expected)
    files = ash.open_dataset(path).num_files
    assert files > 1, "compaction would have nothing to merge"
    ash.compact(str(path))
    assert ash.open_dataset(path).num_files < files
    check_dataset(path, expected)


def test_spark_range_subpartitions_are_disjoint_ordered_key_ranges(
    spark_df: Any, tmp_path: Path
) -> None:
    import arrowshuffle.spark as ash_spark

    dataset = ash_spark.write(
        spark_df, tmp_path / "ds", num_subpartitions=N, partitioner="range", partition_by="k"
    )
    assert dataset.num_files == SPARK_PARTITIONS
    spans = []
    for s in range(N):
        keys = dataset.read(s).column("k")
        if len(keys):
            spans.append((pa.compute.min(keys).as_py(), pa.compute.max(keys).as_py()))
    assert len(spans) == N
    assert all(high < low for (_, high), (low, _) in itertools.pairwise(spans)), spans


def test_spark_format_writer_refuses_range_without_shared_boundaries(
    spark_df: Any, tmp_path: Path
) -> None:
    writer = (
        spark_df.write.format("arrowshuffle")
        .mode("overwrite")
        .option("num_subpartitions", N)
        .option("partition_by", "k")
        .option("partitioner", "range")
    )
    with pytest.raises(Exception, match="boundaries that every Spark task shares"):
        writer.save(str(tmp_path / "ds"))
    assert not (tmp_path / "ds" / "_arrowshuffle_manifest.json").exists()
    assert not (tmp_path / "ds" / "_arrowshuffle_versions").exists()  # nothing committed


def test_spark_format_writer_refuses_rescale_without_num_producers(
    spark_df: Any, tmp_path: Path
) -> None:
    writer = (
        spark_df.write.format("arrowshuffle")
        .mode("overwrite")
        .option("num_subpartitions", N)
        .option("partitioner", "rescale")
    )
    with pytest.raises(Exception, match="num_producers"):
        writer.save(str(tmp_path / "ds"))


def test_spark_helper_refuses_forward_with_more_partitions_than_subpartitions(
    spark_df: Any, tmp_path: Path
) -> None:
    import arrowshuffle.spark as ash_spark

    with pytest.raises(InvalidOptionError, match="at most 2"):
        ash_spark.write(spark_df, tmp_path / "ds", num_subpartitions=2, partitioner="forward")


@pytest.mark.parametrize(
    ("spark_type", "keys"),
    [
        ("int", list(range(-40, 40))),
        (
            "timestamp",
            [
                dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc) + dt.timedelta(hours=h)
                for h in range(80)
            ],
        ),
        ("date", [dt.date(2020, 1, 1) + dt.timedelta(days=d) for d in range(80)]),
        ("decimal(10,2)", [decimal.Decimal(i) / 4 for i in range(80)]),
        ("string", [f"key-{i:03d}" for i in range(80)]),
    ],
)
def test_range_boundaries_as_json_give_every_task_the_manifest_spec(
    spark_type: str, keys: list[Any], tmp_path: Path
) -> None:
    """Boundaries in the spec's JSON encoding are read as the key's type (no JVM needed)."""
    pytest.importorskip("pyspark", reason="the Spark data source needs arrowshuffle[spark]")
    from pyspark.sql.datasource import CaseInsensitiveDict
    from pyspark.sql.pandas.types import to_arrow_schema
    from pyspark.sql.types import (
        DateType,
        DecimalType,
        IntegerType,
        StringType,
        StructField,
        StructType,
        TimestampType,
    )

    from arrowshuffle.format.partitioners.range_partitioner import encode_boundaries
    from arrowshuffle.spark.datasource import ArrowShuffleDataSource

    key_type = {
        "int": IntegerType(),
        "timestamp": TimestampType(),
        "date": DateType(),
        "decimal(10,2)": DecimalType(10, 2),
        "string": StringType(),
    }[spark_type]
    struct = StructType([StructField("k", key_type), StructField("v", IntegerType())])
    arrow = to_arrow_schema(struct, timezone="UTC")
    data = pa.table({"k": keys, "v": list(range(len(keys)))}, schema=arrow)
    bounds = encode_boundaries(boundaries_from_sample(data.column("k").combine_chunks(), N))
    options = {
        "path": str(tmp_path / "ds"),
        "num_subpartitions": str(N),
        "partition_by": "k",
        "partitioner": "range",
        "partitioner_options": json.dumps({"boundaries": bounds}),
    }
    writer = ArrowShuffleDataSource(CaseInsensitiveDict(options)).writer(struct, overwrite=True)
    # Each task sees only its own keys: the boundaries must not depend on them.
    halves = [data.slice(0, 10), data.slice(10)]
    messages = [writer.write_task(iter(h.to_batches()), i, "a0") for i, h in enumerate(halves)]
    writer.commit(messages)
    assert ash.validate_dataset(tmp_path / "ds", deep=True).ok
    dataset = ash.open_dataset(tmp_path / "ds")
    assert dataset.manifest.partitioner["boundaries"] == bounds
    assert [dataset.read(s).num_rows for s in range(N)] == [20, 20, 20, 20]


@pytest.mark.parametrize(
    ("partitioner", "extra", "message"),
    [
        ("forward", {}, "partition 4 needs num_subpartitions above 4, found 4"),
        ("rescale", {"num_producers": 4}, "num_producers is 4, but Spark partition 4"),
    ],
)
def test_a_spark_task_that_cannot_be_a_producer_fails_with_the_reason(
    partitioner: str, extra: dict[str, Any], message: str, tmp_path: Path
) -> None:
    pytest.importorskip("pyspark", reason="the Spark data source needs arrowshuffle[spark]")
    from pyspark.sql.datasource import CaseInsensitiveDict
    from pyspark.sql.types import IntegerType, StructField, StructType

    from arrowshuffle.spark.datasource import ArrowShuffleDataSource

    struct = StructType([StructField("v", IntegerType())])
    options = {"path": str(tmp_path / "ds"), "num_subpartitions": str(N)}
    options.update(partitioner=partitioner, partitioner_options=json.dumps(extra))
    writer = ArrowShuffleDataSource(CaseInsensitiveDict(options)).writer(struct, overwrite=True)
    batch = pa.record_batch([pa.array([1, 2], pa.int32())], names=["v"])
    assert writer.write_task(iter([batch]), N - 1, "a0").written is not None
    with pytest.raises(InvalidOptionError, match=message):
        writer.write_task(iter([batch]), N, "a0")
