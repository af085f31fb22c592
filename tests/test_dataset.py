"""Datasets and files read by subpartition set, range or consumer, checked against pyarrow.

The oracle reads each data file whole with pyarrow's own IPC reader and keeps the rows whose
``sp`` column (written with every row) is selected.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from dataset_factory import (
    SCHEMA,
    WrittenDataset,
    canonical,
    expected_rows,
    read_whole_file,
    write_dataset,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from manifest_edits import manifest_in_force, replace_manifest

from arrowshuffle.format.errors import (
    CorruptFileError,
    InvalidOptionError,
    MissingObjectError,
)
from arrowshuffle.readers.assign import assign
from arrowshuffle.readers.dataset import ShuffleDataset, open_dataset, open_shuffle
from arrowshuffle.readers.file_reader import ShuffleFile, open_file
from arrowshuffle.readers.scheduler import ReadOptions
from arrowshuffle.readers.selection import Selection
from arrowshuffle.readers.validate_dataset import validate_dataset
from arrowshuffle.writers.dataset_writer import prepare_directory

N = 8


@pytest.fixture(scope="module")
def plain(tmp_path_factory) -> WrittenDataset:
    return write_dataset(str(tmp_path_factory.mktemp("plain")), num_files=4, num_subpartitions=N)


@pytest.fixture(scope="module")
def mixed(tmp_path_factory) -> WrittenDataset:
    """Broadcast regions between regular ones, skewed ids, LZ4 bodies."""
    return write_dataset(
        str(tmp_path_factory.mktemp("mixed")),
        num_files=3,
        num_subpartitions=N,
        batches_per_file=6,
        broadcast_batches=(1, 4),
        skew=True,
        compression="lz4",
        seed=7,
    )


@pytest.fixture(scope="module")
def whole_files(plain, mixed) -> dict[str, list[pa.Table]]:
    return {ds.url: [read_whole_file(u) for u in ds.data_urls] for ds in (plain, mixed)}


selections = st.one_of(
    st.integers(0, N - 1),
    st.builds(
        lambda a, b: range(min(a, b), max(a, b) + 1), st.integers(0, N - 1), st.integers(0, N - 1)
    ),
    st.lists(st.integers(0, N - 1), max_size=N + 2),
)


def as_ids(selection) -> list[int]:
    return [selection] if isinstance(selection, int) else list(selection)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(selection=selections, which=st.sampled_from(["plain", "mixed"]))
def test_dataset_read_matches_pyarrow(plain, mixed, whole_files, selection, which):
    ds = plain if which == "plain" else mixed
    got = open_dataset(ds.url).read(selection)
    expected = expected_rows(whole_files[ds.url], as_ids(selection))
    assert got.schema.equals(SCHEMA)
    assert canonical(got).equals(canonical(expected))


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(selection=selections, which=st.sampled_from(["plain", "mixed"]), f=st.integers(0, 2))
def test_file_read_matches_pyarrow(plain, mixed, whole_files, selection, which, f):
    ds = plain if which == "plain" else mixed
    got = open_file(ds.data_urls[f]).read(selection)
    expected = expected_rows([whole_files[ds.url][f]], as_ids(selection))
    assert canonical(got).equals(canonical(expected))


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    num_consumers=st.integers(1, 12),
    pattern=st.sampled_from(["all_to_all", "pointwise"]),
    which=st.sampled_from(["plain", "mixed"]),
)
def test_consumer_reads_match_pyarrow_and_cover_everything_once(
    plain, mixed, whole_files, num_consumers, pattern, which
):
    ds = plain if which == "plain" else mixed
    dataset = open_dataset(ds.url)
    tables = whole_files[ds.url]
    plan = assign(N, num_consumers, pattern, num_producers=len(tables))
    parts = []
    for consumer in range(num_consumers):
        got = dataset.read(consumer=consumer, num_consumers=num_consumers, pattern=pattern)
        # What pyarrow says this consumer should get, from the assignment's pairs.
        expected = [expected_rows([tables[f]], list(r)) for f, r in plan[consumer].pairs()]
        want = pa.concat_tables(expected) if expected else SCHEMA.empty_table()
        assert canonical(got).equals(canonical(want))
        parts.append(got)
    everything = pa.concat_tables(parts)
    assert canonical(everything).equals(canonical(expected_rows(tables, range(N))))


def test_one_subpartition_comes_back_in_write_order_file_by_file(plain):
    got = open_dataset(plain.url).read(5)
    files = got["file"].to_numpy()
    assert np.all(np.diff(files) >= 0), "files must come out in manifest order"
    for f in np.unique(files):
        ids = got.filter(pc.equal(got["file"], f))["id"].to_numpy()
        assert np.all(np.diff(ids) > 0), "one subpartition keeps the order rows were written"


def test_a_range_comes_back_region_by_region_in_subpartition_order(plain):
    shuffle_file = open_file(plain.data_urls[0])
    assert shuffle_file.num_regions > 1
    got = shuffle_file.read(range(2, 6))
    sp = got["sp"].to_numpy()
    # Within a region subpartitions ascend; a drop marks the start of the next region.
    drops = int(np.sum(np.diff(sp) < 0))
    assert drops <= shuffle_file.num_regions - 1


def test_columns_are_projected_in_the_order_asked(plain):
    got = open_dataset(plain.url).read([1, 2], columns=["name", "id"])
    assert got.column_names == ["name", "id"]
    full = open_dataset(plain.url).read([1, 2])
    assert canonical(got.select(["id", "name"])).equals(canonical(full.select(["id", "name"])))


def test_iter_batches_streams_the_same_rows_as_read(mixed):
    dataset = open_dataset(mixed.url)
    streamed = pa.Table.from_batches(list(dataset.iter_batches([0, 3])), schema=SCHEMA)
    assert streamed.equals(dataset.read([0, 3]))


def test_small_in_flight_budget_and_no_coalescing_give_the_same_rows(mixed):
    dataset = open_dataset(mixed.url)
    small = dataset.read(
        range(0, N), verify=True, options=ReadOptions(max_in_flight=1, max_gap=0, max_block=1)
    )
    assert small.equals(dataset.read(range(0, N)))


def test_broadcast_chunks_are_planned_once_per_file(mixed):
    dataset = open_dataset(mixed.url)
    for read in dataset.reads(Selection(range(N))):
        f = read.file
        ranges = dataset.file(f).chunk_ranges(read.subpartitions)
        broadcast = [c for c in ranges if c.broadcast]
        assert len({c.offset for c in broadcast}) == len(broadcast)
        assert all(c.repeat == N for c in broadcast)
        assert dataset.file(f).num_regions >= len(broadcast) > 0


def test_selection_errors_are_clear(plain):
    dataset = open_dataset(plain.url)
    with pytest.raises(InvalidOptionError, match="subpartition 8 does not exist"):
        dataset.read(8)
    with pytest.raises(InvalidOptionError, match="not both"):
        dataset.read(1, consumer=0, num_consumers=2)
    with pytest.raises(InvalidOptionError, match="no column 'nope'"):
        dataset.read(1, columns=["nope"])
    with pytest.raises(InvalidOptionError, match=r"consumer must be in \[0, 2\)"):
        dataset.read(consumer=2, num_consumers=2)


def test_open_shuffle_tells_datasets_from_files(plain, tmp_path):
    assert isinstance(open_shuffle(plain.url), ShuffleDataset)
    assert isinstance(open_shuffle(plain.data_urls[0]), ShuffleFile)
    with pytest.raises(MissingObjectError, match="is not an arrowshuffle dataset"):
        open_dataset(tmp_path)


def test_dataset_stats_add_up(plain):
    dataset = open_dataset(plain.url)
    stats = dataset.stats()
    assert stats.num_rows == sum(dataset.file(i).num_regions * N for i in range(dataset.num_files))
    assert pc.sum(stats["rows"]).as_py() == dataset.num_rows
    assert sorted(set(stats["file"].to_pylist())) == list(range(dataset.num_files))


def test_empty_dataset_reads_as_an_empty_table(tmp_path):
    from arrowshuffle.writers.dataset_writer import commit_dataset

    directory = prepare_directory(str(tmp_path / "empty"), None)
    commit_dataset(directory, [], schema=SCHEMA, num_subpartitions=4, partitioner={"name": "x"})
    dataset = open_dataset(directory.url)
    assert dataset.read().num_rows == 0
    assert dataset.read(consumer=1, num_consumers=3, pattern="pointwise").num_rows == 0
    assert dataset.stats().num_rows == 0


def test_a_manifest_that_disagrees_with_an_index_is_refused(tmp_path):
    ds = write_dataset(str(tmp_path / "ds"), num_files=2, num_subpartitions=4)
    first = ds.manifest.files[0]
    wrong_rows = dataclasses.replace(first, rows=first.rows + 1)
    replace_manifest(
        ds.url, dataclasses.replace(ds.manifest, files=(wrong_rows, ds.manifest.files[1]))
    )
    dataset = open_dataset(ds.url)
    with pytest.raises(CorruptFileError, match=r"\[M7\].*manifest lists"):
        dataset.read(0)
    assert manifest_in_force(tmp_path / "ds").exists()


# ---------------------------------------------------------------------- dataset validation


def _rules(report) -> set[str]:
    return {v.rule for _, v in report.all_violations}


@pytest.fixture
def fresh(tmp_path) -> WrittenDataset:
    return write_dataset(str(tmp_path / "ds"), num_files=3, num_subpartitions=4, seed=11)


def _rewrite_manifest(ds: WrittenDataset, **changes) -> None:
    replace_manifest(ds.url, dataclasses.replace(ds.manifest, **changes))


def test_a_valid_dataset_passes_and_reports_progress(fresh, tmp_path):
    (tmp_path / "ds" / "part-00099-stale.arrow").write_bytes(b"left over by a failed task")
    seen = []
    report = validate_dataset(fresh.url, deep=True, progress=lambda *a: seen.append(a))
    assert report.ok, report.all_violations
    assert [(done, total) for done, total, _ in seen] == [(1, 3), (2, 3), (3, 3)]
    assert report.summary["files"] == 3 and report.summary["rows"] == fresh.manifest.total_rows
    assert report.summary["unlisted"] == ["part-00099-stale.arrow"]
    assert [f.name for f in report.files] == [f.data for f in fresh.manifest.files]
    assert report.to_dict()["ok"] is True


def test_a_missing_or_resized_file_breaks_m4(fresh, tmp_path):
    names = [f.data for f in fresh.manifest.files]
    (tmp_path / "ds" / names[0]).unlink()
    with open(tmp_path / "ds" / (names[1] + ".idx"), "ab") as index:
        index.write(b"\0" * 8)
    report = validate_dataset(fresh.url)
    assert not report.ok
    by_file = {f.name: {v.rule for v in f.violations} for f in report.files}
    assert "M4" in by_file[names[0]] and "M4" in by_file[names[1]]
    assert "V4" in by_file[names[1]]  # the index's own rule: longer than it declares
    assert by_file[names[2]] == set()
    missing = [v.message for v in report.files[0].violations if v.rule == "M4"]
    assert any("missing" in m and names[0] in m for m in missing)


def test_a_wrong_listed_checksum_breaks_m5(fresh):
    files = list(fresh.manifest.files)
    files[2] = dataclasses.replace(files[2], index_crc32c=files[2].index_crc32c ^ 1)
    _rewrite_manifest(fresh, files=tuple(files))
    report = validate_dataset(fresh.url)
    assert _rules(report) == {"M5"}
    assert report.files[2].violations[0].rule == "M5"


def test_a_different_partitioner_or_count_breaks_m6(fresh):
    _rewrite_manifest(fresh, partitioner={"name": "hash", "columns": ["id"]})
    assert _rules(validate_dataset(fresh.url)) == {"M6"}
    _rewrite_manifest(fresh, num_subpartitions=5, sizes=None)
    report = validate_dataset(fresh.url)
    assert _rules(report) == {"M6"}
    assert all(any("5" in v.message for v in f.violations) for f in report.files)


def test_wrong_rows_or_regions_break_m7(fresh):
    files = list(fresh.manifest.files)
    files[0] = dataclasses.replace(files[0], rows=files[0].rows + 3)
    files[1] = dataclasses.replace(files[1], regions=files[1].regions + 1)
    _rewrite_manifest(fresh, files=tuple(files))
    report = validate_dataset(fresh.url)
    assert _rules(report) == {"M7"}
    assert [len(f.violations) for f in report.files] == [1, 1, 0]


def test_an_index_listed_under_another_name_breaks_m3(fresh):
    files = list(fresh.manifest.files)
    files[0] = dataclasses.replace(files[0], index=files[1].index)
    _rewrite_manifest(fresh, files=tuple(files))
    report = validate_dataset(fresh.url)
    assert {v.rule for v in report.violations} == {"M3"}
    assert not report.ok


def test_a_broken_manifest_is_reported_not_raised(fresh, tmp_path):
    replace_manifest(tmp_path / "ds", b'{"kind": "something else"}')
    report = validate_dataset(fresh.url)
    assert [v.rule for v in report.violations] == ["M1"] and report.files == []
    with pytest.raises(MissingObjectError, match="is not an arrowshuffle dataset"):
        validate_dataset(tmp_path / "nothing-here")


def test_deep_validation_finds_a_damaged_chunk(fresh, tmp_path):
    stats = open_file(fresh.data_urls[1]).stats()
    chunk = stats.filter(pc.greater(stats["bytes"], 0)).slice(0, 1).to_pylist()[0]
    path = tmp_path / "ds" / fresh.manifest.files[1].data
    data = bytearray(path.read_bytes())
    data[chunk["offset"] + chunk["bytes"] - 9] ^= 0xFF
    path.write_bytes(bytes(data))
    assert validate_dataset(fresh.url).ok
    deep = validate_dataset(fresh.url, deep=True)
    assert "V16" in {v.rule for v in deep.files[1].violations}
