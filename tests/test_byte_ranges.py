"""Byte ranges of a read: selections into runs, runs into chunk ranges, ranges into fetch blocks."""

from __future__ import annotations

import itertools
from collections.abc import Iterable

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from arrowshuffle.format.errors import InvalidOptionError
from arrowshuffle.format.index import ENTRY_DTYPE
from arrowshuffle.readers.byte_ranges import (
    Chunk,
    ChunkRange,
    coalesce,
    dedupe_broadcast,
    merge_ranges,
    plan_run,
    subpartition_runs,
)

# --------------------------------------------------------------------------- subpartition_runs


@pytest.mark.parametrize(
    ("selection", "expected"),
    [
        (3, [range(3, 4)]),
        (np.int32(0), [range(0, 1)]),
        (range(2, 7), [range(2, 7)]),
        (range(0, 10), [range(0, 10)]),
        (range(4, 4), []),
        (range(0, 10, 3), [range(0, 1), range(3, 4), range(6, 7), range(9, 10)]),
        (range(5, 0, -1), [range(1, 6)]),
        ([], []),
        ([7, 1, 2, 2, 3, 9, 8], [range(1, 4), range(7, 10)]),
        ((5,), [range(5, 6)]),
        ({4, 0, 1}, [range(0, 2), range(4, 5)]),
        (iter([6, 5]), [range(5, 7)]),
        (np.array([9, 0, 1, 5], dtype=np.uint8), [range(0, 2), range(5, 6), range(9, 10)]),
    ],
)
def test_runs_are_sorted_disjoint_and_contiguous(selection: object, expected: list[range]) -> None:
    assert subpartition_runs(selection, 10) == expected  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("selection", "message"),
    [
        (10, "subpartition 10 does not exist.*0..9"),
        (-1, "subpartition -1 does not exist"),
        (range(8, 12), "subpartition 11 does not exist"),
        (range(-2, 3), "subpartition -2 does not exist"),
        ([1, 2, 99], "subpartition 99 does not exist"),
        (True, "integers"),
        ([1, True], "integers"),
        ([1.0, 2.0], "integers"),
        (["1"], "integers"),
        ("12", "integers"),
        ([None], "integers"),
    ],
)
def test_bad_selections_are_refused(selection: object, message: str) -> None:
    with pytest.raises(InvalidOptionError, match=message) as info:
        subpartition_runs(selection, 10)  # type: ignore[arg-type]
    assert isinstance(info.value, ValueError)


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 60).flatmap(lambda n: st.tuples(st.just(n), st.lists(st.integers(0, n - 1)))))
def test_runs_cover_exactly_the_selection(case: tuple[int, list[int]]) -> None:
    num_subpartitions, chosen = case
    runs = subpartition_runs(chosen, num_subpartitions)
    covered = [s for run in runs for s in run]
    assert covered == sorted(set(chosen))
    # Maximal runs: two runs never touch.
    for before, after in itertools.pairwise(runs):
        assert after.start > before.stop
    assert all(run.step == 1 and len(run) > 0 for run in runs)


# --------------------------------------------------------------------------- plan_run


def region_layout(
    rng: np.random.Generator,
    num_subpartitions: int,
    num_regions: int,
    broadcast: set[int],
) -> np.ndarray:
    """Entries of a well-formed file: chunks contiguous in subpartition order, some empty.

    An empty chunk sits where the next chunk starts (its offset is the running position).
    """
    entries = np.zeros((num_subpartitions, num_regions), dtype=ENTRY_DTYPE)
    position = 64
    for r in range(num_regions):
        if r in broadcast:
            length = int(rng.integers(8, 500))
            entries[:, r] = (position, length, int(rng.integers(1, 50)), 2, 1234 + r)
            position += length
            continue
        for s in range(num_subpartitions):
            length = int(rng.integers(0, 3) > 0) * int(rng.integers(8, 500))
            rows = int(rng.integers(1, 50)) if length else 0
            batches = int(rng.integers(1, 4)) if length else 0
            entries[s, r] = (position, length, rows, batches, int(rng.integers(0, 2**32)))
            position += length
        position += int(rng.integers(0, 64))  # footer bytes or alignment between regions
    return entries


@settings(max_examples=150, deadline=None)
@given(
    num_subpartitions=st.integers(1, 12),
    num_regions=st.integers(0, 8),
    seed=st.integers(0, 2**32 - 1),
    data=st.data(),
)
def test_plan_run_byte_range_is_the_union_of_the_chunks(
    num_subpartitions: int, num_regions: int, seed: int, data: st.DataObject
) -> None:
    rng = np.random.default_rng(seed)
    broadcast = data.draw(st.sets(st.integers(0, max(num_regions - 1, 0)), max_size=num_regions))
    broadcast &= set(range(num_regions))
    entries = region_layout(rng, num_subpartitions, num_regions, broadcast)
    start = data.draw(st.integers(0, num_subpartitions - 1))
    stop = data.draw(st.integers(start + 1, num_subpartitions))
    run = range(start, stop)
    mask = np.array([r in broadcast for r in range(num_regions)], dtype=bool)
    planned = plan_run(entries[start:stop], mask, run)

    expected_regions = []
    for r in range(num_regions):
        column = entries[start:stop, r]
        present = column[column["length"] > 0]
        if len(present) == 0:
            continue
        expected_regions.append(r)
        cr = next(c for c in planned if c.region == r)
        assert (cr.start, cr.stop) == (start, stop)
        if r in broadcast:
            # One chunk, read once, handed out once per subpartition of the run.
            e = column[0]
            assert (cr.offset, cr.length, cr.rows) == (e["offset"], e["length"], e["rows"])
            assert cr.broadcast and cr.repeat == len(run)
            (chunk,) = cr.chunks
            assert (chunk.offset, chunk.length, chunk.rows, chunk.batches, chunk.crc32c) == (
                e["offset"],
                e["length"],
                e["rows"],
                e["batches"],
                e["crc32c"],
            )
            continue
        union_start = int(present["offset"].min())
        union_end = int((present["offset"] + present["length"]).max())
        assert (cr.offset, cr.end) == (union_start, union_end)
        assert cr.length == int(present["length"].sum())  # no holes inside a run
        assert cr.rows == int(column["rows"].sum())
        assert cr.batches == int(column["batches"].sum())
        assert not cr.broadcast and cr.repeat == 1
        assert [c.offset for c in cr.chunks] == present["offset"].tolist()
        assert [c.length for c in cr.chunks] == present["length"].tolist()
        assert [c.rows for c in cr.chunks] == present["rows"].tolist()
        assert [c.batches for c in cr.chunks] == present["batches"].tolist()
        assert [c.crc32c for c in cr.chunks] == present["crc32c"].tolist()
        have = np.flatnonzero(column["length"] > 0) + start
        assert [c.subpartition for c in cr.chunks] == have.tolist()
    # Regions in order, one range each, none for regions where the run has no bytes.
    assert [c.region for c in planned] == expected_regions


def test_plan_run_without_regions() -> None:
    entries = np.zeros((3, 0), dtype=ENTRY_DTYPE)
    assert plan_run(entries, np.zeros(0, dtype=bool), range(0, 3)) == []


# --------------------------------------------------------------------------- coalesce


def chunk_range(
    offset: int, length: int, *, region: int = 0, broadcast: bool = False
) -> ChunkRange:
    return ChunkRange(
        region=region,
        start=0,
        stop=1,
        offset=offset,
        length=length,
        rows=1,
        batches=1,
        repeat=1,
        broadcast=broadcast,
        chunks=(Chunk(0, offset, length, 1, 1, 0),),
    )


@st.composite
def disjoint_ranges(draw: st.DrawFn) -> list[ChunkRange]:
    """Non-overlapping ranges (as chunks of one file are), in a shuffled order."""
    out = []
    position = 0
    for _ in range(draw(st.integers(0, 25))):
        position += draw(st.integers(0, 300))
        length = draw(st.integers(1, 400))
        out.append(chunk_range(position, length, region=len(out)))
        position += length
    return draw(st.permutations(out))


@settings(max_examples=300, deadline=None)
@given(
    ranges=disjoint_ranges(),
    max_gap=st.integers(0, 400),
    max_block=st.integers(1, 3000),
)
def test_coalesce_merges_neighbours_within_gap_and_block(
    ranges: list[ChunkRange], max_gap: int, max_block: int
) -> None:
    blocks = coalesce(ranges, max_gap=max_gap, max_block=max_block)
    # Every range exactly once, in file order.
    flat = [cr for block in blocks for cr in block.ranges]
    assert flat == sorted(ranges, key=lambda c: c.offset)
    for block in blocks:
        assert block.offset == block.ranges[0].offset
        assert block.end == max(cr.end for cr in block.ranges)
        if len(block.ranges) > 1:
            assert block.end - block.offset <= max_block
        for before, after in zip(block.ranges, block.ranges[1:], strict=False):
            assert after.offset - before.end <= max_gap
    # Maximal: the next block could not have joined the previous one.
    for before, after in itertools.pairwise(blocks):
        first = after.ranges[0]
        assert first.offset - before.end > max_gap or first.end - before.offset > max_block


def test_coalesce_examples() -> None:
    a, b, c = chunk_range(0, 100), chunk_range(150, 100), chunk_range(1000, 10)
    assert [len(block.ranges) for block in coalesce([c, b, a], max_gap=50)] == [2, 1]
    assert [len(block.ranges) for block in coalesce([a, b, c], max_gap=49)] == [1, 1, 1]
    assert [len(block.ranges) for block in coalesce([a, b, c], max_gap=10_000)] == [3]
    # max_block stops a merge; a single range larger than max_block still is one block.
    assert [len(block.ranges) for block in coalesce([a, b], max_gap=50, max_block=249)] == [1, 1]
    big = coalesce([chunk_range(0, 5000)], max_block=100)
    assert [(block.offset, block.end) for block in big] == [(0, 5000)]
    assert coalesce([]) == []


@settings(max_examples=300, deadline=None)
@given(
    spans=st.lists(
        st.tuples(st.integers(0, 5000), st.integers(0, 500)).map(lambda s: (s[0], s[0] + s[1])),
        max_size=20,
    ),
    max_gap=st.integers(0, 300),
)
def test_merge_ranges_covers_every_byte_once_and_leaves_gaps_wider_than_max_gap(
    spans: list[tuple[int, int]], max_gap: int
) -> None:
    merged = merge_ranges(spans, max_gap=max_gap)
    assert sorted(i for m in merged for i in m.members) == list(range(len(spans)))
    for m in merged:
        assert m.begin == min(spans[i][0] for i in m.members)
        assert m.end == max(spans[i][1] for i in m.members)
    for before, after in itertools.pairwise(merged):
        assert after.begin - before.end > max_gap
    # Overlapping or touching ranges always merge, whatever the gap allowed.
    assert len(merge_ranges([(0, 10), (5, 8), (10, 12)], max_gap=0)) == 1


def test_coalesce_keeps_a_shared_broadcast_chunk_once() -> None:
    # Two runs of a list read share the broadcast chunk of region 1 (after dedupe, one range).
    shared = chunk_range(100, 50, region=1, broadcast=True)
    ranges = dedupe_broadcast([chunk_range(0, 100), shared, shared, chunk_range(150, 10)])
    blocks = coalesce(ranges, max_gap=0)
    assert [(b.offset, b.end) for b in blocks] == [(0, 160)]
    assert [cr.repeat for cr in blocks[0].ranges] == [1, 2, 1]


# --------------------------------------------------------------------------- dedupe_broadcast


def repeats(ranges: Iterable[ChunkRange]) -> list[tuple[int, bool, int]]:
    return [(cr.offset, cr.broadcast, cr.repeat) for cr in ranges]


def test_dedupe_broadcast_adds_up_repeats_at_the_first_position() -> None:
    b1 = chunk_range(100, 10, broadcast=True)
    b2 = chunk_range(500, 10, broadcast=True)
    regular_a = chunk_range(0, 100)
    regular_b = chunk_range(0, 100)  # regular ranges are never folded, even if equal
    ranges = [
        regular_a,
        b1,
        regular_b,
        b1.__class__(**{**b1.__dict__, "repeat": 3, "start": 4, "stop": 7}),
        b2,
        b1,
    ]
    assert repeats(dedupe_broadcast(ranges)) == [
        (0, False, 1),
        (100, True, 5),
        (0, False, 1),
        (500, True, 1),
    ]


def test_dedupe_broadcast_without_broadcast_is_identity() -> None:
    ranges = [chunk_range(0, 10), chunk_range(10, 10), chunk_range(10, 10)]
    assert dedupe_broadcast(ranges) == ranges
    assert dedupe_broadcast([]) == []
