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
* Dictionary arrays hash as their decoded values; a column of Arrow's ``null`` type is all nulls.
* Spark has no unsigned integers. The unsigned types hash as Spark sees them when it reads the
  same data from Parquet (the one place it maps them): ``uint8`` as ``SMALLINT``, ``uint16`` as
  ``INT``, ``uint32`` as ``BIGINT`` and ``uint64`` as ``DECIMAL(20, 0)``. (PySpark refuses to
  take unsigned Arrow columns in ``createDataFrame``.)

Every other type (lists, structs, maps, time of day, intervals, ``float16``, decimals above
precision 38) raises :class:`~arrowshuffle.format.errors.InvalidOptionError`.

Arithmetic is done on ``uint32`` arrays, whose products and sums wrap modulo 2**32 exactly as
Java's ``int`` does.

Bytes are hashed one block position at a time across many rows: the rows are ordered by their
number of 4-byte blocks, most first, so that the rows that have a block ``j`` are a prefix of
that order. Each block position is a dozen numpy calls over the rows that have it, so a pass
costs its total blocks plus about ten microseconds per block of its longest value. Values
longer than 256 bytes are hashed in passes of their own, so that a few long keys among many
short ones cost little; a key of megabytes still takes seconds.

:func:`flink_murmur_hash` is Flink's ``MathUtils.murmurHash(int)``, which
``KeyGroupRangeAssignment`` applies to a key's hash code to pick its key group.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.types as pat

from arrowshuffle.format.errors import InvalidOptionError

__all__ = ["flink_murmur_hash", "spark_hash", "spark_partition_ids"]

_U32 = np.uint32
_C1 = _U32(0xCC9E2D51)
_C2 = _U32(0x1B873593)
_H_ADD = _U32(0xE6546B64)
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
#: Rows hashed per numpy pass: small enough that a pass's arrays stay in the CPU cache.
_ROWS_PER_STEP = 1 << 16
#: Values longer than this are hashed apart from the rest (see :func:`_hash_bytes`).
_LONG_VALUE_BYTES = 256

_INT_DTYPES: dict[pa.DataType, type[np.integer]] = {
    pa.int8(): np.int8,
    pa.int16(): np.int16,
    pa.int32(): np.int32,
    pa.date32(): np.int32,
    # Spark reads Parquet's uint8 as SMALLINT and uint16 as INT: the value itself, hashed as int.
    pa.uint8(): np.uint8,
    pa.uint16(): np.uint16,
}

# --- Murmur3 x86_32 building blocks, in place on uint32 arrays this module owns -------------


def _rotl_inplace(x: np.ndarray, r: int) -> np.ndarray:
    high = x >> (32 - r)
    x <<= r
    x |= high
    return x


def _mix_k1_inplace(k: np.ndarray) -> np.ndarray:
    k *= _C1
    _rotl_inplace(k, 15)
    k *= _C2
    return k


def _mix_h1_inplace(h: np.ndarray, k1: np.ndarray) -> np.ndarray:
    """``h`` becomes mixH1(h, k1); ``h`` is modified and returned."""
    h ^= k1
    _rotl_inplace(h, 13)
    h *= _U32(5)
    h += _H_ADD
    return h


def _fmix_inplace(h: np.ndarray, length: np.ndarray | np.uint32) -> np.ndarray:
    h ^= length
    h ^= h >> 16
    h *= _FMIX1
    h ^= h >> 13
    h *= _FMIX2
    h ^= h >> 16
    return h


def _hash_int(seed: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Murmur3 ``hashInt`` of int32-valued ``values`` (any integer dtype) row by row."""
    h = _mix_k1_inplace(values.astype(np.int32, copy=True).view(_U32))
    # h ^= seed is symmetric, so the mixed block can carry the running hash from here on.
    _mix_h1_inplace(h, seed)
    return _fmix_inplace(h, _U32(4))


def _hash_long(seed: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Murmur3 ``hashLong`` of int64-valued ``values``: low word first, then high word."""
    if values.dtype != np.uint64:
        values = values.astype(np.int64, copy=False)
    longs = values.view(np.uint64)
    h = _mix_k1_inplace(longs.astype(_U32))
    _mix_h1_inplace(h, seed)
    high = _mix_k1_inplace((longs >> np.uint64(32)).astype(_U32))
    _mix_h1_inplace(h, high)
    return _fmix_inplace(h, _U32(8))


def _hash_bytes(
    seed: np.ndarray, data: np.ndarray, starts: np.ndarray, lengths: np.ndarray
) -> np.ndarray:
    """Spark's ``hashUnsafeBytes`` of ``data[starts[i]:starts[i] + lengths[i]]`` for every row.

    Short values are hashed a fixed number of rows per pass, so that what a pass touches stays
    in the CPU cache. Long values are hashed together in one pass of their own, so that the
    block positions of the longest value are walked once, not once per pass of short values.

    Args:
        seed: the running hash per row (uint32).
        data: the byte buffer the values live in (uint8).
        starts: where each value begins in ``data`` (int64).
        lengths: each value's length in bytes (int64).
    """
    is_long = lengths > _LONG_VALUE_BYTES
    if not is_long.any():
        return _hash_short_values(seed, data, starts, lengths)
    long_rows = np.flatnonzero(is_long)
    short_rows = np.flatnonzero(~is_long)
    out = np.empty(len(starts), dtype=_U32)
    out[short_rows] = _hash_short_values(
        seed[short_rows], data, starts[short_rows], lengths[short_rows]
    )
    out[long_rows] = _hash_bytes_block_major(
        seed[long_rows], data, starts[long_rows], lengths[long_rows]
    )
    return out


def _hash_short_values(
    seed: np.ndarray, data: np.ndarray, starts: np.ndarray, lengths: np.ndarray
) -> np.ndarray:
    out = np.empty(len(starts), dtype=_U32)
    for lo in range(0, len(starts), _ROWS_PER_STEP):
        hi = lo + _ROWS_PER_STEP
        out[lo:hi] = _hash_bytes_block_major(seed[lo:hi], data, starts[lo:hi], lengths[lo:hi])
    return out


def _hash_bytes_block_major(
    seed: np.ndarray, data: np.ndarray, starts: np.ndarray, lengths: np.ndarray
) -> np.ndarray:
    """``hashUnsafeBytes`` for every row, one block position at a time across all rows."""
    rows = len(starts)
    if rows == 0:
        return seed.copy()
    blocks = lengths >> 2
    max_blocks = int(blocks.max())
    h: np.ndarray
    if max_blocks and int(blocks.min()) != max_blocks:
        # Most blocks first, so that the rows that have a block j are the first active[j] rows.
        key = max_blocks - blocks
        if max_blocks < 1 << 16:
            key = key.astype(np.uint16)  # numpy sorts 16-bit keys stably with a radix sort
        order = np.argsort(key, kind="stable")
        active = rows - np.cumsum(np.bincount(blocks, minlength=max_blocks))
        h = seed[order]
        position = starts[order]
        lengths = lengths[order]
    else:
        order = None
        active = np.full(max_blocks, rows)
        h = seed.copy()
        position = starts.copy()

    if max_blocks:
        # words[i] is the little-endian int at byte i: an unaligned, overlapping view of data.
        words = np.ndarray(shape=(len(data) - 3,), dtype="<u4", buffer=data, strides=(1,))
        for j in range(max_blocks):
            live = int(active[j])
            k1 = words[position[:live]].astype(_U32, copy=False)
            _mix_h1_inplace(h[:live], _mix_k1_inplace(k1))
            position[:live] += 4

    # position now points at each value's 0-3 leftover bytes.
    tails = lengths & 3
    signed_bytes = data.view(np.int8)
    for t in range(3):
        rows_with_byte = np.flatnonzero(tails > t)
        if rows_with_byte.size == 0:
            break
        # Spark's tail rule: each leftover byte, sign-extended, gets a whole mixing round.
        tail_byte = signed_bytes[position[rows_with_byte] + t].astype(np.int32).view(_U32)
        h[rows_with_byte] = _mix_h1_inplace(h[rows_with_byte], _mix_k1_inplace(tail_byte))

    _fmix_inplace(h, lengths.astype(_U32))
    if order is None:
        return h
    out = np.empty_like(h)
    out[order] = h
    return out


# --- reading Arrow buffers without copies ---------------------------------------------------


def _values(arr: pa.Array, dtype: type[np.generic] | str) -> np.ndarray:
    """The fixed-width values of ``arr`` (nulls hold arbitrary values) as a numpy view."""
    full = np.frombuffer(arr.buffers()[1], dtype=dtype, count=arr.offset + len(arr))
    return full[arr.offset :]


def _bits(buf: pa.Buffer, offset: int, length: int) -> np.ndarray:
    """An Arrow bitmap as a bool array of ``length`` entries, starting at bit ``offset``."""
    raw = np.frombuffer(buf, dtype=np.uint8, count=(offset + length + 7) // 8)
    return np.unpackbits(raw, bitorder="little", count=offset + length)[offset:].view(np.bool_)


def _byte_matrix(arr: pa.Array, width: int) -> np.ndarray:
    """The ``width``-byte little-endian values of ``arr`` as a (rows, width) uint8 matrix."""
    raw = np.frombuffer(arr.buffers()[1], dtype=np.uint8, count=(arr.offset + len(arr)) * width)
    return raw.reshape(-1, width)[arr.offset :]


def _big_integer_bytes(seed: np.ndarray, le: np.ndarray) -> np.ndarray:
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
    big_endian = np.ascontiguousarray(np.take_along_axis(le, source, axis=1))
    starts = np.arange(rows, dtype=np.int64) * width
    return _hash_bytes(seed, big_endian.reshape(-1), starts, lengths)


# --- one Arrow array -----------------------------------------------------------------------


def _unsupported(typ: pa.DataType, index: int, why: str = "") -> InvalidOptionError:
    detail = f" ({why})" if why else ""
    return InvalidOptionError(
        f"key column {index} has type {typ}, which Spark's hash cannot take{detail}; "
        "expected a boolean, integer, floating point, decimal, date, timestamp, duration, "
        "string or binary column"
    )


def _hash_binary_like(seed: np.ndarray, arr: pa.Array) -> np.ndarray:
    typ = arr.type
    if pat.is_string_view(typ) or pat.is_binary_view(typ):
        target = pa.large_string() if pat.is_string_view(typ) else pa.large_binary()
        arr = arr.cast(target)
        typ = target
    buffers = arr.buffers()
    if pat.is_fixed_size_binary(typ):
        width = typ.byte_width
        starts = (np.arange(len(arr), dtype=np.int64) + arr.offset) * width
        lengths = np.full(len(arr), width, dtype=np.int64)
        data_buf = buffers[1]
    else:
        offset_dtype = (
            np.int64 if (pat.is_large_string(typ) or pat.is_large_binary(typ)) else np.int32
        )
        offsets = np.frombuffer(buffers[1], dtype=offset_dtype, count=arr.offset + len(arr) + 1)
        offsets = offsets[arr.offset :].astype(np.int64, copy=False)
        starts = offsets[:-1]
        lengths = np.diff(offsets)
        data_buf = buffers[2]
    data = (
        np.frombuffer(data_buf, dtype=np.uint8) if data_buf is not None else np.empty(0, np.uint8)
    )
    return _hash_bytes(seed, data, starts, lengths)


def _hash_decimal(seed: np.ndarray, arr: pa.Array) -> np.ndarray:
    typ = arr.type
    width = typ.bit_width // 8
    if typ.precision <= _MAX_LONG_DIGITS:
        if width <= 8:
            return _hash_long(seed, _values(arr, np.int32 if width == 4 else np.int64))
        low = np.ascontiguousarray(_byte_matrix(arr, width)[:, :8]).view("<i8").reshape(-1)
        return _hash_long(seed, low)
    return _big_integer_bytes(seed, _byte_matrix(arr, width))


def _hash_uint64_as_decimal(seed: np.ndarray, arr: pa.Array) -> np.ndarray:
    le = np.zeros((len(arr), 9), dtype=np.uint8)  # a zero top byte keeps the value positive
    le[:, :8] = _byte_matrix(arr, 8)
    return _big_integer_bytes(seed, le)


def _hash_float(seed: np.ndarray, arr: pa.Array) -> np.ndarray:
    values = _values(arr, np.float32)
    bits = values.view(_U32)
    bits = np.where(values == 0, _U32(0), bits)
    bits = np.where(np.isnan(values), _FLOAT_NAN_BITS, bits)
    return _hash_int(seed, bits)


def _hash_double(seed: np.ndarray, arr: pa.Array) -> np.ndarray:
    values = _values(arr, np.float64)
    bits = values.view(np.uint64)
    bits = np.where(values == 0, np.uint64(0), bits)
    bits = np.where(np.isnan(values), _DOUBLE_NAN_BITS, bits)
    return _hash_long(seed, bits)


def _micros(arr: pa.Array) -> np.ndarray:
    raw = _values(arr, np.int64)
    unit = arr.type.unit
    if unit == "ns":
        return raw // 1000
    return raw * _TIME_UNIT_MICROS[unit]


_Kernel = Callable[[np.ndarray, pa.Array], np.ndarray]


def _hash_bool(seed: np.ndarray, arr: pa.Array) -> np.ndarray:
    return _hash_int(seed, _bits(arr.buffers()[1], arr.offset, len(arr)).astype(np.int32))


_KERNELS_BY_TYPE: dict[pa.DataType, _Kernel] = {
    pa.bool_(): _hash_bool,
    pa.float32(): _hash_float,
    pa.float64(): _hash_double,
    pa.uint64(): _hash_uint64_as_decimal,  # Spark reads Parquet's uint64 as DECIMAL(20, 0)
}


def _kernel(typ: pa.DataType, index: int) -> _Kernel:
    """The function that hashes every row of an array of ``typ`` as if none were null.

    Raises:
        InvalidOptionError: ``typ`` is not a type Spark's hash takes.
    """
    int_dtype = _INT_DTYPES.get(typ)
    if int_dtype is not None:
        return lambda seed, arr: _hash_int(seed, _values(arr, int_dtype))
    if pat.is_int64(typ):
        return lambda seed, arr: _hash_long(seed, _values(arr, np.int64))
    if pat.is_uint32(typ):  # Spark reads Parquet's uint32 as BIGINT
        return lambda seed, arr: _hash_long(seed, _values(arr, np.uint32))
    if pat.is_timestamp(typ) or pat.is_duration(typ):
        return lambda seed, arr: _hash_long(seed, _micros(arr))
    if pat.is_date64(typ):
        return lambda seed, arr: _hash_int(seed, _values(arr, np.int64) // _MILLIS_PER_DAY)
    if pat.is_decimal(typ):
        if typ.precision > _MAX_SPARK_PRECISION:
            raise _unsupported(
                typ, index, f"Spark decimals hold at most {_MAX_SPARK_PRECISION} digits"
            )
        return _hash_decimal
    if typ in _KERNELS_BY_TYPE:
        return _KERNELS_BY_TYPE[typ]
    if _is_binary_like(typ):
        return _hash_binary_like
    raise _unsupported(typ, index)


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


def _hash_array(seed: np.ndarray, arr: pa.Array, index: int) -> np.ndarray:
    """The running hash after ``arr``: Spark's hash of each value seeded by ``seed``."""
    if pat.is_dictionary(arr.type):
        arr = arr.dictionary_decode()
    if pat.is_null(arr.type):
        return seed  # nothing but nulls: the running hash stays
    kernel = _kernel(arr.type, index)  # checks the type even when every value is null
    if arr.null_count == len(arr):
        return seed
    if _is_binary_like(arr.type):
        # Bytes are hashed whole: _hash_bytes steps through the rows itself.
        hashed = kernel(seed, arr)
    else:
        hashed = np.empty(len(arr), dtype=_U32)
        for lo in range(0, len(arr), _ROWS_PER_STEP):
            hi = lo + _ROWS_PER_STEP
            hashed[lo:hi] = kernel(seed[lo:hi], arr.slice(lo, _ROWS_PER_STEP))
    if arr.null_count:
        valid = _bits(arr.buffers()[0], arr.offset, len(arr))
        hashed = np.where(valid, hashed, seed)
    return hashed


# --- public API -----------------------------------------------------------------------------


def spark_hash(columns: Sequence[pa.Array | pa.ChunkedArray], seed: int = 42) -> np.ndarray:
    """Spark's ``Murmur3Hash(columns)`` per row as int32 (same as SQL ``hash(c1, c2, ...)``).

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
    h = np.full(rows, int(seed) & 0xFFFFFFFF, dtype=_U32)
    for i, col in enumerate(cols):
        chunks = col.chunks if isinstance(col, pa.ChunkedArray) else [col]
        start = 0
        for chunk in chunks:
            stop = start + len(chunk)
            h[start:stop] = _hash_array(h[start:stop], chunk, i)
            start = stop
    return h.view(np.int32)


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
    hashes = spark_hash(columns)
    divisor = np.int32(num_partitions)
    # h - floor(h / n) * n is Spark's pmod for n > 0. numpy divides by a scalar several times
    # faster than it takes a remainder; int32 wrap-around in the product cancels in the
    # difference, whose true value lies in [0, n).
    remainders: np.ndarray = hashes - (hashes // divisor) * divisor
    return remainders.astype(np.int64)


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
    h = _mix_k1_inplace(values.astype(np.int32).view(_U32).copy())
    # With seed 0 the first mixH1 starts from h = 0 ^ k1 = k1.
    _rotl_inplace(h, 13)
    h *= _U32(5)
    h += _H_ADD
    signed = _fmix_inplace(h, _U32(4)).view(np.int32)
    # abs() wraps Integer.MIN_VALUE to itself, the one negative result left; Flink maps it to 0.
    return np.maximum(np.abs(signed), np.int32(0))
