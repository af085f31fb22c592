"""A process-wide thread pool for kernels whose work releases the GIL.

numpy ufuncs, numpy fancy indexing and Arrow compute functions run without the GIL, so a
large batch cut into a few row ranges is hashed or gathered on every core at once. The caller
runs the first range itself and the pool the others, so one thread means no pool at all.

The number of threads is the number of CPUs this process may run on, or
``ARROWSHUFFLE_NUM_THREADS`` when that is set (``1`` turns threading off).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

__all__ = [
    "NUM_THREADS_ENV",
    "background_threads",
    "num_threads",
    "parallel_map",
    "row_ranges",
    "submit",
]

NUM_THREADS_ENV = "ARROWSHUFFLE_NUM_THREADS"

_T = TypeVar("_T")
_R = TypeVar("_R")

_lock = threading.Lock()
_pool: ThreadPoolExecutor | None = None
_pool_workers = 0
_in_worker = threading.local()


def num_threads() -> int:
    """How many threads the kernels use: ``ARROWSHUFFLE_NUM_THREADS`` or the usable CPUs."""
    configured = os.environ.get(NUM_THREADS_ENV, "").strip()
    if configured:
        try:
            return max(1, int(configured))
        except ValueError:
            pass
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def _mark_worker() -> None:
    _in_worker.active = True


def _executor(workers: int) -> ThreadPoolExecutor:
    global _pool, _pool_workers
    with _lock:
        if _pool is None or _pool_workers != workers:
            old = _pool
            _pool = ThreadPoolExecutor(
                max_workers=workers,
                thread_name_prefix="arrowshuffle-kernel",
                initializer=_mark_worker,
            )
            _pool_workers = workers
            if old is not None:
                old.shutdown(wait=False)
        return _pool


def _forget_pool() -> None:
    # A forked child has none of the parent's threads: it starts a pool of its own.
    global _pool, _pool_workers
    _pool = None
    _pool_workers = 0


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pool)


def parallel_map(function: Callable[[_T], _R], items: Sequence[_T]) -> list[_R]:
    """``[function(item) for item in items]``, the items spread over the thread pool.

    The calling thread runs the first item. Calls made from a pool thread run inline, so
    nested use never waits on a pool it occupies. Every item has finished when this returns,
    also when one raised (the first error is raised then).
    """
    threads = num_threads()
    if len(items) <= 1 or threads <= 1 or getattr(_in_worker, "active", False):
        return [function(item) for item in items]
    pool = _executor(threads - 1)
    futures: list[Future[_R]] = [pool.submit(function, item) for item in items[1:]]
    try:
        first = function(items[0])
    except BaseException:
        for future in futures:
            future.cancel()
        for future in futures:
            if not future.cancelled():
                future.exception()  # wait: no task may outlive the buffers it works on
        raise
    results = [first]
    error: BaseException | None = None
    for future in futures:
        try:
            results.append(future.result())
        except BaseException as exc:  # collect, so that every task has finished
            error = error or exc
    if error is not None:
        raise error
    return results


def background_threads() -> int:
    """How many pool threads may run work for the calling thread (0 from a pool thread)."""
    if getattr(_in_worker, "active", False):
        return 0
    return num_threads() - 1


def submit(function: Callable[[], _R]) -> Future[_R] | None:
    """Start ``function`` on the pool; None when there is no pool thread for the caller.

    With one thread, or when called from a pool thread (which must not wait on its own pool),
    nothing is started and the caller runs ``function`` itself.
    """
    threads = background_threads()
    if threads < 1:
        return None
    return _executor(threads).submit(function)


def row_ranges(rows: int, min_rows: int, parts: int | None = None) -> list[tuple[int, int]]:
    """Cut ``range(rows)`` into up to ``parts`` (default: :func:`num_threads`) equal ranges.

    No range is shorter than ``min_rows`` (except when ``rows`` itself is), so that small
    inputs are not split into pieces whose hand-off costs more than their work.
    """
    parts = num_threads() if parts is None else parts
    count = max(1, min(parts, rows // max(1, min_rows)))
    bounds = [rows * i // count for i in range(count + 1)]
    return [(bounds[i], bounds[i + 1]) for i in range(count)]
