"""Byte ranges of a read: which ranges of a data file serve a set of subpartitions.

Pure (no IO). For every region, a contiguous run of subpartitions ``[a, b)`` is one byte range
from the start of ``a``'s chunk to the end of ``b - 1``'s chunk, because chunks are contiguous in
subpartition order. A broadcast region's single chunk is planned once however many
subpartitions ask for it. Ranges are then sorted by offset and ranges closer than ``max_gap``
are merged into fetch blocks of at most ``max_block`` bytes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from arrowshuffle.format.errors import InvalidOptionError

DEFAULT_MAX_GAP = 256 * 1024
DEFAULT_MAX_BLOCK = 32 * 1024 * 1024

Subpartitions = int | range | Sequence[int] | Iterable[int]


def subpartition_runs(subpartitions: Subpartitions, num_subpartitions: int) -> list[range]:
    """Normalize a subpartition selection into sorted, disjoint, contiguous runs.

    ``subpartitions`` is an int, a ``range`` or any iterable of ints. Duplicates are dropped and
    the result is in ascending order.

    Raises:
        InvalidOptionError: for ids outside ``[0, num_subpartitions)`` or non-integers.
    """
    if isinstance(subpartitions, bool):
        raise InvalidOptionError(f"subpartitions must be integers, found {subpartitions!r}")
    if isinstance(subpartitions, (int, np.integer)):
        value = int(subpartitions)
        if 0 <= value < num_subpartitions:
            return [range(value, value + 1)]  # the common one-subpartition read, without numpy
        ids = np.array([value], dtype=np.int64)
    elif isinstance(subpartitions, range) and subpartitions.step == 1:
        if len(subpartitions) == 0:
            return []
        ids = np.array([subpartitions.start, subpartitions.stop - 1], dtype=np.int64)
        _check_bounds(ids, num_subpartitions)
        return [subpartitions]
    else:
        try:
            values = list(subpartitions)
        except TypeError as exc:  # neither an int nor an iterable
            raise InvalidOptionError(
                "subpartitions must be an int, a range or a list of ints, "
                f"found {type(subpartitions).__name__}"
            ) from exc
        if not all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in values):
            raise InvalidOptionError(f"subpartitions must be integers, found {values[:5]!r}")
        ids = np.unique(np.array(values, dtype=np.int64))
    if ids.size == 0:
        return []
    _check_bounds(ids, num_subpartitions)
    breaks = np.flatnonzero(np.diff(ids) != 1) + 1
    return [range(int(run[0]), int(run[-1]) + 1) for run in np.split(ids, breaks)]


def _check_bounds(ids: np.ndarray, num_subpartitions: int) -> None:
    bad = ids[(ids < 0) | (ids >= num_subpartitions)]
    if bad.size:
        raise InvalidOptionError(
            f"subpartition {int(bad[0])} does not exist: the file has subpartitions "
            f"0..{num_subpartitions - 1}"
        )


class Chunk(NamedTuple):
    """One non-empty chunk as its entry declares it: what decoding checks it against."""

    subpartition: int
    offset: int
    length: int
    rows: int
    batches: int
    crc32c: int


@dataclass(frozen=True)
class ChunkRange:
    """The chunks of subpartitions ``[start, stop)`` in one region: one byte range.

    ``repeat`` is how many times the decoded batches are handed out: a broadcast chunk serves
    every subpartition of the run, so it is read once and repeated ``stop - start`` times.
    ``chunks`` lists each non-empty chunk in file order: its bytes are checked against its own
    CRC32C, batch count and row count.
    """

    region: int
    start: int
    stop: int
    offset: int
    length: int
    rows: int
    batches: int
    repeat: int
    broadcast: bool
    chunks: tuple[Chunk, ...] = field(repr=False)

    @property
    def end(self) -> int:
        """One past the last byte."""
        return self.offset + self.length


@dataclass(frozen=True)
class FetchBlock:
    """One ranged read that covers one or more chunk ranges (merged when close together).

    A projected read fetches only ``pieces`` (sorted, disjoint ``[start, end)`` ranges inside
    ``[offset, end)``: the selected columns' buffers) instead of the whole block.
    """

    offset: int
    end: int
    ranges: tuple[ChunkRange, ...]
    pieces: tuple[tuple[int, int], ...] = ()

    @property
    def fetch_ranges(self) -> tuple[tuple[int, int], ...]:
        """The ranges this block fetches: its pieces, or the whole block."""
        return self.pieces or ((self.offset, self.end),)

    @property
    def nbytes(self) -> int:
        """Bytes this block fetches."""
        if not self.pieces:
            return self.end - self.offset
        return sum(end - start for start, end in self.pieces)


def plan_run(entries: np.ndarray, broadcast: np.ndarray, run: range) -> list[ChunkRange]:
    """Plan the chunk ranges of one contiguous run, region by region.

    Args:
        entries: the entries of exactly the subpartitions of ``run``, shape ``(len(run), R)``.
        broadcast: boolean mask over the ``R`` regions.
        run: the subpartitions.
    """
    out: list[ChunkRange] = []
    if entries.shape[1] == 0:
        return out
    lengths = entries["length"].sum(axis=0, dtype=np.uint64)
    rows = entries["rows"].sum(axis=0, dtype=np.uint64)
    batches = entries["batches"].sum(axis=0, dtype=np.uint64)
    for r in map(int, np.flatnonzero(lengths > 0)):
        if broadcast[r]:
            e = entries[0, r]
            out.append(
                ChunkRange(
                    r,
                    run.start,
                    run.stop,
                    int(e["offset"]),
                    int(e["length"]),
                    int(e["rows"]),
                    int(e["batches"]),
                    len(run),
                    True,
                    (_chunk(run.start, e),),
                )
            )
            continue
        column = entries[:, r]
        present = np.flatnonzero(column["length"] > 0)
        out.append(
            ChunkRange(
                r,
                run.start,
                run.stop,
                int(column[0]["offset"]),
                int(lengths[r]),
                int(rows[r]),
                int(batches[r]),
                1,
                False,
                tuple(_chunk(run.start + int(i), column[i]) for i in present),
            )
        )
    return out


def _chunk(subpartition: int, entry: np.void) -> Chunk:
    return Chunk(
        subpartition,
        int(entry["offset"]),
        int(entry["length"]),
        int(entry["rows"]),
        int(entry["batches"]),
        int(entry["crc32c"]),
    )


def dedupe_broadcast(ranges: list[ChunkRange]) -> list[ChunkRange]:
    """Fold ranges that read the same broadcast chunk into one, adding up their repeats."""
    first: dict[int, int] = {}
    out: list[ChunkRange] = []
    for cr in ranges:
        if cr.broadcast and cr.offset in first:
            i = first[cr.offset]
            out[i] = dataclasses.replace(out[i], repeat=out[i].repeat + cr.repeat)
            continue
        if cr.broadcast:
            first[cr.offset] = len(out)
        out.append(cr)
    return out


class MergedRange(NamedTuple):
    """Byte ranges merged into one: ``[begin, end)`` and the positions of its members."""

    begin: int
    end: int
    members: tuple[int, ...]


def merge_ranges(
    ranges: Sequence[tuple[int, int]], *, max_gap: int, max_block: int | None = None
) -> list[MergedRange]:
    """Merge byte ranges ``[begin, end)`` that lie close together, in order of their starts.

    A range joins the merged range before it when the gap between them is at most ``max_gap``
    bytes (overlapping ranges always) and, with ``max_block``, the merged range stays within
    ``max_block`` bytes (a single larger range stays a range of its own).

    Returns:
        The merged ranges in offset order; ``members`` are positions in ``ranges``, in
        offset order (ranges with equal starts keep their given order).
    """
    merged: list[MergedRange] = []
    members: list[int] = []
    begin = end = 0
    for i in sorted(range(len(ranges)), key=lambda i: ranges[i][0]):
        first, last = ranges[i]
        near = first - end <= max_gap
        if members and near and (max_block is None or max(end, last) - begin <= max_block):
            members.append(i)
            end = max(end, last)
            continue
        if members:
            merged.append(MergedRange(begin, end, tuple(members)))
        members, begin, end = [i], first, last
    if members:
        merged.append(MergedRange(begin, end, tuple(members)))
    return merged


def coalesce(
    ranges: Iterable[ChunkRange],
    *,
    max_gap: int = DEFAULT_MAX_GAP,
    max_block: int = DEFAULT_MAX_BLOCK,
) -> list[FetchBlock]:
    """Sort chunk ranges by offset and merge neighbours into fetch blocks (:func:`merge_ranges`).

    Two ranges merge when the gap between them is at most ``max_gap`` bytes and the merged
    block stays within ``max_block`` bytes (a single larger range stays a block of its own).
    """
    chunk_ranges = list(ranges)
    spans = [(cr.offset, cr.end) for cr in chunk_ranges]
    return [
        FetchBlock(block.begin, block.end, tuple(chunk_ranges[i] for i in block.members))
        for block in merge_ranges(spans, max_gap=max_gap, max_block=max_block)
    ]
