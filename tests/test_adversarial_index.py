"""Indexes changed by a buggy or hostile writer, checksums recomputed: never wrong rows.

Structure-aware fuzzing: a valid file is written, its index decoded, one field changed (or two
entries swapped), and the index re-encoded with correct checksums, so that only the reader's
structural proof (spec.md, section 6.5) and decoding checks stand between the change and the
caller. Every subpartition is then read with ``verify=True``: the rows equal the truth computed
from the writer's input, or the read raises a library error. ``validate --deep`` must report
every change that alters what the index says.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from index_edits import reencode

import arrowshuffle as ash
from arrowshuffle.format.index import ENTRY_DTYPE, decode_index
from arrowshuffle.readers.validate import validate_file

VECTORS = Path(__file__).parent / "vectors" / "v1"
N = 5
SCHEMA = pa.schema([("row", pa.int64()), ("s", pa.string())])
ENTRY_FIELDS = ("offset", "length", "rows", "batches", "crc32c")


def _batch(start: int, n: int) -> pa.RecordBatch:
    row = np.arange(start, start + n, dtype=np.int64)
    return pa.record_batch([pa.array(row), pa.array([f"v{i}" for i in row])], schema=SCHEMA)


def write_base(path: Path) -> dict[int, list[int]]:
    """Write a file with 3 regular regions and 1 broadcast region; return the truth per s.

    Row ids are unique, so the truth is each subpartition's list of row ids in write order.
    """
    rng = np.random.default_rng(7)
    truth: dict[int, list[int]] = {s: [] for s in range(N)}
    with ash.ShuffleFileWriter(path, SCHEMA, N, max_batch_rows=4) as writer:
        start = 0
        for region, n in enumerate((13, 9, 11)):
            ids = rng.integers(0, N, n)
            if region == 1:
                ids[ids == 2] = 3  # an empty chunk in the middle of a region
            writer.write(_batch(start, n), subpartitions=ids)
            for i, s in enumerate(ids):
                truth[int(s)].append(start + i)
            writer.flush_region()
            start += n
        writer.write_broadcast(_batch(start, 3))
        for s in range(N):
            truth[s].extend(range(start, start + 3))
    return truth


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[int, list[int]]]:
    path = tmp_path_factory.mktemp("adversarial") / "base.arrow"
    truth = write_base(path)
    index = decode_index(Path(f"{path}.idx").read_bytes())
    broadcast = index.broadcast_regions
    assert index.num_regions == 4 and broadcast.tolist() == [False, False, False, True]
    assert (index.entries["length"] == 0).any()  # the fuzzing sees empty chunks too
    return path, truth


# ---------------------------------------------------------------------- mutations


@st.composite
def mutations(draw: st.DrawFn) -> dict[str, Any]:
    """One change to a decoded index: an entry field, a swap of two entries, a region field."""
    kind = draw(st.sampled_from(["entry", "entry", "swap", "region"]))
    tweak = st.one_of(
        st.sampled_from([-8, -1, 1, 8]).map(lambda d: ("add", d)),
        st.sampled_from([0, 2**32 - 1, 2**63, 2**64 - 1]).map(lambda v: ("set", v)),
        st.tuples(st.integers(0, N - 1), st.integers(0, 3)).map(lambda c: ("copy", c)),
    )
    if kind == "entry":
        return {
            "kind": kind,
            "cell": (draw(st.integers(0, N - 1)), draw(st.integers(0, 3))),
            "field": draw(st.sampled_from(ENTRY_FIELDS)),
            "tweak": draw(tweak),
        }
    if kind == "swap":
        first = (draw(st.integers(0, N - 1)), draw(st.integers(0, 3)))
        same_region = draw(st.booleans())
        second = (
            (draw(st.integers(0, N - 1)), first[1])
            if same_region
            else (first[0], draw(st.integers(0, 3)))
        )
        return {"kind": kind, "cells": (first, second)}
    return {
        "kind": kind,
        "region": draw(st.integers(0, 3)),
        "field": draw(st.sampled_from(["offset", "length", "flags"])),
        "tweak": draw(tweak.filter(lambda t: t[0] != "copy")),
    }


def _apply(value: int, tweak: tuple[str, Any], other: int, maximum: int) -> int:
    how, arg = tweak
    if how == "add":
        return (value + arg) % (maximum + 1)
    if how == "set":
        return int(arg) & maximum
    return other


def mutate(regions: np.ndarray, entries: np.ndarray, m: dict[str, Any]) -> None:
    if m["kind"] == "entry":
        s, r = m["cell"]
        field = m["field"]
        maximum = 2**32 - 1 if field in ("batches", "crc32c") else 2**64 - 1
        other = int(entries[m["tweak"][1]][field]) if m["tweak"][0] == "copy" else 0
        entries[s, r][field] = _apply(int(entries[s, r][field]), m["tweak"], other, maximum)
    elif m["kind"] == "swap":
        a, b = m["cells"]
        entries[a], entries[b] = entries[b].copy(), entries[a].copy()
    else:
        r, field = m["region"], m["field"]
        maximum = 2**32 - 1 if field == "flags" else 2**64 - 1
        regions[r][field] = _apply(int(regions[r][field]), m["tweak"], 0, maximum)


def meaning_changed(before: Any, after: Any) -> bool:
    """True when the index says something else: any field a reader or validator uses.

    An empty chunk's CRC32C is never used (there are no bytes to check), so changing only that
    says nothing new.
    """
    if not np.array_equal(before.meta.regions, after.meta.regions):
        return True
    e0, e1 = before.entries, after.entries
    used = ["offset", "length", "rows", "batches"]
    if any(not np.array_equal(e0[f], e1[f]) for f in used):
        return True
    nonempty = e0["length"] > 0
    return bool((e0["crc32c"][nonempty] != e1["crc32c"][nonempty]).any())


def rewrite(base: Path, out: Path, m: dict[str, Any]) -> bool:
    """Copy the pair to ``out`` with a mutated, correctly checksummed index.

    Returns whether the change alters what the index says.
    """
    shutil.copyfile(base, out)
    original = decode_index(Path(f"{base}.idx").read_bytes())
    regions = original.meta.regions.copy()
    entries = np.array(original.entries, dtype=ENTRY_DTYPE, copy=True)
    mutate(regions, entries, m)
    raw = reencode(original, regions=regions, entries=entries)
    Path(f"{out}.idx").write_bytes(raw)
    return meaning_changed(original, decode_index(raw))


def rows_of(table: pa.Table) -> list[int]:
    return [int(v) for v in table.column("row").to_pylist()]


# ---------------------------------------------------------------------- properties


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(m=mutations())
def test_a_mutated_index_gives_the_truth_or_a_library_error(
    base: tuple[Path, dict[int, list[int]]], tmp_path: Path, m: dict[str, Any]
) -> None:
    path, truth = base
    out = tmp_path / "mutated.arrow"
    changed = rewrite(path, out, m)
    outcomes = []
    for s in range(N):
        try:
            got = rows_of(ash.open_file(out).read(s, verify=True))
        except ash.ArrowShuffleError:
            outcomes.append("error")
            continue
        assert got == truth[s], f"wrong rows for subpartition {s} after {m}"
        outcomes.append("truth")
    report = validate_file(out, deep=True)
    if changed:
        assert not report.ok, f"validate --deep accepted {m}"
    else:
        assert outcomes == ["truth"] * N


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(m=mutations(), start=st.integers(0, N - 1), data=st.data())
def test_a_mutated_index_never_gives_wrong_rows_for_a_range(
    base: tuple[Path, dict[int, list[int]]],
    tmp_path: Path,
    m: dict[str, Any],
    start: int,
    data: st.DataObject,
) -> None:
    """Contiguous ranges are one read per region: their chunks must tile the region."""
    path, truth = base
    stop = data.draw(st.integers(start + 1, N))
    out = tmp_path / "mutated.arrow"
    rewrite(path, out, m)
    try:
        got = sorted(rows_of(ash.open_file(out).read(range(start, stop), verify=True)))
    except ash.ArrowShuffleError:
        return
    assert got == sorted(r for s in range(start, stop) for r in truth[s])


def test_the_base_file_reads_its_truth(base: tuple[Path, dict[int, list[int]]]) -> None:
    path, truth = base
    f = ash.open_file(path)
    for s in range(N):
        assert rows_of(f.read(s)) == truth[s]


# ---------------------------------------------------------------------- named cases


def test_swapped_entries_are_refused_even_for_a_single_subpartition(
    base: tuple[Path, dict[int, list[int]]], tmp_path: Path
) -> None:
    """Each swapped entry points at a real, correctly checksummed chunk of the other one."""
    path, _ = base
    original = decode_index(Path(f"{path}.idx").read_bytes())
    column = original.entries[:, 0]
    a, b = (int(s) for s in np.flatnonzero(column["length"] > 0)[:2])
    out = tmp_path / "swapped.arrow"
    rewrite(path, out, {"kind": "swap", "cells": ((a, 0), (b, 0))})
    for s in (a, b):
        with pytest.raises(ash.CorruptFileError) as info:
            ash.open_file(out).read(s, verify=True)
        assert info.value.rule == "V9"


def test_a_chunk_emptied_while_its_rows_stay_is_refused(
    base: tuple[Path, dict[int, list[int]]], tmp_path: Path
) -> None:
    path, _ = base
    original = decode_index(Path(f"{path}.idx").read_bytes())
    s = int(np.flatnonzero(original.entries[:, 0]["length"] > 0)[0])
    out = tmp_path / "emptied.arrow"
    rewrite(path, out, {"kind": "entry", "cell": (s, 0), "field": "length", "tweak": ("set", 0)})
    with pytest.raises(ash.CorruptFileError) as info:
        ash.open_file(out).read(s)
    assert info.value.rule == "V11"


def merge_region_into_previous(base: Path, out: Path, region: int) -> None:
    """Copy the pair to ``out`` with ``region`` lengthened over the next one, which is dropped.

    The next region's entries go with it and every checksum is recomputed: the regions still
    cover the data file (V21), and only the last subpartition's chunk, ending short of the
    lengthened region, contradicts the index.
    """
    shutil.copyfile(base, out)
    original = decode_index(Path(f"{base}.idx").read_bytes())
    regions = original.meta.regions.copy()
    regions[region]["length"] += regions[region + 1]["length"]
    keep = [r for r in range(original.num_regions) if r != region + 1]
    raw = reencode(original, regions=regions[keep].copy(), entries=original.entries[:, keep].copy())
    Path(f"{out}.idx").write_bytes(raw)


@pytest.mark.parametrize("region", [0, 1])
def test_a_region_lengthened_over_the_next_is_refused_for_every_subpartition(
    base: tuple[Path, dict[int, list[int]]], tmp_path: Path, region: int
) -> None:
    """Reads that do not reach the last subpartition would lose the swallowed region's rows."""
    import fsspec

    path, _ = base
    out = tmp_path / "merged.arrow"
    merge_region_into_previous(path, out, region)
    memory = f"memory://merged-{region}/merged.arrow"
    fs = fsspec.filesystem("memory")
    for suffix in ("", ".idx"):
        fs.pipe(memory + suffix, Path(f"{out}{suffix}").read_bytes())
    for s in range(N):
        for where, verify in ((str(out), "auto"), (str(out), True), (memory, False)):
            with pytest.raises(ash.CorruptFileError) as info:
                ash.open_file(where).read(s, verify=verify)
            assert info.value.rule == "V9", (where, s)
    assert not validate_file(out).ok


def test_a_region_lengthened_over_the_next_is_refused_by_a_polars_scan(
    base: tuple[Path, dict[int, list[int]]], tmp_path: Path
) -> None:
    pytest.importorskip("polars")
    import arrowshuffle.polars as ash_polars

    path, _ = base
    out = tmp_path / "merged.arrow"
    merge_region_into_previous(path, out, 0)
    for s in range(N):
        with pytest.raises(ash.CorruptFileError):
            ash_polars.scan(str(out), subpartitions=s).collect()


LAYOUT_VECTORS = {
    "swapped_entries": "V9",
    "length_zero_rows_kept": "V11",
    "batches_without_rows": "V11",
    "undefined_region_flag": "V20",
    "overlapping_chunks": "V9",
    "broadcast_mismatch": "V10",
    "batches_without_bytes": "V11",
    "chunk_past_end": "V8",
}


@pytest.mark.parametrize(("vector", "rule"), sorted(LAYOUT_VECTORS.items()))
def test_reader_refuses_every_broken_layout_vector(vector: str, rule: str) -> None:
    """Reading every subpartition of a broken layout raises its rule at least once and never
    returns rows that differ from what good_basic's (or good_broadcast's) reader returns."""
    base_name = "good_broadcast" if vector == "broadcast_mismatch" else "good_basic"
    good = ash.open_file(VECTORS / f"{base_name}.arrow")
    rules = set()
    for s in range(good.num_subpartitions):
        try:
            got = ash.open_file(VECTORS / f"{vector}.arrow").read(s, verify=True)
        except ash.CorruptFileError as exc:
            rules.add(exc.rule)
            continue
        assert got.equals(good.read(s))
    assert rule in rules


def test_rows_moved_between_chunks_are_caught_by_a_range_read() -> None:
    """The totals of a range agree; each chunk's own row count does not."""
    f = ash.open_file(VECTORS / "chunk_rows_wrong.arrow")
    with pytest.raises(ash.CorruptFileError) as info:
        f.read(range(0, 2))
    assert info.value.rule == "V17"


def test_validate_deep_cli_exits_1_for_a_swap(
    base: tuple[Path, dict[int, list[int]]], tmp_path: Path
) -> None:
    path, _ = base
    out = tmp_path / "swapped.arrow"
    rewrite(path, out, {"kind": "swap", "cells": ((0, 0), (1, 0))})
    result = subprocess.run(
        [sys.executable, "-m", "arrowshuffle.cli", "validate", "--deep", str(out)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 1, result.stderr
    assert "[V9]" in result.stdout
    assert "Traceback" not in result.stderr


@pytest.mark.s3
@pytest.mark.parametrize("vector", ["swapped_entries", "length_zero_rows_kept"])
def test_a_ranged_reader_proves_chunks_against_their_neighbours(
    s3_endpoint: Any, s3_bucket: str, vector: str
) -> None:
    """On object storage the reader fetches only slices of the index: it asks for the
    neighbours' entries in the same request, and refuses what they contradict."""
    import fsspec

    options = s3_endpoint.storage_options()
    fs = fsspec.filesystem("s3", **options)
    for suffix in ("", ".idx"):
        fs.pipe(
            f"{s3_bucket}/{vector}.arrow{suffix}",
            (VECTORS / f"{vector}.arrow{suffix}").read_bytes(),
        )
    good = ash.open_file(VECTORS / "good_basic.arrow")
    refused = 0
    for s in range(good.num_subpartitions):
        try:
            got = ash.open_file(f"{s3_bucket}/{vector}.arrow", options).read(s, verify=True)
        except ash.CorruptFileError as exc:
            assert exc.rule in ("V9", "V11", "V16", "V17")
            refused += 1
            continue
        assert got.equals(good.read(s))
    assert refused >= 1


@pytest.mark.parametrize("verify", [False, True])
def test_a_ranged_reader_of_a_large_index_proves_a_run_against_its_neighbours(
    tmp_path: Path, verify: bool
) -> None:
    """An index larger than the first request is read in slices: with or without ``verify``
    the neighbours' entries come along, so a swap of two entries is refused, never read as
    the other subpartition's rows."""
    import fsspec

    path = tmp_path / "large.arrow"
    n = 3000
    keys = np.arange(30_000, dtype=np.int64)
    ash.write(pa.table({"k": keys}), path, num_subpartitions=n, by="k", compression="none")
    raw = Path(f"{path}.idx").read_bytes()
    assert len(raw) > 64 * 1024  # more than the first request fetches: a ranged open
    original = decode_index(raw)
    entries = np.array(original.entries, dtype=ENTRY_DTYPE, copy=True)
    a, b = (int(s) for s in np.flatnonzero(entries[:, 0]["length"] > 0)[10:12])
    entries[[a, b], 0] = entries[[b, a], 0]
    url = f"memory://large-{int(verify)}/large.arrow"
    fs = fsspec.filesystem("memory")
    fs.pipe(url, path.read_bytes())
    fs.pipe(url + ".idx", reencode(original, entries=entries))
    for s in (a, b):
        with pytest.raises(ash.CorruptFileError) as info:
            ash.open_file(url).read(s, verify=verify)
        assert info.value.rule == "V9"


@pytest.mark.parametrize("max_gap", [0, 256 * 1024], ids=["ends-fetched", "whole-file"])
@pytest.mark.parametrize("edit", ["schema", "file id"])
def test_a_ranged_reader_refuses_a_data_file_of_another_schema_or_index(
    base: tuple[Path, dict[int, list[int]]], tmp_path: Path, max_gap: int, edit: str
) -> None:
    """Chunks decoded with a schema they were not written with give other values: a ranged
    reader checks the data file's schema and file id (V15, V14) before it decodes any chunk,
    whether its first read is the whole (small) file or the ends are fetched on their own."""
    import fsspec

    from arrowshuffle.readers.scheduler import ReadOptions

    path, _ = base
    original = decode_index(Path(f"{path}.idx").read_bytes())
    if edit == "schema":  # the row ids declared as float64: the same width, other values
        raw = reencode(original, schema=pa.schema([("row", pa.float64()), ("s", pa.string())]))
        rule = "V15"
    else:
        raw = reencode(original, file_id=bytes(16))
        rule = "V14"
    url = f"memory://other-{edit.replace(' ', '-')}-{max_gap}/f.arrow"
    fs = fsspec.filesystem("memory")
    fs.pipe(url, path.read_bytes())
    fs.pipe(url + ".idx", raw)
    options = ReadOptions(max_gap=max_gap)
    for verify in (False, True):
        with pytest.raises(ash.CorruptFileError) as info:  # not one batch is handed out
            next(iter(ash.open_file(url).iter_batches(range(N), verify=verify, options=options)))
        assert info.value.rule == rule


def test_a_hostile_length_in_a_large_remote_index_is_reported_not_requested(
    tmp_path: Path,
) -> None:
    """An index larger than the first request, its schema length set near 2**32 and its
    sections and header checksum made to agree: the reader learns the object's size before
    asking for gigabytes, and reports V4 (spec.md, 5.10)."""
    import struct

    import fsspec

    from arrowshuffle.format.crc import crc32c
    from arrowshuffle.format.index import _HEADER, IndexSections

    path = tmp_path / "large.arrow"
    keys = np.arange(30_000, dtype=np.int64)
    ash.write(pa.table({"k": keys}), path, num_subpartitions=3000, by="k", compression="none")
    raw = bytearray(Path(f"{path}.idx").read_bytes())
    assert len(raw) > 64 * 1024
    fields = list(_HEADER.unpack(bytes(raw[: _HEADER.size])))
    fields[12] = 2**32 - 16  # the schema section's length
    sections = IndexSections.compute(fields[3], fields[12], fields[13], fields[10], fields[11])
    fields[14], fields[8] = sections.entries_offset, sections.index_length
    raw[: _HEADER.size] = _HEADER.pack(*fields)
    struct.pack_into("<I", raw, _HEADER.size - 4, crc32c(bytes(raw[: _HEADER.size - 4])))
    url = "memory://hostile-length/large.arrow"
    fs = fsspec.filesystem("memory")
    fs.pipe(url, path.read_bytes())
    fs.pipe(url + ".idx", bytes(raw))
    with pytest.raises(ash.CorruptFileError) as info:
        ash.open_file(url).read(5)
    assert info.value.rule == "V4"
