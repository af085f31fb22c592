"""The shuffle file reader: open a data/index pair and hop regions to read subpartitions."""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from arrowshuffle._storage import INDEX_SUFFIX, Location, resolve
from arrowshuffle.format.errors import CorruptFileError, InvalidOptionError
from arrowshuffle.format.index import (
    ENTRY_DTYPE,
    ShuffleIndex,
    decode_entries,
    decode_header,
    decode_index,
    decode_meta,
)
from arrowshuffle.readers.decode import decode_range, repeat, verify_chunks
from arrowshuffle.readers.plan import (
    DEFAULT_MAX_BLOCK,
    DEFAULT_MAX_GAP,
    ChunkRange,
    FetchBlock,
    Subpartitions,
    coalesce,
    dedupe_broadcast,
    plan_run,
    subpartition_runs,
)
from arrowshuffle.readers.source import ByteSource, MappedSource, open_source

#: The first request for a remote index fetches this many bytes: header, metadata and often
#: the entries too, so that most opens cost one request and the rest two.
INDEX_PREFIX_BYTES = 64 * 1024
#: Bytes of data a reader fetches ahead of the batches it hands out.
DEFAULT_MAX_IN_FLIGHT = 64 * 1024 * 1024


class ShuffleFile:
    """One shuffle file (data + index), opened for reading.

    Use :func:`arrowshuffle.open_file` to create one. Local files are memory-mapped; URLs are
    read with ranged requests: the index costs one or two, and a read costs one per region for
    each contiguous run of subpartitions (fewer when neighbouring ranges are merged).
    """

    def __init__(
        self,
        location: Location,
        *,
        data_size: int | None = None,
        index_size: int | None = None,
    ) -> None:
        self.location = location
        self.index_location = location.sibling(INDEX_SUFFIX)
        self._index_source = open_source(self.index_location, index_size)
        self._data_source: ByteSource | None = None
        self._data_size = data_size
        self._entries: dict[int, np.ndarray] = {}
        prefix_end = self._index_source.size
        if not isinstance(self._index_source, MappedSource):
            prefix_end = min(prefix_end, INDEX_PREFIX_BYTES)
        (prefix,) = self._index_source.read_ranges([(0, prefix_end)])
        self._index_prefix = prefix
        if isinstance(self._index_source, MappedSource):
            self._index: ShuffleIndex | None = decode_index(memoryview(prefix))
            self.header = self._index.header
            self.meta = self._index.meta
            for s in range(self.header.num_subpartitions):
                self._entries[s] = self._index.entries[s]
        else:
            self._index = None
            self.header = decode_header(memoryview(prefix), object_size=self._index_source.size)
            meta_end = self.header.layout.entries_offset
            if meta_end > len(prefix):
                (rest,) = self._index_source.read_ranges([(len(prefix), meta_end)])
                self._index_prefix = pa.py_buffer(prefix.to_pybytes() + rest.to_pybytes())
            self.meta = decode_meta(self.header, memoryview(self._index_prefix))
        if self._data_size is not None and self._data_size != self.header.data_length:
            raise CorruptFileError(
                f"{location.url}: the index declares a data file of {self.header.data_length} "
                f"bytes, found {self._data_size}",
                rule="V13",
            )

    # ---------------------------------------------------------------- metadata

    @property
    def url(self) -> str:
        """The data file's path or URL."""
        return self.location.url

    @property
    def schema(self) -> pa.Schema:
        """The Arrow schema of every batch in the file."""
        return self.meta.schema

    @property
    def num_regions(self) -> int:
        """Number of regions (sort-buffer spills) in the file."""
        return self.header.num_regions

    @property
    def num_subpartitions(self) -> int:
        """Number of subpartitions of every region."""
        return self.header.num_subpartitions

    @property
    def num_rows(self) -> int:
        """Rows stored in the file (a broadcast chunk counts once)."""
        return self.header.total_rows

    @property
    def partitioner(self) -> dict[str, Any]:
        """The partitioner spec stored in the index."""
        return dict(self.meta.partitioner)

    @property
    def compression(self) -> str:
        """The body compression of the file's batches."""
        return self.header.compression

    def entries(self, start: int = 0, stop: int | None = None) -> np.ndarray:
        """The index entries of subpartitions ``[start, stop)``, shape ``(stop-start, R)``.

        Remote indexes are fetched slice by slice: only missing subpartitions are requested,
        in one ranged read, and kept for later calls.
        """
        stop = self.num_subpartitions if stop is None else stop
        missing = [s for s in range(start, stop) if s not in self._entries]
        if missing:
            self._fetch_entries(missing[0], missing[-1] + 1)
        rows = [self._entries[s] for s in range(start, stop)]
        if not rows:
            return np.zeros((0, self.num_regions), dtype=ENTRY_DTYPE)
        return np.stack(rows)

    def _fetch_entries(self, start: int, stop: int) -> None:
        begin, end = self.header.layout.entry_range(self.num_regions, start, stop)
        if end <= self._index_prefix.size:
            data = self._index_prefix.slice(begin, end - begin)
        else:
            # One request: whatever of the slice the prefix does not already hold.
            fetch_from = max(begin, self._index_prefix.size)
            (tail,) = self._index_source.read_ranges([(fetch_from, end)])
            head = self._index_prefix.slice(begin, fetch_from - begin).to_pybytes()
            data = pa.py_buffer(head + tail.to_pybytes()) if head else tail
        block = decode_entries(self.header, self.meta, memoryview(data), start, stop)
        for i, s in enumerate(range(start, stop)):
            self._entries[s] = block[i]

    def stats(self) -> pa.Table:
        """One row per (region, subpartition): offset, bytes, rows, batches, broadcast."""
        entries = self.entries()
        n, r = entries.shape
        broadcast = (self.meta.regions["flags"] & 1) != 0
        return pa.table(
            {
                "region": np.tile(np.arange(r, dtype=np.int64), n),
                "subpartition": np.repeat(np.arange(n, dtype=np.int64), r),
                "offset": entries["offset"].reshape(-1).astype(np.int64),
                "bytes": entries["length"].reshape(-1).astype(np.int64),
                "rows": entries["rows"].reshape(-1).astype(np.int64),
                "batches": entries["batches"].reshape(-1).astype(np.int64),
                "broadcast": np.tile(broadcast, n),
            }
        )

    # ---------------------------------------------------------------- reading

    def plan(self, subpartitions: Subpartitions | None = None) -> list[ChunkRange]:
        """The chunk ranges a read of ``subpartitions`` fetches, in file order."""
        selection = range(self.num_subpartitions) if subpartitions is None else subpartitions
        broadcast = (self.meta.regions["flags"] & 1) != 0
        ranges: list[ChunkRange] = []
        for run in subpartition_runs(selection, self.num_subpartitions):
            ranges.extend(plan_run(self.entries(run.start, run.stop), broadcast, run))
        ranges.sort(key=lambda c: (c.offset, c.start))
        return dedupe_broadcast(ranges)

    def _data(self) -> ByteSource:
        if self._data_source is None:
            source = open_source(self.location, self._data_size)
            if source.size != self.header.data_length:
                raise CorruptFileError(
                    f"{self.url}: the index declares a data file of {self.header.data_length} "
                    f"bytes, found {source.size}",
                    rule="V13",
                )
            self._data_source = source
        return self._data_source

    def iter_batches(
        self,
        subpartitions: Subpartitions | None = None,
        *,
        columns: Sequence[str] | None = None,
        verify: bool = False,
        max_gap: int = DEFAULT_MAX_GAP,
        max_block: int = DEFAULT_MAX_BLOCK,
        max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
    ) -> Iterator[pa.RecordBatch]:
        """Yield the record batches of ``subpartitions`` (all by default), in file order.

        For one subpartition that is write order. A run of subpartitions yields, region by
        region, each subpartition's rows in ascending subpartition order; a broadcast chunk is
        fetched once and yielded once per requested subpartition.

        Args:
            subpartitions: an int, a range, or an iterable of ints (duplicates dropped).
            columns: names of the columns to return, in that order.
            verify: check every chunk's CRC32C before decoding it.
            max_gap: merge byte ranges whose gap is at most this many bytes.
            max_block: the largest merged read.
            max_in_flight: the most bytes fetched ahead of what has been yielded.
        """
        select = self._projection(columns)
        blocks = coalesce(self.plan(subpartitions), max_gap=max_gap, max_block=max_block)
        source = self._data() if blocks else None
        for wave in _waves(blocks, max_in_flight):
            assert source is not None
            buffers = source.read_ranges([(b.offset, b.end) for b in wave])
            for block, buffer in zip(wave, buffers, strict=True):
                for cr in block.ranges:
                    if verify:
                        verify_chunks(buffer, block.offset, cr, self.url)
                    piece = buffer.slice(cr.offset - block.offset, cr.length)
                    batches = decode_range(piece, cr, self.schema, self.url)
                    if select is not None:
                        batches = [b.select(select) for b in batches]
                    yield from repeat(batches, cr.repeat)

    def read(
        self,
        subpartitions: Subpartitions | None = None,
        *,
        columns: Sequence[str] | None = None,
        verify: bool = False,
    ) -> pa.Table:
        """Read ``subpartitions`` (all by default) into one table; see :meth:`iter_batches`."""
        schema = self.schema if columns is None else _select_schema(self.schema, columns)
        return pa.Table.from_batches(
            list(self.iter_batches(subpartitions, columns=columns, verify=verify)),
            schema=schema,
        )

    def _projection(self, columns: Sequence[str] | None) -> list[str] | None:
        if columns is None:
            return None
        _select_schema(self.schema, columns)
        return list(columns)

    def close(self) -> None:
        """Release the memory maps and cached index entries."""
        self._data_source = None
        self._entries.clear()

    def __enter__(self) -> ShuffleFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"ShuffleFile({self.url!r}, regions={self.num_regions}, "
            f"subpartitions={self.num_subpartitions}, rows={self.num_rows})"
        )


def _select_schema(schema: pa.Schema, columns: Sequence[str]) -> pa.Schema:
    if isinstance(columns, str):
        raise InvalidOptionError(f"columns must be a list of names, found the string {columns!r}")
    missing = [c for c in columns if c not in schema.names]
    if missing:
        raise InvalidOptionError(
            f"no column {missing[0]!r} in the file; its columns are {schema.names}"
        )
    return pa.schema([schema.field(c) for c in columns], metadata=schema.metadata)


def _waves(blocks: list[FetchBlock], max_in_flight: int) -> Iterator[list[FetchBlock]]:
    """Group blocks into waves of at most ``max_in_flight`` bytes (at least one block each)."""
    wave: list[FetchBlock] = []
    size = 0
    for block in blocks:
        length = block.end - block.offset
        if wave and size + length > max_in_flight:
            yield wave
            wave, size = [], 0
        wave.append(block)
        size += length
    if wave:
        yield wave


def open_file(
    path: str | os.PathLike[str],
    storage_options: dict[str, Any] | None = None,
) -> ShuffleFile:
    """Open one shuffle file: ``path`` is the data file, its index sits beside it.

    Args:
        path: local path or fsspec URL of the ``.arrow`` data file.
        storage_options: passed to fsspec (credentials, endpoint, ...).

    Raises:
        MissingObjectError: the data file or its index does not exist.
        FormatError: the index breaks a rule of the format (the message names it).
    """
    return ShuffleFile(resolve(path, storage_options))
