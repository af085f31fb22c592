"""The polars integration: LazyFrames over files and datasets, with pushdown applied by us."""

from __future__ import annotations

import dataclasses
import sys

import pyarrow as pa
import pytest
from dataset_factory import SCHEMA, canonical, expected_rows, read_whole_file, write_dataset
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from arrowshuffle import ReadOptions, open_dataset, open_file
from arrowshuffle.format.errors import InvalidOptionError, MissingObjectError
from arrowshuffle.readers.assign import assign

pl = pytest.importorskip("polars")
asp = pytest.importorskip("arrowshuffle.polars")

N = 6


@pytest.fixture(scope="module")
def ds(tmp_path_factory):
    return write_dataset(
        str(tmp_path_factory.mktemp("pl")),
        num_files=3,
        num_subpartitions=N,
        batches_per_file=5,
        broadcast_batches=(2,),
        seed=3,
    )


@pytest.fixture(scope="module")
def tables(ds):
    return [read_whole_file(u) for u in ds.data_urls]


def to_arrow(frame) -> pa.Table:
    return frame.to_arrow().cast(SCHEMA) if frame.width == len(SCHEMA) else frame.to_arrow()


selections = st.one_of(
    st.none(),
    st.integers(0, N - 1),
    st.lists(st.integers(0, N - 1), max_size=N),
    st.builds(lambda a: range(a, N), st.integers(0, N - 1)),
)


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(selection=selections, engine=st.sampled_from(["in-memory", "streaming"]))
def test_scan_matches_pyarrow(ds, tables, selection, engine):
    got = to_arrow(asp.scan(ds.url, selection).collect(engine=engine))
    ids = (
        range(N)
        if selection is None
        else ([selection] if isinstance(selection, int) else selection)
    )
    assert canonical(got).equals(canonical(expected_rows(tables, ids)))


@settings(
    max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    num_consumers=st.integers(1, 7),
    pattern=st.sampled_from(["all_to_all", "pointwise"]),
    consumer_seed=st.integers(0, 100),
)
def test_consumer_scan_matches_pyarrow(ds, tables, num_consumers, pattern, consumer_seed):
    consumer = consumer_seed % num_consumers
    frame = asp.scan(ds.url, consumer=consumer, num_consumers=num_consumers, pattern=pattern)
    got = to_arrow(frame.collect())
    pairs = assign(N, num_consumers, pattern, num_producers=len(tables))[consumer].pairs()
    parts = [expected_rows([tables[f]], list(r)) for f, r in pairs]
    want = pa.concat_tables(parts) if parts else SCHEMA.empty_table()
    assert canonical(got).equals(canonical(want))


@pytest.mark.parametrize("engine", ["in-memory", "streaming"])
def test_projection_predicate_and_limit_are_applied(ds, tables, engine):
    lazy = asp.scan(ds.url, [1, 4])
    expected = pl.from_arrow(expected_rows(tables, [1, 4]))
    query = lazy.filter(pl.col("value") > 0.25).select("name", "id")
    got = query.collect(engine=engine).sort("id")
    want = expected.filter(pl.col("value") > 0.25).select("name", "id").sort("id")
    assert got.equals(want)
    assert got.columns == ["name", "id"]
    # polars does not cut the source's output to the limit: the source must.
    head = lazy.head(7).collect(engine=engine)
    assert head.height == 7
    assert set(head["sp"].to_list()) <= {-1, 1, 4}
    filtered_head = lazy.filter(pl.col("sp") == 4).head(3).collect(engine=engine)
    assert filtered_head.height == 3 and set(filtered_head["sp"].to_list()) == {4}


def test_aggregates_and_counts(ds, tables):
    lazy = asp.scan(ds.url, 2)
    expected = expected_rows(tables, [2])
    assert lazy.select(pl.len()).collect().item() == expected.num_rows
    assert lazy.select(pl.col("id").sum()).collect(engine="streaming").item() == sum(
        expected["id"].to_pylist()
    )


def test_scan_file_and_read(ds, tables):
    frame = asp.read(ds.data_urls[1], [0, 5])
    assert canonical(to_arrow(frame)).equals(canonical(expected_rows([tables[1]], [0, 5])))
    lazy = asp.scan_file(ds.data_urls[1], consumer=1, num_consumers=2)
    # One file is one producer: consumer 1 of 2 gets the upper half of the subpartitions.
    got = to_arrow(lazy.collect())
    assert canonical(got).equals(canonical(expected_rows([tables[1]], range(3, 6))))
    assert asp.scan_dataset(ds.url, 3).collect().height == expected_rows(tables, [3]).num_rows


def test_schema_is_known_without_reading_data(ds):
    schema = asp.scan(ds.url).collect_schema()
    assert schema == pl.Schema(
        {
            "id": pl.Int64,
            "sp": pl.Int32,
            "file": pl.Int32,
            "value": pl.Float64,
            "name": pl.String,
        }
    )


def test_bad_selections_fail_at_scan_time(ds, tmp_path):
    with pytest.raises(InvalidOptionError, match="subpartition 6 does not exist"):
        asp.scan(ds.url, [6])
    with pytest.raises(InvalidOptionError, match="not both"):
        asp.scan(ds.url, 1, consumer=0, num_consumers=2)
    with pytest.raises(MissingObjectError):
        asp.scan(str(tmp_path / "nothing.arrow"))


def test_missing_polars_gives_an_install_hint(ds, monkeypatch):
    monkeypatch.setitem(sys.modules, "polars", None)
    with pytest.raises(ImportError, match=r"pip install 'arrowshuffle\[polars\]'"):
        asp.scan(ds.url)


# ---------------------------------------------------------------------- planned tasks


@pytest.fixture(scope="module")
def hot(tmp_path_factory):
    """Most rows in subpartition 0, and a broadcast batch in every file."""
    return write_dataset(
        str(tmp_path_factory.mktemp("pl-hot")),
        num_files=4,
        num_subpartitions=N,
        batches_per_file=5,
        rows_per_batch=60,
        broadcast_batches=(1,),
        skew=True,
        seed=5,
    )


#: Small enough that subpartition 0 is split over files and regions, the rest coalesced.
PLAN = {"target_bytes": 3000, "skew_factor": 2.0, "skew_min_bytes": 0}


def collect_all(frames) -> pa.Table:
    tables = [to_arrow(f) for f in pl.collect_all(frames)]
    return pa.concat_tables(tables) if tables else SCHEMA.empty_table()


@pytest.mark.parametrize("selection", [None, [0, 2, 3], range(1, N)])
def test_scan_tasks_together_equal_scan(hot, selection):
    frames = asp.scan_tasks(hot.url, subpartitions=selection, **PLAN)
    planned = open_dataset(hot.url).plan(subpartitions=selection, **PLAN)
    assert isinstance(frames, list) and len(frames) == len(planned)
    if selection is None:
        assert any(len(t.files) < 4 for t in planned), "the hot subpartition should be split"
    got = collect_all(frames)
    want = to_arrow(asp.scan(hot.url, selection).collect())
    assert canonical(got).equals(canonical(want))


@pytest.mark.parametrize("engine", ["in-memory", "streaming"])
def test_scan_of_one_task_reads_that_task(hot, engine):
    ds = open_dataset(hot.url)
    for task in ds.plan(**PLAN):
        got = to_arrow(asp.scan(hot.url, task=task).collect(engine=engine))
        assert got.num_rows == task.rows
        assert canonical(got).equals(canonical(ds.read(task=task)))


def test_pushdown_applies_to_a_task(hot):
    ds = open_dataset(hot.url)
    task = max(ds.plan(**PLAN), key=lambda t: t.rows)
    lazy = asp.scan(hot.url, task=task, options=ReadOptions(max_gap=0))
    want = pl.from_arrow(ds.read(task=task))
    got = lazy.filter(pl.col("value") > 0).select("id", "sp").collect().sort("id")
    assert got.equals(want.filter(pl.col("value") > 0).select("id", "sp").sort("id"))
    assert lazy.head(5).collect().height == 5
    assert "task=(" in lazy.explain()


def test_read_and_scan_file_take_a_task(hot):
    one = open_file(hot.data_urls[2])
    tasks = one.plan(**PLAN)
    assert all(t.files == (0,) for t in tasks)
    frames = [asp.scan_file(hot.data_urls[2], task=t) for t in tasks]
    assert canonical(collect_all(frames)).equals(canonical(one.read()))
    first = asp.read(hot.data_urls[2], task=tasks[0])
    assert canonical(to_arrow(first)).equals(canonical(one.read(task=tasks[0])))
    frames = asp.scan_tasks(hot.data_urls[2], **PLAN)
    assert canonical(collect_all(frames)).equals(canonical(one.read()))


def test_scan_tasks_options(hot):
    frames = asp.scan_tasks(hot.url, max_tasks=2, options=ReadOptions(max_in_flight=4096))
    assert len(frames) <= 2
    assert canonical(collect_all(frames)).equals(canonical(open_dataset(hot.url).read()))
    assert asp.scan_tasks(hot.url, subpartitions=[]) == []


def test_bad_tasks_fail_at_scan_time(hot, ds):
    task = open_dataset(hot.url).plan(**PLAN)[0]
    with pytest.raises(InvalidOptionError, match="not both"):
        asp.scan(hot.url, 1, task=task)
    split = next(t for t in open_dataset(hot.url).plan(**PLAN) if t.files[-1] == 3)
    with pytest.raises(InvalidOptionError, match=r"the task was planned on version 1 \(commit"):
        asp.scan(ds.url, task=split)
    made_by_hand = dataclasses.replace(split, snapshot="")  # not bound to any data
    with pytest.raises(InvalidOptionError, match="reads file 3, the reader has 3 files"):
        asp.scan(ds.url, task=made_by_hand)
    with pytest.raises(InvalidOptionError, match="PlannedRead"):
        asp.scan(hot.url, task=(0, 1))
    with pytest.raises(InvalidOptionError, match="target_bytes"):
        asp.scan_tasks(hot.url, target_bytes=0)
    with pytest.raises(InvalidOptionError, match="options must be a ReadOptions"):
        asp.scan(hot.url, options={"max_gap": 0})


def test_scan_tasks_on_s3(s3_endpoint, s3_bucket):
    storage = s3_endpoint.storage_options()
    written = write_dataset(
        f"{s3_bucket}/hot",
        num_files=3,
        num_subpartitions=N,
        batches_per_file=4,
        broadcast_batches=(2,),
        skew=True,
        seed=11,
        storage_options=storage,
    )
    frames = asp.scan_tasks(written.url, storage_options=storage, **PLAN)
    planned = open_dataset(written.url, storage).plan(**PLAN)
    assert len(frames) == len(planned) and any(len(t.files) < 3 for t in planned)
    got = collect_all(frames)
    want = to_arrow(asp.scan(written.url, storage_options=storage).collect())
    assert canonical(got).equals(canonical(want))
    task = planned[0]
    one = asp.scan(written.url, storage_options=storage, task=task, verify=True).collect()
    assert one.height == task.rows


# ------------------------------------------------------------- opened datasets, the path cache


def test_scan_takes_an_opened_dataset_or_file(ds, tables):
    opened = open_dataset(ds.url)
    for s in range(N):
        got = to_arrow(asp.scan(opened, s).collect())
        assert canonical(got).equals(canonical(expected_rows(tables, [s])))
    assert canonical(to_arrow(asp.scan_dataset(opened).collect())).equals(
        canonical(to_arrow(asp.scan(ds.url).collect()))
    )
    one = open_file(ds.data_urls[0])
    got = to_arrow(asp.scan_file(one, [0, 1]).collect())
    assert canonical(got).equals(canonical(expected_rows(tables[:1], [0, 1])))
    assert len(asp.scan_tasks(opened, "1KiB")) > 1
    with pytest.raises(InvalidOptionError, match="storage_options apply to a path"):
        asp.scan(opened, storage_options={"anon": True})
    with pytest.raises(InvalidOptionError, match="an opened dataset, found ShuffleFile"):
        asp.scan_dataset(one)
    with pytest.raises(InvalidOptionError, match="an opened file, found ShuffleDataset"):
        asp.scan_file(opened)


def test_scans_by_path_share_one_opened_dataset_per_version(tmp_path):
    from arrowshuffle import write_dataset as write

    path = str(tmp_path / "ds")
    first = pa.table({"k": pa.array(range(10), pa.int64())})
    write(first, path, num_subpartitions=2, by="k")
    asp.clear_cache()
    a, b = asp.scan(path, 0), asp.scan(path, 1)
    assert asp._open(path, None) is asp._open(path, None)  # opened once, while the version holds
    assert sorted(pl.concat([a.collect(), b.collect()])["k"]) == list(range(10))
    # A commit makes a new version: the next scan by path sees it, frames built before do not.
    write(
        pa.table({"k": pa.array(range(10, 15), pa.int64())}),
        path,
        num_subpartitions=2,
        by="k",
        mode="append",
    )
    both = pl.concat([asp.scan(path, s).collect() for s in (0, 1)])
    assert sorted(both["k"]) == list(range(15))
    assert sorted(pl.concat([a.collect(), b.collect()])["k"]) == list(range(10))
    # An overwrite too, even with the same number of rows.
    write(
        pa.table({"k": pa.array(range(100, 115), pa.int64())}),
        path,
        num_subpartitions=2,
        by="k",
        mode="overwrite",
    )
    assert sorted(asp.read(path)["k"]) == list(range(100, 115))
    opened = asp._open(path, None)
    asp.clear_cache()
    assert asp._open(path, None) is not opened


def test_a_dataset_written_again_at_the_same_path_is_not_taken_from_the_cache(tmp_path):
    import shutil

    from arrowshuffle import write_dataset as write

    path = str(tmp_path / "ds")
    write(pa.table({"k": pa.array([1, 2], pa.int64())}), path, num_subpartitions=2, by="k")
    assert sorted(asp.read(path)["k"]) == [1, 2]
    shutil.rmtree(path)  # the new dataset starts again at version 1
    write(pa.table({"k": pa.array([7, 8, 9], pa.int64())}), path, num_subpartitions=2, by="k")
    assert sorted(asp.read(path)["k"]) == [7, 8, 9]


def test_a_rewrite_whose_version_file_has_the_old_time_is_not_taken_from_the_cache(tmp_path):
    # File times can be coarse (1-2 s on some file systems): the same version number and time
    # must not serve the removed dataset's rows.
    import os
    import shutil

    from arrowshuffle import write_dataset as write

    path = tmp_path / "ds"
    versions = path / "_arrowshuffle_versions"
    write(pa.table({"k": pa.array([1] * 5, pa.int64())}), path, num_subpartitions=2, by="k")
    assert asp.read(path)["k"].to_list() == [1] * 5
    (first,) = versions.iterdir()
    old = os.stat(first)
    shutil.rmtree(path)
    write(pa.table({"k": pa.array([2] * 3, pa.int64())}), path, num_subpartitions=2, by="k")
    (again,) = versions.iterdir()
    os.utime(again, ns=(old.st_atime_ns, old.st_mtime_ns))
    assert asp.read(path)["k"].to_list() == [2] * 3
