"""Subpartition pruning: equality filters on the partitioning key name the subpartitions to read.

For a dataset written with a key partitioner (``hash``, ``key_group`` or ``column``), a query
that fixes every key column to one or a few values (``k = 5``, ``k IN (1, 2)``) can only find
rows in the subpartitions those values map to: the partitioner itself computes them. Spark
passes such filters to the reader when ``spark.sql.python.filterPushdown.enabled`` is true;
Spark still applies every filter to the rows read, so pruning only skips subpartitions.
"""

from __future__ import annotations

import datetime as dt
import itertools
import math
from collections.abc import Iterable, Sequence
from typing import Any

import pyarrow as pa

#: Above this many key combinations the reader does not prune (it reads everything).
MAX_COMBINATIONS = 4096


def key_columns(spec: dict[str, Any]) -> list[str] | None:
    """The columns that alone decide a row's subpartition under ``spec``, if any."""
    name = spec.get("name")
    if name in ("hash", "key_group"):
        columns = spec.get("columns")
        if isinstance(columns, list) and columns and all(isinstance(c, str) for c in columns):
            return list(columns)
    if name == "column" and isinstance(spec.get("column"), str):
        return [spec["column"]]
    return None


def _allowed_values(filters: Iterable[Any], columns: Sequence[str]) -> dict[str, list[Any]]:
    from pyspark.sql.datasource import EqualTo, In

    allowed: dict[str, list[Any]] = {}
    for f in filters:
        if isinstance(f, EqualTo):
            values = [f.value]
        elif isinstance(f, In):
            values = list(f.value)
        else:
            continue
        if len(f.attribute) != 1 or f.attribute[0] not in columns:
            continue
        column = f.attribute[0]
        if column in allowed:  # filters are ANDed: keep values allowed by both
            values = [v for v in allowed[column] if any(_equal(v, w) for w in values)]
        allowed[column] = values
    return allowed


def _equal(a: Any, b: Any) -> bool:
    """Whether Spark's ``=`` holds between two filter values: NaN equals NaN there."""
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return bool(a == b)


def _usable(value: Any) -> bool:
    # A naive datetime's time zone is unknown: no pruning rather than a wrong one.
    return not (isinstance(value, dt.datetime) and value.tzinfo is None)


def prune(
    spec: dict[str, Any], schema: pa.Schema, num_subpartitions: int, filters: Iterable[Any]
) -> set[int] | None:
    """The subpartitions that can hold rows passing every filter, or None if it cannot say.

    Args:
        spec: the dataset's partitioner spec.
        schema: the dataset's Arrow schema (the key values are built with its types).
        num_subpartitions: the dataset's subpartition count.
        filters: Spark's pushed filters (``pyspark.sql.datasource.Filter``), ANDed.
    """
    columns = key_columns(spec)
    if columns is None or any(c not in schema.names for c in columns):
        return None
    allowed = _allowed_values(filters, columns)
    if set(allowed) != set(columns):
        return None
    sizes = [len(allowed[c]) for c in columns]
    total = 1
    for size in sizes:
        total *= size
    if total == 0:
        return set()
    if total > MAX_COMBINATIONS:
        return None
    combinations = list(itertools.product(*(allowed[c] for c in columns)))
    if not all(_usable(v) for combo in combinations for v in combo):
        return None
    try:
        keys = pa.table(
            {
                c: pa.array([combo[i] for combo in combinations], type=schema.field(c).type)
                for i, c in enumerate(columns)
            }
        )
        from arrowshuffle.format.partitioners import partitioner_from_spec

        ids = partitioner_from_spec(spec, num_subpartitions).assign(keys)
    except (pa.ArrowException, ValueError, TypeError, OverflowError):
        return None  # a value the key type cannot hold: read everything, Spark filters
    return {int(s) for s in ids}
