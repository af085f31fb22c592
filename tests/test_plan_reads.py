"""Planned reads of real datasets: every chunk exactly once, and the rows of a plain read.

Random datasets (file counts, sizes, skew, broadcast regions, region sizes) are written to disk
or to the local S3 endpoint, planned with random small targets and skew thresholds, and read
task by task: the tasks together must return the multiset of rows of ``ds.read()`` of the same
selection, and cover every selected (file, region, subpartition) chunk exactly once.
"""

from __future__ import annotations

import dataclasses
import tempfile
import uuid
from collections import Counter
from typing import Any

import pyarrow as pa
import pytest
from dataset_factory import SCHEMA, WrittenDataset, canonical, write_dataset
from hypothesis import HealthCheck, currently_in_test_context, event, given, settings
from hypothesis import strategies as st
from manifest_edits import replace_manifest

from arrowshuffle import PlannedRead, ShuffleDataset, open_dataset
from arrowshuffle.readers.byte_ranges import Subpartitions, subpartition_runs


@dataclasses.dataclass(frozen=True)
class Case:
    """One random dataset, plan and selection."""

    layout: dict[str, Any]
    plan: dict[str, Any]
    selection: Subpartitions | None


@st.composite
def cases(draw: st.DrawFn, max_files: int = 4) -> Case:
    n = draw(st.integers(1, 9))
    batches = draw(st.integers(1, 5))  # datasets without rows: test_datasets_without_rows
    layout = {
        "num_files": draw(st.integers(1, max_files)),
        "num_subpartitions": n,
        "batches_per_file": batches,
        "rows_per_batch": draw(st.integers(1, 60)),
        # Small sort buffers give files several regions, so that splits can cut files apart.
        "memory": draw(st.sampled_from([1024, 2048, 4096, 1 << 20])),
        "broadcast_batches": tuple(draw(st.sets(st.integers(0, max(batches - 1, 0)), max_size=2))),
        "skew": draw(st.booleans()),
        "seed": draw(st.integers(0, 2**16)),
    }
    plan = {
        # Small targets and thresholds often, so that hot subpartitions are split.
        "target_bytes": draw(st.integers(1, 4_000) | st.integers(1, 40_000)),
        "skew_factor": draw(st.sampled_from([0.5, 1.0, 1.5, 2.0, 5.0])),
        "skew_min_bytes": draw(st.just(0) | st.integers(0, 5_000) | st.integers(0, 50_000)),
        "max_tasks": draw(st.sampled_from([None, None, None, 1, 2, 5, 30])),
    }
    selection = draw(
        st.none()
        | st.integers(0, n - 1)
        | st.lists(st.integers(0, n - 1), max_size=n)
        | st.builds(lambda a, b: range(min(a, b), max(a, b)), st.integers(0, n), st.integers(0, n))
    )
    return Case(layout, plan, selection)


def selected_ids(selection: Subpartitions | None, n: int) -> list[int]:
    runs = subpartition_runs(range(n) if selection is None else selection, n)
    return [s for run in runs for s in run]


def check_coverage(ds: ShuffleDataset, tasks: list[PlannedRead], ids: list[int]) -> None:
    """Every selected (file, region, subpartition) chunk belongs to exactly one task."""
    regions = [ds.file(f).num_regions for f in range(ds.num_files)]
    covered: Counter[tuple[int, int, int]] = Counter()
    for t in tasks:
        assert t.files == tuple(sorted(set(t.files))), t
        if t.regions is not None:
            assert len(t.files) == 1 and len(t.subpartitions) == 1, t
            assert 0 <= t.regions.start < t.regions.stop <= regions[t.files[0]], t
        for f in t.files:
            for s in t.subpartitions:
                for r in range(regions[f]) if t.regions is None else t.regions:
                    covered[(f, s, r)] += 1
    wanted = {(f, s, r) for f in range(ds.num_files) for s in ids for r in range(regions[f])}
    twice = [chunk for chunk, count in covered.items() if count > 1]
    assert not twice, f"chunks planned more than once: {twice[:5]}"
    assert set(covered) == wanted, (
        f"missing {sorted(wanted - set(covered))[:5]}, extra {sorted(set(covered) - wanted)[:5]}"
    )


def check_plan(ds: ShuffleDataset, case: Case) -> list[PlannedRead]:
    tasks = ds.plan(subpartitions=case.selection, **case.plan)
    ids = selected_ids(case.selection, ds.num_subpartitions)
    planned_ids = [s for t in tasks for s in t.subpartitions]
    assert sorted(set(planned_ids)) == ids and planned_ids == sorted(planned_ids)
    check_coverage(ds, tasks, ids)
    if currently_in_test_context():  # how often the examples split and coalesce
        if any(t.regions is not None for t in tasks):
            event("a file split into regions")
        elif any(len(t.files) < ds.num_files for t in tasks):
            event("a subpartition split over files")
        if any(len(t.subpartitions) > 1 for t in tasks):
            event("subpartitions coalesced")
    parts = []
    for t in tasks:
        part = ds.read(task=t)
        assert part.num_rows == t.rows, t
        parts.append(part)
    got = pa.concat_tables(parts) if parts else SCHEMA.empty_table()
    want = ds.read(case.selection)
    assert sum(t.rows for t in tasks) == want.num_rows
    assert canonical(got).equals(canonical(want))
    return tasks


def write(url: str, case: Case, storage: dict[str, Any] | None = None) -> WrittenDataset:
    return write_dataset(url, storage_options=storage, **case.layout)


@settings(max_examples=80, deadline=None)
@given(case=cases())
def test_tasks_cover_every_chunk_once_and_read_the_same_rows(case: Case) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        written = write(f"{tmp}/ds", case)
        check_plan(open_dataset(written.url), case)


@pytest.mark.parametrize(("num_files", "batches"), [(0, 3), (2, 0), (3, 2)])
@pytest.mark.parametrize("plan", [{}, {"target_bytes": 1, "skew_factor": 0.5, "skew_min_bytes": 0}])
def test_datasets_without_rows(
    tmp_path: Any, num_files: int, batches: int, plan: dict[str, Any]
) -> None:
    case = Case(
        {
            "num_files": num_files,
            "num_subpartitions": 4,
            "batches_per_file": batches,
            "broadcast_batches": (0,),
            "rows_per_batch": 1 if batches == 2 else 10,
        },
        plan,
        None,
    )
    written = write(str(tmp_path / "ds"), case)
    check_plan(open_dataset(written.url), case)


@settings(max_examples=25, deadline=None)
@given(case=cases(max_files=3))
def test_a_manifest_without_totals_plans_the_same_tasks(case: Case) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        written = write(f"{tmp}/ds", case)
        current = open_dataset(written.url)
        assert current.manifest.sizes is not None
        tasks = current.plan(subpartitions=case.selection, **case.plan)
        replace_manifest(written.url, dataclasses.replace(written.manifest, sizes=None))
        older = open_dataset(written.url)
        assert older.manifest.sizes is None
        for ours, theirs in zip(
            older.subpartition_sizes(), current.subpartition_sizes(), strict=True
        ):
            assert ours.tolist() == theirs.tolist()
        assert check_plan(older, case) == tasks


@settings(
    max_examples=8,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(case=cases(max_files=3))
def test_tasks_on_object_storage(s3_endpoint: Any, s3_bucket: str, case: Case) -> None:
    storage = s3_endpoint.storage_options()
    written = write(f"{s3_bucket}/{uuid.uuid4().hex}", case, storage)
    check_plan(open_dataset(written.url, storage), case)


def test_a_planned_read_opens_and_proves_each_file_once(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Many one-row files read task by task: each file is opened once, its index proven twice.

    Every task visits every file (none is split), so a read that opened a file, or decoded and
    proved its index, once per task would do it once per task and file.
    """
    import arrowshuffle.readers.dataset as dataset_module
    from arrowshuffle.readers.file_reader import ShuffleFile, clear_proof_cache

    opened: list[ShuffleFile] = []

    class Counted(ShuffleFile):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            opened.append(self)

    monkeypatch.setattr(dataset_module, "ShuffleFile", Counted)
    written = write_dataset(
        str(tmp_path / "ds"),
        num_files=40,
        num_subpartitions=8,
        batches_per_file=1,
        rows_per_batch=1,
    )
    plain = canonical(open_dataset(written.url).read())
    # Later opens of the same index bytes reuse their proof; count the planned read's own.
    clear_proof_cache()
    dataset = open_dataset(written.url)
    tasks = dataset.plan("1KiB")
    assert len(tasks) == 8  # one task per subpartition, each over all 40 files
    read = pa.concat_tables([dataset.read(task=t) for t in tasks])
    assert canonical(read).equals(plain)
    per_dataset = [f for f in opened if f.url.startswith(written.url.rstrip("/") + "/")]
    assert len(per_dataset) == 2 * 40  # the plain read's dataset, then the planned one's
    # The plain read proves each whole file once; the planned read proves the first task's
    # subpartition, then, at its second visit, the whole file, once.
    assert [f.proofs for f in per_dataset] == [1] * 40 + [2] * 40


@pytest.mark.parametrize("commit", ["append", "overwrite", "compact"])
def test_a_task_planned_on_another_version_is_refused(tmp_path: Any, commit: str) -> None:
    """A task names file positions and regions of the version it was planned on; read from
    another version it would give some other rows, or none, with no error."""
    import numpy as np

    import arrowshuffle as ash

    path = str(tmp_path / "ds")

    def rows(n: int, seed: int) -> pa.Table:
        rng = np.random.default_rng(seed)
        return pa.table({"k": rng.integers(0, 3, n), "v": rng.integers(0, 1 << 40, n)})

    first = rows(20_000, 1)
    for i in range(2):  # two files, so that compaction has files to merge
        ash.write_dataset(
            first.slice(i * 10_000, 10_000),
            path,
            num_subpartitions=2,
            by="k",
            memory="64KiB",
            mode="error" if i == 0 else "append",
        )
    planned = open_dataset(path)
    tasks = planned.plan(target_bytes="64KiB", skew_factor=1.0, skew_min_bytes=1)
    assert len(tasks) > 1 and any(len(t.files) == 1 for t in tasks)  # split over files
    if commit == "compact":
        ash.compact(path)
    else:
        ash.write_dataset(
            rows(30_000, 2), path, num_subpartitions=2, by="k", mode=commit, memory="64KiB"
        )
    latest = open_dataset(path)
    assert latest.version == planned.version + 1
    for task in tasks:
        with pytest.raises(ash.InvalidOptionError, match=r"planned on version \d+ \(commit"):
            latest.read(task=task)
    # The version it was planned on reads it, and the tasks together give that version's rows.
    pinned = open_dataset(path, version=planned.version)
    together = pa.concat_tables([pinned.read(task=t) for t in tasks])
    order = [("k", "ascending"), ("v", "ascending")]
    assert together.sort_by(order).equals(first.sort_by(order))


def test_a_task_planned_on_a_file_rewritten_since_is_refused(tmp_path: Any) -> None:
    """A file written again at the same path gets a new id: a task planned on the old one is
    refused, also when the new file has the same layout."""
    import numpy as np

    import arrowshuffle as ash

    def write(seed: int) -> None:
        rng = np.random.default_rng(seed)
        table = pa.table({"k": rng.integers(0, 2, 5000), "v": rng.integers(0, 9, 5000)})
        ids = table["k"].to_numpy()
        with ash.ShuffleFileWriter(
            data, table.schema, num_subpartitions=2, overwrite=True
        ) as writer:
            writer.write(table, subpartitions=ids)

    data = str(tmp_path / "one.arrow")
    write(1)
    tasks = ash.open_file(data).plan(target_bytes=1)
    write(2)
    for task in tasks:
        with pytest.raises(ash.InvalidOptionError, match="planned on file id"):
            ash.open_file(data).read(task=task)
    rewritten = ash.open_file(data)
    assert sum(rewritten.read(task=t).num_rows for t in rewritten.plan(target_bytes=1)) == 5000
