"""Co-partitioned work in Spark without a second shuffle: :func:`map_cogroups`.

A Python data source cannot tell Spark how its rows are partitioned, so a join of two
datasets read through ``spark.read.format("arrowshuffle")`` shuffles both again. Here each
Spark task reads the same key groups of every input itself (a co-grouped read planned on the
driver, :func:`arrowshuffle.cogroup`) and runs a Python function on them: the plan is a
``Range`` of one row per task under ``MapInArrow``, with no ``Exchange``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

import pyarrow as pa

from arrowshuffle.format.errors import InvalidOptionError
from arrowshuffle.readers.cogroup import TASKS_PER_CORE, CoGroup, cogroup
from arrowshuffle.readers.dataset import ShuffleDataset
from arrowshuffle.readers.integrity import Verify
from arrowshuffle.spark.api import _default_parallelism, register
from arrowshuffle.spark.types import conform, spark_arrow_schema

#: What ``func`` may return for a task: Arrow data, anything with ``to_arrow()`` (a polars
#: DataFrame), a pandas DataFrame, an iterable of those, or None for no rows.
TaskResult = Any


def map_cogroups(
    spark: Any,
    inputs: Mapping[str, str | os.PathLike[str] | ShuffleDataset],
    func: Callable[[dict[str, pa.Table]], TaskResult],
    schema: Any,
    *,
    columns: Mapping[str, Sequence[str]] | None = None,
    split: str | None = None,
    target_bytes: int | str | None = None,
    parallelism: int | None = None,
    skew_factor: float | None = None,
    skew_min_bytes: int | str | None = None,
    max_tasks: int | None = None,
    verify: Verify = "auto",
    storage_options: dict[str, Any] | None = None,
) -> Any:
    """Run ``func`` on each task's co-grouped Arrow tables in Spark; return the results.

    The inputs' compatibility is checked and the tasks planned here, on the driver, from the
    manifests (see :func:`arrowshuffle.cogroup` for the rules and options). Each Spark
    partition then reads one task's tables — ``{name: pyarrow.Table}``, the same key groups of
    every input, of the manifest versions planned — and calls ``func`` on them. The returned
    DataFrame's plan has no ``Exchange``: nothing is shuffled again.

    Example::

        def join(t):
            l, o = t["l"], t["o"]
            return l.join(o, "l_orderkey", "o_orderkey").group_by("o_orderpriority").aggregate(
                [("l_extendedprice", "sum")])

        df = arrowshuffle.spark.map_cogroups(
            spark, {"l": "/data/lineitem", "o": "/data/orders"}, join,
            "o_orderpriority string, l_extendedprice_sum double")

    Args:
        spark: the SparkSession.
        inputs: dataset paths or URLs (or opened datasets), by a name of your choice.
        func: called once per task with its tables; returns a ``pyarrow.Table`` or
            ``RecordBatch``, a polars or pandas DataFrame, an iterable of those, or None.
            Columns are matched to ``schema`` by name (and cast where Spark needs it).
        schema: the result's schema: a ``StructType`` or a DDL string.
        columns: per input name, the columns to read (all by default).
        split: the input whose skewed groups may be split over its files (see
            :func:`arrowshuffle.cogroup` for the computations a split keeps exact).
        target_bytes: the bytes a task aims at (default: the inputs' bytes over
            ``parallelism`` tasks).
        parallelism: the tasks to aim at (default: twice the session's default parallelism).
        skew_factor: a group above this multiple of the median group (default 5) ...
        skew_min_bytes: ... and above this size (default: the target) is skewed.
        max_tasks: the most tasks.
        verify: check chunk checksums (``"auto"``: object stores only).
        storage_options: fsspec options for URLs.

    Raises:
        PartitioningMismatchError: inputs that are not co-partitioned.
        InvalidOptionError: bad options.
    """
    register(spark)  # checks the session and that its Python workers can import this package
    if not callable(func):
        raise InvalidOptionError(f"func must be callable, found {type(func).__name__}")
    struct = _struct(spark, schema)
    if parallelism is None and target_bytes is None:
        cores = _default_parallelism(spark)
        parallelism = TASKS_PER_CORE * cores if cores else None
    plan: dict[str, Any] = {"skew_factor": skew_factor} if skew_factor is not None else {}
    groups = cogroup(
        inputs,
        columns=columns,
        split=split,
        target_bytes=target_bytes,
        parallelism=parallelism,
        skew_min_bytes=skew_min_bytes,
        max_tasks=max_tasks,
        verify=verify,
        storage_options=storage_options,
        **plan,
    )
    run = _TaskRunner(groups, func, spark_arrow_schema(struct))
    n = len(groups)
    return spark.range(0, n, 1, numPartitions=n).mapInArrow(run, struct)


def _struct(spark: Any, schema: Any) -> Any:
    """``schema`` as a StructType (a DDL string is parsed by Spark itself)."""
    from pyspark.sql.types import StructType

    if isinstance(schema, StructType):
        return schema
    if isinstance(schema, str):
        return spark.createDataFrame([], schema).schema
    raise InvalidOptionError(
        f"schema must be a StructType or a DDL string, found {type(schema).__name__}"
    )


class _TaskRunner:
    """The function each Spark partition runs: read its task, call ``func``, yield its rows."""

    def __init__(self, groups: CoGroup, func: Callable[..., TaskResult], target: pa.Schema):
        self.groups = groups
        self.func = func
        self.target = target

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for task in batch.column(0).to_pylist():  # one id per partition
                result = self.func(self.groups.read(int(task)))
                for out in _batches(result):
                    yield conform(out, self.target)


def _batches(result: TaskResult) -> Iterable[pa.RecordBatch]:
    """The record batches of what ``func`` returned."""
    if result is None:
        return []
    if isinstance(result, pa.RecordBatch):
        return [result]
    if hasattr(result, "to_arrow"):  # polars
        result = result.to_arrow()
    if isinstance(result, pa.Table):
        batches: list[pa.RecordBatch] = result.to_batches()
        return batches
    if type(result).__name__ == "DataFrame" and hasattr(result, "to_records"):  # pandas
        return _batches(pa.Table.from_pandas(result, preserve_index=False))
    if isinstance(result, Iterable) and not isinstance(result, (str, bytes, Mapping)):
        return [b for part in result for b in _batches(part)]
    raise InvalidOptionError(
        "the function given to map_cogroups must return a pyarrow Table or RecordBatch, a "
        f"polars or pandas DataFrame, an iterable of those, or None; it returned "
        f"{type(result).__name__}"
    )
