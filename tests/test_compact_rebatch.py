"""Compaction that re-batches tiny chunks: fewer, larger batches, same rows in the same order."""

from __future__ import annotations

import itertools
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import arrowshuffle
from arrowshuffle.cli import main
from arrowshuffle.format.errors import InvalidOptionError
from arrowshuffle.format.naming import new_file_name, new_job_id
from arrowshuffle.writers.compact import (
    AUTO_REBATCH_BYTES,
    commit_compaction,
    merge_files,
    start_compaction,
)
from arrowshuffle.writers.merge import group_batches

STRING_STRUCT = pa.struct([("a", pa.int64()), ("b", pa.string_view())])


def _typed_table(first: int, rows: int, seed: int) -> pa.Table:
    """Rows with view, nested and dictionary-encoded columns (the writer decodes dictionaries)."""
    rng = np.random.default_rng(seed)
    ids = np.arange(first, first + rows, dtype=np.int64)
    strings = [None if i % 7 == 0 else f"s{i}-" + "x" * int(i % 29) for i in ids.tolist()]
    return pa.table(
        {
            "id": ids,
            "k": rng.integers(0, 50, rows),
            "sv": pa.array(strings, pa.string_view()),
            "bv": pa.array([None if s is None else s.encode() for s in strings], pa.binary_view()),
            "lst": pa.array(
                [None if i % 5 == 0 else [i] * (i % 3) for i in ids.tolist()], pa.list_(pa.int64())
            ),
            "st": pa.array(
                [{"a": i, "b": s} for i, s in zip(ids.tolist(), strings, strict=True)],
                STRING_STRUCT,
            ),
            "lv": pa.array([[i, i + 1] for i in ids.tolist()], pa.list_view(pa.int32())),
            "dict": pa.array(strings, pa.string()).dictionary_encode(),
        }
    )


def _plain_table(first: int, rows: int, seed: int) -> pa.Table:
    rng = np.random.default_rng(seed)
    return pa.table(
        {
            "id": np.arange(first, first + rows, dtype=np.int64),
            "k": rng.integers(0, 50, rows),
            "v": rng.standard_normal(rows),
        }
    )


def _producers(
    url: str,
    count: int,
    rows: int,
    *,
    n: int = 4,
    make: Any = _plain_table,
    compression: str | list[str] = "none",
    max_batch_rows: int = 65536,
) -> None:
    """``count`` producers of ``rows`` rows each, hash-partitioned by ``k``, one file each."""
    codecs = [compression] * count if isinstance(compression, str) else compression
    for p in range(count):
        arrowshuffle.write_dataset(
            make(p * rows, rows, p),
            url,
            num_subpartitions=n,
            by="k",
            mode="append",
            compression=codecs[p],
            max_batch_rows=max_batch_rows,
        )


def _reads(url: str) -> dict[int, pa.Table]:
    dataset = arrowshuffle.open_dataset(url)
    return {s: dataset.read(s) for s in range(dataset.num_subpartitions)}


def _file_batches(url: str) -> list[list[int]]:
    """Rows of every record batch of every listed data file, from the Arrow footer."""
    dataset = arrowshuffle.open_dataset(url)
    out = []
    for f in dataset.manifest.files:
        with pa.ipc.open_file(str(Path(url) / f.data)) as reader:
            out.append([reader.get_batch(i).num_rows for i in range(reader.num_record_batches)])
    return out


def _check_same(url: str, before: dict[int, pa.Table]) -> None:
    """Every subpartition reads the same rows in the same order; deep validation passes."""
    after = _reads(url)
    assert after.keys() == before.keys()
    for s, table in before.items():
        assert after[s].equals(table), f"subpartition {s} changed"
    report = arrowshuffle.validate_dataset(url, deep=True)
    assert report.ok, report.all_violations[:3]


def _data_bytes(url: str) -> int:
    sizes = arrowshuffle.open_dataset(url).manifest.sizes
    assert sizes is not None
    return sum(sizes.bytes)


@pytest.mark.parametrize("codec", ["none", "zstd"])
def test_tiny_producers_become_one_batch_per_chunk(tmp_path, codec):
    url = str(tmp_path / "ds")
    _producers(url, 30, 20, compression=codec)
    copy = str(tmp_path / "copy")
    shutil.copytree(url, copy)
    before = _reads(url)
    assert sum(len(b) for b in _file_batches(url)) > 30 * 3  # tiny batches, several per file
    arrowshuffle.compact(url)  # rebatch="auto": these chunks are far under the threshold
    arrowshuffle.compact(copy, rebatch=False)
    _check_same(url, before)
    _check_same(copy, before)
    (batches,) = _file_batches(url)
    dataset = arrowshuffle.open_dataset(url)
    # One region (everything fits the memory budget): one batch per subpartition.
    assert dataset.file(0).num_regions == 1
    assert len(batches) == sum(1 for t in before.values() if t.num_rows)
    assert sum(batches) == 30 * 20
    (copied,) = _file_batches(copy)
    assert len(copied) > 30 * 3  # the byte copy keeps every input batch
    assert _data_bytes(url) < _data_bytes(copy)
    assert dataset.file(0).compression == codec


def test_view_nested_and_dictionary_columns(tmp_path):
    url = str(tmp_path / "ds")
    _producers(url, 12, 25, make=_typed_table, compression=["zstd", "lz4", "none"] * 4)
    dataset = arrowshuffle.open_dataset(url)
    assert dataset.schema.field("dict").type == pa.string()  # decoded by the writer
    assert dataset.schema.field("sv").type == pa.string_view()
    before = _reads(url)
    # About three input regions per output region: several regions, each re-batched.
    arrowshuffle.compact(url, rebatch=True, memory="32KiB")
    _check_same(url, before)
    assert arrowshuffle.open_dataset(url).file(0).num_regions > 1
    assert sum(len(b) for b in _file_batches(url)) < 12 * 4 / 2
    # The codec of most of the inputs' bytes encodes the new batches and names the file's.
    assert arrowshuffle.open_dataset(url).file(0).compression in {"zstd", "lz4", "none"}


def test_broadcast_chunks_are_rebatched(tmp_path):
    url = str(tmp_path / "ds")
    for p in range(10):
        arrowshuffle.write_dataset(
            _plain_table(p * 5, 5, p),
            url,
            num_subpartitions=3,
            partitioner="broadcast",
            mode="append",
        )
    before = _reads(url)
    assert all(t.num_rows == 50 for t in before.values())
    arrowshuffle.compact(url)
    _check_same(url, before)
    dataset = arrowshuffle.open_dataset(url)
    stats = dataset.stats()
    assert stats.filter(pa.compute.field("broadcast")).num_rows > 0
    assert _file_batches(url) == [[50]]


def test_batch_rows_bounds_new_batches_and_never_splits_one(tmp_path):
    url = str(tmp_path / "ds")
    _producers(url, 8, 60, n=1, max_batch_rows=7)
    before = _reads(url)
    inputs = [rows for f in _file_batches(url) for rows in f]
    assert max(inputs) == 7
    ones = str(tmp_path / "ones")
    shutil.copytree(url, ones)
    arrowshuffle.compact(url, rebatch=True, batch_rows=20)
    _check_same(url, before)
    (batches,) = _file_batches(url)
    assert max(batches) <= 20 and len(batches) < len(inputs)
    # No batch of fewer rows than the target can be made: the chunks are copied as they are.
    sizes = arrowshuffle.open_dataset(ones).manifest.sizes
    arrowshuffle.compact(ones, rebatch=True, batch_rows=1)
    _check_same(ones, before)
    assert arrowshuffle.open_dataset(ones).manifest.sizes == sizes
    assert _file_batches(ones) == [inputs]


@settings(max_examples=60, deadline=None)
@given(
    rows=st.lists(st.integers(0, 30), max_size=30),
    limit=st.integers(1, 50),
)
def test_group_batches_runs(rows, limit):
    groups = group_batches(rows, limit)
    # Consecutive runs covering every batch once, in order.
    assert [i for first, stop in groups for i in range(first, stop)] == list(range(len(rows)))
    for first, stop in groups:
        total = sum(rows[first:stop])
        assert total <= limit or stop - first == 1  # only a lone batch may exceed the limit
    for (first, stop), (after, _) in itertools.pairwise(groups):
        # Greedy: a run ends only where the next batch would not fit.
        assert after == stop and sum(rows[first:stop]) + rows[stop] > limit


def test_auto_copies_large_batches_as_bytes(tmp_path):
    url = str(tmp_path / "ds")
    rows = AUTO_REBATCH_BYTES // 16 + 1000  # each batch holds more than the threshold's bytes
    _producers(url, 3, rows, n=1)
    before = _reads(url)
    sizes = arrowshuffle.open_dataset(url).manifest.sizes
    forced = str(tmp_path / "forced")
    shutil.copytree(url, forced)
    arrowshuffle.compact(url)
    _check_same(url, before)
    assert arrowshuffle.open_dataset(url).manifest.sizes == sizes
    assert len(_file_batches(url)[0]) == 3
    arrowshuffle.compact(forced, rebatch=True)
    _check_same(forced, before)
    assert _file_batches(forced) == [[3 * rows]]


def test_bad_options_are_refused_before_anything_is_written(tmp_path):
    url = str(tmp_path / "ds")
    _producers(url, 2, 10)
    listed = sorted(p.name for p in Path(url).iterdir())
    for options in ({"rebatch": "yes"}, {"rebatch": None}, {"batch_rows": 0}, {"batch_rows": True}):
        with pytest.raises(InvalidOptionError, match=r"rebatch|batch_rows"):
            arrowshuffle.compact(url, **options)
    assert sorted(p.name for p in Path(url).iterdir()) == listed


def test_cli_options(tmp_path, capsys):
    url = str(tmp_path / "ds")
    _producers(url, 6, 10)
    sizes = arrowshuffle.open_dataset(url).manifest.sizes
    assert main(["compact", url, "--batch-rows", "0"]) == 2
    assert "--batch-rows" in capsys.readouterr().err
    assert main(["compact", url, "--rebatch", "sometimes"]) == 2
    capsys.readouterr()
    assert main(["compact", url, "--rebatch", "never", "--json"]) == 0
    assert arrowshuffle.open_dataset(url).manifest.sizes == sizes  # copied byte for byte
    _producers(url, 6, 10)
    assert main(["compact", url, "--rebatch", "always", "--batch-rows", "1000"]) == 0
    assert len(_file_batches(url)[0]) <= 4
    assert arrowshuffle.validate_dataset(url, deep=True).ok


def test_totals_without_the_merge_counts_and_after_a_rebase(tmp_path):
    """The commit reads the inputs' indexes when not given their bytes, and rebases on appends."""
    url = str(tmp_path / "ds")
    _producers(url, 5, 12)
    job = start_compaction(url, target_file_size="1GiB", storage_options=None, memory="1MiB")
    (group,) = job.merged
    job_id = new_job_id()
    written = merge_files(
        job.directory,
        [job.before.files[i] for i in group.files],
        name=new_file_name(group.index, job_id=job_id),
        num_subpartitions=job.before.num_subpartitions,
        partitioner=job.before.partitioner,
    ).written
    _producers(url, 1, 12)  # another job appends meanwhile
    before = {s: t.sort_by("id") for s, t in _reads(url).items()}
    commit_compaction(job.directory, job.before, job.groups, {group.index: written}, job_id=job_id)
    dataset = arrowshuffle.open_dataset(url)
    assert dataset.num_files == 2
    assert {s: t.sort_by("id") for s, t in _reads(url).items()} == before
    report = arrowshuffle.validate_dataset(url, deep=True)
    assert report.ok, report.all_violations[:3]  # M9: the byte totals follow the new chunks


@pytest.mark.spark
def test_spark_compaction_passes_the_options(spark, tmp_path):
    import arrowshuffle.spark as ash_spark

    url = str(tmp_path / "ds")
    _producers(url, 6, 15)
    sizes = arrowshuffle.open_dataset(url).manifest.sizes
    before = _reads(url)
    ash_spark.compact(spark, url, rebatch=False)
    _check_same(url, before)
    assert arrowshuffle.open_dataset(url).manifest.sizes == sizes
    _producers(url, 6, 15)
    before = _reads(url)
    ash_spark.compact(spark, url, rebatch=True, batch_rows=1000)
    _check_same(url, before)
    assert len(_file_batches(url)[0]) <= 4
