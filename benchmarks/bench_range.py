"""Range boundaries of the Spark writer against Spark's own ``repartitionByRange``.

Run from the repository root::

    python -m benchmarks.bench_range --rows 200000 --subpartitions 16 --partitions 4

For a uniform, a skewed and a hot long key (see ``_keys``), the DataFrame is written with
``arrowshuffle.spark.write(df, partitioner="range", partition_by="k")`` (boundaries drawn once
on the driver from a sample) and repartitioned with ``df.repartitionByRange(N, "k")`` (Spark's
``RangePartitioner``; what each partition holds, read through ``spark_partition_id()``, gives
its rows and its largest key, Spark's boundary). Printed per key: the largest relative
difference between the two per-subpartition row counts, each side's largest deviation from
an even split (rows / N), and the largest difference between the two boundaries' ranks (the
fraction of rows at or below each boundary).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from typing import Any

import numpy as np


def _session() -> Any:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _keys(spark: Any, rows: int, partitions: int, kind: str) -> Any:
    from pyspark.sql import functions as F

    u = F.rand(seed={"uniform": 7, "skewed": 11, "hot": 13}[kind])
    # uniform: 0 .. 10**6; skewed: most keys near 0 (u**4), a long tail; hot: uniform, but a
    # tenth of the rows on the single key 500000.
    key = F.floor((u * u * u * u if kind == "skewed" else u) * F.lit(1_000_000)).cast("long")
    if kind == "hot":
        key = F.when(F.rand(seed=17) < 0.1, F.lit(500_000).cast("long")).otherwise(key)
    return spark.range(rows, numPartitions=partitions).select(key.alias("k")).cache()


def _rank(sorted_keys: np.ndarray, bounds: np.ndarray) -> np.ndarray:
    """The fraction of keys at or below each boundary."""
    return np.searchsorted(sorted_keys, bounds, side="right") / len(sorted_keys)


def compare(spark: Any, df: Any, n: int) -> dict[str, Any]:
    from pyspark.sql import functions as F

    import arrowshuffle.spark as ash_spark

    with tempfile.TemporaryDirectory() as directory:
        dataset = ash_spark.write(
            df, directory, num_subpartitions=n, partitioner="range", partition_by="k"
        )
        ours = dataset.subpartition_sizes()[1].astype(np.int64)
        our_bounds = np.asarray(dataset.manifest.partitioner["boundaries"], dtype=np.int64)
    held = (
        df.repartitionByRange(n, "k")
        .groupBy(F.spark_partition_id().alias("p"))
        .agg(F.count("*").alias("rows"), F.max("k").alias("high"))
        .collect()
    )
    spark_rows = np.zeros(n, dtype=np.int64)
    highs = {}
    for row in held:
        spark_rows[row["p"]] = row["rows"]
        highs[row["p"]] = row["high"]
    spark_bounds = np.array([highs[p] for p in sorted(highs)][:-1], dtype=np.int64)
    keys = np.sort(df.toArrow().column("k").to_numpy())
    even = len(keys) / n
    common = min(len(our_bounds), len(spark_bounds))
    return {
        "rows": len(keys),
        "subpartitions": n,
        "max_rel_diff_rows": float(np.max(np.abs(ours - spark_rows) / np.maximum(spark_rows, 1))),
        "max_dev_from_even_ours": float(np.max(np.abs(ours - even)) / even),
        "max_dev_from_even_spark": float(np.max(np.abs(spark_rows - even)) / even),
        "max_rank_diff_bounds": float(
            np.max(np.abs(_rank(keys, our_bounds[:common]) - _rank(keys, spark_bounds[:common])))
        ),
        "rows_ours": ours.tolist(),
        "rows_spark": spark_rows.tolist(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--subpartitions", type=int, default=16)
    parser.add_argument("--partitions", type=int, default=4)
    args = parser.parse_args()
    spark = _session()
    results = {}
    for name in ("uniform", "skewed", "hot"):
        df = _keys(spark, args.rows, args.partitions, name)
        results[name] = compare(spark, df, args.subpartitions)
        r = results[name]
        print(
            f"{name:8} rows diff vs repartitionByRange {r['max_rel_diff_rows']:.1%}, "
            f"deviation from even: ours {r['max_dev_from_even_ours']:.1%}, "
            f"Spark {r['max_dev_from_even_spark']:.1%}; "
            f"boundary rank diff {r['max_rank_diff_bounds']:.2%}"
        )
    print(json.dumps(results))
    spark.stop()


if __name__ == "__main__":
    main()
