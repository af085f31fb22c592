"""The writer's sort kernels, compiled with numba: imported only where numba is installed.

:mod:`~arrowshuffle.format._gather_jit` loads this module on first use and describes the
kernels. They are module-level functions, not closures, so that numba's on-disk cache finds
them again in a new process: the cache key of a closure includes the functions it captures,
which pickle differently in every process, so every process would compile them anew (about a
second and a half of CPU) and add another copy to the cache.
"""

from __future__ import annotations

from typing import Any

import numba
import numpy as np
from numba.core import cgutils, types
from numba.extending import intrinsic

jit = numba.njit(nogil=True, cache=True, boundscheck=False)


def copy32_typing(typingctx: Any, dst: Any, dst_pos: Any, src: Any, src_pos: Any) -> Any:
    # One fixed-size copy compiles to a few wide loads and stores, without the branches
    # that a byte loop of each value's length mispredicts.
    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        dst_arr = context.make_array(signature.args[0])(context, builder, args[0])
        src_arr = context.make_array(signature.args[2])(context, builder, args[2])
        to = builder.gep(dst_arr.data, [args[1]])
        start = builder.gep(src_arr.data, [args[3]])
        size = context.get_constant(types.intp, 32)
        cgutils.raw_memcpy(builder, to, start, size, 1)  # type: ignore[no-untyped-call]
        return context.get_dummy_value()

    return types.void(dst, types.int64, src, types.int64), codegen


copy32: Any = intrinsic(copy32_typing)


@jit
def destinations(ids: Any, counts: Any, dest: Any) -> None:
    for i in range(len(ids)):
        counts[ids[i]] += 1
    next_slot = np.empty(len(counts), np.int64)
    total = 0
    for s in range(len(counts)):
        next_slot[s] = total
        total += counts[s]
    for i in range(len(ids)):
        s = ids[i]
        dest[i] = next_slot[s]
        next_slot[s] += 1


@jit
def invert(dest: Any, order: Any) -> None:
    for i in range(len(dest)):
        order[dest[i]] = i


@jit
def is_set(bits: Any, i: Any) -> Any:
    return (bits[i >> 3] >> (i & 7)) & 1 == 1


@jit
def scatter_values(values: Any, dest: Any, out: Any) -> None:
    for i in range(len(dest)):
        out[dest[i]] = values[i]


@jit
def scatter_rows(values: Any, dest: Any, out: Any) -> None:
    for i in range(len(dest)):
        d = dest[i]
        for k in range(values.shape[1]):
            out[d, k] = values[i, k]


@jit
def scatter_bits(bits: Any, bit_offset: Any, dest: Any, out_bits: Any) -> Any:
    clear = 0
    for i in range(len(dest)):
        if is_set(bits, bit_offset + i):
            d = dest[i]
            out_bits[d >> 3] |= np.uint8(1 << (d & 7))
        else:
            clear += 1
    return clear


@jit
def scatter_lengths(offsets: Any, bits: Any, bit_offset: Any, dest: Any, out_offsets: Any) -> Any:
    has_bits = len(bits) > 0
    out_offsets[0] = 0
    for i in range(len(dest)):
        if has_bits and not is_set(bits, bit_offset + i):
            out_offsets[dest[i] + 1] = 0
        else:
            out_offsets[dest[i] + 1] = offsets[i + 1] - offsets[i]
    total = np.int64(0)
    for r in range(1, len(out_offsets)):
        total += np.int64(out_offsets[r])
        out_offsets[r] = total
    return total


@jit
def scatter_words(
    offsets: Any, bits: Any, bit_offset: Any, data: Any, dest: Any, out_offsets: Any, out: Any
) -> Any:
    # Values are copied as 32-byte words, up to 31 bytes past their end: rows from
    # ``safe`` on, whose words would read past the source's bytes, are left to
    # scatter_edges. (Its exact copies, in this loop, would make it slower.)
    safe = len(dest)
    while safe > 0 and np.int64(offsets[safe]) + 31 > len(data):
        safe -= 1
    has_bits = len(bits) > 0
    for i in range(safe):
        if has_bits and not is_set(bits, bit_offset + i):
            continue
        start = np.int64(offsets[i])
        n = np.int64(offsets[i + 1]) - start
        d = np.int64(out_offsets[dest[i]])
        t = 0
        while t < n:
            copy32(out, d + t, data, start + t)
            t += 32
    return safe


@jit
def copy_row(
    offsets: Any, bits: Any, bit_offset: Any, data: Any, i: Any, to: Any, out: Any
) -> None:
    if len(bits) == 0 or is_set(bits, bit_offset + i):
        start = np.int64(offsets[i])
        for t in range(np.int64(offsets[i + 1]) - start):
            out[to + t] = data[start + t]


@jit
def scatter_edges(
    offsets: Any,
    bits: Any,
    bit_offset: Any,
    data: Any,
    ids: Any,
    ends: Any,
    dest: Any,
    out_offsets: Any,
    out: Any,
    safe: Any,
) -> None:
    for i in range(safe, len(dest)):
        copy_row(offsets, bits, bit_offset, data, i, np.int64(out_offsets[dest[i]]), out)
    # A subpartition's rows are written in order, so the words of one row run only into
    # rows written after it, or, for its last rows, into the first 32 bytes of the next
    # subpartitions: the rows that start there are copied again, exactly.
    left = np.zeros(len(ends), np.int64)
    pending = 0
    first = 0
    for s in range(len(ends)):
        zone = np.int64(out_offsets[first]) + 32
        r = first
        while s > 0 and r < ends[s] and np.int64(out_offsets[r]) < zone:
            r += 1
        left[s] = r - first
        pending += 1 if r > first else 0
        first = ends[s]
    i = 0
    while pending > 0:
        s = ids[i]
        if left[s] > 0:
            copy_row(offsets, bits, bit_offset, data, i, np.int64(out_offsets[dest[i]]), out)
            left[s] -= 1
            pending -= 1 if left[s] == 0 else 0
        i += 1
