"""The id-list grammar shared by the CLI (``--subpartitions``) and the Spark source."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from arrowshuffle.format.errors import InvalidOptionError
from arrowshuffle.format.notation import format_id_ranges, parse_id_ranges, select_ids

runs = st.lists(
    st.tuples(st.integers(0, 10**12), st.integers(0, 10**6)).map(
        lambda start_length: range(start_length[0], start_length[0] + start_length[1] + 1)
    ),
    min_size=1,
    max_size=8,
)


@given(runs)
def test_parse_reads_back_what_format_wrote(written: list[range]) -> None:
    assert parse_id_ranges(format_id_ranges(written)) == tuple(written)


@given(runs, st.sampled_from([" ", "\t", ""]))
def test_blanks_around_numbers_are_allowed(written: list[range], blank: str) -> None:
    text = ",".join(f"{blank}{part}{blank}" for part in format_id_ranges(written).split(","))
    assert parse_id_ranges(text) == tuple(written)


def test_examples() -> None:
    assert parse_id_ranges("3") == (range(3, 4),)
    assert parse_id_ranges("2-7") == (range(2, 8),)
    assert parse_id_ranges("1,4, 9") == (range(1, 2), range(4, 5), range(9, 10))
    assert parse_id_ranges("0,3 - 5") == (range(0, 1), range(3, 6))


@pytest.mark.parametrize(
    "bad", ["", " ", "a", "-1", "3-", "-", "1,,2", "1,", "+3", "3.0", "1-2-3", "1_000", "٣", "0x3"]
)
def test_unreadable_texts_are_refused(bad: str) -> None:
    expected = f"--ids: expected a number.*found {re.escape(repr(bad))}"
    with pytest.raises(InvalidOptionError, match=expected):
        parse_id_ranges(bad, name="--ids")


@given(st.integers(0, 10**6), st.integers(1, 10**6))
def test_reversed_ranges_are_refused(low: int, gap: int) -> None:
    with pytest.raises(InvalidOptionError, match="is reversed"):
        parse_id_ranges(f"{low + gap}-{low}")


@given(st.text(alphabet="0123456789-, x+", max_size=12))
def test_any_text_parses_to_ascending_runs_or_is_refused(text: str) -> None:
    try:
        parsed = parse_id_ranges(text)
    except InvalidOptionError:
        return
    assert parsed and all(len(run) >= 1 and run.step == 1 for run in parsed)


def test_select_checks_bounds_before_expanding() -> None:
    assert select_ids(parse_id_ranges("2-5"), 8) == range(2, 6)
    assert select_ids(parse_id_ranges("5,1-2,2"), 8) == (1, 2, 5)
    with pytest.raises(InvalidOptionError, match="subpartition 4000000000 does not exist"):
        select_ids(parse_id_ranges("0-4000000000"), 8, what="dataset")
    with pytest.raises(InvalidOptionError, match=r"the dataset has subpartitions 0\.\.7"):
        select_ids(parse_id_ranges("8"), 8, what="dataset")
