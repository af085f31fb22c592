"""Co-grouped reads: compatibility checks, plans, and results equal to whole-dataset computations.

Every computation done task by task over :func:`arrowshuffle.cogroup` is compared with the same
computation over the whole inputs with pyarrow (the oracle never goes through the co-grouped
path).
"""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import arrowshuffle as ash
from arrowshuffle.format.copartition import Alignment
from arrowshuffle.format.partitioners import make_partitioner
from arrowshuffle.readers.balance import SubpartitionSizes
from arrowshuffle.readers.cogroup_plan import InputSizes, plan_cogroup, task_reads

KEYS = 500


def tables(seed: int, rows: int = 6000, hot_share: float = 1 / 3) -> tuple[pa.Table, pa.Table]:
    """``orders`` (one row per key) and ``lines`` (many per key, a share of them on key 7)."""
    rng = np.random.default_rng(seed)
    orders = pa.table(
        {
            "o_key": np.arange(KEYS, dtype=np.int64),
            "o_cat": pa.array(rng.integers(0, 4, KEYS)).cast(pa.string()),
        }
    )
    keys = rng.integers(-20, KEYS, rows)  # some keys without an order (for outer joins)
    keys[: int(rows * hot_share)] = 7
    keys = rng.permutation(keys)  # the hot key in every file
    lines = pa.table(
        {
            "l_key": keys.astype(np.int64),
            "l_id": np.arange(rows, dtype=np.int64),
            "l_val": rng.random(rows),
            "l_note": pa.array([f"n{i % 13}" for i in range(rows)]),
        }
    )
    return orders, lines


def write(table: pa.Table, path: Path, n: int, by: str, files: int = 1, **options: Any) -> str:
    """``table`` as a hash-partitioned dataset of ``files`` files."""
    step = -(-table.num_rows // files)
    for i in range(files):
        ash.write_dataset(
            table.slice(i * step, step),
            path,
            num_subpartitions=n,
            partitioner=options.pop("partitioner", "hash") if i == 0 else "hash",
            by=[by],
            mode="error" if i == 0 else "append",
            **options,
        )
    return str(path)


def sort(table: pa.Table) -> pa.Table:
    return table.sort_by([(c, "ascending") for c in table.column_names])


def joined(groups: ash.CoGroup, join_type: str = "inner") -> pa.Table:
    parts = [t["l"].join(t["o"], "l_key", "o_key", join_type=join_type) for t in groups]
    return pa.concat_tables(parts)


# ------------------------------------------------------------------------ compatibility


def test_keys_of_other_names_and_narrower_ints_co_group(tmp_path: Path) -> None:
    orders, lines = tables(1)
    orders = orders.set_column(0, "o_key", orders["o_key"].cast(pa.int32()))
    o = write(orders, tmp_path / "o", 8, "o_key")
    ln = write(
        lines.set_column(0, "l_key", lines["l_key"].cast(pa.int16())), tmp_path / "l", 8, "l_key"
    )
    groups = ash.cogroup({"l": ln, "o": o})
    got = pa.concat_tables(
        t["l"]
        .cast(t["l"].schema.set(0, pa.field("l_key", pa.int32())))
        .join(t["o"], "l_key", "o_key")
        for t in groups
    )
    expected = lines.set_column(0, "l_key", lines["l_key"].cast(pa.int32())).join(
        orders, "l_key", "o_key"
    )
    assert got.num_rows == expected.num_rows > 0
    assert sort(got).equals(sort(expected.select(got.column_names)))


def test_int32_and_int64_keys_hash_apart() -> None:
    # Why the check exists: equal values of the two types land in different subpartitions.
    values = np.arange(1000)
    by32 = make_partitioner("hash", num_subpartitions=16, by=["k"]).assign(
        pa.record_batch({"k": pa.array(values, pa.int32())})
    )
    by64 = make_partitioner("hash", num_subpartitions=16, by=["k"]).assign(
        pa.record_batch({"k": pa.array(values, pa.int64())})
    )
    assert (by32 != by64).mean() > 0.5


def test_int32_and_int64_keys_are_refused_naming_both(tmp_path: Path) -> None:
    orders, lines = tables(2)
    orders = orders.set_column(0, "o_key", orders["o_key"].cast(pa.int32()))
    o = write(orders, tmp_path / "o", 8, "o_key")
    ln = write(lines, tmp_path / "l", 8, "l_key")
    with pytest.raises(ash.PartitioningMismatchError) as caught:
        ash.cogroup({"l": ln, "o": o})
    message = str(caught.value)
    assert "'l' and 'o' are not co-partitioned" in message
    assert "l_key: int64" in message and "o_key: int32" in message
    assert "as long" in message and "as int" in message
    assert isinstance(caught.value, ash.InvalidOptionError)


@pytest.mark.parametrize("partitioner", ["hash", "key_group"])
def test_the_same_key_columns_in_another_order_are_refused(
    tmp_path: Path, partitioner: str
) -> None:
    """Keys match by position: (a, b) against (b, a) would pair a with b, and a join on a
    and b would silently lose most matches in a co-grouped task."""
    rows = np.arange(2500)
    left = pa.table({"lid": rows, "a": rows // 50, "b": rows % 50})
    right = left.rename_columns(["rid", "a", "b"])
    by_ab = make_partitioner(partitioner, num_subpartitions=8, by=["a", "b"])
    by_ba = make_partitioner(partitioner, num_subpartitions=8, by=["b", "a"])
    assert (by_ab.assign(left.to_batches()[0]) != by_ba.assign(left.to_batches()[0])).any()
    ln = tmp_path / "l"
    rt = tmp_path / "r"
    ash.write_dataset(left, ln, num_subpartitions=8, partitioner=by_ab)
    ash.write_dataset(right, rt, num_subpartitions=8, partitioner=by_ba)
    with pytest.raises(ash.PartitioningMismatchError, match="same columns in another order"):
        ash.cogroup({"l": ln, "r": rt})
    # Names that differ still match by position.
    renamed = right.rename_columns(["rid", "x", "y"])
    by_xy = make_partitioner(partitioner, num_subpartitions=8, by=["x", "y"])
    ash.write_dataset(renamed, tmp_path / "x", num_subpartitions=8, partitioner=by_xy)
    assert ash.cogroup({"l": ln, "x": tmp_path / "x"}) is not None


@pytest.mark.parametrize(
    ("other", "why"),
    [
        ({"partitioner": "hash", "seed": 7}, "seed"),
        ({"partitioner": "key_group"}, "partitioners differ"),
        ({"partitioner": "round_robin"}, "does not place rows by"),
    ],
)
def test_other_placements_are_refused(tmp_path: Path, other: dict[str, Any], why: str) -> None:
    orders, lines = tables(3)
    o = write(orders, tmp_path / "o", 8, "o_key")
    options = dict(other)
    name = options.pop("partitioner")
    extra = {} if name == "round_robin" else {"by": ["l_key"]}
    ash.write_dataset(
        lines, tmp_path / "l", num_subpartitions=8, partitioner=name, **extra, **options
    )
    with pytest.raises(ash.PartitioningMismatchError, match=why):
        ash.cogroup({"o": o, "l": tmp_path / "l"})


def test_counts_that_do_not_divide_are_refused(tmp_path: Path) -> None:
    orders, lines = tables(4)
    o = write(orders, tmp_path / "o", 8, "o_key")
    ln = write(lines, tmp_path / "l", 12, "l_key")
    with pytest.raises(
        ash.PartitioningMismatchError, match="12 subpartitions are not a multiple of 8"
    ):
        ash.cogroup({"l": ln, "o": o})


def test_range_inputs_need_the_same_boundaries(tmp_path: Path) -> None:
    orders, lines = tables(5)
    for name, table, key, bounds in (
        ("o", orders, "o_key", [100, 300]),
        ("l", lines, "l_key", [100, 300]),
        ("l2", lines, "l_key", [100, 301]),
    ):
        ash.write_dataset(
            table,
            tmp_path / name,
            num_subpartitions=3,
            partitioner="range",
            by=key,
            boundaries=bounds,
        )
    groups = ash.cogroup({"l": tmp_path / "l", "o": tmp_path / "o"})
    expected = lines.join(orders, "l_key", "o_key", join_type="inner")
    assert sort(joined(groups)).equals(sort(expected.select(joined(groups).column_names)))
    with pytest.raises(ash.PartitioningMismatchError, match="boundaries differ"):
        ash.cogroup({"l": tmp_path / "l2", "o": tmp_path / "o"})


def test_bad_arguments_are_named(tmp_path: Path) -> None:
    orders, lines = tables(6)
    o = write(orders, tmp_path / "o", 4, "o_key")
    ln = write(lines, tmp_path / "l", 4, "l_key")
    with pytest.raises(ash.InvalidOptionError, match="non-empty dict"):
        ash.cogroup({})
    with pytest.raises(ash.InvalidOptionError, match="'x' is not one of 'l', 'o'"):
        ash.cogroup({"l": ln, "o": o}, columns={"x": ["a"]})
    with pytest.raises(ash.InvalidOptionError, match="no column 'nope'"):
        ash.cogroup({"l": ln, "o": o}, columns={"l": ["nope"]})
    with pytest.raises(ash.InvalidOptionError, match="split names no input"):
        ash.cogroup({"l": ln, "o": o}, split="lines")
    with pytest.raises(ash.MissingObjectError):
        ash.cogroup({"l": ln, "o": tmp_path / "missing"})


# ------------------------------------------------------------------------ results


@settings(
    max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    seed=st.integers(0, 2**16),
    n_orders=st.sampled_from([4, 8]),
    factor=st.sampled_from([1, 2, 4]),
    files=st.integers(1, 5),
    target=st.sampled_from([1, 20_000, 200_000, None]),
    split=st.booleans(),
    hot=st.sampled_from([0.0, 1 / 3, 0.9]),
)
def test_joins_and_aggregations_equal_the_whole_computation(
    tmp_path_factory: pytest.TempPathFactory,
    seed: int,
    n_orders: int,
    factor: int,
    files: int,
    target: int | None,
    split: bool,
    hot: float,
) -> None:
    tmp = tmp_path_factory.mktemp("cogroup")
    orders, lines = tables(seed, rows=3000, hot_share=hot)
    o = write(orders, tmp / "o", n_orders, "o_key", files=2)
    ln = write(lines, tmp / "l", n_orders * factor, "l_key", files=files)
    options: dict[str, Any] = {"target_bytes": target, "skew_factor": 2.0}
    if split:
        options["split"] = "l"
    groups = ash.cogroup({"l": ln, "o": o}, **options)
    for join_type in ("inner", "left outer", "left semi", "left anti"):
        got = joined(groups, join_type)
        expected = lines.join(orders, "l_key", "o_key", join_type=join_type)
        assert sort(got).equals(sort(expected.select(got.column_names))), join_type
    if not split:  # an aggregation of the split input by key needs a second step
        parts = [
            t["l"].group_by("l_key").aggregate([("l_val", "sum"), ("l_id", "count")])
            for t in groups
        ]
        got = pa.concat_tables(parts)
        expected = lines.group_by("l_key").aggregate([("l_val", "sum"), ("l_id", "count")])
        assert got.num_rows == expected.num_rows  # each key in exactly one task
        assert np.allclose(
            sort(got)["l_val_sum"].to_numpy(),
            sort(expected.select(got.column_names))["l_val_sum"].to_numpy(),
        )
    # Every line read exactly once over all tasks, every group of the orders at least once.
    ids = pa.concat_arrays([t["l"]["l_id"].combine_chunks() for t in groups]).to_numpy()
    assert np.array_equal(np.sort(ids), np.arange(lines.num_rows))


def test_a_hot_key_is_split_over_the_files_of_the_split_input(tmp_path: Path) -> None:
    orders, lines = tables(8, rows=40_000, hot_share=1 / 3)
    o = write(orders, tmp_path / "o", 16, "o_key")
    ln = write(lines, tmp_path / "l", 32, "l_key", files=12)
    plain = ash.cogroup({"l": ln, "o": o}, target_bytes="64KiB")
    groups = ash.cogroup({"l": ln, "o": o}, target_bytes="64KiB", split="l")
    hot_group = int(
        make_partitioner("hash", num_subpartitions=16, by=["k"]).assign(
            pa.record_batch({"k": pa.array([7], pa.int64())})
        )[0]
    )
    pieces = [t for t in groups.tasks if t.split == "l"]
    assert len(pieces) >= 4 and all(t.groups == range(hot_group, hot_group + 1) for t in pieces)
    files = [r.file for t in pieces for r in t.pieces]
    assert sorted(files) == list(range(12))  # disjoint, and all of them
    assert all(not t.pieces or t.split for t in groups.tasks)
    biggest = lambda g: max(t.bytes for t in g.tasks)  # noqa: E731
    assert biggest(groups) < biggest(plain) / 2
    assert sort(joined(groups)).equals(sort(joined(plain)))


def test_columns_pickling_versions_and_map(tmp_path: Path) -> None:
    orders, lines = tables(9)
    o = write(orders, tmp_path / "o", 8, "o_key")
    ln = write(lines, tmp_path / "l", 8, "l_key", files=3)
    groups = ash.cogroup({"l": ln, "o": o}, columns={"l": ["l_key", "l_val"]}, target_bytes=10_000)
    assert len(groups) > 1
    first = groups.read(0)
    assert first["l"].column_names == ["l_key", "l_val"]
    assert first["o"].column_names == ["o_key", "o_cat"]
    # Appended after planning: a task reads the versions it was planned on.
    write_more = lines.slice(0, 500)
    ash.write_dataset(
        write_more, ln, num_subpartitions=8, partitioner="hash", by=["l_key"], mode="append"
    )
    shipped = pickle.loads(pickle.dumps(groups))
    total = sum(shipped.read(i)["l"].num_rows for i in range(len(shipped)))
    assert total == lines.num_rows
    sequential = [t["l"].num_rows for t in groups]
    assert list(groups.map(lambda t: t["l"].num_rows, threads=3)) == sequential
    with pytest.raises(ash.InvalidOptionError, match="threads"):
        list(groups.map(len, threads=0))
    with pytest.raises(ash.InvalidOptionError, match="does not exist"):
        groups.read(len(groups))


def test_a_task_of_another_plan_is_refused(tmp_path: Path) -> None:
    """A task names groups and, when split, file positions of the versions it was planned on:
    read by a co-group of other versions it would give other rows, with no sign."""
    orders, lines = tables(4)
    o = write(orders, tmp_path / "o", 8, "o_key")
    ln = write(lines, tmp_path / "l", 8, "l_key", files=3)
    before = ash.cogroup({"l": ln, "o": o}, target_bytes=10_000)
    ash.write_dataset(
        lines.slice(0, 3000),
        ln,
        num_subpartitions=8,
        partitioner="hash",
        by=["l_key"],
        mode="append",
    )
    after = ash.cogroup({"l": ln, "o": o}, target_bytes=10_000)
    foreign = [t for t in before.tasks if t not in after.tasks]
    assert foreign  # the appended file changes the plan
    for task in foreign:
        with pytest.raises(ash.InvalidOptionError, match="not one of this co-group's plan"):
            after.read(task)
    # Its own tasks, as objects or indexes, read together every row of its versions.
    assert sum(after.read(t)["l"].num_rows for t in after.tasks) == lines.num_rows + 3000
    assert sum(before.read(t)["l"].num_rows for t in before.tasks) == lines.num_rows


def test_plan_over_object_storage_equals_local(
    tmp_path: Path, s3_bucket: str, s3_endpoint: Any
) -> None:
    orders, lines = tables(10)
    options = s3_endpoint.storage_options()
    for name, table, key in (("o", orders, "o_key"), ("l", lines, "l_key")):
        write(table, tmp_path / name, 8, key)
        ash.write_dataset(
            table,
            f"{s3_bucket}/{name}",
            num_subpartitions=8,
            partitioner="hash",
            by=[key],
            storage_options=options,
        )
    local = ash.cogroup({"l": tmp_path / "l", "o": tmp_path / "o"}, target_bytes=20_000)
    remote = ash.cogroup(
        {"l": f"{s3_bucket}/l", "o": f"{s3_bucket}/o"}, target_bytes=20_000, storage_options=options
    )
    assert [t.groups for t in remote.tasks] == [t.groups for t in local.tasks]
    assert sort(joined(remote)).equals(sort(joined(local)))
    assert sum(ds.read_stats().requests for ds in remote.inputs.values()) > 0


# ------------------------------------------------------------------------ plans (pure)


def _sizes(rng: np.random.Generator, n: int, files: int, regions: int) -> InputSizes:
    per = rng.integers(0, 1000, (files, regions, n))
    per[:, :, 0] *= 40  # a hot subpartition

    def sizes_of(s: int) -> SubpartitionSizes:
        return SubpartitionSizes(
            [per[f, :, s] for f in range(files)], [per[f, :, s] for f in range(files)]
        )

    total = per.sum(axis=(0, 1))
    return InputSizes(total, total, files, sizes_of)


@settings(max_examples=200, deadline=None)
@given(
    seed=st.integers(0, 2**16),
    m=st.integers(1, 12),
    factor=st.sampled_from([1, 2, 3]),
    files=st.tuples(st.integers(0, 5), st.integers(1, 5)),
    regions=st.integers(1, 3),
    target=st.integers(1, 50_000),
    split=st.sampled_from([None, "a", "b"]),
)
def test_every_chunk_is_read_once_or_by_each_piece_of_a_split(
    seed: int,
    m: int,
    factor: int,
    files: tuple[int, int],
    regions: int,
    target: int,
    split: str | None,
) -> None:
    rng = np.random.default_rng(seed)
    inputs = {
        "a": _sizes(rng, m, files[0], regions),
        "b": _sizes(rng, m * factor, files[1], regions),
    }
    alignment = Alignment(m, {"a": 1, "b": factor})
    tasks = plan_cogroup(
        alignment, inputs, target_bytes=target, split=split, skew_factor=2.0, skew_min_bytes=0
    )
    assert [t.index for t in tasks] == list(range(len(tasks)))
    covered = [g for t in tasks for g in t.groups if t.split is None]
    split_groups = sorted({g for t in tasks if t.split for g in t.groups})
    assert sorted(covered + split_groups) == list(range(m))
    for name, sizes in inputs.items():
        count: dict[tuple[int, int, int], int] = {}
        for t in tasks:
            subs = set(alignment.subpartitions(name, t.groups))
            for r in task_reads(t, name, alignment, sizes.num_files):
                assert set(r.subpartitions) == subs
                for region in r.regions or range(regions):
                    for s in subs:
                        count[(r.file, region, s)] = count.get((r.file, region, s), 0) + 1
        every = {
            (f, r, s)
            for f in range(sizes.num_files)
            for r in range(regions)
            for s in range(m * alignment.factors[name])
        }
        assert set(count) == every
        for (_, _, s), times in count.items():
            pieces = sum(1 for t in tasks if t.split and s % m in t.groups)
            assert times == (1 if name == split or not pieces else pieces)
