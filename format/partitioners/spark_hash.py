"""Spark's Murmur3 row hash and Flink's int murmur hash, vectorized with numpy.

:func:`spark_hash` returns, for every row, the value of Spark's SQL ``hash(c1, c2, ...)``
(``Murmur3Hash`` with seed 42), and :func:`spark_partition_ids` the partition that
``df.repartition(n, c1, c2, ...)`` gives the row. Both follow Spark bit for bit:

* Columns are chained: the hash of one column is the seed of the next. A null value leaves the
  running hash as it was.
* ``bool`` hashes as the int 1 or 0; ``int8``, ``int16``, ``int32`` and ``date32`` as a 4-byte int
  (``hashInt``); ``int64`` as an 8-byte long (``hashLong``).
* Timestamps (any unit, with or without a time zone) and durations hash as a long of
  microseconds, as Spark's ``TIMESTAMP``, ``TIMESTAMP_NTZ`` and ``INTERVAL DAY TO SECOND`` hold
  them. Nanoseconds are floored to microseconds, as PySpark's conversion does. A timestamp without
  a time zone hashes its stored wall-clock value: what ``TIMESTAMP_NTZ`` holds, and what
  ``TIMESTAMP`` holds when the Spark session time zone is UTC.
* ``date64`` hashes as the ``date32`` of the same day (Spark has only one date type).
* ``float32``/``float64`` hash by their IEEE bit pattern (Java's ``floatToIntBits`` /
  ``doubleToLongBits``): ``-0.0`` hashes as ``0.0`` and every NaN as the canonical NaN.
* Decimals of precision up to 18 hash the unscaled value as a long; larger precision (up to
  Spark's 38) hashes the bytes of the unscaled value as Java's ``BigInteger.toByteArray`` gives
  them (minimal big-endian two's complement).
* Strings and binaries (``string``, ``large_string``, ``string_view``, ``binary``,
  ``large_binary``, ``binary_view``, ``fixed_size_binary``) hash their bytes with Spark's
  ``hashUnsafeBytes``: 4-byte little-endian blocks as in Murmur3, then *each* leftover byte,
  sign-extended to an int, gets a full mixing round, then the finalizer with the total length.
* Dictionary and run-end encoded arrays hash as their decoded values, extension arrays as their
  storage (what Spark reads from such a column); a column of Arrow's ``null`` type is all nulls.
* Spark has no unsigned integers. The unsigned types hash as Spark sees them when it reads the
  same data from Parquet (the one place it maps them): ``uint8`` as ``SMALLINT``, ``uint16`` as
  ``INT``, ``uint32`` as ``BIGINT`` and ``uint64`` as ``DECIMAL(20, 0)``. (PySpark refuses to
  take unsigned Arrow columns in ``createDataFrame``.)

Every other type (lists, structs, maps, time of day, intervals, ``float16``, decimals above
precision 38) raises :class:`~arrowshuffle.format.errors.InvalidOptionError`.

When numba is installed (``pip install arrowshuffle[fast]``), the per-type kernels are compiled
loops (:mod:`arrowshuffle.format.partitioners._jit`), several times faster; otherwise they are numpy
passes, with the same results bit for bit. ``ARROWSHUFFLE_JIT=0`` picks the numpy kernels.

The numpy kernels work in place on ``uint32`` arrays, whose products and sums wrap modulo
2**32 exactly as Java's ``int`` does; no pass widens to 64 bits, and scratch arrays are reused
from step to step. Rows are hashed in steps of a few thousand, all key columns of a step one
after the other, so that a step's arrays stay in the CPU cache. A large batch is cut into one
row range per thread (see :mod:`arrowshuffle.format.parallel`): compiled kernels, numpy's
ufuncs and Arrow's sort release the GIL.

The numpy kernel hashes bytes one block position at a time across the rows of a step, the rows
ordered by their number of 4-byte blocks, most first (Arrow's counting sort), so that the rows
that have a block ``j`` are a prefix of that order; then the 0-3 leftover bytes, one position
at a time, blended into the rows that have them. Words are gathered from an aligned table of
the step's bytes at each of the four byte phases. Values longer than 256 bytes are hashed
afterwards in one pass of their own over just their rows, so that a few long keys among many
short ones cost little; a key of megabytes still takes seconds without numba.

:func:`flink_murmur_hash` is Flink's ``MathUtils.murmurHash(int)``, which
``KeyGroupRangeAssignment`` applies to a key's hash code to pick its key group.
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.types as pat
from numpy.typing import DTypeLike

from arrowshuffle.format.arrow_types import decode_dictionary, decode_runs
from arrowshuffle.format.errors import InvalidOptionError
from arrowshuffle.format.parallel import parallel_map, row_ranges
from arrowshuffle.format.partitioners import _jit

__all__ = ["check_key_type", "flink_murmur_hash", "spark_hash", "spark_partition_ids"]

_U32 = np.uint32
_C1 = _U32(0xCC9E2D51)
_C2 = _U32(0x1B873593)
_H_ADD = _U32(0xE6546B64)
_FIVE = _U32(5)
_FMIX1 = _U32(0x85EBCA6B)
_FMIX2 = _U32(0xC2B2AE35)
_FLOAT_NAN_BITS = np.uint32(0x7FC00000)
_DOUBLE_NAN_BITS = np.uint64(0x7FF8000000000000)
_MAX_LONG_DIGITS = 18
_MAX_SPARK_PRECISION = 38
_INT32_MIN = -(2**31)
_INT32_MAX = 2**31 - 1
_TIME_UNIT_MICROS = {"s": 1_000_000, "ms": 1_000, "us": 1}
_MILLIS_PER_DAY = 86_400_000
#: Rows hashed per step: small enough that a step's arrays stay in the CPU cache.
_ROWS_PER_STEP = 1 << 14
#: The fewest rows a thread is handed: below that the hand-off costs more than it saves.
_MIN_ROWS_PER_THREAD = 1 << 14
#: Values longer than this are hashed apart from the rest (see the module docstring).
_LONG_VALUE_BYTES = 256
#: Bytes up to which a step's data is copied into an aligned word table (see _word_source).
_WORD_TABLE_BYTES = 8 << 20

_INT_DTYPES: dict[pa.DataType, type[np.integer]] = {
    pa.int8(): np.int8,
    pa.int16(): np.int16,
    pa.int32(): np.int32,
    pa.date32(): np.int32,
    # Spark reads Parquet's uint8 as SMALLINT and uint16 as INT: the value itself, hashed as int.
    pa.uint8(): np.uint8,
    pa.uint16(): np.uint16,
}

#: The running hash a kernel starts from: one value for every row (the seed of the first key
#: column), or the array the kernel writes to (the hash after the previous columns).
_Seed = np.ndarray | np.uint32

#: Scratch arrays larger than this are not kept between steps.
_SCRATCH_MAX_BYTES = 32 << 20


class _Scratch(threading.local):
    """Per-thread arrays reused from step to step, by name.

    Fresh arrays of a few hundred KiB come from ``mmap`` or a heap that is trimmed again on
    ``free``: every step would pay their page faults, which cost as much as the hashing.
    """

    def __init__(self) -> None:
        self.buffers: dict[str, np.ndarray] = {}

    def get(self, name: str, count: int, dtype: DTypeLike) -> np.ndarray:
        """``count`` elements of ``dtype``, uninitialized; valid until ``name`` is asked again."""
        size = count * np.dtype(dtype).itemsize
        if size > _SCRATCH_MAX_BYTES:
            return np.empty(count, dtype=dtype)
        buffer = self.buffers.get(name)
        if buffer is None or buffer.nbytes < size:
            buffer = np.empty(max(size, 64), dtype=np.uint8)
            self.buffers[name] = buffer
        return buffer[:size].view(dtype)


_scratch = _Scratch()

# --- Murmur3 x86_32 building blocks, in place on uint32 arrays this module owns -------------
# ``tmp`` is scratch of the same length: rotations and the finalizer need one operand more.


def _rotl_inplace(x: np.ndarray, r: int, tmp: np.ndarray) -> None:
    np.right_shift(x, _U32(32 - r), out=tmp)
    np.left_shift(x, _U32(r), out=x)
    np.bitwise_or(x, tmp, out=x)


def _mix_k1_inplace(k: np.ndarray, tmp: np.ndarray) -> None:
    np.multiply(k, _C1, out=k)
    _rotl_inplace(k, 15, tmp)
    np.multiply(k, _C2, out=k)


def _mix_h1_inplace(h: np.ndarray, k1: np.ndarray, tmp: np.ndarray) -> None:
    """``h`` becomes mixH1(h, k1)."""
    np.bitwise_xor(h, k1, out=h)
    _round_tail_inplace(h, tmp)


def _round_tail_inplace(h: np.ndarray, tmp: np.ndarray) -> None:
    """The part of mixH1 after ``h ^= k1``: ``h = rotl(h, 13) * 5 + 0xe6546b64``."""
    _rotl_inplace(h, 13, tmp)
    np.multiply(h, _FIVE, out=h)
    np.add(h, _H_ADD, out=h)


def _fmix_inplace(h: np.ndarray, length: np.ndarray | np.uint32, tmp: np.ndarray) -> None:
    np.bitwise_xor(h, length, out=h)
    np.right_shift(h, _U32(16), out=tmp)
    np.bitwise_xor(h, tmp, out=h)
    np.multiply(h, _FMIX1, out=h)
    np.right_shift(h, _U32(13), out=tmp)
    np.bitwise_xor(h, tmp, out=h)
    np.multiply(h, _FMIX2, out=h)
    np.right_shift(h, _U32(16), out=tmp)
    np.bitwise_xor(h, tmp, out=h)


def _seeds(seed: _Seed, out: np.ndarray) -> np.ndarray:
    """The running hash as an array apart from ``out``.

    A compiled loop is vectorized only over arrays that cannot alias.
    """
    seeds = _scratch.get("jit.seeds", len(out), _U32)
    if isinstance(seed, np.uint32):
        seeds.fill(seed)
    else:
        np.copyto(seeds, seed)
    return seeds


def _hash_int(seed: _Seed, values: np.ndarray, out: np.ndarray) -> None:
    """Murmur3 ``hashInt`` of int32-valued ``values`` (any integer dtype) into ``out``."""
    jit = _jit.kernels()
    if jit is not None:
        jit.hash_int(_seeds(seed, out), values, out)
        return
    rows = len(values)
    k = _scratch.get("int.k", rows, _U32)
    tmp = _scratch.get("int.tmp", rows, _U32)
    if values.dtype.itemsize == 4:
        np.multiply(values.view(_U32), _C1, out=k)
    else:
        np.copyto(k.view(np.int32), values, casting="unsafe")  # sign-extends, as Java does
        np.multiply(k, _C1, out=k)
    _rotl_inplace(k, 15, tmp)
    np.multiply(k, _C2, out=k)
    np.bitwise_xor(k, seed, out=out)
    _round_tail_inplace(out, tmp)
    _fmix_inplace(out, _U32(4), tmp)


def _hash_long(seed: _Seed, values: np.ndarray, out: np.ndarray) -> None:
    """Murmur3 ``hashLong`` of int64-valued ``values`` into ``out``: low word, then high word."""
    rows = len(values)
    longs = values.view(np.uint64) if values.dtype.itemsize == 8 else values.astype(np.uint64)
    jit = _jit.kernels()
    if jit is not None:
        jit.hash_long(_seeds(seed, out), longs, out)
        return
    # Row 0 of k: the low words; row 1: the high words. Casts and shifts from 64 to 32 bits
    # are vectorized, unlike a strided view of the 32-bit halves.
    flat = _scratch.get("long.k", 2 * rows, _U32)
    k = flat.reshape(2, rows)
    np.copyto(k[0], longs, casting="unsafe")
    np.right_shift(longs, np.uint64(32), out=k[1], casting="unsafe")
    tmp = _scratch.get("long.tmp", 2 * rows, _U32)
    _mix_k1_inplace(flat, tmp)  # both words of every row in one set of passes
    tmp = tmp[:rows]
    np.bitwise_xor(k[0], seed, out=out)
    _round_tail_inplace(out, tmp)
    _mix_h1_inplace(out, k[1], tmp)
    _fmix_inplace(out, _U32(8), tmp)


def _hash_bytes(
    seed: _Seed,
    data: np.ndarray,
    span: tuple[int, int],
    starts: np.ndarray,
    lengths: np.ndarray,
    out: np.ndarray,
) -> None:
    """Spark's ``hashUnsafeBytes`` of ``data[starts[i]:starts[i] + lengths[i]]`` into ``out``.

    First the 4-byte blocks, one block position at a time across the rows that have it, then
    the 0-3 leftover bytes, one position at a time across the rows that have it: the rows are
    ordered by their number of blocks (leftover bytes), most first, so that the rows of a
    position are a prefix of that order.

    Args:
        seed: the running hash (see :data:`_Seed`).
        data: the bytes the values live in (uint8).
        span: ``(lo, hi)``: every value lies in ``data[lo:hi]``.
        starts: where each value begins in ``data`` (int64).
        lengths: each value's length in bytes (any integer dtype).
        out: the hash of every row (uint32).
    """
    rows = len(starts)
    if rows == 0:
        return
    jit = _jit.kernels()
    if jit is not None:
        jit.hash_bytes(_seeds(seed, out), data, starts, lengths, out)
        return
    blocks = np.right_shift(lengths, 2, out=_scratch.get("bytes.blocks", rows, lengths.dtype))
    leftovers = np.bitwise_and(lengths, 3, out=_scratch.get("bytes.left", rows, lengths.dtype))
    source, first, stride = _word_source(data, span[0], span[1], starts)
    tmp = _scratch.get("bytes.tmp", rows, _U32)
    max_blocks = int(blocks.max())
    max_leftover = int(leftovers.max())

    order: np.ndarray | None = None
    if max_blocks and int(blocks.min()) != max_blocks:
        order = _most_first(blocks, max_blocks)
        h = _scratch.get("bytes.h", rows, _U32)
        if isinstance(seed, np.uint32):
            h.fill(seed)
        else:
            np.take(seed, order, out=h, mode="clip")
        index = np.take(first, order, out=_scratch.get("bytes.index", rows, np.int64), mode="clip")
        live = _rows_above(blocks, max_blocks)
        if max_leftover:
            sorted_leftovers = _scratch.get("bytes.left2", rows, leftovers.dtype)
            np.take(leftovers, order, out=sorted_leftovers, mode="clip")
            leftovers = sorted_leftovers
    else:
        if isinstance(seed, np.uint32):
            out.fill(seed)
        elif seed is not out:
            np.copyto(out, seed)
        h = out
        index = first  # the kernel's own: _word_source made it
        live = [rows] * max_blocks
    k1_all = _scratch.get("bytes.k1", rows, _U32)
    for j in range(max_blocks):
        active = live[j]
        at = index[:active]
        k1 = np.take(source, at, out=k1_all[:active], mode="clip")
        np.add(at, stride, out=at)
        _mix_k1_inplace(k1, tmp[:active])
        _mix_h1_inplace(h[:active], k1, tmp[:active])

    if max_leftover:
        # index is now at each value's first leftover byte: that word holds all of them.
        tail_words = np.take(source, index, out=_scratch.get("bytes.tail", rows, _U32), mode="clip")
        min_leftover = int(leftovers.min())
        mixed = _scratch.get("bytes.mixed", rows, _U32)
        keep = _scratch.get("bytes.keep", rows, _U32)
        for t in range(max_leftover):
            # Spark's tail rule: each leftover byte, sign-extended, gets a whole mixing round.
            k1 = np.left_shift(tail_words, _U32(24 - 8 * t), out=k1_all)
            np.right_shift(k1.view(np.int32), 24, out=k1.view(np.int32))
            _mix_k1_inplace(k1, tmp)
            if t < min_leftover:
                _mix_h1_inplace(h, k1, tmp)
                continue
            # Only the rows with a byte t take the round: h ^= (mixed ^ h) & (all ones where).
            np.bitwise_xor(h, k1, out=mixed)
            _round_tail_inplace(mixed, tmp)
            np.bitwise_xor(mixed, h, out=mixed)
            np.greater(leftovers, t, out=keep, casting="unsafe")
            np.negative(keep, out=keep)
            np.bitwise_and(mixed, keep, out=mixed)
            np.bitwise_xor(h, mixed, out=h)

    if order is not None:
        out[order] = h
    length_words = k1_all
    np.copyto(length_words, lengths, casting="unsafe")
    _fmix_inplace(out, length_words, tmp)


def _rows_above(counts: np.ndarray, most: int) -> list[int]:
    """``[number of rows with counts > j for j in range(most)]``."""
    if most <= 8:
        above = _scratch.get("bytes.above", len(counts), np.bool_)
        return [int(np.count_nonzero(np.greater(counts, j, out=above))) for j in range(most)]
    totals = len(counts) - np.cumsum(np.bincount(counts, minlength=most))
    return [int(v) for v in totals[:most]]


def _word_source(
    data: np.ndarray, lo: int, hi: int, starts: np.ndarray
) -> tuple[np.ndarray, np.ndarray, int]:
    """Where to read the little-endian 4-byte word at any byte of ``data[lo:hi]``.

    Returns ``(source, first, stride)``: the word at byte ``starts[i] + 4 * j`` is
    ``source[first[i] + stride * j]``; ``first`` is scratch the caller may change. numpy
    gathers aligned words several times faster than unaligned ones, so modest data becomes an
    aligned table of four rows, one per byte phase, built with shifts from the aligned words
    of ``data`` (no ``memcpy``: on some machines it is several times slower than a ufunc for a
    few hundred KiB). Larger data (long values) is read unaligned.
    """
    rows = len(starts)
    first = _scratch.get("bytes.first", rows, np.int64)
    if hi - lo > _WORD_TABLE_BYTES or data.ctypes.data % 4:
        padded = np.zeros(hi - lo + 4, dtype=np.uint8)
        padded[: hi - lo] = data[lo:hi]
        # words[i] is the little-endian int at byte i: an unaligned, overlapping view.
        words = np.ndarray(shape=(hi - lo + 1,), dtype="<u4", buffer=padded, strides=(1,))
        np.subtract(starts, lo, out=first)
        return words, first, 4
    base = lo & ~3
    needed = (hi - base + 3) // 4  # words that cover every byte of data[lo:hi]
    whole = max(0, min(needed, (len(data) - base) // 4))  # those that data holds in full
    width = needed + 1  # and a zero word past the end
    table = _scratch.get("bytes.table", 4 * width, _U32).reshape(4, width)
    phase0 = table[0]
    np.bitwise_or(data[base : base + 4 * whole].view(_U32), _U32(0), out=phase0[:whole])
    phase0[whole:] = 0
    if whole < needed:
        phase0[whole] = int.from_bytes(data[base + 4 * whole : hi].tobytes(), "little")
    tmp = _scratch.get("bytes.table_tmp", width - 1, _U32)
    for phase in range(1, 4):
        row = table[phase]
        np.right_shift(phase0[:-1], _U32(8 * phase), out=row[:-1])
        np.left_shift(phase0[1:], _U32(32 - 8 * phase), out=tmp)
        np.bitwise_or(row[:-1], tmp, out=row[:-1])
        row[-1] = 0
    # Byte p of data is byte phase (p - base) % 4 of word (p - base) // 4.
    relative = np.subtract(starts, base, out=first)
    column = _scratch.get("bytes.column", rows, np.int64)
    np.right_shift(relative, 2, out=column)
    np.bitwise_and(relative, 3, out=first)
    np.multiply(first, width, out=first)
    np.add(first, column, out=first)
    return table.reshape(-1), first, 1


def _most_first(counts: np.ndarray, most: int) -> np.ndarray:
    """Row indices ordered by ``counts`` (at most ``most``), largest first."""
    if most < 1 << 8:
        # Arrow sorts a narrow integer range with a counting sort, several times numpy's speed.
        key = pa.array(counts.astype(np.uint8))
        order: np.ndarray = pc.array_sort_indices(key, order="descending").to_numpy()
        return order.view(np.int64)
    return np.argsort(-counts.astype(np.int64), kind="stable")


# --- reading Arrow buffers without copies ---------------------------------------------------


def _values(arr: pa.Array, dtype: type[np.generic] | str) -> np.ndarray:
    """The fixed-width values of ``arr`` (nulls hold arbitrary values) as a numpy view."""
    full = np.frombuffer(arr.buffers()[1], dtype=dtype, count=arr.offset + len(arr))
    return full[arr.offset :]


def _bits(buf: pa.Buffer, offset: int, length: int) -> np.ndarray:
    """An Arrow bitmap as a bool array of ``length`` entries, starting at bit ``offset``."""
    first, skip = divmod(offset, 8)
    raw = np.frombuffer(buf, dtype=np.uint8, count=(skip + length + 7) // 8, offset=first)
    return np.unpackbits(raw, bitorder="little", count=skip + length)[skip:].view(np.bool_)


def _byte_matrix(arr: pa.Array, width: int) -> np.ndarray:
    """The ``width``-byte little-endian values of ``arr`` as a (rows, width) uint8 matrix."""
    raw = np.frombuffer(arr.buffers()[1], dtype=np.uint8, count=(arr.offset + len(arr)) * width)
    return raw.reshape(-1, width)[arr.offset :]


def _big_integer_bytes(seed: _Seed, le: np.ndarray, out: np.ndarray) -> None:
    """``hashUnsafeBytes`` over ``BigInteger.toByteArray()`` of little-endian two's complement rows.

    ``toByteArray`` is the shortest big-endian two's complement form: leading bytes that only
    repeat the sign are dropped, keeping at least one byte.
    """
    rows, width = le.shape
    negative = le[:, -1] >= 0x80
    fill = np.where(negative, np.uint8(0xFF), np.uint8(0))
    # sign_only_from[:, i]: every byte at index >= i merely repeats the sign.
    sign_only_from = np.ones((rows, width + 1), dtype=np.bool_)
    sign_only_from[:, :width] = np.logical_and.accumulate((le == fill[:, None])[:, ::-1], axis=1)[
        :, ::-1
    ]
    # n bytes suffice when the bytes above them repeat the sign and byte n-1 carries that sign.
    top_bit_matches = (le >= 0x80) == negative[:, None]
    fits = sign_only_from[:, 1:] & top_bit_matches
    lengths = np.argmax(fits, axis=1).astype(np.int64) + 1
    # Row r's big-endian bytes, left-aligned: byte i is le[r, n_r - 1 - i] (i < n_r).
    source = np.clip(lengths[:, None] - 1 - np.arange(width)[None, :], 0, width - 1)
    big_endian = np.take_along_axis(le, source, axis=1)
    starts = np.arange(rows, dtype=np.int64) * width
    _hash_bytes(seed, big_endian.reshape(-1), (0, rows * width), starts, lengths, out)


# --- one Arrow array -----------------------------------------------------------------------

#: Hashes every row of an array as if none were null: ``kernel(seed, arr, out)``.
_Kernel = Callable[[_Seed, pa.Array, np.ndarray], None]


def _unsupported(typ: pa.DataType, label: str, why: str = "") -> InvalidOptionError:
    detail = f" ({why})" if why else ""
    return InvalidOptionError(
        f"{label} has type {typ}, which Spark's hash cannot take{detail}; "
        "expected a boolean, integer, floating point, decimal, date, timestamp, duration, "
        "string or binary column"
    )


def _hash_binary_like(
    seed: _Seed, arr: pa.Array, out: np.ndarray, max_bytes: int | None = None
) -> None:
    """Hash string and binary values; with ``max_bytes``, longer values get a wrong hash.

    The long values' rows are hashed again, whole, by :func:`_hash_long_rows`.
    """
    typ = arr.type
    rows = len(arr)
    buffers = arr.buffers()
    if pat.is_fixed_size_binary(typ):
        width = typ.byte_width
        start = arr.offset * width
        stop = start + rows * width
        starts = np.arange(start, stop, width, dtype=np.int64)
        lengths = np.full(rows, width, dtype=np.int64)
        data_buf = buffers[1]
    else:
        offset_dtype = (
            np.int64 if pat.is_large_string(typ) or pat.is_large_binary(typ) else np.int32
        )
        offsets = np.frombuffer(
            buffers[1],
            dtype=offset_dtype,
            count=rows + 1,
            offset=arr.offset * offset_dtype().itemsize,
        )
        start, stop = int(offsets[0]), int(offsets[-1])
        starts = _scratch.get("binary.starts", rows, np.int64)
        np.copyto(starts, offsets[:-1])
        lengths = np.subtract(
            offsets[1:], offsets[:-1], out=_scratch.get("binary.lengths", rows, offset_dtype)
        )
        data_buf = buffers[2]
    if max_bytes is not None and stop - start > max_bytes:
        np.minimum(lengths, max_bytes, out=lengths)
    if data_buf is None or stop <= start:
        data, start, stop = np.empty(0, dtype=np.uint8), 0, 0
        starts = np.zeros(rows, dtype=np.int64)
    else:
        data = np.frombuffer(data_buf, dtype=np.uint8)
    _hash_bytes(seed, data, (start, stop), starts, lengths, out)


def _hash_decimal(seed: _Seed, arr: pa.Array, out: np.ndarray) -> None:
    typ = arr.type
    width = typ.bit_width // 8
    if typ.precision <= _MAX_LONG_DIGITS:
        if width <= 8:
            _hash_long(seed, _values(arr, np.int32 if width == 4 else np.int64), out)
            return
        low = np.ascontiguousarray(_byte_matrix(arr, width)[:, :8]).view("<i8").reshape(-1)
        _hash_long(seed, low, out)
        return
    _big_integer_bytes(seed, _byte_matrix(arr, width), out)


def _hash_uint64_as_decimal(seed: _Seed, arr: pa.Array, out: np.ndarray) -> None:
    le = np.zeros((len(arr), 9), dtype=np.uint8)  # a zero top byte keeps the value positive
    le[:, :8] = _byte_matrix(arr, 8)
    _big_integer_bytes(seed, le, out)


def _hash_float(seed: _Seed, arr: pa.Array, out: np.ndarray) -> None:
    values = _values(arr, np.float32)
    # -0.0 + 0.0 is +0.0: Spark hashes both zeros alike. (Signaling NaNs would warn.)
    with np.errstate(invalid="ignore"):
        values = np.add(
            values, np.float32(0), out=_scratch.get("float.bits", len(values), np.float32)
        )
    nan = np.isnan(values, out=_scratch.get("float.nan", len(values), np.bool_))
    bits = values.view(_U32)
    if nan.any():
        bits[nan] = _FLOAT_NAN_BITS
    _hash_int(seed, bits, out)


def _hash_double(seed: _Seed, arr: pa.Array, out: np.ndarray) -> None:
    values = _values(arr, np.float64)
    # -0.0 + 0.0 is +0.0: Spark hashes both zeros alike. (Signaling NaNs would warn.)
    with np.errstate(invalid="ignore"):
        values = np.add(values, 0.0, out=_scratch.get("double.bits", len(values), np.float64))
    nan = np.isnan(values, out=_scratch.get("double.nan", len(values), np.bool_))
    bits = values.view(np.uint64)
    if nan.any():
        bits[nan] = _DOUBLE_NAN_BITS
    _hash_long(seed, bits, out)


def _micros(arr: pa.Array) -> np.ndarray:
    raw = _values(arr, np.int64)
    unit = arr.type.unit
    if unit == "ns":
        return raw // 1000
    return raw * _TIME_UNIT_MICROS[unit]


def _hash_bool(seed: _Seed, arr: pa.Array, out: np.ndarray) -> None:
    _hash_int(seed, _bits(arr.buffers()[1], arr.offset, len(arr)).astype(np.int32), out)


_KERNELS_BY_TYPE: dict[pa.DataType, _Kernel] = {
    pa.bool_(): _hash_bool,
    pa.float32(): _hash_float,
    pa.float64(): _hash_double,
    pa.uint64(): _hash_uint64_as_decimal,  # Spark reads Parquet's uint64 as DECIMAL(20, 0)
}


def _kernel(typ: pa.DataType, label: str) -> _Kernel:
    """The function that hashes every row of an array of ``typ`` as if none were null.

    Raises:
        InvalidOptionError: ``typ`` is not a type Spark's hash takes.
    """
    int_dtype = _INT_DTYPES.get(typ)
    if int_dtype is not None:
        return lambda seed, arr, out: _hash_int(seed, _values(arr, int_dtype), out)
    if pat.is_int64(typ):
        return lambda seed, arr, out: _hash_long(seed, _values(arr, np.int64), out)
    if pat.is_uint32(typ):  # Spark reads Parquet's uint32 as BIGINT
        return lambda seed, arr, out: _hash_long(seed, _values(arr, np.uint32), out)
    if pat.is_timestamp(typ) or pat.is_duration(typ):
        return lambda seed, arr, out: _hash_long(seed, _micros(arr), out)
    if pat.is_date64(typ):
        return lambda seed, arr, out: _hash_int(
            seed, _values(arr, np.int64) // _MILLIS_PER_DAY, out
        )
    if pat.is_decimal(typ):
        if typ.precision > _MAX_SPARK_PRECISION:
            raise _unsupported(
                typ, label, f"Spark decimals hold at most {_MAX_SPARK_PRECISION} digits"
            )
        return _hash_decimal
    if typ in _KERNELS_BY_TYPE:
        return _KERNELS_BY_TYPE[typ]
    if _is_binary_like(typ):
        return _hash_binary_like
    raise _unsupported(typ, label)


def _key_type(typ: pa.DataType) -> pa.DataType:
    """The type Spark sees for a key column of ``typ`` (see :func:`_key_values`)."""
    while True:
        if pat.is_dictionary(typ) or pat.is_run_end_encoded(typ):
            typ = typ.value_type
        elif isinstance(typ, pa.BaseExtensionType):
            typ = typ.storage_type
        else:
            return typ


def _key_values(arr: pa.Array) -> pa.Array:
    """Key values as Spark reads them: dictionaries and runs decoded, extensions as storage."""
    while True:
        typ = arr.type
        if pat.is_dictionary(typ):
            arr = decode_dictionary(arr)
        elif pat.is_run_end_encoded(typ):
            arr = decode_runs(arr)
        elif isinstance(typ, pa.BaseExtensionType):
            arr = arr.storage
        else:
            return arr


def check_key_type(typ: pa.DataType, name: str) -> None:
    """Refuse a key column ``name`` of a type Spark's hash cannot take.

    Raises:
        InvalidOptionError: naming the column and its type.
    """
    plain = _key_type(typ)
    if not pat.is_null(plain):
        _kernel(plain, f"key column {name!r}" + (f" (stored as {typ})" if plain != typ else ""))


def hash_class(typ: pa.DataType) -> str:
    """How Spark's hash sees values of a key column of ``typ``, in one word.

    Equal values of two key columns hash alike exactly when their columns have the same
    class: ``int16`` and ``int32`` (both ``hashInt``) do, ``int32`` and ``int64`` do not, nor
    do decimals of different scales or of precision up to 18 and above it.

    Raises:
        InvalidOptionError: ``typ`` is not a type Spark's hash takes.
    """
    plain = _key_type(typ)
    if pat.is_null(plain):
        return "null"
    _kernel(plain, f"a key of type {typ}")  # refuses what the hash does not take
    if pat.is_boolean(plain):
        return "boolean"
    if pat.is_date(plain):  # before the ints: date32 is hashed as one
        return "date"
    if plain in _INT_DTYPES:
        return "int"
    if pat.is_int64(plain) or pat.is_uint32(plain):
        return "long"
    if pat.is_timestamp(plain):
        return "timestamp" if plain.tz is not None else "timestamp_ntz"
    if pat.is_duration(plain):
        return "duration"
    if pat.is_decimal(plain):
        wide = plain.precision > _MAX_LONG_DIGITS
        return f"decimal({'>' if wide else '<='}{_MAX_LONG_DIGITS} digits, scale {plain.scale})"
    if pat.is_uint64(plain):  # as DECIMAL(20, 0)
        return f"decimal(>{_MAX_LONG_DIGITS} digits, scale 0)"
    if pat.is_float32(plain):
        return "float"
    if pat.is_float64(plain):
        return "double"
    if pat.is_string(plain) or pat.is_large_string(plain) or pat.is_string_view(plain):
        return "string"
    return "binary"


def _is_binary_like(typ: pa.DataType) -> bool:
    return bool(
        pat.is_string(typ)
        or pat.is_large_string(typ)
        or pat.is_string_view(typ)
        or pat.is_binary(typ)
        or pat.is_large_binary(typ)
        or pat.is_binary_view(typ)
        or pat.is_fixed_size_binary(typ)
    )


# --- planning and running the passes --------------------------------------------------------


@dataclass(frozen=True)
class _Piece:
    """A chunk of a key column that starts at row ``start``, with the kernel for its type."""

    start: int
    array: pa.Array
    kernel: _Kernel
    binary: bool

    @property
    def stop(self) -> int:
        return self.start + len(self.array)


@dataclass(frozen=True)
class _Column:
    """A key column as pieces in row order.

    Chunks of Arrow's null type have no piece; ``complete`` is false when the pieces leave
    such rows out.
    """

    pieces: list[_Piece]
    complete: bool


def _plan(columns: Sequence[pa.Array | pa.ChunkedArray]) -> list[_Column]:
    """Every key column as pieces: dictionaries decoded, view types made offset-based."""
    plan = []
    for index, col in enumerate(columns):
        pieces: list[_Piece] = []
        complete = True
        start = 0
        for chunk in col.chunks if isinstance(col, pa.ChunkedArray) else [col]:
            arr = _key_values(chunk)
            typ = arr.type
            if pat.is_null(typ):
                complete = complete and not len(arr)
                start += len(arr)
                continue  # nothing but nulls: the running hash stays
            # Checks the type even when every value is null.
            kernel = _kernel(typ, f"key column {index}")
            if pat.is_string_view(typ) or pat.is_binary_view(typ):
                arr = arr.cast(pa.large_string() if pat.is_string_view(typ) else pa.large_binary())
            if len(arr):
                pieces.append(_Piece(start, arr, kernel, _is_binary_like(typ)))
            start += len(arr)
        plan.append(_Column(pieces, complete))
    return plan


def _long_value_rows(plan: list[_Column], max_bytes: int) -> np.ndarray:
    """The rows where some string or binary key is longer than ``max_bytes`` (sorted)."""
    found: list[np.ndarray] = []
    for column in plan:
        for piece in column.pieces:
            arr = piece.array
            if not piece.binary:
                continue
            typ = arr.type
            if pat.is_fixed_size_binary(typ):
                if typ.byte_width > max_bytes:
                    found.append(np.arange(piece.start, piece.stop))
                continue
            dtype = np.int64 if pat.is_large_string(typ) or pat.is_large_binary(typ) else np.int32
            offsets = np.frombuffer(
                arr.buffers()[1],
                dtype=dtype,
                count=len(arr) + 1,
                offset=arr.offset * dtype().itemsize,
            )
            if int(offsets[-1]) - int(offsets[0]) <= max_bytes:
                continue  # not a byte too many in the whole piece
            long_rows = np.flatnonzero(np.diff(offsets) > max_bytes)
            if long_rows.size:
                found.append(long_rows + piece.start)
    if not found:
        return np.empty(0, dtype=np.int64)
    return np.unique(np.concatenate(found))


def _apply(
    piece: _Piece, arr: pa.Array, seed: _Seed, out: np.ndarray, max_bytes: int | None
) -> None:
    """Hash ``arr`` (a slice of ``piece``) into ``out``; null rows keep the running hash.

    ``seed`` is either a scalar or ``out`` itself.
    """
    nulls = arr.null_count
    if nulls == len(arr):
        if isinstance(seed, np.uint32):
            out.fill(seed)
        return
    target = out if nulls == 0 else _scratch.get("apply.target", len(out), _U32)
    if piece.binary:
        _hash_binary_like(seed, arr, target, max_bytes)
    else:
        piece.kernel(seed, arr, target)
    if nulls:
        if isinstance(seed, np.uint32):
            out.fill(seed)
        np.copyto(out, target, where=_bits(arr.buffers()[0], arr.offset, len(arr)))


#: Called with the hashes of a step and where they belong: ``finish(hashes, rows)``.
_Finish = Callable[[np.ndarray, slice | np.ndarray], None]


def _hash_rows(
    plan: list[_Column],
    seed: np.uint32,
    out: np.ndarray,
    lo: int,
    hi: int,
    step: int,
    max_bytes: int | None,
    finish: _Finish | None,
) -> None:
    """Hash rows ``lo:hi`` into ``out[lo:hi]``, ``step`` rows at a time through every column."""
    starts = [[piece.start for piece in column.pieces] for column in plan]
    for s0 in range(lo, hi, step):
        s1 = min(s0 + step, hi)
        seeded = False
        for column, column_starts in zip(plan, starts, strict=True):
            if not seeded and not column.complete:
                out[s0:s1] = seed  # rows without a piece keep the seed
                seeded = True
            first = max(0, bisect.bisect_right(column_starts, s0) - 1)
            for piece in column.pieces[first:]:
                if piece.start >= s1:
                    break
                a, b = max(piece.start, s0), min(piece.stop, s1)
                if a >= b:
                    continue
                arr = piece.array
                if b - a != len(arr):
                    arr = arr.slice(a - piece.start, b - a)
                target = out[a:b]
                _apply(piece, arr, target if seeded else seed, target, max_bytes)
            seeded = True
        if not seeded:
            out[s0:s1] = seed
        if finish is not None:
            finish(out[s0:s1], slice(s0, s1))


def _run(
    plan: list[_Column],
    seed: np.uint32,
    out: np.ndarray,
    step: int,
    max_bytes: int | None,
    finish: _Finish | None,
) -> None:
    per_thread = _MIN_ROWS_PER_THREAD
    if _jit.kernels() is not None and not any(p.binary for c in plan for p in c.pieces):
        # Compiled fixed-width keys take about a nanosecond a row: a thread hand-off costs
        # more than hashing a batch of a few ten thousand rows.
        per_thread *= 8
    ranges = row_ranges(len(out), per_thread)
    parallel_map(lambda r: _hash_rows(plan, seed, out, r[0], r[1], step, max_bytes, finish), ranges)


def _take_rows(plan: list[_Column], rows: np.ndarray) -> list[_Column]:
    """The plan restricted to ``rows`` (sorted row numbers), renumbered from 0."""
    taken = []
    for column in plan:
        pieces: list[_Piece] = []
        for piece in column.pieces:
            lo, hi = np.searchsorted(rows, [piece.start, piece.stop])
            if hi > lo:
                local = pa.array(rows[lo:hi] - piece.start)
                pieces.append(_Piece(int(lo), piece.array.take(local), piece.kernel, piece.binary))
        taken.append(_Column(pieces, column.complete))
    return taken


def _hash(
    columns: Sequence[pa.Array | pa.ChunkedArray], seed: int, finish: _Finish | None
) -> np.ndarray:
    """Spark's hash of every row as uint32, passing each step's hashes to ``finish``."""
    rows = len(columns[0])
    seed_bits = _U32(int(seed) & 0xFFFFFFFF)
    plan = _plan(columns)
    out = np.empty(rows, dtype=_U32)
    max_bytes = _LONG_VALUE_BYTES
    long_rows = _long_value_rows(plan, max_bytes)
    if long_rows.size == rows:
        # Nothing but long values: one pass over whole values, a step per thread.
        _run(plan, seed_bits, out, max(rows, 1), None, finish)
        return out
    # Compiled kernels keep rows in registers: they need no cache-sized steps.
    step = _ROWS_PER_STEP if _jit.kernels() is None else max(_ROWS_PER_STEP, 1 << 18)
    _run(plan, seed_bits, out, step, max_bytes if long_rows.size else None, finish)
    if long_rows.size:
        # The rows with a long value are hashed again, together, so that the block positions
        # of the longest value are walked once, not once per step.
        hashed = np.empty(len(long_rows), dtype=_U32)
        _run(_take_rows(plan, long_rows), seed_bits, hashed, len(long_rows), None, None)
        out[long_rows] = hashed
        if finish is not None:
            finish(hashed, long_rows)
    return out


# --- public API -----------------------------------------------------------------------------


def _check_columns(columns: Sequence[pa.Array | pa.ChunkedArray], seed: int) -> list[Any]:
    cols = list(columns)
    if not cols:
        raise InvalidOptionError("spark_hash needs at least one key column, got none")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise InvalidOptionError(f"seed must be an int, got {type(seed).__name__}")
    if not _INT32_MIN <= int(seed) <= _INT32_MAX:
        raise InvalidOptionError(f"seed must be a 32-bit signed int, got {seed}")
    for i, col in enumerate(cols):
        if not isinstance(col, (pa.Array, pa.ChunkedArray)):
            raise InvalidOptionError(
                f"key column {i} must be a pyarrow Array or ChunkedArray, got {type(col).__name__}"
            )
    rows = len(cols[0])
    for i, col in enumerate(cols):
        if len(col) != rows:
            raise InvalidOptionError(
                f"key columns must have the same length: column 0 has {rows} rows, "
                f"column {i} has {len(col)}"
            )
    return cols


def spark_hash(columns: Sequence[pa.Array | pa.ChunkedArray], seed: int = 42) -> np.ndarray:
    """Spark's ``Murmur3Hash(columns)`` per row as int32 (same as SQL ``hash(c1, c2, ...)``).

    Large inputs are hashed on every core (see :mod:`arrowshuffle.format.parallel`).

    Args:
        columns: the key columns, all of the same length. Arrays and chunked arrays may be
            mixed and chunked differently.
        seed: the seed of the first column; Spark's ``hash`` and ``repartition`` use 42.

    Returns:
        An int32 array with one hash per row.

    Raises:
        InvalidOptionError: no columns, columns of different lengths, a seed outside Java's
            int range, or a column type Spark's hash cannot take (see the module docstring).
    """
    cols = _check_columns(columns, seed)
    return _hash(cols, seed, None).view(np.int32)


def spark_partition_ids(
    columns: Sequence[pa.Array | pa.ChunkedArray], num_partitions: int
) -> np.ndarray:
    """``pmod(spark_hash(columns), num_partitions)`` as int64.

    This is the partition that ``df.repartition(num_partitions, *cols)`` gives each row.

    Args:
        columns: the key columns, as for :func:`spark_hash`.
        num_partitions: how many partitions, at least 1 and at most Java's largest int.

    Returns:
        An int64 array of partition ids in ``[0, num_partitions)``.

    Raises:
        InvalidOptionError: a bad ``num_partitions``, or any error of :func:`spark_hash`.
    """
    if isinstance(num_partitions, bool) or not isinstance(num_partitions, (int, np.integer)):
        raise InvalidOptionError(
            f"num_partitions must be an int, got {type(num_partitions).__name__}"
        )
    if not 1 <= int(num_partitions) <= _INT32_MAX:
        raise InvalidOptionError(
            f"num_partitions must be between 1 and {_INT32_MAX}, got {num_partitions}"
        )
    cols = _check_columns(columns, 42)
    ids = np.empty(len(cols[0]), dtype=np.int64)
    n = int(num_partitions)

    def finish(hashes: np.ndarray, rows: slice | np.ndarray) -> None:
        if isinstance(rows, slice):
            _pmod(hashes.view(np.int32), n, ids[rows])
        else:
            ids[rows] = _pmod(hashes.view(np.int32), n, np.empty(len(hashes), dtype=np.int64))

    # Each step's ids are taken while its hashes are still in the CPU cache.
    _hash(cols, 42, finish)
    return ids


def _pmod(hashes: np.ndarray, n: int, out: np.ndarray) -> np.ndarray:
    """Spark's ``pmod(h, n)`` for int32 ``hashes`` and ``0 < n < 2**31``, written to ``out``."""
    if n & (n - 1) == 0:
        # In two's complement, the low bits of h are h mod 2**k, also for negative h.
        np.bitwise_and(hashes, np.int32(n - 1), out=out)
        return out
    divisor = np.int32(n)
    # h - floor(h / n) * n is Spark's pmod for n > 0. numpy divides by a scalar several times
    # faster than it takes a remainder; int32 wrap-around in the product cancels in the
    # difference, whose true value lies in [0, n).
    quotient = np.floor_divide(hashes, divisor, out=_scratch.get("pmod", len(hashes), np.int32))
    np.multiply(quotient, divisor, out=quotient)
    np.subtract(hashes, quotient, out=out)
    return out


def flink_murmur_hash(codes: np.ndarray) -> np.ndarray:
    """Flink's ``MathUtils.murmurHash(int)`` per element (non-negative int32 result).

    The Murmur3 x86_32 hash of one int with seed 0, folded to a non-negative int: a negative
    result is negated, and ``Integer.MIN_VALUE`` becomes 0. Flink's key groups use it.

    Args:
        codes: integer hash codes, each within Java's int range.

    Returns:
        An int32 array of the same shape with values in ``[0, 2**31 - 1]``.

    Raises:
        InvalidOptionError: ``codes`` is not of an integer dtype or holds values outside the
            int32 range.
    """
    values = np.asarray(codes)
    if not np.issubdtype(values.dtype, np.integer):
        raise InvalidOptionError(f"codes must be integers, got dtype {values.dtype}")
    if values.dtype != np.int32 and values.size:
        low, high = int(values.min()), int(values.max())
        if low < _INT32_MIN or high > _INT32_MAX:
            raise InvalidOptionError(
                f"codes must fit Java's int range [{_INT32_MIN}, {_INT32_MAX}], "
                f"got values from {low} to {high}"
            )
    h = values.astype(np.int32).view(_U32)
    tmp = np.empty_like(h)
    _mix_k1_inplace(h, tmp)
    # With seed 0 the first mixH1 starts from h = 0 ^ k1 = k1.
    _round_tail_inplace(h, tmp)
    _fmix_inplace(h, _U32(4), tmp)
    signed = h.view(np.int32)
    # abs() wraps Integer.MIN_VALUE to itself, the one negative result left; Flink maps it to 0.
    return np.maximum(np.abs(signed), np.int32(0))
