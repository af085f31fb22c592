"""Datasets: shuffle files in one directory, made visible by a manifest version written last.

A dataset is exactly the files its manifest in force lists. Writers put data/index pairs under
names that never collide (a task number, a job id and a per-attempt suffix), and only
:func:`commit_dataset` publishes them, by creating the next manifest version
(:mod:`arrowshuffle.writers.commit`): exclusively, so that of two jobs committing at once
neither loses its files. Files that no manifest lists are invisible to readers.

Protocol of one job:

1. the driver calls :func:`check_commit`: an impossible commit is refused before any file is
   written, and the returned :class:`~arrowshuffle.writers.commit.Base` records the version the
   job starts from;
2. every task writes its pair under :func:`new_file_name` and reports the
   :class:`~arrowshuffle.writers.file_writer.WrittenFile` to the driver;
3. the driver calls :func:`commit_dataset` with the reports of the successful attempts and the
   base; leftovers of this job's failed attempts are then removed;
4. a failed job calls :func:`abort_dataset`: the manifest in force stays, files of the job go.

Concurrent commits: appends build on whatever version is in force when they commit (appends
commute), so every acknowledged append is listed by every later version; an overwrite, or a
first write, whose base moved while it wrote fails with
:class:`~arrowshuffle.format.errors.CommitConflictError` and removes its own files. A commit
never deletes a file that a committed version lists: files an overwrite replaced stay until
:func:`~arrowshuffle.writers.vacuum.vacuum` expires the versions that list them, so readers of
those versions keep reading.

The commit API, for every writer of datasets (``write_dataset``, compaction, the Spark source):
:func:`prepare_directory`, :func:`read_manifest`, :func:`check_commit`, :func:`commit_dataset`,
:func:`abort_dataset`, and for writers that build the manifest themselves (compaction)
:func:`manifest_entry` with :func:`~arrowshuffle.writers.commit.commit_version`.
"""

from __future__ import annotations

import contextlib
import os
import posixpath
from collections.abc import Iterable
from typing import Any

import numpy as np
import pyarrow as pa

from arrowshuffle.format.errors import (
    CommitConflictError,
    InvalidOptionError,
    SchemaMismatchError,
    ShuffleIOError,
)
from arrowshuffle.format.manifest import Manifest, ManifestFile, SubpartitionTotals
from arrowshuffle.format.naming import check_job_id, is_part_name, temp_target
from arrowshuffle.format.partitioners import dataset_spec
from arrowshuffle.readers.storage import Location, list_directory, resolve, storage_errors
from arrowshuffle.writers.commit import (
    Base,
    CommitOutcomeUnknownError,
    commit_version,
    read_current,
)
from arrowshuffle.writers.exclusive import check_exclusive_create
from arrowshuffle.writers.file_writer import WrittenFile
from arrowshuffle.writers.output import remove_quietly

__all__ = [
    "MODE_ALIASES",
    "SAVE_MODES",
    "Base",
    "abort_dataset",
    "check_append",
    "check_commit",
    "commit_dataset",
    "exists_error",
    "manifest_entry",
    "normalize_mode",
    "prepare_directory",
    "read_manifest",
    "remove_unlisted",
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
    """The dataset's manifest in force, or None when the directory has none.

    Raises:
        FormatError: the manifest does not decode.
    """
    return read_current(directory)


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
    base: Base | None = None,
) -> Manifest:
    """Publish written files as the dataset at ``directory`` by creating its next version.

    The new files are either published or removed: when the commit is refused or fails, they
    are deleted and the version in force stays (except when the store failed so that whether
    the commit landed is unknown: then they are kept, see
    :class:`~arrowshuffle.writers.commit.CommitOutcomeUnknownError`).

    Args:
        directory: the dataset directory.
        written: the files this job wrote (all already closed, directly inside ``directory``).
        schema: the dataset's Arrow schema.
        num_subpartitions: the subpartition count of every file.
        partitioner: the partitioner spec of the files; the manifest records it without the
            fields that name one producer (:func:`~arrowshuffle.format.partitioners.dataset_spec`).
        mode: ``overwrite`` replaces the dataset (its old files stay until vacuum expires the
            versions that list them), ``append`` adds to it (same schema, subpartition count
            and partitioner required), ``error`` refuses an existing dataset, ``ignore`` keeps
            an existing one and drops the new files.
        properties: free-form string properties stored in the manifest (an append keeps the
            dataset's and adds these).
        job_id: the id in the names of this job's files; leftovers of its failed attempts are
            removed after the commit (files of other jobs are left alone).
        base: the version the job started from (:func:`check_commit`): an ``overwrite`` or
            ``error`` commit fails when another job committed since. Without it, the version
            in force at commit time is the base.

    Returns:
        The manifest now in force.

    Raises:
        CommitConflictError: another job committed since ``base`` (overwrite, error), or kept
            committing first.
        InvalidOptionError: an unknown mode, an existing dataset with ``error``, or an
            ``append`` to a dataset with another subpartition count or partitioner.
        SchemaMismatchError: an ``append`` of data with another schema.
        ShuffleIOError: the manifest could not be written.
    """
    mode = normalize_mode(mode)
    if job_id is not None:
        check_job_id(job_id)
    written = list(written)

    def build(current: Manifest | None) -> Manifest | None:
        if current is not None and mode == "ignore":
            return None
        found = Base.of(current).version
        if base is not None and mode in ("overwrite", "error") and found != base.version:
            raise _conflict(directory, mode, base.version, found)
        if current is not None and mode == "error":
            raise exists_error(directory.url)
        kept: tuple[ManifestFile, ...] = ()
        kept_properties: dict[str, str] = {}
        if current is not None and mode == "append":
            check_append(current, schema, num_subpartitions, partitioner, directory.url)
            kept, kept_properties = current.files, current.properties
        files = kept + tuple(new_files)
        _check_unique(files, directory.url)
        return Manifest(
            schema=schema,
            num_subpartitions=num_subpartitions,
            partitioner=dataset_spec(partitioner),
            files=files,
            properties={**kept_properties, **(properties or {})},
            sizes=_totals(written, num_subpartitions, current if kept else None),
        )

    try:
        new_files = [manifest_entry(directory, w) for w in written]
        manifest = commit_version(directory, build, operation=_OPERATIONS[mode], base=base)
    except CommitOutcomeUnknownError:
        raise  # a committed version may list the files: vacuum decides later
    except BaseException:
        abort_dataset(directory, written, job_id=job_id)
        raise
    assert manifest is not None  # build declines to commit only over an existing dataset
    if not _lists_all(manifest, new_files):
        # ``ignore`` over an existing dataset: the new files were never published.
        abort_dataset(directory, written, job_id=job_id)
        return manifest
    if job_id is not None:
        # Leftovers of this job's failed or speculative attempts; other jobs' files stay.
        remove_unlisted(directory, manifest, job_id=job_id)
    return manifest


#: What each save mode records as the commit's operation.
_OPERATIONS = {"overwrite": "overwrite", "append": "append", "error": "write", "ignore": "write"}


def _lists_all(manifest: Manifest, files: list[ManifestFile]) -> bool:
    listed = {f.data for f in manifest.files}
    return all(f.data in listed for f in files)


def _conflict(
    directory: Location, mode: str, expected: int | None, found: int | None
) -> CommitConflictError:
    def name(version: int | None) -> str:
        return "no dataset" if version is None else f"version {version}"

    return CommitConflictError(
        f"cannot {'overwrite' if mode == 'overwrite' else 'create'} {directory.url}: another "
        f"job committed to it while this one wrote (expected {name(expected)}, found "
        f"{name(found)}); nothing was committed and this job's files were removed",
        expected=expected,
        found=found,
    )


def exists_error(name: str) -> InvalidOptionError:
    """The error of a write in ``error`` mode (the default) to the existing dataset ``name``.

    Args:
        name: the dataset's path as the user gave it.
    """
    return InvalidOptionError(
        f"dataset {name} already exists; pass mode='overwrite' to replace it, mode='append' "
        "to add to it, or mode='ignore' to keep it and write nothing"
    )


def check_commit(
    directory: Location,
    *,
    mode: str,
    schema: pa.Schema | None = None,
    num_subpartitions: int | None = None,
    partitioner: dict[str, Any] | None = None,
    name: str | None = None,
) -> Base:
    """Refuse now a commit that :func:`commit_dataset` would refuse, before files are written.

    Args:
        directory: the dataset directory.
        mode: the save mode.
        schema: the schema the job will write, when known: an ``append`` of other data is
            refused now rather than at commit.
        num_subpartitions: the subpartition count the job will write, when known.
        partitioner: the partitioner spec the job will write, when known.
        name: the dataset's path as the user gave it, for messages (default: its URL).

    Returns:
        The version the job starts from, for :func:`commit_dataset`'s ``base``.

    Raises:
        InvalidOptionError: an unknown mode, an existing dataset with ``error``, an ``append``
            to a dataset with another subpartition count or partitioner, or a store where a
            commit cannot be made safely.
        SchemaMismatchError: an ``append`` of data with another schema.
    """
    mode = normalize_mode(mode)
    check_exclusive_create(directory)
    previous = read_manifest(directory)
    if previous is not None:
        if mode == "error":
            raise exists_error(directory.url if name is None else name)
        if mode == "append" and schema is not None and num_subpartitions is not None:
            check_append(previous, schema, num_subpartitions, partitioner or {}, directory.url)
    return Base.of(previous)


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
    a file that cannot be removed stays invisible to readers. When the manifest in force
    cannot be read for a storage failure, nothing is removed: after a commit whose outcome is
    unknown, the version in force may list the files (vacuum removes them if none does).
    """
    try:
        current = read_manifest(directory)
    except ShuffleIOError:
        return
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


def _listed_names(manifest: Manifest | None) -> set[str]:
    listed: set[str] = set()
    if manifest is not None:
        for f in manifest.files:
            listed.update((f.data, f.index))
    return listed


def remove_unlisted(directory: Location, manifest: Manifest | None, *, job_id: str) -> None:
    """Delete the files of job ``job_id`` (and its stale temporaries) the manifest does not list.

    Called after a commit (leftovers of failed or speculative attempts) and by abort. Only
    names carrying the job id are considered: files of other jobs, and files of earlier
    versions that readers may still read, stay. Best effort: a file that cannot be removed
    stays invisible to readers.
    """
    listed = _listed_names(manifest)
    marker = f"-{check_job_id(job_id)}-"
    with contextlib.suppress(OSError):  # ShuffleIOError from the listing included
        for name in list_directory(directory):
            if name in listed or marker not in name:
                continue
            target = temp_target(name)
            if is_part_name(name) or (target is not None and is_part_name(target)):
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
