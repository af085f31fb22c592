"""The region-sorted shuffle file writer.

Rows gather in a :class:`~arrowshuffle.writers.sort_buffer.SortBuffer` bounded by a memory
budget: the writer's local pool of a :class:`~arrowshuffle.writers.memory_pool.MemoryPool`.
When the next batch does not fit the budget, the buffer is emitted as one region: for every
subpartition in order, its rows as a contiguous run of record batches (a chunk). The data
file is a plain Arrow IPC file; the index sidecar is written after it, and both appear under
their final names only when the writer closes without error.
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import json
import os
import uuid
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import numpy as np
import pyarrow as pa

from arrowshuffle.format.arrow_types import check_storable, has_dictionary, run_end_fills
from arrowshuffle.format.errors import InvalidOptionError, SchemaMismatchError
from arrowshuffle.format.index import (
    COMPRESSION_BITS,
    ENTRY_DTYPE,
    FILE_ID_KEY,
    REGION_BROADCAST,
    REGION_DTYPE,
    encode_index,
    index_checksum,
)
from arrowshuffle.format.naming import INDEX_SUFFIX
from arrowshuffle.format.notation import parse_bytes
from arrowshuffle.format.partitioners.base import Partitioner, arrow_ids, check_ids
from arrowshuffle.readers.storage import Location, resolve, storage_errors
from arrowshuffle.writers.ipc_output import BatchEncoder, EncodedBatch, IpcFileWriter
from arrowshuffle.writers.memory_pool import (
    DEFAULT_MIN_MEMORY,
    LocalMemoryPool,
    MemoryPool,
    default_memory_pool,
)
from arrowshuffle.writers.output import AtomicOutput, remove_quietly
from arrowshuffle.writers.sort_buffer import SortBuffer, batch_groups, combine_ahead

DEFAULT_MAX_BATCH_ROWS = 64 * 1024
#: The body compression of every writer that is not told otherwise (Python and Spark): ZSTD
#: makes files several times smaller than uncompressed ones, which object storage reads, at
#: a write and decode cost (README, "Compression"). ``"none"`` keeps zero-copy local reads.
DEFAULT_COMPRESSION = "zstd"
MIN_INPUT_SLICE_ROWS = 16 * 1024
#: How errors name the ids given to write().
_IDS = "the subpartition ids"


@dataclass(frozen=True)
class WrittenFile:
    """What a closed writer published: where, how big, and what a manifest must say of it."""

    data_url: str
    index_url: str
    data_size: int
    index_size: int
    rows: int
    regions: int
    index_crc32c: int
    #: The Arrow schema of the file, as its index stores it.
    schema: pa.Schema
    #: The partitioner spec its index records.
    partitioner: dict[str, Any] = dataclasses.field(hash=False)
    #: Chunk bytes and rows of each subpartition summed over regions (a broadcast chunk
    #: counted for every subpartition): what a dataset's manifest adds up for read plans.
    subpartition_bytes: tuple[int, ...] = ()
    subpartition_rows: tuple[int, ...] = ()

    def to_json(self) -> str:
        """This report as JSON text (the schema as base64 Arrow IPC), for :meth:`from_json`."""
        doc = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        doc["schema"] = base64.b64encode(self.schema.serialize().to_pybytes()).decode("ascii")
        return json.dumps(doc)

    @classmethod
    def from_json(cls, text: str) -> WrittenFile:
        """The report :meth:`to_json` wrote."""
        doc = json.loads(text)
        doc["schema"] = pa.ipc.read_schema(pa.py_buffer(base64.b64decode(doc["schema"])))
        for key in ("subpartition_bytes", "subpartition_rows"):
            doc[key] = tuple(doc[key])
        return cls(**doc)


def check_schema(schema: pa.Schema) -> pa.Schema:
    """Refuse schemas the format cannot store (dictionary-encoded fields: spec.md 4, rule 7).

    :func:`~arrowshuffle.writers.api.write` decodes dictionaries itself; a union whose members
    hold a view or run-end encoded type is refused everywhere.
    """
    if not isinstance(schema, pa.Schema):
        raise InvalidOptionError(f"expected a pyarrow Schema, found {type(schema).__name__}")
    for field in schema:
        if has_dictionary(field.type):
            raise SchemaMismatchError(
                f"field {field.name!r} has dictionary type {field.type}; arrowshuffle files hold "
                "plain values: cast it to its value type first"
            )
        check_storable(field.name, field.type)
    return schema


def normalize_compression(compression: str | None) -> str:
    """Map ``None``/``"uncompressed"`` to ``"none"`` and check the codec name."""
    if compression is not None and not isinstance(compression, str):
        raise InvalidOptionError(
            f"compression must be one of none, lz4, zstd; found {type(compression).__name__}"
        )
    name = (compression or "none").lower()
    name = {"uncompressed": "none", "lz4_frame": "lz4"}.get(name, name)
    if name not in COMPRESSION_BITS:
        raise InvalidOptionError(
            f"compression must be one of none, lz4, zstd; found {compression!r}"
        )
    return name


class ShuffleFileWriter:
    """Write one shuffle file: an Arrow IPC data file and its index sidecar.

    Use it as a context manager: the pair is published only when the block exits cleanly; after
    an exception nothing is left under the final names or temporary ones.

    An existing data file or index at ``path`` is refused unless ``overwrite`` is set. Replacing
    a pair is not atomic: it is two renames (data, then index), and a process killed between them
    leaves the new data file beside the old index, which readers refuse (rule V14, or V13 when
    the sizes differ) and the old data is gone. To replace data atomically, write a dataset
    (:func:`~arrowshuffle.writers.api.write_dataset` with ``mode="overwrite"``): its manifest
    is replaced in one step.

    Args:
        path: the data file (local path or fsspec URL); the index is ``path + ".idx"``. A
            local directory must exist: it is not created (datasets create theirs).
        schema: the Arrow schema of every batch written.
        num_subpartitions: how many subpartitions each region is split into.
        memory: bytes or a string such as ``"256MiB"``. Without ``memory_pool`` it is the sort
            buffer's fixed, private budget. With ``memory_pool`` it is the required minimum the
            writer reserves in that pool (default 4 MiB); its budget is that minimum plus an even
            share of the pool's unreserved bytes.
        max_batch_rows: the most rows in one record batch of the data file.
        compression: Arrow IPC body compression, ``"zstd"`` (the default), ``"lz4"`` or
            ``"none"`` (``None`` also means none). Uncompressed files read locally without a
            copy (memory-mapped); compressed ones are smaller on disk and on the wire.
        partitioner: assigns rows to subpartitions when :meth:`write` gets no ids.
        storage_options: passed to fsspec for URLs.
        memory_pool: the pool to take a local pool from. When neither ``memory`` nor
            ``memory_pool`` is given, the writer joins the process-wide default pool
            (:func:`~arrowshuffle.writers.memory_pool.default_memory_pool`) with a 4 MiB minimum.
        overwrite: replace an existing pair at ``path`` (not atomically, see above) instead of
            refusing it.

    Raises:
        InvalidOptionError: a bad option, a required minimum the pool cannot reserve, or a
            data file or index already at ``path`` without ``overwrite``.

    Example:
        >>> with ShuffleFileWriter("part-0.arrow", schema, 8) as w:  # doctest: +SKIP
        ...     w.write(batch, subpartitions=ids)
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        schema: pa.Schema,
        num_subpartitions: int,
        *,
        memory: int | str | None = None,
        max_batch_rows: int = DEFAULT_MAX_BATCH_ROWS,
        compression: str | None = DEFAULT_COMPRESSION,
        partitioner: Partitioner | None = None,
        storage_options: dict[str, Any] | None = None,
        memory_pool: MemoryPool | None = None,
        overwrite: bool = False,
    ) -> None:
        if not isinstance(overwrite, bool):
            raise InvalidOptionError(f"overwrite must be True or False, found {overwrite!r}")
        if isinstance(num_subpartitions, bool) or not isinstance(num_subpartitions, int):
            raise InvalidOptionError(
                f"num_subpartitions must be an integer, found {num_subpartitions!r}"
            )
        if not 1 <= num_subpartitions <= 2**31 - 1:
            raise InvalidOptionError(
                f"num_subpartitions must be between 1 and 2**31-1, found {num_subpartitions}"
            )
        if (
            isinstance(max_batch_rows, bool)
            or not isinstance(max_batch_rows, int)
            or (max_batch_rows < 1)
        ):
            raise InvalidOptionError(
                f"max_batch_rows must be a positive integer, found {max_batch_rows!r}"
            )
        self.schema = check_schema(schema)
        self.num_subpartitions = num_subpartitions
        self.max_batch_rows = max_batch_rows
        # Input is buffered in slices of this many rows: small enough that the buffer overshoots
        # its budget by little, large enough that per-slice work stays negligible even when
        # output batches are tiny.
        self._input_slice_rows = max(max_batch_rows, MIN_INPUT_SLICE_ROWS)
        self.compression = normalize_compression(compression)
        if partitioner is not None and not hasattr(partitioner, "assign"):
            raise InvalidOptionError(
                "partitioner must be a Partitioner (make_partitioner(...)) or None, "
                f"found {type(partitioner).__name__}"
            )
        self._partitioner = partitioner
        self._location: Location = resolve(path, storage_options)
        self._overwrite = overwrite
        if not overwrite:
            refuse_existing(self._location)
        self._file_id = uuid.uuid4().bytes
        self._buffer = SortBuffer(num_subpartitions)
        self._broadcast = SortBuffer(1)
        self._regions: list[tuple[int, int, int]] = []  # (offset, length, flags)
        self._entries: list[np.ndarray] = []  # one (num_subpartitions,) array per region
        self._rows = 0
        self._closed = False
        self._failure: BaseException | None = None
        #: What :meth:`close` published (set once the writer has closed cleanly).
        self.written: WrittenFile | None = None
        self._memory = _local_pool(memory, memory_pool)
        # A writer dropped without close() must still give its reservation back.
        self._memory_finalizer = weakref.finalize(self, self._memory.close)
        try:
            # The sink gathers small writes and passes body buffers whole: no Python buffer.
            self._data = AtomicOutput(self._location, buffered=False)
        except BaseException:
            self._memory.close()
            raise
        try:
            self._file = IpcFileWriter(
                self._data.file, self.schema, {FILE_ID_KEY: self._file_id.hex().encode()}
            )
        except BaseException:
            self._data.discard()
            self._memory.close()
            raise
        self._encoder = BatchEncoder(self.schema, self.compression)
        # Output batches also end where a narrow run-end encoded column would overflow.
        self._fill = run_end_fills(self.schema)

    # ------------------------------------------------------------------ writing

    @property
    def location(self) -> Location:
        """Where the data file is published."""
        return self._location

    @property
    def buffered_bytes(self) -> int:
        """Bytes held in the sort buffer and not yet written."""
        return self._buffer.nbytes + self._broadcast.nbytes

    @property
    def num_regions(self) -> int:
        """Regions emitted so far."""
        return len(self._regions)

    @property
    def local_memory(self) -> LocalMemoryPool:
        """The writer's local memory pool (its budget and what it holds)."""
        return self._memory

    def memory_budget(self) -> int:
        """How many bytes the sort buffer may hold now before it emits a region."""
        return self._memory.budget

    def write(
        self,
        data: pa.RecordBatch | pa.Table,
        subpartitions: Any = None,
    ) -> None:
        """Add rows. ``subpartitions`` gives each row's subpartition (an integer array).

        Without ``subpartitions`` the writer's partitioner assigns them; a broadcast
        partitioner stores the rows once for every subpartition.

        Raises:
            InvalidOptionError: ids of the wrong length or outside ``[0, num_subpartitions)``.
            SchemaMismatchError: data whose schema differs from the writer's.
        """
        self._check_open()
        batches, ids = self._split_input(data, subpartitions)
        offset = 0
        for batch in batches:
            if ids is not None:
                batch_ids = ids[offset : offset + batch.num_rows]
                offset += batch.num_rows
            elif self._partitioner is None:
                raise InvalidOptionError(
                    "write() needs subpartitions=ids when the writer has no partitioner"
                )
            elif self._partitioner.broadcast:
                self._add_broadcast(batch)
                continue
            else:
                batch_ids = self._check_ids(self._partitioner.assign(batch), batch.num_rows)
            self._add(batch, batch_ids)

    def write_broadcast(self, data: pa.RecordBatch | pa.Table) -> None:
        """Add rows that every subpartition receives; they are stored once."""
        self._check_open()
        batches, _ = self._split_input(data, None)
        for batch in batches:
            self._add_broadcast(batch)

    def _add(self, batch: pa.RecordBatch, ids: np.ndarray) -> None:
        if self._broadcast:
            self._emit_broadcast_region()
        self._reserve(batch.nbytes, self._emit_region)
        self._buffer.add(batch, ids)
        self._rows += batch.num_rows

    def _add_broadcast(self, batch: pa.RecordBatch) -> None:
        if self._buffer:
            self._emit_region()
        self._reserve(batch.nbytes, self._emit_broadcast_region)
        self._broadcast.add(batch, np.zeros(batch.num_rows, dtype=np.int64))
        self._rows += batch.num_rows

    def _reserve(self, nbytes: int, emit: Callable[[], None]) -> None:
        """Reserve room for a batch; when the budget or the pool is full, emit a region first.

        A batch is buffered even when an empty buffer cannot reserve it, so a writer exceeds
        its budget by at most one batch and always makes progress.
        """
        if self._memory.try_reserve(nbytes):
            return
        emit()
        if not self._memory.try_reserve(nbytes):
            self._memory.force_reserve(nbytes)

    def _split_input(
        self, data: pa.RecordBatch | pa.Table, subpartitions: Any
    ) -> tuple[list[pa.RecordBatch], np.ndarray | None]:
        if isinstance(data, pa.Table):
            batches = data.to_batches(max_chunksize=self._input_slice_rows)
            num_rows = data.num_rows
        elif isinstance(data, pa.RecordBatch):
            # Zero-copy slices: the buffer grows, and spills, in steps of one slice.
            step = self._input_slice_rows
            batches = [data.slice(start, step) for start in range(0, data.num_rows, step)] or [data]
            num_rows = data.num_rows
        else:
            raise InvalidOptionError(
                f"write() takes a pyarrow RecordBatch or Table, found {type(data).__name__}"
            )
        if not data.schema.equals(self.schema, check_metadata=False):
            raise SchemaMismatchError(
                f"batch schema differs from the writer's schema: expected {self.schema}, "
                f"found {data.schema}"
            )
        ids = None if subpartitions is None else self._check_ids(subpartitions, num_rows)
        return batches, ids

    def _check_ids(self, subpartitions: Any, num_rows: int) -> np.ndarray:
        arrow = isinstance(subpartitions, (pa.Array, pa.ChunkedArray))
        n = self.num_subpartitions
        ids = arrow_ids(subpartitions, n, source=_IDS) if arrow else np.asarray(subpartitions)
        if ids.ndim != 1 or len(ids) != num_rows:
            raise InvalidOptionError(
                f"expected one subpartition id per row ({num_rows}), found shape {ids.shape}"
            )
        if ids.size == 0:
            return np.zeros(0, dtype=np.int64)  # np.asarray([]) is float64: any empty list will do
        # Any integer dtype: the sort buffer narrows it once.
        return ids if arrow else check_ids(ids, n, source=_IDS)

    # ------------------------------------------------------------------ regions

    def flush_region(self) -> None:
        """Emit buffered rows as a region now (the writer also does this when memory is full)."""
        self._check_open()
        self._emit_region()
        self._emit_broadcast_region()

    def _write_chunks(self, batches: Iterator[tuple[int, EncodedBatch]], count: int) -> np.ndarray:
        """Write ``(chunk, batch)`` pairs, chunk by chunk in order; return the ``count`` entries.

        A chunk with no batch (a subpartition without rows) is empty where it would start.
        """
        entries = np.zeros(count, dtype=ENTRY_DTYPE)
        current = rows = batches_in = crc = 0
        start = self._file.position
        for chunk, encoded in batches:
            if chunk != current:
                entries[current] = (start, self._file.position - start, rows, batches_in, crc)
                entries["offset"][current + 1 : chunk] = self._file.position
                current, start, rows, batches_in, crc = chunk, self._file.position, 0, 0, 0
            self._file.write(encoded)
            rows += encoded.rows
            batches_in += 1
            crc = encoded.continue_crc32c(crc)
        entries[current] = (start, self._file.position - start, rows, batches_in, crc)
        entries["offset"][current + 1 :] = self._file.position
        return entries

    @contextlib.contextmanager
    def _aborted_on_error(self) -> Iterator[None]:
        """A region that failed part-way leaves the data file unusable: abort the writer.

        Its rows are lost and the file holds part of a region, so nothing may be published:
        later calls raise, naming the error (close() discards on its own).
        """
        try:
            yield
        except BaseException as exc:
            if not self._closed:
                self._failure = exc
                self.abort()
            raise

    def _emit_region(self) -> None:
        if not self._buffer:
            return
        with self._aborted_on_error():
            self._write_region()

    def _write_region(self) -> None:
        region_start = self._file.position
        # Output batches of the whole region, in file order, planned as they are written: the
        # next one is put together while the current one is written.
        groups = (
            (s, group)
            for s, slices in self._buffer.chunks()
            for group in batch_groups(slices, self.max_batch_rows, self._fill)
        )
        entries = self._write_chunks(
            combine_ahead(groups, self._encoder.encode), self.num_subpartitions
        )
        self._regions.append((region_start, self._file.position - region_start, 0))
        self._entries.append(entries)
        # Only now are the buffered batches dropped: release their bytes to the pool.
        self._memory.release_all()

    def _emit_broadcast_region(self) -> None:
        if not self._broadcast:
            return
        with self._aborted_on_error():
            self._write_broadcast_region()

    def _write_broadcast_region(self) -> None:
        groups = (
            (0, group)
            for _, slices in self._broadcast.chunks()
            for group in batch_groups(slices, self.max_batch_rows, self._fill)
        )
        (chunk,) = self._write_chunks(combine_ahead(groups, self._encoder.encode), 1)
        self._memory.release_all()
        entries = np.zeros(self.num_subpartitions, dtype=ENTRY_DTYPE)
        entries[:] = chunk
        self._regions.append((int(chunk["offset"]), int(chunk["length"]), REGION_BROADCAST))
        self._entries.append(entries)

    # ------------------------------------------------------------------ closing

    def _check_open(self) -> None:
        if self._failure is not None:
            raise InvalidOptionError(
                f"the writer was aborted when writing a region failed ({self._failure!r}); "
                "nothing was published"
            )
        if self._closed:
            raise InvalidOptionError("the writer is closed")

    def close(self) -> WrittenFile:
        """Write what is buffered, the IPC footer and the index; publish data, then index.

        Returns:
            What was published: URLs, sizes, rows, regions and the index checksum.
        """
        self._check_open()
        self._closed = True
        index_out: AtomicOutput | None = None
        try:
            self._emit_region()
            self._emit_broadcast_region()
            # Nothing is buffered any more: the other writers of the pool may have its bytes.
            self._memory.close()
            data_size = self._file.close()
            region_table = np.array(
                [(offset, length, flags, 0) for offset, length, flags in self._regions],
                dtype=REGION_DTYPE,
            )
            entries = (
                np.stack(self._entries, axis=1)
                if self._entries
                else np.zeros((self.num_subpartitions, 0), dtype=ENTRY_DTYPE)
            )
            spec = self._partitioner.spec() if self._partitioner else {"name": "explicit"}
            index_bytes = encode_index(
                schema=self.schema,
                partitioner=spec,
                file_id=self._file_id,
                data_length=data_size,
                regions=region_table,
                entries=entries,
                compression=self.compression,
            )
            index_location = self._location.sibling(INDEX_SUFFIX)
            index_out = AtomicOutput(index_location)
            index_out.file.write(index_bytes)
            # Both files complete on disk first: a process killed between the two renames is
            # the only way to leave a data file without its index.
            self._data.finish()
            index_out.finish()
            if not self._overwrite and self._location.is_local:
                refuse_existing(self._location)  # a pair that appeared while this one was written
            self._data.commit()
            try:
                index_out.commit()
            except BaseException:
                remove_quietly(self._location)
                raise
        except BaseException:
            self._discard(index_out)
            raise
        self.written = WrittenFile(
            data_url=self._location.url,
            index_url=index_location.url,
            data_size=data_size,
            index_size=len(index_bytes),
            rows=self._rows,
            regions=len(self._regions),
            index_crc32c=index_checksum(index_bytes),
            schema=self.schema,
            partitioner=dict(spec),
            subpartition_bytes=tuple(entries["length"].sum(axis=1, dtype=np.uint64).tolist()),
            subpartition_rows=tuple(entries["rows"].sum(axis=1, dtype=np.uint64).tolist()),
        )
        return self.written

    def abort(self) -> None:
        """Drop everything written; nothing stays visible."""
        if self._closed:
            return
        self._closed = True
        self._discard(None)

    def _discard(self, index_out: AtomicOutput | None) -> None:
        self._buffer.clear()
        self._broadcast.clear()
        self._memory.close()
        if index_out is not None:
            index_out.discard()
        self._data.discard()

    def __enter__(self) -> ShuffleFileWriter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is None:
            if not self._closed:
                self.close()
        else:
            self.abort()


def refuse_existing(location: Location) -> None:
    """Refuse to write a pair at ``location`` where its data file or index already exists.

    Raises:
        InvalidOptionError: naming the existing file and how to replace it.
    """
    for place in (location, location.sibling(INDEX_SUFFIX)):
        with storage_errors(place.url, "checking whether a file exists at"):
            if not place.is_local:
                place.fs.invalidate_cache(place.path)
            # A directory there is not a pair: publishing onto it fails as an IO error.
            exists = place.fs.isfile(place.path)
        if exists:
            raise InvalidOptionError(
                f"{place.url} already exists; expected no file there. Pass overwrite=True to "
                "replace the pair (two renames, not atomic: a reader may find the new data "
                "file beside the old index until both are in place), or write a dataset "
                "(write_dataset(..., mode='overwrite')), whose manifest replaces it atomically"
            )


def _local_pool(memory: int | str | None, pool: MemoryPool | None) -> LocalMemoryPool:
    """The writer's budget: a share of ``pool``, a private fixed ``memory``, or the default."""
    if pool is not None:
        return pool.local(DEFAULT_MIN_MEMORY if memory is None else memory)
    if memory is not None:
        budget = parse_bytes(memory, name="memory")
        return MemoryPool(budget, setting="the writer's memory=").local(budget, fixed=True)
    return default_memory_pool().local(DEFAULT_MIN_MEMORY)
