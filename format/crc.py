"""CRC32C (Castagnoli) over bytes-like objects, hardware accelerated where available."""

from __future__ import annotations

from typing import Any

import google_crc32c


def crc32c(data: Any, value: int = 0) -> int:
    """Return the CRC32C of ``data``, continuing from ``value`` (0 starts a new checksum).

    ``data`` is any object with the buffer protocol. Read-only buffers (bytes, pyarrow buffers,
    memory maps) are checksummed in place; writable ones are copied first, because the C
    implementation only accepts read-only buffers.
    """
    try:
        return int(google_crc32c.extend(value, data))
    except TypeError:
        return int(google_crc32c.extend(value, bytes(memoryview(data))))
