"""``format_size``: sizes as people read them, never shown larger than they are."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from arrowshuffle.format.notation import format_size, parse_bytes


@pytest.mark.parametrize(
    ("size", "text"),
    [
        (0, "0 B"),
        (1023, "1023 B"),
        (1024, "1 KiB"),
        (1536, "1.5 KiB"),
        (5498, "5.36 KiB"),
        (16383, "15.9 KiB"),
        (16384, "16 KiB"),
        (1048575, "1023 KiB"),
        (268435456, "256 MiB"),
        (1610612736, "1.5 GiB"),
    ],
)
def test_examples(size: int, text: str) -> None:
    assert format_size(size) == text


@given(st.integers(0, 2**63 - 1))
def test_never_more_than_the_size_and_within_one_percent(size: int) -> None:
    shown = parse_bytes(format_size(size).replace(" ", ""))
    assert shown <= size
    assert size - shown <= max(1, size // 100)
