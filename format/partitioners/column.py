"""The ``column`` partitioner: subpartition ids the user computed, taken from a column."""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
import pyarrow as pa

from arrowshuffle.format.errors import InvalidOptionError
from arrowshuffle.format.partitioners.base import (
    Batch,
    check_num_subpartitions,
    column,
    column_names,
    spec_field,
)


class ColumnPartitioner:
    """Every row goes to the subpartition its integer column ``by`` names.

    The column stays in the data, so the ids can be checked later (``validate --deep``).

    Args:
        num_subpartitions: how many subpartitions there are.
        by: the integer column holding each row's subpartition.

    Raises:
        InvalidOptionError: from :meth:`assign`, for a non-integer column, a null id or an id
            outside ``[0, num_subpartitions)``; the message names the row and the value.
    """

    name: ClassVar[str] = "column"
    OPTIONS: ClassVar[tuple[str, ...]] = ("by",)
    REQUIRED: ClassVar[tuple[str, ...]] = ("by",)
    RECOMPUTABLE: ClassVar[bool] = True
    broadcast = False

    def __init__(self, num_subpartitions: int, *, by: str | list[str]) -> None:
        self.num_subpartitions = check_num_subpartitions(num_subpartitions)
        (self.column,) = column_names(by, partitioner=self.name, single=True)

    def spec(self) -> dict[str, Any]:
        """``{"name": "column", "column": c, "num_subpartitions": n}``."""
        return {
            "name": self.name,
            "column": self.column,
            "num_subpartitions": self.num_subpartitions,
        }

    def assign(self, batch: Batch) -> np.ndarray:
        """The ids in column ``by``, checked."""
        values = column(batch, self.column, partitioner=self.name)
        valid = f"[0, {self.num_subpartitions})"
        if not pa.types.is_integer(values.type):
            raise InvalidOptionError(
                f"column {self.column!r} must hold integer subpartition ids in {valid}, "
                f"found type {values.type}"
            )
        if values.null_count:
            row = int(np.flatnonzero(values.is_null().to_numpy(zero_copy_only=False))[0])
            raise InvalidOptionError(
                f"column {self.column!r} has a null subpartition id at row {row}; every id must "
                f"be an integer in {valid}"
            )
        ids: np.ndarray = values.to_numpy()
        bad = (ids < 0) | (ids >= self.num_subpartitions)
        if bad.any():
            row = int(np.argmax(bad))
            raise InvalidOptionError(
                f"column {self.column!r} holds subpartition id {int(ids[row])} at row {row}, "
                f"outside the valid range {valid}"
            )
        return ids.astype(np.int64, copy=False)

    @classmethod
    def from_spec(cls, spec: dict[str, Any], num_subpartitions: int) -> ColumnPartitioner:
        """The column partitioner reading the same column."""
        return cls(num_subpartitions, by=spec_field(spec, "column", str))
