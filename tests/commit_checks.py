"""What concurrent commits must leave behind, checked from the outside.

Shared by the commit race, stress and model tests. Every row carries the operation that wrote
it (``tag``) and its number within that operation (``row``), so "the rows of these operations,
each exactly once" is a comparison of sorted lists. Listings and version files are read with
``os``/fsspec and ``json`` directly, not through the package's own readers, so that a check
does not trust the code it checks.
"""

from __future__ import annotations

import json
import os
import posixpath
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

import arrowshuffle as ash

N = 4
VERSIONS = "_arrowshuffle_versions"
MANIFEST = "_arrowshuffle_manifest.json"
#: A grace period no test outlives: vacuum with it removes nothing a test made.
LONG = 3600

Row = tuple[str, int]


def table_of(tag: str, rows: int) -> pa.Table:
    """``rows`` rows of operation ``tag``: a hash key, the tag and the row's number."""
    numbers = np.arange(rows, dtype=np.int64)
    return pa.table(
        {"k": numbers * 7 + len(tag), "tag": pa.array([tag] * rows, pa.string()), "row": numbers}
    )


def rows_of(tag: str, rows: int) -> list[Row]:
    return [(tag, i) for i in range(rows)]


def rows_read(table: pa.Table) -> list[Row]:
    """The (tag, row) pairs of a table read back, sorted (duplicates kept)."""
    return sorted(zip(table["tag"].to_pylist(), table["row"].to_pylist(), strict=True))


@dataclass
class Target:
    """A dataset directory, local or on the S3 endpoint, and plain ways to look into it."""

    url: str
    options: dict[str, Any] | None = None

    @property
    def is_local(self) -> bool:
        return "://" not in self.url

    def _fs(self) -> Any:
        import fsspec

        fs = fsspec.filesystem("s3", **(self.options or {}))
        fs.invalidate_cache()
        return fs

    def names(self, sub: str = "") -> set[str]:
        """Names of the files directly inside the directory (or its subdirectory ``sub``)."""
        path = posixpath.join(self.url, sub) if sub else self.url
        if self.is_local:
            if not os.path.isdir(path):
                return set()
            return {n for n in os.listdir(path) if os.path.isfile(os.path.join(path, n))}
        fs = self._fs()
        try:
            entries = fs.ls(path.removeprefix("s3://"), detail=True)
        except FileNotFoundError:
            return set()
        return {posixpath.basename(e["name"].rstrip("/")) for e in entries if e["type"] == "file"}

    def part_names(self) -> set[str]:
        return {n for n in self.names() if n.startswith("part-")}

    def versions(self) -> list[int]:
        """The manifest versions present, oldest first."""
        found = []
        for name in self.names(VERSIONS):
            stem, dot, ext = name.partition(".")
            if dot and ext == "json" and len(stem) == 20 and stem.isdigit():
                found.append(int(stem))
        return sorted(found)

    def version_json(self, version: int) -> dict[str, Any]:
        path = posixpath.join(self.url, VERSIONS, f"{version:020d}.json")
        if self.is_local:
            with open(path, "rb") as file:
                return json.loads(file.read())
        return json.loads(self._fs().cat_file(path.removeprefix("s3://")))

    def copy_version(self) -> int:
        """The version ``_arrowshuffle_manifest.json`` (the copy for older readers) holds."""
        path = posixpath.join(self.url, MANIFEST)
        if self.is_local:
            with open(path, "rb") as file:
                return int(json.loads(file.read())["version"])
        return int(json.loads(self._fs().cat_file(path.removeprefix("s3://")))["version"])

    def listed(self, version: int) -> set[str]:
        """The data and index names version ``version`` lists."""
        files = self.version_json(version)["files"]
        return {f["data"] for f in files} | {f["index"] for f in files}

    def remove(self, name: str) -> None:
        """Remove ``name`` (relative to the directory) behind the package's back."""
        path = posixpath.join(self.url, name)
        if self.is_local:
            os.remove(path)
        else:
            self._fs().rm_file(path.removeprefix("s3://"))

    def temporaries(self) -> set[str]:
        return {n for n in self.names() | self.names(VERSIONS) if n.endswith(".tmp")}

    def read(self, version: int | None = None) -> list[Row]:
        return rows_read(ash.open_dataset(self.url, self.options, version=version).read())

    def write(self, tag: str, rows: int, mode: str) -> Any:
        return ash.write_dataset(
            table_of(tag, rows),
            self.url,
            num_subpartitions=N,
            by="k",
            mode=mode,
            storage_options=self.options,
        )


def check_versions_and_files(
    target: Target, model: dict[int, list[Row]], *, writers_done: bool = True, read: bool = True
) -> list[int]:
    """Every retained version lists files that all exist and (``read``) reads as the model says.

    With ``writers_done``, the directory holds no data file that no retained version lists
    and no temporary: losers and failed jobs cleaned up after themselves. Returns the
    versions present.
    """
    versions = target.versions()
    assert versions, "no manifest version"
    assert versions == list(range(versions[0], versions[-1] + 1)), versions
    present = target.part_names()
    listed: set[str] = set()
    for version in versions:
        names = target.listed(version)
        missing = names - present
        assert not missing, f"version {version} lists removed files {sorted(missing)}"
        listed |= names
        assert version in model, f"version {version} was not made by an acknowledged commit"
        if read:
            got = target.read(version)
            assert got == model[version], diff(f"version {version}", got, model[version])
    if writers_done:
        assert present == listed, f"files no version lists: {sorted(present - listed)}"
        assert not target.temporaries(), target.temporaries()
    return versions


def check_in_force(target: Target, expected: list[Row]) -> None:
    got = target.read()
    assert got == expected, diff("version in force", got, expected)
    report = ash.validate_dataset(target.url, deep=True, storage_options=target.options)
    assert report.ok, report


def vacuum_to_current(target: Target) -> int:
    """Vacuum with no grace period; the directory then holds exactly what the last version lists."""
    report = ash.vacuum(target.url, older_than=0, storage_options=target.options)
    assert report.ok, report
    versions = target.versions()
    assert len(versions) == 1 and report.retained_versions == (versions[0],), (report, versions)
    assert target.part_names() == target.listed(versions[0])
    assert not target.temporaries()
    return versions[0]


def diff(what: str, got: Iterable[Row], expected: Iterable[Row]) -> str:
    g, e = Counter(got), Counter(expected)
    extra = sorted((g - e).items())[:8]
    lacking = sorted((e - g).items())[:8]
    return f"{what}: unexpected rows {extra}, missing rows {lacking}"
