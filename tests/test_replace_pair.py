"""Writing a shuffle file where a pair already exists.

A pair is two objects, published by two renames (data, then index). Writing over an existing
pair is refused by default; with ``overwrite=True`` it replaces the pair, not atomically: a
process killed between the two renames leaves the new data file beside the old index, which a
reader refuses (V14, or V13 when the sizes differ). It never returns rows from either file.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pytest

import arrowshuffle as ash
from arrowshuffle.cli import main
from arrowshuffle.format.errors import CorruptFileError, InvalidOptionError

#: Runs in a subprocess: replaces the pair at argv[1] with argv[3] rows, stalling right after
#: the first rename (the data file's) until it is killed; argv[2] is created when it stalls.
STALL_AFTER_DATA_RENAME = """
import os, sys, time
import pyarrow as pa
import arrowshuffle as ash

path, marker, rows = sys.argv[1], sys.argv[2], int(sys.argv[3])
rename = os.replace

def stall_after_data(src, dst, *args, **kwargs):
    rename(src, dst, *args, **kwargs)
    if str(dst).endswith(".arrow"):
        open(marker, "w").close()
        time.sleep(120)

os.replace = stall_after_data
table = pa.table({"key": list(range(rows)), "value": [float(k) for k in range(rows)]})
ash.write(table, path, num_subpartitions=4, by="key", overwrite=True)
"""


def table(rows: int) -> pa.Table:
    return pa.table({"key": list(range(rows)), "value": [float(k) for k in range(rows)]})


def listing(directory: Path) -> list[str]:
    return sorted(os.listdir(directory))


def test_writing_over_an_existing_pair_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "x.arrow"
    ash.write(table(100), path, num_subpartitions=4, by="key")
    before = {name: (tmp_path / name).read_bytes() for name in listing(tmp_path)}
    with pytest.raises(InvalidOptionError, match=r"x\.arrow already exists") as raised:
        ash.write(table(50), path, num_subpartitions=4, by="key")
    assert str(path) in str(raised.value)
    assert "overwrite=True" in str(raised.value)
    with pytest.raises(InvalidOptionError, match="already exists"):
        ash.ShuffleFileWriter(path, table(1).schema, 4)
    # The pair is untouched and nothing else was left.
    assert {name: (tmp_path / name).read_bytes() for name in listing(tmp_path)} == before
    assert ash.open_file(path).read().num_rows == 100


def test_an_index_alone_is_refused_too(tmp_path: Path) -> None:
    path = tmp_path / "x.arrow"
    ash.write(table(10), path, num_subpartitions=4, by="key")
    (tmp_path / "x.arrow").unlink()
    with pytest.raises(InvalidOptionError, match=r"x\.arrow\.idx already exists"):
        ash.write(table(10), path, num_subpartitions=4, by="key")
    assert listing(tmp_path) == ["x.arrow.idx"]


def test_overwrite_replaces_the_pair(tmp_path: Path) -> None:
    path = tmp_path / "x.arrow"
    ash.write(table(100), path, num_subpartitions=4, by="key")
    ash.write(table(30), path, num_subpartitions=4, by="key", overwrite=True)
    assert ash.open_file(path).read().num_rows == 30
    assert listing(tmp_path) == ["x.arrow", "x.arrow.idx"]
    with pytest.raises(InvalidOptionError, match="overwrite must be True or False"):
        ash.write(table(1), path, num_subpartitions=4, overwrite="yes")  # type: ignore[arg-type]


def test_a_pair_appearing_while_writing_is_refused_at_close(tmp_path: Path) -> None:
    path = tmp_path / "x.arrow"
    writer = ash.ShuffleFileWriter(path, table(1).schema, 4)
    writer.write(table(10).to_batches()[0], subpartitions=[k % 4 for k in range(10)])
    ash.write(table(20), path, num_subpartitions=4, by="key")  # another writer wins
    with pytest.raises(InvalidOptionError, match="already exists"):
        writer.close()
    assert ash.open_file(path).read().num_rows == 20
    assert listing(tmp_path) == ["x.arrow", "x.arrow.idx"]


@pytest.mark.parametrize(("rows", "rule"), [(100, "V14"), (250, "V13")])
def test_a_replacement_killed_between_its_renames_is_refused(
    tmp_path: Path, rows: int, rule: str
) -> None:
    """The new data file stands beside the old index: readers refuse it, never mixing them.

    The same rows give a data file of the same size (only the file id differs: V14); more rows
    a longer one (V13).
    """
    path = tmp_path / "x.arrow"
    ash.write(table(100), path, num_subpartitions=4, by="key")
    marker = tmp_path / "stalled"
    proc = subprocess.Popen(
        [sys.executable, "-c", STALL_AFTER_DATA_RENAME, str(path), str(marker), str(rows)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 120
        while not marker.exists():
            assert proc.poll() is None, proc.communicate()[1].decode()
            assert time.monotonic() < deadline, "the writer never reached its first rename"
            time.sleep(0.05)
    finally:
        proc.kill()  # SIGKILL: between the data file's rename and the index's
        proc.wait()
    names = listing(tmp_path)
    assert {"x.arrow", "x.arrow.idx"} <= set(names)
    assert any(n.startswith(".x.arrow.idx.") for n in names)  # the new index never published
    with pytest.raises(CorruptFileError) as raised:
        ash.open_file(path).read()
    assert raised.value.rule == rule
    report = ash.validate_file(path)
    assert not report.ok
    assert report.violations[0].rule == rule
    assert main(["validate", str(path)]) == 1
