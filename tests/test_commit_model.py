"""Commits, readers and vacuum against a model, in any order hypothesis finds.

A state machine begins operations (an append, an overwrite, a first write, a compaction of some
consecutive files), which write their files and remember the version they started from without
committing, and finishes them later in any order, interleaved with readers that open the
dataset (at the version in force or an older retained one) and read it later, and with vacuums
with no grace period or a long one. The model holds the rows and the data files of every
version the acknowledged commits made:

* an append always commits, on top of whatever is in force; an overwrite or a first write
  commits only if the version in force is still the one it started from, else it fails with
  CommitConflictError naming both and its files are gone; a compaction commits while every
  file it merged is still listed (its new file takes the place of the first), else it fails
  the same way and leaves no file;
* after every step: the version in force holds exactly the model's rows, every retained version
  lists exactly the model's files and they all exist, and the directory holds nothing else than
  those and the files of operations not yet finished;
* a reader returns its version's rows, or MissingObjectError once a vacuum with no grace
  period expired that version; after such a vacuum the directory holds exactly the files the
  version in force lists.

Single process and local: every interleaving is a sequence of steps, replayed exactly.
"""

from __future__ import annotations

import os
import posixpath
import shutil
import tempfile
from dataclasses import dataclass, field

import hypothesis.strategies as st
from commit_checks import LONG, N, Row, Target, diff, rows_of, rows_read, table_of
from hypothesis import HealthCheck, event, settings
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

import arrowshuffle as ash
from arrowshuffle.format.errors import CommitConflictError, InvalidOptionError, MissingObjectError
from arrowshuffle.format.manifest import Manifest
from arrowshuffle.format.naming import new_file_name, new_job_id
from arrowshuffle.readers.storage import resolve
from arrowshuffle.writers.compact import (
    CompactionGroup,
    commit_compaction,
    merge_files,
    start_compaction,
)
from arrowshuffle.writers.dataset_writer import (
    Base,
    abort_dataset,
    check_commit,
    commit_dataset,
)
from arrowshuffle.writers.file_writer import WrittenFile


@dataclass
class Version:
    """What the model says one version holds."""

    rows: list[Row]
    files: list[str]  # data file names, in manifest order


@dataclass
class Pending:
    """An operation that wrote its files and has not committed yet."""

    kind: str  # append, overwrite, error, compact
    base: int | None
    written: list[WrittenFile]
    job_id: str
    rows: list[Row] = field(default_factory=list)
    # compaction only
    before: Manifest | None = None
    group: CompactionGroup | None = None
    inputs: list[str] = field(default_factory=list)

    @property
    def names(self) -> set[str]:
        return {posixpath.basename(w.data_url) for w in self.written} | {
            posixpath.basename(w.index_url) for w in self.written
        }


@dataclass
class Reader:
    dataset: ash.ShuffleDataset
    expired: bool = False  # a vacuum with no grace period expired its version since it opened


def data_name(written: WrittenFile) -> str:
    return posixpath.basename(written.data_url)


class CommitModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.root = tempfile.mkdtemp(prefix="commit-model-")
        self.target = Target(os.path.join(self.root, "ds"))
        os.makedirs(self.target.url)
        self.directory = resolve(self.target.url, None)
        self.versions: dict[int, Version] = {}
        self.expired: set[int] = set()
        self.pending: list[Pending] = []
        self.readers: list[Reader] = []
        self.operations = 0

    def teardown(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)

    # ------------------------------------------------------------------ the model

    @property
    def current(self) -> int | None:
        return max(self.versions) if self.versions else None

    def in_force(self) -> Version:
        return self.versions[self.current] if self.versions else Version([], [])

    def committed(self, manifest: Manifest, version: Version) -> None:
        expected = 1 if self.current is None else self.current + 1
        assert manifest.version == expected, (manifest.version, expected)
        self.versions[expected] = version

    def retained(self) -> list[int]:
        return sorted(v for v in self.versions if v not in self.expired)

    # ------------------------------------------------------------------ beginning

    @initialize(appends=st.integers(0, 3))
    def start(self, appends: int) -> None:
        """Most examples start from a dataset of a few files (some from none at all)."""
        for _ in range(appends):
            self.begin_write("append", [3])
            self.finish_at(len(self.pending) - 1)

    @rule(
        mode=st.sampled_from(["append", "append", "overwrite", "error"]),
        sizes=st.lists(st.integers(0, 5), min_size=1, max_size=2),
    )
    def begin_write(self, mode: str, sizes: list[int]) -> None:
        if mode == "error" and self.current is not None:
            try:
                check_commit(self.directory, mode=mode)
            except InvalidOptionError:
                return
            raise AssertionError("a first write over an existing dataset was not refused")
        base = check_commit(self.directory, mode=mode).version
        assert base == self.current
        job_id = new_job_id()
        pending = Pending(mode, base, [], job_id)
        for task, size in enumerate(sizes):
            self.operations += 1
            tag = f"w{self.operations}"
            name = new_file_name(task, job_id=job_id)
            pending.written.append(
                ash.write(
                    table_of(tag, size),
                    os.path.join(self.target.url, name),
                    num_subpartitions=N,
                    by="k",
                )
            )
            pending.rows += rows_of(tag, size)
        self.pending.append(pending)

    @precondition(lambda self: len(self.in_force().files) >= 2)
    @rule(data=st.data())
    def begin_compaction(self, data: st.DataObject) -> None:
        job = start_compaction(
            self.target.url, target_file_size="1GiB", storage_options=None, memory="1MiB"
        )
        before = job.before
        assert before.version == self.current
        count = len(before.files)
        start = data.draw(st.integers(0, count - 2), label="first merged file")
        length = data.draw(st.integers(2, count - start), label="files merged")
        positions = tuple(range(start, start + length))
        inputs = [before.files[i] for i in positions]
        group = CompactionGroup(
            0, positions, sum(f.data_size for f in inputs), sum(f.rows for f in inputs)
        )
        job_id = new_job_id()
        written = merge_files(
            job.directory,
            inputs,
            name=new_file_name(0, job_id=job_id),
            num_subpartitions=before.num_subpartitions,
            partitioner=before.partitioner,
            memory="1MiB",
        ).written
        self.pending.append(
            Pending(
                "compact",
                before.version,
                [written],
                job_id,
                before=before,
                group=group,
                inputs=[f.data for f in inputs],
            )
        )

    # ------------------------------------------------------------------ finishing

    @precondition(lambda self: self.pending)
    @rule(data=st.data())
    def finish(self, data: st.DataObject) -> None:
        self.finish_at(data.draw(st.integers(0, len(self.pending) - 1), label="pending"))

    def finish_at(self, i: int) -> None:
        op = self.pending.pop(i)
        if op.kind == "compact":
            self._finish_compaction(op)
        else:
            self._finish_write(op)

    def _finish_write(self, op: Pending) -> None:
        now = self.in_force()
        wins = op.kind == "append" or op.base == self.current
        try:
            manifest = commit_dataset(
                self.directory,
                op.written,
                schema=op.written[0].schema,
                num_subpartitions=N,
                partitioner=op.written[0].partitioner,
                mode=op.kind,
                job_id=op.job_id,
                base=Base(op.base),
            )
        except CommitConflictError as exc:
            assert not wins, f"{op.kind} from version {op.base} lost at {self.current}: {exc}"
            assert (exc.expected, exc.found) == (op.base, self.current)
            self.check_gone(op)
            event(f"{op.kind}: conflict")
            return
        assert wins, f"{op.kind} from version {op.base} committed over version {self.current}"
        event(f"{op.kind}: committed" + (" on a moved base" if op.base != self.current else ""))
        names = [data_name(w) for w in op.written]
        if op.kind == "append":
            version = Version(sorted(now.rows + op.rows), now.files + names)
        else:
            version = Version(sorted(op.rows), names)
        self.committed(manifest, version)

    def _finish_compaction(self, op: Pending) -> None:
        assert op.before is not None and op.group is not None
        now = self.in_force()
        wins = all(name in now.files for name in op.inputs)
        try:
            manifest = commit_compaction(
                self.directory, op.before, [op.group], {0: op.written[0]}, job_id=op.job_id
            )
        except CommitConflictError as exc:
            assert not wins, f"a compaction of files still listed lost: {exc}"
            assert (exc.expected, exc.found) == (op.base, self.current)
            self.check_gone(op)
            event("compact: conflict")
            return
        assert wins, "a compaction committed although some file it merged was replaced"
        event("compact: committed" + (" (rebased)" if op.base != self.current else ""))
        files: list[str] = []
        for name in now.files:
            if name == op.inputs[0]:
                files.append(data_name(op.written[0]))
            elif name not in op.inputs:
                files.append(name)
        self.committed(manifest, Version(now.rows, files))

    @precondition(lambda self: self.pending)
    @rule(data=st.data())
    def abandon(self, data: st.DataObject) -> None:
        op = self.pending.pop(data.draw(st.integers(0, len(self.pending) - 1), label="pending"))
        abort_dataset(self.directory, op.written, job_id=op.job_id)
        self.check_gone(op)

    def check_gone(self, op: Pending) -> None:
        left = op.names & self.target.names()
        assert not left, f"files of a {op.kind} that committed nothing were left: {left}"

    # ------------------------------------------------------------------ readers and vacuum

    @precondition(lambda self: self.versions)
    @rule(data=st.data())
    def open_reader(self, data: st.DataObject) -> None:
        versions = sorted(self.versions)
        version = data.draw(st.sampled_from([None, *versions]), label="version")
        try:
            dataset = ash.open_dataset(self.target.url, version=version)
        except MissingObjectError:
            assert version in self.expired, f"retained version {version} cannot be opened"
            return
        assert version not in self.expired, f"expired version {version} opened"
        assert dataset.version == (self.current if version is None else version)
        self.readers.append(Reader(dataset))

    @precondition(lambda self: self.readers)
    @rule(data=st.data())
    def read(self, data: st.DataObject) -> None:
        reader = data.draw(st.sampled_from(self.readers), label="reader")
        version = reader.dataset.version
        try:
            got = rows_read(reader.dataset.read())
        except MissingObjectError:
            assert reader.expired, f"a reader of retained version {version} lost files"
            self.readers.remove(reader)
            event("read: expired version, files gone")
            return
        if reader.expired:
            event("read: expired version, files still there")
        elif version != self.current:
            event("read: an older retained version")
        assert got == self.versions[version].rows, diff(
            f"reader of version {version}", got, self.versions[version].rows
        )

    @precondition(lambda self: self.versions)
    @rule()
    def vacuum_keeping_everything(self) -> None:
        report = ash.vacuum(self.target.url, older_than=LONG)
        assert report.ok and not report.removed, report
        assert list(report.retained_versions) == self.retained()

    @precondition(lambda self: self.versions and not self.pending)
    @rule()
    def vacuum_now(self) -> None:
        # Not while operations are under way: their files are unlisted, and a vacuum with no
        # grace period removes those (the race spec section 7.3 bounds by the grace period).
        report = ash.vacuum(self.target.url, older_than=0)
        assert report.ok, report
        assert report.retained_versions == (self.current,)
        for version in self.versions:
            if version != self.current:
                self.expired.add(version)
        for reader in self.readers:
            if reader.dataset.version != self.current:
                reader.expired = True
        assert self.target.part_names() == self.target.listed(self.current)

    @precondition(lambda self: self.versions)
    @rule()
    def validate(self) -> None:
        report = ash.validate_dataset(self.target.url, deep=True)
        assert report.ok, report

    # ------------------------------------------------------------------ invariants

    @invariant()
    def the_version_in_force_holds_the_models_rows(self) -> None:
        if self.current is None:
            assert not self.target.versions()
            return
        got = self.target.read()
        assert got == self.in_force().rows, diff("version in force", got, self.in_force().rows)

    @invariant()
    def retained_versions_list_the_models_files_which_exist(self) -> None:
        assert self.target.versions() == self.retained()
        present = self.target.part_names()
        expected: set[str] = set()
        for version in self.retained():
            listed = self.target.version_json(version)["files"]
            assert [f["data"] for f in listed] == self.versions[version].files, version
            names = self.target.listed(version)
            assert names <= present, f"version {version} lists removed files {names - present}"
            expected |= names
        for op in self.pending:
            expected |= op.names
        assert present == expected, f"unexpected files {present - expected}"
        assert not self.target.temporaries()


#: The same examples on every run (CI stays reproducible); set COMMIT_MODEL_EXAMPLES to explore
#: that many random ones instead.
EXPLORE = os.environ.get("COMMIT_MODEL_EXAMPLES")
CommitModel.TestCase.settings = settings(
    max_examples=int(EXPLORE or 75),
    stateful_step_count=50,
    deadline=None,
    derandomize=EXPLORE is None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
TestCommitModel = CommitModel.TestCase
