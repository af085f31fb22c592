"""The compiled kernels are compiled once per machine, not once per process.

numba keeps compiled kernels in an on-disk cache, but a kernel whose cache key differs in
every process is compiled again by each one (a second or more of CPU, in every Spark task's
Python worker that writes or hashes) and adds another copy to the cache each time. Two fresh
processes run every kernel over the same types: the second must load them all and save none.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from arrowshuffle.format import _gather_jit
from arrowshuffle.format.partitioners import _jit

pytestmark = pytest.mark.skipif(
    _jit.kernels() is None or _gather_jit.kernels() is None,
    reason="the compiled kernels are off (no numba, or ARROWSHUFFLE_JIT=0)",
)

# Every kernel of both sets, over the types the writer and the hash partitioner pass them.
RUN_EVERY_KERNEL = """
import numpy as np
import pyarrow as pa
from arrowshuffle.format import _gather_jit
from arrowshuffle.format.gather import destinations, scatter_columns
from arrowshuffle.format.partitioners.hashing import HashPartitioner

rows = 3000
rng = np.random.default_rng(0)
batch = pa.record_batch({
    "i32": pa.array(rng.integers(0, 9, rows), pa.int32()),
    "i64": pa.array(rng.integers(0, 9, rows)),
    "f": pa.array(rng.random(rows), mask=rng.random(rows) < 0.1),
    "s": pa.array([str(i) if i % 7 else None for i in range(rows)]),
    "ls": pa.array([str(i) for i in range(rows)], pa.large_string()),
    "b": pa.array(rng.random(rows) < 0.5, mask=rng.random(rows) < 0.1),
    "d": pa.array([i for i in range(rows)], pa.decimal128(20, 2)),
    "u": pa.array([[1, 2]] * rows, pa.list_(pa.int8())),
})
kernels = _gather_jit.kernels()
ids = rng.integers(0, 64, rows).astype(np.uint8)
dest, counts = destinations(ids, 64, kernels)
scatter_columns(batch, ids, dest, counts, kernels)
for key in ("i32", "i64", "s"):
    HashPartitioner(64, by=key).assign(batch)
"""


def run_in_a_new_process(cache: Path) -> str:
    env = dict(os.environ, NUMBA_CACHE_DIR=str(cache), NUMBA_DEBUG_CACHE="1")
    env.pop("ARROWSHUFFLE_JIT", None)
    done = subprocess.run(
        [sys.executable, "-c", RUN_EVERY_KERNEL],
        cwd=cache,  # not the repository, whose folders would shadow the installed package
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout + done.stderr


def test_a_second_process_loads_every_kernel_from_the_cache(tmp_path: Path) -> None:
    first = run_in_a_new_process(tmp_path)
    saved = " ".join(line for line in first.splitlines() if "data saved" in line)
    for kernel in _gather_jit.GatherKernels._fields + _jit.Kernels._fields:
        assert f".{kernel}-" in saved, f"the script did not compile {kernel}:\n{first}"
    files = sorted(p.name for p in tmp_path.rglob("*.nbc"))

    second = run_in_a_new_process(tmp_path)
    assert [line for line in second.splitlines() if "data saved" in line] == []
    loaded = " ".join(line for line in second.splitlines() if "data loaded" in line)
    for kernel in _gather_jit.GatherKernels._fields + _jit.Kernels._fields:
        assert f".{kernel}-" in loaded, f"{kernel} was not loaded from the cache:\n{second}"
    assert sorted(p.name for p in tmp_path.rglob("*.nbc")) == files
