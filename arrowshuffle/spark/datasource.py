"""The ``arrowshuffle`` Python data source: Spark DataFrames in and out of shuffle datasets.

Writing: every Spark task writes one data/index pair named
``part-<partition>-<job id>-<attempt id>-<random>.arrow``, so retried and speculative attempts
never collide, and returns what it wrote to the driver. The driver's ``commit`` writes the
manifest last (:func:`~arrowshuffle.writers.dataset_writer.commit_dataset`), listing exactly the
files of the successful attempts; ``abort`` removes every file of the job. Spark accepts only
the ``append`` and ``overwrite`` save modes for Python data sources; its default
(``errorifexists``) and ``ignore`` stop before any task runs with
``UNSUPPORTED_DATA_SOURCE_SAVE_MODE``. The writer option ``save_mode`` gives them to the
writer instead (``arrowshuffle.spark.write`` sets it; its default mode is ``error``).

Errors of this package raised on the driver (a bad option, an existing dataset) reach the user
inside Spark's exception, after a traceback: the driver-side methods raise them with a
traceback of one frame, so that the message follows Spark's few lines of preamble.

Reading: by default each Spark partition reads one task of the dataset's read plan
(:meth:`~arrowshuffle.readers.dataset.ShuffleDataset.plan`, made on the driver from the
manifest's sizes): contiguous small subpartitions coalesced, a skewed subpartition split over
groups of files. ``partitioning=subpartition`` reads one subpartition per Spark partition
(partition ``s`` is subpartition ``s``) and ``consumers`` P contiguous ranges; every mode can
be limited to the ``subpartitions`` option, and every Spark task reads through the same read
path (``ShuffleDataset.iter_batches``), at the manifest version the query was planned on
(a Python worker keeps the datasets it opened for its next tasks). Only the columns of option
``columns`` or of a user read schema are read; batches are joined up to ``batch_rows`` and
yielded in exactly the Arrow form Spark expects for the read's schema. With the ``pushdown``
option (and Spark's ``spark.sql.python.filterPushdown.enabled``), equality filters on every key
column of a ``hash``/``key_group``/``column`` dataset skip the subpartitions they rule out.
"""

from __future__ import annotations

import dataclasses
import functools
import heapq
import threading
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, ParamSpec, TypeVar

import numpy as np
import pyarrow as pa

from arrowshuffle.format.errors import (
    ArrowShuffleError,
    InvalidOptionError,
    MissingExtraError,
    MissingObjectError,
    SchemaMismatchError,
)
from arrowshuffle.format.manifest_rules import check_listed_size
from arrowshuffle.format.naming import new_file_name, new_job_id
from arrowshuffle.format.partitioners import key_group_range
from arrowshuffle.format.partitioners.base import Partitioner
from arrowshuffle.readers.balance import PlannedRead
from arrowshuffle.readers.dataset import ShuffleDataset, open_dataset
from arrowshuffle.readers.storage import Location, resolve
from arrowshuffle.spark.options import (
    FORMAT_NAME,
    TASK_COST_BYTES,
    SparkReadConfig,
    WriteOptions,
    parse_read_options,
    parse_write_options,
)
from arrowshuffle.spark.pruning import prune
from arrowshuffle.spark.types import (
    conform,
    spark_arrow_schema,
    spark_schema,
    spark_type,
    writer_arrow_schema,
)
from arrowshuffle.writers.commit import Base
from arrowshuffle.writers.dataset_writer import (
    abort_dataset,
    check_commit,
    commit_dataset,
    prepare_directory,
)
from arrowshuffle.writers.file_writer import ShuffleFileWriter, WrittenFile

try:  # the data source is built on pyspark's classes: importing it needs pyspark
    from pyspark.sql.datasource import (
        DataSource,
        DataSourceArrowWriter,
        DataSourceReader,
        Filter,
        InputPartition,
        WriterCommitMessage,
    )
except ImportError as exc:
    raise MissingExtraError("pyspark", "spark", "arrowshuffle.spark.datasource", str(exc)) from exc

_P = ParamSpec("_P")
_T = TypeVar("_T")


def message_first(method: Callable[_P, _T]) -> Callable[_P, _T]:
    """Raise this package's errors from ``method`` with a traceback of this one frame.

    Spark shows an error of a data source's driver-side method as the traceback Python prints
    for it, inside its own exception: the frames of option parsing would stand between Spark's
    preamble and the message. The error's cause keeps its traceback.
    """

    @functools.wraps(method)
    def wrapper(*args: _P.args, **kwargs: _P.kwargs) -> _T:
        try:
            return method(*args, **kwargs)
        except ArrowShuffleError as error:
            raise error.with_traceback(None) from error.__cause__

    return wrapper


# --------------------------------------------------------------------------------- writing


@dataclass(frozen=True)
class ShuffleCommitMessage(WriterCommitMessage):
    """What one task attempt reports to the driver: the pair it wrote (None if no rows)."""

    partition: int
    attempt: str
    written: WrittenFile | None


#: Partitioners whose output depends on which producer (Spark task) writes the file: each
#: Spark partition is one producer, its partition number the ``producer_index``.
PER_PRODUCER = ("forward", "rescale")


def build_partitioner(
    options: WriteOptions, schema: pa.Schema, *, producer_index: int | None = None
) -> Partitioner | None:
    """The partitioner named by the options (None for ids given by ``subpartition_column``).

    ``forward`` and ``rescale`` take the Spark task's partition number as ``producer_index``
    unless ``partitioner_options`` sets it. ``range`` boundaries (or a sample) given as JSON
    values are read as the key column's type of ``schema``, so that every task and the
    manifest record the same spec.

    Raises:
        InvalidOptionError: bad partitioner options, or a Spark partition that cannot be a
            producer of a ``forward`` or ``rescale`` dataset with these options.
    """
    if options.partitioner is None:
        return None
    from arrowshuffle.format.partitioners import make_partitioner

    kwargs = dict(options.partitioner_options)
    if options.partition_by:
        kwargs["by"] = list(options.partition_by)
    if options.partitioner == "range":
        kwargs = _typed_range_options(kwargs, schema)
    per_producer = options.partitioner in PER_PRODUCER and "producer_index" not in kwargs
    if per_producer and producer_index is not None:
        _check_producer(options, producer_index)
        kwargs["producer_index"] = producer_index
    partitioner: Partitioner = make_partitioner(
        options.partitioner, num_subpartitions=options.num_subpartitions, **kwargs
    )
    return partitioner


def _typed_range_options(kwargs: dict[str, Any], schema: pa.Schema) -> dict[str, Any]:
    """``boundaries`` and ``sample`` as Arrow arrays of the key column's type."""
    from arrowshuffle.format.partitioners.range_partitioner import decode_boundaries

    by = kwargs.get("by")
    key = by[0] if isinstance(by, list) and len(by) == 1 else None
    if key is None or key not in schema.names:
        return kwargs  # make_partitioner names what is wrong with ``by``
    typed = dict(kwargs)
    for name in ("boundaries", "sample"):
        if isinstance(kwargs.get(name), list):
            typed[name] = decode_boundaries(kwargs[name], schema.field(key).type)
    return typed


def _check_producer(options: WriteOptions, partition: int) -> None:
    """Refuse a Spark partition that cannot be a producer under these options."""
    n = options.num_subpartitions
    if options.partitioner == "forward" and partition >= n:
        raise InvalidOptionError(
            f"the forward partitioner writes Spark partition i to subpartition i; partition "
            f"{partition} needs num_subpartitions above {partition}, found {n}: repartition "
            f"the DataFrame to at most {n} partitions, or use the rescale partitioner"
        )
    producers = options.partitioner_options.get("num_producers")
    if options.partitioner == "rescale" and isinstance(producers, int) and partition >= producers:
        raise InvalidOptionError(
            f"the rescale partitioner's num_producers is {producers}, but Spark partition "
            f"{partition} writes too: set partitioner_options num_producers to the DataFrame's "
            "number of partitions (df.rdd.getNumPartitions(); arrowshuffle.spark.write sets it)"
        )


def check_spark_partitioner(options: WriteOptions) -> None:
    """Refuse, before any task runs, a partitioner whose tasks could not agree on a spec.

    Raises:
        InvalidOptionError: ``range`` without ``boundaries`` (or a ``sample``), which every
            task would otherwise draw from its own rows; ``rescale`` without
            ``num_producers``, which every task needs to find its subpartitions.
    """
    given = options.partitioner_options
    if options.partitioner == "range" and "boundaries" not in given and "sample" not in given:
        raise InvalidOptionError(
            "the range partitioner needs boundaries that every Spark task shares: give "
            'partitioner_options {"boundaries": [...]} (arrowshuffle.spark.range_boundaries('
            "df, column, num_subpartitions) draws them from a sample), or write with "
            "arrowshuffle.spark.write, which samples the DataFrame"
        )
    if options.partitioner == "rescale" and not {"num_producers", "producer_index"} & set(given):
        raise InvalidOptionError(
            'the rescale partitioner needs partitioner_options {"num_producers": P}, P the '
            "DataFrame's number of partitions (df.rdd.getNumPartitions()), each Spark partition "
            "being one producer; arrowshuffle.spark.write sets it"
        )


def dataset_partitioner_spec(options: WriteOptions, schema: pa.Schema) -> dict[str, Any]:
    """The partitioner spec the manifest records (per-producer fields left to each index)."""
    from arrowshuffle.format.partitioners import dataset_spec

    partitioner = build_partitioner(options, schema)
    if partitioner is None:
        return {"name": "explicit"}
    return dataset_spec(partitioner.spec())


def _task_identity() -> tuple[int, str]:
    """This task's partition number and an id unique to this attempt."""
    from pyspark import TaskContext

    context = TaskContext.get()
    random = uuid.uuid4().hex[:8]
    if context is None:  # called outside a Spark task (tests, plain Python)
        return 0, f"local{random}"
    return context.partitionId(), f"t{context.taskAttemptId()}a{context.attemptNumber()}{random}"


class ArrowShuffleWriter(DataSourceArrowWriter):
    """Writes one shuffle file per Spark task and commits them as one dataset.

    Built on the driver (options and schema are checked there, before any task runs),
    pickled to the executors for :meth:`write`, and back on the driver for
    :meth:`commit` / :meth:`abort`.
    """

    def __init__(self, options: WriteOptions, schema: Any, overwrite: bool) -> None:
        self.options = options
        self.overwrite = overwrite
        self.job_id = new_job_id()
        names = list(schema.fieldNames())
        self.id_column = options.subpartition_column
        if self.id_column is not None and self.id_column not in names:
            raise InvalidOptionError(
                f"option subpartition_column names {self.id_column!r}, which the DataFrame "
                f"does not have; its columns are {names}"
            )
        for name in options.partition_by:
            if name not in names:
                raise InvalidOptionError(
                    f"option partition_by names {name!r}, which the DataFrame does not have; "
                    f"its columns are {names}"
                )
        data_fields = [f for f in schema.fields if f.name != self.id_column]
        from pyspark.sql.types import StructType

        self.schema = writer_arrow_schema(StructType(data_fields))
        partitioner = build_partitioner(options, self.schema)
        check_spark_partitioner(options)
        self.partitioner_spec = dataset_partitioner_spec(options, self.schema)
        if partitioner is not None and partitioner.broadcast and self.id_column is not None:
            raise InvalidOptionError(
                f"the {options.partitioner} partitioner sends every row to every subpartition: "
                "it takes no subpartition_column"
            )
        #: The save mode the job commits with: Spark's, or the ``save_mode`` option.
        self.mode = options.commit_mode(overwrite)
        #: The version this job starts from: an overwrite fails if another job commits first.
        #: Only its number: this writer is sent to every task, and a manifest can be large.
        self.base = Base(
            check_commit(
                self._directory(),
                schema=self.schema,
                num_subpartitions=options.num_subpartitions,
                partitioner=self.partitioner_spec,
                mode=self.mode,
                name=options.path,
            ).version
        )
        #: ``ignore`` over an existing dataset: tasks write nothing, the commit keeps it.
        self.keeps_existing = self.mode == "ignore" and self.base.version is not None
        # A dataset creates its directory, as Spark's file sources do (tasks write into it).
        prepare_directory(options.path, options.storage_options)

    def _directory(self) -> Location:
        return resolve(self.options.path, self.options.storage_options)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> ShuffleCommitMessage:
        """Write this task's rows to one new data/index pair (nothing for an empty task)."""
        partition, attempt = _task_identity()
        return self.write_task(iterator, partition, attempt)

    def write_task(
        self, iterator: Iterator[pa.RecordBatch], partition: int, attempt: str
    ) -> ShuffleCommitMessage:
        """Write the rows of one attempt of task ``partition``; ``attempt`` must be unique.

        :meth:`write` calls it with the Spark task's identity; call it directly to drive the
        writer without Spark.
        """
        if self.keeps_existing:
            return ShuffleCommitMessage(partition, attempt, None)
        name = new_file_name(partition, attempt, job_id=self.job_id)
        # A dataset creates its directory (each task: a cluster's disks are not the driver's).
        url = prepare_directory(self.options.path, self.options.storage_options).child(name).url
        # With a subpartition column the partitioner only names itself in the index.
        partitioner = build_partitioner(self.options, self.schema, producer_index=partition)
        writer: ShuffleFileWriter | None = None
        try:
            for batch in iterator:
                if batch.num_rows == 0:
                    continue
                ids = None
                if self.id_column is not None:
                    ids = batch.column(self.id_column)
                    batch = batch.drop_columns([self.id_column])
                batch = conform(batch, self.schema)
                if writer is None:
                    writer = ShuffleFileWriter(
                        url,
                        self.schema,
                        self.options.num_subpartitions,
                        memory=self.options.memory,
                        max_batch_rows=self.options.max_batch_rows,
                        compression=self.options.compression,
                        partitioner=partitioner,
                        storage_options=self.options.storage_options,
                    )
                writer.write(batch, subpartitions=ids)
            written = writer.close() if writer is not None else None
        except BaseException:
            if writer is not None:
                writer.abort()
            raise
        return ShuffleCommitMessage(partition, attempt, written)

    def _written(self, messages: Sequence[WriterCommitMessage | None]) -> list[WrittenFile]:
        """One file per partition (a second successful attempt's file is left unlisted)."""
        chosen: dict[int, WrittenFile] = {}
        for message in messages:
            if isinstance(message, ShuffleCommitMessage) and message.written is not None:
                chosen.setdefault(message.partition, message.written)
        return [chosen[p] for p in sorted(chosen)]

    @message_first
    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        """Write the manifest listing exactly the files of the successful attempts."""
        commit_dataset(
            self._directory(),
            self._written(messages),
            schema=self.schema,
            num_subpartitions=self.options.num_subpartitions,
            partitioner=self.partitioner_spec,
            mode=self.mode,
            properties={"writer": "spark", "job_id": self.job_id},
            job_id=self.job_id,
            base=self.base,
        )

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        """Remove every file of this job; the manifest in force (if any) is unchanged."""
        written = [m.written for m in messages if isinstance(m, ShuffleCommitMessage)]
        abort_dataset(self._directory(), written, job_id=self.job_id)


# --------------------------------------------------------------------------------- reading


class SubpartitionSelection(InputPartition):
    """One Spark partition: the subpartitions it reads from every file."""

    def __init__(self, index: int, subpartitions: tuple[int, ...]) -> None:
        super().__init__(index)
        self.index = index
        self.subpartitions = subpartitions


class PlannedPartition(InputPartition):
    """One Spark partition: one task of the dataset's read plan, in a compact picklable form.

    Attributes:
        index: the partition's position in the plan.
        subpartitions: the task's contiguous range of subpartitions.
        files: positions of the files it reads in the manifest's list; ``None`` for all of
            them (most tasks: this keeps a partition small for datasets of many files).
        regions: the regions it reads of its one file (a skew split), or ``None`` for all.
        bytes: chunk bytes the task reads.
        rows: rows the task returns.
        snapshot: the dataset version the task was planned on.
    """

    def __init__(self, index: int, task: PlannedRead, num_files: int) -> None:
        super().__init__(index)
        self.index = index
        self.subpartitions = task.subpartitions
        every = len(task.files) == num_files and task.files == tuple(range(num_files))
        self.files: tuple[int, ...] | None = None if every else task.files
        self.regions = task.regions
        self.bytes = task.bytes
        self.rows = task.rows
        self.snapshot = task.snapshot

    def task(self, num_files: int) -> PlannedRead:
        """The planned task again, for a dataset of ``num_files`` files."""
        files = tuple(range(num_files)) if self.files is None else self.files
        return PlannedRead(
            self.subpartitions, files, self.regions, self.bytes, self.rows, self.snapshot
        )


def plan_partitions(selection: Sequence[int], consumers: int | None) -> list[SubpartitionSelection]:
    """Split the selected subpartitions among Spark partitions.

    One subpartition per partition by default; with ``consumers`` P, partition ``i`` reads the
    ``i``-th of P contiguous ranges of the selection (the key-group range formula), which may
    be empty when P exceeds the selection.
    """
    if consumers is None:
        return [SubpartitionSelection(i, (s,)) for i, s in enumerate(selection)]
    return [
        SubpartitionSelection(
            i,
            tuple(
                selection[j]
                for j in key_group_range(i, consumers, len(selection), flink_bounds=False)
            ),
        )
        for i in range(consumers)
    ]


def planned_partitions(
    dataset: ShuffleDataset, selection: Sequence[int], options: SparkReadConfig
) -> list[PlannedPartition]:
    """One Spark partition per task of the dataset's plan over ``selection``.

    Planned on the driver from the manifest's sizes (and, for the subpartitions it splits,
    their index entries); no data is read. Without ``target_bytes``, several targets around
    the selection's share per slot are planned (:meth:`SparkReadConfig.plan_targets`) and
    the plan that would finish first on ``parallelism`` slots is kept (:func:`fastest_plan`):
    contiguous subpartitions rarely add up to exactly one share, and a plan of ``slots + 1``
    tasks takes two waves.
    """
    if not selection:
        return []
    sizes, _ = dataset.subpartition_sizes()
    targets = options.plan_targets(sizes[np.asarray(selection, dtype=np.int64)])
    best = fastest_plan(
        lambda target: dataset.plan(
            target,
            subpartitions=selection,
            skew_factor=options.skew_factor,
            skew_min_bytes=options.skew_min_bytes,
            max_tasks=options.max_tasks,
        ),
        targets,
        options.slots(),
    )
    return [PlannedPartition(i, task, dataset.num_files) for i, task in enumerate(best)]


def fastest_plan(
    plan: Callable[[int], list[PlannedRead]], targets: Sequence[int], slots: int
) -> list[PlannedRead]:
    """Of ``plan(target)`` for each of ``targets``, the one that finishes first on ``slots``.

    Ties go to the earlier target (:func:`makespan`, which counts a cost per task).
    """
    best: list[PlannedRead] | None = None
    best_time = 0
    for target in targets:
        tasks = plan(target)
        finish = makespan([t.bytes for t in tasks], slots)
        if best is None or finish < best_time:
            best, best_time = tasks, finish
    if best is None:
        raise ValueError("fastest_plan needs at least one target")
    return best


def makespan(task_bytes: Sequence[int], slots: int, task_cost: int = TASK_COST_BYTES) -> int:
    """When tasks of these sizes finish on ``slots`` slots, in bytes read (plus a cost each).

    Spark starts tasks in partition order, each on the first slot free.
    """
    free = [0] * max(1, min(slots, len(task_bytes)))
    for size in task_bytes:
        heapq.heapreplace(free, free[0] + size + task_cost)
    return max(free)


def check_files(dataset: ShuffleDataset) -> None:
    """Check that every file the manifest lists exists with the size it records.

    One directory listing, so it costs one request on object stores.

    Raises:
        MissingObjectError: a listed data or index file does not exist.
        CorruptFileError: a listed file's size differs from the manifest's.
    """
    directory = dataset.directory
    try:
        listing = directory.fs.ls(directory.path, detail=True)
    except FileNotFoundError:
        listing = []
    sizes = {str(e["name"]).rstrip("/").rsplit("/", 1)[-1]: e.get("size") for e in listing}
    for entry in dataset.manifest.files:
        for name, expected in ((entry.data, entry.data_size), (entry.index, entry.index_size)):
            if name not in sizes:
                raise MissingObjectError(
                    2,
                    f"dataset {dataset.url} is damaged: its manifest lists {name} "
                    f"({expected} bytes), which does not exist",
                )
            found = sizes[name]
            if found is not None:
                what = "data file" if name == entry.data else "index"
                violation = check_listed_size(what, name, expected, int(found))
                if violation is not None:
                    raise violation.error(f"dataset {dataset.url} is damaged")


def _spark_field(dataset: ShuffleDataset, name: str) -> Any:
    """The Spark field the reader yields for the dataset's column ``name``.

    Mapped one column at a time: a column with no Spark type stops only the reads that
    select it.
    """
    from pyspark.sql.types import StructField

    field = dataset.schema.field(name)
    return StructField(name, spark_type(field.type, where=f"field {name!r}"), field.nullable)


def read_struct(dataset: ShuffleDataset, columns: Sequence[str] | None) -> Any:
    """The Spark schema of a read of ``columns`` (in that order; ``None``: every column).

    Raises:
        SchemaMismatchError: a column the dataset does not have, or one with no Spark type.
    """
    if columns is None:
        return spark_schema(dataset.schema)
    from pyspark.sql.types import StructType

    stored = dataset.schema.names
    for name in columns:
        if name not in stored:
            raise SchemaMismatchError(
                f"option columns names {name!r}, which dataset {dataset.url} does not have; "
                f"its columns are {stored}"
            )
    return StructType([_spark_field(dataset, name) for name in columns])


def _misfit(stored: Any, asked: Any) -> bool:
    """Whether Spark type ``asked`` cannot hold what the reader yields as ``stored``.

    Equal types fit; a nullable element, value or field where the dataset has a non-nullable
    one fits too (the converse would let nulls into a column Spark trusts to have none).
    """
    from pyspark.sql.types import ArrayType, MapType, StructType

    if isinstance(stored, ArrayType) and isinstance(asked, ArrayType):
        return (stored.containsNull and not asked.containsNull) or _misfit(
            stored.elementType, asked.elementType
        )
    if isinstance(stored, MapType) and isinstance(asked, MapType):
        return (
            (stored.valueContainsNull and not asked.valueContainsNull)
            or _misfit(stored.keyType, asked.keyType)
            or _misfit(stored.valueType, asked.valueType)
        )
    if isinstance(stored, StructType) and isinstance(asked, StructType):
        # Nested fields by position, as Arrow casts structs: same names, same order.
        return stored.fieldNames() != asked.fieldNames() or any(
            (s.nullable and not a.nullable) or _misfit(s.dataType, a.dataType)
            for s, a in zip(stored.fields, asked.fields, strict=True)
        )
    return bool(stored != asked)


def check_read_schema(dataset: ShuffleDataset, schema: Any, columns: Sequence[str] | None) -> None:
    """Check a read schema (Spark's ``.schema(...)``, or the one :meth:`schema` derived).

    It may name any subset of the dataset's columns, in any order (batches are built in its
    order); each column's type must be the Spark type the dataset's schema maps it to
    (:func:`~arrowshuffle.spark.types.spark_type`): the reader does not convert ``long`` to
    ``int`` or ``string`` to ``date``. With the ``columns`` option too, both must name the
    same columns.

    Raises:
        SchemaMismatchError: a column the dataset lacks, a type other than the dataset's, a
            non-nullable column the dataset may hold nulls in, or a schema that disagrees
            with option ``columns``.
    """
    names = dataset.schema.names
    for field in schema.fields:
        if field.name not in names:
            raise SchemaMismatchError(
                f"dataset {dataset.url} has no column {field.name!r}; its columns are {names}"
            )
        have = _spark_field(dataset, field.name)
        expected, found = have.dataType.simpleString(), field.dataType.simpleString()
        if _misfit(have.dataType, field.dataType):
            raise SchemaMismatchError(
                f"column {field.name!r} of dataset {dataset.url} reads as Spark type "
                f"{expected}, found {found} in the read schema; give it as {expected} "
                "(and cast in Spark)"
            )
        if have.nullable and not field.nullable:
            raise SchemaMismatchError(
                f"column {field.name!r} of dataset {dataset.url} may hold nulls, found "
                f"{found} NOT NULL in the read schema; declare it nullable"
            )
    asked = list(schema.fieldNames())
    if columns is not None and sorted(asked) != sorted(columns):
        raise SchemaMismatchError(
            f"option columns names {list(columns)} but the read schema has {asked}; give one "
            "of them, or the same columns in both"
        )


#: Datasets this process opened for Spark tasks, by path, storage options and version. A
#: Python worker runs many tasks of a query one after another (Spark reuses workers): each
#: task then finds the manifest decoded and the files' indexes opened.
_task_datasets: OrderedDict[tuple[str, str, int], ShuffleDataset] = OrderedDict()
_task_datasets_lock = threading.Lock()
#: How many datasets a worker keeps opened (each holds its files' open indexes).
TASK_DATASETS = 4


def task_dataset(options: SparkReadConfig, version: int, files: tuple[str, ...]) -> ShuffleDataset:
    """The dataset a task reads: manifest ``version`` listing data files ``files``.

    Opened at that version (one read, no listing) or found opened by an earlier task of this
    process. A dataset of one manifest file (version 0, from before versions) is opened afresh.

    Raises:
        InvalidOptionError: the dataset was replaced since the query was planned (that
            version is gone, or lists other files).
    """
    key = (options.path, repr(sorted(options.storage_options.items())), version)
    with _task_datasets_lock:
        dataset = _task_datasets.get(key)
    if dataset is None or tuple(f.data for f in dataset.manifest.files) != files:
        try:
            dataset = open_dataset(
                options.path, options.storage_options, version=version if version else None
            )
        except MissingObjectError as exc:
            if not version:
                raise
            raise InvalidOptionError(
                f"dataset {options.path} was replaced while this query ran (manifest version "
                f"{version}, which the query was planned on, is gone: {exc}); run the query "
                "again"
            ) from exc
        if tuple(f.data for f in dataset.manifest.files) != files:
            raise InvalidOptionError(
                f"dataset {dataset.url} was replaced while this query ran (its manifest "
                "changed since the query was planned); run the query again"
            )
        if version:  # a numbered version never changes; a single manifest may
            with _task_datasets_lock:
                _task_datasets[key] = dataset
                while len(_task_datasets) > TASK_DATASETS:
                    _task_datasets.popitem(last=False)
    with _task_datasets_lock:
        if key in _task_datasets:
            _task_datasets.move_to_end(key)
    return dataset


def coalesce_batches(
    batches: Iterable[pa.RecordBatch], rows: int, max_bytes: int
) -> Iterator[pa.RecordBatch]:
    """Join consecutive batches until one holds ``rows`` rows or ``max_bytes`` bytes.

    A read yields a batch per chunk (a subpartition of one region of one file), often a few
    thousand rows; every batch Spark receives costs it a message and a columnar batch of its
    own, so fewer, larger ones are cheaper. A batch already large enough passes unchanged.
    """
    group: list[pa.RecordBatch] = []
    count = size = 0
    for batch in batches:
        if batch.num_rows == 0:
            continue
        group.append(batch)
        count += batch.num_rows
        size += batch.nbytes
        if count >= rows or size >= max_bytes:
            yield group[0] if len(group) == 1 else pa.concat_batches(group)
            group, count, size = [], 0, 0
    if group:
        yield group[0] if len(group) == 1 else pa.concat_batches(group)


class ArrowShuffleReader(DataSourceReader):
    """Reads a dataset, one planned task (or subpartition selection) per Spark partition."""

    def __init__(self, options: SparkReadConfig, schema: Any) -> None:
        self.options = options
        dataset = open_dataset(options.path, options.storage_options)
        check_files(dataset)
        # Kept for planning on the driver; not sent to the executors (see __getstate__).
        self._dataset: ShuffleDataset | None = dataset
        self.files = tuple(f.data for f in dataset.manifest.files)
        #: The manifest version planned on: every task reads exactly it.
        self.version = dataset.version
        self.num_subpartitions = dataset.num_subpartitions
        self.selection = options.selection(dataset.num_subpartitions)
        check_read_schema(dataset, schema, options.columns)
        self.target = spark_arrow_schema(schema)
        #: Only these columns' bytes are read and sent to the JVM.
        self.columns = list(self.target.names)
        self.partitioner_spec = dataset.partitioner
        self.stored_schema = dataset.schema

    @message_first
    def partitions(self) -> list[InputPartition]:
        """The Spark partitions of the read, as option ``partitioning`` cuts it.

        A planned task each (``plan``), a subpartition each (``subpartition``) or a consumer
        range each (``consumers``). A selection left empty (by pushed filters) is one empty
        partition, which reads nothing.
        """
        mode = self.options.partitioning
        parts: list[InputPartition]
        if mode == "plan":
            # The version the reader was built on (its files are what the tasks check).
            dataset = self._dataset or task_dataset(self.options, self.version, self.files)
            parts = list(planned_partitions(dataset, self.selection, self.options))
        else:
            consumers = self.options.consumers if mode == "consumers" else None
            parts = list(plan_partitions(self.selection, consumers))
        return parts or [SubpartitionSelection(0, ())]

    def __getstate__(self) -> dict[str, Any]:
        """The reader without its opened dataset: each Spark task opens the dataset itself."""
        state = dict(self.__dict__)
        state["_dataset"] = None
        return state

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """Yield the partition's rows from the files it covers, in Spark's Arrow schema."""
        if isinstance(partition, SubpartitionSelection) and not partition.subpartitions:
            return
        if not isinstance(partition, (PlannedPartition, SubpartitionSelection)):
            raise InvalidOptionError(
                "the arrowshuffle reader reads its own partitions (a planned task or a "
                f"subpartition selection), found {type(partition).__name__}"
            )
        dataset = task_dataset(self.options, self.version, self.files)
        # Spark runs a task per core: decoding ahead on another thread would only compete.
        read_options = dataclasses.replace(dataset.options, decode_ahead=False)
        if isinstance(partition, PlannedPartition):
            batches = dataset.iter_batches(
                task=partition.task(dataset.num_files),
                columns=self.columns,
                verify=self.options.verify,
                options=read_options,
            )
        else:
            batches = dataset.iter_batches(
                list(partition.subpartitions),
                columns=self.columns,
                verify=self.options.verify,
                options=read_options,
            )
        # Made plain before they are joined: pyarrow cannot concatenate a run-end encoded
        # column past its run-end type's range, nor one that holds an extension type.
        plain = (conform(batch, self.target) for batch in batches)
        yield from coalesce_batches(plain, self.options.batch_rows, self.options.batch_bytes)


class PruningArrowShuffleReader(ArrowShuffleReader):
    """A reader that also takes Spark's pushed filters to skip subpartitions.

    Chosen by the ``pushdown`` option; Spark then also needs
    ``spark.sql.python.filterPushdown.enabled`` (it refuses a reader with ``pushFilters``
    otherwise, which is why the plain reader has none).
    """

    def pushFilters(self, filters: list[Filter]) -> Iterable[Filter]:
        """Skip subpartitions that equality filters on the partitioning key rule out.

        Every filter is handed back: Spark still applies them to the rows read.
        """
        keep = prune(self.partitioner_spec, self.stored_schema, self.num_subpartitions, filters)
        if keep is not None:
            self.selection = tuple(s for s in self.selection if s in keep)
        return filters


# --------------------------------------------------------------------------------- source


class ArrowShuffleDataSource(DataSource):
    """The ``arrowshuffle`` data source; register it with :func:`arrowshuffle.spark.register`."""

    @classmethod
    def name(cls) -> str:
        """The format name: ``arrowshuffle``."""
        return FORMAT_NAME

    @message_first
    def schema(self) -> Any:
        """The Spark schema derived from the dataset manifest's Arrow schema.

        Only the columns of option ``columns``, in its order, when it is given. Spark asks
        for it only when the read gives no schema of its own.
        """
        options = parse_read_options(self.options)
        dataset = open_dataset(options.path, options.storage_options)
        return read_struct(dataset, options.columns)

    @message_first
    def reader(self, schema: Any) -> ArrowShuffleReader:
        """A reader of the dataset (its files are checked against the manifest first)."""
        options = parse_read_options(self.options)
        if options.pushdown:
            return PruningArrowShuffleReader(options, schema)
        return ArrowShuffleReader(options, schema)

    @message_first
    def writer(self, schema: Any, overwrite: bool) -> ArrowShuffleWriter:
        """A writer of one shuffle file per task, committed by one manifest."""
        return ArrowShuffleWriter(parse_write_options(self.options), schema, overwrite)
