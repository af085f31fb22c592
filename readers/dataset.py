"""Datasets: the files a manifest lists, read as one."""

from __future__ import annotations

import errno
import os
import threading
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pyarrow as pa

from arrowshuffle._storage import INDEX_SUFFIX, Location, read_bytes, resolve, storage_errors
from arrowshuffle.format.errors import (
    CorruptFileError,
    FormatError,
    InvalidOptionError,
    MissingObjectError,
    SchemaMismatchError,
)
from arrowshuffle.format.index import encode_partitioner, schema_to_bytes
from arrowshuffle.format.manifest import (
    MANIFEST_NAME,
    MAX_MANIFEST_BYTES,
    Manifest,
    ManifestFile,
    decode_manifest,
)
from arrowshuffle.readers.assign import select_reads
from arrowshuffle.readers.file_reader import (
    IndexShape,
    ShuffleFile,
    _raise_naming,
    _select_schema,
    open_file,
)
from arrowshuffle.readers.integrity import Verify, resolve_verify
from arrowshuffle.readers.plan import DEFAULT_MAX_BLOCK, DEFAULT_MAX_GAP, ChunkRange, Subpartitions
from arrowshuffle.readers.scheduler import (
    DEFAULT_IO_THREADS,
    DEFAULT_MAX_IN_FLIGHT,
    ReadOptions,
    ReadTask,
    run_tasks,
)
from arrowshuffle.readers.source import ReadStats, RemoteSource

#: The columns of :meth:`ShuffleDataset.stats`.
_STATS_SCHEMA = pa.schema(
    [(name, pa.int64()) for name in ("file", "region", "subpartition", "offset", "bytes")]
    + [("rows", pa.int64()), ("batches", pa.int64()), ("broadcast", pa.bool_())]
)


class ShuffleDataset:
    """A dataset opened through its manifest. Use :func:`arrowshuffle.open_dataset`.

    Files are opened on first use. A read opens (and plans) the files it needs concurrently on
    a bounded thread pool, fetching only the index slices of the requested subpartitions, then
    runs all files' fetches through one read scheduler: batches come out file by file in
    manifest order, and within a file in file order (see :meth:`ShuffleFile.iter_batches`).
    """

    def __init__(
        self, directory: Location, manifest: Manifest, *, manifest_stats: ReadStats | None = None
    ) -> None:
        self.directory = directory
        self.manifest = manifest
        self._manifest_stats = manifest_stats or ReadStats()
        self._files: dict[int, ShuffleFile] = {}
        self._lock = threading.Lock()
        # What every index of the dataset should hold, to predict where its sections are.
        self._schema_length = len(schema_to_bytes(manifest.schema))
        self._partitioner_length = len(encode_partitioner(manifest.partitioner))

    @property
    def url(self) -> str:
        """The dataset directory's path or URL."""
        return self.directory.url

    @property
    def schema(self) -> pa.Schema:
        """The Arrow schema of every file."""
        return self.manifest.schema

    @property
    def num_subpartitions(self) -> int:
        """The subpartition count of every file."""
        return self.manifest.num_subpartitions

    @property
    def num_files(self) -> int:
        """How many data/index pairs the manifest lists."""
        return len(self.manifest.files)

    @property
    def num_rows(self) -> int:
        """Rows stored over all files (a broadcast chunk counts once)."""
        return self.manifest.total_rows

    @property
    def partitioner(self) -> dict[str, Any]:
        """The partitioner spec of the dataset."""
        return dict(self.manifest.partitioner)

    def file(self, i: int, *, want: Subpartitions | None = None) -> ShuffleFile:
        """The ``i``-th listed file, opened on first use and checked against the manifest.

        Args:
            i: the file's position in the manifest.
            want: the subpartitions about to be read; a remote open fetches their index
                entries with the metadata.
        """
        if not 0 <= i < self.num_files:
            raise InvalidOptionError(f"file {i} does not exist: the dataset has {self.num_files}")
        with self._lock:
            opened = self._files.get(i)
        if opened is not None:
            return opened
        entry = self.manifest.files[i]
        location = self.directory.child(entry.data)
        if location.is_local:
            _check_local_sizes(location, entry)
        shape = IndexShape(
            entry.regions, self.num_subpartitions, self._schema_length, self._partitioner_length
        )
        shuffle_file = ShuffleFile(
            location,
            index_size=entry.index_size,
            want=want,
            shape=shape,
        )
        self._check_file(shuffle_file, i)
        with self._lock:
            return self._files.setdefault(i, shuffle_file)

    def _check_file(self, shuffle_file: ShuffleFile, i: int) -> None:
        entry = self.manifest.files[i]
        url = shuffle_file.url
        if shuffle_file.header.data_length != entry.data_size:
            raise CorruptFileError(
                f"{url}: the manifest lists {entry.data_size} data bytes, "
                f"its index declares {shuffle_file.header.data_length}",
                rule="M7",
            )
        if (shuffle_file.num_rows, shuffle_file.num_regions) != (entry.rows, entry.regions):
            raise CorruptFileError(
                f"{url}: the manifest lists {entry.rows} rows in {entry.regions} regions, "
                f"its index declares {shuffle_file.num_rows} rows in {shuffle_file.num_regions}",
                rule="M7",
            )
        if shuffle_file.num_subpartitions != self.num_subpartitions:
            raise CorruptFileError(
                f"{url}: has {shuffle_file.num_subpartitions} subpartitions, "
                f"the manifest {self.num_subpartitions}",
                rule="M6",
            )
        if not shuffle_file.schema.equals(self.schema, check_metadata=False):
            raise SchemaMismatchError(
                f"{url}: its schema is {shuffle_file.schema}, the manifest's {self.schema}",
                rule="M6",
            )

    # ---------------------------------------------------------------- selection and plans

    def reads(
        self,
        subpartitions: Subpartitions | None = None,
        *,
        consumer: int | None = None,
        num_consumers: int | None = None,
        pattern: str = "all_to_all",
    ) -> list[tuple[int, Subpartitions]]:
        """The ``(file, subpartitions)`` pairs a read with these arguments covers, in order.

        ``subpartitions`` applies to every file; ``consumer``/``num_consumers``/``pattern``
        select what :func:`arrowshuffle.assign` gives that consumer, with each file one
        producer.
        """
        pairs = select_reads(
            self.num_subpartitions,
            self.num_files,
            subpartitions,
            consumer=consumer,
            num_consumers=num_consumers,
            pattern=pattern,
        )
        full = range(self.num_subpartitions)
        return [(f, full if s is None else s) for f, s in pairs]

    def plan(
        self,
        subpartitions: Subpartitions | None = None,
        *,
        consumer: int | None = None,
        num_consumers: int | None = None,
        pattern: str = "all_to_all",
    ) -> list[tuple[int, list[ChunkRange]]]:
        """Per file read, the chunk ranges it fetches (see :meth:`ShuffleFile.plan`)."""
        reads = self.reads(
            subpartitions, consumer=consumer, num_consumers=num_consumers, pattern=pattern
        )
        return [(f, self.file(f, want=s).plan(s)) for f, s in reads]

    def _tasks(
        self,
        reads: Sequence[tuple[int, Subpartitions]],
        columns: Sequence[str] | None,
        verify: Verify,
        options: ReadOptions,
    ) -> list[ReadTask]:
        """Open and plan every file of ``reads``, concurrently for object stores."""

        def prepare(pair: tuple[int, Subpartitions]) -> list[ReadTask]:
            f, selection = pair
            return self.file(f, want=selection).read_tasks(
                selection, columns=columns, verify=verify, options=options
            )

        if self.directory.is_local or len(reads) < 2:
            per_file = [prepare(pair) for pair in reads]
        else:
            workers = min(options.io_threads, len(reads))
            with ThreadPoolExecutor(workers, thread_name_prefix="arrowshuffle-open") as pool:
                per_file = list(pool.map(prepare, reads))
        return [task for tasks in per_file for task in tasks]

    # ---------------------------------------------------------------- reading

    def iter_batches(
        self,
        subpartitions: Subpartitions | None = None,
        *,
        columns: Sequence[str] | None = None,
        verify: Verify = "auto",
        consumer: int | None = None,
        num_consumers: int | None = None,
        pattern: str = "all_to_all",
        max_gap: int = DEFAULT_MAX_GAP,
        max_block: int = DEFAULT_MAX_BLOCK,
        max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
        io_threads: int = DEFAULT_IO_THREADS,
    ) -> Iterator[pa.RecordBatch]:
        """Yield the batches of ``subpartitions`` from every file, file by file.

        Args:
            subpartitions: an int, a range or an iterable of ints; all by default.
            columns: names of the columns to return, in that order.
            verify: check every chunk's CRC32C before decoding it: ``"auto"`` (the default)
                for object stores and not for local files, ``True`` always, ``False`` never.
                A chunk of an object store that fails its check is fetched again.
            consumer: read what this consumer is assigned instead of ``subpartitions``.
            num_consumers: how many consumers share the dataset.
            pattern: ``"all_to_all"`` or ``"pointwise"``; see :func:`arrowshuffle.assign`.
            max_gap: merge byte ranges of a file whose gap is at most this many bytes.
            max_block: the largest merged read.
            max_in_flight: the most bytes fetched ahead of what has been yielded.
            io_threads: files opened and ranges fetched at the same time (object stores).
        """
        options = ReadOptions(max_gap, max_block, max_in_flight, io_threads)
        resolve_verify(verify, remote=not self.directory.is_local)  # a bad value fails now
        if columns is not None:
            _select_schema(self.schema, columns)
        reads = self.reads(
            subpartitions, consumer=consumer, num_consumers=num_consumers, pattern=pattern
        )
        return run_tasks(self._tasks(reads, columns, verify, options), options)

    def read(
        self,
        subpartitions: Subpartitions | None = None,
        *,
        columns: Sequence[str] | None = None,
        verify: Verify = "auto",
        consumer: int | None = None,
        num_consumers: int | None = None,
        pattern: str = "all_to_all",
        max_gap: int = DEFAULT_MAX_GAP,
        max_block: int = DEFAULT_MAX_BLOCK,
        max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
        io_threads: int = DEFAULT_IO_THREADS,
    ) -> pa.Table:
        """Read ``subpartitions`` (all by default) of every file into one table."""
        schema = self.schema if columns is None else _select_schema(self.schema, columns)
        batches = self.iter_batches(
            subpartitions,
            columns=columns,
            verify=verify,
            consumer=consumer,
            num_consumers=num_consumers,
            pattern=pattern,
            max_gap=max_gap,
            max_block=max_block,
            max_in_flight=max_in_flight,
            io_threads=io_threads,
        )
        return pa.Table.from_batches(list(batches), schema=schema)

    def stats(self) -> pa.Table:
        """One row per (file, region, subpartition); see :meth:`ShuffleFile.stats`."""
        tables = []
        for i in range(self.num_files):
            table = self.file(i).stats()
            column = pa.array(np.full(table.num_rows, i, dtype=np.int64))
            tables.append(table.add_column(0, "file", column))
        if not tables:
            return _STATS_SCHEMA.empty_table()
        return pa.concat_tables(tables)

    def read_stats(self) -> ReadStats:
        """Requests, bytes, retries and refetches so far: the manifest's and the opened files'.

        All zero for local datasets; see :meth:`ShuffleFile.read_stats`.
        """
        with self._lock:
            files = list(self._files.values())
        total = self._manifest_stats
        for shuffle_file in files:
            total += shuffle_file.read_stats()
        return total

    @property
    def requests(self) -> int:
        """Ranged requests issued so far by the opened files (0 for local datasets)."""
        with self._lock:
            files = list(self._files.values())
        return sum(f.requests for f in files)

    def __repr__(self) -> str:
        return (
            f"ShuffleDataset({self.url!r}, files={self.num_files}, "
            f"subpartitions={self.num_subpartitions}, rows={self.num_rows})"
        )


def _check_local_sizes(location: Location, entry: ManifestFile) -> None:
    """Rule M4 for a local pair, from the file system, before either file is read.

    Raises:
        MissingObjectError: a listed file does not exist.
        CorruptFileError: a file's size differs from the listed one.
    """
    for what, path, listed in (
        ("data file", location.path, entry.data_size),
        ("index", location.path + INDEX_SUFFIX, entry.index_size),
    ):
        with storage_errors(path, f"opening the listed {what}"):
            actual = os.stat(path).st_size
        if actual != listed:
            raise CorruptFileError(
                f"{path}: the manifest lists {listed} bytes for this {what}, the file has {actual}",
                rule="M4",
            )


def open_dataset(
    path: str | os.PathLike[str], storage_options: dict[str, Any] | None = None
) -> ShuffleDataset:
    """Open the dataset at ``path`` (a directory or URL) through its manifest.

    The manifest costs one request; files are opened when a read needs them.

    Raises:
        MissingObjectError: the directory has no manifest (nothing was committed there).
        FormatError: the manifest is not valid.
    """
    return _open_dataset(resolve(path, storage_options))


def _open_dataset(directory: Location) -> ShuffleDataset:
    location = directory.child(MANIFEST_NAME)
    # On object stores the manifest is fetched like any range (transient errors retried,
    # requests counted); a manifest that does not decode may have been damaged on the way and
    # is fetched again, unless the same bytes come back.
    source = None if location.is_local else RemoteSource(location)
    previous: bytes | None = None
    attempt = 0
    while True:
        with storage_errors(location.url, "opening the dataset"):
            try:
                if source is None:
                    # A ranged read from 0: without a range some file systems ask for the size.
                    data = read_bytes(location, 0)
                else:
                    data = source.read_prefix(MAX_MANIFEST_BYTES + 1).to_pybytes()
            except MissingObjectError as exc:
                raise MissingObjectError(
                    exc.errno,
                    f"{directory.url} is not an arrowshuffle dataset: it has no {MANIFEST_NAME} "
                    "(nothing was committed there, or the path is wrong)",
                ) from exc
        try:
            manifest = decode_manifest(data)
            break
        except FormatError as exc:
            if source is None or data == previous or attempt >= source.retry_budget:
                _raise_naming(exc, location.url)
            previous = data
            attempt += 1
            source.note_refetch("the manifest", attempt, exc)
    stats = None if source is None else source.stats()
    return ShuffleDataset(directory, manifest, manifest_stats=stats)


def open_shuffle(
    path: str | os.PathLike[str], storage_options: dict[str, Any] | None = None
) -> ShuffleFile | ShuffleDataset:
    """Open a dataset or a single shuffle file, whichever ``path`` is.

    A local directory is a dataset, any other local path a data file. A URL is a dataset when
    ``<url>/_arrowshuffle_manifest.json`` exists (the request that reads it), otherwise a data
    file (one failed request more).

    Raises:
        MissingObjectError: neither a manifest nor a data/index pair exists at ``path``.
    """
    location = resolve(path, storage_options)
    if location.is_local:
        if os.path.isdir(location.path):
            return _open_dataset(location)
        return open_file(location.path)
    try:
        return _open_dataset(location)
    except MissingObjectError:
        pass
    try:
        return ShuffleFile(location)
    except MissingObjectError as exc:
        raise MissingObjectError(
            errno.ENOENT,
            f"{location.url} is neither a dataset (it has no {MANIFEST_NAME}) nor a shuffle "
            f"file (there is no index {location.url}.idx)",
        ) from exc
