"""The one switch and loader of the compiled kernels (numba, the ``arrowshuffle[fast]`` extra).

numba is imported on first use, not with the package. Each kernel set is built once per
process, and each kernel is compiled on its first call for each dtype or loaded from numba's
cache. Without numba, or with ``ARROWSHUFFLE_JIT=0``, callers use their numpy or pyarrow
kernels, which give the same results.
"""

from __future__ import annotations

import importlib.util
import os
import threading
from collections.abc import Callable
from typing import Generic, TypeVar

__all__ = ["JIT_ENV", "CompiledOnce", "available"]

#: The switch of every compiled kernel: ``ARROWSHUFFLE_JIT=0`` turns them off.
JIT_ENV = "ARROWSHUFFLE_JIT"

K = TypeVar("K")


def available() -> bool:
    """True when numba is installed."""
    return importlib.util.find_spec("numba") is not None


class CompiledOnce(Generic[K]):
    """A kernel set built by ``build()`` on first use; None without numba or when off."""

    def __init__(self, build: Callable[[], K]) -> None:
        self._build = build
        self._lock = threading.Lock()
        self._built: list[K | None] = []
        self._loading = False
        self._starting = threading.Lock()

    def __call__(self) -> K | None:
        """The kernels, or None when numba is missing or ``ARROWSHUFFLE_JIT=0``."""
        if os.environ.get(JIT_ENV, "1").strip() == "0":
            return None
        if not self._built:
            with self._lock:
                if not self._built:
                    self._built.append(self._load())
        return self._built[0]

    def ready(self) -> K | None:
        """The kernels if they are built already; else None, and they are built on a thread.

        For kernels that only save time: importing numba and loading the kernels from its
        cache costs about a second (compiling them, the first time on a machine, several),
        more than they save on a small job, so the caller goes on with its other kernels
        until these are ready.
        """
        if os.environ.get(JIT_ENV, "1").strip() == "0":
            return None
        if self._built:
            return self._built[0]
        if not self._loading:  # never waits for the lock a load holds
            with self._starting:
                if not self._loading:
                    self._loading = True
                    threading.Thread(target=self, name="arrowshuffle-jit", daemon=True).start()
        return None

    def _load(self) -> K | None:
        try:
            import numba  # noqa: F401  (only whether it imports: the builders' modules use it)
        except ImportError:
            return None
        return self._build()
