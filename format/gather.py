"""Sort a batch by subpartition with the compiled kernels: the bytes of ``take``, faster.

The writer sorts every buffered batch by subpartition on arrival. With the kernels
(:mod:`~arrowshuffle.format._gather_jit`), a counting sort of its ids gives each row its
position in the sorted batch (:func:`destinations`), and :func:`scatter_columns` moves each
column's values there: fixed-width values and booleans, strings and binaries of either offset
width, with validity bitmaps and non-zero array offsets. The result equals ``take`` in the
sorted order byte for byte (the same offsets and bytes, no bytes for a null string, zeroed
null slots, no validity bitmap when no row is null), into buffers from pyarrow's memory pool.
Other columns (nested, views, run-end encoded, extension) go through ``take``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.types as pat

from arrowshuffle.format._gather_jit import GatherKernels
from arrowshuffle.format.arrow_types import gather, takes

__all__ = ["destinations", "scatter_columns", "scatters"]

#: Spare bytes after scattered string data: short values are copied as 32-byte words.
_WORD = 32
#: Fixed-width values of these byte widths are moved as one unsigned integer each.
_WORDS = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def _large(t: pa.DataType) -> bool:
    return bool(pat.is_large_string(t) or pat.is_large_binary(t))


def _string_like(t: pa.DataType) -> bool:
    return bool(pat.is_string(t) or pat.is_binary(t)) or _large(t)


def _value_bytes(t: pa.DataType) -> int:
    """The byte width of a type laid out as a validity bitmap and one values buffer, else 0."""
    if pat.is_boolean(t) or pat.is_dictionary(t) or isinstance(t, pa.BaseExtensionType):
        return 0
    try:
        bits = int(t.bit_width)
    except ValueError:  # not a fixed-width type
        return 0
    return bits // 8 if bits > 0 and bits % 8 == 0 and t.num_buffers == 2 else 0


def scatters(t: pa.DataType) -> bool:
    """True when the kernels move columns of type ``t`` (the others go through ``take``)."""
    return pat.is_boolean(t) or _string_like(t) or _value_bytes(t) > 0


def destinations(
    ids: np.ndarray, num_subpartitions: int, kernels: GatherKernels
) -> tuple[np.ndarray, np.ndarray]:
    """Each row's position in the rows stably sorted by ``ids``, and the rows of each id."""
    counts = np.zeros(num_subpartitions, dtype=np.int64)
    dest = np.empty(len(ids), dtype=np.int32 if len(ids) <= 2**31 - 1 else np.int64)
    kernels.destinations(ids, counts, dest)
    return dest, counts


def _allocate(nbytes: int, dtype: Any) -> tuple[pa.Buffer, np.ndarray]:
    """A buffer from pyarrow's memory pool (it keeps freed pages for reuse) and a view of it."""
    buffer = pa.allocate_buffer(max(nbytes, 1))
    return buffer, np.frombuffer(buffer, dtype=np.uint8)[:nbytes].view(dtype)


def _view(buffer: pa.Buffer | None, dtype: Any, start: int, count: int) -> np.ndarray:
    """``count`` items of ``dtype`` from item ``start`` of ``buffer``, as a numpy view."""
    if buffer is None or count == 0:
        return np.zeros(0, dtype=dtype)
    return np.frombuffer(buffer, dtype=dtype, count=start + count)[start:]


def _validity(
    arr: pa.Array, dest: np.ndarray, kernels: GatherKernels
) -> tuple[pa.Buffer | None, np.ndarray]:
    """The sorted validity bitmap (None without nulls) and a numpy view of its bytes."""
    if not arr.null_count:
        return None, np.zeros(0, np.uint8)
    rows = len(arr)
    buffer, bits = _allocate((rows + 7) // 8, np.uint8)
    bits[:] = 0  # bits past the last row are zero, as take leaves them
    kernels.scatter_bits(np.frombuffer(arr.buffers()[0], np.uint8), arr.offset, dest, bits)
    return buffer, bits


def _scatter_fixed(arr: pa.Array, width: int, dest: np.ndarray, kernels: GatherKernels) -> pa.Array:
    rows = len(arr)
    validity, bits = _validity(arr, dest, kernels)
    word = _WORDS.get(width)
    if word is None:  # wider values (decimals, intervals, fixed-size binaries): rows of words
        word = np.uint64 if width % 8 == 0 else np.uint8
        per_row = width // np.dtype(word).itemsize
        values = _view(arr.buffers()[1], word, arr.offset * per_row, rows * per_row)
        buffer, out = _allocate(rows * width, word)
        out = out.reshape(rows, per_row)
        kernels.scatter_rows(values.reshape(rows, per_row), dest, out)
    else:
        values = _view(arr.buffers()[1], word, arr.offset, rows)
        buffer, out = _allocate(rows * width, word)
        kernels.scatter_values(values, dest, out)
    if validity is not None:
        out[~np.unpackbits(bits, count=rows, bitorder="little").view(bool)] = 0  # as take
    return pa.Array.from_buffers(arr.type, rows, [validity, buffer], null_count=arr.null_count)


def _scatter_booleans(arr: pa.Array, dest: np.ndarray, kernels: GatherKernels) -> pa.Array:
    rows = len(arr)
    validity, bits = _validity(arr, dest, kernels)
    buffer, out = _allocate((rows + 7) // 8, np.uint8)
    out[:] = 0
    kernels.scatter_bits(np.frombuffer(arr.buffers()[1], np.uint8), arr.offset, dest, out)
    if validity is not None:
        out &= bits  # a null row's value is false, as take leaves it
    return pa.Array.from_buffers(arr.type, rows, [validity, buffer], null_count=arr.null_count)


def _scatter_strings(
    arr: pa.Array, dest: np.ndarray, ids: np.ndarray, ends: np.ndarray, kernels: GatherKernels
) -> pa.Array:
    rows = len(arr)
    buffers = arr.buffers()
    validity, _ = _validity(arr, dest, kernels)
    source_bits = np.zeros(0, np.uint8) if validity is None else np.frombuffer(buffers[0], np.uint8)
    dtype = np.int64 if _large(arr.type) else np.int32
    offsets = _view(buffers[1], dtype, arr.offset, rows + 1)
    offsets_buffer, out_offsets = _allocate((rows + 1) * np.dtype(dtype).itemsize, dtype)
    size = int(kernels.scatter_lengths(offsets, source_bits, arr.offset, dest, out_offsets))
    data, out = _allocate(size + _WORD, np.uint8)
    source = np.zeros(0, np.uint8) if buffers[2] is None else np.frombuffer(buffers[2], np.uint8)
    safe = kernels.scatter_words(offsets, source_bits, arr.offset, source, dest, out_offsets, out)
    kernels.scatter_edges(
        offsets, source_bits, arr.offset, source, ids, ends, dest, out_offsets, out, safe
    )
    body = [offsets_buffer, data.slice(0, size)]
    return pa.Array.from_buffers(arr.type, rows, [validity, *body], null_count=arr.null_count)


def scatter_columns(
    batch: pa.RecordBatch,
    ids: np.ndarray,
    dest: np.ndarray,
    counts: np.ndarray,
    kernels: GatherKernels,
) -> pa.RecordBatch:
    """``batch`` stably sorted by ``ids``, given :func:`destinations` of them.

    Columns :func:`scatters` covers are moved by the kernels, the others by ``take``.
    """
    order: pa.Array | None = None
    ends = np.cumsum(counts)
    columns = []
    for column in batch.columns:
        t = column.type
        width = _value_bytes(t)
        if width:
            columns.append(_scatter_fixed(column, width, dest, kernels))
        elif pat.is_boolean(t):
            columns.append(_scatter_booleans(column, dest, kernels))
        elif _string_like(t):
            columns.append(_scatter_strings(column, dest, ids, ends, kernels))
        else:
            if order is None:
                positions = np.empty_like(dest)
                kernels.invert(dest, positions)
                order = pa.array(positions)
            if takes(t):
                columns.append(pc.take(column, order, boundscheck=False))
            else:
                columns.append(gather(column, order.to_numpy().astype(np.int64, copy=False)))
    return pa.RecordBatch.from_arrays(columns, schema=batch.schema)
