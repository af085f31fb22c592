"""Sort string columns with the compiled kernels: the bytes of ``pyarrow.compute.take``, faster.

The writer sorts every buffered batch by subpartition on arrival (a counting sort of its
ids, then a gather of its rows in that order). ``take`` appends string values one at a time
and costs several times more on a string column than on a number column. For strings and
binaries of either offset width, with validity bitmaps and non-zero array offsets,
:func:`take_array` gathers the offsets first and then copies each value with a few 32-byte
word moves, into buffers from pyarrow's memory pool; the result equals ``take`` byte for byte
(the same offsets and bytes, no bytes for a null row, no validity bitmap when no row is null).
Other columns go through ``take`` itself (:func:`take_columns`).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.types as pat

from arrowshuffle.format._gather_jit import GatherKernels
from arrowshuffle.format.arrow_types import gather, takes

__all__ = ["counting_sort", "is_string_like", "take_array", "take_columns"]

#: Spare bytes after gathered string data: short values are copied as 32-byte words.
_WORD = 32


def _large(t: pa.DataType) -> bool:
    return bool(pat.is_large_string(t) or pat.is_large_binary(t))


def is_string_like(t: pa.DataType) -> bool:
    """True for string, binary and their large variants."""
    return bool(pat.is_string(t) or pat.is_binary(t)) or _large(t)


def counting_sort(
    ids: np.ndarray, num_subpartitions: int, kernels: GatherKernels
) -> tuple[np.ndarray, np.ndarray]:
    """The rows stably sorted by ``ids`` (int32 positions), and the rows of each id."""
    counts = np.zeros(num_subpartitions, dtype=np.int64)
    order = np.empty(len(ids), dtype=np.int32 if len(ids) <= 2**31 - 1 else np.int64)
    kernels.counting_sort(ids, counts, order)
    return order, counts


def _allocate(nbytes: int, dtype: Any) -> tuple[pa.Buffer, np.ndarray]:
    """A buffer from pyarrow's memory pool (it keeps freed pages for reuse) and a view of it."""
    buffer = pa.allocate_buffer(max(nbytes, 1))
    return buffer, np.frombuffer(buffer, dtype=np.uint8)[:nbytes].view(dtype)


def _view(buffer: pa.Buffer | None, dtype: Any, start: int, count: int) -> np.ndarray:
    """``count`` items of ``dtype`` from item ``start`` of ``buffer``, as a numpy view."""
    if buffer is None or count == 0:
        return np.zeros(0, dtype=dtype)
    return np.frombuffer(buffer, dtype=dtype, count=start + count)[start:]


def take_array(arr: pa.Array, order: np.ndarray, kernels: GatherKernels) -> pa.Array:
    """Rows ``order`` of string-like ``arr``: what ``take`` gives, byte for byte.

    ``order`` holds int32 or int64 positions in ``[0, len(arr))``; they are not checked.
    """
    t = arr.type
    rows = len(order)
    buffers = arr.buffers()
    nullable = arr.null_count > 0
    bits = np.frombuffer(buffers[0], dtype=np.uint8) if nullable else np.zeros(0, np.uint8)
    validity, out_bits = _allocate((rows + 7) // 8 if nullable else 0, np.uint8)
    out_bits[:] = 0  # bits past the last row are zero, as take leaves them
    dtype = np.int64 if _large(t) else np.int32
    offsets_buffer, offsets = _allocate((rows + 1) * np.dtype(dtype).itemsize, dtype)
    starts = np.empty(rows, dtype=np.int64)
    source = _view(buffers[1], dtype, arr.offset, len(arr) + 1)
    size, nulls = kernels.take_offsets(
        source, bits, arr.offset, order, starts, offsets, out_bits, nullable
    )
    data, out = _allocate(int(size) + _WORD, np.uint8)
    whole = np.zeros(0, np.uint8) if buffers[2] is None else np.frombuffer(buffers[2], np.uint8)
    kernels.take_bytes(whole, starts, offsets, out)
    mask = validity if nulls else None
    body = [offsets_buffer, data.slice(0, int(size))]
    return pa.Array.from_buffers(t, rows, [mask, *body], null_count=int(nulls))


def take_columns(
    batch: pa.RecordBatch, order: np.ndarray, kernels: GatherKernels
) -> pa.RecordBatch:
    """Rows ``order`` of ``batch``: the kernels for string columns, ``take`` for the others.

    For fixed-width columns ``take`` is as fast as the kernels; for strings it is slower.
    """
    indices: pa.Array | None = None
    columns = []
    for column in batch.columns:
        if is_string_like(column.type):
            columns.append(take_array(column, order, kernels))
            continue
        if indices is None:
            indices = pa.array(order)
        if takes(column.type):
            columns.append(pc.take(column, indices, boundscheck=False))
        else:
            columns.append(gather(column, order.astype(np.int64, copy=False)))
    return pa.RecordBatch.from_arrays(columns, schema=batch.schema)
