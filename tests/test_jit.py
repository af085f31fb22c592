"""The compiled kernels' loader: one switch, one load, and a load that never makes a caller wait."""

from __future__ import annotations

import threading
import time

import pytest

from arrowshuffle.format.jit import JIT_ENV, CompiledOnce, available

pytestmark = pytest.mark.skipif(not available(), reason="numba is not installed")


def test_ready_returns_at_once_and_the_kernels_once_built() -> None:
    release = threading.Event()
    builds: list[str] = []

    def build() -> str:
        builds.append("built")
        release.wait(10)
        return "kernels"

    loader = CompiledOnce(build)
    started = time.monotonic()
    assert loader.ready() is None  # the build waits on `release`: ready() must not
    assert loader.ready() is None
    assert time.monotonic() - started < 5
    release.set()
    assert loader() == "kernels"  # waits for the build on the thread, then shares it
    assert loader.ready() == "kernels"
    assert len(builds) == 1


def test_the_switch_turns_both_off(monkeypatch: pytest.MonkeyPatch) -> None:
    loader = CompiledOnce(lambda: "kernels")
    monkeypatch.setenv(JIT_ENV, "0")
    assert loader() is None
    assert loader.ready() is None
    monkeypatch.setenv(JIT_ENV, "1")
    assert loader() == "kernels"
