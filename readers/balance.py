"""Balanced read plans from sizes alone: coalesce small subpartitions, split hot ones.

Pure (no IO). A shuffle dataset knows the bytes and rows of every (file, region, subpartition)
chunk without reading data, so a plan that gives every task about the same work needs only
those sizes, the way Spark's adaptive execution does for live shuffles:

* contiguous subpartitions are **coalesced** into one task while their bytes stay within
  ``target_bytes`` (a subpartition larger than the target is a task of its own);
* a **skewed** subpartition — more than ``skew_factor`` x the median of the selected
  subpartitions and more than ``skew_min_bytes`` — is **split** into several tasks over
  disjoint groups of files, and a file that alone exceeds the target into groups of its
  regions.

Every selected (file, subpartition) chunk belongs to exactly one task. A broadcast chunk
belongs to every subpartition (its entry is every subpartition's), so the tasks that read
different subpartitions each read it, as a plain read of those subpartitions would.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

import numpy as np

from arrowshuffle.format.errors import InvalidOptionError

_Task = TypeVar("_Task")

#: Spark's adaptive execution splits a partition above 5 x the median ...
DEFAULT_SKEW_FACTOR = 5.0
#: ... and above 256 MiB.
DEFAULT_SKEW_MIN_BYTES = 256 * 1024 * 1024
#: The bytes a planned task aims at (Spark's advisory size is 64 MiB; Arrow decoding is cheaper
#: per byte than Spark's row format, so a task can take more).
DEFAULT_TARGET_BYTES = 128 * 1024 * 1024
#: The smallest target a plan spread over the cores takes (smaller tasks cost more than they
#: balance).
DEFAULT_MIN_TARGET_BYTES = 4 * 1024 * 1024


@dataclass(frozen=True)
class PlannedRead:
    """One task of a plan: a contiguous range of subpartitions from some files.

    Attributes:
        subpartitions: the subpartitions the task reads, a contiguous range.
        files: positions of the files it reads in the dataset's file list (all files, unless
            the task is part of a skew split).
        regions: the regions it reads when it reads part of one file (a skew split of a file
            too large for one task); ``None`` for all regions.
        bytes: chunk bytes the task reads (a broadcast chunk counted for each subpartition).
        rows: rows the task returns.
        snapshot: the data the plan was made on (``Readable.snapshot``: a dataset's manifest
            version and commit, or a file's id). File positions and regions mean nothing in
            other data, so a reader of other data refuses the task; empty for a task made by
            hand, which is not checked.
    """

    subpartitions: range
    files: tuple[int, ...]
    regions: range | None
    bytes: int
    rows: int
    snapshot: str = ""

    def to_dict(self) -> dict[str, object]:
        """A JSON-serializable form (ranges as ``[start, stop)`` pairs)."""
        return {
            "subpartitions": [self.subpartitions.start, self.subpartitions.stop],
            "files": list(self.files),
            "regions": None if self.regions is None else [self.regions.start, self.regions.stop],
            "bytes": self.bytes,
            "rows": self.rows,
            "snapshot": self.snapshot,
        }


@dataclass(frozen=True)
class SubpartitionSizes:
    """Where one subpartition's bytes and rows lie: per file, per region.

    ``bytes[f]`` and ``rows[f]`` are arrays over file ``f``'s regions.
    """

    bytes: Sequence[np.ndarray]
    rows: Sequence[np.ndarray]


#: Given a subpartition, its sizes in every file (fetched only for the few that are split).
SizesOf = Callable[[int], SubpartitionSizes]


def spread_target(selected_bytes: int, parallelism: int) -> int:
    """The target that spreads ``selected_bytes`` over ``parallelism`` tasks.

    Kept within [:data:`DEFAULT_MIN_TARGET_BYTES`, :data:`DEFAULT_TARGET_BYTES`].
    """
    share = -(-int(selected_bytes) // max(int(parallelism), 1))
    return min(DEFAULT_TARGET_BYTES, max(DEFAULT_MIN_TARGET_BYTES, share))


def skewed(
    sizes: np.ndarray, selected: np.ndarray, *, skew_factor: float, skew_min_bytes: int
) -> np.ndarray:
    """Boolean mask over subpartitions: selected and above both skew thresholds."""
    if not selected.any():
        return np.zeros_like(selected)
    median = float(np.median(sizes[selected]))
    return selected & (sizes > skew_factor * median) & (sizes > skew_min_bytes)


def plan_reads(
    subpartition_bytes: np.ndarray,
    subpartition_rows: np.ndarray,
    runs: Sequence[range],
    num_files: int,
    sizes_of: SizesOf,
    *,
    target_bytes: int = DEFAULT_TARGET_BYTES,
    skew_factor: float = DEFAULT_SKEW_FACTOR,
    skew_min_bytes: int = DEFAULT_SKEW_MIN_BYTES,
    max_tasks: int | None = None,
) -> list[PlannedRead]:
    """Plan balanced tasks over the selected subpartitions.

    Args:
        subpartition_bytes: bytes of every subpartition summed over files, shape ``(N,)``.
        subpartition_rows: rows of every subpartition summed over files, shape ``(N,)``.
        runs: the selected subpartitions as sorted, disjoint, contiguous runs.
        num_files: files in the dataset.
        sizes_of: per-file, per-region sizes of one subpartition; called only for the
            subpartitions that are split.
        target_bytes: the bytes a task aims at.
        skew_factor: a subpartition above this multiple of the median is skewed ...
        skew_min_bytes: ... when it also holds more than this many bytes.
        max_tasks: the most tasks; the target grows until the plan fits (runs that are not
            contiguous, or skew splits, may still need more).

    Returns:
        Tasks in subpartition order (the tasks of one split subpartition in file order).
    """
    _check_options(target_bytes, skew_factor, skew_min_bytes, max_tasks)
    n = len(subpartition_bytes)
    selected = np.zeros(n, dtype=bool)
    for run in runs:
        selected[run.start : run.stop] = True
    hot = skewed(
        subpartition_bytes, selected, skew_factor=skew_factor, skew_min_bytes=skew_min_bytes
    )
    splits = {int(s): sizes_of(int(s)) for s in np.flatnonzero(hot)} if num_files else {}
    total = int(subpartition_bytes[selected].sum()) if selected.any() else 0
    return fit_tasks(
        lambda target: _plan(
            subpartition_bytes, subpartition_rows, runs, num_files, hot, splits, target
        ),
        target_bytes,
        total,
        max_tasks,
    )


def fit_tasks(
    plan: Callable[[int], list[_Task]], target: int, total: int, max_tasks: int | None
) -> list[_Task]:
    """``plan(target)``, the target grown by a quarter at a time until at most ``max_tasks``.

    Stops growing at ``total`` bytes (one task's worth), where a plan that still has more
    tasks (runs that are not contiguous, skew splits) is returned as it is.
    """
    while True:
        tasks = plan(target)
        if max_tasks is None or len(tasks) <= max_tasks or target >= max(total, 1):
            return tasks
        target = min(max(total, 1), max(target + 1, int(target * 1.25)))


def _check_options(
    target_bytes: int, skew_factor: float, skew_min_bytes: int, max_tasks: int | None
) -> None:
    if target_bytes < 1:
        raise InvalidOptionError(f"target_bytes must be at least 1 byte, found {target_bytes}")
    if isinstance(skew_factor, bool) or not isinstance(skew_factor, (int, float)):
        raise InvalidOptionError(f"skew_factor must be a number, found {skew_factor!r}")
    if not skew_factor > 0:
        raise InvalidOptionError(f"skew_factor must be above 0, found {skew_factor!r}")
    if skew_min_bytes < 0:
        raise InvalidOptionError(f"skew_min_bytes must be at least 0, found {skew_min_bytes}")
    if max_tasks is not None and (isinstance(max_tasks, bool) or max_tasks < 1):
        raise InvalidOptionError(f"max_tasks must be at least 1, found {max_tasks!r}")


def _plan(
    sizes: np.ndarray,
    rows: np.ndarray,
    runs: Sequence[range],
    num_files: int,
    hot: np.ndarray,
    splits: dict[int, SubpartitionSizes],
    target: int,
) -> list[PlannedRead]:
    every_file = tuple(range(num_files))
    tasks: list[PlannedRead] = []
    for run in runs:
        start = run.start
        acc_bytes = acc_rows = 0
        for s in run:
            if s in splits:
                if s > start:
                    tasks.append(
                        PlannedRead(range(start, s), every_file, None, acc_bytes, acc_rows)
                    )
                tasks.extend(_split(s, splits[s], target))
                start, acc_bytes, acc_rows = s + 1, 0, 0
                continue
            size = int(sizes[s])
            if s > start and acc_bytes + size > target:
                tasks.append(PlannedRead(range(start, s), every_file, None, acc_bytes, acc_rows))
                start, acc_bytes, acc_rows = s, 0, 0
            acc_bytes += size
            acc_rows += int(rows[s])
        if run.stop > start:
            tasks.append(PlannedRead(range(start, run.stop), every_file, None, acc_bytes, acc_rows))
    return tasks


def _split(s: int, sizes: SubpartitionSizes, target: int) -> list[PlannedRead]:
    """Split one subpartition into tasks over consecutive files, or regions of one file."""
    one = range(s, s + 1)
    tasks: list[PlannedRead] = []
    group: list[int] = []
    group_bytes = group_rows = 0

    def close_group() -> None:
        nonlocal group, group_bytes, group_rows
        if group:
            tasks.append(PlannedRead(one, tuple(group), None, group_bytes, group_rows))
        group, group_bytes, group_rows = [], 0, 0

    for f, (region_bytes, region_rows) in enumerate(zip(sizes.bytes, sizes.rows, strict=True)):
        file_bytes = int(region_bytes.sum())
        file_rows = int(region_rows.sum())
        if file_bytes > target and len(region_bytes) > 1:
            close_group()
            tasks.extend(_split_regions(one, f, region_bytes, region_rows, target))
            continue
        if group and group_bytes + file_bytes > target:
            close_group()
        group.append(f)
        group_bytes += file_bytes
        group_rows += file_rows
    close_group()
    return tasks


def _split_regions(
    one: range, f: int, region_bytes: np.ndarray, region_rows: np.ndarray, target: int
) -> list[PlannedRead]:
    """Consecutive regions of one file, grouped up to the target."""
    tasks: list[PlannedRead] = []
    start = 0
    acc_bytes = acc_rows = 0
    for r in range(len(region_bytes)):
        size = int(region_bytes[r])
        if r > start and acc_bytes + size > target:
            tasks.append(PlannedRead(one, (f,), range(start, r), acc_bytes, acc_rows))
            start, acc_bytes, acc_rows = r, 0, 0
        acc_bytes += size
        acc_rows += int(region_rows[r])
    tasks.append(PlannedRead(one, (f,), range(start, len(region_bytes)), acc_bytes, acc_rows))
    return tasks


def balanced_cuts(sizes: np.ndarray, pieces: int) -> list[range]:
    """Cut a row of units into at most ``pieces`` contiguous ranges of about equal size.

    Unit ``i`` goes to the piece its midpoint falls in (``(before_i + size_i / 2) / share``,
    with ``share`` the total over ``pieces``), so every piece is within one unit of the share
    and no small remainder is left at the end, as filling pieces up to a target would leave.
    Empty pieces are dropped; units of size 0 join a neighbour.
    """
    n = len(sizes)
    values = np.asarray(sizes, dtype=np.float64)
    total = float(values.sum())
    if n == 0:
        return []
    if pieces <= 1 or total <= 0:
        return [range(0, n)]
    middle = np.cumsum(values) - values / 2
    owner = np.minimum((middle * pieces / total).astype(np.int64), pieces - 1)
    cuts = (np.flatnonzero(np.diff(owner)) + 1).tolist()
    return [range(a, b) for a, b in zip([0, *cuts], [*cuts, n], strict=True)]


def skew_ratio(task_bytes: Sequence[int]) -> float | None:
    """The max / mean ratio of task bytes (1.0 is perfectly balanced); None without bytes."""
    values = np.asarray(task_bytes, dtype=np.float64)
    if values.size == 0 or values.sum() == 0:
        return None
    return float(values.max() / values.mean())
