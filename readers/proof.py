"""Prove a chunk's place from the index before its bytes are fetched or decoded.

Checksums prove that an index is as its writer wrote it, not that the writer wrote it right: an
index whose fields were changed and whose checksums were then recomputed passes every CRC. A
reader that trusted such an entry would hand out another subpartition's rows, or silently drop
rows. So every read proves, from the entries alone and for each region it reads, what spec.md
requires of the chunks it returns:

* the region table is sane (V8, V9) and uses no undefined flag bit or reserved word (V20);
* each region starts where the previous one ends, and before the first data read, region 0
  starts at the data file's first record batch and the last region ends where its batches end
  (V21), so an index that leaves a region out cannot drop that region's rows;
* every chunk lies inside the data file (V8) and inside its region (V9);
* a chunk is empty exactly when it has no bytes, no batches and no rows (V11);
* the chunks of a contiguous run are adjacent in subpartition order; the first subpartition's
  chunk starts where its region starts and the last one's ends where its region ends (V9);
* against the entries of the neighbouring subpartitions (at hand locally; fetched in the same
  index request as the run's own on object stores), the run's first chunk starts where its
  predecessor's ends and its last chunk ends where its successor's starts (V9), so two entries
  swapped inside a region cannot go unnoticed;
* a broadcast region's entries are all its single chunk (V10).

Where the open holds every entry (a local index, or one fetched whole) the same checks run over
the whole run ``[0, N)`` at open, so that every region is proven full: a region lengthened over
the next one (which is left out) would otherwise lose that region's rows in every read that does
not reach the last subpartition.

Decoding then checks each chunk's batches and rows against its own entry (V17, in
:mod:`arrowshuffle.format.chunks`). The checks themselves are those of validation
(:mod:`arrowshuffle.format.rules`); here they stop at the first broken rule.
"""

from __future__ import annotations

import numpy as np

from arrowshuffle.format.data_file import check_coverage
from arrowshuffle.format.rules import (
    broadcast_mismatch,
    check_layout,
    check_reserved,
    half_empty_chunk,
    outside_data_file,
)


def check_regions(regions: np.ndarray, data_length: int, url: str) -> None:
    """Check the region table: defined flags, zero reserved words, inside the file, in order.

    Each region must also start where the previous one ends (the index's part of V21; the
    data file's ends are checked when it is first read).

    Raises:
        CorruptFileError: naming rule V20, V8, V9 or V21 and the region.
    """
    found = (
        check_reserved(regions)
        or outside_data_file(regions, data_length, what="region")
        or check_layout(regions)
        or check_coverage(regions)
    )
    if found is not None:
        raise found.error(url)


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
    found = (
        outside_data_file(entries, data_length, run.start)
        or half_empty_chunk(entries, run.start)
        or broadcast_mismatch(entries, regions)
        or check_layout(
            regions,
            entries,
            run,
            num_subpartitions=num_subpartitions,
            before=before,
            after=after,
        )
    )
    if found is not None:
        raise found.error(url)
