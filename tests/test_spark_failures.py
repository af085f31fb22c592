"""Failures on real local Spark: dying tasks, failed jobs, damaged datasets.

What must hold: a task that dies mid-write leaves no file in the manifest; a failed job leaves
the previous manifest (or none) in force and no stray files; a reader stops with a clear error,
carried in Spark's exception, when the manifest is missing or names a missing or resized file.
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

import arrowshuffle.spark as ash_spark
from arrowshuffle.format.naming import MANIFEST_NAME, VERSIONS_DIR, version_name
from arrowshuffle.readers.dataset import open_dataset

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def small_batches(spark):
    """Arrow batches of 50 rows, so a task hands the writer many batches."""
    ash_spark.register(spark)
    key = "spark.sql.execution.arrow.maxRecordsPerBatch"
    previous = spark.conf.get(key)
    spark.conf.set(key, "50")
    yield
    spark.conf.set(key, previous)


def failing_source(spark, how: str, path: str):
    """2000 rows in 2 partitions; partition 1 fails after handing over 10 batches.

    Partition 1 fails only once partition 0 has published its file, so that the job's abort
    always runs after every other task is done with the disk (a killed task cannot clean up).
    """

    pattern = os.path.join(path, "part-00000-*.idx")
    before = set(glob.glob(pattern))

    def maybe_fail(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        partition = TaskContext.get().partitionId()
        for count, batch in enumerate(batches):
            if partition == 1 and count == 10:
                deadline = time.monotonic() + 120
                while time.monotonic() < deadline and not (set(glob.glob(pattern)) - before):
                    time.sleep(0.05)
                if how == "raise":
                    raise RuntimeError("injected failure in partition 1")
                os._exit(3)  # the Python worker dies without cleaning up
            yield batch

    df = spark.range(0, 2000, numPartitions=2).selectExpr("id", "id % 13 AS k", "'x' AS pad")
    return df.mapInArrow(maybe_fail, df.schema)


def write_failing(spark, path: str, how: str) -> None:
    (
        failing_source(spark, how, path)
        .write.format("arrowshuffle")
        .option("num_subpartitions", 4)
        .option("partition_by", "k")
        .option("memory", "2KiB")  # regions reach the disk before the failure
        .mode("overwrite")
        .save(path)
    )


def snapshot(path: Path) -> dict[str, bytes]:
    """Every file under ``path`` (the manifest versions included) by relative name."""
    return {str(p.relative_to(path)): p.read_bytes() for p in path.rglob("*") if p.is_file()}


@pytest.mark.parametrize("how", ["raise", "exit"])
def test_a_task_dying_mid_write_leaves_the_previous_dataset_intact(
    spark, small_batches, tmp_path, how
):
    path = tmp_path / "ds"
    good = spark.range(0, 100, numPartitions=2).selectExpr("id", "id % 13 AS k", "'x' AS pad")
    ash_spark.write(good, str(path), num_subpartitions=4, partition_by="k")
    before = snapshot(path)
    assert f"{VERSIONS_DIR}/{version_name(1)}" in before

    with pytest.raises(Exception) as failure:
        write_failing(spark, str(path), how)
    if how == "raise":
        assert "injected failure in partition 1" in str(failure.value)

    # Same versions, same files, nothing else: the failed job left no trace.
    assert snapshot(path) == before
    assert open_dataset(str(path)).num_rows == 100
    assert spark.read.format("arrowshuffle").load(str(path)).count() == 100


def test_a_failed_first_write_leaves_no_manifest_and_no_files(spark, small_batches, tmp_path):
    path = tmp_path / "fresh"
    with pytest.raises(Exception, match="injected failure in partition 1"):
        write_failing(spark, str(path), "raise")
    assert not path.exists() or os.listdir(path) == []
    with pytest.raises(Exception, match="is not an arrowshuffle dataset"):
        spark.read.format("arrowshuffle").load(str(path)).count()


@pytest.fixture(scope="module")
def committed(spark, tmp_path_factory) -> Path:
    ash_spark.register(spark)
    path = tmp_path_factory.mktemp("committed") / "ds"
    df = spark.range(0, 300, numPartitions=2).selectExpr("id", "cast(id % 11 AS int) AS k")
    ash_spark.write(df, str(path), num_subpartitions=4, partition_by="k")
    return path


def damaged_copy(committed: Path, tmp_path: Path) -> tuple[Path, str, str]:
    """A copy of the dataset, its first data file name and its index name."""
    copy = tmp_path / "copy"
    shutil.copytree(committed, copy)
    first = open_dataset(str(copy)).manifest.files[0]
    return copy, first.data, first.index


def read_all(spark, path: Path, **options: str) -> int:
    reader = spark.read.format("arrowshuffle")
    for key, value in options.items():
        reader = reader.option(key, value)
    return int(reader.load(str(path)).count())


def test_reading_a_path_without_a_manifest_says_so(spark, tmp_path):
    (tmp_path / "empty").mkdir()
    message = f"is not an arrowshuffle dataset: it has no {MANIFEST_NAME}"
    with pytest.raises(Exception, match=re.escape(message)):
        read_all(spark, tmp_path / "empty")


def test_a_missing_data_file_is_named(spark, committed, tmp_path):
    copy, data, _ = damaged_copy(committed, tmp_path)
    os.remove(copy / data)
    with pytest.raises(
        Exception, match=rf"manifest lists {re.escape(data)} .* which does not exist"
    ):
        read_all(spark, copy)


def test_a_missing_index_file_is_named(spark, committed, tmp_path):
    copy, _, index = damaged_copy(committed, tmp_path)
    os.remove(copy / index)
    with pytest.raises(
        Exception, match=rf"manifest lists {re.escape(index)} .* which does not exist"
    ):
        read_all(spark, copy)


def test_a_data_file_of_another_size_is_named(spark, committed, tmp_path):
    copy, data, _ = damaged_copy(committed, tmp_path)
    size = (copy / data).stat().st_size
    with open(copy / data, "ab") as f:
        f.write(b"\0" * 3)
    message = (
        f"[M4] dataset {copy} is damaged: the data file {data} is {size + 3} bytes, "
        f"the manifest lists {size}"
    )
    with pytest.raises(Exception, match=re.escape(message)):
        read_all(spark, copy)


def test_a_flipped_byte_is_caught_by_verify(spark, committed, tmp_path):
    copy, data, _ = damaged_copy(committed, tmp_path)
    dataset = open_dataset(str(copy))
    stats = dataset.file(0).stats().to_pylist()
    chunk = max(stats, key=lambda r: r["bytes"])  # flip a byte inside a real chunk
    raw = bytearray((copy / data).read_bytes())
    raw[chunk["offset"] + chunk["bytes"] // 2] ^= 0xFF
    (copy / data).write_bytes(bytes(raw))
    with pytest.raises(Exception, match=r"(?i)crc32c|checksum"):
        read_all(spark, copy, verify="true")
