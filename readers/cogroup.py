"""Co-grouped reads: the same subpartitions of several co-partitioned datasets, task by task.

Two datasets partitioned alike (say both by the order key with the ``hash`` partitioner and
64 subpartitions) can be joined or aggregated subpartition by subpartition: a task that reads
subpartition ``s`` of both holds every row of every key it sees. :func:`cogroup` checks that
the inputs are co-partitioned (:mod:`arrowshuffle.format.copartition`), plans balanced tasks
from the manifests' sizes (:mod:`arrowshuffle.readers.cogroup_plan`) and reads each task's
aligned tables through the one read path. Engines build on it: ``arrowshuffle.polars.cogroup``
and ``arrowshuffle.spark.map_cogroups``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

import pyarrow as pa

from arrowshuffle.format.copartition import Alignment, Partitioning, align
from arrowshuffle.format.errors import InvalidOptionError
from arrowshuffle.format.manifest import Manifest
from arrowshuffle.format.notation import parse_bytes
from arrowshuffle.readers.balance import DEFAULT_SKEW_FACTOR, spread_target
from arrowshuffle.readers.cogroup_plan import CoGroupTask, InputSizes, plan_cogroup, task_reads
from arrowshuffle.readers.dataset import ShuffleDataset, open_dataset
from arrowshuffle.readers.integrity import Verify
from arrowshuffle.readers.read_path import select_schema
from arrowshuffle.readers.scheduler import ReadOptions
from arrowshuffle.readers.storage import Location

_R = TypeVar("_R")

#: A plan without a target aims at this many tasks per core: enough for the slowest task not
#: to hold the others up, few enough that each task's fixed cost stays small.
TASKS_PER_CORE = 2


class CoGroup:
    """Co-partitioned datasets, read as aligned tables task by task. Use :func:`cogroup`.

    Iterating gives, for each task of :attr:`tasks`, a dict of one ``pyarrow.Table`` per
    input (under the names given to :func:`cogroup`): the same key groups of every input. A
    join or an aggregation on the partitioning keys computed task by task and concatenated
    equals the same computation over the whole datasets (with ``split``, see :func:`cogroup`
    for which computations stay exact).

    A ``CoGroup`` pickles without its open files, so an engine can send it to its workers and
    each read one task (:meth:`read`).
    """

    def __init__(
        self,
        inputs: Mapping[str, ShuffleDataset],
        alignment: Alignment,
        tasks: Sequence[CoGroupTask],
        columns: Mapping[str, list[str] | None],
        verify: Verify,
    ) -> None:
        self.inputs = dict(inputs)
        self.alignment = alignment
        self.tasks = list(tasks)
        self.columns = dict(columns)
        self.verify = verify

    @property
    def num_groups(self) -> int:
        """The groups the inputs align on: the smallest subpartition count among them."""
        return self.alignment.num_groups

    def schema(self, name: str) -> pa.Schema:
        """The schema of input ``name``'s tables (its selected columns)."""
        dataset = self._input(name)
        columns = self.columns[name]
        return dataset.schema if columns is None else select_schema(dataset.schema, columns)

    def read(self, task: CoGroupTask | int) -> dict[str, pa.Table]:
        """The tables of one task, by input name.

        Args:
            task: a task of :attr:`tasks`, or its index.
        """
        chosen = self._task(task)
        tables = {}
        for name, dataset in self.inputs.items():
            reads = task_reads(chosen, name, self.alignment, dataset.num_files)
            batches = dataset.iter_reads(reads, columns=self.columns[name], verify=self.verify)
            tables[name] = pa.Table.from_batches(list(batches), schema=self.schema(name))
        return tables

    def __iter__(self) -> Iterator[dict[str, pa.Table]]:
        for task in self.tasks:
            yield self.read(task)

    def __len__(self) -> int:
        return len(self.tasks)

    def map(
        self, func: Callable[[dict[str, pa.Table]], _R], *, threads: int | None = None
    ) -> Iterator[_R]:
        """``func`` on every task's tables, on ``threads`` threads; results in task order.

        A task is read and computed on one thread; at most ``threads`` tasks' tables are held
        at once (plus the results not yet taken). Engines such as polars and pyarrow's compute
        functions release the GIL, so tasks overlap.

        Args:
            func: called with each task's dict of tables.
            threads: how many tasks run at once (default: the usable cores).
        """
        if threads is None:
            threads = _cores()
        if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
            raise InvalidOptionError(f"threads must be an integer >= 1, found {threads!r}")
        return _ordered_map(lambda t: func(self.read(t)), self.tasks, threads)

    def __reduce__(self) -> tuple[Any, ...]:
        # Open files (and their memory maps) stay here: a worker reopens what it reads.
        shipped = {
            name: (ds.directory, ds.manifest, ds.options) for name, ds in self.inputs.items()
        }
        return _rebuild, (shipped, self.alignment, self.tasks, self.columns, self.verify)

    def __repr__(self) -> str:
        names = ", ".join(f"{n}={ds.url!r}" for n, ds in self.inputs.items())
        return f"CoGroup({names}, groups={self.num_groups}, tasks={len(self.tasks)})"

    def _input(self, name: str) -> ShuffleDataset:
        try:
            return self.inputs[name]
        except KeyError:
            raise InvalidOptionError(
                f"no input {name!r}; the inputs are {', '.join(map(repr, self.inputs))}"
            ) from None

    def _task(self, task: CoGroupTask | int) -> CoGroupTask:
        if isinstance(task, CoGroupTask):
            planned = self.tasks[task.index] if 0 <= task.index < len(self.tasks) else None
            if planned != task:
                # A task of another plan names files and groups of other versions: read here
                # it would give some other rows, with no sign.
                raise InvalidOptionError(
                    f"the task (groups {task.groups.start}-{task.groups.stop - 1}) is not one "
                    "of this co-group's plan: read a task with the co-group that planned it"
                )
            return task
        if isinstance(task, bool) or not isinstance(task, int):
            raise InvalidOptionError(f"task must be a CoGroupTask or its index, found {task!r}")
        if not 0 <= task < len(self.tasks):
            raise InvalidOptionError(f"task {task} does not exist: the plan has {len(self.tasks)}")
        return self.tasks[task]


def _rebuild(
    shipped: Mapping[str, tuple[Location, Manifest, ReadOptions]],
    alignment: Alignment,
    tasks: Sequence[CoGroupTask],
    columns: Mapping[str, list[str] | None],
    verify: Verify,
) -> CoGroup:
    inputs = {
        name: ShuffleDataset(directory, manifest, options=options)
        for name, (directory, manifest, options) in shipped.items()
    }
    return CoGroup(inputs, alignment, tasks, columns, verify)


def cogroup(
    inputs: Mapping[str, str | os.PathLike[str] | ShuffleDataset],
    *,
    columns: Mapping[str, Sequence[str]] | None = None,
    split: str | None = None,
    target_bytes: int | str | None = None,
    parallelism: int | None = None,
    skew_factor: float = DEFAULT_SKEW_FACTOR,
    skew_min_bytes: int | str | None = None,
    max_tasks: int | None = None,
    verify: Verify = "auto",
    storage_options: dict[str, Any] | None = None,
    options: ReadOptions | None = None,
) -> CoGroup:
    """Read co-partitioned datasets together: per task, the same key groups of each.

    The inputs must place equal keys alike: the same partitioner (``hash``, ``key_group``,
    ``range`` or ``global``), function, seed and key types position by position (key names may
    differ), and subpartition counts that are multiples of the smallest one (a dataset of 128
    subpartitions aligns with one of 64: its subpartitions ``t`` and ``t + 64`` meet
    subpartition ``t``). Anything else raises :class:`PartitioningMismatchError` naming both
    partitionings.

    Tasks are planned from the manifests' sizes: contiguous small groups are coalesced up to
    ``target_bytes`` over all inputs. With ``split``, a skewed group is split over the files of
    that input while each of its pieces reads the whole group of the other inputs (Spark's
    skew join): exact for an inner join, and for a left outer, left semi or left anti join
    keeping the split input's rows; **not** for an aggregation of another input's rows, a
    right or full outer join, or an aggregation of the split input by key (a split key's rows
    are then in several tasks: aggregate the tasks' results again).

    Example::

        groups = arrowshuffle.cogroup({"l": "/data/lineitem", "o": "/data/orders"})
        for tables in groups:
            joined = tables["l"].join(tables["o"], "l_orderkey", "o_orderkey")

    Args:
        inputs: dataset paths or URLs (or opened datasets), by a name of your choice.
        columns: per input name, the columns to read (all by default).
        split: the input whose skewed groups may be split over its files (none by default).
        target_bytes: the bytes a task aims at, over all inputs (``"64MiB"``); by default the
            inputs' bytes over ``parallelism`` tasks, within 4 MiB .. 128 MiB.
        parallelism: the tasks a plan without ``target_bytes`` aims at (default: twice the
            usable cores).
        skew_factor: a group above this multiple of the median group ...
        skew_min_bytes: ... and above this size (default: the target) is skewed.
        max_tasks: the most tasks; the target grows until the plan fits.
        verify: check chunk checksums: ``"auto"`` (object stores only), ``True``, ``False``.
        storage_options: fsspec options for the paths given as URLs.
        options: the read tuning of the datasets opened here (``ReadOptions``).

    Raises:
        PartitioningMismatchError: inputs that are not co-partitioned.
        InvalidOptionError: bad options, or columns or a split input of no input.
        MissingObjectError: an input without a dataset.
    """
    if not isinstance(inputs, Mapping) or not inputs:
        raise InvalidOptionError(
            "inputs must be a non-empty dict of name -> dataset path, found "
            f"{type(inputs).__name__}"
        )
    opened = {
        str(name): _open(name, value, storage_options, options) for name, value in inputs.items()
    }
    chosen = _columns(columns, opened)
    alignment = align(
        {
            name: Partitioning(ds.partitioner, ds.num_subpartitions, ds.schema)
            for name, ds in opened.items()
        }
    )
    sizes = {}
    for name, ds in opened.items():
        size, rows = ds.subpartition_sizes()
        sizes[name] = InputSizes(size, rows, ds.num_files, ds.sizes_of)
    total = sum(int(s.bytes.sum()) for s in sizes.values())
    if target_bytes is None:
        if parallelism is None:
            parallelism = TASKS_PER_CORE * _cores()
        if isinstance(parallelism, bool) or not isinstance(parallelism, int) or parallelism < 1:
            raise InvalidOptionError(f"parallelism must be an integer >= 1, found {parallelism!r}")
        target = spread_target(total, parallelism)
    else:
        target = parse_bytes(target_bytes, name="target_bytes")
    skew_min = (
        target if skew_min_bytes is None else parse_bytes(skew_min_bytes, name="skew_min_bytes")
    )
    tasks = plan_cogroup(
        alignment,
        sizes,
        target_bytes=target,
        split=split,
        skew_factor=skew_factor,
        skew_min_bytes=skew_min,
        max_tasks=max_tasks,
    )
    return CoGroup(opened, alignment, tasks, chosen, verify)


def _open(
    name: object,
    value: object,
    storage_options: dict[str, Any] | None,
    options: ReadOptions | None,
) -> ShuffleDataset:
    if not isinstance(name, str) or not name:
        raise InvalidOptionError(f"input names must be non-empty strings, found {name!r}")
    if isinstance(value, ShuffleDataset):
        return value
    if not isinstance(value, (str, os.PathLike)):
        raise InvalidOptionError(
            f"input {name!r} must be a dataset path, URL or opened dataset, found "
            f"{type(value).__name__}"
        )
    return open_dataset(value, storage_options, options=options)


def _columns(
    columns: Mapping[str, Sequence[str]] | None, opened: Mapping[str, ShuffleDataset]
) -> dict[str, list[str] | None]:
    chosen: dict[str, list[str] | None] = dict.fromkeys(opened)
    if columns is None:
        return chosen
    if not isinstance(columns, Mapping):
        raise InvalidOptionError(
            f"columns must be a dict of input name -> column names, found {type(columns).__name__}"
        )
    for name, names in columns.items():
        if name not in opened:
            raise InvalidOptionError(
                f"columns names no input: {name!r} is not one of {', '.join(map(repr, opened))}"
            )
        select_schema(opened[name].schema, names)  # refuses unknown columns, and a string
        chosen[name] = list(names)
    return chosen


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def _ordered_map(
    work: Callable[[CoGroupTask], _R], tasks: Sequence[CoGroupTask], threads: int
) -> Iterator[_R]:
    """``work`` over ``tasks`` on a pool, at most ``threads`` submitted ahead, in order."""
    if threads == 1:
        for task in tasks:
            yield work(task)
        return
    with ThreadPoolExecutor(threads, thread_name_prefix="arrowshuffle-cogroup") as pool:
        pending: list[Future[_R]] = []
        upcoming = iter(tasks)
        for task in upcoming:
            pending.append(pool.submit(work, task))
            if len(pending) >= threads:
                break
        while pending:
            result = pending.pop(0).result()
            for task in upcoming:
                pending.append(pool.submit(work, task))
                break
            yield result
