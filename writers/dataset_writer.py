"""Datasets: shuffle files in one directory, made visible by a manifest written last.

A dataset is exactly the files its manifest lists. Writers put data/index pairs under names
that never collide (a task number plus a random suffix), and only :func:`commit_dataset`
publishes them, by writing the manifest atomically: a temporary name and a rename on local
disks, a single PUT on object stores. Files that no manifest lists are invisible to readers and
removed by the next commit or abort.
"""

from __future__ import annotations

import contextlib
import os
import posixpath
import uuid
from collections.abc import Iterable
from typing import Any

import pyarrow as pa

from arrowshuffle._storage import (
    INDEX_SUFFIX,
    AtomicOutput,
    Location,
    read_bytes,
    remove_quietly,
    resolve,
    storage_errors,
)
from arrowshuffle.format.errors import InvalidOptionError, SchemaMismatchError
from arrowshuffle.format.manifest import (
    MANIFEST_NAME,
    Manifest,
    ManifestFile,
    decode_manifest,
    encode_manifest,
)
from arrowshuffle.writers.file_writer import WrittenFile

SAVE_MODES = ("overwrite", "append", "error", "ignore")
DATA_SUFFIX = ".arrow"


def new_file_name(task: int, attempt: str | None = None) -> str:
    """A data file name unique to one task attempt: ``part-00003-<random>.arrow``."""
    return f"part-{task:05d}-{attempt or uuid.uuid4().hex}{DATA_SUFFIX}"


def read_manifest(directory: Location) -> Manifest | None:
    """The dataset's current manifest, or None when the directory has none."""
    location = directory.child(MANIFEST_NAME)
    with storage_errors(location.url, "reading"):
        if not location.fs.exists(location.path):
            return None
    return decode_manifest(read_bytes(location))


def _manifest_file(directory: Location, written: WrittenFile) -> ManifestFile:
    data_name = posixpath.basename(written.data_url)
    index_name = posixpath.basename(written.index_url)
    if directory.child(data_name).url.rstrip("/") != written.data_url.rstrip("/"):
        raise InvalidOptionError(
            f"file {written.data_url} is not directly inside the dataset {directory.url}"
        )
    return ManifestFile(
        data=data_name,
        index=index_name,
        data_size=written.data_size,
        index_size=written.index_size,
        rows=written.rows,
        regions=written.regions,
        index_crc32c=written.index_crc32c,
    )


def commit_dataset(
    directory: Location,
    written: Iterable[WrittenFile],
    *,
    schema: pa.Schema,
    num_subpartitions: int,
    partitioner: dict[str, Any],
    mode: str = "overwrite",
    properties: dict[str, str] | None = None,
) -> Manifest:
    """Publish written files as the dataset at ``directory`` by writing its manifest last.

    Args:
        directory: the dataset directory.
        written: the files this job wrote (all already closed).
        schema: the dataset's Arrow schema.
        num_subpartitions: the subpartition count of every file.
        partitioner: the partitioner spec of every file.
        mode: ``overwrite`` replaces the dataset, ``append`` adds to it (same schema,
            subpartition count and partitioner required), ``error`` refuses an existing
            dataset, ``ignore`` keeps an existing one and drops the new files.
        properties: free-form string properties stored in the manifest.

    Returns:
        The manifest now in force.
    """
    if mode not in SAVE_MODES:
        raise InvalidOptionError(f"mode must be one of {', '.join(SAVE_MODES)}, found {mode!r}")
    new_files = [_manifest_file(directory, w) for w in written]
    previous = read_manifest(directory)
    if previous is not None and mode in ("error", "ignore"):
        if mode == "ignore":
            for f in new_files:
                _remove_pair(directory, f.data)
            return previous
        raise InvalidOptionError(
            f"dataset {directory.url} already exists; use mode 'overwrite' or 'append'"
        )
    kept: tuple[ManifestFile, ...] = ()
    if previous is not None and mode == "append":
        _check_compatible(previous, schema, num_subpartitions, partitioner, directory.url)
        kept = previous.files
    manifest = Manifest(
        schema=schema,
        num_subpartitions=num_subpartitions,
        partitioner=partitioner,
        files=kept + tuple(new_files),
        properties=dict(properties or {}),
    )
    write_manifest(directory, manifest)
    remove_unlisted(directory, manifest)
    return manifest


def _check_compatible(
    previous: Manifest,
    schema: pa.Schema,
    num_subpartitions: int,
    partitioner: dict[str, Any],
    url: str,
) -> None:
    if not previous.schema.equals(schema, check_metadata=False):
        raise SchemaMismatchError(
            f"cannot append to {url}: its schema is {previous.schema}, the new data has {schema}"
        )
    if previous.num_subpartitions != num_subpartitions:
        raise InvalidOptionError(
            f"cannot append to {url}: it has {previous.num_subpartitions} subpartitions, "
            f"the new data {num_subpartitions}"
        )
    if previous.partitioner != partitioner:
        raise InvalidOptionError(
            f"cannot append to {url}: its partitioner is {previous.partitioner}, "
            f"the new data's {partitioner}"
        )


def write_manifest(directory: Location, manifest: Manifest) -> None:
    """Write the manifest atomically (temporary name and rename, or one PUT)."""
    location = directory.child(MANIFEST_NAME)
    payload = encode_manifest(manifest)
    if location.is_local:
        out = AtomicOutput(location)
        try:
            out.file.write(payload)
            out.commit()
        except BaseException:
            out.discard()
            raise
    else:
        with storage_errors(location.url, "writing"):
            location.fs.pipe_file(location.path, payload)


def _remove_pair(directory: Location, data_name: str) -> None:
    remove_quietly(directory.child(data_name))
    remove_quietly(directory.child(data_name + INDEX_SUFFIX))


def remove_unlisted(directory: Location, manifest: Manifest | None) -> None:
    """Delete data/index files (and stale temporary files) that the manifest does not list.

    Called after a commit (files of a replaced dataset, of failed or speculative attempts) and
    by abort. Best effort: a file that cannot be removed stays invisible to readers.
    """
    listed = set()
    if manifest is not None:
        for f in manifest.files:
            listed.update((f.data, f.index))
    with contextlib.suppress(FileNotFoundError, OSError):
        names = [
            posixpath.basename(p.rstrip("/")) for p in directory.fs.ls(directory.path, detail=False)
        ]
        for name in names:
            if name in listed or name == MANIFEST_NAME:
                continue
            stale_temp = name.startswith(".") and name.endswith(".tmp")
            ours = name.startswith("part-") and (
                name.endswith(DATA_SUFFIX) or name.endswith(DATA_SUFFIX + INDEX_SUFFIX)
            )
            if ours or stale_temp:
                remove_quietly(directory.child(name))


def prepare_directory(
    path: str | os.PathLike[str], storage_options: dict[str, Any] | None
) -> Location:
    """Resolve a dataset directory and create it on file systems that have directories."""
    directory = resolve(path, storage_options)
    if directory.is_local:
        with storage_errors(directory.url, "creating"):
            os.makedirs(directory.path, exist_ok=True)
    return directory
