"""Merging one group of files into one: the data-moving half of compaction.

Each output region takes consecutive input regions while their bytes fit the memory budget and
holds, for each subpartition in order, that subpartition's chunks of those regions (CRC32C
checked first): copied as bytes, or, when they hold many small batches, decoded and re-encoded
as fewer, larger batches (*re-batching*, see :func:`merge_files`). The data file is written
message by message, as the shuffle writer's (:mod:`arrowshuffle.writers.ipc_output`).
See :mod:`arrowshuffle.writers.compact` for planning and committing.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import IO, Any, Literal, NamedTuple

import numpy as np
import pyarrow as pa

from arrowshuffle.format.arrow_types import concat_batches, run_end_fills
from arrowshuffle.format.chunks import check_chunk_crc, decode_chunk, decodes_on_threads
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
    walk_messages,
)
from arrowshuffle.format.ipc_stream import BatchStream
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
from arrowshuffle.writers.file_writer import DEFAULT_MAX_BATCH_ROWS, WrittenFile
from arrowshuffle.writers.ipc_output import BatchEncoder, IpcFileWriter
from arrowshuffle.writers.output import AtomicOutput, remove_quietly

#: Bytes of input regions a merge holds at once, by default.
DEFAULT_MEMORY = "256MiB"
#: Input files opened (and, on object stores, fetched) at the same time.
IO_WORKERS = 16

#: Rows of one re-encoded batch at most, by default (the writer's ``max_batch_rows``).
DEFAULT_BATCH_ROWS = DEFAULT_MAX_BATCH_ROWS
#: ``rebatch="auto"`` re-encodes a subpartition's chunks when their batches average fewer
#: bytes than this: below it, per-batch message metadata and per-buffer compression framing
#: are a sizeable share of the bytes a consumer reads; above it, copying bytes is cheaper.
AUTO_REBATCH_BYTES = 64 * 1024

#: When a merge re-encodes small batches: ``"auto"``, always (True) or never (False).
Rebatch = Literal["auto"] | bool

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


def check_rebatch(rebatch: object, batch_rows: object) -> tuple[Rebatch, int]:
    """Check the re-batching options of a merge.

    Raises:
        InvalidOptionError: ``rebatch`` is not ``"auto"``, True or False, or ``batch_rows`` is
            not a positive integer.
    """
    if not (rebatch == "auto" or isinstance(rebatch, bool)):
        raise InvalidOptionError(f"rebatch must be 'auto', True or False, found {rebatch!r}")
    if isinstance(batch_rows, bool) or not isinstance(batch_rows, int) or batch_rows < 1:
        raise InvalidOptionError(f"batch_rows must be a positive integer, found {batch_rows!r}")
    return ("auto" if isinstance(rebatch, str) else rebatch), batch_rows


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


class _Piece(NamedTuple):
    """One input chunk of a run: its bytes and what its entry declares of them."""

    data: pa.Buffer
    batches: int
    rows: int
    crc: int
    where: Callable[[], str]


class _GroupWriter:
    """Writes one merged data file: header, chunks (copied or re-encoded), patched footer."""

    def __init__(
        self,
        out: IO[bytes],
        metadata: dict[bytes, bytes],
        schema: pa.Schema,
        num_subpartitions: int,
        url: str,
        *,
        rebatch: Rebatch = False,
        batch_rows: int = DEFAULT_BATCH_ROWS,
        codec: str = "none",
    ) -> None:
        self.file = IpcFileWriter(out, schema, metadata)
        self.schema = schema
        self.url = url
        self.regions: list[tuple[int, int, int, int]] = []
        self.entries: list[np.ndarray] = []
        self.num_subpartitions = num_subpartitions
        self.bytes_read = 0
        self.rebatch = rebatch
        self.batch_rows = batch_rows
        self.codec = codec
        self._encoder = BatchEncoder(schema, codec)
        self._fill = run_end_fills(schema)
        self._schema_message: pa.Buffer | None = None

    @property
    def position(self) -> int:
        """Bytes of the data file written so far."""
        return self.file.position

    def write_run(self, pieces: Sequence[_Piece]) -> tuple[int, int, int]:
        """Append one subpartition's chunks of an output region, in order.

        Every chunk's bytes are checked against the CRC32C of its entry first. They are copied
        as they are, or re-encoded as fewer batches when :meth:`_rebatches` says so.

        Returns:
            ``(length, batches, crc32c)`` of the bytes written.
        """
        for piece in pieces:
            damaged = check_chunk_crc(piece.data, piece.crc, piece.where)
            if damaged is not None:
                raise damaged.error("the input is damaged, nothing was replaced")
        start = self.position
        if self._rebatches(pieces):
            batches = self._decode(pieces)
            fills = None if self._fill is None else [self._fill(b) for b in batches]
            groups = group_batches([b.num_rows for b in batches], self.batch_rows, fills)
            if len(groups) < len(batches):
                crc = 0
                for first, stop in groups:
                    crc = self._encode(batches[first:stop], crc)
                return self.position - start, len(groups), crc
        crc = total = 0
        for piece in pieces:
            self._copy(piece)
            crc = crc32c(piece.data, crc)
            total += piece.batches
        return self.position - start, total, crc

    def _rebatches(self, pieces: Sequence[_Piece]) -> bool:
        """Re-encode a run: it may become fewer batches, and (auto) its batches are small."""
        if self.rebatch is False:
            return False
        batches = sum(p.batches for p in pieces)
        rows = sum(p.rows for p in pieces)
        if batches <= max(1, -(-rows // self.batch_rows)):
            return False  # as few batches as the target allows already
        if self.rebatch is True:
            return True
        size: int = sum(p.data.size for p in pieces)
        return size < AUTO_REBATCH_BYTES * batches

    def _decode(self, pieces: Sequence[_Piece]) -> list[pa.RecordBatch]:
        """The run's batches, every chunk holding the batches and rows its entry declares.

        The chunks are decoded as one stream (their schema's message, then their messages,
        not copied): one call into Arrow for the run rather than two per batch, on Arrow's
        threads only when its batches are large. Only when that fails or the counts disagree
        is each chunk decoded alone, for the message naming how (V17).
        """
        if self._schema_message is None:
            self._schema_message = self.schema.serialize()
        size = sum(p.data.size for p in pieces)
        mean_body = size / max(1, sum(p.batches for p in pieces))
        batches: list[pa.RecordBatch] | None = None
        # On failure, each chunk alone says what is wrong (below).
        with contextlib.suppress(pa.ArrowException, OSError, EOFError):
            stream = BatchStream(
                self._schema_message,
                [p.data for p in pieces],
                use_threads=decodes_on_threads(self.codec, mean_body),
            )
            decoded: list[pa.RecordBatch] = []
            end = 0
            for p in pieces:
                # Each chunk's declared batches must end with its bytes: otherwise a batch
                # boundary moved between chunks, or bytes trail a chunk's batches.
                end += p.data.size
                decoded.extend(stream.batches(p.batches, end))
            batches = decoded
        counts = np.array([p.batches for p in pieces], dtype=np.int64)
        if batches is not None and len(batches) == counts.sum() and (counts > 0).all():
            rows = np.array([b.num_rows for b in batches], dtype=np.int64)
            starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
            declared = np.array([p.rows for p in pieces], dtype=np.int64)
            if np.array_equal(np.add.reduceat(rows, starts), declared):
                return batches
        for p in pieces:
            decode_chunk(p.data, self.schema, p.batches, p.rows, p.where(), full=False)
        raise CorruptFileError(  # cannot happen once each chunk decodes as declared
            f"{self.url}: merged chunks of {pieces[0].where()} do not decode as one run"
        )

    def _copy(self, piece: _Piece) -> None:
        try:
            messages = walk_messages(piece.data, piece.batches)
        except CorruptFileError:
            # Bytes that are not the declared messages break V17: its one check names how
            # (decoding only on this path keeps the copy free of per-batch decoding).
            decode_chunk(
                piece.data, self.schema, piece.batches, piece.rows, piece.where(), full=False
            )
            raise
        self.file.copy(piece.data, messages)

    def _encode(self, batches: Sequence[pa.RecordBatch], crc: int) -> int:
        """Write ``batches`` concatenated as one record-batch message; return the running CRC."""
        # Whole input batches are concatenated, never sliced (the encoder compacts view
        # columns either way).
        batch = concat_batches(list(batches))
        encoded = self._encoder.encode(batch)
        self.file.write(encoded)
        return encoded.continue_crc32c(crc)

    def add_region(self, entries: np.ndarray, start: int, broadcast: bool) -> None:
        self.regions.append((start, self.position - start, REGION_BROADCAST if broadcast else 0, 0))
        self.entries.append(entries)


def group_batches(
    rows: Sequence[int], limit: int, fills: Sequence[float] | None = None
) -> list[tuple[int, int]]:
    """Runs ``[first, stop)`` of consecutive batches holding at most ``limit`` rows each.

    A batch of more than ``limit`` rows is a run of its own (batches are never split). With
    ``fills`` (each batch's :func:`~arrowshuffle.format.arrow_types.run_end_fill`), a run
    also ends before its fills add up to more than 1.
    """
    out: list[tuple[int, int]] = []
    first = total = 0
    filled = 0.0
    for i, n in enumerate(rows):
        share = 0.0 if fills is None else fills[i]
        if i > first and (total + n > limit or filled + share > 1.0):
            out.append((first, i))
            first, total, filled = i, 0, 0.0
        total += n
        filled += share
    if rows:
        out.append((first, len(rows)))
    return out


@dataclass(frozen=True)
class MergedGroup:
    """What merging one group did.

    Attributes:
        written: the new pair.
        bytes_read: data bytes read from the inputs.
        input_bytes: per subpartition, the chunk bytes of the inputs added up (a broadcast
            chunk counted for each subpartition), which the new file replaces in the
            manifest's totals: re-batched chunks change in size.
    """

    written: WrittenFile
    bytes_read: int
    input_bytes: tuple[int, ...]


def input_bytes(entries: Iterable[np.ndarray], num_subpartitions: int) -> tuple[int, ...]:
    """Per subpartition, the chunk bytes of files with these index entries (N, R) added up."""
    total = np.zeros(num_subpartitions, dtype=np.uint64)
    for e in entries:
        total += e["length"].sum(axis=1, dtype=np.uint64)
    return tuple(total.tolist())


def merge_files(
    directory: Location,
    files: Sequence[ManifestFile],
    *,
    name: str,
    num_subpartitions: int,
    partitioner: dict[str, Any],
    memory: int | str = DEFAULT_MEMORY,
    rebatch: Rebatch = "auto",
    batch_rows: int = DEFAULT_BATCH_ROWS,
    progress: Progress | None = None,
) -> MergedGroup:
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
        rebatch: whether a subpartition's chunks in an output region are re-encoded as fewer,
            larger batches: consecutive whole batches are concatenated up to ``batch_rows``
            rows (never split), in order, and encoded with the codec of most of the inputs'
            bytes. ``"auto"`` does so when their batches average under
            :data:`AUTO_REBATCH_BYTES` bytes (tiny producers' chunks) and copies larger ones
            as bytes; True whenever it makes fewer batches; False never (a byte copy).
        batch_rows: the most rows of one re-encoded batch (a larger input batch is kept).
        progress: called with a line after each output region and at publication.

    Returns:
        What was published, the data bytes read and the inputs' bytes per subpartition.

    Raises:
        CorruptFileError: an input contradicts the manifest or its own index.
        ChecksumMismatchError: an input chunk's bytes do not match their CRC32C.
    """
    budget = parse_bytes(memory, name="memory")
    rebatch, batch_rows = check_rebatch(rebatch, batch_rows)
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
    for f, item in enumerate(inputs):
        for r, region in enumerate(item.regions):
            ref = _RegionRef(f, r, int(region["offset"]), int(region["length"]))
            (broadcast if int(region["flags"]) & REGION_BROADCAST else regular).append(ref)
    file_id = uuid.uuid4().bytes
    metadata = {FILE_ID_KEY: file_id.hex().encode()}
    location = directory.child(name)
    data_out = AtomicOutput(location)
    index_out: AtomicOutput | None = None
    try:
        codec = _majority_codec(inputs)
        writer = _GroupWriter(
            data_out.file,
            metadata,
            schema,
            num_subpartitions,
            location.url,
            rebatch=rebatch,
            batch_rows=batch_rows,
            codec=codec,
        )
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
        batches = sum(
            int(e[0]["batches"]) if flags & REGION_BROADCAST else int(e["batches"].sum())
            for e, (_, _, flags, _) in zip(writer.entries, writer.regions, strict=True)
        )
        if writer.file.batches != batches:  # cannot happen once V11 and V17 hold
            raise CorruptFileError(
                f"{location.url}: the new index declares {batches} batches, the written chunks "
                f"hold {writer.file.batches}"
            )
        data_size = writer.file.close()
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
            compression=codec,
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
    replaced = input_bytes((item.entries for item in inputs), num_subpartitions)
    return MergedGroup(written, writer.bytes_read, replaced)


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
    entries["rows"] = np.sum([c["rows"] for c in columns], axis=0, dtype=np.uint64)
    present = np.asarray(np.sum([c["length"] for c in columns], axis=0, dtype=np.uint64) > 0)
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
    written: list[tuple[int, int, int, int]] = []  # (subpartition, length, batches, crc32c)
    for first, stop, based in pieces:
        for s in (first + np.flatnonzero(present[first:stop])).tolist():
            run: list[_Piece] = []
            for j, (offsets, lengths, batches, rows, checks) in enumerate(lists):
                length = lengths[s]
                if length == 0:
                    continue
                base, buffer = based[j]
                piece = buffer.slice(offsets[s] - base, length)
                run.append(
                    _Piece(piece, batches[s], rows[s], checks[s], _where(inputs, refs[j], s))
                )
            written.append((s, *writer.write_run(run)))
    if written:
        at, length, batches, crcs = (np.array(c) for c in zip(*written, strict=True))
        entries["length"][at] = length
        entries["batches"][at] = batches
        entries["crc32c"][at] = crcs
    _place(entries, start)
    if start + int(entries["length"].sum()) != writer.position:
        # Cannot happen once the inputs' layouts are proven (V9): every chunk is written whole.
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


def _place(entries: np.ndarray, start: int) -> None:
    """Chunk offsets of a region from its start (chunks are contiguous)."""
    lengths = entries["length"].astype(np.int64)
    entries["offset"] = start + np.concatenate(([0], np.cumsum(lengths)[:-1])).astype(np.int64)


def _merge_broadcast(writer: _GroupWriter, inputs: list[_Input], refs: list[_RegionRef]) -> None:
    """One broadcast output region: the input broadcast chunks as one chunk."""
    start = writer.position
    buffers = _fetch(inputs, [(r.file, r.offset, r.offset + r.length) for r in refs])
    writer.bytes_read += sum(b.size for b in buffers)
    run: list[_Piece] = []
    for ref, buffer in zip(refs, buffers, strict=True):
        entry = inputs[ref.file].entries[0, ref.region]
        if int(entry["length"]) == 0:
            continue
        run.append(
            _Piece(
                buffer,
                int(entry["batches"]),
                int(entry["rows"]),
                int(entry["crc32c"]),
                _where(inputs, ref, 0),
            )
        )
    rows = sum(p.rows for p in run)
    length, batches, crc = writer.write_run(run)
    entries = np.zeros(writer.num_subpartitions, dtype=ENTRY_DTYPE)
    entries[:] = (start, length, rows, batches, crc)
    writer.add_region(entries, start, broadcast=True)
