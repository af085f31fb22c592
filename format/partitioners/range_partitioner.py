"""Range partitioning: sorted boundaries split one key column into ordered subpartitions.

Like Spark's ``RangePartitioner``, boundaries come from a sample of the keys, so that
subpartition ``s`` holds keys no greater than those of ``s + 1``: reading subpartitions in
order reads keys in ascending order (within a subpartition rows keep write order). Nulls go to
subpartition 0 (Spark's ascending default, nulls first) and NaN to the last one used (NaN sorts
above every number, as in Spark).

A row goes to the number of boundaries strictly below its key, so a key equal to a boundary
lands in that boundary's subpartition. Boundaries are strictly ascending; a sample with few
distinct keys gives fewer than ``num_subpartitions - 1`` of them and leaves the last
subpartitions empty.

Boundaries are stored in the spec as JSON values: numbers, strings, hex for binary, decimal
strings for decimals, and the physical integer (days, or ticks of the type's unit) for dates,
times, timestamps and durations, next to the key's ``kind`` and Arrow ``type``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from decimal import Decimal
from typing import Any, ClassVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from arrowshuffle.format.errors import InvalidOptionError
from arrowshuffle.format.partitioners.base import (
    Batch,
    check_int,
    check_num_subpartitions,
    column,
    column_names,
    spec_field,
)

#: Keys per subpartition sampled when boundaries come from data (Spark samples 20).
SAMPLE_PER_SUBPARTITION = 100
MIN_SAMPLE_SIZE = 10_000
MAX_SAMPLE_SIZE = 1_000_000
_NUMERIC_KINDS = ("bool", "integer", "floating")


def key_kind(t: pa.DataType) -> str:
    """The family a range key's type belongs to; dates and times keep their exact type.

    Raises:
        InvalidOptionError: a type that has no total order here (nested, null, ...).
    """
    if pa.types.is_boolean(t):
        return "bool"
    if pa.types.is_integer(t):
        return "integer"
    if pa.types.is_float16(t):
        raise InvalidOptionError(
            "the range partitioner does not take float16 keys; cast the column to float32"
        )
    if pa.types.is_floating(t):
        return "floating"
    if pa.types.is_interval(t):
        raise InvalidOptionError(
            f"the range partitioner needs a sortable key; intervals ({t}) have no total order"
        )
    if pa.types.is_temporal(t):
        return str(t)
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return "string"
    if (
        pa.types.is_binary(t)
        or pa.types.is_large_binary(t)
        or pa.types.is_binary_view(t)
        or pa.types.is_fixed_size_binary(t)
    ):
        return "binary"
    if pa.types.is_decimal(t):
        return "decimal"
    raise InvalidOptionError(
        f"the range partitioner needs a sortable key (integer, floating, decimal, string, "
        f"binary, date, time, timestamp, duration or bool), found type {t}"
    )


def _sortable(values: pa.Array) -> pa.Array:
    """``values`` in a type Arrow's sort kernels take (views become large types)."""
    if pa.types.is_string_view(values.type):
        return values.cast(pa.large_string())
    if pa.types.is_binary_view(values.type):
        return values.cast(pa.large_binary())
    if pa.types.is_decimal32(values.type) or pa.types.is_decimal64(values.type):
        # Arrow sorts only decimal128 and decimal256; the widening is exact.
        return values.cast(pa.decimal128(values.type.precision, values.type.scale))
    return values


def _physical(t: pa.DataType) -> pa.DataType:
    return pa.int32() if t.bit_width == 32 else pa.int64()


def _to_numpy(values: pa.Array) -> tuple[np.ndarray, np.ndarray | None]:
    """Numeric-like keys as numpy, with nulls filled, and the null mask (None if no nulls)."""
    t = values.type
    if pa.types.is_temporal(t):
        values = values.view(_physical(t))
    elif pa.types.is_boolean(t):
        values = values.cast(pa.int8())
    nulls = None
    if values.null_count:
        nulls = values.is_null().to_numpy(zero_copy_only=False)
        values = values.fill_null(0)
    return values.to_numpy(zero_copy_only=False), nulls


def encode_boundaries(bounds: pa.Array) -> list[Any]:
    """JSON values for boundaries (see the module docstring)."""
    kind = key_kind(bounds.type)
    if kind == "floating":
        return [v if math.isfinite(v) else str(v) for v in bounds.to_pylist()]
    if kind == "binary":
        return [bytes(v).hex() for v in bounds.to_pylist()]
    if kind == "decimal":
        return [str(v) for v in bounds.to_pylist()]
    if pa.types.is_temporal(bounds.type):
        return list(bounds.view(_physical(bounds.type)).to_pylist())
    return list(bounds.to_pylist())


def decode_boundaries(values: list[Any], t: pa.DataType) -> pa.Array:
    """Boundaries of type ``t`` from their JSON values.

    Raises:
        InvalidOptionError: values that do not read as ``t``.
    """
    kind = key_kind(t)
    try:
        if kind == "floating":
            return pa.array([float(v) for v in values], type=t)
        if kind == "binary":
            return pa.array([bytes.fromhex(v) for v in values], type=t)
        if kind == "decimal":
            return pa.array([Decimal(v) for v in values], type=t)
        if pa.types.is_temporal(t):
            return pa.array(values, type=_physical(t)).view(t)
        return pa.array(values, type=t)
    except (TypeError, ValueError, ArithmeticError, pa.ArrowException) as exc:
        raise InvalidOptionError(
            f"range boundaries {values[:5]!r}... cannot be read as type {t}: {exc}"
        ) from exc


def boundaries_from_sample(
    sample: pa.Array,
    num_subpartitions: int,
    *,
    sample_size: int | None = None,
    seed: int = 0,
) -> pa.Array:
    """Strictly ascending boundaries that split ``sample`` into parts of equal size.

    At most ``num_subpartitions - 1`` of them, as Spark's ``determineBounds`` with equal
    weights picks them. Nulls and NaN are left out. A sample larger than ``sample_size`` is
    first cut down to a uniform random subset drawn with ``seed``.
    """
    values = _sortable(sample)
    values = pc.drop_null(values)
    if pa.types.is_floating(values.type):
        values = values.filter(pc.invert(pc.is_nan(values)))
    limit = sample_size if sample_size is not None else default_sample_size(num_subpartitions)
    if len(values) > limit:
        rng = np.random.default_rng(seed)
        picked = np.sort(rng.choice(len(values), size=limit, replace=False))
        values = values.take(pa.array(picked))
    m = len(values)
    if m == 0 or num_subpartitions == 1:
        return values.slice(0, 0)
    ordered = values.take(pc.sort_indices(values))
    j = np.arange(1, num_subpartitions, dtype=np.int64)
    # The j-th boundary closes the first ceil(j * m / n) sampled keys.
    positions = (j * m + num_subpartitions - 1) // num_subpartitions - 1
    candidates = ordered.take(pa.array(positions))
    if len(candidates) > 1:
        changed = pc.not_equal(candidates.slice(1), candidates.slice(0, len(candidates) - 1))
        keep = np.concatenate([[True], changed.to_numpy(zero_copy_only=False)])
        candidates = candidates.filter(pa.array(keep))
    return candidates.cast(sample.type) if candidates.type != sample.type else candidates


def default_sample_size(num_subpartitions: int) -> int:
    """How many keys a boundary sample keeps: 100 per subpartition, within 10k..1M."""
    return min(max(SAMPLE_PER_SUBPARTITION * num_subpartitions, MIN_SAMPLE_SIZE), MAX_SAMPLE_SIZE)


def range_ids(values: pa.Array, bounds: pa.Array) -> np.ndarray:
    """For every key, the number of boundaries strictly below it; 0 for nulls."""
    if len(bounds) == 0:
        return np.zeros(len(values), dtype=np.int64)
    if key_kind(values.type) in _NUMERIC_KINDS or pa.types.is_temporal(values.type):
        keys, nulls = _to_numpy(values)
        edges, _ = _to_numpy(bounds)
        ids = np.searchsorted(edges, keys, side="left").astype(np.int64)
    else:
        keys_sortable = _sortable(values)
        edges_sortable = _sortable(bounds).cast(keys_sortable.type)
        # Keys first, then boundaries: the stable sort puts a key before an equal boundary,
        # so the boundaries seen before a key are exactly those strictly below it.
        both = pa.concat_arrays([keys_sortable, edges_sortable])
        order = pc.sort_indices(both).to_numpy()
        below = np.cumsum(order >= len(values))
        is_key = order < len(values)
        ids = np.empty(len(values), dtype=np.int64)
        ids[order[is_key]] = below[is_key]
        nulls = values.is_null().to_numpy(zero_copy_only=False) if values.null_count else None
    if nulls is not None:
        ids[nulls] = 0
    return ids


class RangePartitioner:
    """Split one sortable key column by boundaries so subpartition order is key order.

    Boundaries come, in this order of preference, from ``boundaries``, from ``sample`` (an
    array, or a table holding the key column), or from the first batch with a non-null key.
    Files of one dataset must share boundaries: pass the same ``boundaries`` (or ``sample``)
    to every writer.

    Args:
        num_subpartitions: how many subpartitions there are.
        by: the key column (exactly one).
        boundaries: strictly ascending keys; subpartition ``s`` gets keys in
            ``(boundaries[s-1], boundaries[s]]``.
        sample: keys to compute boundaries from.
        sample_size: how many keys of a sample to keep (default 100 per subpartition,
            between 10 000 and 1 000 000).
        seed: the seed of the random subset when a sample is cut down.
    """

    name: ClassVar[str] = "range"
    OPTIONS: ClassVar[tuple[str, ...]] = ("by", "boundaries", "sample", "sample_size", "seed")
    REQUIRED: ClassVar[tuple[str, ...]] = ("by",)
    RECOMPUTABLE: ClassVar[bool] = True
    broadcast = False

    def __init__(
        self,
        num_subpartitions: int,
        *,
        by: str | list[str],
        boundaries: Sequence[Any] | pa.Array | None = None,
        sample: Any = None,
        sample_size: int | None = None,
        seed: int = 0,
    ) -> None:
        self.num_subpartitions = check_num_subpartitions(num_subpartitions)
        (self.column,) = column_names(by, partitioner=self.name, single=True)
        self.sample_size = None if sample_size is None else check_int("sample_size", sample_size, 1)
        self.seed = check_int("seed", seed, 0)
        self._bounds: pa.Array | None = None
        # From a spec: JSON values, kind and type name, decoded with the first batch's type.
        self._encoded: tuple[list[Any], str, str | None] | None = None
        # A spec without boundaries: every row goes to subpartition 0, nothing is sampled.
        self._no_bounds = False
        if boundaries is not None and sample is not None:
            raise InvalidOptionError("give the range partitioner boundaries or a sample, not both")
        if boundaries is not None:
            self._bounds = _as_array(boundaries, "boundaries")
            self._check_count(len(self._bounds))
            _check_ascending(self._bounds)
        elif sample is not None:
            keys = _sample_keys(sample, self.column)
            key_kind(keys.type)
            self._bounds = boundaries_from_sample(
                keys, self.num_subpartitions, sample_size=self.sample_size, seed=self.seed
            )

    def _check_count(self, count: int) -> None:
        if count > self.num_subpartitions - 1:
            raise InvalidOptionError(
                f"{count} range boundaries make more ranges than num_subpartitions="
                f"{self.num_subpartitions}; give at most {self.num_subpartitions - 1}"
            )

    @property
    def boundaries(self) -> list[Any] | None:
        """The boundaries as Python values, or None while they are not fixed yet."""
        if self._bounds is not None:
            return list(self._bounds.to_pylist())
        if self._encoded is not None:
            return list(self._encoded[0])
        return [] if self._no_bounds else None

    def spec(self) -> dict[str, Any]:
        """``{"name": "range", "column": c, "boundaries": [...], "kind": k, "type": t, ...}``.

        Before boundaries are fixed (no batch with a non-null key yet), ``boundaries`` is empty
        and ``kind`` and ``type`` are null: every row so far went to subpartition 0.
        """
        spec: dict[str, Any] = {
            "name": self.name,
            "column": self.column,
            "order": "ascending",
            "nulls": "first",
            "num_subpartitions": self.num_subpartitions,
            "boundaries": [],
            "kind": None,
            "type": None,
        }
        if self._bounds is not None and len(self._bounds):
            spec.update(
                boundaries=encode_boundaries(self._bounds),
                kind=key_kind(self._bounds.type),
                type=str(self._bounds.type),
            )
        elif self._encoded is not None:
            spec.update(boundaries=self._encoded[0], kind=self._encoded[1], type=self._encoded[2])
        return spec

    def assign(self, batch: Batch) -> np.ndarray:
        """The subpartition of every row of ``batch``."""
        values = column(batch, self.column, partitioner=self.name)
        kind = key_kind(values.type)
        if self._bounds is None:
            if self._encoded is not None:
                self._bounds = self._decode(values.type, kind)
            elif self._no_bounds or values.null_count == len(values):
                return np.zeros(len(values), dtype=np.int64)
            else:
                self._bounds = boundaries_from_sample(
                    values, self.num_subpartitions, sample_size=self.sample_size, seed=self.seed
                )
        if self._bounds.type != values.type:
            self._bounds = self._cast_bounds(self._bounds, values.type, kind)
        return range_ids(values, self._bounds)

    def _decode(self, t: pa.DataType, kind: str) -> pa.Array:
        assert self._encoded is not None
        values, spec_kind, spec_type = self._encoded
        if spec_kind != kind:
            raise InvalidOptionError(
                f"the range spec's boundaries are of kind {spec_kind!r} (type {spec_type}); "
                f"column {self.column!r} has type {t} (kind {kind!r})"
            )
        return decode_boundaries(values, t)

    def _cast_bounds(self, bounds: pa.Array, t: pa.DataType, kind: str) -> pa.Array:
        if len(bounds) == 0:
            return pa.array([], type=t)
        if not _comparable(key_kind(bounds.type), kind):
            raise InvalidOptionError(
                f"range boundaries of type {bounds.type} cannot be compared with column "
                f"{self.column!r} of type {t}"
            )
        try:
            return bounds.cast(t)
        except pa.ArrowException as exc:
            raise InvalidOptionError(
                f"range boundaries {bounds.to_pylist()[:5]} do not fit column "
                f"{self.column!r} of type {t}: {exc}"
            ) from exc

    @classmethod
    def from_spec(cls, spec: dict[str, Any], num_subpartitions: int) -> RangePartitioner:
        """Rebuild the partitioner that wrote ``spec`` (its boundaries, no resampling)."""
        partitioner = cls(num_subpartitions, by=spec_field(spec, "column", str))
        values = spec_field(spec, "boundaries", list)
        partitioner._check_count(len(values))
        if values:
            kind = spec_field(spec, "kind", str)
            type_name = spec.get("type")
            partitioner._encoded = (values, kind, type_name if isinstance(type_name, str) else None)
        else:
            partitioner._no_bounds = True
        return partitioner


def _comparable(bounds_kind: str, key_kind_: str) -> bool:
    """Whether boundaries of one kind may be cast to compare with keys of another."""
    families = ("bool", "string", "binary", "decimal")
    if bounds_kind == key_kind_:
        return True
    if bounds_kind in ("integer", "floating") and key_kind_ in ("integer", "floating"):
        return True
    # Dates, times and timestamps cast among themselves (a date boundary for a timestamp key).
    numeric = ("integer", "floating")
    return all(k not in families and k not in numeric for k in (bounds_kind, key_kind_))


def _as_array(values: Sequence[Any] | pa.Array, what: str) -> pa.Array:
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    if isinstance(values, pa.Array):
        return values
    try:
        return pa.array(list(values))
    except (TypeError, ValueError, pa.ArrowException) as exc:
        raise InvalidOptionError(
            f"range {what} must be one type of sortable values: {exc}"
        ) from exc


def _check_ascending(bounds: pa.Array) -> None:
    if len(bounds) == 0:
        return
    key_kind(bounds.type)
    if bounds.null_count:
        raise InvalidOptionError("range boundaries must not contain nulls")
    if len(bounds) < 2:
        return
    sortable = _sortable(bounds)
    ascending = pc.less(sortable.slice(0, len(bounds) - 1), sortable.slice(1))
    if not pc.all(ascending).as_py():
        at = int(np.argmin(ascending.to_numpy(zero_copy_only=False)))
        raise InvalidOptionError(
            f"range boundaries must be strictly ascending without NaN; found "
            f"{bounds[at].as_py()!r} then {bounds[at + 1].as_py()!r} at positions {at}, {at + 1}"
        )


def _sample_keys(sample: Any, name: str) -> pa.Array:
    if isinstance(sample, (pa.Table, pa.RecordBatch)):
        return column(sample, name, partitioner="range")
    return _as_array(sample, "sample")
