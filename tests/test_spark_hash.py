"""Spark's Murmur3 row hash and Flink's murmur hash, checked against Spark and its JVM."""

from __future__ import annotations

import decimal
import itertools
import random
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from arrowshuffle.format.errors import InvalidOptionError
from arrowshuffle.format.partitioners.spark_hash import (
    flink_murmur_hash,
    spark_hash,
    spark_partition_ids,
)

INT32_MIN = -(2**31)
INT32_MAX = 2**31 - 1
INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1

# UTF-8 characters by encoded width, to build strings of an exact byte length.
CHARS_BY_WIDTH = {
    1: "az09~ ",
    2: "éßЖñ©",
    3: "€中日✓한",
    4: "😀𝄞🚀𐍈",
}


# --- Spark as the oracle ----------------------------------------------------------------------


def spark_oracle(
    spark: Any,
    table: pa.Table,
    hash_keys: dict[str, Sequence[Any]],
    partition_keys: Sequence[tuple[Sequence[Any], int]] = (),
) -> tuple[dict[str, np.ndarray], list[np.ndarray]]:
    """Spark's ``hash(keys)`` per key set and ``spark_partition_id()`` after ``repartition``.

    ``table`` must have an ``id`` column holding the row index; results are ordered by it.
    Keys are column names or Spark column expressions.
    """
    from pyspark.sql import functions as F

    df = spark.createDataFrame(table)
    hashed = df.select("id", *[F.hash(*cols).alias(name) for name, cols in hash_keys.items()])
    hashes = hashed.toArrow().sort_by("id")
    assert hashes["id"].to_pylist() == list(range(table.num_rows))
    by_name = {name: hashes[name].to_numpy() for name in hash_keys}
    partitions = []
    for cols, n in partition_keys:
        part = df.repartition(n, *cols).select("id", F.spark_partition_id().alias("p"))
        ids = part.toArrow().sort_by("id")
        assert ids["id"].to_pylist() == list(range(table.num_rows))
        partitions.append(ids["p"].to_numpy().astype(np.int64))
    return by_name, partitions


def assert_rows_equal(ours: np.ndarray, spark_values: np.ndarray, what: str, values: Any) -> None:
    assert ours.shape == spark_values.shape, what
    bad = np.flatnonzero(ours != spark_values)
    shown = [(int(i), values[int(i)], int(ours[i]), int(spark_values[i])) for i in bad[:5]]
    assert bad.size == 0, f"{what}: {bad.size} rows differ; (row, value, ours, Spark): {shown}"


def with_nulls(values: list[Any], rng: random.Random, fraction: float = 0.1) -> list[Any]:
    return [None if rng.random() < fraction else v for v in values]


def utf8_string(rng: random.Random, byte_length: int) -> str:
    out = []
    left = byte_length
    while left:
        width = rng.choice([w for w in CHARS_BY_WIDTH if w <= left])
        out.append(rng.choice(CHARS_BY_WIDTH[width]))
        left -= width
    text = "".join(out)
    assert len(text.encode()) == byte_length
    return text


def decimals(rng: random.Random, precision: int, scale: int, count: int) -> list[Any]:
    top = 10**precision - 1
    edges = [0, 1, -1, 127, -128, 128, -129, 255, 256, -256, -257, 2**31, -(2**31) - 1]
    edges += [2**63 - 1, -(2**63), 2**63, -(2**63) - 1, top, -top]
    unscaled = [u for u in edges if abs(u) <= top]
    while len(unscaled) < count:
        digits = rng.randint(1, precision)  # every magnitude, so every byte length occurs
        unscaled.append(rng.choice([1, -1]) * rng.randint(0, 10**digits - 1))
    context = decimal.Context(prec=100)
    return [decimal.Decimal(u).scaleb(-scale, context=context) for u in unscaled[:count]]


def floats(rng: np.random.Generator, count: int, dtype: Any) -> np.ndarray:
    specials = np.array([0.0, -0.0, np.nan, -np.nan, np.inf, -np.inf, 1.0, -1.0], dtype=dtype)
    if dtype == np.float64:
        odd_nans = np.array([0x7FF0000000000001, 0xFFF8000000000000, 0x7FF8DEAD00000000])
        specials = np.concatenate([specials, odd_nans.astype(np.uint64).view(np.float64)])
        extremes = np.array([np.finfo(dtype).max, np.finfo(dtype).tiny, 5e-324], dtype=dtype)
    else:
        odd_nans = np.array([0x7F800001, 0xFFC00000, 0x7FC0BEEF])
        specials = np.concatenate([specials, odd_nans.astype(np.uint32).view(np.float32)])
        extremes = np.array([np.finfo(dtype).max, np.finfo(dtype).tiny, 1e-45], dtype=dtype)
    rest = rng.standard_normal(count) * 10.0 ** rng.integers(-5, 6, count)
    rest[::7] = np.round(rest[::7])  # whole numbers too
    return np.concatenate([specials, extremes, rest.astype(dtype)])[:count]


def nullable(values: Any, typ: pa.DataType, rng: np.random.Generator) -> pa.Array:
    """``values`` as an array of ``typ`` with about one value in ten null (not the first 20)."""
    mask = rng.random(len(values)) < 0.1
    mask[:20] = False  # edge cases sit at the start
    return pa.array(values, typ, mask=mask)


def offset_by_3(arr: pa.Array) -> pa.Array:
    """The same values, as an array whose offset (3) is not a whole byte of its bitmaps."""
    return pa.concat_arrays([arr.slice(0, 3), arr]).slice(3)


# --- every type, one column at a time -----------------------------------------------------------


def fixed_width_columns(rows: int) -> dict[str, tuple[pa.Array, pa.Array]]:
    """Name -> (the array spark_hash gets, the array Spark gets)."""
    n = rows
    rng = np.random.default_rng(7)
    prng = random.Random(7)

    def ints(dtype: Any) -> np.ndarray:
        info = np.iinfo(dtype)
        edges = np.array([info.min, info.max, 0, -1, 1, info.min + 1, info.max - 1], dtype=dtype)
        rest = rng.integers(info.min, info.max, n, dtype=dtype, endpoint=True)
        return np.concatenate([edges, rest])[:n]

    def same(values: Any, typ: pa.DataType) -> tuple[pa.Array, pa.Array]:
        arr = offset_by_3(nullable(values, typ, rng))
        return arr, arr

    days = rng.integers(-100_000, 100_000, n).astype(np.int32)
    micros = rng.integers(-(10**16), 10**16, n)
    nanos = rng.integers(-(4 * 10**18), 4 * 10**18, n)
    nanos[:4] = [-1500, -1000, -1, 1500]  # flooring to microseconds, below and above zero
    date64 = offset_by_3(nullable(days.astype(np.int64) * 86_400_000, pa.date64(), rng))
    return {
        "bool": same(rng.random(n) < 0.5, pa.bool_()),
        "int8": same(ints(np.int8), pa.int8()),
        "int16": same(ints(np.int16), pa.int16()),
        "int32": same(ints(np.int32), pa.int32()),
        "int64": same(ints(np.int64), pa.int64()),
        "float32": same(floats(rng, n, np.float32), pa.float32()),
        "float64": same(floats(rng, n, np.float64), pa.float64()),
        "date32": same(days, pa.date32()),
        "date64": (date64, date64.cast(pa.date32())),
        "ts_us_utc": same(micros, pa.timestamp("us", "UTC")),
        "ts_ms_ny": same(micros // 1000, pa.timestamp("ms", "America/New_York")),
        "ts_s_paris": same(micros // 10**6, pa.timestamp("s", "Europe/Paris")),
        "ts_ns_utc": same(nanos, pa.timestamp("ns", "UTC")),
        "ts_us_naive": same(micros, pa.timestamp("us")),
        "ts_ms_naive": same(micros // 1000, pa.timestamp("ms")),
        "duration_us": same(micros // 1000, pa.duration("us")),
        "duration_ns": same((micros // 1000) * 1000, pa.duration("ns")),
        "dec5": same(decimals(prng, 5, 2, n), pa.decimal128(5, 2)),
        "dec18": same(decimals(prng, 18, 4, n), pa.decimal128(18, 4)),
        "dec19": same(decimals(prng, 19, 0, n), pa.decimal128(19, 0)),
        "dec38": same(decimals(prng, 38, 10, n), pa.decimal128(38, 10)),
        "dec38_int": same(decimals(prng, 38, 0, n), pa.decimal128(38, 0)),
        "dec32": same(decimals(prng, 9, 3, n), pa.decimal32(9, 3)),
        "dec64": same(decimals(prng, 18, 0, n), pa.decimal64(18, 0)),
        "dec256": same(decimals(prng, 30, 5, n), pa.decimal256(30, 5)),
    }


@pytest.mark.spark
def test_every_fixed_width_type_hashes_and_partitions_like_spark(spark: Any) -> None:
    from pyspark.sql import functions as F

    rows = 700
    columns = fixed_width_columns(rows)
    ours = {name: pair[0] for name, pair in columns.items()}
    theirs = {name: pair[1] for name, pair in columns.items()}
    assert ours["int64"].offset == 3
    assert ours["float64"][1].as_py() == 0.0 and str(ours["float64"][1]) == "-0.0"
    table = pa.table({"id": np.arange(rows), **theirs})
    # A naive timestamp is TIMESTAMP in PySpark; in a UTC session TIMESTAMP_NTZ holds the same.
    ntz = F.col("ts_us_naive").cast("timestamp_ntz")
    hash_keys: dict[str, Sequence[Any]] = {name: [name] for name in columns}
    hash_keys["ntz"] = [ntz]
    hash_keys["all"] = list(columns)
    # Each repartition is a Spark job; hash() above already checks every row of every type.
    partition_keys = [(list(columns), 7), (["dec38", "float64", "ts_ns_utc"], 64)]
    hashes, partitions = spark_oracle(spark, table, hash_keys, partition_keys)

    for name in columns:
        got = spark_hash([ours[name]])
        assert got.dtype == np.int32
        assert_rows_equal(got, hashes[name], f"hash({name})", ours[name])
    assert_rows_equal(spark_hash([ours["ts_us_naive"]]), hashes["ntz"], "ntz", ours["ts_us_naive"])
    everything = [ours[name] for name in columns]
    assert_rows_equal(spark_hash(everything), hashes["all"], "hash(all)", table["id"])
    for (cols, n), spark_ids in zip(partition_keys, partitions, strict=True):
        got_ids = spark_partition_ids([ours[c] for c in cols], n)
        assert got_ids.dtype == np.int64
        assert_rows_equal(got_ids, spark_ids, f"repartition({n}, {cols})", table["id"])
    # The data spread: not every row landed in one partition, and nulls did not break it.
    assert len(np.unique(partitions[1])) > 32


# --- strings and binaries -----------------------------------------------------------------------


def string_rows(rng: random.Random) -> list[str]:
    """Non-ASCII strings of every byte length 0..20, several of each, shuffled."""
    values = [utf8_string(rng, length) for length in range(21) for _ in range(12)]
    rng.shuffle(values)
    return values


@pytest.mark.spark
def test_strings_and_binaries_of_every_tail_length_match_spark(spark: Any) -> None:
    prng = random.Random(11)
    nrng = np.random.default_rng(11)
    texts = with_nulls(["", "", *string_rows(prng)], prng)
    rows = len(texts)
    # Random bytes: high bytes in the tail must be sign-extended.
    blobs = with_nulls(
        [bytes(nrng.integers(0, 256, prng.randint(0, 40), dtype=np.uint8)) for _ in range(rows)],
        prng,
    )
    fixed = with_nulls([bytes(nrng.integers(0, 256, 7, dtype=np.uint8)) for _ in range(rows)], prng)
    pad = 5  # build longer arrays and slice, so every array starts at an offset
    text_arr = pa.array([None] * pad + texts, pa.string()).slice(pad)
    blob_arr = pa.array([b"x"] * pad + blobs, pa.binary()).slice(pad)
    ours = {
        "string": text_arr,
        "large_string": text_arr.cast(pa.large_string()),
        "string_view": text_arr.cast(pa.string_view()),
        "dict_string": text_arr.dictionary_encode(),
        "binary": blob_arr,
        "large_binary": blob_arr.cast(pa.large_binary()),
        "binary_view": blob_arr.cast(pa.binary_view()),
        "fixed_binary": pa.array([b"1234567"] * pad + fixed, pa.binary(7)).slice(pad),
    }
    spark_side = {
        "string": text_arr,
        "large_string": text_arr.cast(pa.large_string()),
        "string_view": text_arr,  # PySpark takes no view types; it gets the same strings
        "dict_string": text_arr.dictionary_encode(),
        "binary": blob_arr,
        "large_binary": blob_arr.cast(pa.large_binary()),
        "binary_view": blob_arr,
        "fixed_binary": ours["fixed_binary"],
    }
    table = pa.table({"id": np.arange(rows), **spark_side})
    hash_keys: dict[str, Sequence[Any]] = {name: [name] for name in ours}
    hash_keys["text_then_blob"] = ["string", "binary", "fixed_binary"]
    partition_keys = [(["string"], 7), (["string", "binary"], 64)]
    hashes, partitions = spark_oracle(spark, table, hash_keys, partition_keys)

    for name, arr in ours.items():
        assert_rows_equal(spark_hash([arr]), hashes[name], f"hash({name})", arr)
    chain = [ours["string_view"], ours["large_binary"], ours["fixed_binary"]]
    assert_rows_equal(spark_hash(chain), hashes["text_then_blob"], "chain", table["id"])
    for (cols, n), spark_ids in zip(partition_keys, partitions, strict=True):
        got = spark_partition_ids([ours[c] for c in cols], n)
        assert_rows_equal(got, spark_ids, f"repartition({n}, {cols})", table["id"])
    # Every tail length and the empty string really occurred, and they are not all one hash.
    lengths = {len(t.encode()) for t in texts if t is not None}
    assert lengths == set(range(21))
    assert len(np.unique(hashes["string"])) > rows // 2


@pytest.mark.spark
def test_many_rows_with_some_long_values_match_spark(spark: Any) -> None:
    """More rows than one numpy pass takes, with values long enough to be hashed apart."""
    rng = np.random.default_rng(5)
    rows = 70_000
    lengths = rng.integers(0, 41, rows)
    lengths[::997] = rng.integers(257, 3000, len(lengths[::997]))
    offsets = np.zeros(rows + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    data = rng.integers(0, 256, int(offsets[-1]), dtype=np.uint8)
    blobs = pa.Array.from_buffers(
        pa.binary(), rows, [None, pa.py_buffer(offsets), pa.py_buffer(data)]
    )
    mask = rng.random(rows) < 0.05
    blobs = pa.array(blobs.to_pylist(), pa.binary(), mask=mask)
    ints = pa.array(rng.integers(INT64_MIN, INT64_MAX, rows, endpoint=True))
    table = pa.table({"id": np.arange(rows), "blob": blobs, "n": ints})
    hashes, _ = spark_oracle(spark, table, {"blob": ["blob"], "both": ["n", "blob"]})

    assert_rows_equal(spark_hash([blobs]), hashes["blob"], "hash(blob)", blobs)
    assert_rows_equal(spark_hash([ints, blobs]), hashes["both"], "hash(n, blob)", table["id"])


# --- chains, nulls, chunks --------------------------------------------------------------------


@pytest.mark.spark
def test_chained_columns_with_nulls_and_uneven_chunks_match_spark(spark: Any) -> None:
    prng = random.Random(3)
    nrng = np.random.default_rng(3)
    rows = 900
    # Whole runs of nulls in the middle columns, so the chain skips them.
    null_rows = nrng.random(rows) < 0.3
    mid = pa.array(nrng.integers(INT32_MIN, INT32_MAX, rows), pa.int32(), mask=null_rows)
    texts = pa.array(
        with_nulls([utf8_string(prng, prng.randint(0, 20)) for _ in range(rows)], prng)
    )
    dbl = pa.array(floats(nrng, rows, np.float64), mask=nrng.random(rows) < 0.2)
    dec = pa.array(with_nulls(decimals(prng, 38, 6, rows), prng, 0.3), pa.decimal128(38, 6))
    ts = pa.array(nrng.integers(-(10**13), 10**13, rows), pa.timestamp("ms", "Asia/Tokyo"))
    flags = pa.array(with_nulls([prng.random() < 0.5 for _ in range(rows)], prng, 0.5))
    nothing = pa.nulls(rows)

    def chunked(arr: pa.Array, cuts: list[int]) -> pa.ChunkedArray:
        bounds = [0, *cuts, rows]
        return pa.chunked_array([arr.slice(a, b - a) for a, b in itertools.pairwise(bounds)])

    columns = {
        "mid": chunked(mid, [100, 101, 450]),
        "text": chunked(texts, [7, 800]),
        "dbl": dbl,
        "dec": chunked(dec, [333]),
        "ts": chunked(ts, [1, 2, 3, 899]),
        "flags": flags,
        "nothing": chunked(nothing, [500]),
    }
    table = pa.table({"id": np.arange(rows), **columns})
    chain = ["mid", "text", "nothing", "dbl", "dec", "ts", "flags"]
    partition_keys = [(chain, n) for n in (1, 7, 64, 200)]
    hashes, partitions = spark_oracle(
        spark,
        table,
        {"chain": chain, "reversed": chain[::-1], "pair": ["flags", "mid"]},
        partition_keys,
    )

    ours = [columns[c] for c in chain]
    assert_rows_equal(spark_hash(ours), hashes["chain"], "chain", table["id"])
    assert_rows_equal(spark_hash(ours[::-1]), hashes["reversed"], "reversed", table["id"])
    pair = [columns["flags"], columns["mid"]]
    assert_rows_equal(spark_hash(pair), hashes["pair"], "pair", table["id"])
    for (cols, n), spark_ids in zip(partition_keys, partitions, strict=True):
        got = spark_partition_ids([columns[c] for c in cols], n)
        assert_rows_equal(got, spark_ids, f"repartition({n}, {cols})", table["id"])
    # Order matters, and rows whose every key is null keep the seed.
    assert (hashes["chain"] != hashes["reversed"]).any()
    all_null = np.flatnonzero(
        null_rows & np.asarray(flags.is_null()) & np.asarray(pa.chunked_array([dec]).is_null())
    )
    assert (hashes["pair"][all_null] == 42).all()


# --- unsigned integers: as Spark reads them from Parquet ---------------------------------------


@pytest.mark.spark
def test_unsigned_integers_hash_as_spark_reads_them_from_parquet(spark: Any, tmp_path: Any) -> None:
    from pyspark.sql import functions as F

    rng = np.random.default_rng(9)
    rows = 500

    def unsigned(dtype: Any) -> pa.Array:
        top = np.iinfo(dtype).max
        values = np.concatenate(
            [
                np.array([0, 1, top, top - 1, top // 2, top // 2 + 1], dtype=dtype),
                rng.integers(0, top, rows, dtype=dtype, endpoint=True),
            ]
        )[:rows]
        return pa.array(values, mask=rng.random(rows) < 0.1)

    columns = {
        name: unsigned(dtype)
        for name, dtype in [
            ("u8", np.uint8),
            ("u16", np.uint16),
            ("u32", np.uint32),
            ("u64", np.uint64),
        ]
    }
    table = pa.table({"id": np.arange(rows), **columns})
    pq.write_table(table, tmp_path / "unsigned.parquet")
    df = spark.read.parquet(str(tmp_path / "unsigned.parquet"))
    assert [f.dataType.simpleString() for f in df.schema.fields[1:]] == [
        "smallint",
        "int",
        "bigint",
        "decimal(20,0)",
    ]
    names = list(columns)
    result = (
        df.select("id", *[F.hash(c).alias(c) for c in names], F.hash(*names).alias("all"))
        .toArrow()
        .sort_by("id")
    )
    parts = (
        df.repartition(13, *names)
        .select("id", F.spark_partition_id().alias("p"))
        .toArrow()
        .sort_by("id")
    )

    for name, arr in columns.items():
        assert_rows_equal(spark_hash([arr]), result[name].to_numpy(), name, arr)
    ours = list(columns.values())
    assert_rows_equal(spark_hash(ours), result["all"].to_numpy(), "all", table["id"])
    got = spark_partition_ids(ours, 13)
    assert_rows_equal(got, parts["p"].to_numpy().astype(np.int64), "repartition", table["id"])


# --- the JVM's Murmur3 directly: other seeds, Flink ------------------------------------------


@pytest.mark.spark
def test_other_seeds_match_the_jvm_murmur3(spark: Any) -> None:
    jvm_murmur = spark._jvm.org.apache.spark.unsafe.hash.Murmur3_x86_32
    hash_bytes = jvm_murmur.hashUnsafeBytes
    byte_array_offset = spark._jvm.org.apache.spark.unsafe.Platform.BYTE_ARRAY_OFFSET
    rng = random.Random(21)
    ints = [0, -1, INT32_MIN, INT32_MAX] + [rng.randint(INT32_MIN, INT32_MAX) for _ in range(40)]
    blobs = [bytes(rng.randrange(256) for _ in range(rng.randint(0, 13))) for _ in range(40)]
    for seed in (0, -1, INT32_MIN, INT32_MAX, 123456789):
        # An instance's one-argument hashInt is the static hashInt(input, seed); py4j cannot
        # pick the static overload by name when the instance method shares it.
        hash_int = jvm_murmur(seed).hashInt
        expected_ints = [hash_int(v) for v in ints]
        got_ints = spark_hash([pa.array(ints, pa.int32())], seed=seed)
        assert got_ints.tolist() == expected_ints
        expected_bytes = [hash_bytes(bytearray(b), byte_array_offset, len(b), seed) for b in blobs]
        assert spark_hash([pa.array(blobs, pa.binary())], seed=seed).tolist() == expected_bytes


def murmur3_int_preimage(target: int) -> int:
    """The int whose Murmur3 x86_32 ``hashInt(code, seed=0)`` is ``target``: every step inverted."""
    mask = 0xFFFFFFFF

    def inverse(odd: int) -> int:
        return pow(odd, -1, 1 << 32)

    def rotr(x: int, r: int) -> int:
        return ((x >> r) | (x << (32 - r))) & mask

    h = target & mask
    h ^= h >> 16
    h = (h * inverse(0xC2B2AE35)) & mask
    h ^= (h >> 13) ^ (h >> 26)
    h = (h * inverse(0x85EBCA6B)) & mask
    h ^= h >> 16
    h ^= 4  # the length
    h = ((h - 0xE6546B64) * inverse(5)) & mask
    k = rotr(h, 13)  # seed 0: h ^ k1 is k1
    k = (k * inverse(0x1B873593)) & mask
    k = rotr(k, 15)
    k = (k * inverse(0xCC9E2D51)) & mask
    return k - (1 << 32) if k > INT32_MAX else k


def flink_fold(value: int) -> int:
    """Flink's MathUtils.murmurHash ending: negative -> negated, Integer.MIN_VALUE -> 0."""
    if value >= 0:
        return value
    return 0 if value == INT32_MIN else -value


@pytest.mark.spark
def test_flink_murmur_hash_matches_the_jvm_body_and_flinks_fold(spark: Any) -> None:
    hash_int = spark._jvm.org.apache.spark.unsafe.hash.Murmur3_x86_32(0).hashInt  # seed 0
    rng = random.Random(17)
    codes = [0, -1, 1, INT32_MIN, INT32_MAX, INT32_MIN + 1, INT32_MAX - 1, 42, -42]
    codes += [rng.randint(INT32_MIN, INT32_MAX) for _ in range(300)]
    # The one code whose Murmur3 body is Integer.MIN_VALUE, which Flink folds to 0.
    code_for_min = murmur3_int_preimage(INT32_MIN)
    assert hash_int(code_for_min) == INT32_MIN
    codes.append(code_for_min)
    bodies = [hash_int(c) for c in codes]
    expected = [flink_fold(body) for body in bodies]

    got = flink_murmur_hash(np.array(codes, dtype=np.int32))
    assert got.dtype == np.int32
    assert got.tolist() == expected
    assert (got >= 0).all()
    # Wider integer arrays with the same values give the same answer.
    assert flink_murmur_hash(np.array(codes, dtype=np.int64)).tolist() == expected
    # Both branches of the fold occurred.
    assert min(bodies) < 0 < max(bodies)
    assert got[-1] == 0


def test_flink_murmur_hash_rejects_values_java_ints_cannot_hold() -> None:
    with pytest.raises(InvalidOptionError, match="int range"):
        flink_murmur_hash(np.array([0, 2**31], dtype=np.int64))
    with pytest.raises(InvalidOptionError, match="integers"):
        flink_murmur_hash(np.array([1.5]))
    assert flink_murmur_hash(np.array([], dtype=np.int32)).shape == (0,)


# --- errors ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "arr",
    [
        pa.array([[1, 2], None], pa.list_(pa.int32())),
        pa.array([[1]], pa.large_list(pa.int64())),
        pa.array([{"a": 1}], pa.struct([("a", pa.int64())])),
        pa.array([[("k", 1)]], pa.map_(pa.string(), pa.int64())),
        pa.array([1, 2], pa.time32("ms")),
        pa.array([1, 2], pa.time64("us")),
        pa.array([np.float16(1.5)], pa.float16()),
        pa.array([decimal.Decimal(1)], pa.decimal256(40, 0)),
        pa.array([pa.MonthDayNano([1, 2, 3])], pa.month_day_nano_interval()),
    ],
    ids=lambda arr: str(arr.type),
)
def test_types_spark_cannot_hash_raise_a_clear_error(arr: pa.Array) -> None:
    ok = pa.array(range(len(arr)), pa.int32())
    for column in (arr, pa.nulls(len(arr), arr.type)):  # all-null columns are checked too
        with pytest.raises(InvalidOptionError) as caught:
            spark_hash([ok, column])
        message = str(caught.value)
        assert "key column 1" in message
        assert str(arr.type) in message


def test_a_dictionary_of_an_unsupported_type_names_the_value_type() -> None:
    times = pa.array([1, 2, 1], pa.time64("us")).dictionary_encode()
    with pytest.raises(InvalidOptionError, match=r"key column 0 has type time64\[us\]"):
        spark_hash([times])


def test_bad_arguments_raise_clear_errors() -> None:
    ints = pa.array([1, 2, 3])
    with pytest.raises(InvalidOptionError, match="at least one"):
        spark_hash([])
    with pytest.raises(InvalidOptionError, match="column 1 has 2"):
        spark_hash([ints, pa.array([1, 2])])
    with pytest.raises(InvalidOptionError, match="pyarrow Array"):
        spark_hash([np.array([1, 2, 3])])  # type: ignore[list-item]
    with pytest.raises(InvalidOptionError, match="32-bit"):
        spark_hash([ints], seed=2**31)
    for bad in (0, -3, 2**31, True):
        with pytest.raises(InvalidOptionError, match="num_partitions"):
            spark_partition_ids([ints], bad)


def test_empty_and_all_null_columns_keep_the_seed() -> None:
    assert spark_hash([pa.array([], pa.string())]).shape == (0,)
    assert spark_partition_ids([pa.chunked_array([], pa.int64())], 3).shape == (0,)
    nulls = [pa.nulls(4, t) for t in (pa.int64(), pa.string(), pa.decimal128(38, 2), pa.null())]
    assert spark_hash(nulls, seed=-5).tolist() == [-5] * 4


# --- layouts that must not change a hash (no Spark needed) -----------------------------------


@settings(max_examples=60, deadline=None)
@given(
    texts=st.lists(st.one_of(st.none(), st.text(max_size=12)), max_size=60),
    cuts=st.lists(st.integers(min_value=0, max_value=60), max_size=4),
    lead=st.integers(min_value=0, max_value=9),
)
def test_string_layouts_hash_alike(texts: list[str | None], cuts: list[int], lead: int) -> None:
    plain = pa.array(texts, pa.string())
    expected = spark_hash([plain])
    bounds = sorted({0, len(texts), *[min(c, len(texts)) for c in cuts]})
    chunks = pa.chunked_array(
        [plain.slice(a, b - a) for a, b in itertools.pairwise(bounds)], pa.string()
    )
    sliced = pa.array(["pad"] * lead + texts, pa.string()).slice(lead)
    for layout in (
        plain.cast(pa.large_string()),
        plain.cast(pa.string_view()),
        plain.cast(pa.binary()),
        plain.dictionary_encode(),
        chunks,
        sliced,
    ):
        assert spark_hash([layout]).tolist() == expected.tolist()


@settings(max_examples=60, deadline=None)
@given(
    values=st.lists(st.one_of(st.none(), st.integers(INT64_MIN, INT64_MAX)), max_size=80),
    lead=st.integers(min_value=0, max_value=17),
)
def test_sliced_fixed_width_arrays_hash_like_fresh_ones(
    values: list[int | None], lead: int
) -> None:
    as_decimals = [None if v is None else decimal.Decimal(v) for v in values]
    flags = [None if v is None else v % 2 == 0 for v in values]
    for typ, items, filler in (
        (pa.int64(), values, 7),
        (pa.timestamp("us"), values, 7),
        (pa.decimal128(38, 0), as_decimals, decimal.Decimal(7)),
        (pa.bool_(), flags, True),
    ):
        fresh = pa.array(items, typ)
        padded = pa.array([filler] * lead + items, typ).slice(lead)
        assert spark_hash([padded]).tolist() == spark_hash([fresh]).tolist()


def test_hashing_in_small_passes_gives_the_same_hashes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Rows per pass and the long-value cut change the speed, never a hash."""
    import arrowshuffle.format.partitioners.spark_hash as module

    rng = np.random.default_rng(13)
    rows = 3000
    lengths = rng.integers(0, 40, rows)
    lengths[::50] = rng.integers(100, 700, len(lengths[::50]))
    blobs = [bytes(rng.integers(0, 256, n, dtype=np.uint8)) for n in lengths]
    arrays = [
        pa.array(blobs, pa.binary(), mask=rng.random(rows) < 0.1).slice(1),
        pa.array(decimals(random.Random(13), 38, 3, rows), pa.decimal128(38, 3)).slice(1),
        pa.array(rng.integers(INT64_MIN, INT64_MAX, rows), pa.int64()).slice(1),
    ]
    expected = spark_hash(arrays)
    monkeypatch.setattr(module, "_ROWS_PER_STEP", 97)
    monkeypatch.setattr(module, "_LONG_VALUE_BYTES", 17)
    assert spark_hash(arrays).tolist() == expected.tolist()
    monkeypatch.setattr(module, "_LONG_VALUE_BYTES", 0)
    assert spark_hash(arrays).tolist() == expected.tolist()
