"""``vacuum``: what failed writers leave goes, the dataset stays byte for byte.

Leftovers are made by really running the writers: a subprocess writes a pair it never commits,
is in the middle of a data file, an index, a manifest version and the manifest's compatibility
copy, and is killed with SIGKILL. The datasets have two versions (an overwrite, then an append):
vacuum without a grace period also expires the first, which the second replaced.
"""

from __future__ import annotations

import datetime
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from manifest_edits import replace_manifest

import arrowshuffle as ash
from arrowshuffle.format.errors import (
    FormatError,
    InvalidOptionError,
    MissingObjectError,
)
from arrowshuffle.format.manifest import decode_manifest
from arrowshuffle.format.naming import MANIFEST_NAME, VERSIONS_DIR, new_file_name, version_name
from arrowshuffle.format.notation import parse_duration
from arrowshuffle.readers.storage import resolve
from arrowshuffle.writers.dataset_writer import commit_dataset
from arrowshuffle.writers.file_writer import ShuffleFileWriter
from arrowshuffle.writers.vacuum import is_leftover

N = 4

# Run by a subprocess that is killed once it prints "ready".
KILLED_WRITER = r"""
import os, sys, time
import numpy as np, pyarrow as pa
from arrowshuffle import write
from arrowshuffle.format.naming import INDEX_SUFFIX
from arrowshuffle.writers.output import AtomicOutput
from arrowshuffle.readers.storage import resolve
from arrowshuffle.format.naming import MANIFEST_NAME, VERSIONS_DIR, version_name
from arrowshuffle.format.naming import new_file_name
from arrowshuffle.writers.file_writer import ShuffleFileWriter

directory = resolve(sys.argv[1])
table = pa.table({"tag": ["leftover"] * 1000, "row": np.arange(1000, dtype=np.int64)})
# A task that wrote its pair, in a job that died before its commit.
write(table, directory.child(new_file_name(3)).url, num_subpartitions=4, by="row")
# A task in the middle of its data file: regions are on disk under a temporary name.
writer = ShuffleFileWriter(directory.child(new_file_name(4)).url, table.schema, 4, memory="64KiB")
for _ in range(20):
    writer.write(table, subpartitions=np.arange(1000) % 4)
writer._data.file.flush()
# A task in the middle of its close: the index is open under its temporary name.
index = AtomicOutput(directory.child(new_file_name(5)).sibling(INDEX_SUFFIX))
index.file.write(b"partial index")
index.file.flush()
# A committer in the middle of its manifest version, before the link that creates it.
versions = directory.child(VERSIONS_DIR)
os.makedirs(versions.path, exist_ok=True)
version = AtomicOutput(versions.child(version_name(3)))
version.file.write(b'{"files": [')
version.file.flush()
# A committer in the middle of the compatibility copy.
manifest = AtomicOutput(directory.child(MANIFEST_NAME))
manifest.file.write(b'{"files": [')
manifest.file.flush()
print("ready", flush=True)
time.sleep(600)
"""


def run_and_kill(script: str, *args: str) -> None:
    """Run ``script`` until it prints ``ready``, then SIGKILL it."""
    proc = subprocess.Popen(
        [sys.executable, "-c", script, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    proc.kill()
    _, err = proc.communicate()
    assert line.strip() == "ready", err


def table(tag: str, start: int, rows: int) -> pa.Table:
    return pa.table({"tag": [tag] * rows, "row": np.arange(start, start + rows, dtype=np.int64)})


def make_dataset(url: str, options: dict[str, Any] | None = None) -> None:
    """A committed dataset of two files (an overwrite, then an append)."""
    for i, mode in enumerate(("overwrite", "append")):
        ash.write_dataset(
            table("old", i * 500, 500),
            url,
            num_subpartitions=N,
            by="row",
            mode=mode,
            storage_options=options,
        )


def rows(url: str, options: dict[str, Any] | None = None) -> pa.Table:
    return (
        ash.open_dataset(url, options).read().sort_by([("tag", "ascending"), ("row", "ascending")])
    )


#: The first version of :func:`make_dataset`'s datasets, replaced by the append: vacuum without
#: a grace period expires it (every file it lists is listed by the second).
REPLACED = f"{VERSIONS_DIR}/{version_name(1)}"


def committed(url: str, options: dict[str, Any] | None = None) -> dict[str, bytes]:
    """The manifest version in force, its compatibility copy and every file it lists, by name
    (versions as ``_arrowshuffle_versions/<n>.json``), with their bytes."""
    directory = resolve(url, options)
    fs = directory.fs
    in_force = sorted(n for n in listing(url, options) if n.startswith(VERSIONS_DIR + "/"))[-1]
    manifest_bytes = fs.cat_file(directory.child(in_force).path)
    names = {n for f in decode_manifest(manifest_bytes).files for n in (f.data, f.index)}
    return {
        in_force: manifest_bytes,
        MANIFEST_NAME: fs.cat_file(directory.child(MANIFEST_NAME).path),
    } | {name: fs.cat_file(directory.child(name).path) for name in names}


def listing(url: str, options: dict[str, Any] | None = None) -> set[str]:
    """Names in the dataset directory, and in its versions directory as ``<dir>/<name>``."""
    directory = resolve(url, options)

    def names(location: Any) -> set[str]:
        directory.fs.invalidate_cache(location.path)
        try:
            found = directory.fs.ls(location.path, detail=False)
        except FileNotFoundError:
            return set()
        return {p.rstrip("/").rsplit("/", 1)[-1] for p in found}

    versions = {f"{VERSIONS_DIR}/{n}" for n in names(directory.child(VERSIONS_DIR))}
    return (names(directory) - {VERSIONS_DIR}) | versions


def set_back(path: Path, names: set[str], seconds: float) -> None:
    then = time.time() - seconds
    for name in names:
        os.utime(path / name, (then, then))


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "arrowshuffle.cli", *args],
        capture_output=True,
        text=True,
        check=False,
    )


def no_traceback(result: subprocess.CompletedProcess[str]) -> None:
    assert "Traceback" not in result.stderr + result.stdout


@pytest.fixture
def killed(tmp_path: Path) -> tuple[Path, dict[str, bytes], pa.Table, set[str]]:
    """A dataset, plus what a killed writer left in it: (dir, committed bytes, rows, leftovers)."""
    path = tmp_path / "ds"
    make_dataset(str(path))
    before, data = committed(str(path)), rows(str(path))
    assert listing(str(path)) == set(before) | {REPLACED}
    run_and_kill(KILLED_WRITER, str(path))
    leftovers = listing(str(path)) - set(before) - {REPLACED}
    return path, before, data, leftovers


# ---------------------------------------------------------------------- local


def test_the_killed_writer_left_every_kind_of_leftover(killed):
    _, _, _, leftovers = killed
    temps = {n.rsplit(".", 2)[0] for n in leftovers if n.rsplit("/", 1)[-1].startswith(".")}

    def kind(temp: str) -> str:
        if temp == f".{MANIFEST_NAME}":
            return "manifest"
        if temp.startswith(f"{VERSIONS_DIR}/."):
            return "version"
        return "index" if temp.endswith(".idx") else "data"

    assert sorted(kind(t) for t in temps) == ["data", "index", "manifest", "version"]
    pair = sorted(n for n in leftovers if n.startswith("part-"))
    assert len(pair) == 2 and pair[1] == pair[0] + ".idx"
    # is_leftover judges names in the directory; the versions directory's temporaries are
    # recognized by their target, a version (vacuum removes them: see the next test).
    assert all(is_leftover(n) for n in leftovers if not n.startswith(VERSIONS_DIR + "/"))


def test_older_than_zero_removes_leftovers_and_keeps_the_dataset(killed):
    path, before, data, leftovers = killed
    report = ash.vacuum(path, older_than=0)
    assert report.ok and not report.dry_run
    assert set(report.removed) == leftovers | {REPLACED}
    assert len(report.removed) == len(leftovers) + 1
    assert report.retained_versions == (2,)
    assert listing(str(path)) == set(before)
    assert committed(str(path)) == before
    assert rows(str(path)).equals(data)
    assert ash.validate_dataset(str(path), deep=True).ok
    # Nothing is left to remove.
    assert ash.vacuum(path, older_than=0).removed == ()


def test_dry_run_reports_the_same_names_and_removes_nothing(killed):
    path, before, _, leftovers = killed
    dry = ash.vacuum(str(path), older_than="0", dry_run=True)
    assert dry.dry_run and set(dry.removed) == leftovers | {REPLACED}
    assert listing(str(path)) == set(before) | leftovers | {REPLACED}
    real = ash.vacuum(str(path), older_than="0")
    assert real.removed == dry.removed


def test_the_grace_period_keeps_fresh_leftovers(killed):
    path, before, _, leftovers = killed
    fresh = ash.vacuum(path)
    assert fresh.removed == () and set(fresh.recent) == leftovers
    assert fresh.older_than == 3600 and fresh.retained_versions == (1, 2)
    assert listing(str(path)) == set(before) | leftovers | {REPLACED}
    set_back(path, leftovers, 2 * 3600)
    assert ash.vacuum(path, older_than=datetime.timedelta(hours=3)).removed == ()
    assert ash.vacuum(path, older_than="2.5h", dry_run=True).removed == ()
    assert set(ash.vacuum(path, older_than=7000, dry_run=True).removed) == leftovers
    # Version 1 was replaced (version 2 created) just now: it is retained.
    last = ash.vacuum(path)
    assert set(last.removed) == leftovers and last.retained_versions == (1, 2)
    assert committed(str(path)) == before
    assert listing(str(path)) == set(before) | {REPLACED}
    # Once version 2 is older than the grace period, version 1 expires.
    set_back(path, {f"{VERSIONS_DIR}/{version_name(2)}"}, 2 * 3600)
    assert ash.vacuum(path).removed == (REPLACED,)
    assert committed(str(path)) == before


def test_listed_files_are_never_removed_even_when_they_look_like_temporaries(tmp_path):
    path = tmp_path / "ds"
    directory = resolve(str(path))
    path.mkdir()
    odd = directory.child(f".{new_file_name(0)}.{'a' * 32}.tmp")
    plain = directory.child(new_file_name(1))
    written = []
    for location in (odd, plain):
        with ShuffleFileWriter(location.url, table("x", 0, 1).schema, N) as writer:
            writer.write(table("x", 0, 10), subpartitions=np.arange(10) % N)
        assert writer.written is not None
        written.append(writer.written)
    commit_dataset(
        directory,
        written,
        schema=table("x", 0, 1).schema,
        num_subpartitions=N,
        partitioner={"name": "explicit"},
    )
    before = committed(str(path))
    assert is_leftover(odd.name) and set(before) == listing(str(path))
    set_back(path, set(before), 10 * 86400)
    report = ash.vacuum(path, older_than=0)
    assert report.removed == () and report.recent == ()
    assert committed(str(path)) == before
    assert ash.open_dataset(str(path)).read().num_rows == 20


def test_names_writers_do_not_use_are_kept(tmp_path):
    path = tmp_path / "ds"
    make_dataset(str(path))
    before = committed(str(path))
    others = {
        "mine.arrow",
        "mine.arrow.idx",
        "notes.idx",
        f".mine.arrow.{'b' * 32}.tmp",
        ".part-00000-x.arrow.tmp",  # not the temporary name writers use: no 32 hex digits
        f".part-00000-x.arrow.{'C' * 32}.tmp",  # upper-case hex: not from uuid4().hex
        "part-00000-x.parquet",
        "_SUCCESS",
    }
    for name in others:
        (path / name).write_bytes(b"someone else's")
    (path / "sub").mkdir()
    (path / "sub" / "part-00000-x.arrow").write_bytes(b"in a subdirectory")
    outside = tmp_path / "part-00000-outside.arrow"
    outside.write_bytes(b"next to the dataset")
    report = ash.vacuum(path, older_than=0)
    assert report.removed == (REPLACED,)  # the version the append replaced, nothing else
    assert listing(str(path)) == set(before) | others | {"sub"}
    assert (path / "sub" / "part-00000-x.arrow").exists() and outside.exists()


def test_a_directory_without_a_manifest_is_refused(tmp_path):
    path = tmp_path / "ds"
    path.mkdir()
    run_and_kill(KILLED_WRITER, str(path))  # a failed first write: leftovers, no manifest
    left = listing(str(path))
    assert left and MANIFEST_NAME not in left
    with pytest.raises(
        MissingObjectError, match=f"expected a dataset directory holding {MANIFEST_NAME}"
    ):
        ash.vacuum(path, older_than=0)
    assert listing(str(path)) == left
    with pytest.raises(MissingObjectError):
        ash.vacuum(tmp_path / "nothing here")


def test_a_manifest_that_cannot_be_decoded_is_refused(killed):
    path, _, _, _ = killed
    replace_manifest(path, b'{"kind": "arrowshuffle-dataset"')
    left = listing(str(path))
    with pytest.raises(FormatError, match=r"\[M1\] not vacuuming .* cannot be decoded") as info:
        ash.vacuum(path, older_than=0)
    assert info.value.rule == "M1"
    assert listing(str(path)) == left


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("0", 0),
        ("30s", 30),
        ("15m", 900),
        ("1h", 3600),
        ("2d", 172800),
        ("1.5h", 5400),
        (" 2 H", 7200),
    ],
)
def test_parse_duration(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("bad", ["", "1y", "-1h", "h", "1hh", "nan", True, -5, float("inf"), [1]])
def test_parse_duration_refuses(bad):
    with pytest.raises(InvalidOptionError, match="older_than"):
        parse_duration(bad, name="older_than")
    with pytest.raises(InvalidOptionError):
        ash.vacuum(".", older_than=bad)


def test_parse_duration_takes_numbers_and_timedeltas():
    assert parse_duration(90) == 90
    assert parse_duration(0.5) == 0.5
    assert parse_duration(datetime.timedelta(minutes=2)) == 120


# ---------------------------------------------------------------------- command line


def test_cli_removes_and_prints_one_line_per_object(killed):
    path, before, _, leftovers = killed
    dry = run_cli("vacuum", str(path), "--older-than", "0", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    lines = dry.stdout.splitlines()
    expiring = [line for line in lines[:-1] if line.startswith("would expire version ")]
    assert len(expiring) == 1  # the version the append replaced
    assert expiring[0].endswith(f"({path}/{REPLACED})")
    files = [line for line in lines[:-1] if line not in expiring]
    assert sorted(files) == sorted(f"would remove {path}/{n}" for n in leftovers)
    assert lines[-1] == (
        f"dry run of {path}: would remove {len(leftovers)} objects, would expire version 1; "
        "retained version 2"
    )
    kept = run_cli("vacuum", str(path))
    assert kept.returncode == 0, kept.stderr
    assert kept.stdout.splitlines()[0].startswith(
        f"vacuumed {path}: removed 0 objects, kept {len(leftovers)} modified within 1h"
    )
    done = run_cli("vacuum", str(path), "--older-than", "0")
    assert done.returncode == 0, done.stderr
    done_lines = [line for line in done.stdout.splitlines()[:-1] if "expired version" not in line]
    assert sorted(done_lines) == sorted(f"removed {path}/{n}" for n in leftovers)
    assert done.stdout.splitlines()[-1].startswith(
        f"vacuumed {path}: removed {len(leftovers)} objects, expired version 1"
    )
    assert done.stderr == ""
    assert committed(str(path)) == before


def test_cli_json(killed):
    path, before, _, leftovers = killed
    result = run_cli("vacuum", str(path), "--older-than", "0s", "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["ok"] is True and report["error"] is None and report["dry_run"] is False
    assert report["url"] == str(path) and report["older_than_seconds"] == 0
    assert set(report["removed"]) == leftovers | {REPLACED}
    assert report["recent"] == [] == report["failed"]
    assert listing(str(path)) == set(before)


def test_cli_exit_codes_without_traceback(tmp_path, killed):
    path, _, _, _ = killed
    empty = tmp_path / "empty"
    empty.mkdir()
    for args, status, needle in [
        ((str(empty),), 2, MANIFEST_NAME),
        ((str(tmp_path / "missing"),), 2, MANIFEST_NAME),
        ((str(path), "--older-than", "1y"), 2, "--older-than must be a duration"),
        ((str(path), "--bogus"), 2, "unrecognized arguments"),
    ]:
        result = run_cli("vacuum", *args)
        assert result.returncode == status, (args, result.stderr)
        assert needle in result.stderr
        no_traceback(result)
    refused = run_cli("vacuum", str(empty), "--json")
    assert refused.returncode == 2
    assert json.loads(refused.stdout)["ok"] is False
    assert MANIFEST_NAME in json.loads(refused.stdout)["error"]
    assert len(refused.stderr.strip().splitlines()) == 1
    replace_manifest(path, b"{not json")
    left = listing(str(path))
    corrupt = run_cli("vacuum", str(path), "--older-than", "0")
    assert corrupt.returncode == 1
    assert corrupt.stderr.startswith(f"error: {path} is invalid: [M1] not vacuuming")
    assert len(corrupt.stderr.strip().splitlines()) == 1
    no_traceback(corrupt)
    assert listing(str(path)) == left


# ---------------------------------------------------------------------- object storage


def s3_flags(options: dict[str, Any]) -> list[str]:
    return [
        "--storage-option",
        f"endpoint_url={options['endpoint_url']}",
        "--storage-option",
        "key=testing",
        "--storage-option",
        "secret=testing",
        "--storage-option",
        'client_kwargs={"region_name": "eu-west-1"}',
    ]


@pytest.mark.s3
def test_vacuum_on_object_storage(s3_endpoint, s3_bucket):
    options = s3_endpoint.storage_options()
    url = f"{s3_bucket}/ds"
    make_dataset(url, options)
    before, data = committed(url, options), rows(url, options)
    # Pairs of tasks whose job died before its commit.
    unlisted = set()
    for task in (3, 4):
        name = new_file_name(task)
        ash.write(
            table("leftover", 0, 50),
            f"{url}/{name}",
            num_subpartitions=N,
            by="row",
            storage_options=options,
        )
        unlisted |= {name, name + ".idx"}
    # A writer that failed mid-write leaves nothing on object storage.
    with (
        pytest.raises(RuntimeError),
        ShuffleFileWriter(
            f"{url}/{new_file_name(5)}", table("x", 0, 1).schema, N, storage_options=options
        ) as writer,
    ):
        writer.write(table("x", 0, 100), subpartitions=np.arange(100) % N)
        writer.flush_region()
        raise RuntimeError("the task fails")
    assert listing(url, options) == set(before) | unlisted | {REPLACED}

    fresh = ash.vacuum(url, storage_options=options)
    assert fresh.removed == () and set(fresh.recent) == unlisted
    assert fresh.retained_versions == (1, 2)
    dry = ash.vacuum(url, older_than=0, dry_run=True, storage_options=options)
    assert set(dry.removed) == unlisted | {REPLACED}
    assert listing(url, options) == set(before) | unlisted | {REPLACED}
    result = run_cli("vacuum", url, "--older-than", "0", "--json", *s3_flags(options))
    assert result.returncode == 0, result.stderr
    assert sorted(json.loads(result.stdout)["removed"]) == sorted(dry.removed)
    assert listing(url, options) == set(before)
    assert committed(url, options) == before
    assert rows(url, options).equals(data)

    empty = f"{s3_bucket}/empty"
    refused = run_cli("vacuum", empty, "--older-than", "0", *s3_flags(options))
    assert refused.returncode == 2 and MANIFEST_NAME in refused.stderr
    no_traceback(refused)
