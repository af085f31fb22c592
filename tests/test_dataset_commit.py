"""The dataset commit protocol: manifest last and atomic, save modes, abort and cleanup.

Every check looks at what a reader or a directory listing sees: which files exist, what the
manifest lists, and which rows :func:`open_dataset` returns (each row carries the job that
wrote it, so "the rows of job A and B" is checkable without trusting the code under test).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from arrowshuffle.format.errors import (
    InvalidOptionError,
    SchemaMismatchError,
    ShuffleIOError,
)
from arrowshuffle.format.naming import MANIFEST_NAME, new_file_name, new_job_id, temp_name
from arrowshuffle.readers.dataset import open_dataset
from arrowshuffle.readers.storage import Location, resolve
from arrowshuffle.writers import dataset_writer
from arrowshuffle.writers.dataset_writer import (
    abort_dataset,
    check_commit,
    commit_dataset,
    normalize_mode,
    prepare_directory,
    read_manifest,
)
from arrowshuffle.writers.file_writer import ShuffleFileWriter, WrittenFile

N = 4
SCHEMA = pa.schema([("job", pa.string()), ("row", pa.int64())])
SPEC = {"name": "explicit"}


def write_file(
    directory: Location,
    job: str,
    task: int,
    rows: int,
    schema: pa.Schema = SCHEMA,
    storage_options: dict[str, object] | None = None,
) -> WrittenFile:
    """One pair of ``rows`` rows tagged with ``job``, spread over the subpartitions."""
    url = directory.child(new_file_name(task, job_id=job)).url
    batch = pa.record_batch(
        [pa.array([job] * rows), pa.array(range(task * 1000, task * 1000 + rows), pa.int64())],
        schema=SCHEMA,
    )
    if schema != SCHEMA:
        batch = batch.cast(schema)
    with ShuffleFileWriter(
        url, schema, N, storage_options=storage_options, memory="1MiB"
    ) as writer:
        writer.write(batch, subpartitions=np.arange(rows, dtype=np.int64) % N)
    assert writer.written is not None
    return writer.written


def write_job(
    directory: Location,
    tasks: int = 2,
    rows: int = 5,
    storage_options: dict[str, object] | None = None,
) -> tuple[str, list[WrittenFile]]:
    job = new_job_id()
    return job, [
        write_file(directory, job, t, rows, storage_options=storage_options) for t in range(tasks)
    ]


def commit(directory: Location, job: str, written: list[WrittenFile], mode: str, **kw: object):
    return commit_dataset(
        directory,
        written,
        schema=kw.pop("schema", SCHEMA),  # type: ignore[arg-type]
        num_subpartitions=kw.pop("num_subpartitions", N),  # type: ignore[arg-type]
        partitioner=kw.pop("partitioner", SPEC),  # type: ignore[arg-type]
        mode=mode,
        job_id=job,
    )


def names(path: Path) -> set[str]:
    return set(os.listdir(path))


def file_names(written: list[WrittenFile]) -> set[str]:
    return {os.path.basename(w.data_url) for w in written} | {
        os.path.basename(w.index_url) for w in written
    }


def jobs_read(url: str) -> dict[str, int]:
    table = open_dataset(url).read()
    counts: dict[str, int] = {}
    for job in table["job"].to_pylist():
        counts[job] = counts.get(job, 0) + 1
    return counts


@pytest.fixture
def directory(tmp_path: Path) -> Location:
    return prepare_directory(str(tmp_path / "ds"), None)


def test_overwrite_replaces_the_dataset_and_removes_old_files(directory, tmp_path):
    job_a, files_a = write_job(directory, tasks=2, rows=5)
    commit(directory, job_a, files_a, "overwrite")
    assert names(tmp_path / "ds") == file_names(files_a) | {MANIFEST_NAME}
    assert jobs_read(directory.url) == {job_a: 10}

    job_b, files_b = write_job(directory, tasks=3, rows=4)
    manifest = commit(directory, job_b, files_b, "overwrite")
    assert {f.data for f in manifest.files} == {os.path.basename(w.data_url) for w in files_b}
    assert names(tmp_path / "ds") == file_names(files_b) | {MANIFEST_NAME}
    assert jobs_read(directory.url) == {job_b: 12}


def test_a_written_file_says_what_the_manifest_needs_and_survives_json(directory):
    _, (written, *_) = write_job(directory, tasks=1)
    assert written.schema.equals(SCHEMA) and written.partitioner == SPEC
    assert WrittenFile.from_json(written.to_json()) == written


def test_check_commit_refuses_before_anything_is_written(directory):
    job, files = write_job(directory)
    commit(directory, job, files, "overwrite")
    common = {"num_subpartitions": N, "partitioner": SPEC}
    check_commit(directory, schema=SCHEMA, mode="append", **common)
    check_commit(directory, schema=pa.schema([("x", pa.int8())]), mode="overwrite", **common)
    with pytest.raises(SchemaMismatchError, match="cannot append"):
        check_commit(directory, schema=pa.schema([("x", pa.int8())]), mode="append", **common)
    with pytest.raises(InvalidOptionError, match="already exists"):
        check_commit(directory, schema=SCHEMA, mode="errorifexists", **common)
    with pytest.raises(InvalidOptionError, match="mode must be one of"):
        check_commit(directory, schema=SCHEMA, mode="sideways", **common)


def test_overwrite_keeps_old_files_until_the_new_manifest_is_in_place(
    directory, tmp_path, monkeypatch
):
    job_a, files_a = write_job(directory)
    commit(directory, job_a, files_a, "overwrite")
    before = (tmp_path / "ds" / MANIFEST_NAME).read_bytes()

    def refuse(*args: object, **kwargs: object) -> None:
        raise ShuffleIOError("injected: the manifest cannot be written")

    monkeypatch.setattr(dataset_writer, "write_manifest", refuse)
    job_b, files_b = write_job(directory)
    with pytest.raises(ShuffleIOError, match="injected"):
        commit(directory, job_b, files_b, "overwrite")
    # The old dataset is intact and readable; the new files are gone (never published).
    assert (tmp_path / "ds" / MANIFEST_NAME).read_bytes() == before
    assert names(tmp_path / "ds") == file_names(files_a) | {MANIFEST_NAME}
    assert jobs_read(directory.url) == {job_a: 10}


def test_a_failed_manifest_rename_leaves_no_temporary_file(directory, tmp_path, monkeypatch):
    job_a, files_a = write_job(directory)
    commit(directory, job_a, files_a, "overwrite")
    before = (tmp_path / "ds" / MANIFEST_NAME).read_bytes()
    real_replace = os.replace

    def failing_replace(src: str, dst: str) -> None:
        if os.path.basename(dst) == MANIFEST_NAME:
            raise OSError(28, "No space left on device (injected)")
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", failing_replace)
    job_b, files_b = write_job(directory)
    with pytest.raises(ShuffleIOError, match="No space left"):
        commit(directory, job_b, files_b, "overwrite")
    monkeypatch.undo()
    assert not [n for n in names(tmp_path / "ds") if n.endswith(".tmp")]
    assert (tmp_path / "ds" / MANIFEST_NAME).read_bytes() == before
    assert jobs_read(directory.url) == {job_a: 10}


def test_append_keeps_old_files_and_lists_both_jobs(directory, tmp_path):
    job_a, files_a = write_job(directory, tasks=2, rows=3)
    commit(directory, job_a, files_a, "overwrite")
    job_b, files_b = write_job(directory, tasks=1, rows=7)
    manifest = commit(directory, job_b, files_b, "append")
    assert len(manifest.files) == 3
    assert names(tmp_path / "ds") == file_names(files_a + files_b) | {MANIFEST_NAME}
    assert jobs_read(directory.url) == {job_a: 6, job_b: 7}


def test_append_to_nothing_creates_the_dataset(directory):
    job, files = write_job(directory, tasks=1, rows=2)
    commit(directory, job, files, "append")
    assert jobs_read(directory.url) == {job: 2}


@pytest.mark.parametrize(
    ("change", "error", "message"),
    [
        (
            {"schema": pa.schema([("job", pa.string()), ("row", pa.int32())])},
            SchemaMismatchError,
            "its schema is",
        ),
        ({"num_subpartitions": N + 1}, InvalidOptionError, f"it has {N} subpartitions"),
        ({"partitioner": {"name": "other"}}, InvalidOptionError, "its partitioner is"),
    ],
)
def test_append_refuses_a_different_dataset_and_removes_the_new_files(
    directory, tmp_path, change, error, message
):
    job_a, files_a = write_job(directory)
    commit(directory, job_a, files_a, "overwrite")
    before = (tmp_path / "ds" / MANIFEST_NAME).read_bytes()
    job_b = new_job_id()
    schema = change.get("schema", SCHEMA)
    files_b = [write_file(directory, job_b, 0, 3, schema=schema)]
    with pytest.raises(error, match=message):
        commit(directory, job_b, files_b, "append", **change)
    assert (tmp_path / "ds" / MANIFEST_NAME).read_bytes() == before
    assert names(tmp_path / "ds") == file_names(files_a) | {MANIFEST_NAME}


def test_append_only_removes_this_jobs_leftovers(directory, tmp_path):
    job_a, files_a = write_job(directory, tasks=1)
    commit(directory, job_a, files_a, "overwrite")
    # An uncommitted file of another job (a concurrent writer) and a failed attempt of job B.
    other = write_file(directory, new_job_id(), 5, 2)
    job_b = new_job_id()
    failed_attempt = write_file(directory, job_b, 0, 2)
    files_b = [write_file(directory, job_b, 0, 3)]
    commit(directory, job_b, files_b, "append")
    present = names(tmp_path / "ds")
    assert file_names([other]) <= present
    assert not file_names([failed_attempt]) & present
    assert jobs_read(directory.url) == {job_a: 5, job_b: 3}
    # An overwrite removes everything the new manifest does not list.
    job_c, files_c = write_job(directory, tasks=1)
    commit(directory, job_c, files_c, "overwrite")
    assert names(tmp_path / "ds") == file_names(files_c) | {MANIFEST_NAME}


@pytest.mark.parametrize("mode", ["error", "errorifexists", "ErrorIfExists"])
def test_error_mode_refuses_an_existing_dataset(directory, tmp_path, mode):
    job_a, files_a = write_job(directory)
    commit(directory, job_a, files_a, mode)  # nothing there yet: it commits
    job_b, files_b = write_job(directory)
    with pytest.raises(InvalidOptionError, match="already exists"):
        commit(directory, job_b, files_b, mode)
    assert names(tmp_path / "ds") == file_names(files_a) | {MANIFEST_NAME}
    assert jobs_read(directory.url) == {job_a: 10}


def test_ignore_mode_keeps_the_existing_dataset_and_drops_the_new_files(directory, tmp_path):
    job_a, files_a = write_job(directory)
    first = commit(directory, job_a, files_a, "ignore")
    job_b, files_b = write_job(directory)
    kept = commit(directory, job_b, files_b, "ignore")
    assert kept == first
    assert names(tmp_path / "ds") == file_names(files_a) | {MANIFEST_NAME}


def test_unknown_mode_is_refused(directory):
    with pytest.raises(InvalidOptionError, match="mode must be one of"):
        commit(directory, new_job_id(), [], "upsert")
    assert normalize_mode("Overwrite") == "overwrite"


def test_committing_the_same_files_twice_is_refused_and_keeps_them(directory, tmp_path):
    job, files = write_job(directory)
    commit(directory, job, files, "overwrite")
    with pytest.raises(InvalidOptionError, match="listed twice"):
        commit(directory, job, files, "append")
    assert names(tmp_path / "ds") == file_names(files) | {MANIFEST_NAME}
    assert jobs_read(directory.url) == {job: 10}


def test_a_file_outside_the_dataset_directory_is_refused(directory, tmp_path):
    elsewhere = prepare_directory(str(tmp_path / "elsewhere"), None)
    job = new_job_id()
    stray = write_file(elsewhere, job, 0, 2)
    with pytest.raises(InvalidOptionError, match="not directly inside"):
        commit(directory, job, [stray], "overwrite")
    assert read_manifest(directory) is None
    # abort never touches files outside the dataset
    assert os.path.exists(stray.data_url)


def test_abort_removes_the_jobs_files_and_temporaries_but_not_the_dataset(directory, tmp_path):
    job_a, files_a = write_job(directory)
    commit(directory, job_a, files_a, "overwrite")
    before = (tmp_path / "ds" / MANIFEST_NAME).read_bytes()
    job_b, files_b = write_job(directory)
    # What a killed task leaves: a temporary data file, and a data file without its index.
    killed = tmp_path / "ds" / temp_name(new_file_name(7, job_id=job_b))
    killed.write_bytes(b"partial")
    orphan = tmp_path / "ds" / new_file_name(8, job_id=job_b)
    orphan.write_bytes(b"no index")
    other_job = write_file(directory, new_job_id(), 9, 1)
    abort_dataset(directory, [*files_b, None], job_id=job_b)
    assert names(tmp_path / "ds") == file_names([*files_a, other_job]) | {MANIFEST_NAME}
    assert (tmp_path / "ds" / MANIFEST_NAME).read_bytes() == before


def test_abort_without_a_job_id_removes_only_reported_files(directory, tmp_path):
    job, files = write_job(directory)
    leftover = write_file(directory, job, 3, 1)
    abort_dataset(directory, files)
    assert names(tmp_path / "ds") == file_names([leftover])


def test_an_empty_job_commits_an_empty_dataset(directory):
    commit(directory, new_job_id(), [], "overwrite")
    dataset = open_dataset(directory.url)
    assert dataset.num_files == 0
    assert dataset.read().num_rows == 0
    assert dataset.schema.equals(SCHEMA)


def test_new_file_names_never_collide_and_refuse_odd_job_ids():
    assert new_file_name(3, "x", job_id="abc") == "part-00003-abc-x.arrow"
    assert len({new_file_name(0, job_id="j") for _ in range(100)}) == 100
    with pytest.raises(InvalidOptionError, match="letters and digits"):
        new_file_name(0, job_id="a-b")


# ------------------------------------------------------------------ a model of the protocol


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    steps=st.lists(
        st.tuples(
            st.sampled_from(["overwrite", "append", "error", "ignore", "abort"]),
            st.integers(min_value=0, max_value=3),  # tasks
            st.integers(min_value=0, max_value=4),  # rows per task
        ),
        min_size=1,
        max_size=6,
    )
)
def test_any_sequence_of_jobs_reads_as_the_model_says(tmp_path_factory, steps):
    root = tmp_path_factory.mktemp("model")
    directory = resolve(str(root))
    model: dict[str, int] | None = None  # job -> rows, None: no dataset
    for mode, tasks, rows in steps:
        job, files = write_job(directory, tasks=tasks, rows=rows)
        if mode == "abort":
            abort_dataset(directory, files, job_id=job)
            continue
        exists = model is not None
        if mode == "error" and exists:
            with pytest.raises(InvalidOptionError):
                commit(directory, job, files, mode)
            continue
        commit(directory, job, files, mode)
        if mode == "overwrite" or not exists or mode == "error":
            model = {job: tasks * rows} if tasks * rows else {}
        elif mode == "append":
            assert model is not None
            if tasks * rows:
                model[job] = tasks * rows
        # ignore with an existing dataset: unchanged
    present = set(os.listdir(root))
    assert not [n for n in present if n.endswith(".tmp")]
    if model is None:
        assert MANIFEST_NAME not in present
        assert not [n for n in present if n.startswith("part-")]
        return
    manifest = read_manifest(directory)
    assert manifest is not None
    listed = {f.data for f in manifest.files} | {f.index for f in manifest.files}
    assert present == listed | {MANIFEST_NAME}
    assert jobs_read(directory.url) == model


# ------------------------------------------------------------------ object storage


@pytest.mark.s3
def test_commit_on_object_storage_is_one_put_and_overwrite_cleans_up(s3_endpoint, s3_bucket):
    options = s3_endpoint.storage_options()
    url = f"{s3_bucket}/ds"
    directory = resolve(url, options)
    job_a, files_a = write_job(directory, tasks=2, rows=3, storage_options=options)
    commit(directory, job_a, files_a, "overwrite")
    job_b, files_b = write_job(directory, tasks=1, rows=4, storage_options=options)
    s3_endpoint.log.clear()
    commit(directory, job_b, files_b, "overwrite")
    manifest_puts = s3_endpoint.log.requests("PUT", contains=MANIFEST_NAME)
    assert len(manifest_puts) == 1
    assert not s3_endpoint.log.requests("POST", contains=MANIFEST_NAME)  # no multipart upload
    listing = {p.rsplit("/", 1)[-1] for p in directory.fs.ls(directory.path, refresh=True)}
    assert listing == file_names(files_b) | {MANIFEST_NAME}
    assert jobs_read_remote(url, options) == {job_b: 4}


def jobs_read_remote(url: str, options: dict[str, object]) -> dict[str, int]:
    table = open_dataset(url, options).read()
    counts: dict[str, int] = {}
    for job in table["job"].to_pylist():
        counts[job] = counts.get(job, 0) + 1
    return counts
