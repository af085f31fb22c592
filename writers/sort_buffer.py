"""The in-memory sort buffer of a writer: rows grouped by subpartition, bounded in bytes.

Each incoming batch is stably sorted by subpartition once, on arrival, and its
per-subpartition row counts are kept. A large batch is cut into one row range per thread and
the ranges are sorted at once (Arrow's counting sort and ``take`` release the GIL); each range
is buffered as a batch of its own. Emitting a region then walks subpartitions in order and
gathers zero-copy slices of the buffered batches: no second copy of the buffer is ever made,
which keeps peak memory at the buffer plus one output batch.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from arrowshuffle.format.arrow_types import take_batch
from arrowshuffle.format.parallel import parallel_map, row_ranges

#: The fewest rows a thread sorts: below that the hand-off costs more than it saves.
MIN_ROWS_PER_THREAD = 8 * 1024


@dataclass
class SortBuffer:
    """Batches sorted by subpartition, waiting to be written as one region."""

    num_subpartitions: int
    batches: list[pa.RecordBatch] = field(default_factory=list)
    counts: list[np.ndarray] = field(default_factory=list)
    nbytes: int = 0
    rows: int = 0

    def add(self, batch: pa.RecordBatch, subpartitions: np.ndarray) -> None:
        """Add a batch whose row ``i`` belongs to subpartition ``subpartitions[i]``.

        ``subpartitions`` is an integer array with values in ``[0, num_subpartitions)``.
        """
        rows = batch.num_rows
        if rows == 0:
            return
        ids = _narrow(subpartitions, self.num_subpartitions)
        ranges = row_ranges(rows, MIN_ROWS_PER_THREAD)
        sorted_parts = parallel_map(lambda r: self._sort(batch, ids, r[0], r[1]), ranges)
        for part, counts in sorted_parts:
            self.batches.append(part)
            self.counts.append(counts)
            self.nbytes += part.nbytes
        self.rows += rows

    def _sort(
        self, batch: pa.RecordBatch, ids: np.ndarray, start: int, stop: int
    ) -> tuple[pa.RecordBatch, np.ndarray]:
        """Rows ``start:stop`` of ``batch`` stably sorted by subpartition, and their counts."""
        if start or stop != batch.num_rows:
            batch = batch.slice(start, stop - start)
        part = ids[start:stop]
        counts = np.bincount(part, minlength=self.num_subpartitions)
        if not np.all(part[1:] >= part[:-1]):
            # Arrow's stable sort of a narrow integer range is a counting sort.
            order = pc.array_sort_indices(pa.array(part))
            # take_batch is batch.take, plus the view and run-end encoded columns it lacks.
            batch = take_batch(batch, order)
        return batch, counts

    def __bool__(self) -> bool:
        return bool(self.batches)

    def chunks(self) -> Iterator[tuple[int, list[pa.RecordBatch]]]:
        """Yield ``(subpartition, slices)`` for every subpartition in order, then empty it.

        Slices are zero-copy views of the buffered batches in arrival order; a subpartition
        with no rows yields an empty list.
        """
        if not self.batches:
            return
        counts = np.stack(self.counts)  # (batches, subpartitions)
        starts = np.cumsum(counts, axis=1) - counts
        batches = self.batches
        for s in range(self.num_subpartitions):
            present = np.flatnonzero(counts[:, s])
            yield s, [batches[k].slice(int(starts[k, s]), int(counts[k, s])) for k in present]
        self.clear()

    def clear(self) -> None:
        """Drop every buffered batch."""
        self.batches = []
        self.counts = []
        self.nbytes = 0
        self.rows = 0


def rebatch(slices: list[pa.RecordBatch], max_rows: int) -> Iterator[pa.RecordBatch]:
    """Regroup consecutive slices into batches of at most ``max_rows`` rows, in order.

    Small slices are concatenated so that batches are large enough to compress well; a slice
    larger than ``max_rows`` is cut. Only the rows of one output batch are copied at a time.
    """
    pending: list[pa.RecordBatch] = []
    pending_rows = 0
    for piece in slices:
        offset = 0
        while offset < piece.num_rows:
            take = min(piece.num_rows - offset, max_rows - pending_rows)
            pending.append(piece.slice(offset, take) if take < piece.num_rows else piece)
            pending_rows += take
            offset += take
            if pending_rows == max_rows:
                yield _combine(pending)
                pending, pending_rows = [], 0
    if pending:
        yield _combine(pending)


def _combine(pieces: list[pa.RecordBatch]) -> pa.RecordBatch:
    return pieces[0] if len(pieces) == 1 else pa.concat_batches(pieces)


def _narrow(ids: np.ndarray, num_subpartitions: int) -> np.ndarray:
    """Ids in the smallest unsigned type that holds them: sorting and counting read less."""
    if num_subpartitions <= 1 << 8:
        return ids.astype(np.uint8, copy=False)
    if num_subpartitions <= 1 << 16:
        return ids.astype(np.uint16, copy=False)
    return ids.astype(np.int64, copy=False)
