"""Plans of co-grouped reads: the same key groups of several inputs per task, from sizes alone.

Pure (no IO). Inputs are aligned on groups (see :mod:`arrowshuffle.format.copartition`):
group ``t`` is subpartition ``t`` of the inputs with the fewest subpartitions and
subpartitions ``t + jM`` of the others. A task reads a contiguous range of groups of *every*
input, so that every key's rows of every input meet in one task:

* contiguous groups are **coalesced** while the bytes of all inputs stay within the target;
* a **skewed** group — above ``skew_factor`` x the median group and above ``skew_min_bytes``
  — is **split** when the caller names an input that may be split: that input's chunks of the
  group are cut into tasks over disjoint groups of its files (or of one file's regions), and
  every such task reads the *whole* group of every other input, as Spark's adaptive skew join
  does. A row of the split input is then in exactly one task, a row of another input in each
  of them: right for an inner join, and for a left outer, left semi or left anti join that
  keeps the split input's rows; wrong for an aggregation over the other inputs' rows or an
  outer join that keeps them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from arrowshuffle.format.copartition import Alignment
from arrowshuffle.format.errors import InvalidOptionError
from arrowshuffle.readers.balance import (
    SizesOf,
    SubpartitionSizes,
    balanced_cuts,
    fit_tasks,
    skewed,
)
from arrowshuffle.readers.selection import FileRead


@dataclass(frozen=True)
class CoGroupTask:
    """One task of a co-grouped read: the same groups of every input.

    Attributes:
        index: the task's position in the plan.
        groups: the groups it reads, a contiguous range of ``[0, num_groups)``.
        bytes: chunk bytes the task reads over all inputs.
        rows: rows it reads over all inputs.
        split: the input of which it reads part of one skewed group (``None``: it reads its
            groups whole from every input).
        pieces: what it reads of the ``split`` input's files (empty without a split). Every
            other read is the task's groups of every file (see :func:`task_reads`), left out
            so that a plan stays small when it is sent to many workers.
    """

    index: int
    groups: range
    bytes: int
    rows: int
    split: str | None = None
    pieces: tuple[FileRead, ...] = ()


def task_reads(
    task: CoGroupTask, name: str, alignment: Alignment, num_files: int
) -> tuple[FileRead, ...]:
    """What ``task`` reads of input ``name``, a dataset of ``num_files`` files."""
    if name == task.split:
        return task.pieces
    subs = _subpartitions(alignment, name, task.groups)
    return tuple(FileRead(f, subs) for f in range(num_files))


@dataclass(frozen=True)
class InputSizes:
    """What the planner knows about one input.

    Attributes:
        bytes: bytes of every subpartition summed over files, shape ``(N,)``.
        rows: rows of every subpartition summed over files, shape ``(N,)``.
        num_files: the input's file count.
        sizes_of: per-file, per-region sizes of one subpartition (asked for skewed groups of
            the split input only).
    """

    bytes: np.ndarray
    rows: np.ndarray
    num_files: int
    sizes_of: SizesOf


def plan_cogroup(
    alignment: Alignment,
    inputs: Mapping[str, InputSizes],
    *,
    target_bytes: int,
    split: str | None = None,
    skew_factor: float,
    skew_min_bytes: int,
    max_tasks: int | None = None,
) -> list[CoGroupTask]:
    """Plan tasks over every group of the aligned inputs.

    Args:
        alignment: how the inputs line up.
        inputs: each input's sizes, by name (the names of ``alignment``).
        target_bytes: the bytes (over all inputs) a task aims at.
        split: the input whose skewed groups may be split over its files, or ``None``.
        skew_factor: a group above this multiple of the median group is skewed ...
        skew_min_bytes: ... when it also holds more than this many bytes.
        max_tasks: the most tasks; the target grows until the plan fits (skew splits may
            still need more).

    Returns:
        Tasks in group order (the tasks of a split group in file order).
    """
    if split is not None and split not in inputs:
        raise InvalidOptionError(
            f"split names no input: {split!r} is not one of {', '.join(map(repr, inputs))}"
        )
    m = alignment.num_groups
    group_bytes = {n: _per_group(s.bytes, m) for n, s in inputs.items()}
    group_rows = {n: _per_group(s.rows, m) for n, s in inputs.items()}
    total = np.asarray(np.sum(list(group_bytes.values()), axis=0, dtype=np.int64))
    hot = np.zeros(m, dtype=bool)
    if split is not None and inputs[split].num_files:
        every = np.ones(m, dtype=bool)
        hot = skewed(total, every, skew_factor=skew_factor, skew_min_bytes=skew_min_bytes)
    return fit_tasks(
        lambda target: _plan(alignment, inputs, group_bytes, group_rows, total, hot, split, target),
        target_bytes,
        int(total.sum()),
        max_tasks,
    )


def _per_group(values: np.ndarray, m: int) -> np.ndarray:
    """Values per subpartition summed into their groups (subpartition ``s`` is group ``s % m``)."""
    values = np.asarray(values, dtype=np.int64)
    return values.reshape(-1, m).sum(axis=0) if m else values


def _plan(
    alignment: Alignment,
    inputs: Mapping[str, InputSizes],
    group_bytes: Mapping[str, np.ndarray],
    group_rows: Mapping[str, np.ndarray],
    total: np.ndarray,
    hot: np.ndarray,
    split: str | None,
    target: int,
) -> list[CoGroupTask]:
    """Tasks at one target; ``total`` is every group's bytes over all inputs."""
    tasks: list[CoGroupTask] = []

    def add_whole(groups: range) -> None:
        size = int(total[groups.start : groups.stop].sum())
        rows = sum(int(r[groups.start : groups.stop].sum()) for r in group_rows.values())
        tasks.append(CoGroupTask(len(tasks), groups, size, rows))

    def add_run(start: int, stop: int) -> None:
        """Groups [start, stop) coalesced into tasks of about equal bytes, each near the target."""
        run_bytes = int(total[start:stop].sum())
        for cut in balanced_cuts(total[start:stop], -(-run_bytes // target)):
            add_whole(range(start + cut.start, start + cut.stop))

    start = 0
    for g in np.flatnonzero(hot).tolist():
        if split is None:
            break
        if g > start:
            add_run(start, g)
        tasks.extend(_split_group(alignment, inputs, group_bytes, group_rows, g, split, target))
        start = g + 1
    if alignment.num_groups > start:
        add_run(start, alignment.num_groups)
    return [
        CoGroupTask(i, t.groups, t.bytes, t.rows, t.split, t.pieces) for i, t in enumerate(tasks)
    ]


def _split_group(
    alignment: Alignment,
    inputs: Mapping[str, InputSizes],
    group_bytes: Mapping[str, np.ndarray],
    group_rows: Mapping[str, np.ndarray],
    g: int,
    split: str,
    target: int,
) -> list[CoGroupTask]:
    """Tasks over disjoint file (or region) groups of ``split``, each with the others' whole."""
    one = range(g, g + 1)
    subs = _subpartitions(alignment, split, one)
    sizes = _group_sizes(inputs[split], subs)
    others = [n for n in inputs if n != split]
    other_bytes = sum(int(group_bytes[n][g]) for n in others)
    other_rows = sum(int(group_rows[n][g]) for n in others)
    # Every piece also reads the other inputs' whole group: aim the split input's share lower.
    piece_target = max(target - other_bytes, target // 2, 1)
    # Units to cut: whole files, and the regions of a file too large for one piece.
    units: list[tuple[int, int | None]] = []
    unit_bytes: list[int] = []
    unit_rows: list[int] = []
    for f, (region_bytes, region_rows) in enumerate(zip(sizes.bytes, sizes.rows, strict=True)):
        if int(region_bytes.sum()) > piece_target and len(region_bytes) > 1:
            units += [(f, r) for r in range(len(region_bytes))]
            unit_bytes += [int(b) for b in region_bytes]
            unit_rows += [int(r) for r in region_rows]
        else:
            units.append((f, None))
            unit_bytes.append(int(region_bytes.sum()))
            unit_rows.append(int(region_rows.sum()))
    split_bytes = sum(unit_bytes)
    tasks = []
    for cut in balanced_cuts(np.array(unit_bytes), -(-split_bytes // piece_target)):
        pieces = _file_reads([units[i] for i in cut], subs)
        piece_bytes = sum(unit_bytes[i] for i in cut)
        piece_rows = sum(unit_rows[i] for i in cut)
        tasks.append(
            CoGroupTask(0, one, piece_bytes + other_bytes, piece_rows + other_rows, split, pieces)
        )
    return tasks


def _file_reads(
    units: Sequence[tuple[int, int | None]], subs: range | list[int]
) -> tuple[FileRead, ...]:
    """Whole files and consecutive regions of one file, as one read per file."""
    reads: list[FileRead] = []
    for f, region in units:
        if region is None:
            reads.append(FileRead(f, subs))
        elif reads and reads[-1].file == f and reads[-1].regions is not None:
            reads[-1] = FileRead(f, subs, range(reads[-1].regions.start, region + 1))
        else:
            reads.append(FileRead(f, subs, range(region, region + 1)))
    return tuple(reads)


def _group_sizes(sizes: InputSizes, subpartitions: Sequence[int]) -> SubpartitionSizes:
    """Per file and region, the bytes and rows of ``subpartitions`` added up."""
    parts = [sizes.sizes_of(s) for s in subpartitions]
    byte_arrays = [np.sum([p.bytes[f] for p in parts], axis=0) for f in range(sizes.num_files)]
    row_arrays = [np.sum([p.rows[f] for p in parts], axis=0) for f in range(sizes.num_files)]
    return SubpartitionSizes(byte_arrays, row_arrays)


def _subpartitions(alignment: Alignment, name: str, groups: range) -> range | list[int]:
    if alignment.factors[name] == 1:
        return groups
    return alignment.subpartitions(name, groups)
