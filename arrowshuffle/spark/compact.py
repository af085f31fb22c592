"""Distributed compaction: each Spark task merges one group of files, the driver commits.

The driver reads the manifest and plans the groups exactly as :func:`arrowshuffle.compact`
does; one Spark task per merged group writes the group's new file (under this job's id, in the
dataset directory) and returns what it wrote; the driver then replaces the manifest with the
same commit protocol (new files first, manifest last, replaced files removed after). A failed
job removes the files of its tasks and leaves the dataset as it was.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa

from arrowshuffle.format.errors import import_optional
from arrowshuffle.format.manifest import ManifestFile
from arrowshuffle.format.naming import new_file_name, new_job_id
from arrowshuffle.readers.storage import resolve
from arrowshuffle.spark.api import check_session
from arrowshuffle.writers.compact import (
    DEFAULT_BATCH_ROWS,
    DEFAULT_MEMORY,
    DEFAULT_TARGET_FILE_SIZE,
    CompactionReport,
    Rebatch,
    merge_files,
    start_compaction,
)
from arrowshuffle.writers.file_writer import WrittenFile

_RESULT_SCHEMA = "group long, written string, bytes_read long, input_bytes array<long>"


def compact(
    spark: Any,
    path: str,
    *,
    target_file_size: int | str = DEFAULT_TARGET_FILE_SIZE,
    storage_options: dict[str, Any] | None = None,
    memory: int | str = DEFAULT_MEMORY,
    rebatch: Rebatch = "auto",
    batch_rows: int = DEFAULT_BATCH_ROWS,
    dry_run: bool = False,
) -> CompactionReport:
    """Compact the dataset at ``path`` with one Spark task per merged group.

    Same groups, files and commit as :func:`arrowshuffle.compact`; the merging runs on the
    executors, which must reach ``path`` (a shared file system or an object store).

    Args:
        spark: the SparkSession.
        path: the dataset directory, a local path or an fsspec URL.
        target_file_size: the most data bytes of one group.
        storage_options: passed to fsspec, on the driver and in every task.
        memory: bytes of input regions one task holds at once.
        rebatch: whether tiny batches are re-encoded as larger ones, as in
            :func:`arrowshuffle.compact`.
        batch_rows: the most rows of one re-encoded batch.
        dry_run: only plan the groups.

    Returns:
        The groups and what the tasks read and wrote.

    Raises:
        InvalidOptionError: a bad option, or the dataset changed while it was compacted.
        FormatError: an input breaks a rule of the format; nothing was replaced.
        MissingExtraError: pyspark is not installed.
    """
    import_optional("pyspark.sql", "spark", "arrowshuffle.spark")
    check_session(spark)
    job = start_compaction(
        path,
        target_file_size=target_file_size,
        storage_options=storage_options,
        memory=memory,
        rebatch=rebatch,
        batch_rows=batch_rows,
    )
    if dry_run or not job.merged:
        return job.report(dry_run=dry_run)
    job_id = new_job_id()
    tasks = [
        {
            "group": g.index,
            "name": new_file_name(g.index, job_id=job_id),
            "files": [dataclasses.asdict(job.before.files[i]) for i in g.files],
        }
        for g in job.merged
    ]
    directory, budget = job.directory, job.memory
    rebatch_mode, rows_per_batch = job.rebatch, job.batch_rows
    url, options = directory.url, storage_options
    n, partitioner = job.before.num_subpartitions, dict(job.before.partitioner)

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        place = resolve(url, options)
        for batch in batches:
            for task_id in batch.column(0).to_pylist():
                task = tasks[task_id]
                merged = merge_files(
                    place,
                    [ManifestFile(**f) for f in task["files"]],
                    name=task["name"],
                    num_subpartitions=n,
                    partitioner=partitioner,
                    memory=budget,
                    rebatch=rebatch_mode,
                    batch_rows=rows_per_batch,
                )
                yield pa.record_batch(
                    {
                        "group": [task["group"]],
                        "written": [merged.written.to_json()],
                        "bytes_read": [merged.bytes_read],
                        "input_bytes": pa.array([list(merged.input_bytes)], pa.list_(pa.int64())),
                    }
                )

    outputs: dict[int, WrittenFile] = {}
    replaced: dict[int, Sequence[int]] = {}
    bytes_read = 0
    try:
        # range() with as many partitions as rows: one task per group.
        frame = spark.range(0, len(tasks), 1, len(tasks)).mapInArrow(run, _RESULT_SCHEMA)
        for row in frame.collect():
            outputs[int(row["group"])] = WrittenFile.from_json(row["written"])
            bytes_read += int(row["bytes_read"])
            replaced[int(row["group"])] = [int(b) for b in row["input_bytes"]]
    except BaseException:
        job.abort(outputs, job_id=job_id)
        raise
    return job.finish(outputs, bytes_read, job_id=job_id, replaced_bytes=replaced)
