"""Merging one group of files into one: the data-moving half of compaction.

Each output region takes consecutive input regions while their bytes fit the memory budget and
holds, for each subpartition in order, their chunks copied as bytes (CRC32C checked first); the
data file is framed by a header and a footer that pyarrow writes for the same schema, with the
footer's batch Blocks patched to the copied messages (:mod:`arrowshuffle.format.ipc_file`).
See :mod:`arrowshuffle.writers.compact` for planning and committing.
"""

from __future__ import annotations

import array
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import IO, Any

import numpy as np
import pyarrow as pa

from arrowshuffle.format.arrow_types import empty_batch
from arrowshuffle.format.chunks import check_chunk_crc, decode_chunk
from arrowshuffle.format.crc import crc32c
from arrowshuffle.format.errors import (
    CorruptFileError,
    InvalidOptionError,
)
from arrowshuffle.format.index import (
    COMPRESSION_BITS,
    ENTRY_DTYPE,
    FILE_ID_KEY,
    REGION_BROADCAST,
    REGION_DTYPE,
    encode_index,
    index_checksum,
)
from arrowshuffle.format.ipc_file import (
    file_tail,
    patch_footer_blocks,
    split_file_tail,
    walk_messages,
)
from arrowshuffle.format.manifest import ManifestFile
from arrowshuffle.format.manifest_rules import (
    check_file_agrees,
    check_file_counts,
    declared_counts,
    listed_counts,
)
from arrowshuffle.format.naming import INDEX_SUFFIX
from arrowshuffle.format.notation import parse_bytes
from arrowshuffle.format.partitioners import dataset_spec
from arrowshuffle.readers.file_reader import ShuffleFile
from arrowshuffle.readers.proof import check_run
from arrowshuffle.readers.source import ByteSource
from arrowshuffle.readers.storage import Location, member
from arrowshuffle.writers.file_writer import WrittenFile
from arrowshuffle.writers.output import AtomicOutput, remove_quietly

#: Bytes of input regions a merge holds at once, by default.
DEFAULT_MEMORY = "256MiB"
#: Input files opened (and, on object stores, fetched) at the same time.
IO_WORKERS = 16

#: Called with one line of progress ("wrote region 3 of part-…", "committed manifest", …).
Progress = Callable[[str], None]


@dataclass(frozen=True)
class CompactionGroup:
    """Consecutive files of a manifest that compaction merges into one file.

    Attributes:
        index: the group's number, in manifest order.
        files: positions of the group's files in the manifest.
        data_bytes: their data bytes added up.
        rows: their stored rows added up.
    """

    index: int
    files: tuple[int, ...]
    data_bytes: int
    rows: int

    @property
    def merged(self) -> bool:
        """True when the group has several files (a group of one is kept as it is)."""
        return len(self.files) > 1

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serializable description."""
        return {
            "group": self.index,
            "files": list(self.files),
            "data_bytes": self.data_bytes,
            "rows": self.rows,
            "merged": self.merged,
        }


@dataclass
class _Input:
    """One input file of a group: its reader, entries (N, R) and region table."""

    file: ShuffleFile
    entries: np.ndarray
    regions: np.ndarray
    source: ByteSource | None = None


@dataclass(frozen=True)
class _RegionRef:
    file: int
    region: int
    offset: int
    length: int


class _TailSink:
    """A write-only stream that keeps a file's first ``head`` bytes and, once asked, the rest.

    Used for the throwaway file whose header and footer a merged file takes: the batches in
    between are dropped as they are written, so memory stays at the footer's size.
    """

    def __init__(self, head: int) -> None:
        self._head = head
        self.position = 0
        self.head = bytearray()
        self.tail = bytearray()
        self.capture = False
        self.closed = False

    def write(self, data: Any) -> int:
        view = memoryview(data).cast("B")
        if len(self.head) < self._head:
            self.head += view[: self._head - len(self.head)]
        if self.capture:
            self.tail += view
        self.position += len(view)
        return len(view)

    def tell(self) -> int:
        return self.position

    def writable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return False

    def readable(self) -> bool:
        return False

    def flush(self) -> None:
        return None

    def close(self) -> None:
        self.closed = True


def ipc_file_frame(
    schema: pa.Schema, metadata: dict[bytes, bytes], batches: int
) -> tuple[bytes, bytes]:
    """The header and footer pyarrow writes for an IPC file of ``batches`` record batches.

    Returns:
        ``(header, footer)``: the magic, padding and schema message that start the file, and
        the footer flatbuffer (its record-batch Blocks still those of zero-row batches).
    """
    sink = _TailSink(8 + schema.serialize().size)
    empty = empty_batch(schema)
    writer = pa.ipc.new_file(pa.PythonFile(sink, mode="w"), schema, metadata=metadata)
    for _ in range(batches):
        writer.write_batch(empty)
    # Only the end matters from here: end-of-stream marker, footer, its length, the magic
    # (with no batch, the header too is written now, and the tail is the whole file).
    sink.capture = True
    writer.close()
    footer, _ = split_file_tail(bytes(sink.tail))
    return bytes(sink.head), footer


def _open_inputs(
    directory: Location,
    files: Sequence[ManifestFile],
    num_subpartitions: int,
    partitioner: dict[str, Any],
) -> list[_Input]:
    def one(entry: ManifestFile) -> _Input:
        member(directory, entry.index)  # a link out of the directory is refused, as a read does
        shuffle_file = ShuffleFile(
            member(directory, entry.data), data_size=entry.data_size, index_size=entry.index_size
        )
        url = shuffle_file.url
        found = check_file_counts(url, listed_counts(entry), declared_counts(shuffle_file.header))
        if found:
            raise found[0].error()
        entries = shuffle_file.entries()
        # The whole layout is proven (V8-V11) before a byte is copied, as a read proves it.
        check_run(
            entries,
            shuffle_file.meta.regions,
            range(shuffle_file.num_subpartitions),
            shuffle_file.num_subpartitions,
            shuffle_file.header.data_length,
            url,
        )
        return _Input(shuffle_file, entries, shuffle_file.meta.regions)

    if directory.is_local or len(files) < 2:
        return [one(f) for f in files]
    with ThreadPoolExecutor(min(IO_WORKERS, len(files))) as pool:
        return list(pool.map(one, files))


def _pack(refs: list[_RegionRef], memory: int) -> list[list[_RegionRef]]:
    """Consecutive input regions per output region, their bytes within ``memory``."""
    out: list[list[_RegionRef]] = []
    size = 0
    for ref in refs:
        if out and size + ref.length <= memory:
            out[-1].append(ref)
            size += ref.length
        else:
            out.append([ref])
            size = ref.length
    return out


def _majority_codec(inputs: list[_Input]) -> str:
    """The codec of most of the inputs' bytes: the index flag is informational (rule 8)."""
    weight: dict[str, int] = {}
    for item in inputs:
        codec = item.file.compression
        if codec in COMPRESSION_BITS:
            weight[codec] = weight.get(codec, 0) + item.file.header.data_length
    return max(weight, key=lambda c: weight[c]) if weight else "none"


class _GroupWriter:
    """Writes one merged data file: header, copied chunks, patched footer; then its index."""

    def __init__(
        self,
        out: IO[bytes],
        header: bytes,
        schema: pa.Schema,
        num_subpartitions: int,
        url: str,
    ) -> None:
        self._out = out
        self.schema = schema
        self.url = url
        self.position = 0
        self.blocks = array.array("q")
        self.regions: list[tuple[int, int, int, int]] = []
        self.entries: list[np.ndarray] = []
        self.num_subpartitions = num_subpartitions
        self.bytes_read = 0
        self._write(header)

    def _write(self, data: Any) -> None:
        self._out.write(data)
        self.position += memoryview(data).nbytes

    def copy_chunk(
        self, data: pa.Buffer, batches: int, rows: int, crc: int, where: Callable[[], str]
    ) -> None:
        """Append one input chunk after checking its bytes against the CRC32C of its entry."""
        damaged = check_chunk_crc(data, crc, where)
        if damaged is not None:
            raise damaged.error("the input is damaged, nothing was replaced")
        try:
            messages = walk_messages(data, batches)
        except CorruptFileError:
            # Bytes that are not the declared messages break V17: its one check names how
            # (decoding only on this path keeps the copy free of per-batch decoding).
            decode_chunk(data, self.schema, batches, rows, where(), full=False)
            raise
        position = self.position
        for offset, meta, body in messages:
            self.blocks.extend((position + offset, meta, body))
        self._write(data)

    def add_region(self, entries: np.ndarray, start: int, broadcast: bool) -> None:
        self.regions.append((start, self.position - start, REGION_BROADCAST if broadcast else 0, 0))
        self.entries.append(entries)


def merge_group(
    directory: Location,
    files: Sequence[ManifestFile],
    *,
    name: str,
    num_subpartitions: int,
    partitioner: dict[str, Any],
    memory: int | str = DEFAULT_MEMORY,
    progress: Progress | None = None,
) -> tuple[WrittenFile, int]:
    """Merge ``files`` (consecutive files of a dataset) into one new file ``name``.

    The new pair is published under its final name (data first, then index) but is not part
    of the dataset until a manifest lists it.

    Args:
        directory: the dataset directory.
        files: the manifest entries of the inputs, in manifest order.
        name: the new data file's name inside ``directory``.
        num_subpartitions: the dataset's subpartition count.
        partitioner: the dataset's partitioner spec (every input must carry it, rule M6); the
            new file carries it without per-producer fields.
        memory: bytes of input regions held at once (see the module documentation).
        progress: called with a line after each output region and at publication.

    Returns:
        What was published, and the data bytes read from the inputs.

    Raises:
        CorruptFileError: an input contradicts the manifest or its own index.
        ChecksumMismatchError: an input chunk's bytes do not match their CRC32C.
    """
    budget = parse_bytes(memory, name="memory")
    # The merged file may hold several producers' rows: it names none of them.
    partitioner = dataset_spec(partitioner)
    inputs = _open_inputs(directory, files, num_subpartitions, partitioner)
    schema = inputs[0].file.schema if inputs else None
    if schema is None:
        raise InvalidOptionError("a compaction group needs at least one file")
    for item in inputs:
        # The first input's schema stands for the manifest's (readers check that one).
        found = check_file_agrees(
            item.file.url,
            (schema, num_subpartitions, partitioner),
            (item.file.schema, item.file.num_subpartitions, item.file.partitioner),
        )
        if found:
            raise found[0].error()
    regular: list[_RegionRef] = []
    broadcast: list[_RegionRef] = []
    batches = 0
    for f, item in enumerate(inputs):
        for r, region in enumerate(item.regions):
            ref = _RegionRef(f, r, int(region["offset"]), int(region["length"]))
            if int(region["flags"]) & REGION_BROADCAST:
                broadcast.append(ref)
                batches += int(item.entries[0, r]["batches"]) if num_subpartitions else 0
            else:
                regular.append(ref)
                batches += int(item.entries[:, r]["batches"].sum())
    file_id = uuid.uuid4().bytes
    metadata = {FILE_ID_KEY: file_id.hex().encode()}
    header, footer = ipc_file_frame(schema, metadata, batches)
    location = directory.child(name)
    data_out = AtomicOutput(location)
    index_out: AtomicOutput | None = None
    try:
        writer = _GroupWriter(data_out.file, header, schema, num_subpartitions, location.url)
        packed = _pack(regular, budget)
        packed_broadcast = _pack(broadcast, budget)
        total = len(packed) + len(packed_broadcast)
        for done, refs in enumerate(packed, start=1):
            _merge_regular(writer, inputs, refs, budget)
            if progress is not None:
                progress(f"{name}: wrote region {done} of {total}")
        for done, refs in enumerate(packed_broadcast, start=len(packed) + 1):
            _merge_broadcast(writer, inputs, refs)
            if progress is not None:
                progress(f"{name}: wrote region {done} of {total}")
        if len(writer.blocks) != 3 * batches:  # cannot happen once V11 and V17 hold
            raise CorruptFileError(
                f"{location.url}: the inputs' indexes declare {batches} batches, their chunks "
                f"hold {len(writer.blocks) // 3}"
            )
        blocks = np.frombuffer(writer.blocks, dtype=np.int64).reshape(-1, 3)
        data_out.file.write(file_tail(patch_footer_blocks(footer, blocks)))
        data_size = writer.position + len(file_tail(footer))
        entries = (
            np.stack(writer.entries, axis=1)
            if writer.entries
            else np.zeros((num_subpartitions, 0), dtype=ENTRY_DTYPE)
        )
        index_bytes = encode_index(
            schema=schema,
            partitioner=dict(partitioner),
            file_id=file_id,
            data_length=data_size,
            regions=np.array(writer.regions, dtype=REGION_DTYPE),
            entries=entries,
            compression=_majority_codec(inputs),
        )
        index_location = location.sibling(INDEX_SUFFIX)
        index_out = AtomicOutput(index_location)
        index_out.file.write(index_bytes)
        data_out.finish()
        index_out.finish()
        data_out.commit()
        try:
            index_out.commit()
        except BaseException:
            remove_quietly(location)
            raise
    except BaseException:
        if index_out is not None:
            index_out.discard()
        data_out.discard()
        raise
    finally:
        for item in inputs:
            item.file.close()
    if progress is not None:
        progress(f"{name}: published")
    written = WrittenFile(
        data_url=location.url,
        index_url=index_location.url,
        data_size=data_size,
        index_size=len(index_bytes),
        rows=sum(f.rows for f in files),
        regions=len(writer.regions),
        index_crc32c=index_checksum(index_bytes),
        schema=schema,
        partitioner=dict(partitioner),
        subpartition_bytes=tuple(entries["length"].sum(axis=1, dtype=np.uint64).tolist()),
        subpartition_rows=tuple(entries["rows"].sum(axis=1, dtype=np.uint64).tolist()),
    )
    return written, writer.bytes_read


def _source(item: _Input) -> ByteSource:
    if item.source is None:
        item.file.check_coverage()  # no region's bytes may be left behind (V21)
        item.source = item.file.data_source()
    return item.source


def _fetch(inputs: list[_Input], wanted: list[tuple[int, int, int]]) -> list[pa.Buffer]:
    """Fetch ``(file, start, end)`` ranges: per file in one call, files concurrently."""
    by_file: dict[int, list[int]] = {}
    for i, (f, _, _) in enumerate(wanted):
        by_file.setdefault(f, []).append(i)
    out: list[pa.Buffer | None] = [None] * len(wanted)

    def one(f: int) -> None:
        ranges = [(wanted[i][1], wanted[i][2]) for i in by_file[f]]
        for i, buffer in zip(by_file[f], _source(inputs[f]).read_ranges(ranges), strict=True):
            out[i] = buffer

    remote = any(_source(inputs[f]).concurrent for f in by_file)
    if remote and len(by_file) > 1:
        with ThreadPoolExecutor(min(IO_WORKERS, len(by_file))) as pool:
            list(pool.map(one, by_file))
    else:
        for f in by_file:
            one(f)
    return [b for b in out if b is not None]


def _merge_regular(
    writer: _GroupWriter, inputs: list[_Input], refs: list[_RegionRef], budget: int
) -> None:
    """One output region: for every subpartition, its chunks from every input region."""
    start = writer.position
    columns = [inputs[r.file].entries[:, r.region] for r in refs]
    entries = np.zeros(writer.num_subpartitions, dtype=ENTRY_DTYPE)
    for name in ("length", "rows", "batches"):
        entries[name] = np.sum([c[name] for c in columns], axis=0, dtype=np.uint64)
    crcs = np.zeros(writer.num_subpartitions, dtype=np.uint32)
    pieces: Iterable[tuple[int, int, list[tuple[int, pa.Buffer]]]]
    if len(refs) == 1 and refs[0].length > budget:
        pieces = _large_region_pieces(writer, inputs[refs[0].file], refs[0], budget)
    else:
        buffers = _fetch(inputs, [(r.file, r.offset, r.offset + r.length) for r in refs])
        writer.bytes_read += sum(b.size for b in buffers)
        based = [(r.offset, b) for r, b in zip(refs, buffers, strict=True)]
        pieces = [(0, writer.num_subpartitions, based)]
    # Plain lists: per-chunk numpy scalar access would dominate the copy of small chunks.
    lists = [
        (
            c["offset"].tolist(),
            c["length"].tolist(),
            c["batches"].tolist(),
            c["rows"].tolist(),
            c["crc32c"].tolist(),
        )
        for c in columns
    ]
    for first, stop, based in pieces:
        for s in (first + np.flatnonzero(entries["length"][first:stop])).tolist():
            crc = 0
            for j, (offsets, lengths, batches, rows, checks) in enumerate(lists):
                length = lengths[s]
                if length == 0:
                    continue
                base, buffer = based[j]
                piece = buffer.slice(offsets[s] - base, length)
                where = _where(inputs, refs[j], s)
                writer.copy_chunk(piece, batches[s], rows[s], checks[s], where)
                crc = crc32c(piece, crc)
            crcs[s] = crc
    _place(entries, start, crcs)
    if start + int(entries["length"].sum()) != writer.position:
        # Cannot happen once the inputs' layouts are proven (V9): every chunk is copied whole.
        raise CorruptFileError(f"{writer.url}: merged chunks do not fill their region")
    writer.add_region(entries, start, broadcast=False)


def _where(inputs: list[_Input], ref: _RegionRef, s: int) -> Callable[[], str]:
    """Names a chunk in an error message (built only when one is raised)."""
    return lambda: f"{inputs[ref.file].file.url} region {ref.region} subpartition {s}"


def _large_region_pieces(
    writer: _GroupWriter, item: _Input, ref: _RegionRef, budget: int
) -> Iterator[tuple[int, int, list[tuple[int, pa.Buffer]]]]:
    """A region larger than the budget: runs of its chunks, each run's bytes within the budget.

    Yields ``(first, stop, [(file offset, bytes)])`` per run of subpartitions
    ``[first, stop)``; a single chunk larger than the budget is a run of its own.
    """
    lengths = item.entries[:, ref.region]["length"].tolist()
    offsets = item.entries[:, ref.region]["offset"].tolist()
    n = len(lengths)
    s = 0
    while s < n:
        stop, size = s + 1, lengths[s]
        while stop < n and size + lengths[stop] <= budget:
            size += lengths[stop]
            stop += 1
        begin = offsets[s]
        (data,) = _source(item).read_ranges([(begin, begin + size)])
        writer.bytes_read += size
        yield s, stop, [(begin, data)]
        s = stop


def _place(entries: np.ndarray, start: int, crcs: np.ndarray) -> None:
    """Chunk offsets of a region from its start (chunks are contiguous) and their CRC32Cs."""
    lengths = entries["length"].astype(np.int64)
    entries["offset"] = start + np.concatenate(([0], np.cumsum(lengths)[:-1])).astype(np.int64)
    entries["crc32c"] = crcs


def _merge_broadcast(writer: _GroupWriter, inputs: list[_Input], refs: list[_RegionRef]) -> None:
    """One broadcast output region: the input broadcast chunks, one after another."""
    start = writer.position
    buffers = _fetch(inputs, [(r.file, r.offset, r.offset + r.length) for r in refs])
    writer.bytes_read += sum(b.size for b in buffers)
    crc = rows = batches = 0
    for ref, buffer in zip(refs, buffers, strict=True):
        entry = inputs[ref.file].entries[0, ref.region]
        if int(entry["length"]) == 0:
            continue
        where = _where(inputs, ref, 0)
        writer.copy_chunk(
            buffer, int(entry["batches"]), int(entry["rows"]), int(entry["crc32c"]), where
        )
        crc = crc32c(buffer, crc)
        rows += int(entry["rows"])
        batches += int(entry["batches"])
    entries = np.zeros(writer.num_subpartitions, dtype=ENTRY_DTYPE)
    entries[:] = (start, writer.position - start, rows, batches, crc)
    writer.add_region(entries, start, broadcast=True)
