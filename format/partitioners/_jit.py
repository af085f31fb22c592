"""The writer's kernels compiled with numba, when it is installed (``arrowshuffle[fast]``).

Spark's Murmur3 in numpy spends a pass over memory per arithmetic step and ~30 steps per key,
and its calls are too short for threads to overlap them; a compiled loop keeps each row in
registers and runs without the GIL from start to end, so the kernel threads really run at
once. Results are the same bit for bit as the numpy kernels of
:mod:`~arrowshuffle.format.partitioners.spark_hash`, which are used when numba is missing or
``ARROWSHUFFLE_JIT=0``. The hash kernels read the running hash of row ``i`` from ``seeds[i]``
(an array apart from ``out``) and write it to ``out[i]``.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from arrowshuffle.format.jit import JIT_ENV, CompiledOnce, available

__all__ = ["JIT_ENV", "Kernels", "available", "kernels"]


class Kernels(NamedTuple):
    """The compiled kernels.

    ``hash_int(seeds, values, out)``, ``hash_long(seeds, longs, out)`` and
    ``hash_bytes(seeds, data, starts, lengths, out)``.
    """

    hash_int: Any
    hash_long: Any
    hash_bytes: Any


def _kernels() -> Kernels:
    # Imported here: the module imports numba, which is optional.
    from arrowshuffle.format.partitioners import _hash_kernels as k

    return Kernels(k.hash_int, k.hash_long, k.hash_bytes)


#: The compiled kernels, or None when numba is missing or ``ARROWSHUFFLE_JIT=0``
#: (see :mod:`~arrowshuffle.format.jit`).
kernels: CompiledOnce[Kernels] = CompiledOnce(_kernels)
