"""polars integration: shuffle files and datasets as LazyFrames.

:func:`scan` returns a ``polars.LazyFrame`` backed by an IO source registered with
``polars.io.plugins.register_io_source``. polars hands the source the projected columns, a
predicate and a row limit, and does not apply them again: the source reads only the projected
columns (plus those the predicate needs), filters every batch with the predicate, and stops
fetching once the row limit is reached. Batches stream one by one from the read scheduler, so
``collect()`` and ``collect(engine="streaming")`` both work without holding more than the
scheduler's in-flight budget of fetched bytes.

Files or datasets: :func:`scan` opens a dataset when the path is a local directory or a URL with
a manifest, and a single data file otherwise (see
:func:`arrowshuffle.readers.dataset.open_shuffle`); :func:`scan_file` and :func:`scan_dataset`
skip the guess.

Opening costs more than building a LazyFrame: a local dataset opened by path is kept per
(directory, manifest version), so that a loop of one ``scan`` per subpartition lists the
versions once per call but reads and decodes the manifest once (a commit makes a new version,
which is opened afresh); :func:`clear_cache` empties it. ``scan`` also takes an opened dataset
or file (``open_dataset(path)``), which costs no request at all: the way to loop over the
subpartitions of a dataset on object storage.

Balanced reads: :func:`scan_tasks` plans the read from the index sizes alone (coalescing small
subpartitions, splitting a hot one over files) and returns one LazyFrame per planned task, for
``polars.collect_all`` or for a pool of workers; ``scan(..., task=t)`` reads one task of a plan
made with ``plan()``.

polars is an optional dependency: ``pip install 'arrowshuffle[polars]'``.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.types as pat

from arrowshuffle.format.arrow_types import child_types, plain_type, to_plain, with_child_types
from arrowshuffle.format.errors import InvalidOptionError, SchemaMismatchError, import_optional
from arrowshuffle.readers.balance import (
    DEFAULT_SKEW_FACTOR,
    DEFAULT_SKEW_MIN_BYTES,
    DEFAULT_TARGET_BYTES,
    PlannedRead,
)
from arrowshuffle.readers.byte_ranges import Subpartitions
from arrowshuffle.readers.cogroup import CoGroup
from arrowshuffle.readers.cogroup import cogroup as arrow_cogroup
from arrowshuffle.readers.cogroup_plan import CoGroupTask
from arrowshuffle.readers.dataset import ShuffleDataset, open_dataset, open_shuffle
from arrowshuffle.readers.file_reader import ShuffleFile, open_file
from arrowshuffle.readers.integrity import Verify, resolve_verify
from arrowshuffle.readers.manifest_io import list_versions, load_manifest
from arrowshuffle.readers.scheduler import ReadOptions
from arrowshuffle.readers.selection import Selection
from arrowshuffle.readers.storage import resolve

if TYPE_CHECKING:
    import polars as pl

__all__ = [
    "PolarsCoGroup",
    "clear_cache",
    "cogroup",
    "read",
    "scan",
    "scan_dataset",
    "scan_file",
    "scan_tasks",
]

_R = TypeVar("_R")

#: Rows gathered before one conversion to polars when polars gives no batch size.
DEFAULT_GROUP_ROWS = 65536


def _polars() -> Any:
    return import_optional("polars", "polars", "arrowshuffle.polars")


#: What :func:`scan` takes: a path or URL, or a dataset or file opened already.
Source = str | os.PathLike[str] | ShuffleDataset | ShuffleFile

#: How many opened local datasets :func:`scan` keeps (each holds its files' open indexes).
CACHED_DATASETS = 8
_opened: OrderedDict[tuple[str, int, float | None], ShuffleDataset] = OrderedDict()
_opened_lock = threading.Lock()


def clear_cache() -> None:
    """Forget the datasets :func:`scan` opened by path (the next scan opens them again)."""
    with _opened_lock:
        _opened.clear()


def _open(
    source: Source, storage_options: dict[str, Any] | None, kind: str = "any"
) -> ShuffleFile | ShuffleDataset:
    """The reader of ``source``: itself if opened, else opened (a local dataset cached).

    ``kind`` is ``"dataset"``, ``"file"`` or ``"any"`` (guessed as
    :func:`~arrowshuffle.readers.dataset.open_shuffle` does).
    """
    if isinstance(source, (ShuffleDataset, ShuffleFile)):
        if storage_options:
            raise InvalidOptionError(
                "storage_options apply to a path; an opened dataset or file keeps the ones "
                "it was opened with"
            )
        wanted = {"dataset": ShuffleDataset, "file": ShuffleFile}.get(kind)
        if wanted is not None and not isinstance(source, wanted):
            raise InvalidOptionError(
                f"expected a path or an opened {kind}, found {type(source).__name__}"
            )
        return source
    if kind == "file":
        return open_file(source, storage_options)
    location = resolve(source, storage_options)
    if not (location.is_local and os.path.isdir(location.path)):
        # Object stores: the listing and the manifest cost about the same request each, so a
        # cache would save little; there, pass an opened dataset.
        return (
            open_dataset(source, storage_options)
            if kind == "dataset"
            else open_shuffle(source, storage_options)
        )
    versions = list_versions(location)
    if not versions:  # a dataset of one manifest file, rewritten in place: never cached
        return open_dataset(source, storage_options)
    # The version file's time as well: a dataset removed and written again at the same path
    # starts again at version 1, with other files. Times can be coarse, so a hit must also
    # still find its first data file, whose name carries a random id: a rewritten dataset
    # has other names.
    key = (location.url, versions[-1].version, versions[-1].modified)
    with _opened_lock:
        cached = _opened.get(key)
        if cached is not None and _still_listed(cached):
            _opened.move_to_end(key)
            return cached
    # A version's manifest never changes once committed: this one is safe to keep.
    loaded = load_manifest(location, versions=versions)
    dataset = ShuffleDataset(location, loaded.manifest, manifest_stats=loaded.stats)
    if not dataset.num_files:  # nothing to tell a rewrite from it by: not kept
        return dataset
    with _opened_lock:
        _opened[key] = dataset
        _opened.move_to_end(key)
        while len(_opened) > CACHED_DATASETS:
            _opened.popitem(last=False)
    return dataset


def _still_listed(dataset: ShuffleDataset) -> bool:
    """Whether the first data file a cached dataset lists is still there."""
    return os.path.exists(dataset.data_files[0])


def scan(
    path_or_url: Source,
    subpartitions: Subpartitions | None = None,
    storage_options: dict[str, Any] | None = None,
    consumer: int | None = None,
    num_consumers: int | None = None,
    pattern: str = "all_to_all",
    *,
    verify: Verify = "auto",
    task: PlannedRead | None = None,
    options: ReadOptions | None = None,
) -> pl.LazyFrame:
    """Lazily read a shuffle dataset or file as a polars LazyFrame.

    Args:
        path_or_url: a dataset directory or a data file (local path or fsspec URL), or a
            dataset or file opened already (``open_dataset(path)``): building many frames
            of one dataset then costs no opening at all.
        subpartitions: an int, a range or a list of ints; all by default.
        storage_options: passed to fsspec (credentials, endpoint, ...).
        consumer: read what this consumer is assigned instead of ``subpartitions``.
        num_consumers: how many consumers share the data.
        pattern: ``"all_to_all"`` or ``"pointwise"``; see :func:`arrowshuffle.assign`.
        verify: check every chunk's CRC32C before decoding it: ``"auto"`` (the default) for
            object stores and not for local files, ``True`` always, ``False`` never.
        task: read one task of a plan (``open_dataset(path).plan(...)``) instead of
            ``subpartitions`` or a consumer's share; see also :func:`scan_tasks`.
        options: the tuning of the read (coalescing, memory in flight, IO threads).

    Returns:
        A LazyFrame; nothing is read from the data files until it is collected.

    Raises:
        MissingObjectError: nothing exists at ``path_or_url``.
        InvalidOptionError: a selection that does not fit the data, or a task planned for
            other data.
    """
    _polars()
    reader = _open(path_or_url, storage_options)
    selection = Selection(subpartitions, consumer, num_consumers, pattern, task)
    return _scan(reader, selection, verify, options)


def scan_file(
    path_or_url: Source,
    subpartitions: Subpartitions | None = None,
    storage_options: dict[str, Any] | None = None,
    consumer: int | None = None,
    num_consumers: int | None = None,
    pattern: str = "all_to_all",
    *,
    verify: Verify = "auto",
    task: PlannedRead | None = None,
    options: ReadOptions | None = None,
) -> pl.LazyFrame:
    """Like :func:`scan`, for one data file (its index beside it)."""
    _polars()
    reader = _open(path_or_url, storage_options, "file")
    selection = Selection(subpartitions, consumer, num_consumers, pattern, task)
    return _scan(reader, selection, verify, options)


def scan_dataset(
    path_or_url: Source,
    subpartitions: Subpartitions | None = None,
    storage_options: dict[str, Any] | None = None,
    consumer: int | None = None,
    num_consumers: int | None = None,
    pattern: str = "all_to_all",
    *,
    verify: Verify = "auto",
    task: PlannedRead | None = None,
    options: ReadOptions | None = None,
) -> pl.LazyFrame:
    """Like :func:`scan`, for a dataset directory (through its manifest)."""
    _polars()
    reader = _open(path_or_url, storage_options, "dataset")
    selection = Selection(subpartitions, consumer, num_consumers, pattern, task)
    return _scan(reader, selection, verify, options)


def read(
    path_or_url: Source,
    subpartitions: Subpartitions | None = None,
    storage_options: dict[str, Any] | None = None,
    consumer: int | None = None,
    num_consumers: int | None = None,
    pattern: str = "all_to_all",
    *,
    verify: Verify = "auto",
    task: PlannedRead | None = None,
    options: ReadOptions | None = None,
) -> pl.DataFrame:
    """Read a shuffle dataset or file into a polars DataFrame; see :func:`scan`."""
    frame: pl.DataFrame = scan(
        path_or_url,
        subpartitions,
        storage_options,
        consumer,
        num_consumers,
        pattern,
        verify=verify,
        task=task,
        options=options,
    ).collect()
    return frame


def scan_tasks(
    path_or_url: Source,
    target_bytes: int | str = DEFAULT_TARGET_BYTES,
    *,
    storage_options: dict[str, Any] | None = None,
    subpartitions: Subpartitions | None = None,
    skew_factor: float = DEFAULT_SKEW_FACTOR,
    skew_min_bytes: int | str = DEFAULT_SKEW_MIN_BYTES,
    max_tasks: int | None = None,
    verify: Verify = "auto",
    options: ReadOptions | None = None,
) -> list[pl.LazyFrame]:
    """Plan a balanced read and return one LazyFrame per planned task.

    The plan comes from the sizes the dataset already records (no data is read): contiguous
    small subpartitions are coalesced up to ``target_bytes``, and a subpartition above
    ``skew_factor`` times the median and above ``skew_min_bytes`` is split into tasks over
    disjoint groups of its files (or regions). Together the frames hold exactly the rows of
    ``scan(path_or_url, subpartitions)``; each frame holds whole subpartitions unless it is
    part of a split, so per-key aggregations of a split subpartition need a final combine.

    A list rather than an iterator: the plan is made up front anyway, and a list is what
    ``polars.collect_all`` takes, what ``len()`` sizes a worker pool by, and what can be
    handed out to workers by position. All frames share one opened reader.

    Args:
        path_or_url: a dataset directory or a data file (local path or fsspec URL).
        target_bytes: the chunk bytes a task aims at (``"128MiB"`` or a count).
        storage_options: passed to fsspec (credentials, endpoint, ...).
        subpartitions: plan only these (an int, a range or a list of ints); all by default.
        skew_factor: a subpartition above this multiple of the median is skewed ...
        skew_min_bytes: ... when it also holds more than this many bytes.
        max_tasks: the most tasks wanted; the target grows until the plan fits.
        verify: as in :func:`scan`.
        options: the tuning of every task's read (coalescing, memory in flight, IO threads).

    Returns:
        One LazyFrame per task, in plan order (subpartition order).

    Raises:
        MissingObjectError: nothing exists at ``path_or_url``.
        InvalidOptionError: a selection that does not fit the data, or a planning option out
            of range.
    """
    _polars()
    reader = _open(path_or_url, storage_options)
    tasks = reader.plan(
        target_bytes,
        subpartitions=subpartitions,
        skew_factor=skew_factor,
        skew_min_bytes=skew_min_bytes,
        max_tasks=max_tasks,
    )
    return [_scan(reader, Selection(task=task), verify, options) for task in tasks]


def _scan(
    reader: ShuffleFile | ShuffleDataset,
    selection: Selection,
    verify: Verify,
    options: ReadOptions | None = None,
) -> pl.LazyFrame:
    polars = _polars()
    from polars.io.plugins import register_io_source

    # Check the selection now, so that a bad one fails at scan() rather than at collect().
    resolve_verify(verify, remote=False)
    if options is not None and not isinstance(options, ReadOptions):
        raise InvalidOptionError(f"options must be a ReadOptions, found {options!r}")
    reader.reads(selection)
    arrow_schema, schema = _schemas(reader)

    def source(
        with_columns: list[str] | None,
        predicate: pl.Expr | None,
        n_rows: int | None,
        batch_size: int | None,
    ) -> Iterator[pl.DataFrame]:
        if n_rows is not None and n_rows <= 0:
            return
        columns = _columns_to_read(with_columns, predicate, arrow_schema.names)
        batches = reader.iter_selection(selection, columns=columns, verify=verify, options=options)
        read_schema = (
            arrow_schema if columns is None else pa.schema([arrow_schema.field(c) for c in columns])
        )
        stored = [reader.schema.field(name).type for name in read_schema.names]
        converted: Iterator[pa.RecordBatch] = batches
        if stored != read_schema.types:
            converted = (_conform(batch, read_schema) for batch in batches)
        # Batches are converted in groups of about polars' batch size: one conversion of many
        # small batches costs far less than many conversions. With a limit and no predicate,
        # a group never needs more rows than the limit.
        group_rows = batch_size or DEFAULT_GROUP_ROWS
        if n_rows is not None and predicate is None:
            group_rows = min(group_rows, n_rows)
        remaining = n_rows
        try:
            for group in _groups(converted, group_rows):
                frame = polars.from_arrow(
                    pa.Table.from_batches(group, schema=read_schema), rechunk=False
                )
                if predicate is not None:
                    frame = frame.filter(predicate)
                if with_columns is not None and frame.columns != list(with_columns):
                    frame = frame.select(with_columns)
                if remaining is not None:
                    frame = frame.head(remaining)
                    remaining -= frame.height
                yield from _slices(frame, batch_size)
                if remaining == 0:
                    return
        finally:
            close = getattr(batches, "close", None)
            if close is not None:
                close()

    detail = f"{reader.url} {selection.describe()}".rstrip()
    frame: pl.LazyFrame = register_io_source(
        source,
        schema=schema,
        is_pure=True,
        explain_name="arrowshuffle",
        explain_detail=detail,
    )
    return frame


#: Per opened reader: the Arrow schema handed to polars and its polars schema.
_reader_schemas: weakref.WeakKeyDictionary[ShuffleFile | ShuffleDataset, tuple[pa.Schema, Any]]
_reader_schemas = weakref.WeakKeyDictionary()


def _schemas(reader: ShuffleFile | ShuffleDataset) -> tuple[pa.Schema, Any]:
    """The Arrow schema handed to polars for ``reader``, and its polars schema.

    Kept per reader (a reader's schema never changes): converting a schema to polars costs
    about as much as the rest of building a LazyFrame.
    """
    found = _reader_schemas.get(reader)
    if found is None:
        arrow_schema = polars_arrow_schema(reader.schema)
        found = (arrow_schema, _polars().from_arrow(arrow_schema.empty_table()).schema)
        _reader_schemas[reader] = found
    return found


#: The most digits a polars decimal holds.
_POLARS_MAX_PRECISION = 38


def polars_arrow_schema(schema: pa.Schema) -> pa.Schema:
    """The Arrow schema of the batches handed to polars for a dataset of ``schema``.

    polars reads Arrow's plain forms: list views become lists, run-end encoded columns are
    decoded, extension columns are their storage, ``decimal256`` of at most 38 digits becomes
    ``decimal128``. Every other type is kept.

    Raises:
        SchemaMismatchError: a column whose type polars cannot hold (an interval, a union, a
            decimal of more than 38 digits, a fixed-size list of size 0, a timestamp in a
            fixed-offset zone such as ``+05:30``), named with its type.
    """
    return pa.schema(
        [f.with_type(_polars_type(plain_type(f.type), f.name, f.type)) for f in schema],
        metadata=schema.metadata,
    )


def _polars_type(t: pa.DataType, name: str, stored: pa.DataType) -> pa.DataType:
    why = ""
    if pat.is_union(t):
        why = "polars has no union type"
    elif pat.is_interval(t):
        why = "polars has no interval type"
    elif pat.is_decimal(t) and t.precision > _POLARS_MAX_PRECISION:
        why = f"polars decimals hold at most {_POLARS_MAX_PRECISION} digits"
    elif pat.is_fixed_size_list(t) and t.list_size == 0:
        why = "polars fails on fixed-size lists of size 0"
    elif pat.is_timestamp(t) and t.tz is not None and not _polars_zone(t.tz):
        # Refused here: handed over, polars would panic building the frame's schema.
        why = f"polars takes time zone names such as 'Asia/Kolkata', not {t.tz!r}"
    if why:
        raise SchemaMismatchError(
            f"column {name!r} has type {stored}, which polars cannot read ({why}); read it "
            "with arrowshuffle.open_dataset or open_file, or leave the column out of the dataset"
        )
    if pat.is_decimal256(t):
        return pa.decimal128(t.precision, t.scale)
    children = child_types(t)
    if not children:
        return t
    mapped = [_polars_type(c, name, stored) for c in children]
    return t if mapped == children else with_child_types(t, mapped)


def _polars_zone(zone: str) -> bool:
    """Whether polars accepts ``zone`` as a datetime's time zone."""
    pl = _polars()
    try:  # the dtype alone is not checked: a series of it is
        pl.Series([], dtype=pl.Datetime("us", zone))
    except Exception:  # polars raises its ComputeError for a zone it cannot parse
        return False
    return True


def _conform(batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    """``batch`` in the polars form ``schema`` (see :func:`polars_arrow_schema`)."""
    columns = []
    for column, field in zip(batch.columns, schema, strict=True):
        if not column.type.equals(field.type):
            column = to_plain(column)
            if not column.type.equals(field.type):
                column = pc.cast(column, field.type)
        columns.append(column)
    return pa.RecordBatch.from_arrays(columns, schema=schema)


def _columns_to_read(
    with_columns: list[str] | None, predicate: pl.Expr | None, names: list[str]
) -> list[str] | None:
    """The projected columns plus those the predicate reads, in schema order."""
    if with_columns is None:
        return None
    wanted = set(with_columns)
    if predicate is not None:
        wanted.update(predicate.meta.root_names())
    unknown = wanted - set(names)
    if unknown:
        raise InvalidOptionError(f"no column {sorted(unknown)[0]!r}; the columns are {names}")
    return [n for n in names if n in wanted]


def _groups(batches: Iterator[pa.RecordBatch], rows: int) -> Iterator[list[pa.RecordBatch]]:
    """Gather consecutive batches until they hold at least ``rows`` rows."""
    group: list[pa.RecordBatch] = []
    count = 0
    for batch in batches:
        group.append(batch)
        count += batch.num_rows
        if count >= rows:
            yield group
            group, count = [], 0
    if group:
        yield group


def _slices(frame: pl.DataFrame, batch_size: int | None) -> Iterator[pl.DataFrame]:
    """Cut a frame into pieces of at most ``batch_size`` rows (polars' hint); skip empty ones."""
    if frame.height == 0:
        return
    if not batch_size or frame.height <= batch_size:
        yield frame
        return
    for start in range(0, frame.height, batch_size):
        yield frame.slice(start, batch_size)


class PolarsCoGroup:
    """Co-partitioned datasets as polars frames, task by task. Use :func:`cogroup`.

    Iterating gives, per task, a dict of one ``polars.LazyFrame`` per input holding the same key
    groups of every input (see :func:`arrowshuffle.cogroup`); :meth:`map` runs a function on
    every task on a few threads. :attr:`arrow` is the underlying :class:`arrowshuffle.CoGroup`.
    """

    def __init__(self, groups: CoGroup) -> None:
        self.arrow = groups

    @property
    def tasks(self) -> list[CoGroupTask]:
        """The planned tasks."""
        return self.arrow.tasks

    def __len__(self) -> int:
        return len(self.arrow)

    def read(self, task: CoGroupTask | int) -> dict[str, pl.LazyFrame]:
        """One task's frames, by input name."""
        pl = _polars()
        return {name: pl.from_arrow(t).lazy() for name, t in self.arrow.read(task).items()}

    def __iter__(self) -> Iterator[dict[str, pl.LazyFrame]]:
        for task in self.arrow.tasks:
            yield self.read(task)

    def map(
        self, func: Callable[[dict[str, pl.LazyFrame]], _R], *, threads: int | None = None
    ) -> Iterator[_R]:
        """``func`` on every task's frames on ``threads`` threads; results in task order.

        Example::

            parts = groups.map(lambda f: f["l"].join(f["o"], left_on="lk", right_on="ok")
                               .group_by("ok").agg(pl.col("v").sum()).collect())
            result = pl.concat(parts)
        """
        pl = _polars()

        def frames(tables: dict[str, pa.Table]) -> _R:
            return func({name: pl.from_arrow(t).lazy() for name, t in tables.items()})

        return self.arrow.map(frames, threads=threads)


def cogroup(
    inputs: Mapping[str, str | os.PathLike[str] | ShuffleDataset], **options: Any
) -> PolarsCoGroup:
    """Read co-partitioned datasets as polars frames, task by task, without a second shuffle.

    Takes the arguments of :func:`arrowshuffle.cogroup` (``columns``, ``split``,
    ``target_bytes``, ...). A join and an aggregation on the partitioning keys, computed per
    task and concatenated, equal the same over the whole datasets::

        groups = arrowshuffle.polars.cogroup({"l": "/data/lineitem", "o": "/data/orders"})
        result = pl.concat(groups.map(
            lambda f: f["l"].join(f["o"], left_on="l_orderkey", right_on="o_orderkey")
            .group_by("l_orderkey").agg(pl.col("l_price").sum()).collect()
        ))

    Raises:
        PartitioningMismatchError: inputs that are not co-partitioned.
    """
    _polars()  # the install hint before any dataset is opened
    return PolarsCoGroup(arrow_cogroup(inputs, **options))
