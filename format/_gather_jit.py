"""The writer's sort kernels compiled with numba, when it is installed (``arrowshuffle[fast]``).

A batch is sorted by subpartition with a counting sort of its ids and a gather of its rows in
that order. pyarrow's ``take`` spends most of its time on string columns, appending one value
at a time; these kernels copy each value with a few fixed-size word moves instead, and run
without the GIL. A null string gets no bytes, as ``take`` gives it.
:mod:`~arrowshuffle.format.gather` calls them; without numba (or with ``ARROWSHUFFLE_JIT=0``)
the writer uses ``take``, which gives the same bytes.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from arrowshuffle.format.jit import JIT_ENV, CompiledOnce, available

__all__ = ["JIT_ENV", "GatherKernels", "available", "kernels"]


class GatherKernels(NamedTuple):
    """The compiled kernels.

    ``counting_sort(ids, counts, order)``: ``counts`` (zeroed, one per subpartition) gets each
    subpartition's rows, ``order`` the rows stably sorted by id.

    ``take_offsets(offsets, bits, bit_offset, order, starts, out_offsets, out_bits, track)``
    returns ``(bytes, nulls)``: where each gathered value starts, and the offsets and validity
    of the result (``bits`` is empty when no row is null; ``out_bits``, zeroed, is filled only
    when ``track`` is set). ``take_bytes(data, starts, out_offsets, out)`` then copies the bytes;
    ``out`` has 32 bytes to spare (short values are copied as 32-byte words).
    """

    counting_sort: Any
    take_offsets: Any
    take_bytes: Any


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
    def counting_sort(ids: Any, counts: Any, order: Any) -> None:
        for i in range(len(ids)):
            counts[ids[i]] += 1
        next_slot = np.empty(len(counts), np.int64)
        total = 0
        for s in range(len(counts)):
            next_slot[s] = total
            total += counts[s]
        for i in range(len(ids)):
            s = ids[i]
            order[next_slot[s]] = i
            next_slot[s] += 1

    @jit  # type: ignore[untyped-decorator]
    def set_bit(bits: Any, i: Any) -> None:
        bits[i >> 3] |= np.uint8(1 << (i & 7))

    @jit  # type: ignore[untyped-decorator]
    def is_set(bits: Any, i: Any) -> Any:
        return (bits[i >> 3] >> (i & 7)) & 1 == 1

    @jit  # type: ignore[untyped-decorator]
    def take_offsets(
        offsets: Any,
        bits: Any,
        bit_offset: Any,
        order: Any,
        starts: Any,
        out_offsets: Any,
        out_bits: Any,
        track: Any,
    ) -> Any:
        total = np.int64(0)
        nulls = 0
        has_bits = len(bits) > 0
        out_offsets[0] = 0
        for i in range(len(order)):
            j = np.int64(order[i])
            if has_bits and not is_set(bits, bit_offset + j):
                starts[i] = 0
                nulls += 1
            else:
                s = np.int64(offsets[j])
                total += np.int64(offsets[j + 1]) - s
                starts[i] = s
                if track:
                    set_bit(out_bits, i)
            out_offsets[i + 1] = total
        return total, nulls

    @jit  # type: ignore[untyped-decorator]
    def take_bytes(data: Any, starts: Any, out_offsets: Any, out: Any) -> None:
        limit = len(data)
        for i in range(len(starts)):
            s = np.int64(starts[i])
            d = np.int64(out_offsets[i])
            n = np.int64(out_offsets[i + 1]) - d
            if s + ((n + 31) & ~31) <= limit:
                t = 0
                while t < n:
                    copy32(out, d + t, data, s + t)
                    t += 32
            else:  # near the end of its buffer: no word may read past it
                for t in range(n):
                    out[d + t] = data[s + t]

    return GatherKernels(counting_sort, take_offsets, take_bytes)


#: The compiled kernels, or None when numba is missing or ``ARROWSHUFFLE_JIT=0``
#: (see :mod:`~arrowshuffle.format.jit`).
kernels: CompiledOnce[GatherKernels] = CompiledOnce(_kernels)
