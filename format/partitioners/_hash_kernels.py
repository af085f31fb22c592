"""Spark's Murmur3 kernels, compiled with numba: imported only where numba is installed.

:mod:`~arrowshuffle.format.partitioners._jit` loads this module on first use and describes
the kernels. They are module-level functions, not closures, so that numba's on-disk cache
finds them again in a new process: the cache key of a closure includes the functions it
captures, which pickle differently in every process, so every process would compile them
anew and add another copy to the cache.
"""

from __future__ import annotations

from typing import Any

import numba
import numpy as np

# Murmur3's constants, from the numpy kernels the results must equal bit for bit.
from arrowshuffle.format.partitioners.spark_hash import _C1 as C1
from arrowshuffle.format.partitioners.spark_hash import _C2 as C2
from arrowshuffle.format.partitioners.spark_hash import _FMIX1 as F1
from arrowshuffle.format.partitioners.spark_hash import _FMIX2 as F2
from arrowshuffle.format.partitioners.spark_hash import _H_ADD as H_ADD

jit = numba.njit(nogil=True, cache=True, boundscheck=False)

u32 = np.uint32


# numba widens integer arithmetic to 64 bits; truncating every result back to uint32 is
# Java's int arithmetic, and lets LLVM keep (and vectorize) 32-bit operations.
@jit
def rotl(x: Any, r: Any) -> Any:
    return u32(u32(x << r) | u32(x >> (32 - r)))


@jit
def mix_k1(k: Any) -> Any:
    return u32(rotl(u32(k * C1), 15) * C2)


@jit
def mix_h1(h: Any, k: Any) -> Any:
    return u32(u32(rotl(u32(h ^ k), 13) * u32(5)) + H_ADD)


@jit
def fmix(h: Any, length: Any) -> Any:
    h = u32(h ^ length)
    h = u32(h ^ (h >> 16))
    h = u32(h * F1)
    h = u32(h ^ (h >> 13))
    h = u32(h * F2)
    return u32(h ^ (h >> 16))


@jit
def hash_int(seeds: Any, values: Any, out: Any) -> None:
    for i in range(len(values)):
        k = u32(np.int32(values[i]))
        out[i] = fmix(mix_h1(seeds[i], mix_k1(k)), u32(4))


@jit
def hash_long(seeds: Any, values: Any, out: Any) -> None:
    for i in range(len(values)):
        v = values[i]
        h = mix_h1(seeds[i], mix_k1(u32(v)))
        h = mix_h1(h, mix_k1(u32(v >> 32)))
        out[i] = fmix(h, u32(8))


@jit
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
