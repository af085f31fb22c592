"""The numbered validation rules of ``spec.md`` and the pure checks of a decoded index.

Rules V1-V7 are enforced while decoding (:mod:`arrowshuffle.format.index` raises); V8-V12 and
V20 are checked here on a decoded index; V13-V19 need the data file and live with the readers.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from arrowshuffle.format.index import REGION_BROADCAST, ShuffleIndex

RULES: dict[str, str] = {
    "V1": "the index starts with the magic ASHUFIDX and ends with the trailer magic ASHUFEND",
    "V2": "the major format version is supported and no unknown required flag is set",
    "V3": "the header CRC32C matches the header",
    "V4": "the section sizes add up and the index object has exactly the declared length",
    "V5": "the metadata CRC32C matches the schema, partitioner, region and CRC tables",
    "V6": "every subpartition's entry block and the whole index match their CRC32Cs",
    "V7": "the schema is an Arrow IPC schema message and the partitioner spec a JSON object",
    "V8": "every chunk lies inside the data file",
    "V9": "in a regular region, chunks are contiguous in ascending subpartition order and "
    "fill the region; regions are in ascending order and do not overlap",
    "V10": "in a broadcast region, every subpartition's entry is the region's single chunk",
    "V11": "a chunk has no bytes, no batches and no rows, or all three",
    "V12": "the header's total row count equals the rows of the entries",
    "V13": "the data file is an Arrow IPC file of exactly the length the index declares",
    "V14": "the data file carries the index's file id (the two belong together)",
    "V15": "the data file's schema equals the index's schema",
    "V16": "every chunk's bytes match the chunk's CRC32C (deep)",
    "V17": "every chunk decodes into its declared batches and rows with the file's schema (deep)",
    "V18": "the data file holds exactly the indexed batches and rows (deep)",
    "V19": "every row lies in the subpartition its partitioner assigns it (deep)",
    "V20": "no undefined region flag bit is set and every reserved field is zero",
}


@dataclass(frozen=True)
class Violation:
    """One broken rule, with a message that names what was expected and what was found."""

    rule: str
    message: str

    def __str__(self) -> str:
        return f"[{self.rule}] {self.message}"


def first_index(mask: np.ndarray) -> tuple[int, ...]:
    """The index of the first True of a boolean array, as a tuple of ints."""
    return tuple(int(i) for i in np.argwhere(mask)[0])


def check_index(index: ShuffleIndex) -> list[Violation]:
    """Check rules V8-V12 on a decoded index. Vectorized; returns every rule broken once."""
    found: list[Violation] = []
    entries = index.entries
    data_length = index.header.data_length
    outside = chunks_outside_file(entries, data_length)
    if outside is not None:
        found.append(outside)
    else:  # a chunk outside the file already says the layout is broken
        found.extend(_check_region_layout(index))
    half_empty = half_empty_chunk(entries)
    if half_empty is not None:
        found.append(half_empty)
    found.extend(_check_reserved(index))
    broadcast = index.broadcast_regions
    rows = entries["rows"].sum(axis=0, dtype=np.uint64) if entries.size else np.zeros(0)
    if entries.size and broadcast.any():
        rows = rows.copy()
        rows[broadcast] = entries["rows"][0, broadcast]
    total = int(np.sum(rows, dtype=np.uint64))
    if total != index.header.total_rows:
        found.append(
            Violation(
                "V12",
                f"header declares {index.header.total_rows} rows, the entries hold {total}",
            )
        )
    return found


def chunks_outside_file(entries: np.ndarray, data_length: int, first: int = 0) -> Violation | None:
    """V8: the first entry whose chunk does not lie inside the data file.

    ``entries`` has one row per subpartition from ``first`` on; ``offset + length`` is never
    computed for the comparison, since it could wrap around in uint64.
    """
    if entries.size == 0:
        return None
    offsets = entries["offset"]
    lengths = entries["length"]
    past = (offsets > data_length) | (lengths > data_length - np.minimum(offsets, data_length))
    if not past.any():
        return None
    i, r = first_index(past)
    return Violation(
        "V8",
        f"chunk (region {r}, subpartition {first + i}) ends at byte "
        f"{int(offsets[i, r]) + int(lengths[i, r])}, past the data file's {data_length} bytes",
    )


def half_empty_chunk(entries: np.ndarray, first: int = 0) -> Violation | None:
    """V11: the first entry that has some but not all of bytes, batches and rows.

    The writer writes no record batch without rows, so an empty chunk has none of the three.
    """
    if entries.size == 0:
        return None
    has_batches = entries["batches"] > 0
    bad = ((entries["length"] > 0) != has_batches) | ((entries["rows"] > 0) != has_batches)
    if not bad.any():
        return None
    i, r = first_index(bad)
    e = entries[i, r]
    return Violation(
        "V11",
        f"chunk (region {r}, subpartition {first + i}) has {int(e['length'])} bytes, "
        f"{int(e['batches'])} batches and {int(e['rows'])} rows; expected all three zero or all "
        "three non-zero",
    )


def undefined_region_flags(regions: np.ndarray) -> Violation | None:
    """V20 for a region table: the first region with a flag bit v1 does not define."""
    undefined = (regions["flags"] & ~np.uint32(REGION_BROADCAST)) != 0
    if not undefined.any():
        return None
    r = int(np.argmax(undefined))
    return Violation(
        "V20",
        f"region {r} has flags {int(regions['flags'][r]):#x}; v1 defines only bit 0 (broadcast)",
    )


def region_placement(regions: np.ndarray, data_length: int) -> Violation | None:
    """The first region outside the data file (V8), else the first that starts too early (V9).

    Compared without computing ``offset + length`` before the regions are known to lie inside
    the file, where it could wrap around in uint64.
    """
    if len(regions) == 0:
        return None
    starts = regions["offset"]
    lengths = regions["length"]
    outside = (starts > data_length) | (lengths > data_length - np.minimum(starts, data_length))
    if outside.any():
        r = int(np.argmax(outside))
        return Violation(
            "V8",
            f"region {r} ends at byte {int(starts[r]) + int(lengths[r])}, past the data file's "
            f"{data_length} bytes",
        )
    overlap = starts[1:] < starts[:-1] + lengths[:-1]
    if not overlap.any():
        return None
    r = int(np.argmax(overlap)) + 1
    return Violation(
        "V9",
        f"region {r} starts at byte {int(starts[r])}, before region {r - 1} ends at byte "
        f"{int(starts[r - 1]) + int(lengths[r - 1])}",
    )


def _check_reserved(index: ShuffleIndex) -> list[Violation]:
    """V20: region flags use only defined bits; reserved words are zero.

    v1 defines region flag bit 0 only, and a minor version may not define more (section 10):
    a set bit means a writer that does not follow the format, whose regions cannot be trusted.
    """
    regions = index.meta.regions
    flags = undefined_region_flags(regions)
    if flags is not None:
        return [flags]
    reserved = regions["reserved"] != 0
    if reserved.any():
        r = int(np.argmax(reserved))
        return [
            Violation(
                "V20",
                f"region {r}'s reserved word is {int(regions['reserved'][r]):#x}, expected 0",
            )
        ]
    if index.trailer_reserved != 0:
        return [
            Violation(
                "V20", f"the trailer's reserved word is {index.trailer_reserved:#x}, expected 0"
            )
        ]
    return []


def _check_region_layout(index: ShuffleIndex) -> list[Violation]:
    found: list[Violation] = []
    entries = index.entries
    regions = index.meta.regions
    if len(regions) == 0:
        return found
    placement = region_placement(regions, index.header.data_length)
    if placement is not None:
        found.append(placement)
        if placement.rule == "V8":
            return found  # the byte arithmetic below assumes regions inside the file
    broadcast = index.broadcast_regions
    regular = ~broadcast
    if regular.any():
        e = entries[:, regular]
        starts = e["offset"]
        lengths = e["length"]
        expected_starts = regions["offset"][regular][None, :] + np.concatenate(
            [np.zeros((1, e.shape[1]), dtype=np.uint64), np.cumsum(lengths, axis=0)[:-1]]
        )
        misplaced = starts != expected_starts
        if misplaced.any():
            s, col = first_index(misplaced)
            r = int(np.flatnonzero(regular)[col])
            found.append(
                Violation(
                    "V9",
                    f"chunk (region {r}, subpartition {s}) starts at byte {int(starts[s, col])}, "
                    f"expected {int(expected_starts[s, col])} (right after the previous chunk)",
                )
            )
        filled = lengths.sum(axis=0, dtype=np.uint64) != regions["length"][regular]
        if filled.any():
            col = int(np.argmax(filled))
            r = int(np.flatnonzero(regular)[col])
            found.append(
                Violation(
                    "V9",
                    f"region {r} is {int(regions['length'][r])} bytes, its chunks add up to "
                    f"{int(lengths[:, col].sum())}",
                )
            )
    if broadcast.any():
        b = entries[:, broadcast]
        reg = regions[broadcast]
        mismatch = (
            (b != b[0:1, :]).any(axis=0)
            | (b[0]["offset"] != reg["offset"])
            | (b[0]["length"] != reg["length"])
        )
        if mismatch.any():
            r = int(np.flatnonzero(broadcast)[int(np.argmax(mismatch))])
            found.append(
                Violation(
                    "V10",
                    f"broadcast region {r}: expected every subpartition's entry to be the "
                    "region's single chunk, found differing entries",
                )
            )
    return found
