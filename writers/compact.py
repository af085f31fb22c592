"""Compaction: merge groups of small shuffle files of a dataset into fewer, larger ones.

A consumer reads one index slice and one range per region from every file, so its requests
grow with the number of producers. Compaction rewrites groups of consecutive files (in manifest
order, up to a target size of data) as one file each: every region of the output holds, for
each subpartition in order, that subpartition's chunks from all the input regions it merges,
so a consumer then makes one read per output region instead of one per input file and region.

* **Copied, or re-batched when tiny.** A chunk is a run of encapsulated record-batch messages;
  by default they are copied as bytes (each batch keeps the codec its message declares, spec
  section 4 rule 8, so inputs with different codecs merge as they are). Many tiny producers
  leave chunks of a few rows each, whose per-message metadata and poorly compressed buffers
  would make a consumer read several times the bytes of the same rows in Parquet: such runs
  of one subpartition are decoded and re-encoded as batches of up to ``batch_rows`` rows
  (``rebatch``, :func:`~arrowshuffle.writers.merge.merge_files`), whole input batches
  concatenated in order. The data file is still a plain Arrow IPC file: its header and its
  footer come from pyarrow (a throwaway file of the same schema, footer metadata and number of
  batches), and the footer's batch Blocks are patched with the written messages' places
  (:mod:`arrowshuffle.format.ipc_file`).
* **Bounded memory.** Input regions are read whole, as sequential ranges, and an output region
  takes consecutive input regions while their bytes fit ``memory`` (at least one; a region
  larger than ``memory`` is read chunk run by chunk run, a single chunk at most being held
  beyond the budget). Re-batching works on one subpartition's run of an output region at a
  time: its decoded batches (as large as its bytes, or their decompressed size) and one
  re-encoded batch are held beside the region's input bytes.
* **Broadcast stays broadcast.** Broadcast input regions are merged into broadcast output
  regions (one chunk each), after the group's regular regions.
* **Same partitioner.** Every file of a dataset carries the manifest's partitioner spec, up to
  the fields that name one producer (rule M6), and a merged file carries the manifest's spec,
  which has none of them: a merged ``forward`` or ``rescale`` file may hold several producers'
  rows, so it names none (and its rows are not checked one by one, V19).
* **Atomic commit, concurrent writers welcome.** The new files are written under fresh names
  first, then the next manifest version is created (:func:`commit_compaction`): appends that
  committed meanwhile stay listed (compaction rebases onto them), and a compaction whose inputs
  another job replaced commits nothing. The replaced files are not removed: readers of earlier
  versions may still read them, and ``vacuum`` removes them once those versions expire. Killed
  at any point before the version is created, the dataset is untouched (new files are unlisted
  leftovers that ``vacuum`` removes); after it, the compacted dataset is complete.
"""

from __future__ import annotations

import dataclasses
import errno
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from arrowshuffle.format.errors import CommitConflictError, InvalidOptionError, MissingObjectError
from arrowshuffle.format.manifest import Manifest, ManifestFile
from arrowshuffle.format.manifest_rules import check_file_counts
from arrowshuffle.format.naming import new_file_name, new_job_id
from arrowshuffle.format.notation import parse_bytes
from arrowshuffle.format.partitioners import dataset_spec
from arrowshuffle.readers.file_reader import ShuffleFile
from arrowshuffle.readers.storage import Location, member, resolve
from arrowshuffle.writers.commit import Base, CommitOutcomeUnknownError, commit_version
from arrowshuffle.writers.dataset_writer import abort_dataset, manifest_entry, read_manifest
from arrowshuffle.writers.file_writer import WrittenFile
from arrowshuffle.writers.merge import (
    AUTO_REBATCH_BYTES,
    DEFAULT_BATCH_ROWS,
    DEFAULT_MEMORY,
    CompactionGroup,
    MergedGroup,
    Progress,
    Rebatch,
    check_rebatch,
    input_bytes,
    merge_files,
)

__all__ = [
    "AUTO_REBATCH_BYTES",
    "DEFAULT_BATCH_ROWS",
    "DEFAULT_MEMORY",
    "DEFAULT_TARGET_FILE_SIZE",
    "CompactionGroup",
    "CompactionJob",
    "CompactionReport",
    "MergedGroup",
    "Progress",
    "Rebatch",
    "commit_compaction",
    "compact",
    "merge_files",
    "plan_groups",
    "start_compaction",
]

DEFAULT_TARGET_FILE_SIZE = "1GiB"


@dataclass(frozen=True)
class CompactionReport:
    """What :func:`compact` did (or, with ``dry_run``, would do).

    Attributes:
        url: the dataset.
        dry_run: True when nothing was written.
        groups: every group, merged or kept.
        files_before: files listed before.
        files_after: files listed after (or planned).
        bytes_read: data bytes read from the inputs.
        bytes_written: data and index bytes written.
        seconds: wall time.
        written: names of the new data files.
    """

    url: str
    dry_run: bool
    groups: tuple[CompactionGroup, ...]
    files_before: int
    files_after: int
    bytes_read: int = 0
    bytes_written: int = 0
    seconds: float = 0.0
    written: tuple[str, ...] = field(default_factory=tuple)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serializable description."""
        return {
            "url": self.url,
            "dry_run": self.dry_run,
            "files_before": self.files_before,
            "files_after": self.files_after,
            "bytes_read": self.bytes_read,
            "bytes_written": self.bytes_written,
            "seconds": round(self.seconds, 3),
            "written": list(self.written),
            "groups": [g.to_dict() for g in self.groups],
        }


# ---------------------------------------------------------------------- planning


def plan_groups(manifest: Manifest, target_file_size: int | str) -> list[CompactionGroup]:
    """Split the manifest's files into groups of consecutive files of at most the target size.

    A file is added to the current group while the group's data bytes stay within
    ``target_file_size``; a file larger than the target is a group of its own.
    """
    target = parse_bytes(target_file_size, name="target_file_size")
    if target < 1:
        raise InvalidOptionError(f"target_file_size must be at least 1 byte, found {target}")
    groups: list[CompactionGroup] = []
    current: list[int] = []
    size = rows = 0
    for i, f in enumerate(manifest.files):
        if current and size + f.data_size > target:
            groups.append(CompactionGroup(len(groups), tuple(current), size, rows))
            current, size, rows = [], 0, 0
        current.append(i)
        size += f.data_size
        rows += f.rows
    if current:
        groups.append(CompactionGroup(len(groups), tuple(current), size, rows))
    return groups


# ---------------------------------------------------------------------- committing


def commit_compaction(
    directory: Location,
    before: Manifest,
    groups: Sequence[CompactionGroup],
    outputs: dict[int, WrittenFile],
    *,
    job_id: str,
    progress: Progress | None = None,
    replaced_bytes: dict[int, Sequence[int]] | None = None,
) -> Manifest:
    """Commit the next version: merged groups by their new file, other files as they are.

    When other jobs committed since ``before`` (appends, another compaction), the compaction
    rebases onto the version in force as long as every file it merged is still listed there:
    the other jobs' files stay listed, the merged inputs are replaced by their output where
    the first of them is listed. When some input is no longer listed (an overwrite, or a
    compaction that merged it first), nothing is committed and the new files are removed.
    The replaced files stay until vacuum expires the versions that list them, so readers of
    those versions keep reading.

    The per-subpartition byte totals change by what each new file holds less its inputs
    (re-batched chunks change in size; rows never do): ``replaced_bytes`` gives the inputs'
    bytes per group as the merge counted them; for a group it lacks, the inputs' indexes are
    read again.

    Raises:
        CommitConflictError: some merged file is no longer listed by the version in force.
        ShuffleIOError: the manifest could not be written.
    """
    written = list(outputs.values())
    _check_totals(before, groups, outputs)
    delta = _bytes_delta(directory, before, groups, outputs, replaced_bytes or {})
    merged = {
        group.index: [before.files[i] for i in group.files]
        for group in groups
        if group.index in outputs
    }

    def build(current: Manifest | None) -> Manifest:
        inputs = [f for files in merged.values() for f in files]
        listed = set() if current is None else set(current.files)
        gone = [f.data for f in inputs if f not in listed]
        if current is None or gone:
            found = None if current is None else current.version
            raise CommitConflictError(
                f"dataset {directory.url} changed while it was compacted: version {found} no "
                f"longer lists {len(gone) or len(inputs)} of the files merged from version "
                f"{before.version} (another job replaced them); nothing was replaced, run "
                "compact again",
                expected=before.version,
                found=found,
            )
        replaced = {f: group for group, files in merged.items() for f in files}
        firsts = {files[0]: group for group, files in merged.items()}
        files: list[ManifestFile] = []
        for f in current.files:
            if f in firsts:
                files.append(manifest_entry(directory, outputs[firsts[f]]))
            elif f not in replaced:
                files.append(f)
        sizes = current.sizes
        if sizes is not None and delta is not None:
            # Merging moves chunks between files, never rows; re-batching resizes chunks.
            sizes = dataclasses.replace(
                sizes, bytes=tuple((np.array(sizes.bytes, dtype=np.int64) + delta).tolist())
            )
        elif delta is None:
            sizes = None  # unknown: readers fall back to the indexes
        return dataclasses.replace(
            current,
            partitioner=dataset_spec(current.partitioner),
            files=tuple(files),
            sizes=sizes,
        )

    try:
        manifest = commit_version(directory, build, operation="compact", base=Base.of(before))
    except CommitOutcomeUnknownError:
        raise  # a committed version may list the new files: vacuum decides later
    except BaseException:
        abort_dataset(directory, written, job_id=job_id)
        raise
    assert manifest is not None  # build always returns a manifest
    if progress is not None:
        progress(f"committed version {manifest.version}")
    return manifest


def _bytes_delta(
    directory: Location,
    before: Manifest,
    groups: Sequence[CompactionGroup],
    outputs: dict[int, WrittenFile],
    replaced: dict[int, Sequence[int]],
) -> np.ndarray | None:
    """Per subpartition, the new files' bytes less their inputs' (None: a new file has none)."""
    n = before.num_subpartitions
    delta = np.zeros(n, dtype=np.int64)
    if before.sizes is None:
        # Not known (the merge did not count them): should the version committed on carry
        # totals, they are dropped rather than kept stale.
        return None
    for group in groups:
        out = outputs.get(group.index)
        if out is None:
            continue
        if len(out.subpartition_bytes) != n:
            return None
        old = replaced.get(group.index)
        if old is None:
            old = input_bytes((_read_entries(directory, before.files[i]) for i in group.files), n)
        delta += np.array(out.subpartition_bytes, dtype=np.int64)
        delta -= np.array(old, dtype=np.int64)
    return delta


def _read_entries(directory: Location, entry: ManifestFile) -> np.ndarray:
    shuffle_file = ShuffleFile(
        member(directory, entry.data), data_size=entry.data_size, index_size=entry.index_size
    )
    try:
        return shuffle_file.entries()
    finally:
        shuffle_file.close()


def _check_totals(
    before: Manifest, groups: Sequence[CompactionGroup], outputs: dict[int, WrittenFile]
) -> None:
    """The merged files' rows must be their inputs' rows (the totals are kept as they were)."""
    for group in groups:
        out = outputs.get(group.index)
        if out is None:
            continue
        # The old manifest lists the group's rows; the merged file's index must hold them.
        found = check_file_counts(out.data_url, {"rows": group.rows}, {"rows": out.rows})
        if found:
            raise found[0].error()


# ---------------------------------------------------------------------- the entry point


def compact(
    path: str,
    *,
    target_file_size: int | str = DEFAULT_TARGET_FILE_SIZE,
    storage_options: dict[str, Any] | None = None,
    memory: int | str = DEFAULT_MEMORY,
    rebatch: Rebatch = "auto",
    batch_rows: int = DEFAULT_BATCH_ROWS,
    dry_run: bool = False,
    progress: Progress | None = None,
) -> CompactionReport:
    """Merge groups of consecutive files of the dataset at ``path`` into one file each.

    Groups hold consecutive files (manifest order) up to ``target_file_size`` of data; a group
    of one file is kept as it is. See the module documentation for what a merged file holds
    and how the new manifest replaces the old one.

    Args:
        path: the dataset directory, a local path or an fsspec URL.
        target_file_size: the most data bytes of one group, e.g. ``"1GiB"`` or ``268435456``.
        storage_options: passed to fsspec for URLs.
        memory: bytes of input regions held at once while merging.
        rebatch: ``"auto"`` (default) re-encodes a subpartition's merged chunks as fewer,
            larger batches when their batches average under 64 KiB, and copies larger ones as
            bytes; True re-encodes whenever that makes fewer batches; False only copies.
            Re-encoded batches use the codec of most of the inputs' bytes; rows keep their
            order within each subpartition.
        batch_rows: the most rows of one re-encoded batch (input batches are never split).
        dry_run: only plan the groups; nothing is read or written beyond the manifest.
        progress: called with one line per step (regions written, files published, commit).

    Returns:
        The groups and what compaction read and wrote.

    Raises:
        MissingObjectError: ``path`` holds no dataset.
        InvalidOptionError: a bad option.
        CommitConflictError: the dataset changed while it was compacted (a merged file is no
            longer listed); nothing was replaced.
        FormatError: an input breaks a rule of the format; nothing was replaced.

    Example:
        >>> arrowshuffle.compact("s3://bucket/shuffle", target_file_size="512MiB")  # doctest: +SKIP
    """
    job = start_compaction(
        path,
        target_file_size=target_file_size,
        storage_options=storage_options,
        memory=memory,
        rebatch=rebatch,
        batch_rows=batch_rows,
    )
    if dry_run or not job.merged:
        return job.report(dry_run=dry_run)
    job_id = new_job_id()
    outputs: dict[int, WrittenFile] = {}
    replaced: dict[int, Sequence[int]] = {}
    bytes_read = 0
    try:
        for group in job.merged:
            merged = merge_files(
                job.directory,
                [job.before.files[i] for i in group.files],
                name=new_file_name(group.index, job_id=job_id),
                num_subpartitions=job.before.num_subpartitions,
                partitioner=job.before.partitioner,
                memory=job.memory,
                rebatch=job.rebatch,
                batch_rows=job.batch_rows,
                progress=progress,
            )
            outputs[group.index] = merged.written
            replaced[group.index] = merged.input_bytes
            bytes_read += merged.bytes_read
    except BaseException:
        job.abort(outputs, job_id=job_id)
        raise
    return job.finish(
        outputs, bytes_read, job_id=job_id, progress=progress, replaced_bytes=replaced
    )


@dataclass(frozen=True)
class CompactionJob:
    """A compaction under way: the dataset, the manifest it started from, its groups.

    Shared by :func:`compact` and the Spark compaction, which differ only in where the groups
    are merged.
    """

    directory: Location
    before: Manifest
    groups: tuple[CompactionGroup, ...]
    memory: int
    started: float
    rebatch: Rebatch = "auto"
    batch_rows: int = DEFAULT_BATCH_ROWS

    @property
    def merged(self) -> list[CompactionGroup]:
        """The groups of several files (the others are kept as they are)."""
        return [g for g in self.groups if g.merged]

    def report(
        self,
        *,
        dry_run: bool = False,
        outputs: dict[int, WrittenFile] | None = None,
        bytes_read: int = 0,
    ) -> CompactionReport:
        """What the compaction did (or, before any merge, would do)."""
        written = list((outputs or {}).values())
        return CompactionReport(
            url=self.directory.url,
            dry_run=dry_run,
            groups=self.groups,
            files_before=len(self.before.files),
            files_after=len(self.before.files) - sum(len(g.files) - 1 for g in self.merged),
            bytes_read=bytes_read,
            bytes_written=sum(w.data_size + w.index_size for w in written),
            seconds=time.perf_counter() - self.started if outputs is not None else 0.0,
            written=tuple(w.data_url.rstrip("/").rsplit("/", 1)[-1] for w in written),
        )

    def finish(
        self,
        outputs: dict[int, WrittenFile],
        bytes_read: int,
        *,
        job_id: str,
        progress: Progress | None = None,
        replaced_bytes: dict[int, Sequence[int]] | None = None,
    ) -> CompactionReport:
        """Commit the merged files (see :func:`commit_compaction`) and report."""
        commit_compaction(
            self.directory,
            self.before,
            self.groups,
            outputs,
            job_id=job_id,
            progress=progress,
            replaced_bytes=replaced_bytes,
        )
        return self.report(outputs=outputs, bytes_read=bytes_read)

    def abort(self, outputs: dict[int, WrittenFile], *, job_id: str) -> None:
        """Remove the files merged so far and every other file of ``job_id``; keep the dataset."""
        abort_dataset(self.directory, list(outputs.values()), job_id=job_id)


def start_compaction(
    path: str,
    *,
    target_file_size: int | str,
    storage_options: dict[str, Any] | None,
    memory: int | str,
    rebatch: Rebatch = "auto",
    batch_rows: int = DEFAULT_BATCH_ROWS,
) -> CompactionJob:
    """Check the options, read the manifest and group its files.

    Raises:
        MissingObjectError: ``path`` holds no dataset.
        InvalidOptionError: a bad option.
    """
    started = time.perf_counter()
    budget = parse_bytes(memory, name="memory")
    if budget < 1:
        raise InvalidOptionError(f"memory must be at least 1 byte, found {budget}")
    rebatch, batch_rows = check_rebatch(rebatch, batch_rows)
    directory = resolve(path, storage_options)
    before = _require_manifest(directory)
    groups = tuple(plan_groups(before, target_file_size))
    return CompactionJob(directory, before, groups, budget, started, rebatch, batch_rows)


def _require_manifest(directory: Location) -> Manifest:
    manifest = read_manifest(directory)
    if manifest is None:
        raise MissingObjectError(
            errno.ENOENT,
            f"{directory.url} is not an arrowshuffle dataset: it has no manifest to compact",
        )
    return manifest
