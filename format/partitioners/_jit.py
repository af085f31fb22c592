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

import numpy as np

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


def _kernels(numba: Any) -> Kernels:
    jit = numba.njit(nogil=True, cache=True, boundscheck=False)
    u32 = np.uint32
    c1 = u32(0xCC9E2D51)
    c2 = u32(0x1B873593)
    h_add = u32(0xE6546B64)
    f1 = u32(0x85EBCA6B)
    f2 = u32(0xC2B2AE35)

    # numba widens integer arithmetic to 64 bits; truncating every result back to uint32 is
    # Java's int arithmetic, and lets LLVM keep (and vectorize) 32-bit operations.
    @jit  # type: ignore[untyped-decorator]
    def rotl(x: Any, r: Any) -> Any:
        return u32(u32(x << r) | u32(x >> (32 - r)))

    @jit  # type: ignore[untyped-decorator]
    def mix_k1(k: Any) -> Any:
        return u32(rotl(u32(k * c1), 15) * c2)

    @jit  # type: ignore[untyped-decorator]
    def mix_h1(h: Any, k: Any) -> Any:
        return u32(u32(rotl(u32(h ^ k), 13) * u32(5)) + h_add)

    @jit  # type: ignore[untyped-decorator]
    def fmix(h: Any, length: Any) -> Any:
        h = u32(h ^ length)
        h = u32(h ^ (h >> 16))
        h = u32(h * f1)
        h = u32(h ^ (h >> 13))
        h = u32(h * f2)
        return u32(h ^ (h >> 16))

    @jit  # type: ignore[untyped-decorator]
    def hash_int(seeds: Any, values: Any, out: Any) -> None:
        for i in range(len(values)):
            k = u32(np.int32(values[i]))
            out[i] = fmix(mix_h1(seeds[i], mix_k1(k)), u32(4))

    @jit  # type: ignore[untyped-decorator]
    def hash_long(seeds: Any, values: Any, out: Any) -> None:
        for i in range(len(values)):
            v = values[i]
            h = mix_h1(seeds[i], mix_k1(u32(v)))
            h = mix_h1(h, mix_k1(u32(v >> 32)))
            out[i] = fmix(h, u32(8))

    @jit  # type: ignore[untyped-decorator]
    def hash_bytes(seeds: Any, data: Any, starts: Any, lengths: Any, out: Any) -> None:
        for i in range(len(starts)):
            h = u32(seeds[i])
            p = starts[i]
            length = lengths[i]
            end = p + (length & ~3)
            while p < end:
                k = u32(
                    u32(data[p])
                    | u32(u32(data[p + 1]) << 8)
                    | u32(u32(data[p + 2]) << 16)
                    | u32(u32(data[p + 3]) << 24)
                )
                h = mix_h1(h, mix_k1(k))
                p += 4
            for t in range(length & 3):
                # Spark's tail rule: each leftover byte, sign-extended, gets a whole round.
                h = mix_h1(h, mix_k1(u32(np.int32(np.int8(data[p + t])))))
            out[i] = fmix(h, u32(length))

    return Kernels(hash_int, hash_long, hash_bytes)


#: The compiled kernels, or None when numba is missing or ``ARROWSHUFFLE_JIT=0``
#: (see :mod:`~arrowshuffle.format.jit`).
kernels: CompiledOnce[Kernels] = CompiledOnce(_kernels)
