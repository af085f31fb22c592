"""Consumer assignment: key-group ranges (all_to_all) and pointwise producer/consumer maps."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from arrowshuffle.format.errors import InvalidOptionError
from arrowshuffle.format.partitioners import key_group_range
from arrowshuffle.readers.assign import (
    assign,
    consumer_assignment,
    normalize_pattern,
)
from arrowshuffle.readers.selection import FileRead, Selection


def ranges_of(assignments):
    return [a.subpartitions for a in assignments]


def test_all_to_all_matches_key_group_ranges_worked_by_hand():
    # 128 key groups over 3 operators: [0, 42], [43, 85], [86, 127].
    assert ranges_of(assign(128, 3)) == [range(0, 43), range(43, 86), range(86, 128)]
    # 10 over 4: ceil(i*10/4) .. floor(((i+1)*10-1)/4): [0,2], [3,4], [5,7], [8,9].
    assert ranges_of(assign(10, 4)) == [range(0, 3), range(3, 5), range(5, 8), range(8, 10)]


def test_all_to_all_with_more_consumers_than_subpartitions_leaves_some_empty():
    # 2 over 5: consumer 0 gets [0, 0], consumer 2 gets [1, 1], the others nothing.
    got = ranges_of(assign(2, 5))
    assert [list(r) for r in got] == [[0], [], [1], [], []]


def test_all_to_all_without_producer_count_means_every_file():
    a = assign(8, 2)[1]
    assert a.producers is None
    assert a.pairs(3) == [(0, range(4, 8)), (1, range(4, 8)), (2, range(4, 8))]
    with pytest.raises(InvalidOptionError, match="num_producers"):
        a.pairs()


def test_pointwise_more_producers_than_consumers_groups_contiguous_files():
    # P=5, C=2: consumer 0 gets files [0, 5*1//2=2), consumer 1 files [2, 5).
    got = assign(4, 2, "pointwise", num_producers=5)
    assert [a.producers for a in got] == [range(0, 2), range(2, 5)]
    assert all(a.subpartitions == range(4) for a in got)


def test_pointwise_equal_counts_is_one_to_one():
    got = assign(6, 3, "pointwise", num_producers=3)
    assert [(a.producers, a.subpartitions) for a in got] == [
        (range(i, i + 1), range(6)) for i in range(3)
    ]


def test_pointwise_fewer_producers_splits_each_file_among_its_consumers():
    # P=2, C=3: producer 0 -> consumers [0, ceil(3/2)=2), producer 1 -> consumers [2, 3).
    # File 0's 5 subpartitions split over 2 consumers: [0, 2] and [3, 4].
    got = assign(5, 3, "pointwise", num_producers=2)
    assert [(a.producers, a.subpartitions) for a in got] == [
        (range(0, 1), range(0, 3)),
        (range(0, 1), range(3, 5)),
        (range(1, 2), range(0, 5)),
    ]


def test_pointwise_multiple_of_producers():
    # P=2, C=4: each file read by two consumers, halves of 8 subpartitions.
    got = assign(8, 4, "pointwise", num_producers=2)
    assert [a.pairs() for a in got] == [
        [(0, range(0, 4))],
        [(0, range(4, 8))],
        [(1, range(0, 4))],
        [(1, range(4, 8))],
    ]


def test_pointwise_without_files_assigns_nothing():
    got = assign(4, 3, "pointwise", num_producers=0)
    assert all(a.pairs() == [] for a in got)


@settings(max_examples=150, deadline=None)
@given(
    n=st.integers(1, 40),
    c=st.integers(1, 40),
    p=st.integers(0, 40),
    pattern=st.sampled_from(["all_to_all", "pointwise"]),
)
def test_every_file_subpartition_pair_is_read_exactly_once(n, c, p, pattern):
    got = assign(n, c, pattern, num_producers=p)
    assert [a.consumer for a in got] == list(range(c))
    counts = Counter((f, s) for a in got for f, r in a.pairs() for s in r)
    assert set(counts) == {(f, s) for f in range(p) for s in range(n)}
    assert set(counts.values()) <= {1}
    for a in got:
        # One contiguous range of files and one contiguous range of subpartitions.
        assert a.producers is not None and a.producers.step == 1
        assert a.subpartitions.step == 1
        assert 0 <= a.subpartitions.start <= a.subpartitions.stop <= n


@settings(max_examples=200, deadline=None)
@given(n=st.integers(1, 60), c=st.integers(1, 60))
def test_all_to_all_ranges_are_ascending_and_balanced(n, c):
    got = ranges_of(assign(n, c))
    sizes = [len(r) for r in got]
    assert max(sizes) - min(sizes) <= 1
    assert [r.start for r in got] == sorted(r.start for r in got)
    assert got[0].start == 0 and got[-1].stop == n


@settings(max_examples=200, deadline=None)
@given(p=st.integers(1, 50), c=st.integers(1, 50), n=st.integers(1, 10))
def test_pointwise_balances_files_and_consumers(p, c, n):
    got = assign(n, c, "pointwise", num_producers=p)
    if p >= c:
        sizes = [len(a.producers) for a in got]
        assert min(sizes) >= 1 and max(sizes) - min(sizes) <= 1
        assert all(a.subpartitions == range(n) for a in got)
    else:
        assert all(len(a.producers) == 1 for a in got)
        readers_per_file = Counter(a.producers.start for a in got)
        assert set(readers_per_file) == set(range(p))
        assert max(readers_per_file.values()) - min(readers_per_file.values()) <= 1
        # The consumers of one file are neighbours, in the file's order.
        files = [a.producers.start for a in got]
        assert files == sorted(files)


def test_key_group_range_edges():
    assert key_group_range(0, 1, 1, flink_bounds=False) == range(0, 1)
    assert key_group_range(6, 7, 7, flink_bounds=False) == range(6, 7)
    # more consumers than subpartitions: some ranges are empty, all stay in bounds
    assert [key_group_range(i, 4, 2, flink_bounds=False) for i in range(4)] == [
        range(0, 1),
        range(1, 1),
        range(1, 2),
        range(2, 2),
    ]
    assert key_group_range(0, 3, 0, flink_bounds=False) == range(0, 0)
    assert key_group_range(0, 1, 40_000, flink_bounds=False) == range(40_000)
    with pytest.raises(InvalidOptionError, match="parallelism"):
        key_group_range(0, 2, 1)


def test_bad_arguments_are_refused_with_a_clear_message():
    with pytest.raises(InvalidOptionError, match="num_producers"):
        assign(4, 2, "pointwise")
    with pytest.raises(InvalidOptionError, match="pattern must be one of"):
        assign(4, 2, "broadcast")
    with pytest.raises(InvalidOptionError, match="num_subpartitions must be at least 1"):
        assign(0, 2)
    with pytest.raises(InvalidOptionError, match="num_consumers must be an integer"):
        assign(4, True)
    with pytest.raises(InvalidOptionError, match=r"consumer must be in \[0, 3\)"):
        consumer_assignment(4, 3, 3)


def test_pattern_names_are_forgiving():
    assert normalize_pattern("ALL-TO-ALL") == "all_to_all"
    assert normalize_pattern(" Pointwise ") == "pointwise"


def test_a_selection_takes_one_kind_of_selection():
    assert Selection([1, 3]).file_reads(4, 2) == [FileRead(0, [1, 3]), FileRead(1, [1, 3])]
    by_consumer = Selection(consumer=1, num_consumers=2).file_reads(4, 2)
    assert by_consumer == [FileRead(0, range(2, 4)), FileRead(1, range(2, 4))]
    assert Selection().file_reads(3, 2) == [FileRead(0, range(3)), FileRead(1, range(3))]
    assert Selection(iter([2, 0])).file_reads(4, 2) == [FileRead(0, [2, 0]), FileRead(1, [2, 0])]
    with pytest.raises(InvalidOptionError, match="not both"):
        Selection([1], consumer=0, num_consumers=2)
    with pytest.raises(InvalidOptionError, match="go together"):
        Selection(consumer=0)
    with pytest.raises(InvalidOptionError, match="task must be a PlannedRead"):
        Selection(task="t")  # type: ignore[arg-type]
