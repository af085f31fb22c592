"""Parse values written by people: sizes (``"256MiB"``), durations (``"15m"``), id lists."""

from __future__ import annotations

import datetime
import math
import re
from collections.abc import Sequence

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


#: Binary units of :func:`format_size`, from bytes up.
_SIZE_UNITS = ("B", "KiB", "MiB", "GiB", "TiB")


def format_size(n: int) -> str:
    """``n`` bytes as people read them: ``812 B``, ``5.36 KiB``, ``256 MiB``, ``1.5 GiB``.

    At most three significant digits, in binary units (which :func:`parse_bytes` reads back).
    Digits are cut, never rounded up, so a size shown is never more than the size: 16383
    bytes show as ``15.9 KiB``, below the ``16 KiB`` of 16384.
    """
    if n < 1024:
        return f"{n} B"
    power = 1
    while power < len(_SIZE_UNITS) - 1 and n >= 1024 ** (power + 1):
        power += 1
    whole = n // 1024**power
    decimals = 0 if whole >= 100 else 1 if whole >= 10 else 2
    scaled = n * 10**decimals // 1024**power
    text = str(scaled)
    if decimals:
        text = f"{scaled // 10**decimals}.{scaled % 10**decimals:0{decimals}d}".rstrip("0")
    return f"{text.rstrip('.')} {_SIZE_UNITS[power]}"


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


#: One element of an id list: ``3`` or the inclusive range ``2-7`` (ASCII digits only).
_ID_RUN = re.compile(r"^\s*([0-9]+)\s*(?:-\s*([0-9]+)\s*)?$")


def parse_id_ranges(text: str, *, name: str = "subpartitions") -> tuple[range, ...]:
    """Parse ``"3"``, ``"2-7"`` (inclusive) or ``"1,4,6-9"`` into ranges, in the order written.

    Ranges stay ranges, so ``"0-4000000000"`` costs nothing until checked against the data
    with :func:`select_ids`.

    Raises:
        InvalidOptionError: for anything else, or a range whose end is below its start.
    """
    runs: list[range] = []
    for part in str(text).split(","):
        match = _ID_RUN.match(part)
        if match is None:
            raise InvalidOptionError(
                f"{name}: expected a number, an inclusive range or a list, such as '3', '2-7' "
                f"or '1,4,6-9'; found {text!r}"
            )
        first = int(match.group(1))
        last = first if match.group(2) is None else int(match.group(2))
        if last < first:
            raise InvalidOptionError(
                f"{name}: range {part.strip()!r} is reversed; write the lower id first"
            )
        runs.append(range(first, last + 1))
    return tuple(runs)


def format_id_ranges(runs: Sequence[range]) -> str:
    """The text :func:`parse_id_ranges` reads back as ``runs`` (non-empty, step-1 ranges)."""
    return ",".join(
        str(run.start) if len(run) == 1 else f"{run.start}-{run.stop - 1}" for run in runs
    )


def select_ids(
    runs: Sequence[range], count: int, *, name: str = "subpartitions", what: str = "file"
) -> range | tuple[int, ...]:
    """The ids of ``runs`` among ``0..count-1``: one range as is, else sorted and distinct.

    Raises:
        InvalidOptionError: if an id is ``count`` or more (checked before any range is expanded).
    """
    too_big = [run for run in runs if run.stop > count]
    if too_big:
        raise InvalidOptionError(
            f"{name}: subpartition {too_big[0].stop - 1} does not exist: the {what} has "
            f"subpartitions 0..{count - 1}"
        )
    if len(runs) == 1:
        return runs[0]
    return tuple(sorted({i for run in runs for i in run}))
