"""The layout of a shuffle file as tables: chunks, per-subpartition totals and skew.

These are the numbers behind ``arrowshuffle inspect`` and the layout notebooks. Only the index
is read, never the data.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from arrowshuffle.format.errors import InvalidOptionError
from arrowshuffle.format.index import REGION_BROADCAST
from arrowshuffle.readers.file_reader import ShuffleFile

LAYOUT_SCHEMA = pa.schema(
    [
        pa.field("region", pa.int64(), nullable=False),
        pa.field("subpartition", pa.int64(), nullable=False),
        pa.field("broadcast", pa.bool_(), nullable=False),
        pa.field("offset", pa.int64(), nullable=False),
        pa.field("bytes", pa.int64(), nullable=False),
        pa.field("rows", pa.int64(), nullable=False),
        pa.field("batches", pa.int64(), nullable=False),
    ]
)


def file_layout(shuffle_file: ShuffleFile) -> pa.Table:
    """One row per (region, subpartition) chunk, region-major, as the index declares it.

    A broadcast region's chunk appears once per subpartition (every entry points at it), with
    ``broadcast`` set; sum ``bytes`` over ``broadcast == False`` rows plus each broadcast
    region once for the bytes stored.

    Args:
        shuffle_file: an opened file (:func:`arrowshuffle.open_file`).

    Returns:
        A table with the columns of :data:`LAYOUT_SCHEMA`.

    Raises:
        InvalidOptionError: ``shuffle_file`` is not an opened :class:`ShuffleFile`.
    """
    if not isinstance(shuffle_file, ShuffleFile):
        raise InvalidOptionError(
            "file_layout() takes an opened ShuffleFile (arrowshuffle.open_file(path)), "
            f"found {type(shuffle_file).__name__}"
        )
    entries = shuffle_file.entries()  # (subpartitions, regions)
    num_subpartitions, num_regions = entries.shape
    by_region = entries.T.reshape(-1)  # region-major
    broadcast = (shuffle_file.meta.regions["flags"] & REGION_BROADCAST) != 0
    return pa.table(
        {
            "region": np.repeat(np.arange(num_regions, dtype=np.int64), num_subpartitions),
            "subpartition": np.tile(np.arange(num_subpartitions, dtype=np.int64), num_regions),
            "broadcast": np.repeat(broadcast, num_subpartitions),
            "offset": by_region["offset"].astype(np.int64),
            "bytes": by_region["length"].astype(np.int64),
            "rows": by_region["rows"].astype(np.int64),
            "batches": by_region["batches"].astype(np.int64),
        },
        schema=LAYOUT_SCHEMA,
    )


def subpartition_totals(layout: pa.Table, num_subpartitions: int) -> pa.Table:
    """What a reader of each subpartition reads: rows, bytes and non-empty chunks.

    Broadcast chunks count for every subpartition, since each of their readers receives them.

    Args:
        layout: a table from :func:`file_layout`.
        num_subpartitions: the file's subpartition count (subpartitions with no chunks get 0).
    """
    sub = layout.column("subpartition").to_numpy()
    rows = np.zeros(num_subpartitions, dtype=np.int64)
    nbytes = np.zeros(num_subpartitions, dtype=np.int64)
    chunks = np.zeros(num_subpartitions, dtype=np.int64)
    np.add.at(rows, sub, layout.column("rows").to_numpy())
    np.add.at(nbytes, sub, layout.column("bytes").to_numpy())
    np.add.at(chunks, sub, (layout.column("bytes").to_numpy() > 0).astype(np.int64))
    return pa.table(
        {
            "subpartition": np.arange(num_subpartitions, dtype=np.int64),
            "rows": rows,
            "bytes": nbytes,
            "chunks": chunks,
        }
    )


def skew(rows: Any) -> float | None:
    """Max over mean of per-subpartition row counts; None when there are no rows.

    1.0 means perfectly even; ``k`` means the busiest subpartition has ``k`` times the mean.
    """
    values = np.asarray(rows, dtype=np.float64)
    if values.size == 0:
        return None
    mean = float(values.mean())
    return None if mean == 0 else float(values.max()) / mean


def layout_summary(shuffle_file: ShuffleFile) -> dict[str, Any]:
    """A JSON-serializable description of a file: counts, sizes, skew, per-subpartition totals."""
    layout = file_layout(shuffle_file)
    totals = subpartition_totals(layout, shuffle_file.num_subpartitions)
    regions = shuffle_file.meta.regions
    broadcast = (regions["flags"] & REGION_BROADCAST) != 0
    header = shuffle_file.header
    entries = shuffle_file.entries()
    region_rows = np.where(
        broadcast, entries["rows"][0], entries["rows"].sum(axis=0, dtype=np.uint64)
    ).astype(np.int64)
    return {
        "url": shuffle_file.url,
        "format_version": f"{header.version[0]}.{header.version[1]}",
        "regions": shuffle_file.num_regions,
        "broadcast_regions": int(broadcast.sum()),
        "subpartitions": shuffle_file.num_subpartitions,
        "rows": shuffle_file.num_rows,
        "data_bytes": header.data_length,
        "index_bytes": header.index_length,
        "compression": shuffle_file.compression,
        "partitioner": shuffle_file.partitioner,
        "skew": skew(totals.column("rows").to_numpy()),
        "region_table": [
            {
                "region": r,
                "offset": int(regions["offset"][r]),
                "bytes": int(regions["length"][r]),
                "rows": int(region_rows[r]),
                "broadcast": bool(broadcast[r]),
            }
            for r in range(len(regions))
        ],
        "per_subpartition": totals.to_pylist(),
    }
