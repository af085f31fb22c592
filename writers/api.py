"""``write``: one shuffle file from a table, a stream of batches or a polars frame.

The input is read batch by batch and handed to a :class:`ShuffleFileWriter`, so a stream
(a ``RecordBatchReader``, a polars ``LazyFrame``, any object with ``__arrow_c_stream__``) is
never materialized: memory stays at the writer's budget plus the batch in hand.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Iterator
from typing import Any

import pyarrow as pa

from arrowshuffle.format.arrow_types import (
    decode_dictionaries,
    decode_dictionary,
    has_dictionary,
    stored_type,
)
from arrowshuffle.format.errors import InvalidOptionError, SchemaMismatchError
from arrowshuffle.format.manifest import Manifest
from arrowshuffle.format.naming import new_file_name
from arrowshuffle.format.partitioners import PARTITIONER_NAMES, Partitioner, make_partitioner
from arrowshuffle.format.partitioners.registry import PARTITIONERS
from arrowshuffle.writers.dataset_writer import (
    check_commit,
    commit_dataset,
    normalize_mode,
    prepare_directory,
    read_manifest,
)
from arrowshuffle.writers.file_writer import (
    DEFAULT_COMPRESSION,
    DEFAULT_MAX_BATCH_ROWS,
    ShuffleFileWriter,
    WrittenFile,
)
from arrowshuffle.writers.memory_pool import MemoryPool

#: The partitioner used when neither ``partitioner`` nor ``by`` is given (Spark's
#: ``repartition(n)`` and Flink's rebalance).
DEFAULT_PARTITIONER = "round_robin"


def write(
    data: Any,
    path: str | os.PathLike[str],
    *,
    num_subpartitions: int,
    partitioner: str | Partitioner | None = None,
    by: str | list[str] | None = None,
    memory: int | str | None = None,
    compression: str | None = DEFAULT_COMPRESSION,
    max_batch_rows: int = DEFAULT_MAX_BATCH_ROWS,
    storage_options: dict[str, Any] | None = None,
    memory_pool: MemoryPool | None = None,
    overwrite: bool = False,
    **partitioner_options: Any,
) -> WrittenFile:
    """Write ``data`` as one shuffle file (``path`` and its index ``path + ".idx"``).

    An existing pair at ``path`` is refused unless ``overwrite`` is set; replacing one is not
    atomic (two renames, see :class:`ShuffleFileWriter`). :func:`write_dataset` with
    ``mode="overwrite"`` replaces data atomically.

    Args:
        data: a pyarrow ``Table``, ``RecordBatch`` or ``RecordBatchReader``, a polars
            ``DataFrame`` or ``LazyFrame`` (run by the streaming engine, batch by batch), or
            any object with ``__arrow_c_stream__``. Dictionary-encoded columns are stored
            decoded.
        path: the data file, a local path or an fsspec URL.
        num_subpartitions: how many subpartitions the file has.
        partitioner: a partitioner name (see :data:`PARTITIONER_NAMES`) or object. Default:
            ``"hash"`` when ``by`` is given, else ``"round_robin"``.
        by: the key column(s) of ``hash``, ``key_group``, ``range`` or ``column``.
        memory: the writer's memory (see :class:`ShuffleFileWriter`).
        compression: ``"zstd"`` (the default), ``"lz4"`` or ``"none"``; ``"none"`` keeps
            local reads zero-copy, at several times the bytes (README, "Compression").
        max_batch_rows: the most rows per record batch, read and written.
        storage_options: passed to fsspec for URLs.
        memory_pool: the pool the writer takes its budget from.
        overwrite: replace an existing data file and index at ``path`` (not atomically).
        **partitioner_options: options of a named partitioner, e.g. ``seed=1`` or
            ``boundaries=[...]``.

    Returns:
        What was written: URLs, sizes, rows and regions.

    Raises:
        InvalidOptionError: an unknown input type, partitioner or option, or a data file or
            index already at ``path`` without ``overwrite``.

    Example:
        >>> write(table, "part-0.arrow", num_subpartitions=8, by="user_id")  # doctest: +SKIP
    """
    schema, batches, table = _open_input(data, max_batch_rows)
    chosen = _partitioner(partitioner, by, num_subpartitions, partitioner_options, table)
    with ShuffleFileWriter(
        path,
        schema,
        num_subpartitions,
        memory=memory,
        memory_pool=memory_pool,
        max_batch_rows=max_batch_rows,
        compression=compression,
        partitioner=chosen,
        storage_options=storage_options,
        overwrite=overwrite,
    ) as writer:
        for batch in batches:
            writer.write(batch)
        return writer.close()


def write_dataset(
    data: Any,
    path: str | os.PathLike[str],
    *,
    num_subpartitions: int,
    mode: str = "error",
    storage_options: dict[str, Any] | None = None,
    **write_options: Any,
) -> Manifest:
    """Write ``data`` as one more file of the dataset at ``path`` and commit its manifest.

    The file is written under a fresh name, then the dataset's next manifest version is
    created: readers see the old version until that single atomic step. By default an existing
    dataset is refused before anything is written; ``mode`` says what to do with one instead:
    replace it (``overwrite``), add to it (``append``) or keep it (``ignore``). Jobs may commit
    to one dataset at once: appends all land; an overwrite that another job's commit overtook
    raises :class:`~arrowshuffle.format.errors.CommitConflictError` and commits nothing.

    Args:
        data: anything :func:`write` takes.
        path: the dataset directory, a local path or an fsspec URL (created if missing).
        num_subpartitions: how many subpartitions the file has.
        mode: Spark's save modes: ``error`` (the default; also ``errorifexists``) refuses an
            existing dataset, ``overwrite`` replaces it (its files stay for readers of the old
            version until :func:`~arrowshuffle.writers.vacuum.vacuum`), ``append`` adds this
            file to it (same schema, subpartition count and partitioner), ``ignore`` keeps it
            and writes nothing.
        storage_options: passed to fsspec for URLs.
        **write_options: the other options of :func:`write` (``by``, ``partitioner``,
            ``compression``, ``memory``, ...).

    Returns:
        The manifest now in force.

    Raises:
        InvalidOptionError: a dataset already at ``path`` in ``error`` mode (nothing is
            written), an unknown mode, or an ``append`` of data with another subpartition
            count or partitioner.
        SchemaMismatchError: an ``append`` of data with another schema.
        CommitConflictError: another job committed since this one started (``overwrite``,
            ``error``).

    Example:
        >>> write_dataset(table, "ds", num_subpartitions=8, by="k")  # doctest: +SKIP
        >>> write_dataset(more, "ds", num_subpartitions=8, by="k", mode="append")  # doctest: +SKIP
    """
    mode = normalize_mode(mode)
    directory = prepare_directory(path, storage_options)
    base = check_commit(directory, mode=mode, name=os.fspath(path))
    if base.version is not None and mode == "ignore":
        existing = read_manifest(directory)
        if existing is not None:
            return existing
    location = directory.child(new_file_name(0))
    written = write(
        data,
        location.url,
        num_subpartitions=num_subpartitions,
        storage_options=storage_options,
        **write_options,
    )
    return commit_dataset(
        directory,
        [written],
        schema=written.schema,
        num_subpartitions=num_subpartitions,
        partitioner=written.partitioner,
        mode=mode,
        base=base,
    )


def _partitioner(
    partitioner: str | Partitioner | None,
    by: str | list[str] | None,
    num_subpartitions: int,
    options: dict[str, Any],
    table: pa.Table | None,
) -> Partitioner:
    if partitioner is not None and not isinstance(partitioner, str):
        if not hasattr(partitioner, "assign"):
            raise InvalidOptionError(
                "partitioner must be a name (one of "
                f"{', '.join(PARTITIONER_NAMES)}) or a Partitioner, "
                f"found {type(partitioner).__name__}"
            )
        if by is not None or options:
            raise InvalidOptionError(
                "by= and partitioner options apply to a partitioner given by name; this "
                f"partitioner object is already configured ({partitioner.spec()})"
            )
        return partitioner
    name = partitioner or ("hash" if by is not None else DEFAULT_PARTITIONER)
    if name not in PARTITIONER_NAMES:
        raise InvalidOptionError(
            f"unknown partitioner {name!r}; the partitioners are {', '.join(PARTITIONER_NAMES)}"
        )
    if (
        name == "range"
        and table is not None
        and options.get("boundaries") is None
        and options.get("sample") is None
        and isinstance(by, (str, list))
    ):
        # The whole input is at hand: sample all of it, not only the first batch.
        key = by if isinstance(by, str) else by[0]
        if key in table.schema.names:
            sample = table.column(key)
            if pa.types.is_dictionary(sample.type):
                sample = pa.chunked_array(
                    [decode_dictionary(c) for c in sample.chunks], sample.type.value_type
                )
            options = {**options, "sample": sample}
    _check_option_names(name, options)
    return make_partitioner(name, num_subpartitions=num_subpartitions, by=by, **options)


#: The keyword options of write and write_dataset besides a partitioner's own.
_WRITE_OPTIONS = (
    "num_subpartitions",
    "partitioner",
    "by",
    "memory",
    "compression",
    "max_batch_rows",
    "storage_options",
    "memory_pool",
    "overwrite",
    "mode",
)


def _check_option_names(name: str, options: dict[str, Any]) -> None:
    """Refuse an option neither the writer nor the partitioner takes, suggesting the closest.

    Options the writer does not know are the partitioner's, so a misspelled writer option
    would otherwise be blamed on the partitioner.
    """
    accepted = tuple(PARTITIONERS[name].OPTIONS)
    unknown = sorted(k for k in options if k not in accepted and k != "sample")
    if not unknown:
        return
    key = unknown[0]
    close = difflib.get_close_matches(key, _WRITE_OPTIONS + accepted, n=1, cutoff=0.75)
    hint = f" (did you mean {close[0]}?)" if close else ""
    takes = ", ".join(accepted) if accepted else "no options"
    raise InvalidOptionError(
        f"unknown option {key}{hint}; write takes {', '.join(_WRITE_OPTIONS[:-1])} and the "
        f"{name} partitioner takes {takes}"
    )


def _open_input(
    data: Any, max_batch_rows: int
) -> tuple[pa.Schema, Iterator[pa.RecordBatch], pa.Table | None]:
    """The schema and batches of ``data``, plus the table when it is already in memory."""
    if (
        isinstance(max_batch_rows, bool)
        or not isinstance(max_batch_rows, int)
        or max_batch_rows < 1
    ):
        raise InvalidOptionError(
            f"max_batch_rows must be a positive integer, found {max_batch_rows!r}"
        )
    if _is_polars(data):
        return _open_polars(data, max_batch_rows)
    if isinstance(data, pa.RecordBatch):
        data = pa.Table.from_batches([data])
    if isinstance(data, pa.Table):
        return _decoded(data.schema, iter(data.to_batches(max_chunksize=max_batch_rows)), data)
    if isinstance(data, pa.RecordBatchReader):
        return _decoded(data.schema, _sliced(data, max_batch_rows), None)
    if hasattr(data, "__arrow_c_stream__"):
        reader = pa.RecordBatchReader.from_stream(data)
        return _decoded(reader.schema, _sliced(reader, max_batch_rows), None)
    raise InvalidOptionError(
        "write() takes a pyarrow Table, RecordBatch or RecordBatchReader, a polars DataFrame or "
        f"LazyFrame, or an object with __arrow_c_stream__; found {type(data).__name__}"
    )


def _sliced(reader: pa.RecordBatchReader, max_rows: int) -> Iterator[pa.RecordBatch]:
    try:
        for batch in reader:
            for start in range(0, batch.num_rows, max_rows):
                yield batch.slice(start, max_rows)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as exc:
        # The input stream itself broke (a producer's bad batch): the data argument is unusable.
        raise InvalidOptionError(f"the input stream failed while being read: {exc}") from exc


def _is_polars(data: Any) -> bool:
    # Checked by module name so that polars is imported only for polars inputs.
    return type(data).__module__.split(".")[0] == "polars"


def _open_polars(
    data: Any, max_batch_rows: int
) -> tuple[pa.Schema, Iterator[pa.RecordBatch], pa.Table | None]:
    import polars as pl

    if isinstance(data, pl.DataFrame):
        table = _polars_to_arrow(data)
        return _decoded(table.schema, iter(table.to_batches(max_chunksize=max_batch_rows)), table)
    if isinstance(data, pl.LazyFrame):
        # The schema of an empty frame of the same columns, for inputs with no rows at all.
        try:
            schema = _polars_to_arrow(pl.DataFrame(schema=data.collect_schema())).schema
        except pl.exceptions.PolarsError as exc:  # the LazyFrame's own query is wrong
            raise InvalidOptionError(f"the polars query cannot be planned: {exc}") from exc

        def frames() -> Iterator[pa.RecordBatch]:
            try:
                for frame in data.collect_batches(chunk_size=max_batch_rows):
                    yield from _polars_to_arrow(frame).to_batches(max_chunksize=max_batch_rows)
            except pl.exceptions.PolarsError as exc:  # the LazyFrame's own query failed
                raise InvalidOptionError(f"the polars query failed: {exc}") from exc

        return _decoded(schema, frames(), None)
    if hasattr(data, "__arrow_c_stream__"):
        reader = pa.RecordBatchReader.from_stream(data)
        return _decoded(reader.schema, _sliced(reader, max_batch_rows), None)
    raise InvalidOptionError(
        f"write() takes a polars DataFrame or LazyFrame, found {type(data).__name__}"
    )


def _polars_to_arrow(frame: Any) -> pa.Table:
    """``frame.to_arrow()``, or :class:`SchemaMismatchError` naming the columns Arrow refuses.

    A polars type that this pyarrow cannot import (``Int128`` in some versions, say) fails the
    whole conversion with a message about format strings; the error names the columns instead.
    """
    try:
        return frame.to_arrow()
    except pa.ArrowException as exc:
        refused = []
        for name, dtype in frame.schema.items():
            try:
                frame.select(name).head(0).to_arrow()
            except pa.ArrowException:
                refused.append(f"{name!r} ({dtype})")
        columns = ", ".join(refused) or "a column"
        raise SchemaMismatchError(
            f"the polars frame cannot be handed to Arrow: column(s) {columns} have no type "
            f"this pyarrow reads ({exc}); cast them first, for example to Int64 or Decimal"
        ) from exc


def _decoded(
    schema: pa.Schema, batches: Iterator[pa.RecordBatch], table: pa.Table | None
) -> tuple[pa.Schema, Iterator[pa.RecordBatch], pa.Table | None]:
    """Cast dictionary columns, at any depth, to their value type (files hold plain values)."""
    if not any(has_dictionary(f.type) for f in schema):
        return schema, batches, table
    plain = pa.schema([f.with_type(stored_type(f.type)) for f in schema], metadata=schema.metadata)
    encoded = [i for i, f in enumerate(schema) if has_dictionary(f.type)]

    def decode(batch: pa.RecordBatch) -> pa.RecordBatch:
        columns = list(batch.columns)
        for i in encoded:
            try:
                # Not a cast: it would also cast the column's other children (see
                # decode_dictionaries), and has no kernel for view values.
                columns[i] = decode_dictionaries(columns[i])
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, SchemaMismatchError) as exc:
                raise SchemaMismatchError(
                    f"column {schema.field(i).name!r} of type {schema.field(i).type} cannot "
                    f"be decoded to {plain.field(i).type}: {exc}"
                ) from exc
        return pa.RecordBatch.from_arrays(columns, schema=plain)

    return plain, (decode(batch) for batch in batches), table
