"""CRC32C (Castagnoli) over bytes-like objects, hardware accelerated where available.

The ``crc32c`` package interleaves three streams of the CPU's CRC32 instruction (about
20 GB/s on one core, 3 to 4 times the single stream) and releases the GIL for large buffers,
so the writer's encoding threads checksum in parallel.
"""

from __future__ import annotations

from typing import Any

import crc32c as _crc32c


def crc32c(data: Any, value: int = 0) -> int:
    """Return the CRC32C of ``data``, continuing from ``value`` (0 starts a new checksum).

    ``data`` is any contiguous object with the buffer protocol (bytes, bytearrays, pyarrow
    buffers, memory maps, numpy arrays), checksummed in place.
    """
    return int(_crc32c.crc32c(data, value))


#: The CRC32C polynomial, bit-reflected (bit 31 is the coefficient of x**0).
_POLY = 0x82F63B78
_ONE = 1 << 31  # the polynomial 1, reflected


def _multiply(a: int, b: int) -> int:
    """``a * b`` modulo the CRC32C polynomial, both reflected."""
    product = 0
    bit = _ONE
    while a:
        if a & bit:
            product ^= b
            a ^= bit
        bit >>= 1
        b = (b >> 1) ^ _POLY if b & 1 else b >> 1
    return product


def _squares() -> tuple[int, ...]:
    """``x ** (2 ** k)`` modulo the polynomial, for k in 0..63."""
    powers = [_ONE >> 1]  # x ** 1
    for _ in range(63):
        powers.append(_multiply(powers[-1], powers[-1]))
    return tuple(powers)


_X_POW_2K = _squares()


def crc32c_combine(first: int, second: int, second_length: int) -> int:
    """The CRC32C of ``a + b`` from ``first = crc32c(a)``, ``second = crc32c(b)`` and ``len(b)``.

    Appending ``n`` bytes multiplies the checksum of what came before by ``x ** (8 n)``
    modulo the polynomial (the initial and final inversions cancel out between the two
    checksums), so checksums of consecutive pieces computed apart, on any thread, combine in
    O(log n) steps without reading the bytes again.
    """
    if second_length < 0:
        raise ValueError(f"a length is never negative, found {second_length}")
    if first == 0:
        return second  # x ** (8 n) times zero: the common case of a chunk's first message
    shift = _ONE  # x ** 0
    bits = second_length * 8
    k = 0
    while bits:
        if bits & 1:
            shift = _multiply(_X_POW_2K[k], shift)
        bits >>= 1
        k += 1
    return _multiply(shift, first) ^ second
