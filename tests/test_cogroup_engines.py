"""Co-grouped joins in polars and in Spark: results equal to one whole join, no second shuffle.

Datasets are written by Spark (the hash computed in the JVM) and by pyarrow, and read together:
one engine writes, another reads.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

pytest.importorskip("polars", reason="the polars co-group needs polars")

import polars as pl

import arrowshuffle as ash
import arrowshuffle.polars as ash_polars


def tables(seed: int, rows: int = 20_000) -> tuple[pa.Table, pa.Table]:
    rng = np.random.default_rng(seed)
    keys = 2000
    orders = pa.table(
        {
            "o_key": np.arange(keys, dtype=np.int64),
            "o_cat": pa.array(rng.integers(0, 5, keys)).cast(pa.string()),
        }
    )
    lk = rng.integers(0, keys + 50, rows)
    lk[: rows // 3] = 11  # a third of the rows on one key
    lines = pa.table(
        {
            "l_key": rng.permutation(lk).astype(np.int64),
            "l_val": rng.random(rows),
            "l_qty": rng.integers(1, 50, rows).astype(np.int32),
        }
    )
    return orders, lines


def write_pair(tmp: Path, n_orders: int = 16, n_lines: int = 32, files: int = 4) -> tuple[str, str]:
    orders, lines = tables(0)
    o, ln = str(tmp / "orders"), str(tmp / "lines")
    ash.write_dataset(orders, o, num_subpartitions=n_orders, partitioner="hash", by=["o_key"])
    step = -(-lines.num_rows // files)
    for i in range(files):
        ash.write_dataset(
            lines.slice(i * step, step),
            ln,
            num_subpartitions=n_lines,
            partitioner="hash",
            by=["l_key"],
            mode="error" if i == 0 else "append",
        )
    return o, ln


def revenue_by_category(lines: Any, orders: Any) -> Any:
    """The query: an inner join on the key, then a sum per order category (polars)."""
    return (
        lines.join(orders, left_on="l_key", right_on="o_key")
        .group_by("o_cat")
        .agg(pl.col("l_val").sum().alias("revenue"), pl.len().alias("lines"))
    )


def test_polars_cogroup_join_equals_one_polars_join(tmp_path: Path) -> None:
    o, ln = write_pair(tmp_path)
    orders, lines = tables(0)
    groups = ash_polars.cogroup({"l": ln, "o": o}, split="l", target_bytes="32KiB")
    assert any(t.split == "l" for t in groups.tasks)
    frames = next(iter(groups))
    assert isinstance(frames["l"], pl.LazyFrame) and isinstance(frames["o"], pl.LazyFrame)
    parts = list(groups.map(lambda f: revenue_by_category(f["l"], f["o"]).collect(), threads=2))
    got = (
        pl.concat(parts)
        .group_by("o_cat")
        .agg(pl.col("revenue").sum(), pl.col("lines").sum())
        .sort("o_cat")
    )
    expected = revenue_by_category(pl.from_arrow(lines), pl.from_arrow(orders)).sort("o_cat")
    assert got["lines"].to_list() == expected["lines"].to_list()
    assert np.allclose(got["revenue"].to_numpy(), expected["revenue"].to_numpy())


def test_polars_cogroup_per_key_aggregation_without_split(tmp_path: Path) -> None:
    o, ln = write_pair(tmp_path, n_orders=4, n_lines=4)
    _, lines = tables(0)
    groups = ash_polars.cogroup({"l": ln, "o": o}, columns={"l": ["l_key", "l_qty"]})
    per_task = [f["l"].group_by("l_key").agg(pl.col("l_qty").sum()).collect() for f in groups]
    got = pl.concat(per_task).sort("l_key")
    expected = pl.from_arrow(lines).group_by("l_key").agg(pl.col("l_qty").sum()).sort("l_key")
    assert got.equals(expected)  # every key in exactly one task


# ------------------------------------------------------------------------------- Spark


def _plan(df: Any) -> str:
    return str(df._jdf.queryExecution().executedPlan().toString())


def test_spark_map_cogroups_has_no_exchange_and_equals_spark_join(
    spark: Any, tmp_path: Path
) -> None:
    import arrowshuffle.spark as ash_spark

    orders, lines = tables(1)
    o, ln = str(tmp_path / "orders"), str(tmp_path / "lines")
    # Written by Spark, the hash computed in the JVM; the orders by pyarrow.
    ash_spark.write(
        spark.createDataFrame(lines.to_pandas()).repartition(3),
        ln,
        num_subpartitions=16,
        partition_by="l_key",
    )
    ash.write_dataset(orders, o, num_subpartitions=8, partitioner="hash", by=["o_key"])

    def per_task(t: dict[str, pa.Table]) -> pa.Table:
        joined = t["l"].join(t["o"], "l_key", "o_key", join_type="inner")
        return joined.group_by("o_cat").aggregate([("l_val", "sum"), ("l_val", "count")])

    df = ash_spark.map_cogroups(
        spark,
        {"l": ln, "o": o},
        per_task,
        "o_cat string, l_val_sum double, l_val_count long",
        split="l",
        target_bytes="16KiB",
        columns={"l": ["l_key", "l_val"]},
    )
    plan = _plan(df)
    assert "Exchange" not in plan and "MapInArrow" in plan, plan
    assert df.rdd.getNumPartitions() > 2
    got = df.groupBy("o_cat").sum("l_val_sum", "l_val_count").toPandas().sort_values("o_cat")
    sl = spark.createDataFrame(lines.to_pandas())
    so = spark.createDataFrame(orders.to_pandas())
    expected = (
        sl.join(so, sl.l_key == so.o_key)
        .groupBy("o_cat")
        .agg({"l_val": "sum", "*": "count"})
        .toPandas()
        .sort_values("o_cat")
    )
    assert "Exchange" in _plan(sl.join(so, sl.l_key == so.o_key))  # Spark's own shuffles
    assert got["sum(l_val_count)"].tolist() == expected["count(1)"].tolist()
    assert np.allclose(got["sum(l_val_sum)"].to_numpy(), expected["sum(l_val)"].to_numpy())


def test_spark_map_cogroups_takes_polars_results_and_a_struct_type(
    spark: Any, tmp_path: Path
) -> None:
    from pyspark.sql.types import DoubleType, LongType, StructField, StructType

    import arrowshuffle.spark as ash_spark

    o, ln = write_pair(tmp_path, n_orders=8, n_lines=8)
    orders, lines = tables(0)
    schema = StructType([StructField("l_key", LongType()), StructField("revenue", DoubleType())])

    def per_key(t: dict[str, pa.Table]) -> Any:
        frame = pl.from_arrow(t["l"]).join(pl.from_arrow(t["o"]), left_on="l_key", right_on="o_key")
        return frame.group_by("l_key").agg(pl.col("l_val").sum().alias("revenue"))

    df = ash_spark.map_cogroups(spark, {"l": ln, "o": o}, per_key, schema, target_bytes="32KiB")
    assert "Exchange" not in _plan(df)
    got = pl.from_pandas(df.toPandas()).sort("l_key")
    expected = (
        pl.from_arrow(lines)
        .join(pl.from_arrow(orders), left_on="l_key", right_on="o_key")
        .group_by("l_key")
        .agg(pl.col("l_val").sum().alias("revenue"))
        .sort("l_key")
    )
    assert got["l_key"].to_list() == expected["l_key"].to_list()
    assert np.allclose(got["revenue"].to_numpy(), expected["revenue"].to_numpy())


def test_spark_map_cogroups_refuses_before_spark_runs(spark: Any, tmp_path: Path) -> None:
    import arrowshuffle.spark as ash_spark

    orders, lines = tables(2)
    o, ln = str(tmp_path / "orders"), str(tmp_path / "lines")
    ash.write_dataset(orders, o, num_subpartitions=8, partitioner="hash", by=["o_key"])
    ash.write_dataset(lines, ln, num_subpartitions=8, partitioner="hash", by=["l_key"], seed=1)
    with pytest.raises(ash.PartitioningMismatchError, match="seed"):
        ash_spark.map_cogroups(spark, {"l": ln, "o": o}, lambda t: None, "x long")
    o2, _ = write_pair(tmp_path / "ok")
    with pytest.raises(ash.InvalidOptionError, match="func must be callable"):
        ash_spark.map_cogroups(spark, {"o": o2}, "not a function", "x long")
    with pytest.raises(ash.InvalidOptionError, match="schema must be"):
        ash_spark.map_cogroups(spark, {"o": o2}, lambda t: None, 42)
