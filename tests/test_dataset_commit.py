"""The dataset commit protocol: a new manifest version last and exclusive, save modes, abort
and cleanup, and the files replaced versions keep until vacuum.

Every check looks at what a reader or a directory listing sees: which files exist, which
manifest versions exist and what they list, and which rows :func:`open_dataset` returns (each row
carries the job that wrote it, so "the rows of job A and B" is checkable without trusting the
code under test).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from manifest_edits import make_legacy, manifest_in_force

from arrowshuffle.format.errors import (
    InvalidOptionError,
    SchemaMismatchError,
    ShuffleIOError,
)
from arrowshuffle.format.manifest import decode_manifest
from arrowshuffle.format.naming import (
    MANIFEST_NAME,
    VERSIONS_DIR,
    new_file_name,
    new_job_id,
    temp_name,
    temp_target,
    version_from_name,
    version_name,
)
from arrowshuffle.readers.dataset import open_dataset
from arrowshuffle.readers.storage import Location, resolve
from arrowshuffle.writers import commit as commit_module
from arrowshuffle.writers.dataset_writer import (
    abort_dataset,
    check_commit,
    commit_dataset,
    normalize_mode,
    prepare_directory,
    read_manifest,
)
from arrowshuffle.writers.file_writer import ShuffleFileWriter, WrittenFile
from arrowshuffle.writers.vacuum import vacuum

N = 4
#: What commits put beside the pairs: the manifest versions and the compatibility copy.
COMMITTED = {VERSIONS_DIR, MANIFEST_NAME}
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


def versions(path: Path) -> list[int]:
    """The manifest versions in the dataset directory ``path``, oldest first."""
    found = [version_from_name(n) for n in os.listdir(path / VERSIONS_DIR)]
    assert None not in found, f"a temporary file is left among the versions: {found}"
    return sorted(v for v in found if v is not None)


def version_paths(*numbers: int) -> set[str]:
    """The names vacuum reports for expired versions."""
    return {f"{VERSIONS_DIR}/{version_name(n)}" for n in numbers}


def file_names(written: list[WrittenFile]) -> set[str]:
    return {os.path.basename(w.data_url) for w in written} | {
        os.path.basename(w.index_url) for w in written
    }


def counts(table: pa.Table) -> dict[str, int]:
    """Rows of each job in ``table``."""
    found: dict[str, int] = {}
    for job in table["job"].to_pylist():
        found[job] = found.get(job, 0) + 1
    return found


def jobs_read(url: str, version: int | None = None) -> dict[str, int]:
    return counts(open_dataset(url, version=version).read())


@pytest.fixture
def directory(tmp_path: Path) -> Location:
    return prepare_directory(str(tmp_path / "ds"), None)


def test_overwrite_replaces_the_dataset_and_vacuum_removes_the_old_files(directory, tmp_path):
    job_a, files_a = write_job(directory, tasks=2, rows=5)
    commit(directory, job_a, files_a, "overwrite")
    assert names(tmp_path / "ds") == file_names(files_a) | COMMITTED
    assert versions(tmp_path / "ds") == [1]
    assert jobs_read(directory.url) == {job_a: 10}
    reader = open_dataset(directory.url)  # opened before the overwrite

    job_b, files_b = write_job(directory, tasks=3, rows=4)
    manifest = commit(directory, job_b, files_b, "overwrite")
    assert {f.data for f in manifest.files} == {os.path.basename(w.data_url) for w in files_b}
    assert manifest.version == 2 and versions(tmp_path / "ds") == [1, 2]
    assert jobs_read(directory.url) == {job_b: 12}
    # The replaced files stay: the reader opened before keeps reading its rows.
    assert names(tmp_path / "ds") == file_names(files_a + files_b) | COMMITTED
    assert reader.version == 1
    assert counts(reader.read()) == {job_a: 10}
    assert jobs_read(directory.url, version=1) == {job_a: 10}

    # Vacuum without a grace period expires version 1 and removes exactly its files.
    report = vacuum(directory.url, older_than=0)
    assert set(report.removed) == file_names(files_a) | version_paths(1)
    assert report.retained_versions == (2,)
    assert names(tmp_path / "ds") == file_names(files_b) | COMMITTED
    assert jobs_read(directory.url) == {job_b: 12}


def test_a_written_file_says_what_the_manifest_needs_and_survives_json(directory):
    _, (written, *_) = write_job(directory, tasks=1)
    assert written.schema.equals(SCHEMA) and written.partitioner == SPEC
    assert WrittenFile.from_json(written.to_json()) == written


def test_check_commit_refuses_before_anything_is_written(directory):
    job, files = write_job(directory)
    commit(directory, job, files, "overwrite")
    common = {"num_subpartitions": N, "partitioner": SPEC}
    assert check_commit(directory, schema=SCHEMA, mode="append", **common).version == 1
    check_commit(directory, schema=pa.schema([("x", pa.int8())]), mode="overwrite", **common)
    with pytest.raises(SchemaMismatchError, match="cannot append"):
        check_commit(directory, schema=pa.schema([("x", pa.int8())]), mode="append", **common)
    with pytest.raises(InvalidOptionError, match="already exists"):
        check_commit(directory, schema=SCHEMA, mode="errorifexists", **common)
    with pytest.raises(InvalidOptionError, match="mode must be one of"):
        check_commit(directory, schema=SCHEMA, mode="sideways", **common)


def snapshot(path: Path) -> dict[str, bytes]:
    """The manifest in force (by its name) and the compatibility copy, as bytes."""
    in_force = manifest_in_force(path)
    return {
        str(in_force.relative_to(path)): in_force.read_bytes(),
        MANIFEST_NAME: (path / MANIFEST_NAME).read_bytes(),
    }


def test_overwrite_keeps_old_files_until_the_new_version_is_in_place(
    directory, tmp_path, monkeypatch
):
    job_a, files_a = write_job(directory)
    commit(directory, job_a, files_a, "overwrite")
    before = snapshot(tmp_path / "ds")
    attempts: list[str] = []

    def refuse(location: Location, payload: bytes) -> bool:
        attempts.append(location.url)
        raise ShuffleIOError("injected: the version cannot be created")

    monkeypatch.setattr(commit_module, "create_exclusive", refuse)
    job_b, files_b = write_job(directory)
    with pytest.raises(ShuffleIOError, match="injected"):
        commit(directory, job_b, files_b, "overwrite")
    assert [os.path.basename(url) for url in attempts] == [version_name(2)]
    # The old dataset is intact and readable; the new files are gone (never published).
    assert snapshot(tmp_path / "ds") == before
    assert versions(tmp_path / "ds") == [1]
    assert names(tmp_path / "ds") == file_names(files_a) | COMMITTED
    assert jobs_read(directory.url) == {job_a: 10}


def test_a_failed_version_write_leaves_no_temporary_file(directory, tmp_path, monkeypatch):
    job_a, files_a = write_job(directory)
    commit(directory, job_a, files_a, "overwrite")
    before = snapshot(tmp_path / "ds")
    real_create = commit_module.create_exclusive
    temporaries: list[str] = []

    def no_space(fd: int) -> None:
        # The version's temporary file is written: the disk fills as it is flushed.
        temporaries.extend(os.listdir(tmp_path / "ds" / VERSIONS_DIR))
        raise OSError(28, "No space left on device (injected)")

    def full_disk(location: Location, payload: bytes) -> bool:
        with monkeypatch.context() as patch:
            patch.setattr(os, "fsync", no_space)
            return real_create(location, payload)

    monkeypatch.setattr(commit_module, "create_exclusive", full_disk)
    job_b, files_b = write_job(directory)
    with pytest.raises(ShuffleIOError, match="No space left"):
        commit(directory, job_b, files_b, "overwrite")
    monkeypatch.undo()
    # The failure hit the version's temporary file, which is gone with nothing else left.
    assert [temp_target(t) for t in temporaries if temp_target(t)] == [version_name(2)]
    for path in (tmp_path / "ds", tmp_path / "ds" / VERSIONS_DIR):
        assert not [n for n in names(path) if n.endswith(".tmp")]
    assert versions(tmp_path / "ds") == [1]
    assert snapshot(tmp_path / "ds") == before
    assert names(tmp_path / "ds") == file_names(files_a) | COMMITTED
    assert jobs_read(directory.url) == {job_a: 10}


def test_append_keeps_old_files_and_lists_both_jobs(directory, tmp_path):
    job_a, files_a = write_job(directory, tasks=2, rows=3)
    commit(directory, job_a, files_a, "overwrite")
    job_b, files_b = write_job(directory, tasks=1, rows=7)
    manifest = commit(directory, job_b, files_b, "append")
    assert len(manifest.files) == 3
    assert names(tmp_path / "ds") == file_names(files_a + files_b) | COMMITTED
    assert versions(tmp_path / "ds") == [1, 2]
    assert jobs_read(directory.url) == {job_a: 6, job_b: 7}


def test_a_dataset_of_one_manifest_reads_and_its_first_append_keeps_it_as_version_0(
    directory, tmp_path
):
    job_a, files_a = write_job(directory)
    commit(directory, job_a, files_a, "overwrite")
    legacy = make_legacy(directory.url)  # as written before manifests had versions
    assert names(tmp_path / "ds") == file_names(files_a) | {MANIFEST_NAME}
    reader = open_dataset(directory.url)
    assert reader.version == 0 and counts(reader.read()) == {job_a: 10}

    job_b, files_b = write_job(directory, tasks=1, rows=3)
    manifest = commit(directory, job_b, files_b, "append")
    # The single manifest became version 0, unchanged; the append is version 1 on top of it.
    assert manifest.version == 1 and versions(tmp_path / "ds") == [0, 1]
    preserved = tmp_path / "ds" / VERSIONS_DIR / version_name(0)
    assert decode_manifest(preserved.read_bytes()) == legacy
    assert jobs_read(directory.url, version=0) == {job_a: 10}
    assert jobs_read(directory.url) == {job_a: 10, job_b: 3}
    assert counts(reader.read()) == {job_a: 10}
    # The copy for readers before versions now holds version 1.
    assert decode_manifest((tmp_path / "ds" / MANIFEST_NAME).read_bytes()) == manifest
    assert names(tmp_path / "ds") == file_names(files_a + files_b) | COMMITTED


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
    before = snapshot(tmp_path / "ds")
    job_b = new_job_id()
    schema = change.get("schema", SCHEMA)
    files_b = [write_file(directory, job_b, 0, 3, schema=schema)]
    with pytest.raises(error, match=message):
        commit(directory, job_b, files_b, "append", **change)
    assert snapshot(tmp_path / "ds") == before
    assert versions(tmp_path / "ds") == [1]
    assert names(tmp_path / "ds") == file_names(files_a) | COMMITTED


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
    # An overwrite removes only its own leftovers: the files it replaced stay for readers of
    # the versions that list them, and the other job's file stays too.
    job_c, files_c = write_job(directory, tasks=1)
    failed_c = write_file(directory, job_c, 1, 2)
    commit(directory, job_c, files_c, "overwrite")
    kept = file_names([*files_a, *files_b, other])
    assert names(tmp_path / "ds") == kept | file_names(files_c) | COMMITTED
    assert not file_names([failed_c]) & names(tmp_path / "ds")
    # Vacuum removes them once no retained version lists them (no grace period here).
    report = vacuum(directory.url, older_than=0)
    assert set(report.removed) == kept | version_paths(1, 2)
    assert names(tmp_path / "ds") == file_names(files_c) | COMMITTED
    assert jobs_read(directory.url) == {job_c: 5}


@pytest.mark.parametrize("mode", ["error", "errorifexists", "ErrorIfExists"])
def test_error_mode_refuses_an_existing_dataset(directory, tmp_path, mode):
    job_a, files_a = write_job(directory)
    commit(directory, job_a, files_a, mode)  # nothing there yet: it commits
    job_b, files_b = write_job(directory)
    with pytest.raises(InvalidOptionError, match="already exists"):
        commit(directory, job_b, files_b, mode)
    assert names(tmp_path / "ds") == file_names(files_a) | COMMITTED
    assert versions(tmp_path / "ds") == [1]
    assert jobs_read(directory.url) == {job_a: 10}


def test_ignore_mode_keeps_the_existing_dataset_and_drops_the_new_files(directory, tmp_path):
    job_a, files_a = write_job(directory)
    first = commit(directory, job_a, files_a, "ignore")
    job_b, files_b = write_job(directory)
    kept = commit(directory, job_b, files_b, "ignore")
    assert kept == first
    assert names(tmp_path / "ds") == file_names(files_a) | COMMITTED
    assert versions(tmp_path / "ds") == [1]


def test_unknown_mode_is_refused(directory):
    with pytest.raises(InvalidOptionError, match="mode must be one of"):
        commit(directory, new_job_id(), [], "upsert")
    assert normalize_mode("Overwrite") == "overwrite"


def test_committing_the_same_files_twice_is_refused_and_keeps_them(directory, tmp_path):
    job, files = write_job(directory)
    commit(directory, job, files, "overwrite")
    with pytest.raises(InvalidOptionError, match="listed twice"):
        commit(directory, job, files, "append")
    assert names(tmp_path / "ds") == file_names(files) | COMMITTED
    assert versions(tmp_path / "ds") == [1]
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
    before = snapshot(tmp_path / "ds")
    job_b, files_b = write_job(directory)
    # What a killed task leaves: a temporary data file, and a data file without its index.
    killed = tmp_path / "ds" / temp_name(new_file_name(7, job_id=job_b))
    killed.write_bytes(b"partial")
    orphan = tmp_path / "ds" / new_file_name(8, job_id=job_b)
    orphan.write_bytes(b"no index")
    other_job = write_file(directory, new_job_id(), 9, 1)
    abort_dataset(directory, [*files_b, None], job_id=job_b)
    assert names(tmp_path / "ds") == file_names([*files_a, other_job]) | COMMITTED
    assert snapshot(tmp_path / "ds") == before
    assert versions(tmp_path / "ds") == [1]


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
    history: list[dict[str, int]] = []  # the model after each commit: version k is history[k-1]
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
        if mode == "ignore" and exists:
            continue  # unchanged: no version committed
        if mode == "overwrite" or not exists or mode == "error":
            model = {job: tasks * rows} if tasks * rows else {}
        elif mode == "append":
            assert model is not None
            model = dict(model)
            if tasks * rows:
                model[job] = tasks * rows
        history.append(model)
    present = set(os.listdir(root))
    assert not [n for n in present if n.endswith(".tmp")]
    if model is None:
        assert not present & COMMITTED
        assert not [n for n in present if n.startswith("part-")]
        return
    # One version per commit, each still reading as the model said then, and every file any
    # of them lists is still there (no commit removes a listed file): nothing else is.
    assert versions(root) == list(range(1, len(history) + 1))
    listed: set[str] = set()
    for number, expected in enumerate(history, start=1):
        assert jobs_read(directory.url, version=number) == expected
        files = open_dataset(directory.url, version=number).manifest.files
        listed |= {f.data for f in files} | {f.index for f in files}
    assert present == listed | COMMITTED
    assert jobs_read(directory.url) == model
    # Vacuum without a grace period leaves exactly what the version in force lists.
    vacuum(directory.url, older_than=0)
    manifest = read_manifest(directory)
    assert manifest is not None and manifest.version == len(history)
    assert versions(root) == [len(history)]
    in_force = {f.data for f in manifest.files} | {f.index for f in manifest.files}
    assert set(os.listdir(root)) == in_force | COMMITTED
    assert jobs_read(directory.url) == model


# ------------------------------------------------------------------ object storage


@pytest.mark.s3
def test_commit_on_object_storage_is_one_conditional_put_and_vacuum_cleans_up(
    s3_endpoint, s3_bucket
):
    options = s3_endpoint.storage_options()
    url = f"{s3_bucket}/ds"
    directory = resolve(url, options)
    job_a, files_a = write_job(directory, tasks=2, rows=3, storage_options=options)
    commit(directory, job_a, files_a, "overwrite")
    job_b, files_b = write_job(directory, tasks=1, rows=4, storage_options=options)
    reader = open_dataset(url, options)  # opened before the overwrite
    s3_endpoint.log.clear()
    commit(directory, job_b, files_b, "overwrite")
    bucket = s3_bucket.removeprefix("s3://")
    requests = [(r["method"], r["path"], r["if_none_match"]) for r in s3_endpoint.log.requests()]
    # The commit: one listing of the versions and one GET of the version in force (version 1),
    # one conditional PUT that creates version 2 (If-None-Match: *), one unconditional PUT of
    # the compatibility copy, and one listing of the directory for this job's own leftovers.
    # Nothing is deleted: version 1's files stay for its readers.
    assert requests == [
        ("GET", f"/{bucket}", None),
        ("GET", f"/{bucket}/ds/{VERSIONS_DIR}/{version_name(1)}", None),
        ("PUT", f"/{bucket}/ds/{VERSIONS_DIR}/{version_name(2)}", "*"),
        ("PUT", f"/{bucket}/ds/{MANIFEST_NAME}", None),
        ("GET", f"/{bucket}", None),
    ]
    assert f"prefix=ds%2F{VERSIONS_DIR}%2F" in s3_endpoint.log.requests()[0]["query"]
    assert not s3_endpoint.log.requests("POST")  # no multipart upload
    assert not s3_endpoint.log.requests("DELETE")

    def listing() -> set[str]:
        return {p.rsplit("/", 1)[-1] for p in directory.fs.ls(directory.path, refresh=True)}

    assert listing() == file_names(files_a + files_b) | COMMITTED
    assert jobs_read_remote(url, options) == {job_b: 4}
    assert reader.version == 1 and counts(reader.read()) == {job_a: 6}
    report = vacuum(url, older_than=0, storage_options=options)
    assert set(report.removed) == file_names(files_a) | version_paths(1)
    assert listing() == file_names(files_b) | COMMITTED
    assert jobs_read_remote(url, options) == {job_b: 4}


def jobs_read_remote(url: str, options: dict[str, object]) -> dict[str, int]:
    return counts(open_dataset(url, options).read())


@pytest.mark.parametrize("damage", ["versions directory is a file", "next version is a directory"])
def test_a_damaged_versions_directory_fails_the_commit_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, damage: str
) -> None:
    """A name that no other commit took is not a conflict: no retries, a storage error naming
    the path (not CommitConflictError after a minute of attempts)."""
    import arrowshuffle as ash
    from arrowshuffle.format.errors import ShuffleIOError
    from arrowshuffle.format.naming import VERSIONS_DIR

    table = pa.table({"k": np.arange(10, dtype=np.int64)})
    url = str(tmp_path / "ds")
    ash.write_dataset(table, url, num_subpartitions=2, by="k")
    versions = Path(url) / VERSIONS_DIR
    if damage == "versions directory is a file":
        for name in os.listdir(versions):
            os.remove(versions / name)
        versions.rmdir()
        versions.write_text("not a directory")
        expected = "found a file"
    else:
        (versions / f"{2:020d}.json").mkdir()
        expected = "found a directory"
    attempts: list[int] = []
    monkeypatch.setattr(commit_module, "_pause", attempts.append)
    with pytest.raises(ShuffleIOError, match=expected):
        ash.write_dataset(table, url, num_subpartitions=2, by="k", mode="append")
    assert attempts == []
