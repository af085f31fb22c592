"""Datasets: shuffle files in one directory, made visible by a manifest written last.

A dataset is exactly the files its manifest lists. Writers put data/index pairs under names
that never collide (a task number, a job id and a per-attempt suffix), and only
:func:`commit_dataset` publishes them, by writing the manifest atomically: a temporary name and
a rename on local disks, a single PUT on object stores. Files that no manifest lists are
invisible to readers; :func:`commit_dataset` and :func:`abort_dataset` remove them.

Protocol of one job:

1. every task writes its pair under :func:`new_file_name` and reports the
   :class:`~arrowshuffle.writers.file_writer.WrittenFile` to the driver;
2. the driver calls :func:`commit_dataset` with the reports of the successful attempts: the
   manifest is written last, then files it does not list are removed (all of them on
   ``overwrite``; on ``append`` only those of this job);
3. a failed job calls :func:`abort_dataset`: the previous manifest stays, files of the job go.

Two jobs must not commit to one dataset at the same time: the last manifest wins.

The commit API, for every writer of datasets (``write_dataset``, compaction, the Spark source):
:func:`prepare_directory`, :func:`read_manifest`, :func:`check_commit` (refuse a commit before
any file is written), :func:`commit_dataset`, :func:`abort_dataset`, and for writers that build
the manifest themselves (compaction) :func:`manifest_entry` and :func:`write_manifest`.
"""

from __future__ import annotations

import contextlib
import os
import posixpath
from collections.abc import Iterable
from typing import Any

import numpy as np
import pyarrow as pa

from arrowshuffle.format.errors import InvalidOptionError, MissingObjectError, SchemaMismatchError
from arrowshuffle.format.manifest import (
    Manifest,
    ManifestFile,
    SubpartitionTotals,
    encode_manifest,
)
from arrowshuffle.format.naming import (
    MANIFEST_NAME,
    check_job_id,
    is_part_name,
    temp_target,
)
from arrowshuffle.format.partitioners import dataset_spec
from arrowshuffle.readers.manifest_io import load_manifest
from arrowshuffle.readers.storage import Location, resolve, storage_errors
from arrowshuffle.writers.file_writer import WrittenFile
from arrowshuffle.writers.output import AtomicOutput, remove_quietly

__all__ = [
    "MODE_ALIASES",
    "SAVE_MODES",
    "abort_dataset",
    "check_append",
    "check_commit",
    "commit_dataset",
    "manifest_entry",
    "normalize_mode",
    "prepare_directory",
    "read_manifest",
    "remove_unlisted",
    "write_manifest",
]

SAVE_MODES = ("overwrite", "append", "error", "ignore")
#: Other spellings of the save modes, as Spark users write them.
MODE_ALIASES = {"errorifexists": "error", "default": "error"}


def normalize_mode(mode: str) -> str:
    """Lower-case ``mode`` and map Spark's spellings (``errorifexists``) to ours."""
    name = str(mode).lower()
    name = MODE_ALIASES.get(name, name)
    if name not in SAVE_MODES:
        raise InvalidOptionError(f"mode must be one of {', '.join(SAVE_MODES)}, found {mode!r}")
    return name


def read_manifest(directory: Location) -> Manifest | None:
    """The dataset's current manifest, or None when the directory has none.

    Raises:
        FormatError: the manifest does not decode (see :func:`load_manifest`).
    """
    try:
        return load_manifest(directory).manifest
    except MissingObjectError:
        return None


def manifest_entry(directory: Location, written: WrittenFile) -> ManifestFile:
    """How the manifest of ``directory`` lists a written file.

    Raises:
        InvalidOptionError: the file is not directly inside ``directory``.
    """
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
    job_id: str | None = None,
) -> Manifest:
    """Publish written files as the dataset at ``directory`` by writing its manifest last.

    The new files are either published or removed: when the commit is refused or fails, they
    are deleted and the previous manifest (if any) stays in force.

    Args:
        directory: the dataset directory.
        written: the files this job wrote (all already closed, directly inside ``directory``).
        schema: the dataset's Arrow schema.
        num_subpartitions: the subpartition count of every file.
        partitioner: the partitioner spec of the files; the manifest records it without the
            fields that name one producer (:func:`~arrowshuffle.format.partitioners.dataset_spec`).
        mode: ``overwrite`` replaces the dataset (its old files are deleted once the new
            manifest is in place), ``append`` adds to it (same schema, subpartition count and
            partitioner required), ``error`` refuses an existing dataset, ``ignore`` keeps an
            existing one and drops the new files.
        properties: free-form string properties stored in the manifest.
        job_id: the id in the names of this job's files; on ``append`` only unlisted files
            carrying it are removed (files of other jobs are left alone).

    Returns:
        The manifest now in force.

    Raises:
        InvalidOptionError: an unknown mode, an existing dataset with ``error``, or an
            ``append`` to a dataset with another subpartition count or partitioner.
        SchemaMismatchError: an ``append`` of data with another schema.
        ShuffleIOError: the manifest could not be written.
    """
    mode = normalize_mode(mode)
    if job_id is not None:
        check_job_id(job_id)
    written = list(written)
    try:
        new_files = [manifest_entry(directory, w) for w in written]
        previous = read_manifest(directory)
        if previous is not None and mode in ("error", "ignore"):
            if mode == "ignore":
                abort_dataset(directory, written, job_id=job_id)
                return previous
            raise InvalidOptionError(
                f"dataset {directory.url} already exists; use mode 'overwrite' or 'append'"
            )
        kept: tuple[ManifestFile, ...] = ()
        if previous is not None and mode == "append":
            check_append(previous, schema, num_subpartitions, partitioner, directory.url)
            kept = previous.files
        _check_unique(kept + tuple(new_files), directory.url)
        manifest = Manifest(
            schema=schema,
            num_subpartitions=num_subpartitions,
            partitioner=dataset_spec(partitioner),
            files=kept + tuple(new_files),
            properties=dict(properties or {}),
            sizes=_totals(written, num_subpartitions, previous if kept else None),
        )
        write_manifest(directory, manifest)
    except BaseException:
        abort_dataset(directory, written, job_id=job_id)
        raise
    if mode != "append":
        remove_unlisted(directory, manifest)
    elif job_id is not None:
        # Leftovers of this job's failed or speculative attempts; other jobs' files stay.
        remove_unlisted(directory, manifest, job_id=job_id)
    return manifest


def check_commit(
    directory: Location,
    *,
    schema: pa.Schema,
    num_subpartitions: int,
    partitioner: dict[str, Any],
    mode: str,
) -> None:
    """Refuse now a commit that :func:`commit_dataset` would refuse, before files are written.

    Raises:
        InvalidOptionError: an unknown mode, an existing dataset with ``error``, or an
            ``append`` to a dataset with another subpartition count or partitioner.
        SchemaMismatchError: an ``append`` of data with another schema.
    """
    mode = normalize_mode(mode)
    if mode not in ("append", "error"):
        return
    previous = read_manifest(directory)
    if previous is None:
        return
    if mode == "error":
        raise InvalidOptionError(
            f"dataset {directory.url} already exists; use mode 'overwrite' or 'append'"
        )
    check_append(previous, schema, num_subpartitions, partitioner, directory.url)


def _totals(
    written: list[WrittenFile], num_subpartitions: int, previous: Manifest | None
) -> SubpartitionTotals | None:
    """Per-subpartition totals of the new manifest, or None when a part of them is unknown.

    An append adds to the previous manifest's totals; a manifest written before totals were
    recorded has none, and readers then fall back to the indexes.
    """
    sizes = np.zeros((2, num_subpartitions), dtype=np.int64)
    if previous is not None:
        if previous.sizes is None:
            return None
        sizes += np.array([previous.sizes.bytes, previous.sizes.rows], dtype=np.int64)
    for w in written:
        if len(w.subpartition_bytes) != num_subpartitions:
            return None
        sizes += np.array([w.subpartition_bytes, w.subpartition_rows], dtype=np.int64)
    return SubpartitionTotals(tuple(sizes[0].tolist()), tuple(sizes[1].tolist()))


def abort_dataset(
    directory: Location, written: Iterable[WrittenFile | None], *, job_id: str | None = None
) -> None:
    """Remove what a failed job left: its written files and, with ``job_id``, every file of it.

    Files listed by the manifest in force are never removed, so the dataset as readers see it
    is unchanged. ``written`` may hold ``None`` (tasks that reported nothing). Best effort:
    a file that cannot be removed stays invisible to readers.
    """
    try:
        current = read_manifest(directory)
    except Exception:
        # A damaged manifest: remove only what this job itself reported.
        current = None
    listed = _listed_names(current)
    for w in written:
        if w is None:
            continue
        for url in (w.data_url, w.index_url):
            name = posixpath.basename(url.rstrip("/"))
            if name not in listed and directory.child(name).url.rstrip("/") == url.rstrip("/"):
                remove_quietly(directory.child(name))
    if job_id:
        remove_unlisted(directory, current, job_id=check_job_id(job_id))


def _check_unique(files: tuple[ManifestFile, ...], url: str) -> None:
    seen: set[str] = set()
    for name in (f.data for f in files):
        if name not in seen:
            seen.add(name)
            continue
        raise InvalidOptionError(
            f"cannot commit to {url}: file {name} would be listed twice (committed again?)"
        )


def check_append(
    previous: Manifest,
    schema: pa.Schema,
    num_subpartitions: int,
    partitioner: dict[str, Any],
    url: str,
) -> None:
    """Refuse to append data that differs from the dataset ``previous`` describes.

    Raises:
        SchemaMismatchError: another schema.
        InvalidOptionError: another subpartition count or partitioner.
    """
    if not previous.schema.equals(schema, check_metadata=False):
        raise SchemaMismatchError(
            f"cannot append to {url}: its schema is {previous.schema}, the new data has {schema}"
        )
    if previous.num_subpartitions != num_subpartitions:
        raise InvalidOptionError(
            f"cannot append to {url}: it has {previous.num_subpartitions} subpartitions, "
            f"the new data {num_subpartitions}"
        )
    if dataset_spec(previous.partitioner) != dataset_spec(partitioner):
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


def _listed_names(manifest: Manifest | None) -> set[str]:
    listed: set[str] = set()
    if manifest is not None:
        for f in manifest.files:
            listed.update((f.data, f.index))
    return listed


def remove_unlisted(
    directory: Location, manifest: Manifest | None, *, job_id: str | None = None
) -> None:
    """Delete data/index files (and stale temporary files) that the manifest does not list.

    Called after a commit (files of a replaced dataset, of failed or speculative attempts) and
    by abort. With ``job_id``, only files whose name carries that job id are considered, so
    files of other jobs stay. Best effort: a file that cannot be removed stays invisible to
    readers.
    """
    listed = _listed_names(manifest)
    marker = f"-{job_id}-" if job_id else ""
    with contextlib.suppress(FileNotFoundError, OSError):
        names = [
            posixpath.basename(p.rstrip("/")) for p in directory.fs.ls(directory.path, detail=False)
        ]
        for name in names:
            if name in listed or name == MANIFEST_NAME or marker not in name:
                continue
            target = temp_target(name)
            stale_temp = target is not None and (
                is_part_name(target) or (not job_id and target == MANIFEST_NAME)
            )
            if is_part_name(name) or stale_temp:
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
