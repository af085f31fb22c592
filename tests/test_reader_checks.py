"""The reader checks what validation checks, with the same functions (V17, V20)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from index_edits import reencode

import arrowshuffle
from arrowshuffle.format.chunks import decode_chunk
from arrowshuffle.format.errors import FormatError
from arrowshuffle.writers.api import write


def invalid_utf8_table() -> pa.Table:
    """Two rows whose string column holds bytes that are not UTF-8 (only full validation sees)."""
    offsets = pa.array([0, 1, 2], pa.int32()).buffers()[1]
    strings = pa.Array.from_buffers(pa.string(), 2, [None, offsets, pa.py_buffer(b"a\xff")])
    return pa.table({"k": pa.array([0, 1], pa.int64()), "s": strings})


@pytest.fixture
def invalid_utf8(tmp_path: Path) -> Path:
    path = tmp_path / "bad.arrow"
    write(invalid_utf8_table(), path, num_subpartitions=2, partitioner="hash", by="k")
    return path


def test_a_verifying_read_validates_batches_fully(invalid_utf8: Path) -> None:
    shuffle_file = arrowshuffle.open_file(invalid_utf8)
    with pytest.raises(FormatError, match="UTF8") as caught:
        shuffle_file.read(verify=True)
    assert caught.value.rule == "V17"


def test_an_unverified_local_read_stays_zero_copy(invalid_utf8: Path) -> None:
    # Without verification the batches are handed out as stored, their buffers not read.
    assert arrowshuffle.open_file(invalid_utf8).read(verify=False).num_rows == 2


def test_validation_reports_the_same_rule(invalid_utf8: Path) -> None:
    report = arrowshuffle.validate_file(invalid_utf8, deep=True)
    assert [v.rule for v in report.violations] == ["V17"]
    assert "UTF8" in report.violations[0].message


def test_a_message_that_is_not_a_record_batch_breaks_v17() -> None:
    schema = pa.schema([("k", pa.int64())])
    message = pa.py_buffer(schema.serialize().to_pybytes())
    with pytest.raises(FormatError, match="is a 'schema' message, expected a record batch") as c:
        decode_chunk(message, schema, 1, 0, "chunk (region 0, subpartition 0)", full=False)
    assert c.value.rule == "V17"


def test_the_reader_refuses_a_reserved_region_word_as_validation_does(tmp_path: Path) -> None:
    import numpy as np

    from arrowshuffle.format.index import decode_index

    path = tmp_path / "f.arrow"
    table = pa.table({"k": pa.array(range(40), pa.int64())})
    write(table, path, num_subpartitions=4, partitioner="hash", by="k")
    index_path = tmp_path / "f.arrow.idx"
    index = decode_index(index_path.read_bytes())
    regions = np.array(index.meta.regions, copy=True)
    regions["reserved"][0] = 1
    index_path.write_bytes(reencode(index, regions=regions))
    assert [v.rule for v in arrowshuffle.validate_file(path).violations] == ["V20"]
    with pytest.raises(FormatError) as caught:
        arrowshuffle.open_file(path).read()
    assert caught.value.rule == "V20"
