"""Parse sizes and durations written by people: ``"256MiB"``, ``"1.5 GB"``, ``"15m"``."""

from __future__ import annotations

import datetime
import math
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


_DURATION_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]?)\s*$")


def parse_duration(value: float | str | datetime.timedelta, *, name: str = "duration") -> float:
    """Return ``value`` in seconds.

    ``value`` is a number of seconds, a ``timedelta`` or a string such as ``"30s"``, ``"15m"``,
    ``"1h"``, ``"2d"``, ``"1w"`` or ``"0"`` (a bare number in a string is seconds too).

    Raises:
        InvalidOptionError: for a negative, infinite or unreadable duration.
    """
    if isinstance(value, datetime.timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        seconds = float(value)
    elif isinstance(value, str):
        match = _DURATION.match(value)
        unit = match.group(2).lower() if match else None
        if match is None or unit not in _DURATION_UNITS:
            raise InvalidOptionError(
                f"{name} must be a duration such as 30s, 15m, 1h or 2d, found {value!r}"
            )
        seconds = float(match.group(1)) * _DURATION_UNITS[unit]
    else:
        raise InvalidOptionError(
            f"{name} must be seconds, a timedelta or a string such as '1h', found {value!r}"
        )
    if not math.isfinite(seconds) or seconds < 0:
        raise InvalidOptionError(f"{name} must be a finite duration of at least 0, found {value!r}")
    return seconds
