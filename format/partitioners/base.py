"""What every partitioner shares: option and id checks, key column lookup, spec fields."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, TypeAlias

import numpy as np
import pyarrow as pa

from arrowshuffle.format.arrow_types import plain_type, to_plain
from arrowshuffle.format.errors import InvalidOptionError

#: A batch a partitioner can assign; tables are accepted where validation hands them in.
Batch: TypeAlias = pa.RecordBatch | pa.Table


def check_num_subpartitions(value: object) -> int:
    """Return ``value`` if it is a valid subpartition count, else raise InvalidOptionError."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 2**31 - 1:
        raise InvalidOptionError(
            f"num_subpartitions must be an integer between 1 and 2**31-1, found {value!r}"
        )
    return value


def check_ids(ids: np.ndarray, num_subpartitions: int, *, source: str) -> np.ndarray:
    """Return integer ``ids`` if each is in ``[0, num_subpartitions)``.

    ``source`` names the ids in errors (``"the subpartition ids"``); the first bad id is
    named with its row.

    Raises:
        InvalidOptionError: ids that are not integers, or an id outside the range.
    """
    if ids.dtype.kind not in "iu":
        raise InvalidOptionError(f"{source} must be integers, found dtype {ids.dtype}")
    if ids.size == 0:
        return ids
    # One pass over the ids, not two: as unsigned integers, negative ids are the largest.
    unsigned = ids if ids.dtype.kind == "u" else ids.view(ids.dtype.str.replace("i", "u"))
    if int(unsigned.max()) >= num_subpartitions:
        row = int(np.argmax(unsigned >= num_subpartitions))
        raise InvalidOptionError(
            f"{source} must be in [0, {num_subpartitions}), found {int(ids[row])} at row {row}"
        )
    return ids


def arrow_ids(
    values: pa.Array | pa.ChunkedArray, num_subpartitions: int, *, source: str
) -> np.ndarray:
    """The subpartition ids in an Arrow array, checked (:func:`check_ids`), as numpy.

    Any integer array is taken: run-end or dictionary encoded, an extension over integers,
    chunked.

    Raises:
        InvalidOptionError: ids of another type, a null id or an id outside the range.
    """
    if not pa.types.is_integer(plain_type(values.type)):
        raise InvalidOptionError(f"{source} must be integers, found type {values.type}")
    chunks = values.chunks if isinstance(values, pa.ChunkedArray) else [values]
    plain = [to_plain(chunk) for chunk in chunks]
    if not plain:
        return np.zeros(0, dtype=np.int64)
    ids = pa.chunked_array(plain)
    if ids.null_count:
        row = int(np.flatnonzero(ids.is_null().to_numpy(zero_copy_only=False))[0])
        raise InvalidOptionError(f"{source} must not contain nulls, found one at row {row}")
    return check_ids(ids.to_numpy(), num_subpartitions, source=source)


def check_int(name: str, value: object, low: int, high: int | None = None) -> int:
    """Return ``value`` if it is an int in ``[low, high)`` (``high=None``: no upper bound)."""
    if (
        isinstance(value, int)
        and not isinstance(value, bool)
        and value >= low
        and (high is None or value < high)
    ):
        return value
    valid = f"in [{low}, {high})" if high is not None else f">= {low}"
    raise InvalidOptionError(f"{name} must be an integer {valid}, found {value!r}")


def check_seed(value: object) -> int | None:
    """A seed is None (fresh entropy) or a non-negative int (reproducible)."""
    if value is None:
        return None
    return check_int("seed", value, 0)


def column_names(by: object, *, partitioner: str, single: bool = False) -> list[str]:
    """Normalize ``by`` (a name or a sequence of names) to a non-empty list of names."""
    names: list[Any] = [by] if isinstance(by, str) else list(by) if isinstance(by, Sequence) else []
    if not names or not all(isinstance(n, str) for n in names):
        raise InvalidOptionError(
            f"the {partitioner} partitioner needs by= as a column name or a list of names, "
            f"found {by!r}"
        )
    if single and len(names) != 1:
        raise InvalidOptionError(
            f"the {partitioner} partitioner takes exactly one key column, found {names}"
        )
    return names


def column(batch: Batch, name: str, *, partitioner: str) -> pa.Array:
    """The column ``name`` of ``batch`` as one contiguous array."""
    if name not in batch.schema.names:
        raise InvalidOptionError(
            f"the {partitioner} partitioner needs column {name!r}; the batch has columns "
            f"{batch.schema.names}"
        )
    values = batch.column(name)
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    return values


def constant_ids(num_rows: int, value: int) -> np.ndarray:
    """``num_rows`` ids that are all ``value``."""
    return np.full(num_rows, value, dtype=np.int64)


def spec_field(spec: dict[str, Any], key: str, kind: type | tuple[type, ...]) -> Any:
    """Field ``key`` of a partitioner spec, checked to be of ``kind``."""
    value = spec.get(key)
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is int):
        names = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        raise InvalidOptionError(
            f"the {spec.get('name')!r} partitioner spec needs {key!r} as {names}, found {value!r}"
        )
    return value


def spec_names(spec: dict[str, Any], key: str) -> list[str]:
    """Field ``key`` of a spec as a non-empty list of column names."""
    value = spec.get(key)
    if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
        raise InvalidOptionError(
            f"the {spec.get('name')!r} partitioner spec needs {key!r} as a list of column names, "
            f"found {value!r}"
        )
    return list(value)


class Partitioner(Protocol):
    """What a writer needs of a partitioner: row ids, a spec to store, a broadcast flag."""

    @property
    def broadcast(self) -> bool:
        """True when every row goes to every subpartition (stored once)."""

    def spec(self) -> dict[str, Any]:
        """The JSON-serializable description stored in the index and the manifest."""

    def assign(self, batch: pa.RecordBatch) -> np.ndarray:
        """The subpartition of every row of ``batch``."""
