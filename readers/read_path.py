"""The one read path of every reader: select → plan → fetch tasks → decode.

Files and datasets read the same way; a file is a dataset of one file (as ``pyarrow.dataset``
treats a single file). Three ways of describing what to read (a subpartition selection, a
consumer of an assignment, a planned task from :meth:`Readable.plan`) make one
:class:`~arrowshuffle.readers.selection.Selection`, which becomes the same list of
:class:`~arrowshuffle.readers.selection.FileRead` (which subpartitions, and which regions, of
which file).

Every file read is then planned from its index (chunk ranges, proven first), coalesced into
fetch blocks, grouped into fetch tasks and run by the read scheduler, with the tuning of one
:class:`~arrowshuffle.readers.scheduler.ReadOptions`.
"""

from __future__ import annotations

import abc
import dataclasses
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, TypeVar

import numpy as np
import pyarrow as pa

from arrowshuffle.format.errors import InvalidOptionError
from arrowshuffle.format.notation import parse_bytes
from arrowshuffle.readers.balance import (
    DEFAULT_SKEW_FACTOR,
    DEFAULT_SKEW_MIN_BYTES,
    DEFAULT_TARGET_BYTES,
    PlannedRead,
    SubpartitionSizes,
    plan_reads,
)
from arrowshuffle.readers.byte_ranges import Subpartitions, subpartition_runs
from arrowshuffle.readers.integrity import Verify
from arrowshuffle.readers.scheduler import ReadOptions, ReadTask, run_tasks
from arrowshuffle.readers.selection import EVERYTHING, FileRead, Selection

if TYPE_CHECKING:
    from arrowshuffle.readers.file_reader import ShuffleFile

_T = TypeVar("_T")
_R = TypeVar("_R")


class Readable(abc.ABC):
    """Reading, written once for files and datasets.

    Subclasses say how many files there are, how to open one, and what sizes they know; the
    selection, planning, fetching and decoding are the same for both.
    """

    #: The tuning given at open; a call's ``options=`` replaces it for that call.
    options: ReadOptions

    @property
    @abc.abstractmethod
    def schema(self) -> pa.Schema:
        """The Arrow schema of every batch."""

    @property
    @abc.abstractmethod
    def num_subpartitions(self) -> int:
        """The subpartition count of every file."""

    @property
    @abc.abstractmethod
    def num_files(self) -> int:
        """How many data files the reader covers."""

    @property
    @abc.abstractmethod
    def snapshot(self) -> str:
        """Names exactly the data read, in words: tasks planned on other data are refused."""

    @abc.abstractmethod
    def file(self, i: int, *, want: Subpartitions | None = None) -> ShuffleFile:
        """The ``i``-th file, opened on first use (``want``: what a first read asks for)."""

    @property
    def _remote(self) -> bool:
        """True when files are fetched over a network (opened concurrently)."""
        return False

    def _opened(self, i: int) -> ShuffleFile | None:
        """The ``i``-th file if it is open already (without opening it)."""
        return None

    @abc.abstractmethod
    def subpartition_sizes(self) -> tuple[np.ndarray, np.ndarray]:
        """Bytes and rows of every subpartition, summed over files (two arrays of ``N``)."""

    def sizes_of(self, s: int) -> SubpartitionSizes:
        """Bytes and rows of subpartition ``s`` per file and region (from the indexes)."""

        def one(f: int) -> tuple[np.ndarray, np.ndarray]:
            entries = self.file(f, want=s).entries(s, s + 1)[0]
            return entries["length"].astype(np.int64), entries["rows"].astype(np.int64)

        pairs = self._map_files(one, list(range(self.num_files)), self.options)
        return SubpartitionSizes([b for b, _ in pairs], [r for _, r in pairs])

    # ---------------------------------------------------------------- selection

    def reads(self, selection: Selection = EVERYTHING) -> list[FileRead]:
        """What ``selection`` covers in this reader, file by file, in file order.

        Raises:
            InvalidOptionError: a selection outside the reader.
        """
        return selection.file_reads(self.num_subpartitions, self.num_files, self.snapshot)

    # ---------------------------------------------------------------- planning

    def plan(
        self,
        target_bytes: int | str = DEFAULT_TARGET_BYTES,
        *,
        subpartitions: Subpartitions | None = None,
        skew_factor: float = DEFAULT_SKEW_FACTOR,
        skew_min_bytes: int | str = DEFAULT_SKEW_MIN_BYTES,
        max_tasks: int | None = None,
    ) -> list[PlannedRead]:
        """Balanced read tasks, planned from sizes alone (no data is read).

        Contiguous small subpartitions are coalesced up to ``target_bytes``; a subpartition
        above ``skew_factor`` times the median and above ``skew_min_bytes`` is split into tasks over
        disjoint groups of files (and of regions when one file alone is too big). Every
        selected (file, subpartition) chunk belongs to exactly one task; read one with
        ``read(task=t)``. The defaults follow Spark's adaptive execution (skewed-partition
        factor 5 and threshold 256 MiB).

        Args:
            target_bytes: the bytes a task aims at (``"128MiB"`` or a count).
            subpartitions: plan only these (all by default).
            skew_factor: the multiple of the median above which a subpartition is skewed ...
            skew_min_bytes: ... when it also holds more than this.
            max_tasks: the most tasks wanted; the target grows until the plan fits.

        Returns:
            Tasks in subpartition order.
        """
        target = parse_bytes(target_bytes, name="target_bytes")
        skew_min = parse_bytes(skew_min_bytes, name="skew_min_bytes")
        selection = range(self.num_subpartitions) if subpartitions is None else subpartitions
        runs = subpartition_runs(selection, self.num_subpartitions)
        sizes, rows = self.subpartition_sizes()
        tasks = plan_reads(
            sizes,
            rows,
            runs,
            self.num_files,
            self.sizes_of,
            target_bytes=target,
            skew_factor=skew_factor,
            skew_min_bytes=skew_min,
            max_tasks=max_tasks,
        )
        snapshot = self.snapshot
        return [dataclasses.replace(task, snapshot=snapshot) for task in tasks]

    # ---------------------------------------------------------------- fetching

    def read_tasks(
        self,
        reads: Sequence[FileRead],
        *,
        columns: Sequence[str] | None = None,
        verify: Verify = "auto",
        options: ReadOptions | None = None,
    ) -> list[ReadTask]:
        """Open and plan every file of ``reads`` (concurrently over a network) into fetch tasks.

        Tasks come in output order: file by file, and within a file in file order.
        """
        if options is not None and not isinstance(options, ReadOptions):
            raise InvalidOptionError(
                f"options must be a ReadOptions, found {type(options).__name__}"
            )
        options = options or self.options
        if not isinstance(reads, Iterable):
            raise InvalidOptionError(f"reads must be FileReads from reads(), found {reads!r:.80}")
        reads = list(reads)  # checked, then read once per file
        if not all(isinstance(r, FileRead) for r in reads):
            raise InvalidOptionError(f"reads must be FileReads from reads(), found {reads!r:.80}")

        # A file already proven to hold nothing there is not visited: the tasks of a plan each
        # pass over every file, most of which hold no bytes of a small task's subpartitions.
        reads = [r for r in reads if not self._proven_empty(r)]

        def prepare(read: FileRead) -> list[ReadTask]:
            return self.file(read.file, want=read.subpartitions).file_tasks(
                read.subpartitions,
                columns=columns,
                verify=verify,
                options=options,
                regions=read.regions,
            )

        per_file = self._map_files(prepare, list(reads), options)
        return [task for tasks in per_file for task in tasks]

    def _proven_empty(self, read: FileRead) -> bool:
        opened = self._opened(read.file)
        return opened is not None and opened.proven_empty(read.subpartitions)

    def _map_files(
        self, work: Callable[[_T], _R], items: Sequence[_T], options: ReadOptions
    ) -> list[_R]:
        """``work`` on every item, on IO threads when the files are remote."""
        if not self._remote or len(items) < 2:
            return [work(item) for item in items]
        workers = min(options.io_threads, len(items))
        with ThreadPoolExecutor(workers, thread_name_prefix="arrowshuffle-open") as pool:
            return list(pool.map(work, items))

    # ---------------------------------------------------------------- reading

    def iter_selection(
        self,
        selection: Selection,
        *,
        columns: Sequence[str] | None = None,
        verify: Verify = "auto",
        options: ReadOptions | None = None,
    ) -> Iterator[pa.RecordBatch]:
        """:meth:`iter_batches` of a :class:`Selection` made by the caller."""
        if options is not None and not isinstance(options, ReadOptions):
            raise InvalidOptionError(
                f"options must be a ReadOptions, found {type(options).__name__}"
            )
        return self.iter_reads(
            self.reads(selection), columns=columns, verify=verify, options=options
        )

    def iter_reads(
        self,
        reads: Sequence[FileRead],
        *,
        columns: Sequence[str] | None = None,
        verify: Verify = "auto",
        options: ReadOptions | None = None,
    ) -> Iterator[pa.RecordBatch]:
        """:meth:`iter_batches` of file reads the caller made (see :meth:`reads`)."""
        options = options or self.options
        if columns is not None:
            select_schema(self.schema, columns)
        tasks = self.read_tasks(reads, columns=columns, verify=verify, options=options)
        return run_tasks(tasks, options)

    def iter_batches(
        self,
        subpartitions: Subpartitions | None = None,
        *,
        columns: Sequence[str] | None = None,
        verify: Verify = "auto",
        consumer: int | None = None,
        num_consumers: int | None = None,
        pattern: str = "all_to_all",
        task: PlannedRead | None = None,
        options: ReadOptions | None = None,
    ) -> Iterator[pa.RecordBatch]:
        """Yield the record batches of a selection, file by file, each in file order.

        For one subpartition that is write order. A run of subpartitions yields, region by
        region, each subpartition's rows in ascending subpartition order; a broadcast chunk is
        fetched once and yielded once per requested subpartition.

        Arguments are checked and the index entries fetched when this is called; data is
        fetched as the iterator is consumed, at most ``options.max_in_flight`` bytes ahead.

        Args:
            subpartitions: an int, a range or an iterable of ints; all by default.
            columns: names of the columns to return, in that order.
            verify: check every chunk's CRC32C before decoding it: ``"auto"`` (the default)
                for object stores and not for local files, ``True`` always, ``False`` never.
                A chunk of an object store that fails its check is fetched again.
            consumer: read what this consumer is assigned instead of ``subpartitions``.
            num_consumers: how many consumers share the data.
            pattern: ``"all_to_all"`` or ``"pointwise"``; see :func:`arrowshuffle.assign`.
            task: read one task of :meth:`plan` instead.
            options: the tuning of this read (coalescing, memory, IO threads); by default the
                one given at open.
        """
        selection = Selection(subpartitions, consumer, num_consumers, pattern, task)
        return self.iter_selection(selection, columns=columns, verify=verify, options=options)

    def read(
        self,
        subpartitions: Subpartitions | None = None,
        *,
        columns: Sequence[str] | None = None,
        verify: Verify = "auto",
        consumer: int | None = None,
        num_consumers: int | None = None,
        pattern: str = "all_to_all",
        task: PlannedRead | None = None,
        options: ReadOptions | None = None,
    ) -> pa.Table:
        """Read a selection into one table; the arguments are those of :meth:`iter_batches`."""
        schema = self.schema if columns is None else select_schema(self.schema, columns)
        selection = Selection(subpartitions, consumer, num_consumers, pattern, task)
        batches = self.iter_selection(selection, columns=columns, verify=verify, options=options)
        return pa.Table.from_batches(list(batches), schema=schema)


def select_schema(schema: pa.Schema, columns: Sequence[str]) -> pa.Schema:
    """The schema of a projection, or :class:`InvalidOptionError` for unknown columns."""
    if isinstance(columns, str):
        raise InvalidOptionError(f"columns must be a list of names, found the string {columns!r}")
    if not isinstance(columns, Iterable):
        raise InvalidOptionError(f"columns must be a list of names, found {type(columns).__name__}")
    missing = [c for c in columns if c not in schema.names]
    if missing:
        raise InvalidOptionError(
            f"no column {missing[0]!r} in the data; its columns are {schema.names}"
        )
    ambiguous = [c for c in columns if schema.names.count(c) > 1]
    if ambiguous:
        raise InvalidOptionError(
            f"column {ambiguous[0]!r} is ambiguous: the data has "
            f"{schema.names.count(ambiguous[0])} columns of that name; read without columns= "
            "and select by position"
        )
    return pa.schema([schema.field(c) for c in columns], metadata=schema.metadata)
