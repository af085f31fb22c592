"""Prove a chunk's place from the index before its bytes are fetched or decoded.

Checksums prove that an index is as its writer wrote it, not that the writer wrote it right: an
index whose fields were changed and whose checksums were then recomputed passes every CRC. A
reader that trusted such an entry would hand out another subpartition's rows, or silently drop
rows. So every read proves, from the entries alone and for each region it reads, what spec.md
requires of the chunks it returns:

* the region table is sane (V8, V9) and uses no undefined flag bit (V20);
* every chunk lies inside the data file (V8) and inside its region (V9);
* a chunk is empty exactly when it has no bytes, no batches and no rows (V11);
* the chunks of a contiguous run are adjacent in subpartition order; the first subpartition's
  chunk starts where its region starts and the last one's ends where its region ends (V9);
* where the entries of the neighbouring subpartitions are at hand (always locally; with
  ``verify`` they are fetched in the same index request on object stores), the run's first
  chunk starts where its predecessor's ends and its last chunk ends where its successor's starts
  (V9), so two entries swapped inside a region cannot go unnoticed;
* a broadcast region's entries are all its single chunk (V10).

Decoding then checks each chunk's batches and rows against its own entry (V17, in
:mod:`arrowshuffle.readers.decode`). Everything here is vectorized over regions.
"""

from __future__ import annotations

import numpy as np

from arrowshuffle.format.errors import CorruptFileError
from arrowshuffle.format.index import REGION_BROADCAST
from arrowshuffle.format.rules import (
    chunks_outside_file,
    first_index,
    half_empty_chunk,
    region_placement,
    undefined_region_flags,
)


def check_regions(regions: np.ndarray, data_length: int, url: str) -> None:
    """Check the region table: no undefined flag bit, inside the data file, in order.

    Raises:
        CorruptFileError: naming rule V20, V8 or V9 and the region.
    """
    for found in (undefined_region_flags(regions), region_placement(regions, data_length)):
        if found is not None:
            raise CorruptFileError(f"{url}: {found.message}", rule=found.rule)


def check_run(
    entries: np.ndarray,
    regions: np.ndarray,
    run: range,
    num_subpartitions: int,
    data_length: int,
    url: str,
    *,
    before: np.ndarray | None = None,
    after: np.ndarray | None = None,
) -> None:
    """Prove the chunks of one contiguous run of subpartitions, in every region.

    The region table must already have passed :func:`check_regions`.

    Args:
        entries: the entries of exactly the subpartitions of ``run``, shape ``(len(run), R)``.
        regions: the region table (``R`` records).
        run: the subpartitions.
        num_subpartitions: ``N`` of the file.
        data_length: the data file's length.
        url: the data file, for messages.
        before: the entries of subpartition ``run.start - 1`` (shape ``(R,)``), when known.
        after: the entries of subpartition ``run.stop``, when known.

    Raises:
        CorruptFileError: naming the rule (V8, V9, V10 or V11), the region and the subpartition.
    """
    if entries.size == 0:
        return
    for found in (
        chunks_outside_file(entries, data_length, run.start),
        half_empty_chunk(entries, run.start),
    ):
        if found is not None:
            raise CorruptFileError(f"{url}: {found.message}", rule=found.rule)
    broadcast = (regions["flags"] & REGION_BROADCAST) != 0
    if broadcast.any():
        _check_broadcast(entries[:, broadcast], regions[broadcast], np.flatnonzero(broadcast), url)
    regular = ~broadcast
    if regular.any():
        _check_regular(
            entries[:, regular],
            regions[regular],
            np.flatnonzero(regular),
            run,
            num_subpartitions,
            url,
            before=None if before is None else before[regular],
            after=None if after is None else after[regular],
        )


def _check_broadcast(
    entries: np.ndarray, regions: np.ndarray, numbers: np.ndarray, url: str
) -> None:
    """V10: every entry of a broadcast region is the region's single chunk."""
    differ = (entries != entries[0:1, :]).any(axis=0)
    differ |= (entries[0]["offset"] != regions["offset"]) | (
        entries[0]["length"] != regions["length"]
    )
    if differ.any():
        r = int(numbers[int(np.argmax(differ))])
        raise CorruptFileError(
            f"{url}: broadcast region {r}: expected every subpartition's entry to be the "
            "region's single chunk, found differing entries",
            rule="V10",
        )


def _check_regular(
    entries: np.ndarray,
    regions: np.ndarray,
    numbers: np.ndarray,
    run: range,
    num_subpartitions: int,
    url: str,
    *,
    before: np.ndarray | None,
    after: np.ndarray | None,
) -> None:
    """V9 for the regular regions of a run: inside the region, adjacent, anchored."""
    region_start = regions["offset"]
    region_end = region_start + regions["length"]  # inside the file: cannot wrap
    offsets = entries["offset"]
    ends = offsets + entries["length"]  # inside the file (V8 passed): cannot wrap
    outside = (offsets < region_start) | (ends > region_end)
    if outside.any():
        i, col = first_index(outside)
        raise CorruptFileError(
            f"{url}: chunk (region {int(numbers[col])}, subpartition {run.start + i}) spans bytes "
            f"[{int(offsets[i, col])}, {int(ends[i, col])}), outside its region "
            f"[{int(region_start[col])}, {int(region_end[col])})",
            rule="V9",
        )
    gaps = offsets[1:] != ends[:-1]
    if gaps.any():
        i, col = first_index(gaps)
        raise CorruptFileError(
            f"{url}: chunk (region {int(numbers[col])}, subpartition {run.start + i + 1}) starts "
            f"at byte {int(offsets[i + 1, col])}, expected {int(ends[i, col])} (right after the "
            "previous chunk)",
            rule="V9",
        )
    # Where the run's first chunk must start: the region's start, or its predecessor's end.
    if run.start == 0:
        _anchor(url, numbers, run.start, offsets[0], region_start, "the start of its region")
    elif before is not None:
        _check_neighbour(before, region_start, region_end, numbers, run.start - 1, url)
        _anchor(
            url,
            numbers,
            run.start,
            offsets[0],
            before["offset"] + before["length"],
            f"the end of subpartition {run.start - 1}'s chunk",
        )
    # Where its last chunk must end: the region's end, or its successor's start.
    last = run.stop - 1
    if run.stop == num_subpartitions:
        _anchor(url, numbers, last, ends[-1], region_end, "the end of its region", edge="ends")
    elif after is not None:
        _check_neighbour(after, region_start, region_end, numbers, run.stop, url)
        _anchor(
            url,
            numbers,
            last,
            ends[-1],
            after["offset"],
            f"the start of subpartition {run.stop}'s chunk",
            edge="ends",
        )


def _check_neighbour(
    entry: np.ndarray,
    region_start: np.ndarray,
    region_end: np.ndarray,
    numbers: np.ndarray,
    subpartition: int,
    url: str,
) -> None:
    """A neighbour's entry used as an anchor must itself lie inside its region."""
    offset = entry["offset"]
    length = entry["length"]
    inside = (
        (offset >= region_start)
        & (offset <= region_end)
        & (length <= region_end - np.minimum(offset, region_end))
    )
    if not inside.all():
        col = int(np.argmin(inside))
        raise CorruptFileError(
            f"{url}: chunk (region {int(numbers[col])}, subpartition {subpartition}) spans "
            f"bytes [{int(offset[col])}, {int(offset[col]) + int(length[col])}), outside its "
            f"region [{int(region_start[col])}, {int(region_end[col])})",
            rule="V9",
        )


def _anchor(
    url: str,
    numbers: np.ndarray,
    subpartition: int,
    actual: np.ndarray,
    expected: np.ndarray,
    what: str,
    *,
    edge: str = "starts",
) -> None:
    """V9: a run's first chunk starts (or its last chunk ends, ``edge="ends"``) where expected."""
    wrong = actual != expected
    if wrong.any():
        col = int(np.argmax(wrong))
        raise CorruptFileError(
            f"{url}: chunk (region {int(numbers[col])}, subpartition {subpartition}) {edge} at "
            f"byte {int(actual[col])}, expected {int(expected[col])} ({what})",
            rule="V9",
        )
