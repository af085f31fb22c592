"""Parse byte sizes written by people: ``"256MiB"``, ``"1.5 GB"``, ``4096``."""

from __future__ import annotations

import re

from arrowshuffle.format.errors import InvalidOptionError

_UNITS = {
    "": 1,
    "b": 1,
    "k": 1000,
    "kb": 1000,
    "m": 1000**2,
    "mb": 1000**2,
    "g": 1000**3,
    "gb": 1000**3,
    "t": 1000**4,
    "tb": 1000**4,
    "kib": 1024,
    "mib": 1024**2,
    "gib": 1024**3,
    "tib": 1024**4,
}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")


def parse_bytes(value: int | str, *, name: str = "size") -> int:
    """Return ``value`` in bytes; strings take SI (``MB``) or binary (``MiB``) suffixes.

    Raises:
        InvalidOptionError: for a negative, fractional-byte or unreadable size.
    """
    if isinstance(value, bool):
        raise InvalidOptionError(f"{name} must be a byte count, found {value!r}")
    if isinstance(value, int):
        if value < 0:
            raise InvalidOptionError(f"{name} must be at least 0 bytes, found {value}")
        return value
    match = _SIZE.match(str(value))
    unit = match.group(2).lower() if match else None
    if match is None or unit not in _UNITS:
        raise InvalidOptionError(
            f"{name} must be a byte count such as 268435456, '256MiB' or '1GB', found {value!r}"
        )
    return int(float(match.group(1)) * _UNITS[unit])
