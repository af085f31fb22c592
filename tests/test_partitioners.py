"""Partitioner semantics: Spark's hash, Flink's selectors, range order, specs in files.

Expected values come from outside the code under test: PySpark itself for ``hash``, a short
reference of Flink's ``MathUtils.murmurHash`` and hand-computed Flink formulas for key groups
and pointwise subsets, and plain Python sorting for ranges.
"""

from __future__ import annotations

import datetime
import json
import tempfile
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import arrowshuffle as ash
from arrowshuffle.format.partitioners import (
    PARTITIONER_NAMES,
    BroadcastPartitioner,
    RangePartitioner,
    is_recomputable,
    key_group_range,
    make_partitioner,
    operator_for_key_group,
    partitioner_from_spec,
    recompute_subpartitions,
    rescale_targets,
)
from arrowshuffle.format.partitioners.spark_hash import spark_hash

# --------------------------------------------------------------------------- helpers


def batch_of(**columns: Any) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict(columns)


def write_file(path: Path, table: pa.Table, partitioner: Any, n: int, **kw: Any) -> ash.ShuffleFile:
    with ash.ShuffleFileWriter(
        path, table.schema, n, partitioner=partitioner, max_batch_rows=64, **kw
    ) as w:
        for batch in table.to_batches(max_chunksize=50):
            w.write(batch)
    return ash.open_file(path)


def ids_by_reading(f: ash.ShuffleFile, id_column: str = "id") -> dict[int, int]:
    """Row id -> the subpartition the file holds it in."""
    where: dict[int, int] = {}
    for s in range(f.num_subpartitions):
        for row_id in f.read(s).column(id_column).to_pylist():
            where[row_id] = s
    return where


MIXED_STRINGS = [
    "",
    "a",
    "ab",
    "abc",
    "abcd",
    "abcde",
    "é",
    "日本",
    "日本語テキスト",
    "🙂",
    "x" * 17,
    "ÿÿÿ",
    "\x00",
    None,
]


def key_table(rows: int = 240, seed: int = 7) -> pa.Table:
    rng = np.random.default_rng(seed)
    ints: list[int | None] = [int(v) for v in rng.integers(-(2**62), 2**62, rows)]
    ints[:6] = [0, -1, 1, 2**63 - 1, -(2**63), None]
    for i in range(10, rows, 17):
        ints[i] = None
    strings = [MIXED_STRINGS[i % len(MIXED_STRINGS)] for i in range(rows)]
    strings = [s if s is None else s + str(i % 5) * (i % 3) for i, s in enumerate(strings)]
    return pa.table(
        {
            "id": pa.array(range(rows), pa.int64()),
            "k": pa.array(ints, pa.int64()),
            "s": pa.array(strings, pa.string()),
        }
    )


# --------------------------------------------------------------------------- hash vs Spark


@pytest.mark.spark
@pytest.mark.parametrize("by", [["k"], ["s"], ["k", "s"], ["s", "k"]])
def test_hash_matches_spark_repartition(spark: Any, by: list[str]) -> None:
    from pyspark.sql.functions import spark_partition_id

    n = 7
    table = key_table()
    df = spark.createDataFrame(
        list(zip(*(table.column(c).to_pylist() for c in ("id", "k", "s")), strict=True)),
        schema="id long, k long, s string",
    )
    rows = df.repartition(n, *by).select("id", spark_partition_id().alias("pid")).collect()
    expected = {r["id"]: r["pid"] for r in rows}

    ids = make_partitioner("hash", num_subpartitions=n, by=by).assign(table.to_batches()[0])
    assert len(expected) == table.num_rows
    assert {i: int(p) for i, p in enumerate(ids)} == expected


def test_hash_equal_keys_share_a_subpartition_and_spec_recomputes(tmp_path: Path) -> None:
    table = key_table()
    p = make_partitioner("hash", num_subpartitions=5, by=["s"])
    f = write_file(tmp_path / "h.arrow", table, p, 5)
    assert f.partitioner == p.spec()
    assert f.partitioner["columns"] == ["s"] and f.partitioner["seed"] == 42
    where = ids_by_reading(f)
    by_key: dict[Any, set[int]] = {}
    for row_id, key in enumerate(table.column("s").to_pylist()):
        by_key.setdefault(key, set()).add(where[row_id])
    assert all(len(parts) == 1 for parts in by_key.values())


def test_hash_with_another_seed_differs_and_round_trips() -> None:
    batch = key_table().to_batches()[0]
    a = make_partitioner("hash", num_subpartitions=16, by="k")
    b = make_partitioner("hash", num_subpartitions=16, by="k", seed=7)
    assert not np.array_equal(a.assign(batch), b.assign(batch))
    rebuilt = partitioner_from_spec(json.loads(json.dumps(b.spec())), 16)
    np.testing.assert_array_equal(rebuilt.assign(batch), b.assign(batch))


# --------------------------------------------------------------------------- key groups


def flink_murmur_reference(code: int) -> int:
    """Flink's MathUtils.murmurHash(int), written out from its definition, one int at a time."""
    mask = 0xFFFFFFFF

    def rotl(x: int, r: int) -> int:
        return ((x << r) | (x >> (32 - r))) & mask

    h = (code * 0xCC9E2D51) & mask
    h = rotl(h, 15)
    h = (h * 0x1B873593) & mask
    h = rotl(h, 13)
    h = (h * 5 + 0xE6546B64) & mask
    h ^= 4
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & mask
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & mask
    h ^= h >> 16
    signed = h - (1 << 32) if h >= 1 << 31 else h
    if signed >= 0:
        return signed
    return -signed if signed != -(1 << 31) else 0


def test_key_group_follows_flinks_assignment_of_the_spark_key_hash() -> None:
    batch = key_table().to_batches()[0]
    max_parallelism = 128
    p = make_partitioner("key_group", num_subpartitions=max_parallelism, by=["k", "s"])
    key_hashes = spark_hash([batch.column("k"), batch.column("s")])
    expected = [flink_murmur_reference(int(h)) % max_parallelism for h in key_hashes]
    assert p.assign(batch).tolist() == expected
    assert p.spec()["max_parallelism"] == max_parallelism


def test_key_group_ranges_match_flinks_operator_index_formula() -> None:
    # Hand-computed from Flink's computeKeyGroupRangeForOperatorIndex(128, 3, i).
    assert [key_group_range(i, 3, 128) for i in range(3)] == [
        range(0, 43),
        range(43, 86),
        range(86, 128),
    ]
    assert key_group_range(0, 1, 10) == range(0, 10)
    assert [key_group_range(i, 4, 4) for i in range(4)] == [range(i, i + 1) for i in range(4)]


@given(st.integers(1, 2000).flatmap(lambda m: st.tuples(st.just(m), st.integers(1, m))))
@settings(max_examples=60, deadline=None)
def test_key_group_ranges_partition_the_groups(sizes: tuple[int, int]) -> None:
    max_parallelism, parallelism = sizes
    covered: list[int] = []
    for i in range(parallelism):
        groups = key_group_range(i, parallelism, max_parallelism)
        covered.extend(groups)
        # Flink's inverse mapping sends every group of the range back to operator i.
        assert all(operator_for_key_group(g, parallelism, max_parallelism) == i for g in groups)
    assert covered == list(range(max_parallelism))


def test_key_group_option_errors() -> None:
    with pytest.raises(ash.InvalidOptionError, match="max_parallelism must equal"):
        make_partitioner("key_group", num_subpartitions=8, by="k", max_parallelism=16)
    with pytest.raises(ash.InvalidOptionError, match="32768"):
        make_partitioner("key_group", num_subpartitions=40000, by="k")
    with pytest.raises(ash.InvalidOptionError, match="parallelism"):
        key_group_range(0, 9, 8)


# --------------------------------------------------------------------------- range


def assert_range_ordered(f: ash.ShuffleFile, key: str) -> None:
    """Non-null keys ascend across subpartitions; nulls only in subpartition 0."""
    previous_max = None
    for s in range(f.num_subpartitions):
        keys = f.read(s).column(key).to_pylist()
        if s > 0:
            assert None not in keys, f"null key in subpartition {s}"
        present = [k for k in keys if k is not None and not (isinstance(k, float) and k != k)]
        if not present:
            continue
        if previous_max is not None:
            assert min(present) >= previous_max, f"subpartition {s} starts below {previous_max}"
        previous_max = max(present)


@given(
    st.lists(st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1)), min_size=1, max_size=300),
    st.integers(1, 12),
)
@settings(max_examples=40, deadline=None)
def test_range_reads_keys_in_ascending_order(keys: list[int | None], n: int) -> None:
    table = pa.table(
        {"id": pa.array(range(len(keys)), pa.int64()), "k": pa.array(keys, pa.int64())}
    )

    with tempfile.TemporaryDirectory() as d:
        p = make_partitioner("range", num_subpartitions=n, by="k")
        f = write_file(Path(d) / "r.arrow", table, p, n)
        assert_range_ordered(f, "k")
        assert sorted(ids_by_reading(f)) == list(range(len(keys)))
        spec = f.partitioner
        assert len(spec["boundaries"]) <= n - 1
        assert spec["boundaries"] == sorted(set(spec["boundaries"]))
        recomputed = recompute_subpartitions(spec, table.to_batches()[0], n)
        assert recomputed is not None
        where = ids_by_reading(f)
        assert recomputed.tolist() == [where[i] for i in range(len(keys))]


@pytest.mark.parametrize(
    "values",
    [
        pytest.param([3.5, -0.0, float("nan"), None, -7.25, 1e300, float("-inf"), 2.0], id="float"),
        pytest.param(MIXED_STRINGS, id="string"),
        pytest.param([datetime.date(2024, 1, d) for d in (5, 1, 30, 17, 2)] + [None], id="date32"),
        pytest.param(
            [
                datetime.datetime(2024, 3, 1, h, m, tzinfo=datetime.timezone.utc)
                for h, m in ((5, 1), (23, 59), (0, 0), (12, 30))
            ]
            + [None],
            id="timestamp",
        ),
        pytest.param([Decimal("1.50"), Decimal("-3.25"), None, Decimal("10.00")], id="decimal"),
        pytest.param([b"\xff", b"", b"\x00\x01", None, b"abc"], id="binary"),
    ],
)
def test_range_orders_every_sortable_type(tmp_path: Path, values: list[Any]) -> None:
    rows = values * 20
    table = pa.table({"id": pa.array(range(len(rows)), pa.int64()), "k": pa.array(rows)})
    p = make_partitioner("range", num_subpartitions=4, by="k")
    f = write_file(tmp_path / "r.arrow", table, p, 4)
    assert_range_ordered(f, "k")
    spec = json.loads(json.dumps(f.partitioner))  # the stored spec is plain JSON
    assert spec["type"] == str(table.schema.field("k").type)
    rebuilt = partitioner_from_spec(spec, 4)
    where = ids_by_reading(f)
    assert rebuilt.assign(table.to_batches()[0]).tolist() == [where[i] for i in range(len(rows))]
    if any(isinstance(v, float) and v != v for v in values):
        nan_rows = [i for i, v in enumerate(rows) if isinstance(v, float) and v != v]
        last_used = max(s for s in range(4) if f.read(s).num_rows)
        assert {where[i] for i in nan_rows} == {last_used}


def test_range_boundaries_are_upper_inclusive() -> None:
    p = make_partitioner("range", num_subpartitions=3, by="k", boundaries=[10, 20])
    batch = batch_of(k=pa.array([9, 10, 11, 20, 21, None, -(2**31)], pa.int32()))
    # Keys up to and including 10 -> 0, (10, 20] -> 1, above 20 -> 2, nulls first.
    assert p.assign(batch).tolist() == [0, 0, 1, 1, 2, 0, 0]


def test_range_string_boundaries_compare_bytewise() -> None:
    p = make_partitioner("range", num_subpartitions=3, by="k", boundaries=["b", "é"])
    keys = ["a", "b", "c", "z", "é", "ö", "", None]
    batch = batch_of(k=pa.array(keys, pa.large_string()))
    assert p.assign(batch).tolist() == [0, 0, 1, 1, 1, 2, 0, 0]
    view = batch_of(k=pa.array(keys, pa.string_view()))
    assert p.assign(view).tolist() == [0, 0, 1, 1, 1, 2, 0, 0]


def test_range_sample_balances_subpartitions() -> None:
    keys = np.random.default_rng(3).permutation(100_000)
    sample = pa.array(keys[:20_000])
    p = make_partitioner("range", num_subpartitions=8, by="k", sample=sample)
    counts = np.bincount(p.assign(batch_of(k=pa.array(keys))), minlength=8)
    assert counts.min() > 0.8 * 100_000 / 8 and counts.max() < 1.2 * 100_000 / 8


def test_range_with_few_distinct_keys_leaves_subpartitions_empty() -> None:
    batch = batch_of(k=pa.array([1, 2, 1, 2, 1, 2] * 10))
    p = make_partitioner("range", num_subpartitions=6, by="k")
    ids = p.assign(batch)
    # As Spark's determineBounds: candidates at every sixth of the sorted sample, deduplicated.
    assert p.spec()["boundaries"] == [1, 2]
    assert ids.tolist() == [0, 1, 0, 1, 0, 1] * 10


def test_range_boundaries_fixed_by_first_batch_with_keys() -> None:
    p = make_partitioner("range", num_subpartitions=4, by="k")
    assert p.assign(batch_of(k=pa.array([None, None], pa.int64()))).tolist() == [0, 0]
    assert p.spec()["boundaries"] == []
    p.assign(batch_of(k=pa.array(list(range(100)), pa.int64())))
    fixed = p.spec()["boundaries"]
    assert len(fixed) == 3
    p.assign(batch_of(k=pa.array([10**9] * 50, pa.int64())))
    assert p.spec()["boundaries"] == fixed


def test_range_option_errors() -> None:
    with pytest.raises(ash.InvalidOptionError, match="strictly ascending"):
        make_partitioner("range", num_subpartitions=4, by="k", boundaries=[3, 3])
    with pytest.raises(ash.InvalidOptionError, match="at most 1"):
        make_partitioner("range", num_subpartitions=2, by="k", boundaries=[1, 2])
    with pytest.raises(ash.InvalidOptionError, match="exactly one key column"):
        make_partitioner("range", num_subpartitions=2, by=["a", "b"])
    p = make_partitioner("range", num_subpartitions=3, by="k", boundaries=[1, 2])
    with pytest.raises(ash.InvalidOptionError, match="cannot be compared"):
        p.assign(batch_of(k=pa.array(["x"])))
    with pytest.raises(ash.InvalidOptionError, match="sortable key"):
        make_partitioner("range", num_subpartitions=3, by="k").assign(
            batch_of(k=pa.array([[1], [2]]))
        )
    spec = RangePartitioner(3, by="k", boundaries=["a", "m"]).spec()
    with pytest.raises(ash.InvalidOptionError, match="kind 'string'"):
        recompute_subpartitions(spec, batch_of(k=pa.array([1, 2])), 3)


# --------------------------------------------------------------------------- keyless selectors


def test_round_robin_cycles_across_batches_from_a_random_start() -> None:
    n = 5
    p = make_partitioner("round_robin", num_subpartitions=n, seed=11)
    ids = np.concatenate([p.assign(batch_of(x=list(range(size)))) for size in (3, 1, 7, 0, 12, 4)])
    assert ids.tolist() == [(int(ids[0]) + i) % n for i in range(len(ids))]
    for rows in (1, 4, 5, 13, 27):
        fresh = make_partitioner("round_robin", num_subpartitions=n, seed=2)
        counts = np.bincount(fresh.assign(batch_of(x=list(range(rows)))), minlength=n)
        assert counts.max() - counts.min() <= 1
    starts = {
        int(make_partitioner("round_robin", num_subpartitions=n, seed=s).assign(batch_of(x=[0]))[0])
        for s in range(30)
    }
    assert len(starts) > 1


def test_random_is_reproducible_with_a_seed() -> None:
    batch = batch_of(x=list(range(5000)))
    a = make_partitioner("random", num_subpartitions=6, seed=5).assign(batch)
    b = make_partitioner("random", num_subpartitions=6, seed=5).assign(batch)
    c = make_partitioner("random", num_subpartitions=6, seed=6).assign(batch)
    assert np.array_equal(a, b) and not np.array_equal(a, c)
    counts = np.bincount(a, minlength=6)
    assert a.min() >= 0 and a.max() < 6 and counts.min() > 700


def test_rescale_subsets_follow_flinks_pointwise_edges() -> None:
    # Hand-computed: 2 producers, 5 consumers: producer 0 -> {0,1,2}, producer 1 -> {3,4}.
    assert [rescale_targets(i, 2, 5) for i in range(2)] == [range(0, 3), range(3, 5)]
    # 4 producers, 2 consumers: consumer j reads producers [2j, 2j+2).
    assert [rescale_targets(i, 4, 2) for i in range(4)] == [range(0, 1)] * 2 + [range(1, 2)] * 2
    assert [rescale_targets(i, 3, 3) for i in range(3)] == [range(i, i + 1) for i in range(3)]


@given(st.integers(1, 40), st.integers(1, 40))
@settings(max_examples=80, deadline=None)
def test_rescale_subsets_cover_every_subpartition(producers: int, n: int) -> None:
    subsets = [rescale_targets(i, producers, n) for i in range(producers)]
    if producers <= n:
        assert [s for subset in subsets for s in subset] == list(range(n))
    else:
        # Each consumer j reads producers [j*P//N, (j+1)*P//N) under Flink's pointwise edge.
        for j in range(n):
            readers = [i for i, subset in enumerate(subsets) if j in subset]
            assert readers == list(range(j * producers // n, (j + 1) * producers // n))


def test_rescale_cycles_over_its_subset_across_batches() -> None:
    p = make_partitioner("rescale", num_subpartitions=10, producer_index=1, num_producers=3)
    targets = rescale_targets(1, 3, 10)
    ids = np.concatenate([p.assign(batch_of(x=list(range(k)))) for k in (2, 5, 1, 9)])
    assert ids.tolist() == [targets[i % len(targets)] for i in range(len(ids))]
    assert p.spec()["targets"] == [targets.start, targets.stop]


def test_forward_and_global() -> None:
    batch = batch_of(x=list(range(9)))
    assert make_partitioner("global", num_subpartitions=4).assign(batch).tolist() == [0] * 9
    fwd = make_partitioner("forward", num_subpartitions=4, producer_index=3)
    assert fwd.assign(batch).tolist() == [3] * 9
    with pytest.raises(ash.InvalidOptionError, match=r"\[0, 4\).*rescale"):
        make_partitioner("forward", num_subpartitions=4, producer_index=4)


def test_broadcast_rows_are_stored_once_and_read_by_every_subpartition(tmp_path: Path) -> None:
    table = pa.table({"id": pa.array(range(300), pa.int64())})
    p = make_partitioner("broadcast", num_subpartitions=6)
    assert p.broadcast
    f = write_file(tmp_path / "b.arrow", table, p, 6)
    assert f.num_rows == 300
    with pa.ipc.open_file(tmp_path / "b.arrow") as data:
        assert data.read_all().num_rows == 300  # stored once, not six times
    for s in range(6):
        assert f.read(s).column("id").to_pylist() == list(range(300))
    assert f.partitioner == {"name": "broadcast", "num_subpartitions": 6}
    with pytest.raises(ash.InvalidOptionError, match="every subpartition"):
        BroadcastPartitioner(6).assign(table.to_batches()[0])


# --------------------------------------------------------------------------- column


def test_column_partitioner_takes_ids_from_a_column(tmp_path: Path) -> None:
    ids = [3, 0, 2, 2, 1, 0, 3]
    table = pa.table({"id": pa.array(range(7), pa.int64()), "pid": pa.array(ids, pa.uint8())})
    f = write_file(
        tmp_path / "c.arrow", table, make_partitioner("column", num_subpartitions=4, by="pid"), 4
    )
    where = ids_by_reading(f)
    assert [where[i] for i in range(7)] == ids
    assert f.partitioner == {"name": "column", "column": "pid", "num_subpartitions": 4}


@pytest.mark.parametrize("form", ["run-end encoded", "dictionary", "extension"])
def test_column_partitioner_takes_encoded_ids_as_write_takes_them(
    tmp_path: Path, form: str
) -> None:
    ids = [3, 0, 2, 2, 1, 0, 3, 1, 1]
    plain = pa.array(ids, pa.int16())
    encoded = {
        "run-end encoded": lambda: pc.run_end_encode(plain),
        "dictionary": lambda: plain.dictionary_encode(),
        "extension": lambda: pa.ExtensionArray.from_storage(
            pa.opaque(pa.int16(), "id", "x"), plain
        ),
    }[form]()
    data = pa.table({"id": pa.array(range(len(ids)), pa.int64())})
    # The column partitioner reads the ids from the batch (a run-end encoded column is stored
    # as it is; the writer refuses dictionary columns, so that one is assigned directly).
    p = make_partitioner("column", num_subpartitions=4, by="pid")
    assert p.assign(data.append_column("pid", encoded)).tolist() == ids
    if form == "run-end encoded":
        f = write_file(tmp_path / "c.arrow", data.append_column("pid", encoded), p, 4)
        where = ids_by_reading(f)
        assert [where[i] for i in range(len(ids))] == ids
    # write() takes the same array as ids; both refuse the same bad ids alike.
    with ash.ShuffleFileWriter(tmp_path / "w.arrow", data.schema, 4) as w:
        w.write(data, subpartitions=encoded)
    assert [ids_by_reading(ash.open_file(tmp_path / "w.arrow"))[i] for i in range(len(ids))] == ids
    bad = pa.array([0, 1, 5], pa.int16())
    with pytest.raises(ash.InvalidOptionError, match=r"must be in \[0, 4\), found 5 at row 2"):
        p.assign(pa.table({"pid": pc.run_end_encode(bad)}))
    with (
        pytest.raises(ash.InvalidOptionError, match=r"must be in \[0, 4\), found 5 at row 2"),
        ash.ShuffleFileWriter(tmp_path / "x.arrow", data.schema, 4) as w,
    ):
        w.write(data.slice(0, 3), subpartitions=pc.run_end_encode(bad))


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ([0, 1, 7, 2], r"ids in column 'pid' must be in \[0, 4\), found 7 at row 2"),
        ([0, -1], r"ids in column 'pid' must be in \[0, 4\), found -1 at row 1"),
        ([0, None, 1], r"ids in column 'pid' must not contain nulls, found one at row 1"),
    ],
)
def test_column_partitioner_rejects_bad_ids(values: list[int | None], message: str) -> None:
    p = make_partitioner("column", num_subpartitions=4, by="pid")
    with pytest.raises(ash.InvalidOptionError, match=message):
        p.assign(batch_of(pid=pa.array(values, pa.int32())))


def test_column_partitioner_needs_integers() -> None:
    p = make_partitioner("column", num_subpartitions=4, by="pid")
    with pytest.raises(
        ash.InvalidOptionError, match=r"ids in column 'pid' must be integers, found type double"
    ):
        p.assign(batch_of(pid=pa.array([1.0])))
    with pytest.raises(ash.InvalidOptionError, match=r"needs column 'pid'.*'other'"):
        p.assign(batch_of(other=[1]))


# --------------------------------------------------------------------------- registry and specs


def test_registry_errors_list_the_valid_choices() -> None:
    with pytest.raises(ash.InvalidOptionError) as unknown:
        make_partitioner("hashh", num_subpartitions=2)
    assert all(name in str(unknown.value) for name in PARTITIONER_NAMES)
    with pytest.raises(
        ash.InvalidOptionError, match="does not take colour; its options are by, seed"
    ):
        make_partitioner("hash", num_subpartitions=2, by="k", colour="red")
    with pytest.raises(ash.InvalidOptionError, match="needs by"):
        make_partitioner("hash", num_subpartitions=2)
    with pytest.raises(ash.InvalidOptionError, match="options are none"):
        make_partitioner("global", num_subpartitions=2, by="k")
    with pytest.raises(ash.InvalidOptionError, match="num_subpartitions"):
        make_partitioner("global", num_subpartitions=0)
    with pytest.raises(ash.InvalidOptionError, match="written for 4 subpartitions, asked for 8"):
        partitioner_from_spec({"name": "global", "num_subpartitions": 4}, 8)
    with pytest.raises(ash.InvalidOptionError, match="'columns' as a list"):
        partitioner_from_spec({"name": "hash", "columns": "k"}, 4)


RECOMPUTABLE_CASES: list[tuple[str, dict[str, Any]]] = [
    ("hash", {"by": ["k", "s"]}),
    ("key_group", {"by": "s"}),
    ("range", {"by": "k"}),
    ("range", {"by": "s"}),
    ("column", {"by": "pid"}),
    ("forward", {"producer_index": 2}),
    ("global", {}),
]


@pytest.mark.parametrize(("name", "options"), RECOMPUTABLE_CASES)
def test_spec_round_trips_through_a_written_file(
    tmp_path: Path, name: str, options: dict[str, Any]
) -> None:
    n = 5
    table = key_table(200).append_column("pid", pa.array(np.arange(200) % n, pa.int16()))
    p = make_partitioner(name, num_subpartitions=n, **options)
    f = write_file(tmp_path / "s.arrow", table, p, n)
    assert f.partitioner == p.spec()
    assert is_recomputable(f.partitioner)
    # Every row lies in the subpartition the stored spec assigns it (what validate --deep checks).
    for s in range(n):
        part = f.read(s)
        if part.num_rows:
            recomputed = recompute_subpartitions(f.partitioner, part.to_batches()[0], n)
            assert recomputed is not None
            assert set(recomputed.tolist()) == {s}
            whole = recompute_subpartitions(
                f.partitioner, pa.Table.from_batches(part.to_batches()), n
            )
            assert whole is not None and set(whole.tolist()) == {s}


@pytest.mark.parametrize(
    ("name", "options"),
    [("round_robin", {"seed": 1}), ("random", {"seed": 1}), ("rescale", {"num_producers": 2})],
)
def test_stateful_specs_are_not_recomputable(
    tmp_path: Path, name: str, options: dict[str, Any]
) -> None:
    table = key_table(100)
    p = make_partitioner(name, num_subpartitions=4, **options)
    f = write_file(tmp_path / "s.arrow", table, p, 4)
    assert f.partitioner == p.spec()
    assert recompute_subpartitions(f.partitioner, table.to_batches()[0], 4) is None
    rebuilt = partitioner_from_spec(f.partitioner, 4)
    assert rebuilt.spec() == p.spec()
    assert recompute_subpartitions({"name": "explicit"}, table.to_batches()[0], 4) is None
    assert recompute_subpartitions({"name": "broadcast"}, table.to_batches()[0], 4) is None


def test_spec_with_an_unknown_name_is_refused() -> None:
    with pytest.raises(ash.InvalidOptionError, match="unknown partitioner 'zigzag'"):
        recompute_subpartitions({"name": "zigzag"}, batch_of(x=[1]), 4)
    with pytest.raises(ash.InvalidOptionError, match="explicit"):
        partitioner_from_spec({"name": "explicit"}, 4)


def test_writer_rejects_partitioner_ids_out_of_range(tmp_path: Path) -> None:
    class Broken:
        broadcast = False

        def spec(self) -> dict[str, Any]:
            return {"name": "broken"}

        def assign(self, batch: pa.RecordBatch) -> np.ndarray:
            return np.full(batch.num_rows, 9)

    with ash.ShuffleFileWriter(
        tmp_path / "x.arrow", pa.schema([("x", pa.int64())]), 4, partitioner=Broken()
    ) as w:
        with pytest.raises(ash.InvalidOptionError, match=r"must be in \[0, 4\), found 9 at row 0"):
            w.write(batch_of(x=[1, 2]))
        w.abort()


def test_partitioners_assign_chunked_tables() -> None:
    table = pa.concat_tables([key_table(50, seed=1), key_table(70, seed=2)])
    assert table.column("k").num_chunks == 2
    p = make_partitioner("hash", num_subpartitions=9, by="k")
    expected = p.assign(table.combine_chunks().to_batches()[0])
    assert p.assign(table).tolist() == expected.tolist()
    assert pc.max(pa.array(expected)).as_py() < 9
