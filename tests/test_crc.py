"""Combining CRC32C checksums of consecutive pieces computed apart."""

from __future__ import annotations

import google_crc32c
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from arrowshuffle.format.crc import crc32c, crc32c_combine


@settings(max_examples=200, deadline=None)
@given(pieces=st.lists(st.binary(max_size=3000), max_size=6))
def test_combined_checksums_equal_the_checksum_of_the_joined_bytes(pieces: list[bytes]) -> None:
    combined = 0
    for piece in pieces:
        combined = crc32c_combine(combined, crc32c(piece), len(piece))
    assert combined == google_crc32c.value(b"".join(pieces))


def test_combining_over_long_lengths() -> None:
    # Lengths with high bits set use the later powers of the table.
    head = b"arrow"
    for length in (1 << 20, (1 << 24) + 12345):
        body = bytes(range(256)) * (length // 256) + b"x" * (length % 256)
        assert crc32c_combine(crc32c(head), crc32c(body), len(body)) == crc32c(head + body)


def test_a_negative_length_is_refused() -> None:
    with pytest.raises(ValueError, match="never negative"):
        crc32c_combine(1, 2, -1)
