"""A memory pool shared by the writers of one process, with a local pool per writer.

The model is Flink's network buffer pool. A :class:`MemoryPool` has a fixed size. Each writer
asks it for a :class:`LocalMemoryPool` with a *required minimum*, which is reserved at once;
asking for more minimum than is still unreserved is an error. The bytes above all minimums are
shared evenly among the local pools that are not *fixed*, and shared again whenever a local pool
joins or closes. A local pool's *budget* is its minimum plus its share.

A writer reserves the bytes of every batch it buffers. A reservation succeeds while the local
pool stays within its budget and the whole pool within its size; when it fails, the writer emits
its buffered rows as a region (releasing them) and then buffers the batch regardless. So the
bytes buffered in a process stay below the pool size plus at most one batch per writer, even
right after a join shrinks the other writers' budgets (they spill at their next batch).

The process-wide default pool is sized by the environment variable
``ARROWSHUFFLE_MEMORY_POOL`` (a byte count such as ``"512MiB"``; 1 GiB when unset), read when
the default pool is first used, or by :func:`set_default_memory_pool`.
"""

from __future__ import annotations

import os
import threading
from types import TracebackType

from arrowshuffle.format.errors import InvalidOptionError
from arrowshuffle.format.notation import parse_bytes

#: The environment variable that sizes the process-wide default pool.
MEMORY_POOL_ENV = "ARROWSHUFFLE_MEMORY_POOL"
#: The default pool's size when the environment variable is unset.
DEFAULT_POOL_BYTES = 1024**3
#: The required minimum of a writer that joins a pool without saying how much it needs.
DEFAULT_MIN_MEMORY = 4 * 1024**2


def format_bytes(n: int) -> str:
    """``n`` bytes as a short human-readable size, exact bytes included: ``16.0 MiB (16777216)``."""
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{n} B" if unit == "B" else f"{size:.1f} {unit} ({n})"
        size /= 1024
    raise AssertionError("unreachable")  # pragma: no cover


class MemoryPool:
    """A fixed amount of memory shared by the writers of one process.

    Args:
        total_bytes: the pool size, in bytes or as a string such as ``"256MiB"``.
        setting: how a user raises this pool's size; named in errors.

    Example:
        >>> pool = MemoryPool("64MiB")
        >>> with pool.local("8MiB") as a, pool.local("8MiB") as b:
        ...     a.budget == b.budget == 32 * 1024**2
        True
    """

    def __init__(self, total_bytes: int | str, *, setting: str = "MemoryPool(total_bytes)") -> None:
        self._total = parse_bytes(total_bytes, name="memory pool size")
        self._setting = setting
        self._lock = threading.Lock()
        self._locals: list[LocalMemoryPool] = []
        self._reserved = 0
        self._used = 0

    @property
    def total_bytes(self) -> int:
        """The pool's size."""
        return self._total

    @property
    def reserved_bytes(self) -> int:
        """The sum of the required minimums of the open local pools."""
        return self._reserved

    @property
    def unreserved_bytes(self) -> int:
        """Bytes not promised to any local pool as its minimum."""
        return self._total - self._reserved

    @property
    def used_bytes(self) -> int:
        """Bytes that local pools currently hold (what their writers buffer)."""
        return self._used

    @property
    def num_local_pools(self) -> int:
        """How many local pools are open."""
        return len(self._locals)

    def local(
        self, min_bytes: int | str = DEFAULT_MIN_MEMORY, *, fixed: bool = False
    ) -> LocalMemoryPool:
        """Open a local pool that is guaranteed ``min_bytes``.

        Args:
            min_bytes: the required minimum, reserved until the local pool closes.
            fixed: True for a budget of exactly ``min_bytes``, without a share of the excess.

        Raises:
            InvalidOptionError: the minimum is larger than what is still unreserved.
        """
        minimum = parse_bytes(min_bytes, name="required minimum")
        with self._lock:
            if minimum > self._total - self._reserved:
                raise InvalidOptionError(
                    f"the memory pool cannot reserve a required minimum of "
                    f"{format_bytes(minimum)}: the pool holds {format_bytes(self._total)}, of "
                    f"which {format_bytes(self._reserved)} are reserved by "
                    f"{len(self._locals)} writer(s) and "
                    f"{format_bytes(self._total - self._reserved)} are left; raise the pool size "
                    f"({self._setting}) or lower the writers' memory="
                )
            pool = LocalMemoryPool(self, minimum, fixed)
            self._locals.append(pool)
            self._reserved += minimum
            self._redistribute()
        return pool

    def _redistribute(self) -> None:
        """Share the bytes above all minimums evenly among non-fixed local pools (locked)."""
        sharing = [p for p in self._locals if not p.fixed]
        excess = self._total - self._reserved
        for i, pool in enumerate(sharing):
            # The remainder of the division goes one byte each to the first pools.
            share = excess // len(sharing) + (1 if i < excess % len(sharing) else 0)
            pool._budget = pool.min_bytes + share
        for pool in self._locals:
            if pool.fixed:
                pool._budget = pool.min_bytes

    def _try_reserve(self, pool: LocalMemoryPool, nbytes: int) -> bool:
        with self._lock:
            if pool._used + nbytes > pool._budget or self._used + nbytes > self._total:
                return False
            pool._used += nbytes
            self._used += nbytes
            return True

    def _force_reserve(self, pool: LocalMemoryPool, nbytes: int) -> None:
        with self._lock:
            pool._used += nbytes
            self._used += nbytes

    def _release(self, pool: LocalMemoryPool) -> None:
        with self._lock:
            self._used -= pool._used
            pool._used = 0

    def _close(self, pool: LocalMemoryPool) -> None:
        with self._lock:
            if pool not in self._locals:
                return
            self._locals.remove(pool)
            self._reserved -= pool.min_bytes
            self._used -= pool._used
            pool._used = 0
            pool._budget = 0
            self._redistribute()

    def __repr__(self) -> str:
        return (
            f"MemoryPool(total={self._total}, reserved={self._reserved}, used={self._used}, "
            f"local_pools={len(self._locals)})"
        )


class LocalMemoryPool:
    """One writer's part of a :class:`MemoryPool`; create it with :meth:`MemoryPool.local`.

    Attributes:
        pool: the pool this local pool belongs to.
        min_bytes: the required minimum, always part of the budget.
        fixed: True when the budget is exactly the minimum.
    """

    def __init__(self, pool: MemoryPool, min_bytes: int, fixed: bool) -> None:
        self.pool = pool
        self.min_bytes = min_bytes
        self.fixed = fixed
        self._budget = min_bytes
        self._used = 0
        self._closed = False

    @property
    def budget(self) -> int:
        """The bytes this local pool may hold now: its minimum plus its share of the excess."""
        return self._budget

    @property
    def used(self) -> int:
        """The bytes reserved and not yet released."""
        return self._used

    @property
    def closed(self) -> bool:
        """True once :meth:`close` ran."""
        return self._closed

    def try_reserve(self, nbytes: int) -> bool:
        """Reserve ``nbytes`` if both this budget and the whole pool have room; say if it did."""
        self._check_open()
        return self.pool._try_reserve(self, nbytes)

    def force_reserve(self, nbytes: int) -> None:
        """Reserve ``nbytes`` even beyond the budget.

        A writer whose buffer is empty must still take its batch; the next
        :meth:`try_reserve` then fails until :meth:`release_all`.
        """
        self._check_open()
        self.pool._force_reserve(self, nbytes)

    def release_all(self) -> None:
        """Give back every reserved byte (the writer emitted its buffer)."""
        self.pool._release(self)

    def close(self) -> None:
        """Release everything and leave the pool; the others' budgets grow. Idempotent."""
        if not self._closed:
            self._closed = True
            self.pool._close(self)

    def _check_open(self) -> None:
        if self._closed:
            raise InvalidOptionError("this local memory pool is closed")

    def __enter__(self) -> LocalMemoryPool:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"LocalMemoryPool(min={self.min_bytes}, budget={self._budget}, used={self._used}, "
            f"fixed={self.fixed})"
        )


_default_pool: MemoryPool | None = None
_default_lock = threading.Lock()


def default_memory_pool() -> MemoryPool:
    """The process-wide pool used by writers that are given neither a pool nor ``memory=``.

    Its size comes from ``ARROWSHUFFLE_MEMORY_POOL`` (1 GiB when unset), read on first use.

    Raises:
        InvalidOptionError: the environment variable is not a byte count.
    """
    global _default_pool
    with _default_lock:
        if _default_pool is None:
            raw = os.environ.get(MEMORY_POOL_ENV)
            if raw is None:
                size = DEFAULT_POOL_BYTES
            else:
                size = parse_bytes(raw, name=f"environment variable {MEMORY_POOL_ENV}")
            _default_pool = MemoryPool(size, setting=f"environment variable {MEMORY_POOL_ENV}")
        return _default_pool


def set_default_memory_pool(pool: MemoryPool | int | str | None) -> MemoryPool | None:
    """Replace the process-wide default pool; return the previous one.

    Local pools already open keep their pool. ``None`` makes the next use read the environment
    variable again.
    """
    global _default_pool
    if pool is not None and not isinstance(pool, MemoryPool):
        pool = MemoryPool(pool, setting="set_default_memory_pool(size)")
    with _default_lock:
        previous, _default_pool = _default_pool, pool
    return previous
