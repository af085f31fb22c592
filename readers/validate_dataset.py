"""Validate a dataset: every retained manifest version's rules (M1-M11) and every listed file's.

Manifest rules:

* M1 the manifest is an arrowshuffle manifest (UTF-8 JSON of bounded depth, the right kind,
  well-typed fields in range);
* M2 its format version is supported;
* M3 every file name is a plain relative name inside the dataset directory, and each index is
  named after its data file (``<data>.idx``, where readers look for it);
* M4 every listed data and index file is present with its listed size;
* M5 each index's whole-index checksum (its trailer CRC32C) equals the listed one;
* M6 every file has the manifest's schema, subpartition count and partitioner;
* M7 each file's rows, regions and data length equal what its index declares;
* M8 every file is listed once;
* M9 the per-subpartition totals (manifest 1.1), when listed, are the sums over the indexes;
* M10 a manifest version file holds the version its name gives;
* M11 the versions the directory holds are consecutive, ending at the version in force.

A dataset's manifests are numbered versions (spec section 8.1); by default every version the
directory holds is checked, the version in force as the report's main part and each earlier one
in :attr:`DatasetReport.versions`. M1-M3, M8 and M10 are checked by decoding a version (a
failure there ends that version's check); the others per file, followed by the file's rules
V1-V21, and M9 once every index of the version is decoded
(:func:`arrowshuffle.readers.validate.validate_decoded`). Versions of an append chain share
most files: each distinct file (its manifest entry, with the schema, subpartition count and
partitioner M6 compares it with) is checked once, whatever the number of versions listing it.
Files are checked concurrently; one listing of the directory gives every size, so a missing
file costs no request and a present one a single read of its index (when it is small) plus the
data file's two ends. A missing manifest is a storage problem, not invalid data: it raises
:class:`~arrowshuffle.format.errors.MissingObjectError`.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from arrowshuffle.format.errors import FormatError, InvalidOptionError, MissingObjectError
from arrowshuffle.format.index import (
    HEADER_SIZE,
    INDEX_PREFIX_BYTES,
    decode_header,
    decode_index,
    index_checksum,
    schema_to_bytes,
)
from arrowshuffle.format.manifest import Manifest, ManifestFile
from arrowshuffle.format.manifest_rules import (
    check_file_agrees,
    check_file_counts,
    check_index_checksum,
    check_listed_size,
    check_subpartition_totals,
    check_version_sequence,
    declared_counts,
    index_has,
    listed_counts,
    manifest_expects,
)
from arrowshuffle.format.naming import MANIFEST_NAME, is_part_name
from arrowshuffle.format.rule_registry import MANIFEST_RULES, Violation
from arrowshuffle.readers.manifest_io import list_versions, load_manifest
from arrowshuffle.readers.source import ByteSource, MappedSource, PrefetchedSource, open_source
from arrowshuffle.readers.storage import (
    Location,
    list_directory,
    member,
    resolve,
    storage_errors,
)
from arrowshuffle.readers.validate import validate_decoded

__all__ = [
    "MANIFEST_RULES",
    "DatasetReport",
    "FileReport",
    "VersionReport",
    "is_dataset",
    "validate_dataset",
]

#: Called after each file is checked: (files done, files in total, data file name).
Progress = Callable[[int, int, str], None]

#: Files checked at the same time.
DEFAULT_WORKERS = 8
#: An index at most this long is fetched in one ranged read; a longer one is refused from its
#: header before the rest is fetched.
WHOLE_INDEX_BYTES = 8 * 1024 * 1024
#: The end of a remote data file fetched with its first bytes: the Arrow footer usually lies
#: within, so checking it costs no further request.
DATA_TAIL_BYTES = 64 * 1024
#: The start of a remote data file fetched with its end: its magic, padded to 8 bytes, and the
#: schema message's continuation and length, where its first record batch starts (V21).
_DATA_HEAD_BYTES = 16


@dataclass
class FileReport:
    """The checks of one listed file: manifest rules M4-M7 and the file's own rules."""

    name: str
    url: str
    ok: bool
    violations: list[Violation] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)
    #: Bytes and rows per subpartition from the decoded index (for rule M9), if it decoded.
    totals: np.ndarray | None = field(default=None, repr=False, compare=False)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serializable form of the report."""
        return {
            "name": self.name,
            "url": self.url,
            "ok": self.ok,
            "violations": [{"rule": v.rule, "message": v.message} for v in self.violations],
            "summary": dict(self.summary),
        }


@dataclass
class VersionReport:
    """The checks of one manifest version other than the one in force.

    Attributes:
        version: the version's number.
        ok: True when the version and every file it lists keep every rule.
        violations: ``(file name or None for the version itself, violation)``; each message
            starts with ``version <n>:``. A file several versions list is checked once, and
            its violations appear under each of them.
        summary: files and rows it lists, and the operation of the commit that wrote it,
            when it decoded.
    """

    version: int
    ok: bool
    violations: list[tuple[str | None, Violation]] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serializable form of the report."""
        return {
            "version": self.version,
            "ok": self.ok,
            "violations": [
                {"file": name, "rule": v.rule, "message": v.message} for name, v in self.violations
            ],
            "summary": dict(self.summary),
        }


@dataclass
class DatasetReport:
    """The outcome of validating a dataset.

    Attributes:
        url: the dataset directory.
        ok: True when no rule is broken anywhere, in any version checked.
        violations: rules the dataset itself breaks: the version in force's manifest (M1-M3,
            M8, M10, and M9 over its files) and its versions (M11); per-file findings of the
            version in force are in :attr:`files`, earlier versions' in :attr:`versions`.
        files: one report per file the version in force lists, in manifest order.
        versions: one report per earlier version checked, oldest first (none with
            ``current_only``, or for a dataset of one manifest).
        summary: version (the one in force; 0 for a dataset written before versions),
            versions (the numbers checked, oldest first), and of the version in force: files,
            rows, subpartitions, partitioner (its name), bytes, index_bytes; deep; and unlisted
            (names of shuffle files in the directory that no retained version lists: invisible
            to readers, not an error, and what vacuum may remove).
    """

    url: str
    ok: bool
    violations: list[Violation] = field(default_factory=list)
    files: list[FileReport] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)
    versions: list[VersionReport] = field(default_factory=list)

    @property
    def all_violations(self) -> list[tuple[str | None, Violation]]:
        """Every broken rule as ``(file name or None for a manifest, violation)``.

        The version in force's first, then each earlier version's, oldest first.
        """
        found: list[tuple[str | None, Violation]] = [(None, v) for v in self.violations]
        found += [(report.name, v) for report in self.files for v in report.violations]
        found += [item for version in self.versions for item in version.violations]
        return found

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serializable form of the report."""
        return {
            "kind": "dataset",
            "url": self.url,
            "ok": self.ok,
            "violations": [{"rule": v.rule, "message": v.message} for v in self.violations],
            "files": [f.to_dict() for f in self.files],
            "versions": [v.to_dict() for v in self.versions],
            "summary": dict(self.summary),
        }


def is_dataset(path_or_url: str | os.PathLike[str], storage_options: dict[str, Any] | None) -> bool:
    """True when ``path_or_url`` is a directory holding a manifest or a manifest version.

    One existence check when the manifest's copy is there, one listing of the versions
    directory more when it is not (a dataset whose committer stopped before its copy).
    """
    directory = resolve(path_or_url, storage_options)
    location = directory.child(MANIFEST_NAME)
    with storage_errors(location.url, "looking for"):
        if location.fs.exists(location.path):
            return True
    return bool(list_versions(directory))


#: What M6 compares every file of a manifest with: its schema (encoded), subpartition count
#: and partitioner spec (as JSON), hashable.
_Expects = tuple[bytes, int, str]
#: What identifies one check of a file: its manifest entry and what M6 compares it with.
_FileKey = tuple[ManifestFile, bytes, int, str]


def _expects(manifest: Manifest) -> _Expects:
    partitioner = json.dumps(manifest.partitioner, sort_keys=True, default=str)
    return schema_to_bytes(manifest.schema), manifest.num_subpartitions, partitioner


def _file_keys(manifest: Manifest) -> list[_FileKey]:
    """The key of each file ``manifest`` lists, in manifest order."""
    expects = _expects(manifest)
    return [(entry, *expects) for entry in manifest.files]


def validate_dataset(
    path_or_url: str | os.PathLike[str],
    *,
    deep: bool = False,
    current_only: bool = False,
    storage_options: dict[str, Any] | None = None,
    progress: Progress | None = None,
    workers: int = DEFAULT_WORKERS,
) -> DatasetReport:
    """Check a dataset against rules M1-M11 and each listed file against V1-V21.

    Every manifest version the directory holds is checked (each distinct file once), unless
    ``current_only``: then only the version in force, and not M11.

    Args:
        path_or_url: the dataset directory (local path or fsspec URL).
        deep: also read every chunk of every file (see ``validate_file``).
        current_only: check the version in force only.
        storage_options: passed to fsspec for URLs.
        progress: called after each file with (files done, files in total, file name); the
            total counts each distinct file of every version checked once.
        workers: files checked at the same time.

    Returns:
        A report; ``report.ok`` is True for a valid dataset.

    Raises:
        MissingObjectError: there is no manifest at ``path_or_url``.
        ShuffleIOError: another storage failure.
        InvalidOptionError: ``workers`` is not a positive integer.
    """
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise InvalidOptionError(f"workers must be a positive integer, found {workers!r}")
    if progress is not None and not callable(progress):
        raise InvalidOptionError(f"progress must be a callable, found {type(progress).__name__}")
    directory = resolve(path_or_url, storage_options)
    listed = list_versions(directory)
    numbers = [v.version for v in listed]
    in_force = numbers[-1] if numbers else 0
    report = DatasetReport(url=directory.url, ok=False, summary={"deep": deep, "version": in_force})
    manifest: Manifest | None = None
    try:
        manifest = load_manifest(directory, versions=listed, name_url=False).manifest
    except FormatError as exc:
        report.violations.append(Violation.from_error(exc, "M1"))
    if not current_only and numbers:
        sequence = check_version_sequence(numbers)
        if sequence is not None:
            report.violations.append(sequence)
    # Earlier versions, decoded first so that every distinct file goes through one pool.
    # With current_only they are read only for the names they list (which are not unlisted).
    earlier = _earlier_versions(directory, numbers[:-1])
    retained = [m for _, m in earlier if isinstance(m, Manifest)]
    if current_only:
        earlier = []
    report.summary["versions"] = [n for n, _ in earlier] + [in_force]
    manifests = [m for _, m in earlier if isinstance(m, Manifest)]
    if manifest is not None:
        manifests.insert(0, manifest)
    sizes = _listing(directory)
    keys = {id(m): _file_keys(m) for m in manifests}
    jobs: dict[_FileKey, tuple[Manifest, ManifestFile]] = {}
    for m in manifests:
        for key, entry in zip(keys[id(m)], m.files, strict=True):
            jobs.setdefault(key, (m, entry))
    checked = _check_files(directory, list(jobs.values()), sizes, deep, progress, workers)
    reports = dict(zip(jobs, checked, strict=True))
    if manifest is not None:
        report.summary.update(
            files=len(manifest.files),
            rows=manifest.total_rows,
            subpartitions=manifest.num_subpartitions,
            partitioner=str(manifest.partitioner.get("name")),
            bytes=sum(f.data_size for f in manifest.files),
            index_bytes=sum(f.index_size for f in manifest.files),
            unlisted=_unlisted([manifest, *retained], sizes),
        )
        report.files = [reports[key] for key in keys[id(manifest)]]
        report.violations.extend(_check_totals(manifest, report.files))
    report.versions = [
        _version_report(number, m, [] if isinstance(m, Violation) else keys[id(m)], reports)
        for number, m in earlier
    ]
    report.ok = (
        not report.violations
        and all(f.ok for f in report.files)
        and all(v.ok for v in report.versions)
    )
    return report


def _earlier_versions(
    directory: Location, numbers: list[int]
) -> list[tuple[int, Manifest | Violation]]:
    """Each version decoded, or the rule its file breaks (M1-M3, M8, M10).

    A version that vacuum removed since the listing is left out: nothing of it is left.
    """
    earlier: list[tuple[int, Manifest | Violation]] = []
    for number in numbers:
        try:
            loaded = load_manifest(directory, version=number, name_url=False)
        except FormatError as exc:
            earlier.append((number, Violation.from_error(exc, "M1")))
        except MissingObjectError:
            continue
        else:
            earlier.append((number, loaded.manifest))
    return earlier


def _version_report(
    number: int,
    manifest: Manifest | Violation,
    keys: list[_FileKey],
    reports: dict[_FileKey, FileReport],
) -> VersionReport:
    """The report of an earlier version from its decoding and its files' (cached) reports."""

    def named(violation: Violation) -> Violation:
        return dataclasses.replace(violation, message=f"version {number}: {violation.message}")

    if isinstance(manifest, Violation):
        return VersionReport(number, ok=False, violations=[(None, named(manifest))])
    files = [reports[key] for key in keys]
    found: list[tuple[str | None, Violation]] = [
        (f.name, named(v)) for f in files for v in f.violations
    ]
    found += [(None, named(v)) for v in _check_totals(manifest, files)]
    summary = {
        "files": len(manifest.files),
        "rows": manifest.total_rows,
        "operation": manifest.operation,
    }
    return VersionReport(number, ok=not found, violations=found, summary=summary)


def _check_files(
    directory: Location,
    jobs: list[tuple[Manifest, ManifestFile]],
    sizes: dict[str, int] | None,
    deep: bool,
    progress: Progress | None,
    workers: int,
) -> list[FileReport]:
    """One report per ``(manifest, entry)`` job, in order; files checked on a thread pool.

    Files the listing shows missing are reported without a request or a task.
    """
    total = len(jobs)
    reports: list[FileReport | None] = [None] * total
    done = 0
    pending: list[int] = []
    url_prefix = directory.child("").url  # a file's URL is this plus its name
    for i, (_, entry) in enumerate(jobs):
        missing = _missing(url_prefix, entry, sizes)
        if missing is None:
            pending.append(i)
            continue
        reports[i] = missing
        done += 1
        if progress is not None:
            progress(done, total, entry.data)

    def check(i: int) -> FileReport:
        manifest, entry = jobs[i]
        return _check_file(directory, manifest, entry, sizes, deep)

    if len(pending) == 1 or workers <= 1:
        for i in pending:
            reports[i] = check(i)
            done += 1
            if progress is not None:
                progress(done, total, jobs[i][1].data)
    elif pending:
        with ThreadPoolExecutor(min(workers, len(pending)), "arrowshuffle-validate") as pool:
            futures = {pool.submit(check, i): i for i in pending}
            try:
                for future in as_completed(futures):
                    i = futures[future]
                    reports[i] = future.result()
                    done += 1
                    if progress is not None:
                        progress(done, total, jobs[i][1].data)
            except BaseException:
                for future in futures:
                    future.cancel()  # an error or an interrupt ends the check without waiting
                raise
    return [r for r in reports if r is not None]


def _check_totals(manifest: Manifest, files: list[FileReport]) -> list[Violation]:
    """Rule M9, checked when every file's index decoded with the manifest's subpartitions."""
    if manifest.sizes is None:
        return []
    n = manifest.num_subpartitions
    totals = np.zeros((2, n), dtype=np.int64)
    for f in files:
        if f.totals is None or f.totals.shape != (2, n):
            return []
        totals += f.totals
    found = check_subpartition_totals(manifest, totals)
    return [] if found is None else [found]


def _listing(directory: Location) -> dict[str, int] | None:
    """Names and sizes of the directory's objects (one listing), or None if it cannot list."""
    try:
        entries = list_directory(directory)
    except Exception:  # any failure (storage libraries raise their own types): ask one by one
        return None
    return {name: int(entry.get("size") or 0) for name, entry in entries.items()}


def _unlisted(manifests: list[Manifest], sizes: dict[str, int] | None) -> list[str]:
    """Shuffle files of the directory that none of ``manifests`` lists (at most 100)."""
    if sizes is None:
        return []
    listed = {name for m in manifests for f in m.files for name in (f.data, f.index)}
    return sorted(n for n in sizes if is_part_name(n) and n not in listed)[:100]


def _size(directory: Location, name: str, sizes: dict[str, int] | None) -> int | None:
    """The object's size, or None when it does not exist.

    The listing holds the directory's own objects; a name in a subdirectory is asked for.
    """
    if sizes is not None and "/" not in name:
        return sizes.get(name)
    location = directory.child(name)
    with storage_errors(location.url, "reading the size of"):
        try:
            return int(location.fs.size(location.path))
        except FileNotFoundError:
            return None


def _missing(
    url_prefix: str, entry: ManifestFile, sizes: dict[str, int] | None
) -> FileReport | None:
    """The report of a file whose data file or index the listing lacks (rule M4), else None."""
    if sizes is None or "/" in entry.data:
        return None  # not in the listing: checked with requests
    if entry.data in sizes and entry.index in sizes:
        return None
    report = FileReport(name=entry.data, url=url_prefix + entry.data, ok=False)
    for what, name, listed in (
        ("data file", entry.data, entry.data_size),
        ("index", entry.index, entry.index_size),
    ):
        found = check_listed_size(what, name, listed, sizes.get(name))
        if found is not None:
            report.violations.append(found)
    return report


def _check_file(
    directory: Location,
    manifest: Manifest,
    entry: ManifestFile,
    sizes: dict[str, int] | None,
    deep: bool,
) -> FileReport:
    data = directory.child(entry.data)
    report = FileReport(name=entry.data, url=data.url, ok=False)
    found = report.violations
    try:
        member(directory, entry.data)
        member(directory, entry.index)
    except FormatError as exc:  # a link out of the directory: nothing of it is read
        found.append(Violation.from_error(exc, "M3"))
        return report
    data_size = _size(directory, entry.data, sizes)
    index_size = _size(directory, entry.index, sizes)
    for what, name, actual, listed in (
        ("data file", entry.data, data_size, entry.data_size),
        ("index", entry.index, index_size, entry.index_size),
    ):
        size = check_listed_size(what, name, listed, actual)
        if size is not None:
            found.append(size)
    if data_size is None or index_size is None:
        return report
    # Sizes come from the objects themselves, never from the manifest: a hostile listed size
    # cannot make this fetch or allocate more than is stored.
    index_source = open_source(directory.child(entry.index), index_size)
    data_source = open_source(data, data_size)
    try:
        raw = _fetch_index(index_source, index_size)
    except FormatError as exc:  # a large index whose header is refused
        return _finish(report, Violation.from_error(exc, "V4"), data_size, index_size, deep)
    try:
        checksum = check_index_checksum(
            entry.data, index_checksum(memoryview(raw)), entry.index_crc32c
        )
    except FormatError:  # too short for a trailer: the index's own rule V4 says so below
        checksum = None
    if checksum is not None:
        found.append(checksum)
    try:
        index = decode_index(memoryview(raw))
    except FormatError as exc:  # the file's own rule, as validate_file reports it
        return _finish(report, Violation.from_error(exc, "V4"), data_size, index_size, deep)
    found.extend(check_file_agrees(entry.data, manifest_expects(manifest), index_has(index)))
    found.extend(check_file_counts(entry.data, listed_counts(entry), declared_counts(index.header)))
    entries = index.entries
    sums = [entries[name].sum(axis=1, dtype=np.uint64) for name in ("length", "rows")]
    report.totals = np.stack(sums).astype(np.int64)
    if not isinstance(data_source, MappedSource):
        data_source = _ends_fetched(data_source, DATA_TAIL_BYTES)
    own = validate_decoded(data.url, index, data_source, deep=deep)
    found.extend(own.violations)
    report.summary = dict(own.summary)
    report.ok = not found
    return report


def _finish(
    report: FileReport, own: Violation, data_size: int, index_size: int, deep: bool
) -> FileReport:
    """A report whose index does not decode: the file's own checks end there."""
    report.violations.append(own)
    report.summary = {"bytes": data_size, "index_bytes": index_size, "deep": deep, "skipped": []}
    return report


def _fetch_index(source: ByteSource, size: int) -> pa.Buffer:
    """The whole index: one read when it is small, else its header is checked first."""
    if isinstance(source, MappedSource) or size <= WHOLE_INDEX_BYTES:
        (whole,) = source.read_ranges([(0, size)])
        return whole
    (prefix,) = source.read_ranges([(0, INDEX_PREFIX_BYTES)])
    decode_header(memoryview(prefix)[:HEADER_SIZE], object_size=size)
    (rest,) = source.read_ranges([(INDEX_PREFIX_BYTES, size)])
    return pa.py_buffer(prefix.to_pybytes() + rest.to_pybytes())


def _ends_fetched(source: ByteSource, tail: int) -> PrefetchedSource:
    """A remote data file whose two ends are fetched together, in one round trip.

    Checking the data file reads its magic at both ends and its footer, just before the end:
    those reads are then served from memory. Other ranges go to the object. A file whose ends
    meet is fetched whole.
    """
    size = source.size
    head_end = min(size, _DATA_HEAD_BYTES)
    tail_start = max(0, size - tail)
    if tail_start <= head_end:
        (whole,) = source.read_ranges([(0, size)])
        return PrefetchedSource(source, [(0, whole)])
    head, end = source.read_ranges([(0, head_end), (tail_start, size)])
    return PrefetchedSource(source, [(0, head), (tail_start, end)])
