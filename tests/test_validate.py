"""validate_file: every rule V1-V19 is triggered by a file that breaks it, and only then."""

from __future__ import annotations

import importlib.util
import shutil
import struct
import sys
import tempfile
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import arrowshuffle
from arrowshuffle.format.errors import MissingObjectError, ShuffleIOError
from arrowshuffle.format.index import decode_index, encode_index
from arrowshuffle.format.rules import RULES
from arrowshuffle.readers import validate as validate_module
from arrowshuffle.readers.validate import ValidationReport, validate_file

SCHEMA = pa.schema([("k", pa.int64()), ("p", pa.int64()), ("s", pa.string())])
N = 4


def load_generator() -> ModuleType:
    name = "arrowshuffle_vectors_v1_generate"
    if name in sys.modules:
        return sys.modules[name]
    path = Path(__file__).parent / "vectors" / "v1" / "generate.py"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


gen = load_generator()


def region_rows(region: int, n: int) -> tuple[pa.Table, np.ndarray]:
    ids = (np.arange(n) * 5 + region) % N
    table = pa.table(
        {
            "k": pa.array(np.arange(n) + 100 * region, pa.int64()),
            "p": pa.array(ids, pa.int64()),
            "s": [f"value-{region}-{i}" for i in range(n)],
        },
        schema=SCHEMA,
    )
    return table, ids


def write_pair(
    directory: Path,
    name: str = "part.arrow",
    *,
    regions: int = 3,
    broadcast: bool = False,
    partitioner: object = None,
    max_batch_rows: int = 4,
) -> Path:
    """A valid file: ``regions`` regular regions of 9 rows (and a broadcast one if asked).

    Uncompressed, so that tests can find and damage the values' bytes in the data file.
    """
    path = directory / name
    with arrowshuffle.ShuffleFileWriter(
        path,
        SCHEMA,
        N,
        max_batch_rows=max_batch_rows,
        partitioner=partitioner,
        compression="none",
    ) as writer:
        for r in range(regions):
            table, ids = region_rows(r, 9)
            writer.write(table, subpartitions=ids)
            writer.flush_region()
            if broadcast and r == 0:
                writer.write_broadcast(region_rows(7, 5)[0])
                writer.flush_region()
    return path


def edit_index(path: Path, edit: Callable[[bytearray], bytes]) -> None:
    idx = Path(str(path) + ".idx")
    idx.write_bytes(edit(bytearray(idx.read_bytes())))


def reencode(path: Path, **changes: object) -> None:
    """Re-encode the index with some fields replaced (all checksums recomputed by the codec)."""
    idx = Path(str(path) + ".idx")
    index = decode_index(idx.read_bytes())
    fields: dict[str, object] = {
        "schema": index.schema,
        "partitioner": index.meta.partitioner,
        "file_id": index.header.file_id,
        "data_length": index.header.data_length,
        "regions": index.meta.regions.copy(),
        "entries": index.entries.copy(),
        "compression": index.header.compression,
    }
    fields.update(changes)
    idx.write_bytes(encode_index(**fields))  # type: ignore[arg-type]


def entries_of(path: Path) -> tuple[np.ndarray, np.ndarray]:
    index = decode_index(Path(str(path) + ".idx").read_bytes())
    return index.meta.regions.copy(), index.entries.copy()


def rules_of(report: ValidationReport) -> list[str]:
    return [v.rule for v in report.violations]


def first_rule(path: Path, *, deep: bool = False) -> str:
    report = validate_file(path, deep=deep)
    assert not report.ok
    return report.violations[0].rule


@pytest.fixture
def pair(tmp_path: Path) -> Path:
    return write_pair(tmp_path)


# ---------------------------------------------------------------------- valid files


def test_valid_file_has_no_violation_and_a_summary(pair: Path) -> None:
    report = validate_file(pair, deep=True)
    assert report.ok and report.violations == []
    assert report.summary["regions"] == 3
    assert report.summary["subpartitions"] == N
    assert report.summary["rows"] == 27
    assert report.summary["bytes"] == pair.stat().st_size
    assert report.summary["index_bytes"] == Path(str(pair) + ".idx").stat().st_size
    assert report.summary["compression"] == "none"
    assert report.to_dict()["ok"] is True


@pytest.mark.parametrize("compression", ["lz4", "zstd"])
def test_compressed_file_with_broadcast_is_valid_deep(tmp_path: Path, compression: str) -> None:
    path = tmp_path / "c.arrow"
    with arrowshuffle.ShuffleFileWriter(path, SCHEMA, N, compression=compression) as writer:
        table, ids = region_rows(0, 50)
        writer.write(table, subpartitions=ids)
        writer.write_broadcast(region_rows(1, 7)[0])
    report = validate_file(path, deep=True)
    assert report.ok, report.violations
    assert report.summary["compression"] == compression


def test_every_rule_is_documented_in_the_spec() -> None:
    spec = (Path(__file__).parent.parent / "spec.md").read_text()
    for rule, text in RULES.items():
        assert f"**{rule}**" in spec, rule
        assert text in " ".join(spec.split()), rule


# ---------------------------------------------------------------------- V1-V7: decoding


def test_v1_index_magic(pair: Path) -> None:
    edit_index(pair, gen.set_magic)
    assert first_rule(pair) == "V1"


def test_v1_trailer_magic(pair: Path) -> None:
    edit_index(pair, gen.set_trailer_magic)
    assert first_rule(pair) == "V1"


def test_v1_foreign_index(pair: Path) -> None:
    Path(str(pair) + ".idx").write_bytes(b"PAR1" + bytes(200))
    assert first_rule(pair) == "V1"


@pytest.mark.parametrize("major", [0, 2, 65535])
def test_v2_unknown_major_version(pair: Path, major: int) -> None:
    def edit(buf: bytearray) -> bytes:
        struct.pack_into("<H", buf, gen.MAJOR_AT, major)
        return bytes(gen.refix(buf))

    edit_index(pair, edit)
    report = validate_file(pair)
    assert rules_of(report) == ["V2"]
    assert f"{major}." in report.violations[0].message


def test_v2_unknown_required_flag(pair: Path) -> None:
    edit_index(pair, gen.set_required_flag)
    assert rules_of(validate_file(pair)) == ["V2"]


def test_unknown_optional_flag_and_newer_minor_are_accepted(pair: Path) -> None:
    expected = arrowshuffle.open_file(pair).read()
    edit_index(pair, gen.set_optional_flag)
    edit_index(pair, gen.longer_header)
    assert validate_file(pair, deep=True).ok
    with arrowshuffle.open_file(pair) as f:
        assert f.header.version == (1, 1)
        assert f.read().equals(expected)


def test_v3_header_checksum(pair: Path) -> None:
    def edit(buf: bytearray) -> bytes:
        buf[gen.TOTAL_ROWS_AT] ^= 0x01  # a header field changes, its checksum does not
        return bytes(buf)

    edit_index(pair, edit)
    assert rules_of(validate_file(pair)) == ["V3"]


@pytest.mark.parametrize(
    "edit",
    [
        gen.truncate(1),
        gen.truncate(100),
        gen.append_garbage,
        lambda buf: bytes(buf[:50]),
        lambda buf: b"",
    ],
    ids=["cut-1", "cut-100", "trailing", "shorter-than-header", "empty"],
)
def test_v4_index_length(pair: Path, edit: Callable[[bytearray], bytes]) -> None:
    edit_index(pair, edit)
    assert rules_of(validate_file(pair)) == ["V4"]


def hostile(field_at: int, fmt: str, value: int) -> Callable[[bytearray], bytes]:
    def edit(buf: bytearray) -> bytes:
        struct.pack_into(fmt, buf, field_at, value)
        struct.pack_into("<I", buf, gen.HEADER_CRC_AT, gen.crc32c(bytes(buf[: gen.HEADER_CRC_AT])))
        return bytes(buf)

    return edit


@pytest.mark.parametrize(
    ("field_at", "fmt", "value"),
    [
        (gen.INDEX_LENGTH_AT, "<Q", 2**60),
        (gen.ENTRIES_OFFSET_AT, "<Q", 2**60),
        (gen.REGIONS_AT, "<I", 2**32 - 1),
        (gen.SUBPARTITIONS_AT, "<I", 2**32 - 1),
        (gen.SUBPARTITIONS_AT, "<I", 0),
        (gen.SCHEMA_LENGTH_AT, "<I", 2**32 - 1),
        (gen.PARTITIONER_LENGTH_AT, "<I", 2**31),
        (gen.HEADER_SIZE_AT, "<I", 2**32 - 8),
        (gen.HEADER_SIZE_AT, "<I", 8),
    ],
    ids=[
        "index_length=2**60",
        "entries_offset=2**60",
        "regions=2**32-1",
        "subpartitions=2**32-1",
        "subpartitions=0",
        "schema_length=2**32-1",
        "partitioner_length=2**31",
        "header_size=2**32-8",
        "header_size=8",
    ],
)
def test_v4_hostile_header_is_an_error_not_an_allocation(
    pair: Path, field_at: int, fmt: str, value: int
) -> None:
    edit_index(pair, hostile(field_at, fmt, value))
    tracemalloc.start()
    try:
        report = validate_file(pair, deep=True)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert rules_of(report) == ["V4"]
    assert peak < 16 * 1024 * 1024


def test_v4_hostile_sizes_that_agree_with_each_other(pair: Path) -> None:
    """Declared lengths made consistent with a huge schema: the object's size still refutes it."""
    edit_index(pair, gen.huge_schema_length)
    report = validate_file(pair)
    assert rules_of(report) == ["V4"]
    assert "truncated" in report.violations[0].message


def test_v5_metadata_checksum(pair: Path) -> None:
    edit_index(pair, gen.region_reserved)
    assert rules_of(validate_file(pair)) == ["V5"]


def test_v6_entry_block_checksum(pair: Path) -> None:
    edit_index(pair, gen.entry_crc_field)
    report = validate_file(pair)
    assert rules_of(report) == ["V6"]
    assert "subpartition 1" in report.violations[0].message


def test_v6_whole_index_checksum(pair: Path) -> None:
    edit_index(pair, gen.trailer_crc)
    assert rules_of(validate_file(pair)) == ["V6"]


def test_v7_schema_section(pair: Path) -> None:
    edit_index(pair, gen.garbage_schema)
    assert rules_of(validate_file(pair)) == ["V7"]


@pytest.mark.parametrize("text", [b"[1,2,3]", b'{"nom":1}', b"{not json", b"\xff\xfe\xfd"])
def test_v7_partitioner_section(pair: Path, text: bytes) -> None:
    def edit(buf: bytearray) -> bytes:
        sec = gen.Sections.of(buf)
        at = sec.header_size + gen.pad8(gen.u32(buf, gen.SCHEMA_LENGTH_AT))
        length = gen.u32(buf, gen.PARTITIONER_LENGTH_AT)
        buf[at : at + length] = text.ljust(length)
        return bytes(gen.refix(buf))

    edit_index(pair, edit)
    assert rules_of(validate_file(pair)) == ["V7"]


def test_v7_field_name_not_utf8(pair: Path) -> None:
    """A schema message that decodes but names a field with bytes that are not UTF-8."""

    def edit(buf: bytearray) -> bytes:
        length = gen.u32(buf, gen.SCHEMA_LENGTH_AT)
        at = bytes(buf[96 : 96 + length]).find(b"\x01\x00\x00\x00s\x00")  # the name "s"
        assert at > 0
        buf[96 + at + 4] = 0xB4
        return bytes(gen.refix(buf))

    edit_index(pair, edit)
    report = validate_file(pair, deep=True)
    assert rules_of(report) == ["V7"]
    assert "UTF-8" in report.violations[0].message


# ---------------------------------------------------------------------- V8-V12: the layout


def test_v8_chunk_past_end(pair: Path) -> None:
    edit_index(pair, gen.chunk_past_end)
    assert rules_of(validate_file(pair, deep=True)) == ["V8"]


def test_v8_chunk_length_that_wraps_around(tmp_path: Path) -> None:
    """offset + length beyond 2**64 must not wrap around to a small, plausible end."""
    path = write_pair(tmp_path, broadcast=True)
    regions, entries = entries_of(path)
    broadcast = int(np.flatnonzero(regions["flags"] & 1)[0])
    huge = 2**64 - int(entries[0, broadcast]["offset"]) + 8
    entries["length"][:, broadcast] = huge
    regions["length"][broadcast] = huge
    reencode(path, regions=regions, entries=entries)
    assert "V8" in rules_of(validate_file(path, deep=True))


def test_v9_overlapping_chunks(pair: Path) -> None:
    edit_index(pair, gen.overlapping_chunk)
    report = validate_file(pair, deep=True)
    assert rules_of(report) == ["V9"]
    assert "deep checks" in report.summary["skipped"][0]


def test_v9_overlapping_regions(pair: Path) -> None:
    regions, entries = entries_of(pair)
    shift = 16
    regions["offset"][1] -= shift
    entries["offset"][:, 1] -= shift
    reencode(pair, regions=regions, entries=entries)
    report = validate_file(pair)
    assert rules_of(report) == ["V9"]
    assert "region 1 starts" in report.violations[0].message


def test_v9_region_not_filled(pair: Path) -> None:
    regions, entries = entries_of(pair)
    regions["length"][-1] += 8
    reencode(pair, regions=regions, entries=entries)
    assert rules_of(validate_file(pair)) == ["V9"]


def test_v10_broadcast_entries_differ(tmp_path: Path) -> None:
    path = write_pair(tmp_path, broadcast=True)
    regions, entries = entries_of(path)
    broadcast = int(np.flatnonzero(regions["flags"] & 1)[0])
    entries["crc32c"][3, broadcast] ^= 1
    reencode(path, regions=regions, entries=entries)
    assert rules_of(validate_file(path)) == ["V10"]


def test_v11_bytes_without_batches(pair: Path) -> None:
    edit_index(pair, gen.batches_without_bytes)
    assert rules_of(validate_file(pair)) == ["V11"]


def test_v11_rows_without_batches(tmp_path: Path) -> None:
    path = tmp_path / "gap.arrow"
    table, _ = region_rows(0, 6)
    with arrowshuffle.ShuffleFileWriter(path, SCHEMA, N) as writer:
        writer.write(table, subpartitions=np.array([0, 0, 1, 3, 3, 3]))  # 2 stays empty
    regions, entries = entries_of(path)
    assert entries["length"][2, 0] == 0
    entries["rows"][2, 0] = 1
    entries["rows"][3, 0] -= 1  # keep the total, so only V11 is broken
    reencode(path, regions=regions, entries=entries)
    assert rules_of(validate_file(path)) == ["V11"]


def test_v12_total_rows(pair: Path) -> None:
    edit_index(pair, gen.total_rows_plus_one)
    report = validate_file(pair, deep=True)
    assert rules_of(report) == ["V12"]


# ---------------------------------------------------------------------- V13-V15: the data file


def test_v13_truncated_data(pair: Path) -> None:
    pair.write_bytes(pair.read_bytes()[:-10])
    assert first_rule(pair) == "V13"


def test_v13_data_longer_than_declared(pair: Path) -> None:
    pair.write_bytes(pair.read_bytes() + b"ARROW1")
    report = validate_file(pair)
    assert rules_of(report)[0] == "V13"
    assert f"found {pair.stat().st_size} bytes" in report.violations[0].message


def test_v13_not_an_arrow_file(pair: Path) -> None:
    pair.write_bytes(b"\0" * pair.stat().st_size)
    report = validate_file(pair)
    assert rules_of(report) == ["V13"]
    assert "ARROW1" in report.violations[0].message


def test_v13_empty_data_file(pair: Path) -> None:
    pair.write_bytes(b"")
    assert rules_of(validate_file(pair, deep=True)) == ["V13", "V13"]


def test_v14_other_file_id(tmp_path: Path) -> None:
    first = write_pair(tmp_path, "a.arrow")
    second = write_pair(tmp_path, "b.arrow")
    shutil.copyfile(first, second)  # same rows and length, another file id
    assert rules_of(validate_file(second)) == ["V14"]


def test_v14_no_file_id(pair: Path) -> None:
    rows = pa.ipc.open_file(pair).read_all()
    with pa.ipc.new_file(pair, SCHEMA) as writer:  # same batches, no footer metadata
        writer.write_table(rows)
    report = validate_file(pair)
    assert "V14" in rules_of(report)
    assert "no file id" in next(v.message for v in report.violations if v.rule == "V14")


def test_v15_schema_differs(pair: Path) -> None:
    other = pa.schema([("k", pa.int64()), ("p", pa.int32()), ("s", pa.string())])
    reencode(pair, schema=other)
    report = validate_file(pair)
    assert rules_of(report) == ["V15"]
    assert "field 1" in report.violations[0].message


def test_v15_schema_metadata_differs(pair: Path) -> None:
    reencode(pair, schema=SCHEMA.with_metadata({"owner": "someone else"}))
    assert rules_of(validate_file(pair)) == ["V15"]


# ---------------------------------------------------------------------- V16-V19: deep


def test_v16_chunk_checksum(pair: Path) -> None:
    data = bytearray(pair.read_bytes())
    at = bytes(data).find(b"value-1-4")
    data[at + 6] = ord("9")
    pair.write_bytes(bytes(data))
    assert validate_file(pair).ok
    report = validate_file(pair, deep=True)
    assert rules_of(report) == ["V16"]


def test_v16_counts_every_damaged_chunk(pair: Path) -> None:
    data = bytearray(pair.read_bytes())
    for needle in (b"value-0-1", b"value-2-2"):
        at = bytes(data).find(needle)
        data[at] ^= 0x20
    pair.write_bytes(bytes(data))
    (violation,) = validate_file(pair, deep=True).violations
    assert violation.rule == "V16" and "(2 chunks in all)" in violation.message


def test_v17_declared_rows_differ(pair: Path) -> None:
    edit_index(pair, gen.rows_moved_between_chunks)
    assert validate_file(pair).ok
    assert rules_of(validate_file(pair, deep=True)) == ["V17"]


def test_v17_more_batches_declared_than_stored(pair: Path) -> None:
    regions, entries = entries_of(pair)
    s, r = (int(i) for i in np.argwhere(entries["batches"] > 0)[0])
    entries["batches"][s, r] += 1
    reencode(pair, regions=regions, entries=entries)
    report = validate_file(pair, deep=True)
    assert rules_of(report)[0] == "V17"


def test_v17_undecodable_bytes_with_matching_checksum(pair: Path) -> None:
    """Bytes that match their CRC but are not an IPC record batch (a writer bug, say)."""
    data = bytearray(pair.read_bytes())
    regions, entries = entries_of(pair)
    s, r = (int(i) for i in np.argwhere(entries["length"] > 0)[0])
    offset, length = int(entries[s, r]["offset"]), int(entries[s, r]["length"])
    data[offset + 8 : offset + 16] = b"\xff" * 8  # inside the batch's flatbuffer metadata
    pair.write_bytes(bytes(data))
    entries["crc32c"][s, r] = gen.crc32c(bytes(data[offset : offset + length]))
    reencode(pair, regions=regions, entries=entries)
    # The footer's row count reads the same broken batch, so V18 may follow.
    assert rules_of(validate_file(pair, deep=True))[0] == "V17"


def test_v18_footer_lists_other_batches(pair: Path) -> None:
    pair.write_bytes(gen.footer_repeats_first_batch(bytearray(pair.read_bytes())))
    assert validate_file(pair).ok
    report = validate_file(pair, deep=True)
    assert rules_of(report) == ["V18"]


@pytest.mark.parametrize("deep", [False, True])
def test_v21_index_without_its_last_region(pair: Path, deep: bool) -> None:
    edit_index(pair, gen.drop_last_region)
    report = validate_file(pair, deep=deep)
    assert rules_of(report)[0] == "V21"
    assert "before its footer" in report.violations[0].message


def column_partitioner() -> object:
    partitioners = pytest.importorskip("arrowshuffle.format.partitioners")
    if not hasattr(partitioners, "make_partitioner"):
        pytest.skip("the partitioners are not available yet")
    return partitioners.make_partitioner("column", num_subpartitions=N, by="p")


def test_v19_row_in_the_wrong_subpartition(tmp_path: Path) -> None:
    path = tmp_path / "p.arrow"
    table, ids = region_rows(0, 12)
    wrong = ids.copy()
    wrong[5] = (ids[5] + 1) % N  # the id column says one thing, the row is stored elsewhere
    with arrowshuffle.ShuffleFileWriter(path, SCHEMA, N, partitioner=column_partitioner()) as w:
        w.write(table, subpartitions=wrong)
    assert validate_file(path).ok
    report = validate_file(path, deep=True)
    assert rules_of(report) == ["V19"]
    assert f"belongs to subpartition {ids[5]}" in report.violations[0].message


def test_v19_holds_for_rows_the_partitioner_placed(tmp_path: Path) -> None:
    path = tmp_path / "p.arrow"
    with arrowshuffle.ShuffleFileWriter(path, SCHEMA, N, partitioner=column_partitioner()) as w:
        for r in range(3):
            w.write(region_rows(r, 10)[0])
            w.flush_region()
    report = validate_file(path, deep=True)
    assert report.ok, report.violations
    assert not any(reason.startswith("V19") for reason in report.summary["skipped"])


def test_v19_skipped_for_explicit_ids(pair: Path) -> None:
    report = validate_file(pair, deep=True)
    assert report.ok
    assert any(reason.startswith("V19") for reason in report.summary["skipped"])


def test_v19_unknown_partitioner_is_skipped_not_invalid(pair: Path) -> None:
    column_partitioner()
    reencode(pair, partitioner={"name": "from-the-future", "num_subpartitions": N})
    report = validate_file(pair, deep=True)
    assert report.ok
    assert "from-the-future" in " ".join(report.summary["skipped"])


def hash_pair(directory: Path) -> Path:
    partitioners = pytest.importorskip("arrowshuffle.format.partitioners")
    spec = partitioners.make_partitioner("hash", num_subpartitions=N, by=["k"])
    path = directory / "h.arrow"
    with arrowshuffle.ShuffleFileWriter(path, SCHEMA, N, partitioner=spec) as writer:
        for r in range(2):
            writer.write(region_rows(r, 10)[0])  # the partitioner places the rows
            writer.flush_region()
    return path


MALFORMED_HASH_SPECS = {
    "a column the schema lacks": ({"columns": ["nowhere"]}, "nowhere"),
    "a seed that is not an integer": ({"seed": "x"}, "seed"),
    "columns that are not a list": ({"columns": 5}, "columns"),
    "a subpartition count as text": ({"num_subpartitions": "7"}, "7"),
}


@pytest.mark.parametrize(
    ("change", "words"), list(MALFORMED_HASH_SPECS.values()), ids=list(MALFORMED_HASH_SPECS)
)
def test_v19_a_known_partitioner_whose_spec_cannot_be_applied(
    tmp_path: Path, change: dict[str, object], words: str
) -> None:
    path = hash_pair(tmp_path)
    assert validate_file(path, deep=True).ok
    spec = decode_index(memoryview(Path(f"{path}.idx").read_bytes())).meta.partitioner
    reencode(path, partitioner={**spec, **change})
    report = validate_file(path, deep=True)
    assert rules_of(report) == ["V19"]
    assert "hash partitioner spec cannot be applied" in report.violations[0].message
    assert words in report.violations[0].message
    assert not any(reason.startswith("V19") for reason in report.summary["skipped"])


def test_deep_check_in_small_waves_finds_the_same(
    pair: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    edit_index(pair, gen.rows_moved_between_chunks)
    whole = validate_file(pair, deep=True).violations
    monkeypatch.setattr(validate_module, "DEEP_WAVE_BYTES", 1)
    assert validate_file(pair, deep=True).violations == whole


# ---------------------------------------------------------------------- IO problems


def test_missing_index_is_an_io_error(pair: Path) -> None:
    Path(str(pair) + ".idx").unlink()
    with pytest.raises(MissingObjectError, match=r"\.idx"):
        validate_file(pair)


def test_missing_data_is_an_io_error(pair: Path) -> None:
    pair.unlink()
    with pytest.raises(MissingObjectError):
        validate_file(pair)


def test_directory_is_an_io_error(tmp_path: Path) -> None:
    (tmp_path / "d.arrow").mkdir()
    (tmp_path / "d.arrow.idx").mkdir()
    with pytest.raises(ShuffleIOError):
        validate_file(tmp_path / "d.arrow")


# ---------------------------------------------------------------------- robustness


@settings(
    max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_any_self_consistent_index_edit_gives_a_report(tmp_path: Path, data: st.DataObject) -> None:
    """Edit any index byte and recompute every checksum: a report comes back, never a crash."""
    directory = Path(tempfile.mkdtemp(dir=tmp_path))
    path = write_pair(directory, broadcast=data.draw(st.booleans()))
    raw = bytearray(Path(str(path) + ".idx").read_bytes())
    sec = gen.Sections.of(raw)
    positions = st.integers(0, sec.trailer_at - 1).filter(
        lambda i: (
            not (gen.META_CRC_AT <= i < gen.META_CRC_AT + 8)
            and not (sec.crcs_at <= i < sec.entries_at)
        )
    )
    for _ in range(data.draw(st.integers(1, 4))):
        raw[data.draw(positions)] = data.draw(st.integers(0, 255))
    if gen.Sections.of(raw) == sec:
        gen.refix(raw)
    else:  # a size field changed: the checksums have no place to go, fix only the header's
        struct.pack_into("<I", raw, gen.HEADER_CRC_AT, gen.crc32c(bytes(raw[: gen.HEADER_CRC_AT])))
    Path(str(path) + ".idx").write_bytes(bytes(raw))
    report = validate_file(path, deep=True)
    assert report.ok or report.violations
    assert all(v.rule in RULES for v in report.violations)


# ---------------------------------------------------------------------- object storage


def upload(local: Path, bucket_url: str, options: dict[str, object]) -> str:
    import fsspec

    fs = fsspec.filesystem("s3", **options)
    url = f"{bucket_url}/{local.name}"
    fs.put_file(str(local), url)
    fs.put_file(str(local) + ".idx", url + ".idx")
    return url


@pytest.mark.s3
def test_remote_validation_reads_the_index_and_only_the_footer(
    tmp_path: Path, s3_endpoint: object, s3_bucket: str
) -> None:
    path = tmp_path / "big.arrow"
    with arrowshuffle.ShuffleFileWriter(path, SCHEMA, N) as writer:
        for r in range(3):
            table, ids = region_rows(r, 3000)
            writer.write(table, subpartitions=ids)
            writer.flush_region()
    options = s3_endpoint.storage_options()  # type: ignore[attr-defined]
    url = upload(path, s3_bucket, options)
    log = s3_endpoint.log  # type: ignore[attr-defined]
    log.clear()
    report = validate_file(url, storage_options=options)
    assert report.ok, report.violations
    data_gets = [r for r in log.requests("GET", "big.arrow") if not r["path"].endswith(".idx")]
    assert sum(r["bytes"] for r in data_gets) < path.stat().st_size // 10
    log.clear()
    assert validate_file(url, storage_options=options, deep=True).ok
    data_gets = [r for r in log.requests("GET", "big.arrow") if not r["path"].endswith(".idx")]
    assert sum(r["bytes"] for r in data_gets) >= path.stat().st_size // 2


@pytest.mark.s3
@pytest.mark.parametrize(
    ("edit", "rule", "deep"),
    [
        (gen.set_magic, "V1", False),
        (hostile(gen.INDEX_LENGTH_AT, "<Q", 2**60), "V4", False),
        (gen.entry_crc_field, "V6", False),
        (gen.overlapping_chunk, "V9", False),
        (gen.rows_moved_between_chunks, "V17", True),
        (gen.drop_last_region, "V21", False),
        (gen.drop_first_region, "V21", False),
    ],
)
def test_remote_validation_finds_the_same_rules(
    tmp_path: Path,
    s3_endpoint: object,
    s3_bucket: str,
    edit: Callable[[bytearray], bytes],
    rule: str,
    deep: bool,
) -> None:
    path = write_pair(tmp_path)
    edit_index(path, edit)
    options = s3_endpoint.storage_options()  # type: ignore[attr-defined]
    url = upload(path, s3_bucket, options)
    assert rules_of(validate_file(url, storage_options=options, deep=deep)) == rules_of(
        validate_file(path, deep=deep)
    )
    assert rules_of(validate_file(url, storage_options=options, deep=deep))[0] == rule


@pytest.mark.s3
def test_remote_missing_object_is_an_io_error(
    tmp_path: Path, s3_endpoint: object, s3_bucket: str
) -> None:
    options = s3_endpoint.storage_options()  # type: ignore[attr-defined]
    with pytest.raises(MissingObjectError):
        validate_file(f"{s3_bucket}/nothing.arrow", storage_options=options)
