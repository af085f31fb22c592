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


def _kernels() -> GatherKernels:
    # Imported here: the module imports numba, which is optional.
    from arrowshuffle.format import _gather_kernels as k

    return GatherKernels(
        k.destinations,
        k.invert,
        k.scatter_values,
        k.scatter_rows,
        k.scatter_bits,
        k.scatter_lengths,
        k.scatter_words,
        k.scatter_edges,
    )


#: The compiled kernels, or None when numba is missing or ``ARROWSHUFFLE_JIT=0``
#: (see :mod:`~arrowshuffle.format.jit`).
kernels: CompiledOnce[GatherKernels] = CompiledOnce(_kernels)
