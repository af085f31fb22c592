"""Commits that race, in every order, made deterministic: another commit lands inside a commit.

A commit lists the versions, reads the version in force, builds the new manifest and creates
the next version (``arrowshuffle.writers.commit``). These tests wrap those steps as the commit
module calls them, and run a whole other operation (append, overwrite, first write, compaction)
at one chosen step of the first: after the listing, after the read of the base, or right
before the create. Then, for the local file system and for the S3 endpoint:

* every acknowledged operation made exactly one version, and every retained version reads
  exactly the rows the acknowledged operations imply (each append's rows once);
* the operation that must lose (an overwrite or a first write whose base moved, a compaction
  whose inputs were replaced) raises CommitConflictError naming the version it expected and the
  one it found, and leaves none of its files;
* no file a retained version lists is gone, no unlisted file or temporary is left, and the
  dataset validates deep;
* readers opened before, between and after the commits read their versions' rows, also after
  a vacuum with a long grace period; after ``vacuum(older_than=0)`` they read their rows or
  fail with MissingObjectError, never other rows.

The S3 tests at the end break the answer of the conditional PUT that creates a version.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import pyarrow as pa
import pytest
from commit_checks import (
    LONG,
    VERSIONS,
    N,
    Row,
    Target,
    check_in_force,
    check_versions_and_files,
    diff,
    rows_of,
    rows_read,
    table_of,
    vacuum_to_current,
)

import arrowshuffle as ash
from arrowshuffle.format.errors import (
    CommitConflictError,
    MissingObjectError,
    SchemaMismatchError,
    ShuffleIOError,
)
from arrowshuffle.format.naming import new_file_name, new_job_id
from arrowshuffle.readers.manifest_io import version_location
from arrowshuffle.readers.source import RemoteSource
from arrowshuffle.readers.storage import resolve
from arrowshuffle.writers import commit
from arrowshuffle.writers.commit import CommitOutcomeUnknownError
from arrowshuffle.writers.compact import (
    CompactionGroup,
    commit_compaction,
    merge_files,
    start_compaction,
)
from arrowshuffle.writers.dataset_writer import abort_dataset, check_commit, commit_dataset
from arrowshuffle.writers.exclusive import create_exclusive

SETUP_FILES = 4
SETUP_ROWS = 4
#: Options of the S3 client in tests that break requests: one retry, so that giving up is quick.
FAST_RETRIES = {"retries": {"total_max_attempts": 2, "mode": "standard"}}


@pytest.fixture(params=["local", pytest.param("s3", marks=pytest.mark.s3)])
def target(request: pytest.FixtureRequest, tmp_path) -> Target:
    if request.param == "local":
        return Target(str(tmp_path / "ds"))
    endpoint = request.getfixturevalue("s3_endpoint")
    bucket = request.getfixturevalue("s3_bucket")
    return Target(f"{bucket}/ds", endpoint.storage_options())


# ---------------------------------------------------------------------- operations


@dataclass(frozen=True)
class Op:
    """One operation: a save mode of write_dataset, or a compaction of some listed files.

    ``positions`` are the positions (in the version the compaction starts from) of the files
    it merges; None merges them all through :func:`arrowshuffle.compact`.
    """

    kind: str  # append, overwrite, first, compact
    positions: tuple[int, ...] | None = None
    rows: int = 5

    @property
    def name(self) -> str:
        if self.kind != "compact" or self.positions is None:
            return self.kind
        return "compact" + "".join(map(str, self.positions))

    def run(self, target: Target, tag: str) -> int:
        """Run the operation; the version it committed."""
        if self.kind == "compact":
            if self.positions is None:
                before = target.versions()
                ash.compact(target.url, target_file_size="1GiB", storage_options=target.options)
                after = target.versions()
                assert after[-1] > before[-1]
                return after[-1]
            return compact_positions(target, self.positions)
        mode = {"first": "error"}.get(self.kind, self.kind)
        return int(target.write(tag, self.rows, mode).version)

    def apply(self, rows: list[Row], tag: str) -> list[Row]:
        """The rows of the dataset after the operation committed on top of ``rows``."""
        if self.kind == "append":
            return sorted(rows + rows_of(tag, self.rows))
        if self.kind in ("overwrite", "first"):
            return rows_of(tag, self.rows)
        return rows  # compaction moves rows between files, never changes them

    def merges(self, base_files: int) -> set[int]:
        if self.kind != "compact":
            return set()
        return set(range(base_files) if self.positions is None else self.positions)


def compact_positions(target: Target, positions: tuple[int, ...]) -> int:
    """Merge exactly the files at ``positions`` (consecutive) into one, as ``compact`` does."""
    job = start_compaction(
        target.url, target_file_size="1GiB", storage_options=target.options, memory="64MiB"
    )
    before = job.before
    inputs = [before.files[i] for i in positions]
    group = CompactionGroup(
        0, tuple(positions), sum(f.data_size for f in inputs), sum(f.rows for f in inputs)
    )
    job_id = new_job_id()
    written = merge_files(
        job.directory,
        inputs,
        name=new_file_name(0, job_id=job_id),
        num_subpartitions=before.num_subpartitions,
        partitioner=before.partitioner,
    ).written
    return int(
        commit_compaction(job.directory, before, [group], {0: written}, job_id=job_id).version
    )


def victim_loses(victim: Op, intruder: Op, base_files: int) -> bool:
    """Whether ``victim`` must fail after ``intruder`` committed during its commit."""
    if victim.kind in ("overwrite", "first"):
        return True  # any commit moves the base
    if victim.kind == "compact":
        return intruder.kind in ("overwrite", "first") or bool(
            victim.merges(base_files) & intruder.merges(base_files)
        )
    return False  # appends commute with everything


APPEND, OVERWRITE, FIRST = Op("append"), Op("overwrite", rows=6), Op("first")
COMPACT = Op("compact")
PAIRS = [
    (APPEND, Op("append", rows=7)),
    (APPEND, COMPACT),
    (COMPACT, APPEND),
    (COMPACT, COMPACT),
    (Op("compact", (0, 1)), Op("compact", (1, 2))),
    (Op("compact", (1, 2, 3)), Op("compact", (0, 1))),
    (Op("compact", (0, 1)), Op("compact", (2, 3))),
    (Op("compact", (2, 3)), Op("compact", (0, 1))),
    (OVERWRITE, APPEND),
    (APPEND, OVERWRITE),
    (OVERWRITE, Op("overwrite", rows=3)),
    (OVERWRITE, COMPACT),
    (COMPACT, OVERWRITE),
    (FIRST, Op("first", rows=3)),
    (FIRST, APPEND),
    (APPEND, FIRST),
]
STEPS = ["listed", "read", "create"]
#: On S3 every pair races at the create, where the conditional PUT answers 412; these pairs
#: also at the other steps (what a step changes is the commit's logic, the same on any store).
S3_EVERY_STEP = {("append", "append"), ("overwrite", "append"), ("compact", "append")}
RACES = [
    pytest.param(
        where,
        victim,
        intruder,
        step,
        id=f"{where}-{victim.name}-vs-{intruder.name}-{step}",
        marks=[pytest.mark.s3] if where == "s3" else [],
    )
    for where in ("local", "s3")
    for victim, intruder in PAIRS
    for step in STEPS
    if where == "local" or step == "create" or (victim.name, intruder.name) in S3_EVERY_STEP
]


# ---------------------------------------------------------------------- the interleaving


class Interleave:
    """Runs ``action`` once, inside the next commit, at ``step``: the commit module's calls of
    ``list_versions`` (before it: ``listing``; after it: ``listed``), ``read_current`` (after
    it) or ``create_exclusive`` (before it). The action's own commits pass through unhindered."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, step: str) -> None:
        self.step = step
        self.action: Callable[[], None] | None = None
        self.fired = 0
        real_list, real_read, real_create = (
            commit.list_versions,
            commit.read_current,
            commit.create_exclusive,
        )

        def list_versions(directory):
            self._at("listing")
            out = real_list(directory)
            self._at("listed")
            return out

        def read_current(directory, versions=None):
            out = real_read(directory, versions)
            self._at("read")
            return out

        def create_exclusive(location, payload):
            self._at("create")
            return real_create(location, payload)

        monkeypatch.setattr(commit, "list_versions", list_versions)
        monkeypatch.setattr(commit, "read_current", read_current)
        monkeypatch.setattr(commit, "create_exclusive", create_exclusive)
        if step in ("listed", "read"):
            # A first attempt builds on the base its job read and lists nothing; a retry, a
            # Spark job and a dataset of one manifest list and read. Make every attempt do so.
            monkeypatch.setattr(commit.Base, "known", property(lambda self: False))

    def arm(self, action: Callable[[], None]) -> None:
        self.action = action

    def _at(self, step: str) -> None:
        if step == self.step and self.action is not None:
            action, self.action = self.action, None
            self.fired += 1
            action()


@dataclass
class Scenario:
    """The model: the rows each version must hold, and the readers opened along the way."""

    target: Target
    model: dict[int, list[Row]] = field(default_factory=dict)
    readers: list[ash.ShuffleDataset] = field(default_factory=list)

    def committed(self, version: int, rows: list[Row]) -> None:
        assert version not in self.model, f"version {version} committed twice"
        assert not self.model or version == max(self.model) + 1, (version, sorted(self.model))
        self.model[version] = rows
        self.readers.append(ash.open_dataset(self.target.url, self.target.options))
        assert self.readers[-1].version == version

    @property
    def current(self) -> int | None:
        return max(self.model) if self.model else None

    def rows(self) -> list[Row]:
        return self.model[self.current] if self.model else []

    def check_readers(self, *, vacuumed: bool = False) -> None:
        for reader in self.readers:
            expected = self.model[reader.version]
            try:
                got = rows_read(reader.read())
            except MissingObjectError:
                # Only a reader of a version that vacuum expired may find its files gone.
                if vacuumed and reader.version != self.current:
                    continue
                raise
            assert got == expected, f"reader of version {reader.version} read other rows"

    def check(self) -> None:
        versions = check_versions_and_files(self.target, self.model, read=False)
        assert versions[-1] == self.current
        # Each version is read by its reader, or here when it has none.
        for version in set(versions) - {r.version for r in self.readers}:
            got = self.target.read(version)
            assert got == self.model[version], diff(f"version {version}", got, self.model[version])
        check_in_force(self.target, self.rows())
        self.check_readers()
        report = ash.vacuum(self.target.url, older_than=LONG, storage_options=self.target.options)
        assert report.ok and not report.removed, report
        check_versions_and_files(self.target, self.model, read=False)
        self.check_readers()
        assert vacuum_to_current(self.target) == self.current
        self.check_readers(vacuumed=True)
        assert self.target.read() == self.rows()


def setup(target: Target, scenario: Scenario, files: int) -> None:
    for i in range(files):
        tag = f"s{i}"
        version = target.write(tag, SETUP_ROWS, "append").version
        scenario.committed(version, sorted(scenario.rows() + rows_of(tag, SETUP_ROWS)))


@pytest.mark.parametrize(("target", "victim", "intruder", "step"), RACES, indirect=["target"])
def test_a_commit_landing_inside_another(target, monkeypatch, victim, intruder, step):
    scenario = Scenario(target)
    base_files = 0 if "first" in (victim.kind, intruder.kind) else SETUP_FILES
    setup(target, scenario, base_files)
    base = scenario.current
    interleave = Interleave(monkeypatch, step)
    landed: list[int] = []

    def intrude() -> None:
        before = scenario.rows()
        landed.append(intruder.run(target, "i"))
        scenario.committed(landed[0], intruder.apply(before, "i"))

    interleave.arm(intrude)
    try:
        version = victim.run(target, "v")
    except CommitConflictError as exc:
        assert interleave.fired == 1
        assert victim_loses(victim, intruder, base_files), f"{victim.name} lost: {exc}"
        assert (exc.expected, exc.found) == (base, landed[0])
        if victim.kind != "compact":

            def name(v: int | None) -> str:
                return "no dataset" if v is None else f"version {v}"

            assert f"expected {name(exc.expected)}, found {name(exc.found)}" in str(exc)
    else:
        assert interleave.fired == 1
        assert not victim_loses(victim, intruder, base_files), f"{victim.name} committed"
        scenario.committed(version, victim.apply(scenario.rows(), "v"))
    scenario.check()


# ---------------------------------------------------------------------- a vacuum inside


@pytest.mark.parametrize("kind", ["append", "overwrite"])
def test_an_expired_base_between_listing_and_reading_it(target, monkeypatch, kind):
    """Another commit lands and vacuum expires the version just listed, before it is read.

    The listed version is gone when the commit reads it: an append still commits (on the
    version in force), an overwrite reports the conflict; neither fails for the missing file.
    (The versions are removed as a vacuum with a short grace period removes them; a vacuum
    with none would also remove the committing job's files, the race spec section 7.3 names.)
    """
    scenario = Scenario(target)
    setup(target, scenario, 2)
    interleave = Interleave(monkeypatch, "listed")

    def intrude() -> None:
        version = target.write("i", 3, "append").version
        scenario.committed(version, sorted(scenario.rows() + rows_of("i", 3)))
        for expired in (1, 2):
            target.remove(f"{VERSIONS}/{expired:020d}.json")

    interleave.arm(intrude)
    if kind == "append":
        version = target.write("v", 5, "append").version
        scenario.committed(version, sorted(scenario.rows() + rows_of("v", 5)))
    else:
        with pytest.raises(CommitConflictError, match="expected version 2, found version 3"):
            target.write("v", 5, "overwrite")
    assert interleave.fired == 1
    assert target.versions() == ([3] if kind == "overwrite" else [3, 4])
    # The versions vacuum expired are no longer in the model's reach: check the rest.
    scenario.model = {v: rows for v, rows in scenario.model.items() if v in target.versions()}
    scenario.readers = [r for r in scenario.readers if r.version in scenario.model]
    scenario.check()


@pytest.mark.parametrize("kind", ["append", "overwrite"])
def test_a_version_number_a_vacuum_freed_is_not_committed_below_the_one_in_force(
    target, monkeypatch, kind
):
    """While a job runs on the base it read when it started (version n), another job commits
    n + 1 and n + 2 and a vacuum expires versions n and n + 1: the name n + 1 is free again
    while n + 2 is in force. Created there, the commit would be acknowledged but never read
    (readers take the highest version). An append lands on n + 2 instead; an overwrite reports
    the conflict. Never an acknowledged write that no reader sees."""
    scenario = Scenario(target)
    setup(target, scenario, 2)
    base = scenario.current
    interleave = Interleave(monkeypatch, "listing")  # the job's files are written: it commits

    def intrude() -> None:
        for tag in ("i", "j"):
            version = target.write(tag, 3, "append").version
            scenario.committed(version, sorted(scenario.rows() + rows_of(tag, 3)))
        for expired in range(1, base + 2):  # as a vacuum expires them: all but the one in force
            target.remove(f"{VERSIONS}/{expired:020d}.json")

    interleave.arm(intrude)
    if kind == "append":
        version = target.write("v", 5, "append").version
        assert version == base + 3
        scenario.committed(version, sorted(scenario.rows() + rows_of("v", 5)))
    else:
        with pytest.raises(CommitConflictError, match=f"found version {base + 2}"):
            target.write("v", 5, "overwrite")
    assert interleave.fired == 1
    assert target.versions() == ([base + 2] if kind == "overwrite" else [base + 2, base + 3])
    scenario.model = {v: rows for v, rows in scenario.model.items() if v in target.versions()}
    scenario.readers = [r for r in scenario.readers if r.version in scenario.model]
    scenario.check()


# ---------------------------------------------------------------------- lost answers on S3


@pytest.fixture
def s3_target(s3_endpoint, s3_bucket) -> Target:
    return Target(f"{s3_bucket}/ds", s3_endpoint.storage_options(config_kwargs=FAST_RETRIES))


def version_key(version: int) -> str:
    return f"_arrowshuffle_versions/{version:020d}.json"


def version_puts(log, version: int) -> list[int | None]:
    return [r["status"] for r in log.requests("PUT", version_key(version))]


@pytest.mark.s3
@pytest.mark.parametrize("mode", ["append", "overwrite"])
def test_a_created_version_whose_answer_was_lost_is_a_success(s3_target, s3_endpoint, mode):
    """The PUT landed, its answer became a 500; the retry gets 412 and the commit its own id."""
    scenario = Scenario(s3_target)
    setup(s3_target, scenario, 2)
    s3_endpoint.log.lose_next_answer(version_key(3))
    manifest = s3_target.write("v", 5, mode)
    assert version_puts(s3_endpoint.log, 3) == [500, 412]
    assert manifest.version == 3
    assert s3_target.version_json(3)["commit_id"] == manifest.commit_id
    rows = rows_of("v", 5) if mode == "overwrite" else sorted(scenario.rows() + rows_of("v", 5))
    scenario.committed(3, rows)
    assert s3_target.versions() == [1, 2, 3]  # no second version of the same commit
    scenario.check()


@pytest.mark.s3
def test_a_lost_answer_then_an_unreadable_version_is_an_unknown_outcome(
    s3_target, s3_endpoint, monkeypatch
):
    """412 on the retry, and the version cannot be read to tell whose it is: not a failure.

    The commit may have landed (here it did): it must not be reported as a conflict or as a
    refusal (which would invite running the job again and adding its rows twice), and its
    files, which the version in force lists, must stay.
    """
    scenario = Scenario(s3_target)
    setup(s3_target, scenario, 2)
    monkeypatch.setattr(RemoteSource, "_pause", lambda self, attempt: None)  # quick retries
    log = s3_endpoint.log
    log.lose_next_answer(version_key(3))
    log.fail_next(version_key(3), 1000)
    try:
        with pytest.raises(CommitOutcomeUnknownError) as caught:
            s3_target.write("v", 5, "append")
    finally:
        log.clear()
    assert isinstance(caught.value, ShuffleIOError)
    assert "unknown" in str(caught.value) and caught.value.commit_id in str(caught.value)
    # It landed: version 3 carries the commit's id and its rows, once.
    assert s3_target.version_json(3)["commit_id"] == caught.value.commit_id
    assert s3_target.versions() == [1, 2, 3]
    scenario.committed(3, sorted(scenario.rows() + rows_of("v", 5)))
    scenario.check()


@pytest.mark.s3
def test_a_put_that_never_arrives_is_an_unknown_outcome_keeping_the_files(s3_target, s3_endpoint):
    """Every attempt of the conditional PUT fails before the store sees it: botocore gives up.

    The committer cannot tell that nothing landed from a lost answer, so it reports an unknown
    outcome (a ShuffleIOError), keeps the job's files and commits no version; vacuum removes
    the files once they are older than its grace period.
    """
    scenario = Scenario(s3_target)
    setup(s3_target, scenario, 2)
    files_before = s3_target.part_names()
    log = s3_endpoint.log
    log.fail_next(version_key(3), 1000, method="PUT")
    try:
        with pytest.raises(CommitOutcomeUnknownError) as caught:
            s3_target.write("v", 5, "append")
    finally:
        attempts = version_puts(log, 3)
        log.clear()
    assert isinstance(caught.value, ShuffleIOError)
    assert attempts == [500, 500], attempts  # the client's retry budget, then it gave up
    assert "version 3" in str(caught.value) and caught.value.commit_id in str(caught.value)
    assert s3_target.versions() == [1, 2]
    kept = s3_target.part_names() - files_before
    assert len(kept) == 2, kept  # the job's data file and index
    assert s3_target.read() == scenario.rows()
    report = ash.vacuum(s3_target.url, older_than=LONG, storage_options=s3_target.options)
    assert report.ok and not report.removed and set(report.recent) == kept, report
    check_versions_and_files(s3_target, scenario.model, writers_done=False)
    # A later commit works and does not list them; vacuum(0) then removes them.
    version = s3_target.write("w", 2, "append").version
    scenario.committed(version, sorted(scenario.rows() + rows_of("w", 2)))
    assert not kept & s3_target.listed(version)
    report = ash.vacuum(s3_target.url, older_than=0, storage_options=s3_target.options)
    assert kept <= set(report.removed), report
    scenario.check()


@pytest.mark.s3
def test_a_put_that_fails_once_then_lands_is_a_plain_success(s3_target, s3_endpoint):
    scenario = Scenario(s3_target)
    setup(s3_target, scenario, 1)
    s3_endpoint.log.fail_next(version_key(2), 1, method="PUT")
    version = s3_target.write("v", 5, "overwrite").version
    assert version_puts(s3_endpoint.log, 2) == [500, 200]
    scenario.committed(version, rows_of("v", 5))
    scenario.check()


# ---------------------------------------------------------------------- truly at once


def test_of_simultaneous_creates_of_one_version_exactly_one_wins(target):
    """The one atomic step: threads released together create one name; one succeeds."""
    directory = resolve(target.url, target.options)
    if directory.is_local:
        os.makedirs(directory.path, exist_ok=True)
    location = version_location(directory, 1)
    threads = 8
    barrier = threading.Barrier(threads)

    def create(i: int) -> bool:
        barrier.wait()
        return create_exclusive(location, f"payload {i}".encode())

    with ThreadPoolExecutor(threads) as pool:
        won = list(pool.map(create, range(threads)))
    assert won.count(True) == 1, won
    content = bytes(location.fs.cat_file(location.path))
    assert content == f"payload {won.index(True)}".encode()
    assert not target.temporaries()


def test_appends_from_threads_all_land_once(target):
    """Appenders released together: each append makes one version, every version its rows."""
    scenario = Scenario(target)
    setup(target, scenario, 1)
    threads, each = 4, 3
    barrier = threading.Barrier(threads)

    def appender(t: int) -> list[tuple[int, list[Row]]]:
        barrier.wait()
        done = []
        for i in range(each):
            tag, rows = f"t{t}-{i}", 2 + i
            done.append((int(target.write(tag, rows, "append").version), rows_of(tag, rows)))
        return done

    with ThreadPoolExecutor(threads) as pool:
        appended = sorted(a for done in pool.map(appender, range(threads)) for a in done)
    assert [v for v, _ in appended] == list(range(2, 2 + threads * each))
    for version, rows in appended:
        scenario.model[version] = sorted(scenario.rows() + rows)
    scenario.check()


# ---------------------------------------------------------------------- more than rows


@pytest.mark.parametrize("step", STEPS)
def test_an_append_rechecks_the_schema_of_the_version_it_lands_on(tmp_path, monkeypatch, step):
    """An overwrite with another schema lands inside an append: the append is refused then."""
    target = Target(str(tmp_path / "ds"))
    scenario = Scenario(target)
    setup(target, scenario, 2)
    interleave = Interleave(monkeypatch, step)
    other = pa.table({"k": pa.array([1, 2, 3], pa.int64()), "other": ["x", "y", "z"]})

    def intrude() -> None:
        version = ash.write_dataset(
            other, target.url, num_subpartitions=N, by="k", mode="overwrite"
        ).version
        assert version == 3

    interleave.arm(intrude)
    with pytest.raises(SchemaMismatchError, match="cannot append"):
        target.write("v", 5, "append")
    assert interleave.fired == 1
    assert target.versions() == [1, 2, 3]
    assert target.part_names() == target.listed(1) | target.listed(2) | target.listed(3)
    assert ash.open_dataset(target.url).read().num_rows == 3
    scenario.check_readers()


def test_an_ignore_write_beaten_by_a_first_write_keeps_the_dataset(target, monkeypatch):
    """``ignore`` over nothing, and a first write lands inside: nothing more is committed."""
    scenario = Scenario(target)
    interleave = Interleave(monkeypatch, "create")

    def intrude() -> None:
        scenario.committed(target.write("i", 4, "error").version, rows_of("i", 4))

    interleave.arm(intrude)
    manifest = target.write("v", 5, "ignore")
    assert interleave.fired == 1
    assert manifest.version == 1
    scenario.check()


def test_a_commit_inside_a_vacuum_keeps_its_files(target, monkeypatch):
    """A vacuum with no grace period lists the directory; an append commits files it saw
    unlisted, and files an earlier version listed; the vacuum's second read keeps them."""
    from arrowshuffle.writers import vacuum as vacuum_module

    scenario = Scenario(target)
    setup(target, scenario, 2)
    directory = resolve(target.url, target.options)
    base = check_commit(directory, mode="append")
    job_id = new_job_id()
    written = ash.write(
        table_of("v", 5),
        directory.child(new_file_name(0, job_id=job_id)).url,
        num_subpartitions=N,
        by="k",
        storage_options=target.options,
    )
    real = vacuum_module.list_directory
    calls: list[str] = []

    def list_directory(location):
        out = real(location)
        calls.append(location.url)
        if len(calls) == 1:  # the dataset directory, before the versions are read again
            manifest = commit_dataset(
                directory,
                [written],
                schema=written.schema,
                num_subpartitions=N,
                partitioner=written.partitioner,
                mode="append",
                job_id=job_id,
                base=base,
            )
            scenario.committed(manifest.version, sorted(scenario.rows() + rows_of("v", 5)))
        return out

    monkeypatch.setattr(vacuum_module, "list_directory", list_directory)
    report = ash.vacuum(target.url, older_than=0, storage_options=target.options)
    assert calls and report.ok, report
    assert report.retained_versions == (2,)  # what it read first; version 3 came later
    monkeypatch.undo()
    scenario.check()


def test_a_vacuum_never_puts_back_an_older_compatibility_copy(target, monkeypatch):
    """A commit lands while a vacuum runs: the copy for readers before versions (spec 8.1) stays
    the newer version's, not the one the vacuum read first."""
    from arrowshuffle.writers import vacuum as vacuum_module

    scenario = Scenario(target)
    setup(target, scenario, 2)
    real = vacuum_module.list_directory
    calls: list[str] = []

    def list_directory(location):
        out = real(location)
        calls.append(location.url)
        if len(calls) == 1:
            version = target.write("v", 3, "append").version
            scenario.committed(version, sorted(scenario.rows() + rows_of("v", 3)))
        return out

    monkeypatch.setattr(vacuum_module, "list_directory", list_directory)
    ash.vacuum(target.url, older_than=LONG, storage_options=target.options)
    monkeypatch.undo()
    assert target.copy_version() == 3 == scenario.current
    scenario.check()


@pytest.mark.s3
def test_an_abort_after_an_unknown_outcome_keeps_the_files_while_the_store_fails(
    s3_target, s3_endpoint, monkeypatch
):
    """A job's driver aborts after its commit reported an unknown outcome (Spark calls its data
    source's ``abort`` when ``commit`` raised), while the store still fails: the version may
    list the files (here it does), so the abort must not remove them."""
    scenario = Scenario(s3_target)
    setup(s3_target, scenario, 2)
    monkeypatch.setattr(RemoteSource, "_pause", lambda self, attempt: None)  # quick retries
    directory = resolve(s3_target.url, s3_target.options)
    job_id = new_job_id()
    written = ash.write(
        table_of("v", 5),
        directory.child(new_file_name(0, job_id=job_id)).url,
        num_subpartitions=N,
        by="k",
        storage_options=s3_target.options,
    )
    log = s3_endpoint.log
    log.lose_next_answer(version_key(3))
    log.fail_next(version_key(3), 1000)
    try:
        with pytest.raises(CommitOutcomeUnknownError):
            commit_dataset(
                directory,
                [written],
                schema=written.schema,
                num_subpartitions=N,
                partitioner=written.partitioner,
                mode="append",
                job_id=job_id,
            )
        abort_dataset(directory, [written], job_id=job_id)
    finally:
        log.clear()
    assert s3_target.listed(3) <= s3_target.part_names()
    scenario.committed(3, sorted(scenario.rows() + rows_of("v", 5)))
    scenario.check()
