"""Writers killed with SIGKILL at random points never leave wrong data visible.

A subprocess writes in a loop and is killed at a point drawn from a seeded generator: after 0-2
complete writes, a random fraction into the next one. What a
reader can see afterwards is checked against what was committed before: a single file is absent
or complete, and a dataset is exactly its old or exactly its new committed state (judged by the
manifest version in force), the old version's files untouched either way. Then
``vacuum(older_than=0)`` leaves the files of the version in force only, and the data reads the
same.
"""

from __future__ import annotations

import os
import random
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from manifest_edits import manifest_in_force

import arrowshuffle as ash
from arrowshuffle.format.errors import MissingObjectError
from arrowshuffle.format.manifest import decode_manifest
from arrowshuffle.format.naming import MANIFEST_NAME, VERSIONS_DIR

KILLS = 6
#: Seconds a kill may wait before the first write completes (a write takes about this long).
FIRST_WRITE_GUESS = 0.3
N = 8
#: How a local writer names a file before its rename (``_storage.AtomicOutput``).
TEMP = re.compile(r"^\..+\.[0-9a-f]{32}\.tmp$")

FILE_WRITER = r"""
import sys
import numpy as np, pyarrow as pa
import arrowshuffle as ash

out, rows = sys.argv[1], int(sys.argv[2])
table = pa.table({"row": np.arange(rows, dtype=np.int64), "value": np.arange(rows) * 0.5})
ids = (np.arange(rows) * 7) % 8
print("ready", flush=True)
i = 0
while True:
    path = f"{out}/f{i:05d}.arrow"
    if i % 2:
        with ash.ShuffleFileWriter(path, table.schema, 8, memory="128KiB") as writer:
            for batch in table.to_batches(max_chunksize=4000):
                writer.write(batch, subpartitions=ids[: batch.num_rows])
    else:
        ash.write(table, path, num_subpartitions=8, by="row", memory="128KiB")
    print("wrote", flush=True)
    i += 1
"""

DATASET_WRITER = r"""
import sys
import numpy as np, pyarrow as pa
import arrowshuffle as ash

path, mode, rows = sys.argv[1], sys.argv[2], int(sys.argv[3])
table = pa.table({"tag": ["new"] * rows, "row": np.arange(rows, dtype=np.int64)})
print("ready", flush=True)
while True:
    ash.write_dataset(table, path, num_subpartitions=8, by="row", mode=mode, memory="128KiB")
    print("wrote", flush=True)
"""


def kill_at_random_point(rng: random.Random, script: str, *args: str) -> int:
    """Start ``script``, let it finish 0-2 writes, SIGKILL it somewhere inside the next one.

    The script prints ``wrote`` after each complete write, so the kill points do not depend on
    how fast this machine is: the delay after the last completion is a random fraction of the
    time the previous write took. Returns how many writes completed before the kill.
    """
    proc = subprocess.Popen(
        [sys.executable, "-c", script, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    ready = proc.stdout.readline().strip() == "ready"
    completed = rng.choice((0, 1, 1, 2)) if ready else 0
    started = time.monotonic()
    duration = FIRST_WRITE_GUESS
    for _ in range(completed):
        if proc.stdout.readline().strip() != "wrote":
            break
        now = time.monotonic()
        duration, started = now - started, now
    time.sleep(rng.random() * duration)
    proc.kill()
    _, err = proc.communicate()
    assert ready, err
    assert proc.returncode == -9, f"the writer ended by itself ({proc.returncode}): {err}"
    return completed


def sorted_rows(table: pa.Table) -> pa.Table:
    return table.sort_by([(name, "ascending") for name in table.column_names])


# ---------------------------------------------------------------------- one file


def test_a_killed_file_writer_leaves_no_pair_or_a_complete_one(tmp_path: Path) -> None:
    rng = random.Random(20240611)
    rows = 200_000
    expected = pa.table({"row": np.arange(rows, dtype=np.int64), "value": np.arange(rows) * 0.5})
    complete = 0
    for attempt in range(KILLS):
        out = tmp_path / f"kill{attempt}"
        out.mkdir()
        kill_at_random_point(rng, FILE_WRITER, str(out), str(rows))
        names = set(os.listdir(out))
        finals = sorted(n for n in names if not n.startswith("."))
        assert all(TEMP.match(n) for n in names - set(finals)), names
        data_files = [n for n in finals if n.endswith(".arrow")]
        # Every index has its data file: the index is published second.
        assert all(n[: -len(".idx")] in data_files for n in finals if n.endswith(".idx"))
        for name in data_files:
            path = out / name
            if not (out / (name + ".idx")).exists():
                # Killed between the two renames that publish the data file, then its index
                # (spec 7.1): no pair is visible, only an incomplete write that readers report
                # as a missing object and never read as rows.
                assert name == data_files[-1], "only the last write can be incomplete"
                with pytest.raises(MissingObjectError):
                    ash.open_file(str(path))
                continue
            report = ash.validate_file(str(path), deep=True)
            assert report.ok, (name, report.violations)
            with ash.open_file(str(path)) as shuffle_file:
                assert sorted_rows(shuffle_file.read(range(N))).equals(expected)
            complete += 1
    assert complete > 0, "no write finished before its kill: the test checks nothing"


# ---------------------------------------------------------------------- datasets


def in_force(path: Path) -> str:
    """The name of the manifest version in force, relative to the dataset directory."""
    return str(manifest_in_force(path).relative_to(path))


def committed_bytes(path: Path) -> dict[str, bytes]:
    """The manifest version in force and every file it lists, with their bytes."""
    manifest = manifest_in_force(path).read_bytes()
    names = {n for f in decode_manifest(manifest).files for n in (f.data, f.index)}
    return {in_force(path): manifest} | {name: (path / name).read_bytes() for name in names}


@pytest.fixture(scope="module")
def old_dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A committed dataset of two files, copied afresh for every kill."""
    path = tmp_path_factory.mktemp("old") / "ds"
    for i, mode in enumerate(("overwrite", "append")):
        old = pa.table({"tag": ["old"] * 3000, "row": np.arange(3000, dtype=np.int64) + i})
        ash.write_dataset(old, path, num_subpartitions=N, by="row", mode=mode)
    return path


@pytest.mark.parametrize("mode", ["overwrite", "append"])
def test_a_killed_dataset_writer_leaves_the_old_or_the_new_dataset(
    tmp_path: Path, old_dataset: Path, mode: str
) -> None:
    rng = random.Random(f"dataset-{mode}")
    rows = 200_000
    new = pa.table({"tag": ["new"] * rows, "row": np.arange(rows, dtype=np.int64)})
    before = committed_bytes(old_dataset)
    old_version = in_force(old_dataset)
    assert old_version.startswith(VERSIONS_DIR + "/")
    old_files = decode_manifest(before[old_version]).files
    old_rows = sorted_rows(ash.open_dataset(str(old_dataset)).read())
    states = {"old": 0, "new": 0}
    for attempt in range(KILLS):
        path = tmp_path / f"kill{attempt}"
        shutil.copytree(old_dataset, path)
        kill_at_random_point(rng, DATASET_WRITER, str(path), mode, str(rows))

        report = ash.validate_dataset(str(path), deep=True)
        assert report.ok, report.to_dict()
        now = committed_bytes(path)
        version = in_force(path)
        manifest = decode_manifest(now[version])
        data = sorted_rows(ash.open_dataset(str(path)).read())
        # No commit removes what a version lists: the old version and its files are intact.
        assert {name: (path / name).read_bytes() for name in before} == before
        if version == old_version:
            states["old"] += 1
            assert now == before
            assert data.equals(old_rows)
        elif mode == "overwrite":
            states["new"] += 1
            assert len(manifest.files) == 1
            assert data.equals(sorted_rows(new))
        else:
            # Every commit of the loop appended one file; the old files stay byte-identical.
            states["new"] += 1
            appended = len(manifest.files) - len(old_files)
            assert manifest.files[: len(old_files)] == old_files and appended >= 1
            assert all(now[name] == before[name] for name in before if name != old_version)
            expected = pa.concat_tables([old_rows, *[new] * appended])
            assert data.equals(sorted_rows(expected))

        ash.vacuum(path, older_than=0)
        assert set(os.listdir(path)) == {n for n in now if n != version} | {
            VERSIONS_DIR,
            MANIFEST_NAME,
        }
        assert [f"{VERSIONS_DIR}/{n}" for n in os.listdir(path / VERSIONS_DIR)] == [version]
        assert committed_bytes(path) == now
        # The copy for readers before versions holds the version in force (vacuum refreshes it).
        assert (path / MANIFEST_NAME).read_bytes() == now[version]
        assert sorted_rows(ash.open_dataset(str(path)).read()).equals(data)
    assert states["new"] > 0, f"no commit landed before a kill: {states}"
