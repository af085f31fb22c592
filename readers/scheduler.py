"""The read scheduler: fetch planned byte ranges with bounded concurrency and bounded memory.

Every reader (file, dataset, polars) turns its selection into :class:`ReadTask` objects, in the
order their batches must come out: per file, fetch blocks sorted by offset (see
:mod:`arrowshuffle.readers.byte_ranges`), files in dataset order. :func:`run_tasks` then

* runs tasks on object stores on a bounded pool of IO threads, so that many files (and many
  ranges of one file) are fetched at the same time;
* keeps at most ``max_in_flight`` fetched bytes that have not been handed out yet: while the
  caller consumes one task's batches, the next tasks are fetched, but only as many as fit
  (a single task larger than the budget is fetched alone);
* hands batches out strictly in task order, whatever order fetches finish in.

Memory-mapped local files need no IO threads: their tasks run in the caller's thread when
their turn comes, and the operating system does the read-ahead. Tasks that decompress are
the exception: the ones after the head are decoded ahead on the kernel pool
(:mod:`arrowshuffle.format.parallel`), within the same budget.
"""

from __future__ import annotations

import collections
import contextlib
import itertools
import numbers
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import pyarrow as pa

from arrowshuffle.format.errors import ChecksumMismatchError, FormatError, InvalidOptionError
from arrowshuffle.format.parallel import background_threads, submit
from arrowshuffle.readers.byte_ranges import DEFAULT_MAX_BLOCK, DEFAULT_MAX_GAP, FetchBlock
from arrowshuffle.readers.source import ByteSource, RemoteSource

#: Bytes fetched ahead of the batches handed out.
DEFAULT_MAX_IN_FLIGHT = 64 * 1024 * 1024
#: IO threads of one read (each may have several ranged requests outstanding).
DEFAULT_IO_THREADS = 8
#: A task holds at most this share of the in-flight budget, so that several run at once.
_TASKS_PER_BUDGET = 4
#: Local tasks decoded ahead per kernel-pool thread (running or waiting): two, so that a pool
#: thread that finishes one while the caller decodes another has the next at hand.
AHEAD_PER_THREAD = 2

#: Decodes a block from its fetched bytes: one buffer per range of ``block.fetch_ranges``.
Decoder = Callable[[FetchBlock, list[pa.Buffer]], list[pa.RecordBatch]]
#: A projected read of an object store fetches only the selected columns when its chunks hold
#: at least this many bytes: it costs two more round trips (the footer, once per file, and
#: the batches' metadata), worth about this many bytes of transfer.
DEFAULT_PROJECT_MIN_BYTES = 16 * 1024 * 1024


@dataclass(frozen=True)
class ReadOptions:
    """How a read fetches: coalescing, memory budget and IO concurrency.

    Attributes:
        max_gap: merge two byte ranges of a file when at most this many bytes lie between them.
        max_block: the largest merged range (a single larger chunk range is still one read).
        max_in_flight: the most fetched bytes not yet handed out to the caller.
        io_threads: how many fetches run at the same time (object stores only).
        project_min_bytes: a read of some columns (``columns=``) from an object store, without
            checksum verification, fetches only those columns' buffers when its chunks hold at
            least this many bytes (local reads without verification always project).
        decode_ahead: a local read of compressed files decodes the tasks after the current
            one on the kernel pool (:mod:`arrowshuffle.format.parallel`). A caller that already
            runs one read per core, such as a Spark task, turns it off.
    """

    max_gap: int = DEFAULT_MAX_GAP
    max_block: int = DEFAULT_MAX_BLOCK
    max_in_flight: int = DEFAULT_MAX_IN_FLIGHT
    io_threads: int = DEFAULT_IO_THREADS
    project_min_bytes: int = DEFAULT_PROJECT_MIN_BYTES
    decode_ahead: bool = True

    def __post_init__(self) -> None:
        if not isinstance(self.decode_ahead, bool):
            raise InvalidOptionError(
                f"decode_ahead must be True or False, found {self.decode_ahead!r}"
            )
        for name, minimum in (
            ("max_gap", 0),
            ("max_block", 1),
            ("max_in_flight", 1),
            ("io_threads", 1),
            ("project_min_bytes", 0),
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, numbers.Integral):
                raise InvalidOptionError(f"{name} must be an integer, found {value!r}")
            if value < minimum:
                raise InvalidOptionError(f"{name} must be at least {minimum}, found {value}")

    @property
    def task_bytes(self) -> int:
        """The most bytes grouped into one task (one ``cat_ranges`` call)."""
        return max(1, self.max_in_flight // _TASKS_PER_BUDGET)


@dataclass(frozen=True)
class ReadTask:
    """Some fetch blocks of one object, fetched together, and how to decode each of them."""

    source: ByteSource
    blocks: tuple[FetchBlock, ...]
    decode: Decoder
    #: Decoding decompresses: CPU work that a local read runs ahead on the kernel pool.
    decompresses: bool = False

    @property
    def nbytes(self) -> int:
        """Bytes this task fetches."""
        return sum(b.nbytes for b in self.blocks)

    def run(self) -> list[pa.RecordBatch]:
        """Fetch the blocks (one request each, concurrently where possible) and decode them.

        A block of an object store whose bytes fail a chunk checksum is fetched again (the
        damage may have happened on the way), up to the source's retry budget; a local block,
        or one that comes back with the very same bytes (the stored object is damaged), raises
        :class:`ChecksumMismatchError` at once.
        """
        fetched = self.source.read_ranges([r for b in self.blocks for r in b.fetch_ranges])
        out: list[pa.RecordBatch] = []
        position = 0
        for block in self.blocks:
            count = len(block.fetch_ranges)
            out.extend(self._decode_checked(block, fetched[position : position + count]))
            position += count
        return out

    def _decode_checked(self, block: FetchBlock, buffers: list[pa.Buffer]) -> list[pa.RecordBatch]:
        source = self.source
        attempt = 0
        while True:
            try:
                return self.decode(block, buffers)
            except FormatError as exc:
                # A failed checksum, or data file ends that do not meet the regions (V21,
                # judged on a block widened to fetch them), may be damage on the way.
                damaged = isinstance(exc, ChecksumMismatchError) or exc.rule == "V21"
                if not damaged or not isinstance(source, RemoteSource) or block.pieces:
                    raise  # a projected block is not verified: its damage is no transfer's
                kind = type(exc)
                if attempt >= source.retry_budget:
                    raise kind(
                        f"{exc.detail} (still after fetching bytes [{block.offset}, "
                        f"{block.end}) {attempt + 1} times)",
                        rule=exc.rule,
                    ) from exc
                attempt += 1
                fresh = source.refetch(block.offset, block.end, attempt, exc)
                if fresh.equals(buffers[0]):
                    raise kind(
                        f"{exc.detail} (fetching bytes [{block.offset}, {block.end}) again "
                        "returned the same bytes: the stored object is damaged, or was replaced "
                        "since it was opened)",
                        rule=exc.rule,
                    ) from exc
                buffers = [fresh]


def make_tasks(
    source: ByteSource,
    blocks: Iterable[FetchBlock],
    decode: Decoder,
    task_bytes: int,
    *,
    decompresses: bool = False,
) -> Iterator[ReadTask]:
    """Group consecutive blocks of one object into tasks of at most ``task_bytes`` each."""
    group: list[FetchBlock] = []
    size = 0
    for block in blocks:
        length = block.nbytes
        if group and size + length > task_bytes:
            yield ReadTask(source, tuple(group), decode, decompresses)
            group, size = [], 0
        group.append(block)
        size += length
    if group:
        yield ReadTask(source, tuple(group), decode, decompresses)


def run_tasks(
    tasks: Iterable[ReadTask], options: ReadOptions | None = None
) -> Iterator[pa.RecordBatch]:
    """Run tasks with bounded concurrency and memory; yield their batches in task order.

    ``tasks`` is consumed lazily, only as far as the in-flight budget allows. Closing the
    returned iterator early cancels the fetches that have not started.
    """
    options = options or ReadOptions()
    budget = options.max_in_flight
    pending: collections.deque[_Pending] = collections.deque()
    upcoming = iter(tasks)
    lookahead: ReadTask | None = None
    exhausted = False
    in_flight = 0
    pool: ThreadPoolExecutor | None = None
    try:
        while True:
            # Start as many of the next tasks as the budget allows (always at least one).
            while not exhausted:
                if lookahead is None:
                    lookahead = next(upcoming, None)
                    if lookahead is None:
                        exhausted = True
                        break
                if pending and in_flight + lookahead.nbytes > budget:
                    break
                future: Future[list[pa.RecordBatch]] | None = None
                if lookahead.source.concurrent:
                    if pool is None:
                        pool = ThreadPoolExecutor(
                            options.io_threads, thread_name_prefix="arrowshuffle-io"
                        )
                    future = pool.submit(lookahead.run)
                pending.append(_Pending(lookahead, future))
                in_flight += lookahead.nbytes
                lookahead = None
            if not pending:
                return
            if options.decode_ahead:
                _decode_ahead(pending)
            head = pending.popleft()
            try:
                batches = head.result(pending)
            except BaseException:
                head.abandon()  # an interrupt while the head ran on the pool: wait for it
                raise
            yield from batches
            in_flight -= head.task.nbytes
    finally:
        for item in pending:  # cancel all first: the pool must not start one while we wait
            item.cancel()
        for item in pending:
            item.abandon()
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)


def _decode_ahead(pending: collections.deque[_Pending]) -> None:
    """Hand local tasks that decompress, after the next one, to the kernel pool.

    The next task is the caller's own. At most :data:`AHEAD_PER_THREAD` tasks per pool thread
    are handed over and unfinished, so that other work on the pool (a writer's sorts, say)
    waits behind one read task at most, and decoded batches wait for few tasks.
    """
    idle = AHEAD_PER_THREAD * background_threads() - sum(1 for item in pending if item.on_pool)
    for item in itertools.islice(pending, 1, None):
        if idle <= 0:
            return
        if item.may_decode_ahead:
            item.future = submit(item.task.run)
            if item.future is None:
                return
            idle -= 1


@dataclass
class _Pending:
    """A task of :func:`run_tasks` waiting for its turn: started on a pool, or not yet."""

    task: ReadTask
    future: Future[list[pa.RecordBatch]] | None
    #: What the caller's thread decoded of a local task ahead of its turn, or the error that
    #: raised (raised in turn, when the task is the head).
    batches: list[pa.RecordBatch] | None = None
    error: BaseException | None = None

    @property
    def local(self) -> bool:
        """A task of a local source: the caller may run it, here or ahead of its turn."""
        return not self.task.source.concurrent

    @property
    def decoded(self) -> bool:
        """Whether the caller already ran it ahead of its turn."""
        return self.batches is not None or self.error is not None

    @property
    def on_pool(self) -> bool:
        """A local task handed to the kernel pool and not finished."""
        return self.local and self.future is not None and not self.future.done()

    @property
    def local_decode(self) -> bool:
        """A local task that decompresses: one the caller and the kernel pool may share."""
        return self.local and self.task.decompresses

    @property
    def may_decode_ahead(self) -> bool:
        """A local task that decompresses, not yet started anywhere."""
        return self.local_decode and self.future is None and not self.decoded

    def take_back(self) -> bool:
        """Run a local task that decompresses here, if nobody has started it; whether it did."""
        if not self.local_decode or self.decoded:
            return False
        if self.future is not None:
            if not self.future.cancel():
                return False  # running or done on the pool
            self.future = None
        try:
            self.batches = self.task.run()
        except Exception as exc:  # raised when this task's turn comes, not before
            self.error = exc
        return True

    def result(self, after: Iterable[_Pending]) -> list[pa.RecordBatch]:
        """This task's batches.

        While a pool thread decodes it, the caller does not idle: it decodes the next local
        tasks that nobody has started.
        """
        self.take_back()  # run here if the pool has not started it
        if self.error is not None:
            raise self.error
        if self.batches is not None:
            return self.batches
        if self.future is None:
            return self.task.run()
        if self.local:
            # Tasks nobody has started first, then those waiting on the pool (taking those
            # first would leave the pool idle once it finishes this one).
            for item in sorted(after, key=lambda item: item.future is not None):
                if self.future.done():
                    break
                item.take_back()
        return self.future.result()

    def cancel(self) -> None:
        """Cancel a task whose batches are no longer wanted, if it has not started."""
        if self.future is not None:
            self.future.cancel()

    def abandon(self) -> None:
        """Wait for a local task still running on the pool: no decode outlives the read."""
        if self.on_pool:
            assert self.future is not None
            with contextlib.suppress(BaseException):
                self.future.exception()
