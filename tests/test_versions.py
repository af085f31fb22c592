"""Manifest versions: numbering, time travel, retention by vacuum, legacy datasets, stores.

Spec section 8.1: every commit creates the next version exclusively; a version stays readable
until vacuum expires it, a grace period after the next version was created.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

import fsspec
import numpy as np
import pyarrow as pa
import pytest
from fsspec.implementations.memory import MemoryFileSystem

import arrowshuffle as ash
from arrowshuffle.format.errors import (
    CorruptFileError,
    InvalidOptionError,
    MissingObjectError,
)
from arrowshuffle.format.manifest import decode_manifest
from arrowshuffle.format.naming import MANIFEST_NAME, VERSIONS_DIR, version_name
from arrowshuffle.readers.storage import resolve
from arrowshuffle.writers.commit import commit_version
from arrowshuffle.writers.exclusive import create_exclusive

N = 4


def rows(start: int, count: int) -> pa.Table:
    ids = np.arange(start, start + count, dtype=np.int64)
    return pa.table({"k": ids % 7, "id": ids})


def ids_of(table: pa.Table) -> list[int]:
    return sorted(table.column("id").to_pylist())


def version_file(path: Path, version: int) -> Path:
    return path / VERSIONS_DIR / version_name(version)


def age(path: Path, seconds: float) -> None:
    """Make ``path`` look modified ``seconds`` ago."""
    then = time.time() - seconds
    os.utime(path, (then, then))


def test_every_commit_creates_the_next_version_and_readers_keep_theirs(tmp_path: Path) -> None:
    path = tmp_path / "ds"
    first = ash.write_dataset(rows(0, 50), path, num_subpartitions=N, by="k", mode="overwrite")
    second = ash.write_dataset(rows(50, 50), path, num_subpartitions=N, by="k", mode="append")
    assert (first.version, second.version) == (1, 2)
    assert (first.operation, second.operation) == ("overwrite", "append")
    assert first.commit_id != second.commit_id
    old = ash.open_dataset(path, version=1)
    current = ash.open_dataset(path)
    assert (old.version, current.version) == (1, 2)
    third = ash.write_dataset(rows(100, 5), path, num_subpartitions=N, by="k", mode="overwrite")
    assert third.version == 3
    # The overwrite replaced the files of versions 1 and 2 but removed none of them.
    assert ids_of(old.read()) == list(range(50))
    assert ids_of(current.read()) == list(range(100))
    assert ids_of(ash.open_dataset(path).read()) == list(range(100, 105))
    assert ids_of(ash.open_dataset(path, version=2).read()) == list(range(100))
    # Each version file holds its own number (M10) and the copy holds the version in force.
    for version in (1, 2, 3):
        assert decode_manifest(version_file(path, version).read_bytes()).version == version
    assert (path / MANIFEST_NAME).read_bytes() == version_file(path, 3).read_bytes()


def test_a_version_not_retained_is_a_clear_missing_object(tmp_path: Path) -> None:
    path = tmp_path / "ds"
    for i in range(3):
        ash.write_dataset(rows(i * 10, 10), path, num_subpartitions=N, by="k", mode="append")
    ash.vacuum(path, older_than=0)
    with pytest.raises(
        MissingObjectError, match=r"no manifest version 1: only version 3 is retained"
    ):
        ash.open_dataset(path, version=1)
    with pytest.raises(InvalidOptionError, match="version must be an integer"):
        ash.open_dataset(path, version=-1)


def test_vacuum_expires_a_version_one_grace_period_after_its_successor(tmp_path: Path) -> None:
    path = tmp_path / "ds"
    for i in range(4):
        ash.write_dataset(rows(i * 10, 10), path, num_subpartitions=N, by="k", mode="overwrite")
    listed = {
        v: {f.data for f in ash.open_dataset(path, version=v).manifest.files} for v in (1, 2, 3, 4)
    }
    # Version 2 was replaced (version 3 created) two hours ago, version 3 five minutes ago.
    age(version_file(path, 2), 3 * 3600)
    age(version_file(path, 3), 2 * 3600)
    age(version_file(path, 4), 300)
    for name in os.listdir(path):
        if name.startswith("part-"):
            age(path / name, 3 * 3600)
    report = ash.vacuum(path, older_than="1h")
    assert report.retained_versions == (3, 4)
    expired = {f"{VERSIONS_DIR}/{version_name(v)}" for v in (1, 2)}
    assert expired <= set(report.removed)
    gone = (listed[1] | listed[2]) - listed[3] - listed[4]
    assert {n for n in report.removed if n.endswith(".arrow")} == gone
    assert ids_of(ash.open_dataset(path, version=3).read()) == list(range(20, 30))
    assert ids_of(ash.open_dataset(path).read()) == list(range(30, 40))
    assert sorted(os.listdir(path / VERSIONS_DIR)) == [version_name(3), version_name(4)]
    assert ash.validate_dataset(path, deep=True).ok


def test_a_successor_without_a_gap_keeps_the_retained_versions_consecutive(
    tmp_path: Path,
) -> None:
    path = tmp_path / "ds"
    for i in range(3):
        ash.write_dataset(rows(i, 1), path, num_subpartitions=N, by="k", mode="append")
    # Version 1 was replaced (version 2 created) recently, so it is retained; version 3 looks
    # old (a clock step), which would expire version 2 alone: the retained versions would have
    # a gap, so version 2 stays too.
    age(version_file(path, 1), 7200)
    age(version_file(path, 2), 10)
    age(version_file(path, 3), 7200)
    report = ash.vacuum(path, older_than="1h", dry_run=True)
    assert report.retained_versions == (1, 2, 3)
    assert report.removed == ()
    age(version_file(path, 2), 7200)
    assert ash.vacuum(path, older_than="1h", dry_run=True).retained_versions == (3,)


def test_vacuum_removes_stale_temporaries_of_versions_and_keeps_fresh_ones(
    tmp_path: Path,
) -> None:
    path = tmp_path / "ds"
    ash.write_dataset(rows(0, 10), path, num_subpartitions=N, by="k")
    stale = path / VERSIONS_DIR / f".{version_name(2)}.{'a' * 32}.tmp"
    fresh = path / VERSIONS_DIR / f".{version_name(2)}.{'b' * 32}.tmp"
    stale.write_bytes(b"{")
    fresh.write_bytes(b"{")
    age(stale, 7200)
    report = ash.vacuum(path)
    assert f"{VERSIONS_DIR}/{stale.name}" in report.removed
    assert f"{VERSIONS_DIR}/{fresh.name}" in report.recent
    assert not stale.exists() and fresh.exists()


def test_vacuum_refreshes_a_compatibility_copy_that_lags(tmp_path: Path) -> None:
    path = tmp_path / "ds"
    ash.write_dataset(rows(0, 10), path, num_subpartitions=N, by="k")
    ash.write_dataset(rows(10, 10), path, num_subpartitions=N, by="k", mode="append")
    # A committer paused between its version and its copy: the copy names version 1.
    shutil.copyfile(version_file(path, 1), path / MANIFEST_NAME)
    ash.vacuum(path)
    assert (path / MANIFEST_NAME).read_bytes() == version_file(path, 2).read_bytes()


def test_a_legacy_dataset_reads_as_version_0_and_its_first_commit_preserves_it(
    tmp_path: Path,
) -> None:
    path = tmp_path / "ds"
    ash.write_dataset(rows(0, 30), path, num_subpartitions=N, by="k")
    # The layout before versions: one manifest, no versions directory.
    legacy = json.loads(version_file(path, 1).read_text())
    for key in ("version", "commit_id", "operation"):
        legacy.pop(key)
    legacy["format_version_minor"] = 1
    shutil.rmtree(path / VERSIONS_DIR)
    (path / MANIFEST_NAME).write_text(json.dumps(legacy))
    before = ash.open_dataset(path)
    assert before.version == 0
    assert ids_of(before.read()) == list(range(30))
    after = ash.write_dataset(rows(30, 5), path, num_subpartitions=N, by="k", mode="append")
    assert after.version == 1
    assert sorted(os.listdir(path / VERSIONS_DIR)) == [version_name(0), version_name(1)]
    assert ids_of(ash.open_dataset(path, version=0).read()) == list(range(30))
    assert ids_of(ash.open_dataset(path).read()) == list(range(35))
    assert ash.validate_dataset(path).ok


def test_a_version_file_holding_another_number_is_refused_as_m10(tmp_path: Path) -> None:
    path = tmp_path / "ds"
    ash.write_dataset(rows(0, 10), path, num_subpartitions=N, by="k")
    ash.write_dataset(rows(10, 10), path, num_subpartitions=N, by="k", mode="append")
    # Version 1's bytes copied over version 2 by hand.
    shutil.copyfile(version_file(path, 1), version_file(path, 2))
    with pytest.raises(CorruptFileError, match=r"\[M10\].*file 2 holds version 1"):
        ash.open_dataset(path)


def test_a_commit_never_replaces_an_existing_version(tmp_path: Path) -> None:
    path = tmp_path / "ds"
    ash.write_dataset(rows(0, 10), path, num_subpartitions=N, by="k")
    location = resolve(str(path)).child(VERSIONS_DIR).child(version_name(1))
    before = Path(location.path).read_bytes()
    assert create_exclusive(location, b"other bytes") is False
    assert Path(location.path).read_bytes() == before
    # No temporary is left behind by the refused create.
    assert sorted(os.listdir(path / VERSIONS_DIR)) == [version_name(1)]


class _OtherMemory(MemoryFileSystem):
    """A file system with no create-if-absent this package knows."""

    protocol = "othermem"
    store: dict = {}
    pseudo_dirs = [""]

    @classmethod
    def _strip_protocol(cls, path: str) -> str:
        return MemoryFileSystem._strip_protocol(path.replace("othermem://", "memory://", 1))


def test_a_store_without_exclusive_create_is_refused_before_writing() -> None:
    fsspec.register_implementation("othermem", _OtherMemory, clobber=True)
    with pytest.raises(InvalidOptionError, match=r"othermem:// offers none"):
        ash.write_dataset(rows(0, 10), "othermem://ds", num_subpartitions=N, by="k")
    assert not _OtherMemory().find("/ds")  # nothing written
    # Reading such a store works: the refusal is for commits only.
    fs = fsspec.filesystem("memory")
    ash.write_dataset(rows(0, 10), "memory://src", num_subpartitions=N, by="k")
    for name in fs.find("/src"):
        _OtherMemory().pipe_file(name.replace("/src", "/copy", 1), fs.cat_file(name))
    assert ids_of(ash.open_dataset("othermem://copy").read()) == list(range(10))


def test_a_build_that_declines_commits_nothing(tmp_path: Path) -> None:
    path = tmp_path / "ds"
    first = ash.write_dataset(rows(0, 10), path, num_subpartitions=N, by="k")
    kept = commit_version(resolve(str(path)), lambda current: None, operation="append")
    assert kept is not None and kept.version == first.version
    assert sorted(os.listdir(path / VERSIONS_DIR)) == [version_name(1)]


def test_ignore_over_an_existing_dataset_writes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "ds"
    ash.write_dataset(rows(0, 10), path, num_subpartitions=N, by="k")
    before = sorted(os.listdir(path))
    kept = ash.write_dataset(rows(10, 10), path, num_subpartitions=N, by="k", mode="ignore")
    assert kept.version == 1
    assert sorted(os.listdir(path)) == before


def test_an_append_keeps_the_dataset_properties(tmp_path: Path) -> None:
    from arrowshuffle.writers.dataset_writer import commit_dataset, prepare_directory

    directory = prepare_directory(tmp_path / "ds", None)
    written = ash.write(
        rows(0, 10), directory.child("part-00000-a.arrow").url, num_subpartitions=N, by="k"
    )
    commit_dataset(
        directory,
        [written],
        schema=written.schema,
        num_subpartitions=N,
        partitioner=written.partitioner,
        properties={"owner": "team-a"},
    )
    more = ash.write(
        rows(10, 10), directory.child("part-00001-b.arrow").url, num_subpartitions=N, by="k"
    )
    manifest = commit_dataset(
        directory,
        [more],
        schema=more.schema,
        num_subpartitions=N,
        partitioner=more.partitioner,
        mode="append",
        properties={"run": "2"},
    )
    assert manifest.properties == {"owner": "team-a", "run": "2"}


def test_data_files_give_plain_engines_exactly_the_listed_files(tmp_path: Path) -> None:
    import pyarrow.dataset as pads

    pl = pytest.importorskip("polars")
    path = tmp_path / "ds"
    ash.write_dataset(rows(0, 40), path, num_subpartitions=N, by="k", mode="overwrite")
    ash.write_dataset(rows(40, 10), path, num_subpartitions=N, by="k", mode="overwrite")
    (path / "part-99999-leftover.arrow").write_bytes(b"not arrow")
    dataset = ash.open_dataset(path)
    assert [Path(p).parent for p in dataset.data_files] == [path]
    assert ids_of(pads.dataset(dataset.data_files, format="arrow").to_table()) == list(
        range(40, 50)
    )
    assert sorted(pl.scan_ipc(dataset.data_files).collect()["id"].to_list()) == list(range(40, 50))
    # The directory itself holds the replaced version's files and the sidecars too.
    assert len(list(path.glob("*.arrow"))) > len(dataset.data_files)
    old = ash.open_dataset(path, version=1)
    assert ids_of(pads.dataset(old.data_files, format="arrow").to_table()) == list(range(40))


@pytest.mark.parametrize(
    ("code", "expected"),
    [(28, "ShuffleIOError"), (1, "InvalidOptionError"), (95, "InvalidOptionError")],
)
def test_a_failed_link_is_a_storage_error_unless_links_are_unsupported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: int, expected: str
) -> None:
    # ENOSPC is a full disk (retry later); EPERM and EOPNOTSUPP mean no hard links at all.
    def refuse(source: str, target: str) -> None:
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(os, "link", refuse)
    location = resolve(str(tmp_path)).child(VERSIONS_DIR).child(version_name(1))
    with pytest.raises(getattr(ash, expected)):
        create_exclusive(location, b"{}")
    assert os.listdir(tmp_path / VERSIONS_DIR) == []  # the temporary is gone either way


def test_an_uncontended_append_on_s3_commits_with_a_listing_and_two_puts_after_its_files(
    s3_endpoint: Any, s3_bucket: str
) -> None:
    options = s3_endpoint.storage_options()
    url = f"{s3_bucket}/ds"
    ash.write_dataset(rows(0, 20), url, num_subpartitions=N, by="k", storage_options=options)
    s3_endpoint.log.clear()
    manifest = ash.write_dataset(
        rows(20, 20), url, num_subpartitions=N, by="k", mode="append", storage_options=options
    )
    log = s3_endpoint.log.requests()
    # The job reads the version in force once, before it writes (a listing and a GET) ...
    assert (log[0]["method"], log[0]["query"].startswith("list-type=2")) == ("GET", True)
    assert log[1]["path"].endswith(f"{VERSIONS_DIR}/{version_name(1)}")
    # ... and after its pair, the commit lists the versions (its base may have expired and
    # been vacuumed meanwhile) and, finding it still in force, builds on that read without a
    # second GET: the conditional PUT of the next version and the compatibility copy.
    last_data_put = max(
        i for i, r in enumerate(log) if r["method"] == "PUT" and ".arrow" in r["path"]
    )
    after = log[last_data_put + 1 :]
    assert (after[0]["method"], after[0]["query"].startswith("list-type=2")) == ("GET", True)
    commit_requests = [(r["method"], r["path"].rsplit("/", 1)[-1]) for r in after[1:]]
    assert commit_requests == [("PUT", version_name(2)), ("PUT", MANIFEST_NAME)]
    assert after[1]["if_none_match"] == "*"
    assert manifest.version == 2
    assert ids_of(ash.open_dataset(url, options).read()) == list(range(40))
