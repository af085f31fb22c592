"""Co-partitioning: when several datasets place equal keys in matching subpartitions. Pure.

Datasets are co-partitioned when every key value lands in "the same" subpartition of each, so
that subpartition ``s`` of one needs only subpartition ``s`` of the others for a join or an
aggregation on the partitioning keys. That holds when the partitioners compute the same
function of the key values:

* ``hash`` and ``key_group``: the same function and seed, the same number of key columns, and
  key columns that Spark's hash sees alike position by position (an ``int32`` and an ``int64``
  key of equal value hash differently; ``int32`` and ``int16`` do not). Key column *names* may
  differ (``l_orderkey`` and ``o_orderkey``), but the same names in another order are refused:
  they are the same columns hashed in another order.
* ``range``: the same boundaries, order and null placement, keys of the same kind.
* ``global``: every row in subpartition 0.

Other partitioners (``round_robin``, ``random``, ``rescale``, ``forward``, ``broadcast``,
``column`` ids, rows written with ``explicit`` ids) do not place rows by key, and are refused.

**Different subpartition counts.** ``hash`` and ``key_group`` put a row in ``h mod N`` for a
non-negative ``h``. When ``M`` divides ``N``, ``(h mod N) mod M = h mod M``, so subpartition
``t`` of an ``M``-dataset holds the keys of subpartitions ``t, t + M, t + 2M, ...`` of an
``N``-dataset. Inputs whose counts are all multiples of the smallest one, ``M``, are aligned on
``M`` *groups*: group ``t`` is subpartition ``t`` of the smallest input and subpartitions
``t + jM`` of the others. Counts that are not multiples of the smallest (64 and 48), and range
or global inputs of different counts, are refused.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from arrowshuffle.format.errors import InvalidOptionError, PartitioningMismatchError
from arrowshuffle.format.partitioners.range_partitioner import key_kind
from arrowshuffle.format.partitioners.spark_hash import hash_class

#: Partitioners whose subpartition is ``h mod N``, so that counts that divide each other align.
_MODULAR = ("hash", "key_group")
#: Partitioners whose placement follows from key values alone.
_BY_KEY = (*_MODULAR, "range", "global")


@dataclass(frozen=True)
class Partitioning:
    """What one input says about where its rows are.

    Attributes:
        spec: the dataset's partitioner spec (as its manifest records it).
        num_subpartitions: the dataset's subpartition count.
        schema: the dataset's Arrow schema (for the key columns' types).
    """

    spec: Mapping[str, Any]
    num_subpartitions: int
    schema: pa.Schema

    @property
    def name(self) -> str:
        """The partitioner's name (``"hash"``, ...)."""
        return str(self.spec.get("name"))

    def key_columns(self) -> list[str]:
        """The key column names the spec records (none for ``global``)."""
        if self.name == "range":
            return [str(self.spec.get("column"))]
        columns = self.spec.get("columns")
        return [str(c) for c in columns] if isinstance(columns, list) else []

    def key_types(self) -> list[pa.DataType]:
        """The key columns' types in the schema (a key the schema lacks is refused)."""
        types = []
        for column in self.key_columns():
            if column not in self.schema.names:
                raise PartitioningMismatchError(
                    f"the partitioner's key column {column!r} is not in the data; its "
                    f"columns are {self.schema.names}"
                )
            types.append(self.schema.field(column).type)
        return types

    def describe(self) -> str:
        """The partitioning in a few words, for error messages."""
        names = self.schema.names
        keys = ", ".join(
            f"{c}: {self.schema.field(c).type if c in names else 'missing'}"
            for c in self.key_columns()
        )
        fields = {
            k: v
            for k, v in self.spec.items()
            if k not in ("name", "columns", "column", "num_subpartitions", "boundaries")
        }
        if "boundaries" in self.spec:
            fields["boundaries"] = f"{len(self.spec['boundaries'])} values"
        extra = ", ".join(f"{k}={v}" for k, v in fields.items())
        text = f"{self.name}({keys})" if keys else self.name
        return f"{text} [{extra}] over {self.num_subpartitions} subpartitions".replace(" [] ", " ")


@dataclass(frozen=True)
class Alignment:
    """How co-partitioned inputs line up: ``num_groups`` groups, each a few subpartitions.

    Attributes:
        num_groups: the smallest subpartition count among the inputs, ``M``.
        factors: per input, its count over ``M`` (1 for the inputs of ``M`` subpartitions).
    """

    num_groups: int
    factors: Mapping[str, int]

    def subpartitions(self, name: str, groups: range) -> list[int]:
        """The subpartitions of input ``name`` that hold ``groups``, ascending."""
        factor = self.factors[name]
        m = self.num_groups
        return [s + j * m for j in range(factor) for s in groups]


def align(inputs: Mapping[str, Partitioning]) -> Alignment:
    """Check that ``inputs`` are co-partitioned and say how they line up.

    Args:
        inputs: each input's partitioning, by the name the caller gave the input.

    Raises:
        InvalidOptionError: no inputs.
        PartitioningMismatchError: two inputs that do not place keys alike, naming both specs
            and what differs.
    """
    if not inputs:
        raise InvalidOptionError("co-grouping needs at least one input")
    names = list(inputs)
    for name in names:
        _check_by_key(name, inputs[name])
    first = names[0]
    for name in names[1:]:
        _check_pair(first, inputs[first], name, inputs[name])
    smallest = min(p.num_subpartitions for p in inputs.values())
    factors = {name: inputs[name].num_subpartitions // smallest for name in names}
    for name in names:
        p = inputs[name]
        if p.num_subpartitions % smallest:
            other = next(n for n in names if inputs[n].num_subpartitions == smallest)
            raise _mismatch(
                (other, inputs[other]),
                (name, p),
                f"{p.num_subpartitions} subpartitions are not a multiple of {smallest}, so the "
                "subpartitions of one do not map onto those of the other; write both with the "
                "same count (or counts that divide each other)",
            )
    return Alignment(smallest, factors)


def _check_by_key(name: str, p: Partitioning) -> None:
    if p.name not in _BY_KEY:
        raise PartitioningMismatchError(
            f"input {name!r} is partitioned by {p.describe()}, which does not place rows by "
            f"their key, so equal keys may be in any subpartition; co-grouping needs one of "
            f"{', '.join(_BY_KEY)}"
        )


def _check_pair(a_name: str, a: Partitioning, b_name: str, b: Partitioning) -> None:
    """Refuse two inputs whose partitioners place equal keys in different subpartitions."""
    a_name_b = (a_name, a), (b_name, b)
    if a.name != b.name:
        raise _mismatch(*a_name_b, "the partitioners differ")
    ignored = {"columns", "column", "type", "num_subpartitions", "max_parallelism"}
    a_rest = {k: v for k, v in a.spec.items() if k not in ignored}
    b_rest = {k: v for k, v in b.spec.items() if k not in ignored}
    if a_rest != b_rest:
        differ = sorted(k for k in a_rest.keys() | b_rest.keys() if a_rest.get(k) != b_rest.get(k))
        raise _mismatch(*a_name_b, f"their {', '.join(differ)} differ")
    a_types, b_types = a.key_types(), b.key_types()
    if len(a_types) != len(b_types):
        raise _mismatch(*a_name_b, f"they hash {len(a_types)} and {len(b_types)} key columns")
    a_keys, b_keys = list(a.spec.get("columns", ())), list(b.spec.get("columns", ()))
    if a_keys != b_keys and sorted(a_keys) == sorted(b_keys):
        # Keys match by position (names may differ: l_orderkey, o_orderkey). The same names in
        # another order are the same key columns hashed in another order: equal rows land in
        # different subpartitions, and a join on those columns would lose its matches.
        raise _mismatch(
            *a_name_b,
            f"they are keyed by the same columns in another order ({a_keys} and {b_keys}), "
            "and keys are matched by position, so equal rows go to different subpartitions; "
            "write both with the key columns in one order",
        )
    for position, (x, y) in enumerate(zip(a_types, b_types, strict=True), start=1):
        kind = key_kind if a.name == "range" else hash_class
        if kind(x) != kind(y):
            how = "compares" if a.name == "range" else "hashes"
            raise _mismatch(
                *a_name_b,
                f"key {position} {how} as {kind(x)} ({x}) in {a_name!r} and as {kind(y)} ({y}) "
                f"in {b_name!r}, so equal values go to different subpartitions; cast one key "
                "before writing",
            )
    if a.name not in _MODULAR and a.num_subpartitions != b.num_subpartitions:
        raise _mismatch(
            *a_name_b, f"a {a.name} partitioning of different subpartition counts does not align"
        )


def _mismatch(
    a: tuple[str, Partitioning], b: tuple[str, Partitioning], why: str
) -> PartitioningMismatchError:
    return PartitioningMismatchError(
        f"inputs {a[0]!r} and {b[0]!r} are not co-partitioned: {why}. {a[0]!r} is "
        f"{a[1].describe()}; {b[0]!r} is {b[1].describe()}"
    )
