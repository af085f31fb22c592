"""Key-hash partitioners: Spark's ``repartition(n, cols)`` and Flink's key groups."""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from arrowshuffle.format.errors import InvalidOptionError
from arrowshuffle.format.partitioners.base import (
    Batch,
    check_int,
    check_num_subpartitions,
    column,
    column_names,
    spec_field,
    spec_names,
)
from arrowshuffle.format.partitioners.spark_hash import (
    check_key_type,
    flink_murmur_hash,
    spark_hash,
    spark_partition_ids,
)

#: Spark's seed for ``hash()`` and ``repartition``.
SPARK_SEED = 42
#: Flink's upper bound on max parallelism, so also on the key groups of ``key_group``.
MAX_KEY_GROUPS = 1 << 15


class HashPartitioner:
    """Rows with equal keys go to the same subpartition, exactly as Spark's hash partitioning.

    A row goes to ``pmod(hash(c1, c2, ...), num_subpartitions)``, where ``hash`` is Spark's
    Murmur3 over the key columns chained with seed 42: the same subpartition as the row's
    partition after ``df.repartition(num_subpartitions, c1, c2, ...)``.

    Args:
        num_subpartitions: how many subpartitions there are.
        by: the key column name, or a list of names.
        seed: the hash seed; Spark's 42 unless you need another spread.
    """

    name: ClassVar[str] = "hash"
    OPTIONS: ClassVar[tuple[str, ...]] = ("by", "seed")
    REQUIRED: ClassVar[tuple[str, ...]] = ("by",)
    RECOMPUTABLE: ClassVar[bool] = True
    broadcast = False

    def __init__(self, num_subpartitions: int, *, by: str | list[str], seed: int = SPARK_SEED):
        self.num_subpartitions = check_num_subpartitions(num_subpartitions)
        self.columns = column_names(by, partitioner=self.name)
        self.seed = check_int("seed", seed, -(2**31), 2**31)

    def spec(self) -> dict[str, Any]:
        """``{"name": "hash", "columns": [...], "seed": 42, ...}``."""
        return {
            "name": self.name,
            "function": "spark_murmur3",
            "columns": list(self.columns),
            "seed": self.seed,
            "num_subpartitions": self.num_subpartitions,
        }

    def assign(self, batch: Batch) -> np.ndarray:
        """The subpartition of every row of ``batch``."""
        keys = [column(batch, c, partitioner=self.name) for c in self.columns]
        for name, key in zip(self.columns, keys, strict=True):
            check_key_type(key.type, name)
        if self.seed == SPARK_SEED:
            ids = spark_partition_ids(keys, self.num_subpartitions)
        else:
            ids = np.mod(spark_hash(keys, self.seed).astype(np.int64), self.num_subpartitions)
        return np.asarray(ids, dtype=np.int64)

    @classmethod
    def from_spec(cls, spec: dict[str, Any], num_subpartitions: int) -> HashPartitioner:
        """Rebuild the partitioner that wrote ``spec``."""
        return cls(
            num_subpartitions,
            by=spec_names(spec, "columns"),
            seed=spec_field(spec, "seed", int) if "seed" in spec else SPARK_SEED,
        )


class KeyGroupPartitioner:
    """Flink's key groups: one key group per subpartition, read in contiguous ranges.

    As Flink's ``KeyGroupRangeAssignment``, a row's key group is
    ``murmurHash(keyHash) % maxParallelism`` with Flink's ``MathUtils.murmurHash``, and here
    the key groups are the subpartitions (``max_parallelism == num_subpartitions``, at most
    32768 as in Flink). Consumer ``i`` of ``P`` reads the contiguous range
    :func:`key_group_range` gives, so rescaling a consumer job only moves whole ranges.

    Flink hashes a key with its Java ``hashCode()``; Arrow columns have none, so the key hash
    is Spark's Murmur3 ``hash(c1, c2, ...)`` with seed 42, the same for every engine. Per type:

    * bool (as 1 or 0), int8, int16, int32, date32: the value as a 4-byte int;
    * int64 as an 8-byte long; timestamps as their microseconds in an 8-byte long;
    * float32, float64: the IEEE bit pattern as an int or a long, ``-0.0`` hashed as ``0.0``;
    * decimal: the unscaled value as a long when the precision is at most 18, else its
      big-endian two's-complement bytes;
    * string, large_string, string_view, binary: the bytes, with Spark's tail rule;
    * null: leaves the running hash unchanged; several columns are chained (each column's
      hash is the seed of the next).

    Types Spark does not have follow :func:`~arrowshuffle.format.partitioners.spark_hash.
    spark_hash`, which documents them.

    Args:
        num_subpartitions: the number of key groups (Flink's max parallelism), 1..32768.
        by: the key column name, or a list of names.
        max_parallelism: optional; must equal ``num_subpartitions`` when given.
    """

    name: ClassVar[str] = "key_group"
    OPTIONS: ClassVar[tuple[str, ...]] = ("by", "max_parallelism")
    REQUIRED: ClassVar[tuple[str, ...]] = ("by",)
    RECOMPUTABLE: ClassVar[bool] = True
    broadcast = False

    def __init__(
        self,
        num_subpartitions: int,
        *,
        by: str | list[str],
        max_parallelism: int | None = None,
    ) -> None:
        n = check_num_subpartitions(num_subpartitions)
        if n > MAX_KEY_GROUPS:
            raise InvalidOptionError(
                f"the key_group partitioner has one key group per subpartition, at most "
                f"{MAX_KEY_GROUPS} as Flink's max parallelism; found num_subpartitions={n}"
            )
        if max_parallelism is not None and max_parallelism != n:
            raise InvalidOptionError(
                f"key groups are subpartitions: max_parallelism must equal num_subpartitions "
                f"({n}), found {max_parallelism!r}"
            )
        self.num_subpartitions = n
        self.columns = column_names(by, partitioner=self.name)

    @property
    def max_parallelism(self) -> int:
        """Flink's max parallelism: the number of key groups."""
        return self.num_subpartitions

    def spec(self) -> dict[str, Any]:
        """``{"name": "key_group", "columns": [...], "max_parallelism": n, ...}``."""
        return {
            "name": self.name,
            "key_hash": "spark_murmur3",
            "columns": list(self.columns),
            "max_parallelism": self.num_subpartitions,
            "num_subpartitions": self.num_subpartitions,
        }

    def assign(self, batch: Batch) -> np.ndarray:
        """The key group (subpartition) of every row of ``batch``."""
        keys = [column(batch, c, partitioner=self.name) for c in self.columns]
        for name, key in zip(self.columns, keys, strict=True):
            check_key_type(key.type, name)
        key_hash = spark_hash(keys, SPARK_SEED)
        mixed = np.asarray(flink_murmur_hash(key_hash), dtype=np.int64)
        return np.mod(mixed, self.num_subpartitions)

    @classmethod
    def from_spec(cls, spec: dict[str, Any], num_subpartitions: int) -> KeyGroupPartitioner:
        """Rebuild the partitioner that wrote ``spec``."""
        max_parallelism = spec.get("max_parallelism")
        if max_parallelism is not None:
            max_parallelism = spec_field(spec, "max_parallelism", int)
        return cls(
            num_subpartitions,
            by=spec_names(spec, "columns"),
            max_parallelism=max_parallelism,
        )


def key_group_range(
    operator_index: int, parallelism: int, max_parallelism: int, *, flink_bounds: bool = True
) -> range:
    """The key groups consumer ``operator_index`` of ``parallelism`` reads, as Flink assigns.

    Flink's ``computeKeyGroupRangeForOperatorIndex``: the range starts at
    ``(i * maxP + P - 1) // P`` and ends, inclusive, at ``((i + 1) * maxP - 1) // P``. The
    ranges of ``i = 0 .. P-1`` are contiguous, disjoint and cover every key group; their sizes
    differ by at most one.

    Args:
        operator_index: ``i``, the consumer.
        parallelism: ``P``, how many consumers share the groups.
        max_parallelism: ``maxP``, how many key groups (or subpartitions) there are.
        flink_bounds: hold Flink's bounds, ``1 <= P <= maxP <= 32768``. Without them any
            ``maxP >= 0`` is cut, and with more consumers than groups some ranges are empty
            (what :func:`arrowshuffle.assign` does with subpartitions).

    Raises:
        InvalidOptionError: ``parallelism`` or ``max_parallelism`` outside those bounds, or an
            index outside ``0..parallelism-1``.
    """
    if flink_bounds:
        max_p = check_int("max_parallelism", max_parallelism, 1, MAX_KEY_GROUPS + 1)
        p = check_int("parallelism", parallelism, 1, max_p + 1)
    else:
        max_p = check_int("max_parallelism", max_parallelism, 0)
        p = check_int("parallelism", parallelism, 1)
    i = check_int("operator_index", operator_index, 0, p)
    start = (i * max_p + p - 1) // p
    end = ((i + 1) * max_p - 1) // p
    return range(start, max(start, end + 1))


def operator_for_key_group(key_group: int, parallelism: int, max_parallelism: int) -> int:
    """The consumer of ``parallelism`` that reads ``key_group``.

    Flink's ``computeOperatorIndexForKeyGroup``: ``key_group * P // maxP``.
    """
    max_p = check_int("max_parallelism", max_parallelism, 1, MAX_KEY_GROUPS + 1)
    p = check_int("parallelism", parallelism, 1, max_p + 1)
    group = check_int("key_group", key_group, 0, max_p)
    return group * p // max_p
