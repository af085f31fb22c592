"""Spark integration: the ``arrowshuffle`` Python data source (imports pyspark lazily).

>>> import arrowshuffle.spark
>>> arrowshuffle.spark.register(spark)  # doctest: +SKIP
>>> (df.write.format("arrowshuffle").option("num_subpartitions", 64)  # doctest: +SKIP
...    .option("partition_by", "k").mode("overwrite").save("/data/shuffle"))
>>> spark.read.format("arrowshuffle").load("/data/shuffle")  # doctest: +SKIP
>>> (spark.read.format("arrowshuffle").option("partitioning", "subpartition")  # doctest: +SKIP
...    .load("/data/shuffle"))  # Spark partition s = subpartition s

A read is cut into Spark partitions by the dataset's read plan by default: small
subpartitions coalesced, skewed ones split (options ``target_bytes``, ``skew_factor``,
``skew_min_bytes``, ``max_tasks``, ``parallelism``); ``partitioning=subpartition`` keeps one
Spark partition per subpartition and ``consumers`` P contiguous ranges. See
:mod:`arrowshuffle.spark.options` for every option.

:func:`map_cogroups` runs a function on the same subpartitions of several co-partitioned
datasets, one Spark task each, with no Exchange in the plan (a join or an aggregation on the
partitioning keys without a second shuffle).

:func:`write` does the same from Python and lets Spark compute the ``hash`` partitioner's
subpartitions in the JVM; :func:`read` is the reader with keyword options.
"""

from __future__ import annotations

from arrowshuffle.spark.api import (
    FORMAT_NAME,
    SUBPARTITION_COLUMN,
    range_boundaries,
    read,
    register,
    write,
)
from arrowshuffle.spark.cogroup import map_cogroups
from arrowshuffle.spark.compact import compact
from arrowshuffle.spark.session import (
    SparkUnavailableError,
    check_spark_available,
    java_available,
    local_session,
)

__all__ = [
    "FORMAT_NAME",
    "SUBPARTITION_COLUMN",
    "SparkUnavailableError",
    "check_spark_available",
    "compact",
    "java_available",
    "local_session",
    "map_cogroups",
    "range_boundaries",
    "read",
    "register",
    "write",
]
