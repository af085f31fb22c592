"""Datasets: the files a manifest lists, read as one."""

from __future__ import annotations

import errno
import hashlib
import os
import threading
from typing import Any

import numpy as np
import pyarrow as pa

from arrowshuffle.format.errors import InvalidOptionError, MissingObjectError
from arrowshuffle.format.index import encode_partitioner, schema_to_bytes
from arrowshuffle.format.manifest import Manifest, ManifestFile
from arrowshuffle.format.manifest_rules import (
    check_file_agrees,
    check_file_counts,
    check_index_checksum,
    check_listed_size,
    declared_counts,
    listed_counts,
    manifest_expects,
)
from arrowshuffle.format.naming import INDEX_SUFFIX, MANIFEST_NAME
from arrowshuffle.format.rule_registry import Violation
from arrowshuffle.readers.byte_ranges import Subpartitions
from arrowshuffle.readers.file_reader import IndexShape, ShuffleFile, open_file
from arrowshuffle.readers.manifest_io import load_manifest
from arrowshuffle.readers.read_path import Readable
from arrowshuffle.readers.scheduler import ReadOptions
from arrowshuffle.readers.source import ReadStats
from arrowshuffle.readers.storage import Location, member, resolve, storage_errors

#: The columns of :meth:`ShuffleDataset.stats`.
_STATS_SCHEMA = pa.schema(
    [(name, pa.int64()) for name in ("file", "region", "subpartition", "offset", "bytes")]
    + [("rows", pa.int64()), ("batches", pa.int64()), ("broadcast", pa.bool_())]
)


class ShuffleDataset(Readable):
    """A dataset opened through its manifest. Use :func:`arrowshuffle.open_dataset`.

    Files are opened on first use. A read opens (and plans) the files it needs concurrently on
    a bounded thread pool, fetching only the index slices of the requested subpartitions, then
    runs all files' fetches through one read scheduler: batches come out file by file in
    manifest order, and within a file in file order (see :meth:`ShuffleFile.iter_batches`).
    """

    def __init__(
        self,
        directory: Location,
        manifest: Manifest,
        *,
        manifest_stats: ReadStats | None = None,
        options: ReadOptions | None = None,
    ) -> None:
        self.directory = directory
        self.manifest = manifest
        if options is not None and not isinstance(options, ReadOptions):
            raise InvalidOptionError(
                f"options must be a ReadOptions, found {type(options).__name__}"
            )
        self.options = options or ReadOptions()
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
    def version(self) -> int:
        """The manifest version this dataset reads (0: a dataset written before versions).

        A dataset keeps the version it was opened at: later commits are not seen, and the
        files of this version stay readable until vacuum expires it.
        """
        return self.manifest.version

    @property
    def snapshot(self) -> str:
        """The manifest version and the commit that wrote it.

        Both: a dataset written again from nothing numbers its versions again, and a commit's
        id is random.
        """
        manifest = self.manifest
        if manifest.commit_id:
            return f"version {manifest.version} (commit {manifest.commit_id})"
        # A manifest written before commits had ids: its file list stands for it.
        listed = "\n".join(f.data for f in manifest.files).encode()
        return f"version {manifest.version} (files {hashlib.sha256(listed).hexdigest()[:16]})"

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

    @property
    def data_files(self) -> list[str]:
        """The data files of this version, in manifest order: exactly the listed ones.

        For engines that read Arrow IPC files without this package: pass the list itself, not
        the directory or a glob, which also match index sidecars, files of other versions and
        leftovers of failed writers. Local paths for a local dataset, URLs otherwise::

            table = pyarrow.dataset.dataset(ds.data_files, format="arrow")
            polars.scan_ipc(ds.data_files)
            duckdb.sql("SELECT count(*) FROM table")  # DuckDB scans the Python variable

        A plain engine reads every row of each file (no subpartition selection, no checks).
        """
        if self.directory.is_local:
            return [os.path.join(self.directory.path, f.data) for f in self.manifest.files]
        return [self.directory.child(f.data).url for f in self.manifest.files]

    def file(self, i: int, *, want: Subpartitions | None = None) -> ShuffleFile:
        """The ``i``-th listed file, opened on first use and checked against the manifest.

        Args:
            i: the file's position in the manifest.
            want: the subpartitions about to be read; a remote open fetches their index
                entries with the metadata.
        """
        if isinstance(i, bool) or not isinstance(i, (int, np.integer)):
            raise InvalidOptionError(f"file must be an integer position, found {i!r}")
        if not 0 <= i < self.num_files:
            raise InvalidOptionError(f"file {i} does not exist: the dataset has {self.num_files}")
        with self._lock:
            opened = self._files.get(i)
        if opened is not None:
            return opened
        entry = self.manifest.files[i]
        location = member(self.directory, entry.data)
        member(self.directory, entry.index)  # a link of its own may lead out
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
            options=self.options,
        )
        self._check_file(shuffle_file, i)
        with self._lock:
            return self._files.setdefault(i, shuffle_file)

    def _opened(self, i: int) -> ShuffleFile | None:
        return self._files.get(i)

    def _check_file(self, shuffle_file: ShuffleFile, i: int) -> None:
        """Rules M5, M7 and M6: the file is what the manifest lists, raised at the first broken.

        M5 is checked whenever the open holds the index's trailer (see ShuffleFile.index_crc32c).
        """
        entry = self.manifest.files[i]
        url = shuffle_file.url
        found: list[Violation | None] = []
        if shuffle_file.index_crc32c is not None:
            found.append(check_index_checksum(url, shuffle_file.index_crc32c, entry.index_crc32c))
        found += check_file_counts(url, listed_counts(entry), declared_counts(shuffle_file.header))
        found += check_file_agrees(
            url,
            manifest_expects(self.manifest),
            (shuffle_file.schema, shuffle_file.num_subpartitions, shuffle_file.partitioner),
        )
        for violation in found:
            if violation is not None:
                raise violation.error()

    # ---------------------------------------------------------------- selection and plans

    @property
    def _remote(self) -> bool:
        return not self.directory.is_local

    def subpartition_sizes(self) -> tuple[np.ndarray, np.ndarray]:
        """Bytes and rows of every subpartition summed over files.

        From the manifest when its writer recorded them (no request); otherwise from every
        file's index, fetched concurrently on object stores.
        """
        sizes = self.manifest.sizes
        if sizes is not None:
            return np.array(sizes.bytes, dtype=np.int64), np.array(sizes.rows, dtype=np.int64)
        totals = np.zeros((2, self.num_subpartitions), dtype=np.int64)

        def one(f: int) -> tuple[np.ndarray, np.ndarray]:
            return self.file(f).subpartition_sizes()

        for size, rows in self._map_files(one, list(range(self.num_files)), self.options):
            totals[0] += size
            totals[1] += rows
        return totals[0], totals[1]

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
        found = check_listed_size(what, path, listed, actual)
        if found is not None:
            raise found.error()


def open_dataset(
    path: str | os.PathLike[str],
    storage_options: dict[str, Any] | None = None,
    *,
    options: ReadOptions | None = None,
    version: int | None = None,
) -> ShuffleDataset:
    """Open the dataset at ``path`` (a directory or URL) at its manifest version in force.

    Finding the version in force costs one listing of the versions directory and the manifest
    one read; files are opened when a read needs them. The dataset keeps that version: commits
    made afterwards are not seen, and its files stay until vacuum expires it.

    Args:
        path: the dataset directory: a local path or an fsspec URL.
        storage_options: passed to fsspec (credentials, endpoint, ...).
        options: the default tuning of its reads (``ReadOptions``).
        version: read this earlier manifest version instead (one read, no listing), as long
            as vacuum retains it.

    Raises:
        MissingObjectError: the directory has no manifest (nothing was committed there), or
            not the version asked for.
        FormatError: the manifest is not valid.
    """
    if version is not None and (
        isinstance(version, bool) or not isinstance(version, int) or version < 0
    ):
        raise InvalidOptionError(f"version must be an integer >= 0, found {version!r}")
    location = resolve(path, storage_options)
    if location.is_local and os.path.isfile(location.path):
        raise MissingObjectError(
            errno.ENOENT,
            f"{location.url} is a file, not a dataset directory (open_file reads a single "
            "shuffle file)",
        )
    return _open_dataset(location, options, version)


def _open_dataset(
    directory: Location, options: ReadOptions | None = None, version: int | None = None
) -> ShuffleDataset:
    loaded = load_manifest(directory, version=version)
    return ShuffleDataset(directory, loaded.manifest, manifest_stats=loaded.stats, options=options)


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
