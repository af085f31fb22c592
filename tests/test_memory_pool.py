"""The shared memory pool: minimums, even redistribution, errors, and writers bounded by it."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import arrowshuffle as ash
from arrowshuffle.format.partitioners import make_partitioner
from arrowshuffle.writers.memory_pool import (
    MEMORY_POOL_ENV,
    MemoryPool,
    default_memory_pool,
    set_default_memory_pool,
)

MiB = 1024 * 1024


def test_excess_is_shared_evenly_and_again_on_join_and_close() -> None:
    pool = MemoryPool("100MiB")
    a = pool.local(10 * MiB)
    assert a.budget == 100 * MiB
    b = pool.local(20 * MiB)
    fixed = pool.local(30 * MiB, fixed=True)
    # 40 MiB above the minimums, shared by the two pools that are not fixed.
    assert (a.budget, b.budget, fixed.budget) == (30 * MiB, 40 * MiB, 30 * MiB)
    assert pool.reserved_bytes == 60 * MiB
    b.close()
    assert (a.budget, fixed.budget) == (70 * MiB, 30 * MiB)
    fixed.close()
    assert a.budget == 100 * MiB and pool.num_local_pools == 1
    a.close()
    assert pool.reserved_bytes == 0 and pool.used_bytes == 0


def test_minimum_beyond_what_is_left_names_the_numbers_and_the_setting() -> None:
    pool = MemoryPool("16MiB")
    pool.local("10MiB")
    with pytest.raises(ash.InvalidOptionError) as error:
        pool.local("8MiB")
    message = str(error.value)
    for expected in ("16777216", "10485760", "8388608", "6291456", "MemoryPool(total_bytes)"):
        assert expected in message
    assert pool.num_local_pools == 1


@given(st.lists(st.tuples(st.integers(0, 50), st.booleans()), max_size=12), st.integers(0, 600))
@settings(max_examples=80, deadline=None)
def test_budgets_never_promise_more_than_the_pool(
    requests: list[tuple[int, bool]], total: int
) -> None:
    pool = MemoryPool(total)
    opened = []
    for minimum, fixed in requests:
        if minimum > pool.unreserved_bytes:
            with pytest.raises(ash.InvalidOptionError):
                pool.local(minimum, fixed=fixed)
            continue
        opened.append(pool.local(minimum, fixed=fixed))
        budgets = [p.budget for p in opened]
        assert sum(budgets) <= total
        sharing = [p.budget - p.min_bytes for p in opened if not p.fixed]
        if sharing:
            assert max(sharing) - min(sharing) <= 1
            assert sum(budgets) == total
        assert all(p.budget == p.min_bytes for p in opened if p.fixed)
    for p in opened:
        p.close()
    assert pool.reserved_bytes == 0


def test_reservations_respect_budget_and_pool() -> None:
    pool = MemoryPool(100)
    a = pool.local(10)
    assert a.try_reserve(100) and not a.try_reserve(1)
    b = pool.local(10)  # a's budget shrinks to 10 + 80 / 2 while it holds 100
    assert a.budget == 50 and not a.try_reserve(1)
    assert not b.try_reserve(1)  # the pool as a whole is full until a releases
    a.release_all()
    assert b.try_reserve(50) and not b.try_reserve(1)
    b.force_reserve(7)
    assert b.used == 57 and pool.used_bytes == 57
    b.close()
    with pytest.raises(ash.InvalidOptionError, match="closed"):
        b.try_reserve(1)
    assert pool.used_bytes == 0 and a.budget == 100


def test_joining_and_closing_from_many_threads_stays_consistent() -> None:
    pool = MemoryPool("64MiB")
    errors: list[BaseException] = []

    def churn(seed: int) -> None:
        rng = np.random.default_rng(seed)
        try:
            for _ in range(200):
                local = pool.local(int(rng.integers(0, MiB)), fixed=bool(rng.integers(2)))
                local.try_reserve(int(rng.integers(0, 4 * MiB)))
                local.close()
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=churn, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert (pool.reserved_bytes, pool.used_bytes, pool.num_local_pools) == (0, 0, 0)


# --------------------------------------------------------------------------- writers and pools

SCHEMA = pa.schema([("k", pa.int64()), ("payload", pa.binary())])


def make_batch(rows: int, seed: int, width: int = 48) -> pa.RecordBatch:
    """Generated rows whose buffers Arrow allocates (so they count in its allocated bytes)."""
    rng = np.random.default_rng(seed)
    offsets = pa.py_buffer((np.arange(rows + 1, dtype=np.int32) * width).tobytes())
    data = pa.py_buffer(rng.integers(0, 256, rows * width, dtype=np.uint8).tobytes())
    batch = pa.record_batch(
        [
            pa.array(rng.integers(0, 2**40, rows)),
            pa.Array.from_buffers(pa.binary(), rows, [None, offsets, data]),
        ],
        schema=SCHEMA,
    )
    # ``take`` copies into buffers from Arrow's allocator, as decoded or computed input would be.
    return batch.take(pa.array(np.arange(rows)))


def test_writer_given_memory_alone_keeps_a_private_fixed_budget(tmp_path: Path) -> None:
    w = ash.ShuffleFileWriter(tmp_path / "a.arrow", SCHEMA, 4, memory="1MiB")
    assert w.memory_budget() == MiB and w.local_memory.fixed
    other = ash.ShuffleFileWriter(tmp_path / "b.arrow", SCHEMA, 4, memory="1MiB")
    assert w.memory_budget() == MiB  # not shared with anyone
    batch = make_batch(4096, 1)  # ~230 KiB
    for _ in range(12):
        w.write(batch, subpartitions=np.arange(batch.num_rows) % 4)
    written = w.close()
    other.abort()
    # Every region but the last holds as many whole batches as fit 1 MiB: four.
    assert written.regions == 3


def test_writers_share_a_pool_and_spill_when_a_writer_joins(tmp_path: Path) -> None:
    pool = MemoryPool("4MiB")
    batch = make_batch(4096, 2)
    ids = np.arange(batch.num_rows) % 3
    first = ash.ShuffleFileWriter(tmp_path / "a.arrow", SCHEMA, 3, memory_pool=pool, memory=0)
    assert first.memory_budget() == 4 * MiB
    for _ in range(12):  # about 2.8 MiB: fits the whole pool
        first.write(batch, subpartitions=ids)
    assert first.num_regions == 0
    second = ash.ShuffleFileWriter(tmp_path / "b.arrow", SCHEMA, 3, memory_pool=pool, memory=0)
    assert first.memory_budget() == second.memory_budget() == 2 * MiB
    first.write(batch, subpartitions=ids)  # over its new budget: emits a region first
    assert first.num_regions == 1 and first.buffered_bytes == batch.nbytes
    second.close()
    assert first.memory_budget() == 4 * MiB
    first.close()
    assert pool.num_local_pools == 0 and pool.used_bytes == 0


def test_writer_minimum_the_pool_cannot_reserve_is_refused(tmp_path: Path) -> None:
    pool = MemoryPool("2MiB")
    keep = ash.ShuffleFileWriter(tmp_path / "a.arrow", SCHEMA, 2, memory_pool=pool, memory="1.5MiB")
    with pytest.raises(ash.InvalidOptionError, match="raise the pool size"):
        ash.ShuffleFileWriter(tmp_path / "b.arrow", SCHEMA, 2, memory_pool=pool, memory="1MiB")
    assert not (tmp_path / "b.arrow").exists()
    keep.abort()
    assert pool.reserved_bytes == 0


def test_writers_default_to_the_process_pool(tmp_path: Path) -> None:
    previous = set_default_memory_pool("64MiB")
    try:
        pool = default_memory_pool()
        w = ash.ShuffleFileWriter(tmp_path / "a.arrow", SCHEMA, 2)
        assert pool.num_local_pools == 1 and w.memory_budget() == 64 * MiB
        w.close()
        assert pool.num_local_pools == 0
        dropped = ash.ShuffleFileWriter(tmp_path / "b.arrow", SCHEMA, 2)
        del dropped  # never closed: the finalizer gives the reservation back
        import gc

        gc.collect()
        assert pool.num_local_pools == 0
    finally:
        set_default_memory_pool(previous)


def test_default_pool_size_comes_from_the_environment() -> None:
    code = (
        "from arrowshuffle.writers.memory_pool import default_memory_pool as d; "
        "print(d().total_bytes)"
    )
    env = {**os.environ, MEMORY_POOL_ENV: "96MiB"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.stdout.strip() == str(96 * MiB), out.stderr
    env[MEMORY_POOL_ENV] = "lots"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.returncode != 0 and MEMORY_POOL_ENV in out.stderr and "'lots'" in out.stderr


# --------------------------------------------------------------------------- the memory bound

WRITERS = 4
POOL = 16 * MiB
PER_WRITER = 24 * MiB
BATCH_ROWS = 8192


def test_concurrent_writers_stay_within_the_pool(tmp_path: Path) -> None:
    """Four writers in four threads share a 16 MiB pool while each writes 24 MiB.

    Arrow's allocated bytes may exceed the pool by, per writer, one input batch (held by the
    caller while the writer copies it sorted into its buffer) plus two batches of slack while it
    emits a region: the output batch concatenated from small slices and its LZ4-compressed
    body. The input batches are made by the writer threads and counted too.
    """
    pool = MemoryPool(POOL)
    batch_bytes = make_batch(BATCH_ROWS, 0).nbytes
    bound = POOL + WRITERS * (1 + 2) * batch_bytes
    writers = [
        ash.ShuffleFileWriter(
            tmp_path / f"w{i}.arrow",
            SCHEMA,
            16,
            memory_pool=pool,
            memory="1MiB",
            compression="lz4",
            max_batch_rows=BATCH_ROWS,
            partitioner=make_partitioner("hash", num_subpartitions=16, by="k"),
        )
        for i in range(WRITERS)
    ]
    share = writers[0].memory_budget()
    assert share == POOL // WRITERS
    baseline = pa.total_allocated_bytes()
    peak = [0]
    done = threading.Event()
    lock = threading.Lock()

    def sample() -> None:
        allocated = pa.total_allocated_bytes() - baseline
        with lock:
            peak[0] = max(peak[0], allocated)

    def watch() -> None:
        while not done.is_set():
            sample()
            done.wait(0.0005)

    results: dict[int, tuple[ash.WrittenFile, int]] = {}
    budgets: dict[int, list[int]] = {i: [] for i in range(WRITERS)}
    errors: list[BaseException] = []

    def produce(i: int) -> None:
        try:
            written = 0
            n = 0
            while written < PER_WRITER:
                batch = make_batch(BATCH_ROWS, i * 10_000 + n)
                n += 1
                sample()
                budgets[i].append(writers[i].memory_budget())
                writers[i].write(batch)
                sample()
                written += batch.nbytes
                del batch
            results[i] = (writers[i].close(), written)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    watcher = threading.Thread(target=watch)
    watcher.start()
    threads = [threading.Thread(target=produce, args=(i,)) for i in range(WRITERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    done.set()
    watcher.join()

    assert not errors
    assert sorted(results) == list(range(WRITERS))
    assert peak[0] <= bound, f"peak {peak[0]} bytes above the pool, bound {bound}"
    for i, (written_file, written) in results.items():
        # A region holds at most the writer's share, and it is emitted only when the next
        # batch would not fit: at least share - one batch. Shares start at a quarter of the
        # pool and grow as other writers close.
        assert min(budgets[i]) == share
        assert written_file.regions >= written / max(budgets[i])
        assert written_file.regions <= written / (share - batch_bytes) + 1
        assert ash.open_file(written_file.data_url).num_rows == written_file.rows
    assert pool.num_local_pools == 0 and pool.used_bytes == 0
