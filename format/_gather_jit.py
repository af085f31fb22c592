"""The writer's sort kernels compiled with numba, when it is installed (``arrowshuffle[fast]``).

A batch is sorted by subpartition with a counting sort of its ids, which gives each row its
position in the sorted batch, and a scatter of every column's values to those positions. The
source is read in order, which the processor prefetches, and each subpartition's rows are
written in order too; pyarrow's ``take`` reads the source in the sorted order instead (a cache
miss per row of a batch no longer in cache) and appends string values one at a time. The
kernels run without the GIL. :mod:`~arrowshuffle.format.gather` calls them; without numba (or
with ``ARROWSHUFFLE_JIT=0``) the writer uses ``take``, which gives the same bytes.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from arrowshuffle.format.jit import JIT_ENV, CompiledOnce, available

__all__ = ["JIT_ENV", "GatherKernels", "available", "kernels"]


class GatherKernels(NamedTuple):
    """The compiled kernels; ``bits`` arguments are validity bitmaps, empty when none.

    ``destinations(ids, counts, dest)``: ``counts`` (zeroed, one per subpartition) gets each
    subpartition's rows and ``dest`` each row's position in the batch stably sorted by id.
    ``invert(dest, order)``: ``order`` gets the rows in sorted order, for ``take``.

    ``scatter_values(values, dest, out)`` moves fixed-width values, ``scatter_rows`` the rows
    of 2-D ``values`` (values wider than 8 bytes as several words each);
    ``scatter_bits(bits, bit_offset, dest, out_bits)`` sets the bits of ``out_bits`` (zeroed)
    where ``bits`` has them set, and returns how many are clear.

    ``scatter_lengths(offsets, bits, bit_offset, dest, out_offsets)`` writes the offsets of
    the sorted values (a null row gets no bytes) and returns their bytes; then
    ``scatter_words(offsets, bits, bit_offset, data, dest, out_offsets, out)`` copies them as
    32-byte words (``out`` has 32 bytes to spare), all but the rows it returns the first of,
    and ``scatter_edges(..., data, ids, ends, dest, out_offsets, out, safe)`` copies those
    and mends what words ran over: ``ends`` holds each subpartition's end row.
    """

    destinations: Any
    invert: Any
    scatter_values: Any
    scatter_rows: Any
    scatter_bits: Any
    scatter_lengths: Any
    scatter_words: Any
    scatter_edges: Any


def _kernels(numba: Any) -> GatherKernels:
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

    @jit  # type: ignore[untyped-decorator]
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

    @jit  # type: ignore[untyped-decorator]
    def invert(dest: Any, order: Any) -> None:
        for i in range(len(dest)):
            order[dest[i]] = i

    @jit  # type: ignore[untyped-decorator]
    def is_set(bits: Any, i: Any) -> Any:
        return (bits[i >> 3] >> (i & 7)) & 1 == 1

    @jit  # type: ignore[untyped-decorator]
    def scatter_values(values: Any, dest: Any, out: Any) -> None:
        for i in range(len(dest)):
            out[dest[i]] = values[i]

    @jit  # type: ignore[untyped-decorator]
    def scatter_rows(values: Any, dest: Any, out: Any) -> None:
        for i in range(len(dest)):
            d = dest[i]
            for k in range(values.shape[1]):
                out[d, k] = values[i, k]

    @jit  # type: ignore[untyped-decorator]
    def scatter_bits(bits: Any, bit_offset: Any, dest: Any, out_bits: Any) -> Any:
        clear = 0
        for i in range(len(dest)):
            if is_set(bits, bit_offset + i):
                d = dest[i]
                out_bits[d >> 3] |= np.uint8(1 << (d & 7))
            else:
                clear += 1
        return clear

    @jit  # type: ignore[untyped-decorator]
    def scatter_lengths(
        offsets: Any, bits: Any, bit_offset: Any, dest: Any, out_offsets: Any
    ) -> Any:
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

    @jit  # type: ignore[untyped-decorator]
    def copy_bytes(out: Any, to: Any, data: Any, start: Any, n: Any) -> None:
        for t in range(n):
            out[to + t] = data[start + t]

    @jit  # type: ignore[untyped-decorator]
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

    @jit  # type: ignore[untyped-decorator]
    def copy_row(
        offsets: Any, bits: Any, bit_offset: Any, data: Any, i: Any, to: Any, out: Any
    ) -> None:
        if len(bits) == 0 or is_set(bits, bit_offset + i):
            start = np.int64(offsets[i])
            for t in range(np.int64(offsets[i + 1]) - start):
                out[to + t] = data[start + t]

    @jit  # type: ignore[untyped-decorator]
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

    return GatherKernels(
        destinations,
        invert,
        scatter_values,
        scatter_rows,
        scatter_bits,
        scatter_lengths,
        scatter_words,
        scatter_edges,
    )


#: The compiled kernels, or None when numba is missing or ``ARROWSHUFFLE_JIT=0``
#: (see :mod:`~arrowshuffle.format.jit`).
kernels: CompiledOnce[GatherKernels] = CompiledOnce(_kernels)
