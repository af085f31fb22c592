"""The shuffle file reader: open a data/index pair and hop regions to read subpartitions."""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from arrowshuffle.format.data_file import SCHEMA_PREFIX
from arrowshuffle.format.errors import FormatError, InvalidOptionError
from arrowshuffle.format.index import (
    ENTRY_DTYPE,
    HEADER_SIZE,
    INDEX_PREFIX_BYTES,
    REGION_BROADCAST,
    IndexHeader,
    IndexMeta,
    IndexSections,
    check_size,
    check_trailer,
    decode_entries,
    decode_header,
    decode_index,
    decode_meta,
    index_checksum,
)
from arrowshuffle.format.manifest_rules import (
    check_file_counts,
    check_listed_size,
    declared_counts,
)
from arrowshuffle.format.naming import INDEX_SUFFIX
from arrowshuffle.format.rule_registry import Violation
from arrowshuffle.readers.byte_ranges import (
    ChunkRange,
    FetchBlock,
    Subpartitions,
    coalesce,
    dedupe_broadcast,
    merge_ranges,
    plan_run,
    subpartition_runs,
)
from arrowshuffle.readers.data_file import check_data_file, check_remote_data_file
from arrowshuffle.readers.decode import decode_block, decode_projected
from arrowshuffle.readers.integrity import Verify, resolve_verify
from arrowshuffle.readers.projection import (
    BufferPicker,
    FileLayout,
    parse_batch_metadata,
    read_layout,
    selected_ranges,
)
from arrowshuffle.readers.proof import check_regions, check_run
from arrowshuffle.readers.read_path import Readable, select_schema
from arrowshuffle.readers.scheduler import ReadOptions, ReadTask, make_tasks
from arrowshuffle.readers.source import (
    ByteSource,
    MappedSource,
    ReadStats,
    RemoteSource,
    SparseFile,
    open_source,
)
from arrowshuffle.readers.storage import Location, object_size, raise_naming, resolve

__all__ = [
    "INDEX_MERGE_GAP",
    "INDEX_PREFIX_BYTES",
    "IndexShape",
    "ShuffleFile",
    "open_file",
]

#: Two pieces of an index closer than this are fetched as one range (the bytes between them
#: cost less than a second request).
INDEX_MERGE_GAP = 256 * 1024
#: The most bytes the first request of an index asks for when a listing predicts more: until
#: the index's header confirms the listing, its predictions are not trusted.
FIRST_FETCH_LIMIT = 4 * 1024 * 1024
#: A local index of at most this many entries (subpartitions x regions) has every entry block
#: decoded and kept when the file is read a second time: they then serve every later read, as
#: the tasks of a plan read a file one subpartition range at a time. A first read decodes only
#: the blocks it reads (the place of every chunk is proven at open, from the raw entries); a
#: larger index is decoded run by run.
PROVE_WHOLE_ENTRIES = 1 << 16
#: The rules of a listing (a manifest) that an index can contradict.
_LISTING_RULES = frozenset({"M4", "M7"})
#: How many runs' chunk ranges a file keeps for repeated reads.
PLANS_KEPT = 4096
#: How many local indexes' proofs the process keeps (least recently opened dropped first)...
PROOF_CACHE_FILES = 256
#: ... for indexes of at most this many bytes (each proof keeps a copy of its index).
PROOF_CACHE_MAX_INDEX = 1 << 20


@dataclass
class _Proof:
    """What opening one local index established, tied to the exact bytes it was proven on.

    Every later open of the same path whose index bytes are identical (compared byte for byte
    with the private copy kept here) reuses the decoded header and metadata, the entries and
    the runs proven so far, instead of decoding and proving again. The data file's checks
    (V13-V15, V21) are reused when its first bytes, footer and size are identical too.
    """

    index: pa.Buffer
    header: IndexHeader
    meta: IndexMeta
    crc32c: int
    entries: dict[int, np.ndarray] = field(default_factory=dict)
    proven: list[range] = field(default_factory=list)
    whole: np.ndarray | None = None
    holds_bytes: np.ndarray | None = None
    #: The chunk ranges of proven runs, by ``(start, stop)`` (immutable: shared by reads).
    plans: dict[tuple[int, int], list[ChunkRange]] = field(default_factory=dict)
    #: The fetch blocks of reads whose every run is planned above (see ShuffleFile.blocks).
    blocks: dict[_BlocksKey, tuple[FetchBlock, ...]] = field(default_factory=dict)
    #: The data file's bytes that passed V13-V15 and V21 (its head, footer and length).
    data_key: _DataKey | None = None


@dataclass(frozen=True)
class _DataKey:
    """What rules V13-V15 and V21 read of a data file: its length, first bytes and footer.

    ``head`` and ``tail`` (the footer with its length and magic) are private copies; a later
    open compares its own map's bytes with them in place.
    """

    size: int
    head: pa.Buffer
    tail: pa.Buffer

    @classmethod
    def of(cls, whole: pa.Buffer) -> _DataKey | None:
        """The key of a mapped data file; None when it is too short to hold its parts.

        The full check then runs (and says why).
        """
        size = whole.size
        if size < SCHEMA_PREFIX[1] + 10:
            return None
        length = int.from_bytes(whole.slice(size - 10, 4).to_pybytes(), "little", signed=True)
        if not 0 < length <= size - SCHEMA_PREFIX[1] - 10:
            return None
        head = pa.py_buffer(whole.slice(0, SCHEMA_PREFIX[1]).to_pybytes())
        tail = pa.py_buffer(whole.slice(size - 10 - length, length + 10).to_pybytes())
        return cls(size, head, tail)

    def matches(self, whole: pa.Buffer) -> bool:
        """True when ``whole`` has this length, these first bytes and this footer.

        The same last bytes mean the same footer length, so that the same footer.
        """
        size = whole.size
        tail = self.tail.size
        return bool(
            size == self.size
            and whole.slice(0, self.head.size).equals(self.head)
            and whole.slice(size - tail, tail).equals(self.tail)
        )


#: The tuning of a file opened without one (immutable: shared, not built on every open).
_DEFAULT_OPTIONS = ReadOptions()
#: A read's fetch blocks are cached by its run, its regions and the coalescing options.
_BlocksKey = tuple[int, int, tuple[int, int, int] | None, int, int]

_PROOFS: OrderedDict[str, _Proof] = OrderedDict()
_PROOFS_LOCK = threading.Lock()


def _cached_proof(path: str, index: pa.Buffer) -> _Proof | None:
    """The proof of ``path``'s index if it was made on exactly these bytes."""
    with _PROOFS_LOCK:
        proof = _PROOFS.get(path)
        if proof is None:
            return None
        _PROOFS.move_to_end(path)
    return proof if proof.index.equals(index) else None


def _remember_proof(path: str, proof: _Proof) -> None:
    with _PROOFS_LOCK:
        _PROOFS[path] = proof
        _PROOFS.move_to_end(path)
        while len(_PROOFS) > PROOF_CACHE_FILES:
            _PROOFS.popitem(last=False)


def clear_proof_cache() -> None:
    """Forget every cached index proof (the next open of each file proves it again)."""
    with _PROOFS_LOCK:
        _PROOFS.clear()


@dataclass(frozen=True)
class IndexShape:
    """What a listing (a manifest) says about an index: enough to know where its sections lie."""

    num_regions: int
    num_subpartitions: int
    schema_length: int
    partitioner_length: int

    @property
    def sections(self) -> IndexSections:
        """The section offsets an index of this shape has."""
        return IndexSections.compute(
            HEADER_SIZE,
            self.schema_length,
            self.partitioner_length,
            self.num_regions,
            self.num_subpartitions,
        )


class ShuffleFile(Readable):
    """One shuffle file (data + index), opened for reading.

    Use :func:`arrowshuffle.open_file` to create one. Local data files are memory-mapped, and
    so are indexes larger than :data:`PROOF_CACHE_MAX_INDEX` (smaller ones are read whole). URLs are
    read with ranged requests, never with a metadata (HEAD) request:

    * the index costs one request when it is at most :data:`INDEX_PREFIX_BYTES` long;
      otherwise a second one fetches the entries of the requested subpartitions (and the rest
      of the metadata, in the same range when they lie within :data:`INDEX_MERGE_GAP`). Only
      an index whose metadata alone exceeds the prefix, read for entries far from it, needs a
      third. Files of a dataset need at most two: the manifest says how large the index is and
      what it holds, so the first request also asks for the metadata and the wanted entries
      that follow the prefix (up to :data:`FIRST_FETCH_LIMIT` bytes), and the second, made
      only once the header agrees with the manifest, for the rest;
    * a read costs one request per region for each contiguous run of subpartitions, fewer when
      neighbouring ranges are merged (``ReadOptions.max_gap`` and ``max_block``);
    * before its first chunk, the data file's first bytes and its end (from where the last
      region ends: the footer) are fetched in one call to prove that it belongs to the index
      (V13-V15, V21), once per opened file; a first read that is one range near both ends of
      a small file fetches the whole file instead, with no request more.

    Args:
        location: the data file.
        data_size: the data file's size when a listing already says it (no request is made
            for it); checked against the index (rule M7).
        index_size: the index's size when a listing already says it; an object or header
            that disagrees is a :class:`CorruptFileError` (rule M4) before anything the
            listing predicts is fetched.
        want: the subpartitions a first read will ask for; a remote open then fetches their
            index entries together with the metadata.
        shape: what a listing says about the index (with ``index_size``): a remote open
            then asks for the whole metadata and the ``want`` entries in its first round
            trip, so that it costs at most two requests. A region count the header
            contradicts is a :class:`CorruptFileError` (rule M7).
        options: the default tuning of this file's reads.
    """

    def __init__(
        self,
        location: Location,
        *,
        data_size: int | None = None,
        index_size: int | None = None,
        want: Subpartitions | None = None,
        shape: IndexShape | None = None,
        options: ReadOptions | None = None,
    ) -> None:
        self.location = location
        if options is not None and not isinstance(options, ReadOptions):
            raise InvalidOptionError(
                f"options must be a ReadOptions, found {type(options).__name__}"
            )
        self.options = options or _DEFAULT_OPTIONS
        self.index_location = location.sibling(INDEX_SUFFIX)
        # The index's size is learnt from the index itself: a listed size is checked, not
        # trusted (see _first_fetch).
        # A local index small enough for the proof cache is read whole: one call, and a copy
        # of its own that the cache can keep.
        self._index_source = open_source(self.index_location, read_at_most=PROOF_CACHE_MAX_INDEX)
        self._data_source: ByteSource | None = None
        self._entries: dict[int, np.ndarray] = {}
        # Runs of subpartitions proven with both neighbours at hand: a run inside one of them
        # is proven too (its chunks and their neighbours were checked), so it is not again.
        self._proven: list[range] = []
        # Every entry, shape (N, R), once a local index is proven whole; with the subpartitions
        # that hold any chunk bytes, so that a read of empty ones costs a lookup.
        self._whole: np.ndarray | None = None
        self._holds_bytes: np.ndarray | None = None
        # The chunk ranges of proven runs, so that a repeated read plans nothing again.
        self._plans: dict[tuple[int, int], list[ChunkRange]] = {}
        # The fetch blocks of reads of one proven run, so that a repeated read (of this file,
        # or of another open of the same index) coalesces nothing again.
        self._blocks: dict[_BlocksKey, tuple[FetchBlock, ...]] = {}
        #: How many runs were proven from their entries (what repeated reads do not redo).
        self.proofs = 0
        self._index_bytes = pa.py_buffer(b"")
        self.header: IndexHeader
        self.meta: IndexMeta
        # The index buffers fetched by the open in progress (None once it is done).
        self._fetched: list[pa.Buffer] | None = None
        #: The whole-index CRC32C of the trailer, when the open holds the whole index (always
        #: locally; remotely when it came with the first request): a manifest lists it (M5).
        self.index_crc32c: int | None = None
        # A local index's proof, shared with later opens of the same bytes.
        self._proof: _Proof | None = None
        self._open_index_checked(index_size, want, shape)
        if self._proof is None:
            check_regions(self.meta.regions, self.header.data_length, self.url)
            self._check_every_chunk()
            self._remember_mapped_proof()
        if data_size is not None:
            _raise_first(
                check_file_counts(
                    location.url,
                    {"data bytes": data_size},
                    {"data bytes": self.header.data_length},
                )
            )
        self._data_size = self.header.data_length
        # Whether the data file passed V13-V15 and V21 against this index.
        self._data_checked = False
        # The data file's footer and its dictionary batches, once a projected read needs them.
        self._layout: tuple[FileLayout, list[tuple[int, pa.Buffer]]] | None = None

    # ---------------------------------------------------------------- the index

    def _open_index_checked(
        self, index_size: int | None, want: Subpartitions | None, shape: IndexShape | None
    ) -> None:
        """Open the index; on object stores, open it again when its bytes fail a check.

        Fetched bytes that break a rule (V1-V7: a checksum, the magic, the sizes) may have been
        damaged on the way, so the open is repeated, up to the source's retry budget. When the
        same bytes come back the stored index is damaged, and the error is raised at once.
        """
        source = self._index_source
        previous: list[pa.Buffer] | None = None
        attempt = 0
        while True:
            self._fetched = []
            try:
                self._open_index(index_size, want, shape)
                return
            except FormatError as exc:
                fetched = self._fetched
                if not isinstance(source, RemoteSource) or attempt >= source.retry_budget:
                    raise_naming(exc, self.index_location.url)
                if exc.rule in _LISTING_RULES:
                    raise  # the object contradicts its listing: no transfer damage, since V3 held
                if previous is not None and _same_buffers(previous, fetched):
                    raise_naming(exc, self.index_location.url)
                previous = fetched
                attempt += 1
                self._entries.clear()
                source.note_refetch("the index", attempt, exc)
            finally:
                self._fetched = None

    def _open_index(
        self, index_size: int | None, want: Subpartitions | None, shape: IndexShape | None
    ) -> None:
        source = self._index_source
        if isinstance(source, MappedSource):
            if index_size is not None:
                _raise_first(
                    [check_listed_size("index", self.index_location.url, index_size, source.size)]
                )
            self._open_mapped_index(source.read_prefix(source.size))
            return
        size = index_size
        segments: list[tuple[int, pa.Buffer]] = []
        if size is not None:
            segments.append((0, self._first_fetch(size, want, shape)))
        else:
            prefix = source.read_prefix(INDEX_PREFIX_BYTES)
            if self._fetched is not None:
                self._fetched.append(prefix)
            segments.append((0, prefix))
            if prefix.size < INDEX_PREFIX_BYTES:
                size = prefix.size  # a short answer is the whole object
        if size is not None and _reach(segments, 0, size) >= size:
            self._install_full_index(_assemble(segments, 0, size))
            return
        self.header = decode_header(memoryview(segments[0][1]), object_size=size)
        needs = _index_needs(self.header.sections, self.num_regions, self.num_subpartitions, want)
        missing = [(_reach(segments, b, e), e) for b, e in needs]
        wanted = merge_ranges([(b, e) for b, e in missing if b < e], max_gap=INDEX_MERGE_GAP)
        if size is None and sum(m.end - m.begin for m in wanted) > FIRST_FETCH_LIMIT:
            # More than any plausible index asks for, of an object of unknown size: a length
            # read off a hostile header is reported (V4), never requested (spec.md, 5.10).
            decode_header(memoryview(segments[0][1]), object_size=source.size)
        segments += self._fetch_index([(m.begin, m.end) for m in wanted])
        meta_end = self.header.sections.entries_offset
        self.meta = decode_meta(self.header, memoryview(_assemble(segments, 0, meta_end)))
        self._index_bytes = _assemble(segments, 0, _reach(segments, 0, self.header.index_length))
        for begin, end in needs[1:]:
            # Damage here is handled by repeating the whole open (_open_index_checked).
            self._decode_entry_slice(_assemble(segments, begin, end), begin, refetch=False)

    def _open_mapped_index(self, data: pa.Buffer) -> None:
        """Open a local index: header, metadata and trailer now, entries when read.

        Decoding steps 1-7 and 9 (the trailer and the whole-index checksum, computed in place
        at memory speed) run now, and so does the proof of every chunk's place (see
        :meth:`_check_every_chunk`); each subpartition's entry block is checked (step 8) when a
        read first needs it.
        """
        proof = _cached_proof(self.index_location.path, data)
        if proof is not None:
            # The very bytes proven before: the same header, metadata, entries and proofs.
            self.header, self.meta, self.index_crc32c = proof.header, proof.meta, proof.crc32c
            self._entries, self._proven = proof.entries, proof.proven
            self._whole, self._holds_bytes = proof.whole, proof.holds_bytes
            self._plans, self._blocks = proof.plans, proof.blocks
            self._index_bytes = data
            self._proof = proof
            return
        view = memoryview(data)
        self.header = decode_header(view, object_size=data.size)
        self.meta = decode_meta(self.header, view[: self.header.sections.entries_offset])
        check_trailer(self.header, view)
        self.index_crc32c = index_checksum(view)
        self._index_bytes = data

    def _check_every_chunk(self) -> None:
        """Prove the place of every chunk (V8-V11) when the open holds the whole index.

        A read proves the runs it reads against their neighbours, which cannot show where the
        chunks of the other subpartitions end: an index whose region was lengthened over the
        next one (that region and its entries left out, the checksums recomputed) still covers
        the data file (V21), and only the last subpartition's chunk, ending short of its
        region, gives it away. Every other subpartition's read would silently lose that
        region's rows. A local index (its bytes passed the whole-index checksum) and one
        fetched whole hold every entry, so all of them are proven at once: one vectorized pass.
        """
        n, r = self.num_subpartitions, self.num_regions
        if r == 0:
            return
        if len(self._entries) == n:  # fetched whole: every entry block decoded and checked
            every = np.stack([self._entries[s] for s in range(n)])
        else:
            begin, end = self.header.sections.entry_range(r, 0, n)
            if self._index_bytes.size < end:
                return  # a ranged open: each read proves what it reads (spec.md, 6.5)
            every = np.frombuffer(self._index_bytes, dtype=ENTRY_DTYPE, count=n * r, offset=begin)
            every = every.reshape(n, r)
        check_run(every, self.meta.regions, range(n), n, self.header.data_length, self.url)

    def _remember_mapped_proof(self) -> None:
        """Share this local index's proof with later opens of the same bytes (see _Proof)."""
        data = self._index_bytes
        if not self.location.is_local or self.index_crc32c is None:
            return
        if data.size > PROOF_CACHE_MAX_INDEX:
            return
        private = isinstance(self._index_source, MappedSource) and self._index_source.private
        proof = _Proof(
            # The bytes proven: a copy of a mapped index, which may change under the map.
            data if private else pa.py_buffer(data.to_pybytes()),
            self.header,
            self.meta,
            self.index_crc32c,
            self._entries,
            self._proven,
            plans=self._plans,
            blocks=self._blocks,
        )
        self._proof = proof
        _remember_proof(self.index_location.path, proof)

    def _first_fetch(
        self, size: int, want: Subpartitions | None, shape: IndexShape | None
    ) -> pa.Buffer:
        """The first request of an index whose size and shape a listing (a manifest) gives.

        It asks for the prefix and, merged with it, what the listed shape says the read needs
        (the metadata, the wanted entries), at most :data:`FIRST_FETCH_LIMIT` bytes: a
        listing is not trusted until the header agrees with it, so a hostile size or region
        count cannot make this fetch or allocate more. The header is then checked against
        the listing (M4: the index's length; M7: its regions) before anything else is fetched.

        Raises:
            CorruptFileError: the object or its header contradicts the listing.
        """
        end = min(size, INDEX_PREFIX_BYTES)
        if shape is not None:
            needs = _index_needs(shape.sections, shape.num_regions, shape.num_subpartitions, want)
            first = merge_ranges([(0, end), *needs], max_gap=INDEX_MERGE_GAP)[0]  # from 0
            end = max(end, min(first.end, size, FIRST_FETCH_LIMIT))
        prefix = self._index_source.read_prefix(end)
        if self._fetched is not None:
            self._fetched.append(prefix)
        url = self.index_location.url
        if prefix.size < end:  # the object is shorter than listed
            _raise_first([check_listed_size("index", url, size, prefix.size)])
        header = decode_header(memoryview(prefix))
        if header.index_length != size:
            # The listing or the object is wrong: the object's own size tells which (one request,
            # on this error path only), so that every reader names the rule validation names.
            what = "the index object in bytes"
            _raise_first([check_size(what, object_size(self.index_location), header.index_length)])
            # The index's own declared length counts as its size (M4).
            _raise_first([check_listed_size("index", url, size, header.index_length)])
        if shape is not None:
            _raise_first(
                check_file_counts(url, {"regions": shape.num_regions}, declared_counts(header))
            )
        return prefix

    def _fetch_index(self, ranges: list[tuple[int, int]]) -> list[tuple[int, pa.Buffer]]:
        buffers = self._index_source.read_ranges(ranges)
        if self._fetched is not None:
            self._fetched.extend(buffers)
        return [(begin, buffer) for (begin, _), buffer in zip(ranges, buffers, strict=True)]

    def _install_full_index(self, data: pa.Buffer) -> None:
        """Decode and check a whole index (rules V1-V7), keeping every entry."""
        index = decode_index(memoryview(data))
        self.index_crc32c = index_checksum(data)
        self.header = index.header
        self.meta = index.meta
        self._index_bytes = data
        for s in range(self.header.num_subpartitions):
            self._entries[s] = index.entries[s]

    def _decode_entry_slice(self, data: pa.Buffer, begin: int, *, refetch: bool = True) -> None:
        """Decode whole subpartition blocks of entries that start at index byte ``begin``.

        With ``refetch``, entry blocks of an object store that fail their checksum (V6) are
        fetched again, up to the source's retry budget, unless the same bytes come back.
        """
        block = self.num_regions * ENTRY_DTYPE.itemsize
        if block == 0:
            return
        first = (begin - self.header.sections.entries_offset) // block
        count = data.size // block
        source = self._index_source
        attempt = 0
        while True:
            try:
                decoded = decode_entries(
                    self.header, self.meta, memoryview(data), first, first + count
                )
                break
            except FormatError as exc:
                if not (refetch and isinstance(source, RemoteSource)):
                    raise_naming(exc, self.index_location.url)
                if attempt >= source.retry_budget:
                    raise_naming(exc, self.index_location.url)
                attempt += 1
                fresh = source.refetch(begin, begin + data.size, attempt, exc)
                if fresh.equals(data):
                    raise_naming(exc, self.index_location.url)
                data = fresh
        for i in range(count):
            self._entries[first + i] = decoded[i]

    def _ensure_entries(self, runs: Sequence[range]) -> None:
        """Fetch the entries of every subpartition in ``runs`` that is not cached yet.

        Missing runs close together are fetched as one range; all ranges in one call.
        """
        sections = self.header.sections
        absent_ranges: list[tuple[int, int]] = []
        for run in runs:
            absent = [s for s in run if s not in self._entries]
            if absent:
                absent_ranges.append(
                    sections.entry_range(self.num_regions, absent[0], absent[-1] + 1)
                )
        merged = merge_ranges(absent_ranges, max_gap=INDEX_MERGE_GAP)
        missing = [(m.begin, m.end) for m in merged]
        if not missing:
            return
        have = self._index_bytes.size
        fetch = [(max(begin, have), end) for begin, end in missing if end > have]
        starts = [b for b, _ in fetch]
        fetched = zip(starts, self._index_source.read_ranges(fetch), strict=True)
        segments = [(0, self._index_bytes), *fetched]
        for begin, end in missing:
            self._decode_entry_slice(_assemble(segments, begin, end), begin)

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
        if not all(isinstance(v, (int, np.integer)) for v in (start, stop)):
            raise InvalidOptionError(
                f"start and stop must be integers, found {start!r} and {stop!r}"
            )
        if not 0 <= start <= stop <= self.num_subpartitions:
            raise InvalidOptionError(
                f"subpartition range [{start}, {stop}) is outside the file's "
                f"[0, {self.num_subpartitions})"
            )
        if self.num_regions == 0 or start == stop:
            return np.zeros((stop - start, self.num_regions), dtype=ENTRY_DTYPE)
        if self._whole is not None:
            return self._whole[start:stop].copy()  # callers own what they get
        self._ensure_entries([range(start, stop)])
        return np.stack([self._entries[s] for s in range(start, stop)])

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

    def chunk_ranges(
        self,
        subpartitions: Subpartitions | None = None,
        *,
        regions: range | None = None,
    ) -> list[ChunkRange]:
        """The chunk ranges a read of ``subpartitions`` fetches, in file order.

        Every chunk's place is proven from the index before anything is fetched (see
        :mod:`arrowshuffle.readers.proof`), against the entries of the neighbouring
        subpartitions too (on object stores they come in the same index request as the run's
        own entries).

        Args:
            subpartitions: the selection (all by default).
            regions: keep only the ranges of these regions (part of a skew split).
        """
        if regions is not None and not isinstance(regions, range):
            raise InvalidOptionError(
                f"regions must be a range of region numbers, found {type(regions).__name__}"
            )
        selection = range(self.num_subpartitions) if subpartitions is None else subpartitions
        runs = subpartition_runs(selection, self.num_subpartitions)
        n = self.num_subpartitions
        self._prove_whole_if_read_before()
        if self._holds_bytes is not None:
            if not any(self._holds_bytes[r.start : r.stop].any() for r in runs):
                return []  # proven: nothing to fetch
        else:
            # The neighbours' entries too (one more on each side, in the same request), so that
            # two entries swapped inside a region cannot go unnoticed (spec.md, 6.5).
            self._ensure_entries([range(max(0, r.start - 1), min(n, r.stop + 1)) for r in runs])
        broadcast = (self.meta.regions["flags"] & REGION_BROADCAST) != 0
        ranges: list[ChunkRange] = []
        for run in runs:
            key = (run.start, run.stop)
            planned = self._plans.get(key)
            if planned is None:
                planned = plan_run(self._prove(run), broadcast, run)
                proven = any(p.start <= run.start and run.stop <= p.stop for p in self._proven)
                if proven and len(self._plans) < PLANS_KEPT:
                    self._plans[key] = planned  # proven for good: reused as it is
            ranges.extend(planned)
        if regions is not None:
            ranges = [c for c in ranges if c.region in regions]
        ranges.sort(key=lambda c: (c.offset, c.start))
        return dedupe_broadcast(ranges)

    def _prove_whole_if_read_before(self) -> None:
        """Prove a small local index whole once it was read before (see PROVE_WHOLE_ENTRIES)."""
        if self._whole is not None or not self._proven:
            return  # proven whole already, or not read before: a first read proves what it reads
        n = self.num_subpartitions
        if self.location.is_local and 0 < n * self.num_regions <= PROVE_WHOLE_ENTRIES:
            whole = self._prove(range(n))
            self._holds_bytes = np.asarray((whole["length"] > 0).any(axis=1))
            self._whole = whole
            if self._proof is not None:
                self._proof.whole, self._proof.holds_bytes = whole, self._holds_bytes

    def proven_empty(self, subpartitions: Subpartitions) -> bool:
        """True when the whole index is proven and ``subpartitions`` (a range) hold no bytes.

        False whenever that is not known: a read then plans the file as usual.
        """
        holds = self._holds_bytes
        if holds is None or not isinstance(subpartitions, range) or subpartitions.step != 1:
            return False
        if not 0 <= subpartitions.start < subpartitions.stop <= len(holds):
            return False
        return not bool(holds[subpartitions.start : subpartitions.stop].any())

    def _prove(self, run: range) -> np.ndarray:
        """Prove the chunks of ``run`` (unless a proven run holds it) and return its entries."""
        entries = self.entries(run.start, run.stop)
        if any(p.start <= run.start and run.stop <= p.stop for p in self._proven):
            return entries
        before = self._entries.get(run.start - 1)
        after = self._entries.get(run.stop)
        check_run(
            entries,
            self.meta.regions,
            run,
            self.num_subpartitions,
            self.header.data_length,
            self.url,
            before=before,
            after=after,
        )
        self.proofs += 1
        first = run.start == 0 or before is not None
        last = run.stop == self.num_subpartitions or after is not None
        if first and last:
            self._proven.append(run)
        return entries

    def blocks(
        self,
        subpartitions: Subpartitions | None = None,
        *,
        options: ReadOptions | None = None,
        regions: range | None = None,
    ) -> list[FetchBlock]:
        """The ranged reads a read of ``subpartitions`` issues: planned, sorted, coalesced."""
        if options is not None and not isinstance(options, ReadOptions):
            raise InvalidOptionError(
                f"options must be a ReadOptions, found {type(options).__name__}"
            )
        options = options or self.options
        key = self._blocks_key(subpartitions, regions, options)
        if key is not None:
            self._prove_whole_if_read_before()  # as a planned read would
            cached = self._blocks.get(key)
            if cached is not None:
                return list(cached)
        ranges = self.chunk_ranges(subpartitions, regions=regions)
        blocks = coalesce(ranges, max_gap=options.max_gap, max_block=options.max_block)
        # Kept only when the run's plan is kept (proven for good): then so are its blocks.
        if key is not None and key[:2] in self._plans and len(self._blocks) < PLANS_KEPT:
            self._blocks[key] = tuple(blocks)
        return blocks

    def _blocks_key(
        self, subpartitions: Subpartitions | None, regions: range | None, options: ReadOptions
    ) -> _BlocksKey | None:
        """The cache key of a read of one run (None for other selections: not cached).

        Only an ``int``, a ``range`` of step 1 or everything; a key is stored only after a
        read of it passed every check, so a hit is a selection already found valid.
        """
        if subpartitions is None:
            start, stop = 0, self.num_subpartitions
        elif type(subpartitions) is int:
            start, stop = subpartitions, subpartitions + 1
        elif type(subpartitions) is range and subpartitions.step == 1:
            start, stop = subpartitions.start, subpartitions.stop
        else:
            return None
        given: object = regions  # anything else is refused by chunk_ranges, uncached
        if given is not None and type(given) is not range:
            return None
        where = None if regions is None else (regions.start, regions.stop, regions.step)
        return (start, stop, where, options.max_gap, options.max_block)

    def data_source(self) -> ByteSource:
        """The data file's byte source (a memory map locally, ranged requests otherwise)."""
        if self._data_source is None:
            source = open_source(self.location, self._data_size)
            if isinstance(source, MappedSource):
                self._check_local_pair(source)
                self._data_checked = True
            self._data_source = source
        return self._data_source

    def _check_local_pair(self, source: MappedSource) -> None:
        """Rules V13-V15 and V21 for a memory-mapped data file, where they cost no request.

        A data file beside the wrong index would otherwise be decoded with the wrong entries,
        and one whose index leaves out a region would lose that region's rows.
        """
        proof = self._proof
        known = proof.data_key if proof is not None else None
        if known is not None and known.matches(source.mapped):
            return  # the same head, footer and length passed these rules with this index
        _, violations = check_data_file(self.header, self.schema, source, self.meta.regions)
        _raise_first(violations, self.url)
        if proof is not None:
            proof.data_key = _DataKey.of(source.mapped)

    def file_tasks(
        self,
        subpartitions: Subpartitions | None = None,
        *,
        columns: Sequence[str] | None = None,
        verify: Verify = "auto",
        options: ReadOptions | None = None,
        regions: range | None = None,
    ) -> list[ReadTask]:
        """The fetch-and-decode tasks of this file's part of a read, in output order.

        ``verify`` is resolved for this file (see :func:`resolve_verify`): ``"auto"`` checks
        the chunks of an object store and not those of a local memory-mapped file.
        """
        check = resolve_verify(verify, remote=not self.location.is_local)
        if options is not None and not isinstance(options, ReadOptions):
            raise InvalidOptionError(
                f"options must be a ReadOptions, found {type(options).__name__}"
            )
        options = options or self.options
        if isinstance(columns, str) or not isinstance(columns, (Iterable, type(None))):
            raise InvalidOptionError(f"columns must be a list of names, found {columns!r}")
        select = None if columns is None else list(columns)
        if select is not None:
            select_schema(self.schema, select)
        blocks = self.blocks(subpartitions, options=options, regions=regions)
        if not blocks:
            return []
        schema, url, codec = self.schema, self.url, self.compression
        if select is not None and self._projects(select, check, blocks, options):
            return self._projected_tasks(blocks, select, options)
        source = self.data_source()
        blocks = self._whole_file_block(blocks, options)

        def decode(block: FetchBlock, buffers: list[pa.Buffer]) -> list[pa.RecordBatch]:
            (buffer,) = buffers
            if not self._data_checked:  # the block is the whole file (see _whole_file_block)
                check_remote_data_file(
                    self.header, self.schema, source, self.meta.regions, whole=buffer
                )
                self._data_checked = True
            return decode_block(
                block, buffer, schema, url, columns=select, verify=check, compression=codec
            )

        return list(
            make_tasks(
                source,
                blocks,
                decode,
                options.task_bytes,
                decompresses=self.compression != "none",
            )
        )

    # ---------------------------------------------------------------- projected reads

    def _projects(
        self, select: list[str], verify: bool, blocks: list[FetchBlock], options: ReadOptions
    ) -> bool:
        """Whether a read of ``select`` fetches only those columns' buffers.

        Not when it verifies checksums (a chunk's CRC32C covers all its bytes) or selects
        every column. Locally only for compressed bodies, where it spares decompressing the
        other columns: an uncompressed memory-mapped read is zero-copy, so the other columns'
        pages are never touched anyway, and planning per batch would only add time. On object
        stores only when the read is large enough to be worth the two extra round trips
        (``options.project_min_bytes``).
        """
        if verify or set(select) >= set(self.schema.names):
            return False
        if self.location.is_local:
            return self.compression != "none"
        return sum(b.end - b.offset for b in blocks) >= options.project_min_bytes

    def _file_layout(self) -> tuple[FileLayout, list[tuple[int, pa.Buffer]]]:
        """The data file's footer and dictionary batches (fetched once, two requests at most)."""
        if self._layout is None:
            source = self.data_source()
            size = source.size
            layout = read_layout(source)
            blocks = layout.dictionaries
            starts = blocks["offset"].astype(np.int64)
            ends = starts + blocks["meta_length"] + blocks["body_length"]
            ranges = list(zip(starts.tolist(), ends.tolist(), strict=True))
            if any(not 0 <= b <= e <= size for b, e in ranges):
                raise FormatError(f"{self.url}: a dictionary batch lies outside the data file")
            pieces = list(zip(starts.tolist(), source.read_ranges(ranges), strict=True))
            self._layout = (layout, pieces)
        return self._layout

    def _projected_tasks(
        self, blocks: list[FetchBlock], select: list[str], options: ReadOptions
    ) -> list[ReadTask]:
        """Tasks that fetch each batch's metadata now and the selected buffers when run."""
        source = self.data_source()
        mapped = isinstance(source, MappedSource)
        if not mapped:
            self.check_coverage()
        layout, dictionaries = self._file_layout()
        schema, url = self.schema, self.url
        names = set(select)
        fields = [i for i, name in enumerate(schema.names) if name in names]
        positions: dict[int, range] = {}
        for block in blocks:
            for chunk_range in block.ranges:
                for chunk in chunk_range.chunks:
                    where = f"{url}: chunk (region {chunk_range.region}, subpartition " + (
                        f"{chunk.subpartition}) at bytes [{chunk.offset}, "
                        f"{chunk.offset + chunk.length})"
                    )
                    positions[chunk.offset] = layout.chunk_batches(
                        chunk.offset, chunk.length, chunk.batches, where
                    )
        wanted = sorted({i for run in positions.values() for i in run})
        starts = layout.batches["offset"][wanted].astype(np.int64)
        ends = starts + layout.batches["meta_length"][wanted]
        # Locally exact ranges (the map serves any of them); remotely merged like any read.
        gap = 0 if mapped else options.max_gap
        spans = list(zip(starts.tolist(), ends.tolist(), strict=True))
        metadata = dict(zip(wanted, _read_merged(source, spans, gap, options), strict=True))
        pieces_of: dict[int, list[tuple[int, int]]] = {}
        picker = BufferPicker(schema, fields)
        for i in wanted:
            batch = parse_batch_metadata(metadata[i].to_pybytes())
            pieces_of[i] = selected_ranges(layout.batches[i], batch, picker)
        projected = []
        for block in blocks:
            ranges = [
                piece
                for chunk_range in block.ranges
                for chunk in chunk_range.chunks
                for i in positions[chunk.offset]
                for piece in pieces_of[i]
            ]
            merged = merge_ranges(ranges, max_gap=gap, max_block=options.max_block)
            pieces = tuple((m.begin, m.end) for m in merged) or ((block.offset, block.offset),)
            projected.append(FetchBlock(block.offset, block.end, block.ranges, pieces))
        # One thread per batch: a chunk's batches are small (a region's share of one
        # subpartition), and handing their few buffers to Arrow's pool cost more than it saved
        # (1.6x the time of decoding 4 of 16 zstd columns); reads of several tasks run at once.
        read_options = pa.ipc.IpcReadOptions(included_fields=fields, use_threads=False)
        if isinstance(source, MappedSource):
            # Arrow reads each batch's metadata and the selected buffers from the map,
            # zero-copy: the bytes the plan counted.
            reader = pa.ipc.open_file(pa.BufferReader(source.mapped), options=read_options)

            def decode(block: FetchBlock, buffers: list[pa.Buffer]) -> list[pa.RecordBatch]:
                return decode_projected(block, reader, positions, select, url)

        else:
            size = source.size
            known = [
                (layout.tail_offset, layout.tail),
                *dictionaries,
                *((int(layout.batches["offset"][i]), m) for i, m in metadata.items()),
            ]

            def fetch(start: int, end: int) -> bytes:
                (data,) = source.read_ranges([(start, end)])
                return bytes(data.to_pybytes())

            def decode(block: FetchBlock, buffers: list[pa.Buffer]) -> list[pa.RecordBatch]:
                fetched = [start for start, _ in block.fetch_ranges]
                sparse = SparseFile(size, [*known, *zip(fetched, buffers, strict=True)], fetch)
                reader = pa.ipc.open_file(pa.PythonFile(sparse, mode="r"), options=read_options)
                return decode_projected(block, reader, positions, select, url)

        # Not decoded ahead: the tasks of a file share its one Arrow file reader.
        return list(make_tasks(source, projected, decode, options.task_bytes))

    @property
    def data_bytes_read(self) -> int:
        """Bytes of the data file that reads fetched (remote) or mapped to touch (local).

        Locally this counts the byte ranges reads planned and sliced from the memory map
        (the operating system pages in no more than that, give or take a page).
        """
        source = self._data_source
        if isinstance(source, MappedSource):
            return source.bytes_read
        if isinstance(source, RemoteSource):
            return source.stats().bytes_read
        return 0

    def check_coverage(self) -> None:
        """Check the data file against the index before a chunk is decoded (V13-V15, V21).

        Its length, ends, file id and schema, and that the regions cover every record batch.
        Locally this is done when the data file is first opened; on object stores it costs
        one request (the file's first bytes and its end, fetched together) before the first
        read's chunks are fetched.

        Raises:
            CorruptFileError: the data file does not belong to the index, or the index leaves
                record batches of it out.
        """
        source = self.data_source()
        if not self._data_checked:
            check_remote_data_file(self.header, self.schema, source, self.meta.regions)
            self._data_checked = True

    def _whole_file_block(self, blocks: list[FetchBlock], options: ReadOptions) -> list[FetchBlock]:
        """The blocks of a read, as one block of the whole file where that proves it for free.

        Before a chunk is decoded the data file must pass V13-V15 and V21, which read its first
        bytes and its end (see :meth:`check_coverage`). When the read is one block that lies
        within ``max_gap`` of both ends of a file of at most ``max_block`` bytes, it is widened
        to the whole file: one request fetches both the chunks and what proves them, judged
        before anything is decoded. Otherwise the ends are fetched now, in one call.
        """
        if self._data_checked:
            return blocks
        size = self._data_size
        block = blocks[0] if len(blocks) == 1 else None
        if (
            block is None
            or size > options.max_block
            or block.offset > options.max_gap
            or size - block.end > options.max_gap
        ):
            self.check_coverage()
            return blocks
        return [FetchBlock(0, size, block.ranges)]

    # ---------------------------------------------------------------- a dataset of one file

    @property
    def num_files(self) -> int:
        """1: a file reads as a dataset of one file."""
        return 1

    @property
    def snapshot(self) -> str:
        """The file's id (a file rewritten in place gets another one)."""
        return f"file id {self.header.file_id.hex()}"

    def file(self, i: int, *, want: Subpartitions | None = None) -> ShuffleFile:
        """This file (``i`` must be 0)."""
        if i != 0:
            raise InvalidOptionError(f"file {i} does not exist: a shuffle file is one file")
        return self

    @property
    def _remote(self) -> bool:
        return not self.location.is_local

    def subpartition_sizes(self) -> tuple[np.ndarray, np.ndarray]:
        """Bytes and rows of every subpartition (from the whole index)."""
        entries = self.entries()
        return (
            entries["length"].sum(axis=1, dtype=np.uint64).astype(np.int64),
            entries["rows"].sum(axis=1, dtype=np.uint64).astype(np.int64),
        )

    def read_stats(self) -> ReadStats:
        """Requests, bytes, retries and refetches of the index and the data so far.

        All zero for local files. ``retries`` counts requests repeated after transient storage
        errors, ``refetches`` ranges (or index opens) repeated after a failed checksum.
        """
        total = ReadStats()
        for source in (self._index_source, self._data_source):
            if isinstance(source, RemoteSource):
                total += source.stats()
        return total

    @property
    def requests(self) -> int:
        """Ranged requests issued so far for the index and the data (0 for local files)."""
        return sum(
            s.requests
            for s in (self._index_source, self._data_source)
            if isinstance(s, RemoteSource)
        )

    def close(self) -> None:
        """Release the memory maps and cached index entries."""
        self._data_source = None
        self._entries = {}  # not cleared: a cached proof may share it
        self._plans = {}
        self._blocks = {}

    def __enter__(self) -> ShuffleFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"ShuffleFile({self.url!r}, regions={self.num_regions}, "
            f"subpartitions={self.num_subpartitions}, rows={self.num_rows})"
        )


def _read_merged(
    source: ByteSource, ranges: list[tuple[int, int]], gap: int, options: ReadOptions
) -> list[pa.Buffer]:
    """The bytes of each range, fetched as merged ranges (one request each), then sliced."""
    merged = merge_ranges(ranges, max_gap=gap, max_block=options.max_block)
    buffers = source.read_ranges([(m.begin, m.end) for m in merged])
    out: list[pa.Buffer | None] = [None] * len(ranges)
    for m, buffer in zip(merged, buffers, strict=True):
        for i in m.members:
            begin, end = ranges[i]
            out[i] = buffer.slice(begin - m.begin, end - begin)
    return [b for b in out if b is not None]


def _raise_first(violations: Sequence[Violation | None], where: str | None = None) -> None:
    """Raise the first violation found, if any, its message prefixed by ``where``."""
    for found in violations:
        if found is not None:
            raise found.error(where)


def _same_buffers(a: Sequence[pa.Buffer], b: Sequence[pa.Buffer]) -> bool:
    return len(a) == len(b) and all(x.equals(y) for x, y in zip(a, b, strict=True))


def _index_needs(
    sections: IndexSections, num_regions: int, num_subpartitions: int, want: Subpartitions | None
) -> list[tuple[int, int]]:
    """Index byte ranges a read of ``want`` needs: the metadata, then the entry slice."""
    needs = [(0, sections.entries_offset)]
    if want is not None:
        runs = subpartition_runs(want, num_subpartitions)
        if runs:
            # One neighbour more on each side: a few bytes in the same range, and the reader
            # can prove the run's first and last chunks against them.
            start = max(0, runs[0].start - 1)
            stop = min(num_subpartitions, runs[-1].stop + 1)
            needs.append(sections.entry_range(num_regions, start, stop))
    return needs


def _reach(segments: Sequence[tuple[int, pa.Buffer]], begin: int, end: int) -> int:
    """How far from ``begin`` (up to ``end``) the segments cover the object without a hole."""
    position = begin
    for start, data in sorted(segments, key=lambda s: s[0]):
        if start <= position < start + data.size:
            position = min(start + data.size, end)
    return position


def _assemble(segments: Sequence[tuple[int, pa.Buffer]], begin: int, end: int) -> pa.Buffer:
    """The bytes ``[begin, end)`` of an object, from fetched ``(offset, bytes)`` segments."""
    ordered = sorted(segments, key=lambda s: s[0])
    for start, data in ordered:
        if start <= begin and end <= start + data.size:
            return data.slice(begin - start, end - begin)  # one segment holds it: no copy
    parts: list[bytes] = []
    position = begin
    for start, data in ordered:
        stop = start + data.size
        if start <= position < stop:
            take = min(stop, end) - position
            parts.append(data.slice(position - start, take).to_pybytes())
            position += take
    fetched = f"the end of the fetched index bytes [{begin}, {end})"
    _raise_first([check_size(fetched, position, end)])
    return pa.py_buffer(b"".join(parts))


def open_file(
    path: str | os.PathLike[str],
    storage_options: dict[str, Any] | None = None,
    *,
    options: ReadOptions | None = None,
) -> ShuffleFile:
    """Open one shuffle file: ``path`` is the data file, its index sits beside it.

    A file reads like a dataset of one file: ``read``, ``iter_batches`` and ``plan`` take the
    same arguments.

    Args:
        path: local path or fsspec URL of the ``.arrow`` data file.
        storage_options: passed to fsspec (credentials, endpoint, ...).
        options: the default tuning of its reads (``ReadOptions``).

    Raises:
        MissingObjectError: the data file or its index does not exist.
        FormatError: the index breaks a rule of the format (the message names it).
    """
    return ShuffleFile(resolve(path, storage_options), options=options)
