"""The timing loop every benchmark script shares: wall time around a call, repeated."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from typing import TypeVar

T = TypeVar("T")


def elapsed(fn: Callable[[], T]) -> tuple[float, T]:
    """Wall time of one call of ``fn``, and what it returned."""
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


def timed(fn: Callable[[], T], repeats: int, warmup: int = 0) -> tuple[list[float], T]:
    """Seconds of each of ``repeats`` calls (after ``warmup`` untimed ones) and the last result."""
    if repeats < 1:
        raise ValueError(f"repeats must be at least 1, found {repeats}")
    for _ in range(warmup):
        fn()
    seconds = []
    for _ in range(repeats):
        took, result = elapsed(fn)
        seconds.append(took)
    return seconds, result


def time_calls(fn: Callable[[], object], repeats: int, warmup: int = 0) -> list[float]:
    """Seconds of each of ``repeats`` calls of ``fn``, after ``warmup`` untimed ones."""
    return timed(fn, repeats, warmup)[0]


def median(seconds: Sequence[float]) -> float:
    return float(statistics.median(seconds))


def spread(seconds: Sequence[float]) -> dict[str, float]:
    """``median_s``, ``min_s`` and ``max_s``: the summary the report reads."""
    return {"median_s": median(seconds), "min_s": min(seconds), "max_s": max(seconds)}
