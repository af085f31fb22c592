"""Opens of the same local index reuse its proof, and only while its bytes are the same."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from index_edits import reencode

import arrowshuffle as ash
from arrowshuffle.format.index import decode_index
from arrowshuffle.readers.file_reader import clear_proof_cache

N = 4


def _write(path: Path, rows: int = 400, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    table = pa.table({"id": pa.array(np.arange(rows)), "x": pa.array(rng.random(rows))})
    with ash.ShuffleFileWriter(path, table.schema, N, memory="64KiB", max_batch_rows=50) as w:
        for batch in table.to_batches(max_chunksize=100):
            w.write(batch, subpartitions=batch.column("id").to_numpy() % N)
            w.flush_region()


@pytest.fixture
def pair(tmp_path: Path) -> Path:
    clear_proof_cache()
    path = tmp_path / "p.arrow"
    _write(path)
    return path


def test_a_second_open_of_the_same_bytes_proves_nothing_again(pair: Path) -> None:
    first = ash.open_file(pair)
    expected = first.read(1)
    assert first.proofs == 1
    again = ash.open_file(pair)
    assert again.read(1).equals(expected)
    # A file read before is proven whole at its second read (any open): once.
    assert again.proofs == 1
    third = ash.open_file(pair)
    for s in range(N):
        third.read(s)
    assert third.read(1).equals(expected)
    assert third.proofs == 0


def test_a_changed_index_is_proven_again(pair: Path, tmp_path: Path) -> None:
    ash.open_file(pair).read(1)
    # Another pair written to the same path: other bytes, so no reuse.
    other = tmp_path / "other.arrow"
    _write(other, rows=300, seed=3)
    shutil.copyfile(other, pair)
    shutil.copyfile(f"{other}.idx", f"{pair}.idx")
    reopened = ash.open_file(pair)
    assert reopened.read(1).num_rows == 75
    assert reopened.proofs == 1


def _read_all(pair: Path) -> ash.ShuffleFile:
    """A file opened and read whole: its index is proven and its proof cached."""
    good = ash.open_file(pair)
    for s in range(N):
        good.read(s)
    return good


def _swapped_index(pair: Path) -> bytes:
    """The pair's index with two entries of region 0 swapped and every checksum recomputed."""
    index = decode_index(Path(f"{pair}.idx").read_bytes())
    entries = index.entries.copy()
    entries[[0, 1], 0] = entries[[1, 0], 0]
    return reencode(index, entries=entries)


def test_a_hostile_edit_after_a_good_open_is_still_refused(pair: Path) -> None:
    _read_all(pair)
    Path(f"{pair}.idx").write_bytes(_swapped_index(pair))
    with pytest.raises(ash.CorruptFileError) as info:
        ash.open_file(pair).read(0)
    assert info.value.rule == "V9"


def test_a_replaced_data_file_is_checked_again(pair: Path, tmp_path: Path) -> None:
    ash.open_file(pair).read(0)
    # A data file of another write beside the same index: its file id differs (V14).
    other = tmp_path / "other.arrow"
    _write(other)
    shutil.copyfile(other, pair)
    with pytest.raises(ash.CorruptFileError):
        ash.open_file(pair).read(0)


def _edit_in_place(path: Path, at: int, data: bytes) -> None:
    with open(path, "r+b") as f:
        f.seek(at)
        f.write(data)


def test_a_data_file_whose_footer_changed_in_place_is_checked_again(pair: Path) -> None:
    good = ash.open_file(pair)
    good.read(0)
    good.close()
    # The footer's copy of the file id (the schema message at the start holds another), one
    # hex digit changed: same length, same head, another footer.
    data = pair.read_bytes()
    file_id = good.header.file_id.hex().encode()
    at = data.rindex(file_id)
    assert at > len(data) // 2
    digit = b"0" if data[at : at + 1] != b"0" else b"1"
    _edit_in_place(pair, at, digit)
    with pytest.raises(ash.CorruptFileError) as info:
        ash.open_file(pair).read(0)
    assert info.value.rule == "V14"


def test_a_data_file_whose_head_changed_in_place_is_checked_again(pair: Path) -> None:
    ash.open_file(pair).read(0)
    _edit_in_place(pair, 0, b"ARROW2")  # not an Arrow IPC file any more
    with pytest.raises(ash.CorruptFileError) as info:
        ash.open_file(pair).read(0)
    assert info.value.rule == "V13"


def test_an_index_edited_in_place_after_a_good_open_is_refused(pair: Path) -> None:
    # As the hostile edit above, but the file is changed in place (same inode, same size)
    # while an opened reader still holds its bytes.
    good = _read_all(pair)
    index_path = Path(f"{pair}.idx")
    edited = _swapped_index(pair)
    assert len(edited) == index_path.stat().st_size
    _edit_in_place(index_path, 0, edited)
    assert good.read(1).num_rows == 100  # the open reader keeps the bytes it proved
    with pytest.raises(ash.CorruptFileError) as info:
        ash.open_file(pair).read(0)
    assert info.value.rule == "V9"


def test_a_repeated_read_reuses_its_fetch_blocks_across_opens(
    pair: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from arrowshuffle.readers.file_reader import ShuffleFile
    from arrowshuffle.readers.scheduler import ReadOptions

    first = ash.open_file(pair)
    expected = first.read(1)
    merged = first.blocks(1)
    apart = first.blocks(1, options=ReadOptions(max_gap=0))
    two_regions = first.blocks(1, regions=range(2))
    # The chunks of one subpartition lie in every region, with other chunks between them.
    assert len(merged) == 1 and len(apart) == 4
    assert {c.region for b in two_regions for c in b.ranges} == {0, 1}

    def unplanned(*args: object, **kwargs: object) -> object:
        raise AssertionError("planned again")

    monkeypatch.setattr(ShuffleFile, "chunk_ranges", unplanned)
    again = ash.open_file(pair)
    assert again.blocks(1) == merged
    assert again.blocks(range(1, 2), options=ReadOptions(max_gap=0)) == apart
    assert again.blocks(1, regions=range(2)) == two_regions
    assert again.read(1).equals(expected)
    monkeypatch.undo()
    # Selections never read before are planned (and checked) as usual.
    with pytest.raises(ash.InvalidOptionError):
        again.read(True)
    with pytest.raises(ash.InvalidOptionError):
        again.read(N)
    assert again.read([1]).equals(expected)
