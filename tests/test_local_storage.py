"""Local paths and local byte sources: the short ways must mean what fsspec's long way means.

A plain local path is resolved without fsspec's URL parsing, a small local file is read whole
instead of mapped, and a larger one is mapped with ``mmap``: each must give the same location
and the same bytes as before, and the same errors.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import fsspec
import numpy as np
import pyarrow as pa
import pytest

import arrowshuffle as ash
from arrowshuffle.format.errors import MissingObjectError, ShuffleIOError
from arrowshuffle.readers.source import MappedSource, open_source
from arrowshuffle.readers.storage import resolve


@pytest.mark.parametrize(
    "path",
    [
        "data.arrow",
        "./data.arrow",
        "sub/../data.arrow",
        "sub/",
        ".",
        "~/data.arrow",
        "/abs/./path//data.arrow",
        "/",
    ],
)
def test_a_plain_local_path_resolves_as_fsspec_resolves_it(
    path: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    fs, fs_path = fsspec.core.url_to_fs(path)
    expected = os.path.abspath(fs_path)
    location = resolve(path)
    assert location.fs is fs
    assert location.is_local
    assert (location.path, location.url) == (expected, expected)
    assert resolve(Path(path)) == location


@pytest.mark.parametrize("prefix", ["file://", "local://", "file:"])
def test_a_local_url_still_goes_through_fsspec(prefix: str, tmp_path: Path) -> None:
    target = tmp_path / "data.arrow"
    location = resolve(f"{prefix}{target}")
    assert location.is_local
    assert location.path == str(target)


def test_storage_options_with_a_local_path_reach_the_file_system(tmp_path: Path) -> None:
    # fsspec's local file system takes ``auto_mkdir``: the options make another instance.
    location = resolve(str(tmp_path / "x"), {"auto_mkdir": True})
    assert location.is_local
    assert location.fs is not resolve(str(tmp_path / "x")).fs


def _file(tmp_path: Path, size: int) -> tuple[Path, bytes]:
    data = np.random.default_rng(size).integers(0, 256, size, dtype=np.uint8).tobytes()
    path = tmp_path / f"f{size}"
    path.write_bytes(data)
    return path, data


@pytest.mark.parametrize("size", [0, 1, 4096, 100_000])
def test_a_small_file_is_read_whole_and_a_larger_one_mapped(tmp_path: Path, size: int) -> None:
    path, data = _file(tmp_path, size)
    location = resolve(str(path))
    read = open_source(location, read_at_most=4096)
    assert isinstance(read, MappedSource)
    assert read.private == (size <= 4096)
    assert read.size == size
    assert read.mapped.to_pybytes() == data
    ranges = [(0, min(size, 3)), (size // 2, size), (size, size)]
    assert [b.to_pybytes() for b in read.read_ranges(ranges)] == [data[b:e] for b, e in ranges]
    assert read.read_prefix(10).to_pybytes() == data[:10]
    with pytest.raises(ShuffleIOError):
        read.read_ranges([(0, size + 1)])


def test_a_read_copy_does_not_change_with_its_file_and_a_map_does(tmp_path: Path) -> None:
    path, data = _file(tmp_path, 8192)
    location = resolve(str(path))
    copy = open_source(location, read_at_most=8192)
    mapped = open_source(location)
    assert isinstance(copy, MappedSource) and isinstance(mapped, MappedSource)
    assert not mapped.private
    with open(path, "r+b") as f:  # the same file, changed in place
        f.write(b"\x00" * 16 if data[:16] != b"\x00" * 16 else b"\x01" * 16)
    assert copy.mapped.to_pybytes() == data
    assert mapped.mapped.to_pybytes() == path.read_bytes() != data


def test_slices_outlive_their_source(tmp_path: Path) -> None:
    path, data = _file(tmp_path, 100_000)
    source = open_source(resolve(str(path)))
    (piece,) = source.read_ranges([(1000, 2000)])
    del source
    assert piece.to_pybytes() == data[1000:2000]


def test_a_missing_file_and_a_directory_are_storage_errors(tmp_path: Path) -> None:
    with pytest.raises(MissingObjectError, match="does not exist"):
        open_source(resolve(str(tmp_path / "missing")))
    with pytest.raises(ShuffleIOError, match="opening") as info:
        open_source(resolve(str(tmp_path)))
    assert not isinstance(info.value, MissingObjectError)


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts /proc/self/fd")
def test_tables_read_from_mapped_files_hold_no_file_descriptors(tmp_path: Path) -> None:
    # Uncompressed batches are read zero-copy, so the tables keep the maps alive: a map that
    # kept a descriptor open too would use one per file read, and a dataset of more files
    # than the descriptor limit could not be read into one table.
    table = pa.table({"s": [f"v{i}" for i in range(300)], "i": np.arange(300)})
    paths = []
    for k in range(40):
        path = tmp_path / f"f{k}.arrow"
        with ash.ShuffleFileWriter(path, table.schema, 3, compression="none") as writer:
            writer.write(table, subpartitions=np.arange(300) % 3)
        paths.append(path)
    before = _open_fds()
    held = []
    for path in paths:
        with ash.open_file(str(path)) as file:
            held.append(file.read(1))
    assert all(t.num_rows == 100 for t in held)
    assert _open_fds() - before < len(paths) // 2


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs named pipes")
def test_a_named_pipe_is_refused_without_waiting_for_a_writer(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.arrow"
    os.mkfifo(fifo)
    outcome: list[BaseException | None] = []

    def open_it() -> None:
        try:
            open_source(resolve(str(fifo)))
        except BaseException as exc:  # what the test checks below
            outcome.append(exc)
        else:
            outcome.append(None)

    thread = threading.Thread(target=open_it, daemon=True)
    thread.start()
    thread.join(30)
    if thread.is_alive():
        # Blocked in open() waiting for a writer: be that writer until the thread ends.
        writer = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        thread.join()
        os.close(writer)
        pytest.fail("opening a named pipe waited for a writer instead of failing")
    (error,) = outcome
    assert isinstance(error, ShuffleIOError)
    assert "expected a regular file, found a named pipe" in str(error)


@pytest.mark.parametrize("fast", [True, False])
def test_a_dotdot_after_a_symbolic_link_names_the_file_the_system_opens(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fast: bool
) -> None:
    # link -> real/sub, so link/.. is real: the system opens real/x.arrow, not ./x.arrow.
    monkeypatch.chdir(tmp_path)
    (tmp_path / "real" / "sub").mkdir(parents=True)
    (tmp_path / "link").symlink_to(tmp_path / "real" / "sub")
    for where, value in (("real/x.arrow", 1), ("x.arrow", 2)):
        table = pa.table({"v": [value]})
        with ash.ShuffleFileWriter(where, table.schema, 1) as writer:
            writer.write(table, subpartitions=np.zeros(1, dtype=np.int64))
    path = "link/../x.arrow"
    options = None if fast else {"auto_mkdir": False}  # options take fsspec's own way
    location = resolve(path, options)
    assert os.path.samefile(location.path, path)
    assert os.path.samefile(location.sibling(".idx").path, "real/x.arrow.idx")
    with ash.open_file(path, storage_options=options) as file:
        assert file.read().column("v").to_pylist() == [1]
    assert resolve("link/..").path == os.path.realpath("real")
