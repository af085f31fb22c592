"""Datasets: the files a manifest lists, read as one."""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa

from arrowshuffle._storage import Location, read_bytes, resolve, storage_errors
from arrowshuffle.format.errors import CorruptFileError, MissingObjectError
from arrowshuffle.format.manifest import MANIFEST_NAME, Manifest, decode_manifest
from arrowshuffle.readers.file_reader import ShuffleFile
from arrowshuffle.readers.plan import Subpartitions


class ShuffleDataset:
    """A dataset opened through its manifest. Use :func:`arrowshuffle.open_dataset`."""

    def __init__(self, directory: Location, manifest: Manifest) -> None:
        self.directory = directory
        self.manifest = manifest
        self._files: dict[int, ShuffleFile] = {}

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

    def file(self, i: int) -> ShuffleFile:
        """The ``i``-th listed file, opened on first use (sizes checked against the manifest)."""
        if i not in self._files:
            entry = self.manifest.files[i]
            shuffle_file = ShuffleFile(
                self.directory.child(entry.data),
                data_size=None,
                index_size=entry.index_size,
            )
            if shuffle_file.header.data_length != entry.data_size:
                raise CorruptFileError(
                    f"{shuffle_file.url}: the manifest lists {entry.data_size} data bytes, "
                    f"its index declares {shuffle_file.header.data_length}",
                    rule="M7",
                )
            if shuffle_file.num_subpartitions != self.num_subpartitions:
                raise CorruptFileError(
                    f"{shuffle_file.url}: has {shuffle_file.num_subpartitions} subpartitions, "
                    f"the manifest {self.num_subpartitions}",
                    rule="M6",
                )
            self._files[i] = shuffle_file
        return self._files[i]

    def iter_batches(
        self,
        subpartitions: Subpartitions | None = None,
        *,
        columns: Sequence[str] | None = None,
        verify: bool = False,
    ) -> Iterator[pa.RecordBatch]:
        """Yield the batches of ``subpartitions`` from every file, file by file."""
        for i in range(self.num_files):
            yield from self.file(i).iter_batches(subpartitions, columns=columns, verify=verify)

    def read(
        self,
        subpartitions: Subpartitions | None = None,
        *,
        columns: Sequence[str] | None = None,
        verify: bool = False,
    ) -> pa.Table:
        """Read ``subpartitions`` (all by default) of every file into one table."""
        schema = self.schema
        if columns is not None:
            schema = pa.schema([schema.field(c) for c in columns], metadata=schema.metadata)
        return pa.Table.from_batches(
            list(self.iter_batches(subpartitions, columns=columns, verify=verify)), schema=schema
        )

    def __repr__(self) -> str:
        return (
            f"ShuffleDataset({self.url!r}, files={self.num_files}, "
            f"subpartitions={self.num_subpartitions}, rows={self.num_rows})"
        )


def open_dataset(
    path: str | os.PathLike[str], storage_options: dict[str, Any] | None = None
) -> ShuffleDataset:
    """Open the dataset at ``path`` (a directory or URL) through its manifest.

    Raises:
        MissingObjectError: the directory has no manifest (nothing was committed there).
        FormatError: the manifest is not valid.
    """
    directory = resolve(path, storage_options)
    location = directory.child(MANIFEST_NAME)
    with storage_errors(location.url, "opening the dataset"):
        try:
            data = read_bytes(location)
        except MissingObjectError as exc:
            raise MissingObjectError(
                exc.errno,
                f"{directory.url} is not an arrowshuffle dataset: it has no {MANIFEST_NAME} "
                "(nothing was committed there, or the path is wrong)",
            ) from exc
    return ShuffleDataset(directory, decode_manifest(data))
