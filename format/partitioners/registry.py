"""Partitioners by name: build one from options or from a stored spec, recompute ids."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

import numpy as np

from arrowshuffle.format.errors import InvalidOptionError
from arrowshuffle.format.partitioners.base import Batch, Partitioner, check_num_subpartitions
from arrowshuffle.format.partitioners.column import ColumnPartitioner
from arrowshuffle.format.partitioners.hashing import HashPartitioner, KeyGroupPartitioner
from arrowshuffle.format.partitioners.range_partitioner import RangePartitioner
from arrowshuffle.format.partitioners.selectors import (
    BroadcastPartitioner,
    ForwardPartitioner,
    GlobalPartitioner,
    RandomPartitioner,
    RescalePartitioner,
    RoundRobinPartitioner,
)

#: The spec name a writer stores when rows came with explicit subpartition ids.
EXPLICIT = "explicit"


class PartitionerClass(Protocol):
    """What the registry needs of a partitioner class."""

    name: str
    OPTIONS: tuple[str, ...]
    REQUIRED: tuple[str, ...]
    RECOMPUTABLE: bool

    def __call__(self, num_subpartitions: int, **options: Any) -> Partitioner:
        """Build a partitioner from options."""
        ...

    def from_spec(self, spec: dict[str, Any], num_subpartitions: int) -> Partitioner:
        """Build a partitioner from a stored spec."""
        ...


PARTITIONERS: dict[str, PartitionerClass] = {
    cls.name: cls  # type: ignore[misc]
    for cls in (
        HashPartitioner,
        KeyGroupPartitioner,
        RangePartitioner,
        RoundRobinPartitioner,
        RandomPartitioner,
        RescalePartitioner,
        BroadcastPartitioner,
        ForwardPartitioner,
        GlobalPartitioner,
        ColumnPartitioner,
    )
}
#: Every name :func:`make_partitioner` takes.
PARTITIONER_NAMES: tuple[str, ...] = tuple(PARTITIONERS)
#: Spec fields that name one producer (``forward``'s and ``rescale``'s ``producer_index``):
#: each file records its own, the manifest none (:func:`dataset_spec`).
PER_PRODUCER_FIELDS: dict[str, tuple[str, ...]] = {
    name: tuple(getattr(cls, "PER_PRODUCER", ())) for name, cls in PARTITIONERS.items()
}


def _lookup(name: object) -> PartitionerClass:
    if not isinstance(name, str) or name not in PARTITIONERS:
        raise InvalidOptionError(
            f"unknown partitioner {name!r}; the partitioners are {', '.join(PARTITIONER_NAMES)}"
        )
    return PARTITIONERS[name]


def make_partitioner(name: str, *, num_subpartitions: int, **options: Any) -> Partitioner:
    """A partitioner by name, with its options.

    Example:
        >>> make_partitioner("hash", num_subpartitions=8, by=["k"]).spec()["columns"]
        ['k']

    Raises:
        InvalidOptionError: an unknown name (the message lists the names), an option the
            partitioner does not take or a missing required one (the message lists them).
    """
    cls = _lookup(name)
    given = {k: v for k, v in options.items() if v is not None}
    unknown = sorted(set(given) - set(cls.OPTIONS))
    if unknown:
        valid = ", ".join(cls.OPTIONS) if cls.OPTIONS else "none"
        raise InvalidOptionError(
            f"the {name} partitioner does not take {', '.join(unknown)}; its options are {valid}"
        )
    missing = [k for k in cls.REQUIRED if k not in given]
    if missing:
        raise InvalidOptionError(
            f"the {name} partitioner needs {', '.join(missing)} (options: {', '.join(cls.OPTIONS)})"
        )
    return cls(check_num_subpartitions(num_subpartitions), **given)


def partitioner_from_spec(spec: dict[str, Any], num_subpartitions: int) -> Partitioner:
    """The partitioner a stored spec describes, in its initial state.

    Deterministic partitioners recompute exactly the ids they wrote; stateful ones
    (``round_robin``, ``random``, ``rescale``) start afresh with the spec's options.

    Raises:
        InvalidOptionError: an unknown or malformed spec, or a spec written for another number
            of subpartitions.
    """
    if not isinstance(spec, dict):
        raise InvalidOptionError(f"a partitioner spec is a dict with a 'name', found {spec!r}")
    if spec.get("name") == EXPLICIT:
        raise InvalidOptionError(
            "the spec 'explicit' records that rows came with their own subpartition ids; there "
            "is no partitioner to rebuild"
        )
    cls = _lookup(spec.get("name"))
    n = check_num_subpartitions(num_subpartitions)
    stored = spec.get("num_subpartitions")
    if stored is not None and stored != n:
        raise InvalidOptionError(
            f"the {cls.name} spec was written for {stored} subpartitions, asked for {n}"
        )
    return cls.from_spec(spec, n)


def dataset_spec(spec: Mapping[str, Any]) -> dict[str, Any]:
    """The part of a file's spec that every file of its dataset shares.

    ``spec`` without the fields that name the producer which wrote the file (``forward``'s
    ``producer_index``; ``rescale``'s ``producer_index`` and ``targets``): files of different
    producers of one dataset differ only there. A manifest records this spec, and rule M6
    compares it. Other specs, and specs of names this version does not know, are returned
    whole.

    Example:
        >>> dataset_spec({"name": "forward", "producer_index": 3, "num_subpartitions": 8})
        {'name': 'forward', 'num_subpartitions': 8}
    """
    name = spec.get("name")
    fields = PER_PRODUCER_FIELDS.get(name, ()) if isinstance(name, str) else ()
    return {k: v for k, v in spec.items() if k not in fields}


def is_recomputable(spec: dict[str, Any]) -> bool:
    """Whether rows' subpartitions follow from the spec and the rows alone.

    A spec without the fields of one producer (a compacted ``forward`` file merges several
    producers' rows) does not say where a row goes.
    """
    name = spec.get("name")
    if name == EXPLICIT:
        return False
    cls = _lookup(name)
    return cls.RECOMPUTABLE and all(k in spec for k in PER_PRODUCER_FIELDS[cls.name])


def recompute_subpartitions(
    spec: dict[str, Any], batch: Batch, num_subpartitions: int
) -> np.ndarray | None:
    """The subpartition the stored partitioner assigns every row of ``batch``, if it can say.

    Returns ids for ``hash``, ``key_group``, ``range``, ``column``, ``forward`` and ``global``;
    None for ``round_robin``, ``random``, ``rescale``, ``broadcast`` and ``explicit`` ids,
    whose rows cannot be checked one by one.

    Raises:
        InvalidOptionError: an unknown or malformed spec, or a batch without the key columns.
    """
    if not is_recomputable(spec):
        return None
    return partitioner_from_spec(spec, num_subpartitions).assign(batch)
