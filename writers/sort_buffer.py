"""The in-memory sort buffer of a writer: rows grouped by subpartition, bounded in bytes.

Each incoming batch is stably sorted by subpartition once, on arrival, and its
per-subpartition row counts are kept: one counting sort of its ids and one ``take`` of its
rows (with ``arrowshuffle[fast]``, compiled kernels that give the same bytes faster:
:mod:`~arrowshuffle.format.gather`). Sorting runs on the kernel thread pool while the caller
goes on (with the next batch, or its own work such as assigning subpartitions), so that on
several cores the writer sorts several batches at once; each batch stays whole. Emitting a
region then walks subpartitions in order and gathers zero-copy slices of the buffered
batches; :func:`combine_ahead` copies them into output batches and encodes them, the next
one on the pool while the writer writes the current one. No second copy of the buffer is ever
made: peak memory is the buffer plus two output batches.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, wait
from dataclasses import dataclass, field
from typing import TypeVar, Union

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from arrowshuffle.format import _gather_jit
from arrowshuffle.format.arrow_types import concat_batches, take_batch, takes
from arrowshuffle.format.gather import destinations, scatter_columns, scatters
from arrowshuffle.format.parallel import background_threads, submit

#: The fewest rows handed to another thread: below that the hand-off costs more than it saves.
MIN_ROWS_PER_THREAD = 8 * 1024
#: Sorts waiting or running on the pool, per pool thread: more than one, so that a pool thread
#: that finishes while the caller sorts a batch itself has the next one at hand.
SORTS_PER_THREAD = 2

_T = TypeVar("_T")
_K = TypeVar("_K")

#: A buffered batch: sorted, with its row count per subpartition, or being sorted.
_Sorted = tuple[pa.RecordBatch, np.ndarray]
_Part = Union[_Sorted, "Future[_Sorted]"]


@dataclass
class SortBuffer:
    """Batches sorted by subpartition, waiting to be written as one region."""

    num_subpartitions: int
    parts: list[_Part] = field(default_factory=list)
    nbytes: int = 0
    rows: int = 0
    _running: deque[Future[_Sorted]] = field(default_factory=deque)

    def add(self, batch: pa.RecordBatch, subpartitions: np.ndarray) -> None:
        """Add a batch whose row ``i`` belongs to subpartition ``subpartitions[i]``.

        ``subpartitions`` is an integer array with values in ``[0, num_subpartitions)``. The
        batch may be sorted after this returns, on a pool thread, when one is idle; the ids are
        copied first, so the caller may reuse its array.
        """
        rows = batch.num_rows
        if rows == 0:
            return
        ids = _narrow(subpartitions, self.num_subpartitions)
        self.nbytes += batch.nbytes
        self.rows += rows
        while self._running and self._running[0].done():
            self._running.popleft()
        future = None
        if (
            rows >= MIN_ROWS_PER_THREAD
            and len(self._running) < SORTS_PER_THREAD * background_threads()
        ):
            n = self.num_subpartitions
            future = submit(lambda: _sort(batch, ids, n))
        if future is None:
            self.parts.append(_sort(batch, ids, self.num_subpartitions))
        else:
            self._running.append(future)
            self.parts.append(future)

    def __bool__(self) -> bool:
        return bool(self.parts)

    def chunks(self) -> Iterator[tuple[int, list[pa.RecordBatch]]]:
        """Yield ``(subpartition, slices)`` for every subpartition in order, then empty it.

        Slices are zero-copy views of the buffered batches in arrival order; a subpartition
        with no rows yields an empty list.

        Raises:
            Exception: what sorting a buffered batch raised.
        """
        if not self.parts:
            return
        try:
            done = [p.result() if isinstance(p, Future) else p for p in self.parts]
        except BaseException:
            self.clear()
            raise
        batches = [batch for batch, _ in done]
        counts = np.stack([c for _, c in done], axis=1)  # (subpartitions, batches)
        # Python lists: a slice per batch and subpartition is made here, thousands per region.
        starts = (np.cumsum(counts, axis=0) - counts).tolist()
        for s, row_counts in enumerate(counts.tolist()):
            offsets = starts[s]
            yield s, [batches[k].slice(offsets[k], n) for k, n in enumerate(row_counts) if n]
        self.clear()

    def clear(self) -> None:
        """Drop every buffered batch (after the sorts still running have finished)."""
        wait(self._running)  # no sort outlives the buffer, also when one failed
        self._running.clear()
        self.parts = []
        self.nbytes = 0
        self.rows = 0


def _sort(batch: pa.RecordBatch, ids: np.ndarray, num_subpartitions: int) -> _Sorted:
    """``batch`` stably sorted by ``ids``, and its row count per subpartition."""
    if np.all(ids[1:] >= ids[:-1]):
        return batch, np.bincount(ids, minlength=num_subpartitions)  # in order already
    kernels = None
    if len(ids) >= MIN_ROWS_PER_THREAD and any(scatters(t) for t in batch.schema.types):
        # The compiled kernels once they are loaded (on a thread, started by the first large
        # batch that needs them): loading them costs more than they save on a small write.
        kernels = _gather_jit.kernels.ready()
    if kernels is not None:
        # The compiled counting sort and scatter: the bytes of the take below, faster.
        dest, counts = destinations(ids, num_subpartitions, kernels)
        return scatter_columns(batch, ids, dest, counts, kernels), counts
    counts = np.bincount(ids, minlength=num_subpartitions)
    # Arrow's stable sort of a narrow integer range is a counting sort.
    order = pc.array_sort_indices(pa.array(ids))
    if all(takes(t) for t in batch.schema.types):
        # The order is a permutation of the rows: there are no bounds to check.
        return pc.take(batch, order, boundscheck=False), counts
    # take_batch adds the view and run-end encoded columns take lacks.
    return take_batch(batch, order), counts


def batch_groups(
    slices: list[pa.RecordBatch],
    max_rows: int,
    fill: Callable[[pa.RecordBatch], float] | None = None,
) -> list[list[pa.RecordBatch]]:
    """Group consecutive slices into the pieces of output batches of at most ``max_rows`` rows.

    Small slices share a batch, so that batches are large enough to compress well; a slice
    larger than ``max_rows`` is cut. Nothing is copied: see :func:`combine_ahead`. With
    ``fill`` (:func:`~arrowshuffle.format.arrow_types.run_end_fill`), a batch also ends before
    its pieces' fills add up to more than 1, so that no run-end encoded column overflows.
    """
    if fill is None and sum(piece.num_rows for piece in slices) <= max_rows:
        return [slices] if slices else []  # the common case: one batch, no loop over pieces
    groups: list[list[pa.RecordBatch]] = []
    pending: list[pa.RecordBatch] = []
    pending_rows = 0
    pending_fill = 0.0
    for piece in slices:
        share = 0.0 if fill is None else fill(piece)  # a part of the piece fills no more
        offset = 0
        while offset < piece.num_rows:
            if pending and pending_fill + share > 1.0:
                groups.append(pending)
                pending, pending_rows, pending_fill = [], 0, 0.0
            take = min(piece.num_rows - offset, max_rows - pending_rows)
            pending.append(piece.slice(offset, take) if take < piece.num_rows else piece)
            pending_rows += take
            pending_fill += share
            offset += take
            if pending_rows == max_rows:
                groups.append(pending)
                pending, pending_rows, pending_fill = [], 0, 0.0
    if pending:
        groups.append(pending)
    return groups


def combine_ahead(
    groups: Iterable[tuple[_K, list[pa.RecordBatch]]], finish: Callable[[pa.RecordBatch], _T]
) -> Iterator[tuple[_K, _T]]:
    """``(key, finish(batch))`` for each keyed group, in order; the next is made meanwhile.

    Each group's pieces are concatenated into one batch and ``finish`` (the writer's encoder)
    is applied to it. The caller writes one result while the next is being made, so copying,
    encoding and writing overlap on two cores; at most two results exist at a time. ``groups``
    is consumed one ahead of the results: a lazy plan is made as the region is written. Groups
    of fewer than :data:`MIN_ROWS_PER_THREAD` rows are made on the calling thread.
    """
    ahead: tuple[_K, _T | Future[_T]] | None = None
    for key, group in groups:
        started = key, _start(group, finish)
        if ahead is not None:
            yield _done(ahead)
        ahead = started
    if ahead is not None:
        yield _done(ahead)


def _done(item: tuple[_K, _T | Future[_T]]) -> tuple[_K, _T]:
    key, result = item
    return key, result.result() if isinstance(result, Future) else result


def _start(group: list[pa.RecordBatch], finish: Callable[[pa.RecordBatch], _T]) -> _T | Future[_T]:
    future = None
    if sum(piece.num_rows for piece in group) >= MIN_ROWS_PER_THREAD:
        future = submit(lambda: finish(concat_batches(group)))
    return finish(concat_batches(group)) if future is None else future


def _narrow(ids: np.ndarray, num_subpartitions: int) -> np.ndarray:
    """A copy of the ids in the smallest unsigned type that holds them.

    Sorting and counting narrow ids read less; the copy leaves the caller free to reuse its
    array while the batch is sorted on another thread.
    """
    if num_subpartitions <= 1 << 8:
        return ids.astype(np.uint8)
    if num_subpartitions <= 1 << 16:
        return ids.astype(np.uint16)
    return ids.astype(np.int64)
