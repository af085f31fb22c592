"""The ``column`` partitioner: subpartition ids the user computed, taken from a column."""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from arrowshuffle.format.partitioners.base import (
    Batch,
    arrow_ids,
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
        source = f"the subpartition ids in column {self.column!r}"
        return arrow_ids(values, self.num_subpartitions, source=source).astype(np.int64, copy=False)

    @classmethod
    def from_spec(cls, spec: dict[str, Any], num_subpartitions: int) -> ColumnPartitioner:
        """The column partitioner reading the same column."""
        return cls(num_subpartitions, by=spec_field(spec, "column", str))
