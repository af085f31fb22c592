"""The fast kernels against plain per-value references written here.

Spark's Murmur3 is reimplemented below one value at a time, with Python ints, straight from
the algorithm (``hashInt``, ``hashLong``, ``hashUnsafeBytes`` with Spark's tail rule, columns
chained through the seed, nulls skipped): the oracle of the PySpark oracle. The vectorized
hash must agree with it bit for bit on random data, whatever the row steps, thread count and
long-value cut; the sort buffer must group rows exactly as a stable sort by subpartition.
"""

from __future__ import annotations

import contextlib
import itertools
import struct
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import arrowshuffle.format.partitioners.spark_hash as kernel
from arrowshuffle.format import parallel as _threads
from arrowshuffle.format.partitioners import _jit
from arrowshuffle.format.partitioners.spark_hash import spark_hash, spark_partition_ids
from arrowshuffle.writers.sort_buffer import SortBuffer

MASK = 0xFFFFFFFF
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1

# --- the reference: one value at a time ------------------------------------------------------


def rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & MASK


def mix_k1(k: int) -> int:
    k = (k * 0xCC9E2D51) & MASK
    k = rotl(k, 15)
    return (k * 0x1B873593) & MASK


def mix_h1(h: int, k: int) -> int:
    h ^= k
    h = rotl(h, 13)
    return (h * 5 + 0xE6546B64) & MASK


def fmix(h: int, length: int) -> int:
    h ^= length
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & MASK
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & MASK
    return h ^ (h >> 16)


def ref_int(value: int, seed: int) -> int:
    return fmix(mix_h1(seed, mix_k1(value & MASK)), 4)


def ref_long(value: int, seed: int) -> int:
    bits = value & 0xFFFFFFFFFFFFFFFF
    h = mix_h1(seed, mix_k1(bits & MASK))
    h = mix_h1(h, mix_k1(bits >> 32))
    return fmix(h, 8)


def ref_bytes(data: bytes, seed: int) -> int:
    h = seed
    whole = len(data) - len(data) % 4
    for i in range(0, whole, 4):
        h = mix_h1(h, mix_k1(int.from_bytes(data[i : i + 4], "little")))
    for byte in data[whole:]:
        signed = byte - 256 if byte >= 128 else byte  # Spark sign-extends each leftover byte
        h = mix_h1(h, mix_k1(signed & MASK))
    return fmix(h, len(data))


def ref_double(value: float, seed: int) -> int:
    if value != value:
        bits = 0x7FF8000000000000
    elif value == 0.0:
        bits = 0
    else:
        bits = struct.unpack("<q", struct.pack("<d", value))[0]
    return ref_long(bits, seed)


def ref_value(typ: pa.DataType, value: Any, seed: int) -> int:
    if pa.types.is_boolean(typ):
        return ref_int(int(value), seed)
    if pa.types.is_int32(typ) or pa.types.is_int8(typ):
        return ref_int(value, seed)
    if pa.types.is_int64(typ):
        return ref_long(value, seed)
    if pa.types.is_float64(typ):
        return ref_double(value, seed)
    if isinstance(value, str):
        return ref_bytes(value.encode(), seed)
    return ref_bytes(value, seed)


def ref_hash(columns: Sequence[tuple[pa.DataType, Sequence[Any]]], seed: int = 42) -> list[int]:
    """Spark's ``hash(c1, c2, ...)`` per row as signed int32: each value hashed alone."""
    rows = len(columns[0][1])
    out = []
    for r in range(rows):
        h = seed & MASK
        for typ, values in columns:
            if values[r] is not None:
                h = ref_value(typ, values[r], h)
        out.append(h - (1 << 32) if h >= 1 << 31 else h)
    return out


# --- layouts and settings the fast path must not care about ----------------------------------


#: The numpy kernels, and the compiled ones when numba is installed.
JIT = ["0", *(["1"] if _jit.available() else [])]


@contextlib.contextmanager
def kernel_settings(
    step: int,
    per_thread: int,
    long_bytes: int,
    threads: int,
    table_bytes: int = 8 << 20,
    *,
    jit: str = "0",
) -> Iterator[None]:
    """Hash in ``step``-row steps, ``per_thread`` rows a thread, on ``threads`` threads.

    Values above ``long_bytes`` take the long-value pass; data above ``table_bytes`` is read
    unaligned instead of through the aligned word table; ``jit`` picks the compiled kernels.
    """
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(_jit.JIT_ENV, jit)
        patch.setenv(_threads.NUM_THREADS_ENV, str(threads))
        patch.setattr(kernel, "_ROWS_PER_STEP", step)
        patch.setattr(kernel, "_MIN_ROWS_PER_THREAD", per_thread)
        patch.setattr(kernel, "_LONG_VALUE_BYTES", long_bytes)
        patch.setattr(kernel, "_WORD_TABLE_BYTES", table_bytes)
        yield


def layouts(
    values: list[Any], typ: pa.DataType, lead: int, cuts: list[int]
) -> Iterator[pa.Array | pa.ChunkedArray]:
    """The same values as a fresh array, a slice at a non-zero offset and a chunked array."""
    fresh = pa.array(values, typ)
    yield fresh
    filler = [values[0] if values and values[0] is not None else None] * lead
    yield pa.array(filler + values + filler, typ).slice(lead, len(values))
    bounds = sorted({0, len(values), *[min(c, len(values)) for c in cuts]})
    pieces = [fresh.slice(a, b - a) for a, b in itertools.pairwise(bounds)]
    yield pa.chunked_array(pieces, typ)


SETTINGS = st.sampled_from(
    [
        (kernel._ROWS_PER_STEP, kernel._MIN_ROWS_PER_THREAD, kernel._LONG_VALUE_BYTES, 1),
        (5, 3, 256, 3),  # tiny steps on three threads
        (7, 4, 9, 2),  # values above 9 bytes take the long-value pass
        (64, 1, 0, 4),  # every non-empty value is long
        (16, 8, 256, 2, 0),  # bytes read unaligned, not through the word table
    ]
)

int64s = st.one_of(
    st.sampled_from([INT64_MIN, INT64_MIN + 1, -1, 0, 1, INT64_MAX - 1, INT64_MAX]),
    st.integers(INT64_MIN, INT64_MAX),
)
int32s = st.one_of(
    st.sampled_from([INT32_MIN, -1, 0, 1, INT32_MAX]), st.integers(INT32_MIN, INT32_MAX)
)
blobs = st.binary(max_size=40)
texts = st.text(alphabet=st.sampled_from("aZ9~ é中😀\x00\x7f"), max_size=14)
doubles = st.one_of(
    st.sampled_from([0.0, -0.0, float("nan"), float("inf"), -float("inf"), 5e-324]),
    st.floats(allow_nan=True, allow_infinity=True),
)

COLUMN_KINDS: dict[str, tuple[pa.DataType, st.SearchStrategy[Any]]] = {
    "int64": (pa.int64(), int64s),
    "int32": (pa.int32(), int32s),
    "binary": (pa.binary(), blobs),
    "string": (pa.string(), texts),
    "large_binary": (pa.large_binary(), blobs),
    "float64": (pa.float64(), doubles),
    "bool": (pa.bool_(), st.booleans()),
    "int8": (pa.int8(), st.integers(-128, 127)),
    "fixed_size_binary": (pa.binary(5), st.binary(min_size=5, max_size=5)),
    "string_view": (pa.string_view(), texts),
}


@st.composite
def key_columns(draw: st.DrawFn) -> list[tuple[pa.DataType, list[Any]]]:
    rows = draw(st.integers(0, 60))
    kinds = draw(st.lists(st.sampled_from(sorted(COLUMN_KINDS)), min_size=1, max_size=3))
    columns = []
    for kind in kinds:
        typ, values = COLUMN_KINDS[kind]
        nullable = st.one_of(st.none(), values) if draw(st.booleans()) else values
        columns.append((typ, draw(st.lists(nullable, min_size=rows, max_size=rows))))
    return columns


# --- properties ------------------------------------------------------------------------------


@pytest.mark.parametrize("jit", JIT)
@settings(max_examples=150, deadline=None)
@given(
    columns=key_columns(),
    seed=st.one_of(st.just(42), st.integers(INT32_MIN, INT32_MAX)),
    lead=st.integers(0, 9),
    cuts=st.lists(st.integers(0, 60), max_size=4),
    config=SETTINGS,
)
def test_hash_matches_the_per_value_reference(
    columns: list[tuple[pa.DataType, list[Any]]],
    seed: int,
    lead: int,
    cuts: list[int],
    config: tuple[int, ...],
    jit: str,
) -> None:
    expected = ref_hash(columns, seed)
    candidates = [list(layouts(values, typ, lead, cuts)) for typ, values in columns]
    with kernel_settings(*config, jit=jit):
        for layout in range(3):
            arrays = [c[(layout + i) % 3] for i, c in enumerate(candidates)]
            assert spark_hash(arrays, seed).tolist() == expected


@pytest.mark.parametrize("jit", JIT)
@settings(max_examples=60, deadline=None)
@given(columns=key_columns(), n=st.integers(1, 2**31 - 1), config=SETTINGS)
def test_partition_ids_are_pmod_of_the_reference(
    columns: list[tuple[pa.DataType, list[Any]]], n: int, config: tuple[int, ...], jit: str
) -> None:
    arrays = [pa.array(values, typ) for typ, values in columns]
    expected = [h % n for h in ref_hash(columns)]  # Python's % of a positive n is Spark's pmod
    with kernel_settings(*config, jit=jit):
        assert spark_partition_ids(arrays, n).tolist() == expected
        for power in (1, 2, 64, 1 << 30):
            assert spark_partition_ids(arrays, power).tolist() == [
                h % power for h in ref_hash(columns)
            ]


@pytest.mark.parametrize("jit", JIT)
@pytest.mark.parametrize("typ", [pa.binary(), pa.string(), pa.large_string()])
@pytest.mark.parametrize(
    "config", [(16384, 16384, 256, 1), (3, 2, 256, 2), (11, 5, 13, 3), (9, 4, 256, 2, 0)]
)
def test_every_length_from_0_to_40_at_every_byte_phase(
    typ: pa.DataType, config: tuple[int, ...], jit: str
) -> None:
    rng = np.random.default_rng(40)
    text = pa.types.is_string(typ) or pa.types.is_large_string(typ)
    values: list[Any] = []
    for length in range(41):
        for _ in range(6):  # several values per length, so they start at every byte phase
            raw = bytes(rng.integers(0, 256, length, dtype=np.uint8))
            values.append(raw.hex()[:length] if text else raw)
    rng.shuffle(values)
    values.insert(5, None)
    expected = ref_hash([(typ, values)])
    with kernel_settings(*config, jit=jit):
        for lead in range(4):  # the data buffer's first value at offsets 0..3
            padded = pa.array(["x" * lead if text else b"x" * lead, *values], typ)
            assert spark_hash([padded.slice(1)]).tolist() == expected


@pytest.mark.parametrize("jit", JIT)
def test_large_batches_on_all_threads_match_the_reference(jit: str) -> None:
    rng = np.random.default_rng(7)
    rows = 50_000
    ints = rng.integers(INT64_MIN, INT64_MAX, rows, dtype=np.int64, endpoint=True)
    ints[:4] = [INT64_MIN, INT64_MAX, 0, -1]
    lengths = rng.integers(0, 41, rows)
    lengths[::1000] = 300  # a few long values among short ones
    blob_values = [bytes(rng.integers(0, 256, n, dtype=np.uint8)) for n in lengths]
    int_mask = rng.random(rows) < 0.05
    blob_mask = rng.random(rows) < 0.05
    int_array = pa.array(ints, mask=int_mask)
    blob_array = pa.array(blob_values, pa.binary(), mask=blob_mask)
    expected = ref_hash(
        [
            (pa.int64(), [None if m else int(v) for v, m in zip(ints, int_mask, strict=True)]),
            (pa.binary(), [None if m else v for v, m in zip(blob_values, blob_mask, strict=True)]),
        ]
    )
    with kernel_settings(kernel._ROWS_PER_STEP, 4096, kernel._LONG_VALUE_BYTES, 2, jit=jit):
        assert spark_hash([int_array, blob_array]).tolist() == expected
        chunked = pa.chunked_array([blob_array.slice(0, 12_345), blob_array.slice(12_345)])
        assert spark_hash([int_array.slice(0), chunked]).tolist() == expected


# --- the writer's gather --------------------------------------------------------------------


@settings(max_examples=80, deadline=None)
@given(
    batches=st.lists(
        st.lists(st.tuples(st.integers(0, 6), st.text(max_size=5)), max_size=40), max_size=5
    ),
    threads=st.integers(1, 3),
)
def test_sort_buffer_groups_rows_as_a_stable_sort(
    batches: list[list[tuple[int, str]]], threads: int
) -> None:
    buffer = SortBuffer(7)
    rows = []
    number = 0
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(_threads.NUM_THREADS_ENV, str(threads))
        patch.setattr("arrowshuffle.writers.sort_buffer.MIN_ROWS_PER_THREAD", 2)
        for batch_rows in batches:
            ids = np.array([s for s, _ in batch_rows], dtype=np.int32)
            numbers = list(range(number, number + len(batch_rows)))
            number += len(batch_rows)
            rows += [(s, n, text) for (s, text), n in zip(batch_rows, numbers, strict=True)]
            batch = pa.record_batch(
                {"n": pa.array(numbers, pa.int64()), "text": [t for _, t in batch_rows]}
            )
            buffer.add(batch, ids)
        got = []
        for s, slices in buffer.chunks():
            for piece in slices:
                got += [
                    (s, n, t)
                    for n, t in zip(piece["n"].to_pylist(), piece["text"].to_pylist(), strict=True)
                ]
    assert got == sorted(rows, key=lambda row: row[0])  # sorted() is stable
    assert not buffer
