"""Balanced read plans (pure): every selected chunk exactly once, sizes within the target."""

from __future__ import annotations

import itertools
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from arrowshuffle.format.errors import InvalidOptionError
from arrowshuffle.readers.balance import (
    PlannedRead,
    SubpartitionSizes,
    plan_reads,
    skew_ratio,
)
from arrowshuffle.readers.byte_ranges import subpartition_runs


@st.composite
def layouts(draw: st.DrawFn) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Per file, a (regions x N) array of chunk bytes and one of rows, with hot spots."""
    n = draw(st.integers(1, 12))
    num_files = draw(st.integers(0, 6))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    hot = draw(st.lists(st.integers(0, n - 1), max_size=2))
    sizes, rows = [], []
    for _ in range(num_files):
        regions = int(rng.integers(0, 5))
        b = rng.integers(0, 100, (regions, n)) * rng.integers(0, 2, (regions, n))
        for s in hot:
            b[:, s] *= int(rng.integers(5, 60))
        r = np.where(b > 0, b // 3 + 1, 0)
        sizes.append(b.astype(np.int64))
        rows.append(r.astype(np.int64))
    return sizes, rows


def chunks_of(task: PlannedRead, sizes: list[np.ndarray]) -> list[tuple[int, int, int]]:
    out = []
    for f in task.files:
        regions = range(sizes[f].shape[0]) if task.regions is None else task.regions
        out.extend((f, r, s) for s in task.subpartitions for r in regions)
    return out


@settings(max_examples=300, deadline=None)
@given(
    layout=layouts(),
    target=st.integers(1, 400),
    skew_factor=st.sampled_from([1.5, 2.0, 5.0]),
    skew_min=st.integers(0, 300),
    max_tasks=st.one_of(st.none(), st.integers(1, 20)),
    data=st.data(),
)
def test_every_selected_chunk_is_planned_exactly_once(
    layout: tuple[list[np.ndarray], list[np.ndarray]],
    target: int,
    skew_factor: float,
    skew_min: int,
    max_tasks: int | None,
    data: st.DataObject,
) -> None:
    sizes, rows = layout
    n = sizes[0].shape[1] if sizes else data.draw(st.integers(1, 5))
    chosen = data.draw(st.sets(st.integers(0, n - 1), min_size=1))
    runs = subpartition_runs(chosen, n)
    per_s_bytes = sum((b.sum(axis=0) for b in sizes), np.zeros(n, dtype=np.int64))
    per_s_rows = sum((r.sum(axis=0) for r in rows), np.zeros(n, dtype=np.int64))
    asked: list[int] = []

    def sizes_of(s: int) -> SubpartitionSizes:
        asked.append(s)
        return SubpartitionSizes([b[:, s] for b in sizes], [r[:, s] for r in rows])

    tasks = plan_reads(
        per_s_bytes,
        per_s_rows,
        runs,
        len(sizes),
        sizes_of,
        target_bytes=target,
        skew_factor=skew_factor,
        skew_min_bytes=skew_min,
        max_tasks=max_tasks,
    )
    covered = Counter(c for t in tasks for c in chunks_of(t, sizes))
    expected = Counter(
        (f, r, s) for f in range(len(sizes)) for r in range(sizes[f].shape[0]) for s in chosen
    )
    assert covered == expected
    # Every task reads whole subpartitions of every file, or part of a split subpartition.
    for t in tasks:
        assert t.subpartitions.step == 1 and len(t.subpartitions) >= 1
        assert set(t.subpartitions) <= chosen
        if len(t.files) != len(sizes) or t.regions is not None:
            assert len(t.subpartitions) == 1 and t.subpartitions.start in asked
        got_bytes = sum(int(sizes[f][r, s]) for f, r, s in chunks_of(t, sizes))
        got_rows = sum(int(rows[f][r, s]) for f, r, s in chunks_of(t, sizes))
        assert (t.bytes, t.rows) == (got_bytes, got_rows)
    # Only subpartitions above both thresholds were looked at in detail.
    if chosen:
        median = float(np.median(per_s_bytes[sorted(chosen)]))
        for s in asked:
            assert per_s_bytes[s] > skew_factor * median and per_s_bytes[s] > skew_min


@settings(max_examples=200, deadline=None)
@given(layout=layouts(), target=st.integers(1, 400))
def test_coalesced_tasks_stay_within_the_target(
    layout: tuple[list[np.ndarray], list[np.ndarray]], target: int
) -> None:
    sizes, _ = layout
    if not sizes:
        return
    n = sizes[0].shape[1]
    per_s = sum((b.sum(axis=0) for b in sizes), np.zeros(n, dtype=np.int64))
    tasks = plan_reads(
        per_s,
        per_s,
        [range(n)],
        len(sizes),
        lambda s: SubpartitionSizes([b[:, s] for b in sizes], [b[:, s] for b in sizes]),
        target_bytes=target,
        skew_min_bytes=2**62,  # no splits
    )
    for a, b in itertools.pairwise(tasks):
        # Greedy: a task closes only when the next subpartition would not fit.
        assert a.bytes + int(per_s[b.subpartitions.start]) > target
    for t in tasks:
        assert t.bytes <= target or len(t.subpartitions) == 1


def test_a_hot_subpartition_is_split_over_files_and_regions() -> None:
    # 4 files x 2 regions x 4 subpartitions; subpartition 1 holds 1000 bytes per region.
    sizes = [np.array([[10, 1000, 10, 10], [10, 1000, 10, 10]]) for _ in range(4)]
    per_s = sum(b.sum(axis=0) for b in sizes)
    tasks = plan_reads(
        per_s,
        per_s,
        [range(4)],
        4,
        lambda s: SubpartitionSizes([b[:, s] for b in sizes], [b[:, s] for b in sizes]),
        target_bytes=1000,
        skew_factor=5.0,
        skew_min_bytes=100,
    )
    hot = [t for t in tasks if t.subpartitions == range(1, 2)]
    assert [(t.files, t.regions) for t in hot] == [
        ((f,), range(r, r + 1)) for f in range(4) for r in range(2)
    ]
    assert tasks[0].subpartitions == range(0, 1)
    assert tasks[-1].subpartitions == range(2, 4)
    before = skew_ratio([int(v) for v in per_s])
    after = skew_ratio([t.bytes for t in tasks])
    assert before is not None and after is not None and after < before


def test_max_tasks_grows_the_target() -> None:
    per_s = np.full(64, 10, dtype=np.int64)
    tasks = plan_reads(
        per_s,
        per_s,
        [range(64)],
        1,
        lambda s: SubpartitionSizes([], []),
        target_bytes=10,
        max_tasks=4,
    )
    assert len(tasks) <= 4
    assert [t.subpartitions.start for t in tasks] == sorted(t.subpartitions.start for t in tasks)


@pytest.mark.parametrize(
    "options",
    [{"target_bytes": 0}, {"skew_factor": 0}, {"skew_min_bytes": -1}, {"max_tasks": 0}],
)
def test_bad_options_are_refused(options: dict[str, int]) -> None:
    per_s = np.ones(4, dtype=np.int64)
    with pytest.raises(InvalidOptionError):
        plan_reads(per_s, per_s, [range(4)], 1, lambda s: SubpartitionSizes([], []), **options)
