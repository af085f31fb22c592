"""Local reads of compressed files decode the tasks after the head on the kernel pool.

The caller still receives every batch in task order, an error when its task's turn comes,
and no decode outlives a read that is closed early.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import arrowshuffle
from arrowshuffle.format.errors import CorruptFileError, FormatError, InvalidOptionError
from arrowshuffle.format.parallel import NUM_THREADS_ENV, submit
from arrowshuffle.readers.byte_ranges import FetchBlock
from arrowshuffle.readers.scheduler import ReadOptions, ReadTask, run_tasks


class _LocalSource:
    """An in-memory source that, like a memory map, needs no IO thread."""

    concurrent = False
    url = "local://object"

    def __init__(self, size: int) -> None:
        self._data = pa.py_buffer(bytes(size))

    @property
    def size(self) -> int:
        return self._data.size

    def read_prefix(self, length: int) -> pa.Buffer:
        return self._data.slice(0, length)

    def read_ranges(self, ranges: list[tuple[int, int]]) -> list[pa.Buffer]:
        return [self._data.slice(start, end - start) for start, end in ranges]


class _Decoder:
    """Decodes block ``i`` into a one-row batch holding ``i``, slowly, recording threads."""

    def __init__(
        self,
        fail_at: int | None = None,
        seconds: float = 0.02,
        interrupt_at: int | None = None,
        quick: frozenset[int] = frozenset(),
    ) -> None:
        self.fail_at = fail_at
        self.quick = quick
        self.interrupt_at = interrupt_at
        self.seconds = seconds
        self.threads: set[int] = set()
        self.started: list[int] = []
        self.running = 0
        self.lock = threading.Lock()

    def __call__(self, block: FetchBlock, buffers: list[pa.Buffer]) -> list[pa.RecordBatch]:
        index = block.offset // 100
        with self.lock:
            self.running += 1
            self.started.append(index)
            self.threads.add(threading.get_ident())
        try:
            if index == self.interrupt_at:
                raise KeyboardInterrupt
            time.sleep(0 if index in self.quick else self.seconds)
            if index == self.fail_at:
                raise CorruptFileError(f"block {index} is damaged", rule="V17")
            return [pa.record_batch({"i": [index]})]
        finally:
            with self.lock:
                self.running -= 1


def _tasks(decode: _Decoder, count: int) -> list[ReadTask]:
    source = _LocalSource(100 * count)
    return [
        ReadTask(source, (FetchBlock(i * 100, i * 100 + 100, ()),), decode, decompresses=True)
        for i in range(count)
    ]


@pytest.fixture
def two_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(NUM_THREADS_ENV, "2")


def _order(batches: Iterator[pa.RecordBatch]) -> list[int]:
    return [b.column(0)[0].as_py() for b in batches]


@pytest.mark.usefixtures("two_threads")
def test_tasks_decode_on_two_threads_and_come_out_in_order() -> None:
    decode = _Decoder()
    assert _order(run_tasks(_tasks(decode, 8), ReadOptions(max_in_flight=10**6))) == list(range(8))
    assert len(decode.threads) == 2  # the caller and a pool thread
    assert threading.get_ident() in decode.threads


@pytest.mark.usefixtures("two_threads")
def test_without_decompression_local_tasks_stay_on_the_callers_thread() -> None:
    decode = _Decoder(seconds=0.002)
    tasks = [ReadTask(t.source, t.blocks, t.decode, decompresses=False) for t in _tasks(decode, 6)]
    assert _order(run_tasks(tasks)) == list(range(6))
    assert decode.threads == {threading.get_ident()}


@pytest.mark.usefixtures("two_threads")
def test_an_error_is_raised_in_its_tasks_turn() -> None:
    # Task 3 may be decoded (and fail) while task 1 is handed out: the caller still gets
    # tasks 0-2 first, then the error.
    decode = _Decoder(fail_at=3)
    seen: list[int] = []
    with pytest.raises(FormatError, match="block 3 is damaged"):
        for batch in run_tasks(_tasks(decode, 6), ReadOptions(max_in_flight=10**6)):
            seen.append(batch.column(0)[0].as_py())
    assert seen == [0, 1, 2]


@pytest.mark.usefixtures("two_threads")
def test_closing_a_read_early_waits_for_the_decodes_it_started() -> None:
    decode = _Decoder(seconds=0.05)
    batches = run_tasks(_tasks(decode, 8), ReadOptions(max_in_flight=10**6))
    assert _order(iter([next(batches)])) == [0]
    batches.close()
    assert decode.running == 0


@pytest.mark.usefixtures("two_threads")
@pytest.mark.parametrize("codec", ["lz4", "zstd"])
def test_a_compressed_file_of_many_tasks_reads_what_an_uncompressed_one_does(
    tmp_path: Path, codec: str
) -> None:
    rng = np.random.default_rng(7)
    rows = 60_000
    table = pa.table(
        {
            "k": pa.array(rng.integers(0, 1000, rows)),
            "v": pa.array(rng.random(rows)),
            "s": pa.array(np.char.add("s", rng.integers(0, 99, rows).astype(str))),
        }
    )
    plain, packed = tmp_path / "plain.arrow", tmp_path / "packed.arrow"
    ids = (table.column("k").to_numpy() % 16).astype(np.int32)
    for path, compression in ((plain, "none"), (packed, codec)):
        with arrowshuffle.ShuffleFileWriter(
            path, table.schema, 16, memory=256 * 1024, compression=compression
        ) as writer:
            for start in range(0, rows, 2000):
                writer.write(table.slice(start, 2000), subpartitions=ids[start : start + 2000])
    # Small blocks and a small budget: many tasks, several of them decoded ahead.
    options = arrowshuffle.ReadOptions(max_block=64 * 1024, max_in_flight=512 * 1024)
    with arrowshuffle.open_file(plain) as a, arrowshuffle.open_file(packed) as b:
        assert b.num_regions > 4
        for selection in (None, range(3, 11), 5):
            want = a.read(selection)
            got = list(b.iter_batches(selection, options=options))
            assert pa.Table.from_batches(got, schema=want.schema).equals(want)


@pytest.mark.usefixtures("two_threads")
def test_decode_ahead_off_keeps_every_task_on_the_callers_thread() -> None:
    decode = _Decoder(seconds=0.005)
    options = ReadOptions(max_in_flight=10**6, decode_ahead=False)
    assert _order(run_tasks(_tasks(decode, 6), options)) == list(range(6))
    assert decode.threads == {threading.get_ident()}


def test_decode_ahead_must_be_a_bool() -> None:
    with pytest.raises(InvalidOptionError, match="decode_ahead must be True or False, found 1"):
        ReadOptions(decode_ahead=1)  # type: ignore[arg-type]


@pytest.mark.usefixtures("two_threads")
def test_closing_early_does_not_decode_the_whole_queue() -> None:
    # Only as many tasks as the pool has threads are handed to it: the rest are cancelled.
    decode = _Decoder(seconds=0.05)
    batches = run_tasks(_tasks(decode, 12), ReadOptions(max_in_flight=10**6))
    next(batches)
    batches.close()
    assert decode.running == 0
    assert len(decode.started) <= 3, decode.started


@pytest.mark.usefixtures("two_threads")
def test_an_interrupt_waits_for_the_decode_running_on_the_pool() -> None:
    # Task 1 runs on the pool while the caller, waiting, decodes task 2 inline; an interrupt
    # there must not leave task 1 running after the read has ended.
    decode = _Decoder(seconds=0.3, interrupt_at=2, quick=frozenset({0}))
    batches = run_tasks(_tasks(decode, 6), ReadOptions(max_in_flight=10**6))
    with pytest.raises(KeyboardInterrupt):
        list(batches)
    assert decode.running == 0
    assert 1 in decode.started


@pytest.mark.usefixtures("two_threads")
def test_at_most_one_task_per_pool_thread_is_queued_ahead() -> None:
    # Other work on the kernel pool (a writer's sorts) never waits behind a read's queue.
    decode = _Decoder(seconds=0.05)
    seen_on_pool: list[int] = []
    tasks = _tasks(decode, 10)
    probe = threading.Event()

    def pool_work() -> None:
        seen_on_pool.append(len(decode.started))
        probe.set()

    iterator = run_tasks(tasks, ReadOptions(max_in_flight=10**6))
    next(iterator)
    future = submit(pool_work)
    assert future is not None
    # The pool thread finishes the one decode it was given (50 ms), then runs this work.
    assert probe.wait(timeout=30)
    assert seen_on_pool[0] <= 4, decode.started
    assert len(list(iterator)) == 9
