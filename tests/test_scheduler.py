"""The read scheduler: planning, coalescing, bounded prefetch, concurrency, retries.

Remote reads run against fsspec's in-memory file system, subclassed to record every ranged
read it serves (and, on request, to fail some or to hold reads at a barrier). The readers see an
ordinary non-local fsspec file system and take their object-store code path.
"""

from __future__ import annotations

import errno
import itertools
import posixpath
import threading
import uuid
from collections.abc import Iterator
from typing import Any, ClassVar

import fsspec
import numpy as np
import pyarrow as pa
import pytest
from dataset_factory import SCHEMA, canonical, expected_rows, make_batch, write_dataset
from fsspec.implementations.memory import MemoryFileSystem

from arrowshuffle.format.errors import InvalidOptionError, MissingObjectError, ShuffleIOError
from arrowshuffle.readers.byte_ranges import FetchBlock, coalesce
from arrowshuffle.readers.dataset import open_dataset
from arrowshuffle.readers.file_reader import INDEX_PREFIX_BYTES, open_file
from arrowshuffle.readers.scheduler import ReadOptions, ReadTask, run_tasks
from arrowshuffle.writers.file_writer import ShuffleFileWriter


class RecordingFileSystem(MemoryFileSystem):
    """The in-memory file system, recording each ``cat_file`` (one ranged read) it serves."""

    #: Also "memory": a dataset commit then creates its manifest version with the in-memory
    #: file system's exclusive create, as on memory:// (other protocols are refused for commits).
    protocol = ("recmem", "memory")
    reads: ClassVar[list[tuple[str, int | None, int | None]]] = []
    failures: ClassVar[dict[str, list[BaseException]]] = {}
    barrier: ClassVar[threading.Barrier | None] = None
    on_read: ClassVar[Any] = None
    lock = threading.Lock()

    def cat_file(self, path: str, start: int | None = None, end: int | None = None, **kw: Any):
        with self.lock:
            self.reads.append((path, start, end))
            pending = self.failures.get(posixpath.basename(path))
            error = pending.pop(0) if pending else None
        if error is not None:
            raise error
        hook = RecordingFileSystem.on_read
        if hook is not None:
            hook(path, start, end)
        if self.barrier is not None and path.endswith(".arrow"):
            self.barrier.wait()
        return super().cat_file(path, start, end, **kw)


fsspec.register_implementation("recmem", RecordingFileSystem, clobber=True)


@pytest.fixture
def recmem() -> Iterator[str]:
    root = f"recmem://t-{uuid.uuid4().hex[:8]}"
    yield root
    RecordingFileSystem.reads.clear()
    RecordingFileSystem.failures.clear()
    RecordingFileSystem.barrier = None
    RecordingFileSystem.on_read = None
    fs = RecordingFileSystem()
    for path in list(fs.store):
        if root.split("://")[1] in path:
            del fs.store[path]


def reads_of(suffix: str) -> list[tuple[str, int | None, int | None]]:
    with RecordingFileSystem.lock:
        return [r for r in RecordingFileSystem.reads if r[0].endswith(suffix)]


def write_one_file(url: str, num_subpartitions: int, regions: int, rows: int = 40) -> str:
    rng = np.random.default_rng(1)
    with ShuffleFileWriter(url, SCHEMA, num_subpartitions, max_batch_rows=1000) as w:
        for r in range(regions):
            sp = rng.integers(0, num_subpartitions, rows)
            w.write(make_batch(rng, r * rows, rows, 0, sp), subpartitions=sp)
            w.flush_region()
    return url


# ---------------------------------------------------------------------- planning and coalescing


def test_one_subpartition_is_one_range_per_nonempty_region(tmp_path):
    pytest.importorskip("pandas")  # stats().to_pandas()
    path = write_one_file(str(tmp_path / "a.arrow"), 4, regions=5)
    f = open_file(path)
    stats = f.stats().to_pandas()
    chunks = stats[(stats.subpartition == 2) & (stats.bytes > 0)].sort_values("offset")
    blocks = f.blocks(2, options=ReadOptions(max_gap=0))
    assert [(b.offset, b.end) for b in blocks] == [
        (int(o), int(o + n)) for o, n in zip(chunks.offset, chunks.bytes, strict=True)
    ]


def test_a_contiguous_run_is_one_range_per_region(tmp_path):
    pytest.importorskip("pandas")  # stats().to_pandas()
    path = write_one_file(str(tmp_path / "a.arrow"), 6, regions=3)
    f = open_file(path)
    stats = f.stats().to_pandas()
    run = stats[(stats.subpartition >= 1) & (stats.subpartition <= 4) & (stats.bytes > 0)]
    per_region = run.groupby("region").agg(start=("offset", "min"), size=("bytes", "sum"))
    blocks = f.blocks(range(1, 5), options=ReadOptions(max_gap=0))
    assert [(b.offset, b.end - b.offset) for b in blocks] == [
        (int(s), int(n)) for s, n in zip(per_region.start, per_region["size"], strict=True)
    ]


def test_coalescing_obeys_max_gap_and_max_block(tmp_path):
    path = write_one_file(str(tmp_path / "a.arrow"), 4, regions=6)
    f = open_file(path)
    ranges = f.chunk_ranges(1)
    assert [c.offset for c in ranges] == sorted(c.offset for c in ranges)
    gaps = [b.offset - a.end for a, b in itertools.pairwise(ranges)]
    assert len(coalesce(ranges, max_gap=10**9)) == 1
    assert len(coalesce(ranges, max_gap=max(gaps) - 1)) > 1
    limit = 2 * max(c.length for c in ranges)
    for block in coalesce(ranges, max_gap=10**9, max_block=limit):
        assert block.end - block.offset <= limit or len(block.ranges) == 1
        # Merged blocks cover their ranges exactly from the first to the last byte.
        assert block.offset == block.ranges[0].offset and block.end == block.ranges[-1].end


def test_read_options_are_checked():
    with pytest.raises(InvalidOptionError, match="max_in_flight must be at least 1"):
        ReadOptions(max_in_flight=0)
    with pytest.raises(InvalidOptionError, match="io_threads must be an integer"):
        ReadOptions(io_threads=2.5)  # type: ignore[arg-type]


# ---------------------------------------------------------------------- remote requests


def test_remote_read_of_one_subpartition_issues_exactly_its_ranges(recmem):
    url = write_one_file(f"{recmem}/f.arrow", 4, regions=5)
    RecordingFileSystem.reads.clear()
    f = open_file(url)
    expected = [(b.offset, b.end) for b in f.blocks(3, options=ReadOptions(max_gap=0))]
    got = f.read(3, options=ReadOptions(max_gap=0))
    size = f.header.data_length
    # Merging off, the first read also proves that the data file belongs to the index and
    # that the regions cover every record batch (V13-V15, V21): its first 16 bytes and its
    # end from where the last region ends, once per file.
    last_end = int(f.meta.regions["offset"][-1] + f.meta.regions["length"][-1])
    proof = [(0, 16), (last_end, size)]
    assert [(s, e) for _, s, e in reads_of(".arrow")] == proof + expected
    assert len(reads_of(".idx")) == 1  # a small index: one request
    whole = pa.ipc.open_file(pa.py_buffer(fsspec.open(url, "rb").open().read())).read_all()
    assert canonical(got).equals(canonical(expected_rows([whole], [3])))
    RecordingFileSystem.reads.clear()
    f.read(3, options=ReadOptions(max_gap=0))
    assert [(s, e) for _, s, e in reads_of(".arrow")] == expected


def test_large_remote_index_costs_at_most_two_requests_in_a_dataset(recmem):
    # 3000 subpartitions x 12 regions: about 1.1 MiB of entries, far more than the prefix.
    ds = write_dataset(
        f"{recmem}/big", num_files=1, num_subpartitions=3000, batches_per_file=12, memory=512
    )
    assert ds.manifest.files[0].index_size > 4 * INDEX_PREFIX_BYTES
    for subpartition in (0, 1500, 2999):
        RecordingFileSystem.reads.clear()
        open_dataset(ds.url).read(subpartition)
        assert len(reads_of(".idx")) <= 2
        RecordingFileSystem.reads.clear()
        open_file(ds.data_urls[0]).read(subpartition)
        assert len(reads_of(".idx")) <= 2


def test_bytes_in_flight_stay_within_the_budget(recmem):
    url = write_one_file(f"{recmem}/f.arrow", 2, regions=12, rows=60)
    f = open_file(url)
    blocks = f.blocks(0, options=ReadOptions(max_gap=0))
    budget = 2 * max(b.end - b.offset for b in blocks)
    events: list[tuple[str, int]] = []
    lock = threading.Lock()

    # The file's two ends, fetched once before the first chunk to prove the file belongs to
    # the index (V13-V15, V21), are not chunk bytes handed out: not counted.
    size = f.header.data_length
    last_end = int(f.meta.regions["offset"][-1] + f.meta.regions["length"][-1])
    ends = {(0, 16), (last_end, size)}

    def on_read(path: str, start: int | None, end: int | None) -> None:
        if path.endswith(".arrow") and start is not None and end is not None:
            if (start, end) in ends:
                return
            with lock:
                events.append(("fetch", end - start))

    RecordingFileSystem.on_read = on_read
    # One batch per chunk (chunks are far below max_batch_rows): batch i is block i.
    sizes = iter([b.end - b.offset for b in blocks])
    count = 0
    for batch in f.iter_batches(
        0, options=ReadOptions(max_gap=0, max_in_flight=budget, io_threads=4)
    ):
        count += 1
        assert batch.num_rows > 0
        with lock:
            events.append(("consumed", next(sizes)))
    assert count == len(blocks)
    outstanding = peak = 0
    for kind, size in events:
        outstanding += size if kind == "fetch" else -size
        peak = max(peak, outstanding)
    assert peak <= budget


class _HeldSource:
    """A byte source whose reads of some ranges wait for an event (to observe prefetching)."""

    concurrent = True

    def __init__(self, size: int) -> None:
        self.url = "held://object"
        self._data = pa.py_buffer(bytes(range(256)) * (size // 256 + 1))
        self.fetched: list[int] = []
        self.third_fetched = threading.Event()

    @property
    def size(self) -> int:
        return self._data.size

    def read_prefix(self, length: int) -> pa.Buffer:
        return self._data.slice(0, length)

    def read_ranges(self, ranges):
        out = []
        for start, end in ranges:
            self.fetched.append(start)
            if len(self.fetched) == 3:
                self.third_fetched.set()
            out.append(self._data.slice(start, end - start))
        return out


def test_next_tasks_are_fetched_while_the_caller_consumes():
    source = _HeldSource(4096)
    one_row = pa.record_batch({"x": [1]})

    def decode(block: FetchBlock, buffers: list[pa.Buffer]) -> list[pa.RecordBatch]:
        return [one_row]

    tasks = [ReadTask(source, (FetchBlock(i * 100, i * 100 + 100, ()),), decode) for i in range(6)]
    batches = run_tasks(tasks, ReadOptions(max_in_flight=300, io_threads=3))
    next(batches)
    # The caller holds the first batch; tasks 2 and 3 must be fetched meanwhile.
    assert source.third_fetched.wait(timeout=30), "no prefetch while the caller consumed"
    # ...but not more than the budget: 3 tasks of 100 bytes.
    assert len(source.fetched) == 3
    assert len(list(batches)) == 5
    assert sorted(source.fetched) == [0, 100, 200, 300, 400, 500]


def test_files_of_a_dataset_are_fetched_concurrently(recmem):
    ds = write_dataset(f"{recmem}/two", num_files=2, num_subpartitions=2, memory=10**6)
    dataset = open_dataset(ds.url)
    # Each file's read of subpartition 1 is one request; both must be in flight at once.
    RecordingFileSystem.barrier = threading.Barrier(2, timeout=30)
    got = dataset.read(1, options=ReadOptions(io_threads=2))
    RecordingFileSystem.barrier = None
    assert len(reads_of(".arrow")) == 2
    files = got["file"].to_numpy()
    assert list(files) == sorted(files)


# ---------------------------------------------------------------------- errors and retries


def test_transient_errors_are_retried(recmem):
    url = write_one_file(f"{recmem}/f.arrow", 3, regions=2)
    f = open_file(url)
    expected = f.read(1)
    RecordingFileSystem.failures["f.arrow"] = [
        OSError(errno.EIO, "connection reset"),
        TimeoutError("read timed out"),
    ]
    RecordingFileSystem.reads.clear()
    got = open_file(url).read(1, options=ReadOptions(max_gap=10**9))
    assert got.equals(expected)
    assert len(reads_of(".arrow")) == 3  # two failures, then the answer


def test_transient_errors_give_up_after_the_retries(recmem):
    url = write_one_file(f"{recmem}/f.arrow", 3, regions=2)
    RecordingFileSystem.failures["f.arrow"] = [OSError(errno.EIO, "boom") for _ in range(10)]
    RecordingFileSystem.reads.clear()
    with pytest.raises(ShuffleIOError, match=r"f\.arrow.*failed 4 times.*boom"):
        open_file(url).read(1, options=ReadOptions(max_gap=10**9))
    assert len(reads_of(".arrow")) == 4


@pytest.mark.parametrize(
    ("error", "kind", "message"),
    [
        (PermissionError(errno.EACCES, "denied"), ShuffleIOError, "permission denied"),
        (FileNotFoundError(errno.ENOENT, "gone"), MissingObjectError, "does not exist"),
    ],
)
def test_permanent_errors_are_raised_at_once_with_the_url(recmem, error, kind, message):
    url = write_one_file(f"{recmem}/f.arrow", 3, regions=2)
    RecordingFileSystem.failures["f.arrow"] = [error]
    RecordingFileSystem.reads.clear()
    with pytest.raises(kind, match=message) as info:
        open_file(url).read(1)
    assert url in str(info.value)
    assert len(reads_of(".arrow")) == 1


def test_a_missing_index_names_its_url(recmem):
    with pytest.raises(MissingObjectError, match=r"recmem://.*nothing\.arrow\.idx"):
        open_file(f"{recmem}/nothing.arrow")
