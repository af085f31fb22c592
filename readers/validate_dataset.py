"""Validate a dataset: its manifest's rules (M1-M7) and every listed file's own rules.

Manifest rules:

* M1 the manifest is an arrowshuffle manifest (JSON, the right kind, well-typed fields);
* M2 its format version is supported;
* M3 every file name is a plain relative name inside the dataset directory, listed once, and
  each index is named after its data file (``<data>.idx``, where readers look for it);
* M4 every listed data and index file is present with its listed size;
* M5 each index's whole-index checksum (its trailer CRC32C) equals the listed one;
* M6 every file has the manifest's schema, subpartition count and partitioner;
* M7 each file's rows, regions and data length equal what its index declares.

M1-M3 are checked by decoding the manifest (a failure there ends the check); the others per
file, followed by the file's rules V1-V19 (:func:`arrowshuffle.readers.validate.validate_file`).
A missing manifest is a storage problem, not invalid data: it raises
:class:`~arrowshuffle.format.errors.MissingObjectError`.
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from typing import Any

from arrowshuffle._storage import INDEX_SUFFIX, Location, read_bytes, resolve, storage_errors
from arrowshuffle.format.errors import FormatError, MissingObjectError
from arrowshuffle.format.index import ShuffleIndex, decode_index, index_checksum
from arrowshuffle.format.manifest import MANIFEST_NAME, Manifest, ManifestFile, decode_manifest
from arrowshuffle.format.rules import Violation

#: Rules of the manifest, as documented above.
MANIFEST_RULES: dict[str, str] = {
    "M1": "the manifest is an arrowshuffle manifest with well-typed fields",
    "M2": "the manifest's format version is supported",
    "M3": "file names stay inside the dataset directory, are listed once, and each index is "
    "named <data file>.idx",
    "M4": "every listed data and index file is present with its listed size",
    "M5": "each index's trailer checksum equals the listed index checksum",
    "M6": "every file has the manifest's schema, subpartition count and partitioner",
    "M7": "each file's rows, regions and data length equal what its index declares",
}

#: Called after each file is checked: (files done, files in total, data file name).
Progress = Callable[[int, int, str], None]

#: Files checked at the same time on object stores.
DEFAULT_WORKERS = 8


@dataclass
class FileReport:
    """The checks of one listed file: manifest rules M4-M7 and the file's own rules."""

    name: str
    url: str
    ok: bool
    violations: list[Violation] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)

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
class DatasetReport:
    """The outcome of validating a dataset.

    Attributes:
        url: the dataset directory.
        ok: True when no rule is broken anywhere.
        violations: rules the manifest itself breaks (M1-M3); per-file findings are in
            :attr:`files`.
        files: one report per listed file, in manifest order.
        summary: files, rows, subpartitions, partitioner (its name), bytes, index_bytes, deep,
            and unlisted (names of shuffle files in the directory that no manifest lists:
            invisible to readers, not an error).
    """

    url: str
    ok: bool
    violations: list[Violation] = field(default_factory=list)
    files: list[FileReport] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)

    @property
    def all_violations(self) -> list[tuple[str | None, Violation]]:
        """Every broken rule as ``(file name or None for the manifest, violation)``."""
        found: list[tuple[str | None, Violation]] = [(None, v) for v in self.violations]
        for report in self.files:
            found.extend((report.name, v) for v in report.violations)
        return found

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serializable form of the report."""
        return {
            "kind": "dataset",
            "url": self.url,
            "ok": self.ok,
            "violations": [{"rule": v.rule, "message": v.message} for v in self.violations],
            "files": [f.to_dict() for f in self.files],
            "summary": dict(self.summary),
        }


def is_dataset(path_or_url: str | os.PathLike[str], storage_options: dict[str, Any] | None) -> bool:
    """True when ``path_or_url`` is a directory holding a manifest (one existence check)."""
    location = resolve(path_or_url, storage_options).child(MANIFEST_NAME)
    with storage_errors(location.url, "looking for"):
        return bool(location.fs.exists(location.path))


def validate_dataset(
    path_or_url: str | os.PathLike[str],
    *,
    deep: bool = False,
    storage_options: dict[str, Any] | None = None,
    progress: Progress | None = None,
    workers: int = DEFAULT_WORKERS,
) -> DatasetReport:
    """Check a dataset against rules M1-M7 and each listed file against V1-V19.

    Args:
        path_or_url: the dataset directory (local path or fsspec URL).
        deep: also read every chunk of every file (see ``validate_file``).
        storage_options: passed to fsspec for URLs.
        progress: called after each file with (files done, files in total, file name).
        workers: files checked at the same time on object stores (local: one at a time).

    Returns:
        A report; ``report.ok`` is True for a valid dataset.

    Raises:
        MissingObjectError: there is no manifest at ``path_or_url``.
        ShuffleIOError: another storage failure.
    """
    directory = resolve(path_or_url, storage_options)
    report = DatasetReport(url=directory.url, ok=False, summary={"deep": deep})
    location = directory.child(MANIFEST_NAME)
    with storage_errors(location.url, "reading"):
        try:
            raw = read_bytes(location, 0)
        except MissingObjectError as exc:
            raise MissingObjectError(
                exc.errno, f"{directory.url} is not a dataset: it has no {MANIFEST_NAME}"
            ) from exc
    try:
        manifest = decode_manifest(raw)
    except FormatError as exc:
        report.violations.append(Violation(exc.rule or "M1", exc.detail))
        return report
    report.violations.extend(_check_names(manifest))
    sizes = _listing(directory)
    report.summary.update(
        files=len(manifest.files),
        rows=manifest.total_rows,
        subpartitions=manifest.num_subpartitions,
        partitioner=str(manifest.partitioner.get("name")),
        bytes=sum(f.data_size for f in manifest.files),
        index_bytes=sum(f.index_size for f in manifest.files),
        unlisted=_unlisted(manifest, sizes),
    )

    def check(entry: ManifestFile) -> FileReport:
        return _check_file(directory, manifest, entry, sizes, deep, storage_options)

    total = len(manifest.files)
    reports: dict[int, FileReport] = {}
    if directory.is_local or total < 2:
        for i, entry in enumerate(manifest.files):
            reports[i] = check(entry)
            if progress is not None:
                progress(i + 1, total, entry.data)
    else:
        with ThreadPoolExecutor(max(1, min(workers, total))) as pool:
            futures = {pool.submit(check, entry): i for i, entry in enumerate(manifest.files)}
            for done, future in enumerate(as_completed(futures), start=1):
                i = futures[future]
                reports[i] = future.result()
                if progress is not None:
                    progress(done, total, manifest.files[i].data)
    report.files = [reports[i] for i in range(total)]
    report.ok = not report.violations and all(f.ok for f in report.files)
    return report


def _check_names(manifest: Manifest) -> list[Violation]:
    """Rule M3 beyond what decoding checks: each name once, indexes named after their data."""
    found: list[Violation] = []
    seen: set[str] = set()
    for f in manifest.files:
        for name in (f.data, f.index):
            if name in seen:
                found.append(Violation("M3", f"file {name!r} is listed more than once"))
            seen.add(name)
        if f.index != f.data + INDEX_SUFFIX:
            found.append(
                Violation(
                    "M3",
                    f"the index of {f.data!r} is listed as {f.index!r}; expected "
                    f"{f.data + INDEX_SUFFIX!r}, where readers look for it",
                )
            )
    return found


def _listing(directory: Location) -> dict[str, int] | None:
    """Names and sizes of the directory's objects (one listing), or None if it cannot list."""
    try:
        entries = directory.fs.ls(directory.path, detail=True)
    except (OSError, ValueError):
        return None
    return {
        posixpath.basename(str(e["name"]).rstrip("/")): int(e.get("size") or 0)
        for e in entries
        if e.get("type") != "directory"
    }


def _unlisted(manifest: Manifest, sizes: dict[str, int] | None) -> list[str]:
    if sizes is None:
        return []
    listed = {name for f in manifest.files for name in (f.data, f.index)}
    ours = (n for n in sizes if n.startswith("part-") and (n.endswith((".arrow", ".arrow.idx"))))
    return sorted(n for n in ours if n not in listed)[:100]


def _size(directory: Location, name: str, sizes: dict[str, int] | None) -> int | None:
    """The object's size, or None when it does not exist."""
    if sizes is not None:
        return sizes.get(name)
    location = directory.child(name)
    with storage_errors(location.url, "reading the size of"):
        try:
            return int(location.fs.size(location.path))
        except FileNotFoundError:
            return None


def _check_file(
    directory: Location,
    manifest: Manifest,
    entry: ManifestFile,
    sizes: dict[str, int] | None,
    deep: bool,
    storage_options: dict[str, Any] | None,
) -> FileReport:
    data = directory.child(entry.data)
    report = FileReport(name=entry.data, url=data.url, ok=False)
    found = report.violations
    data_size = _size(directory, entry.data, sizes)
    index_size = _size(directory, entry.data + INDEX_SUFFIX, sizes)
    for what, name, actual, listed in (
        ("data file", entry.data, data_size, entry.data_size),
        ("index", entry.data + INDEX_SUFFIX, index_size, entry.index_size),
    ):
        if actual is None:
            found.append(Violation("M4", f"the listed {what} {name} is missing"))
        elif actual != listed:
            found.append(
                Violation("M4", f"the {what} {name} is {actual} bytes, the manifest lists {listed}")
            )
    if data_size is None or index_size is None:
        return report
    raw_index = read_bytes(data.sibling(INDEX_SUFFIX), 0)
    try:
        stored = index_checksum(raw_index)
    except FormatError:
        stored = None
    if stored is not None and stored != entry.index_crc32c:
        found.append(
            Violation(
                "M5",
                f"the index of {entry.data} has checksum {stored:#010x}, the manifest lists "
                f"{entry.index_crc32c:#010x}",
            )
        )
    try:
        index = decode_index(memoryview(raw_index))
    except FormatError:
        index = None  # the file's own report names the broken rule
    if index is not None:
        found.extend(_compare(manifest, entry, index))
    from arrowshuffle.readers.validate import validate_file

    own = validate_file(data.url, deep=deep, storage_options=storage_options)
    found.extend(own.violations)
    report.summary = dict(own.summary)
    report.ok = not found
    return report


def _compare(manifest: Manifest, entry: ManifestFile, index: ShuffleIndex) -> list[Violation]:
    """Rules M6 and M7 for one decoded index."""
    found: list[Violation] = []
    name = entry.data
    if not index.schema.equals(manifest.schema, check_metadata=False):
        found.append(
            Violation("M6", f"{name} has schema {index.schema}, the manifest {manifest.schema}")
        )
    if index.num_subpartitions != manifest.num_subpartitions:
        found.append(
            Violation(
                "M6",
                f"{name} has {index.num_subpartitions} subpartitions, the manifest "
                f"{manifest.num_subpartitions}",
            )
        )
    if dict(index.meta.partitioner) != dict(manifest.partitioner):
        found.append(
            Violation(
                "M6",
                f"{name} has partitioner {index.meta.partitioner}, the manifest "
                f"{manifest.partitioner}",
            )
        )
    for what, listed, declared in (
        ("rows", entry.rows, index.header.total_rows),
        ("regions", entry.regions, index.num_regions),
        ("data bytes", entry.data_size, index.header.data_length),
    ):
        if listed != declared:
            found.append(
                Violation(
                    "M7", f"the manifest lists {listed} {what} for {name}, its index {declared}"
                )
            )
    return found
