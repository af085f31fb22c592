"""The layout of a shuffle file or dataset as tables: chunks, per-subpartition totals and skew.

A *layout* is a table with one row per chunk (:func:`file_layout`, :func:`dataset_layout`); a
*summary* is a JSON-serializable description built on it (:func:`file_summary`,
:func:`dataset_summary`). These are the numbers behind ``arrowshuffle inspect`` and the layout
notebooks. Only manifests and indexes are read, never the data.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, as_completed
from typing import Any

import numpy as np
import pyarrow as pa

from arrowshuffle.format.errors import InvalidOptionError
from arrowshuffle.format.index import REGION_BROADCAST
from arrowshuffle.readers.dataset import ShuffleDataset
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

#: The columns of :func:`dataset_layout`: the file's position in the manifest, then the
#: columns of :data:`LAYOUT_SCHEMA`.
DATASET_LAYOUT_SCHEMA = pa.schema([pa.field("file", pa.int64(), nullable=False), *LAYOUT_SCHEMA])

#: Called after each file's index is read: (files done, files in total, data file name).
Progress = Callable[[int, int, str], None]

#: Indexes fetched at the same time on object stores.
DEFAULT_WORKERS = 8


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


def file_summary(shuffle_file: ShuffleFile) -> dict[str, Any]:
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


def dataset_layout(
    dataset: ShuffleDataset,
    *,
    progress: Progress | None = None,
    workers: int = DEFAULT_WORKERS,
) -> pa.Table:
    """One row per (file, region, subpartition) chunk, file by file in manifest order.

    Within a file the rows are those of :func:`file_layout`
    (region-major; a broadcast chunk appears once per subpartition, flagged ``broadcast``).

    Args:
        dataset: an opened dataset (:func:`arrowshuffle.open_dataset`).
        progress: called after each file with (files done, files in total, file name).
        workers: indexes read at the same time on object stores (local: one at a time).

    Returns:
        A table with the columns of :data:`DATASET_LAYOUT_SCHEMA`.
    """
    total = dataset.num_files
    names = [f.data for f in dataset.manifest.files]

    def one(i: int) -> pa.Table:
        layout = file_layout(dataset.file(i))
        column = pa.array(np.full(layout.num_rows, i, dtype=np.int64))
        return layout.add_column(0, DATASET_LAYOUT_SCHEMA.field("file"), column)

    tables: dict[int, pa.Table] = {}
    if dataset.directory.is_local or total < 2:
        for i in range(total):
            tables[i] = one(i)
            if progress is not None:
                progress(i + 1, total, names[i])
    else:
        with ThreadPoolExecutor(max(1, min(workers, total))) as pool:
            futures = {pool.submit(one, i): i for i in range(total)}
            for done, future in enumerate(as_completed(futures), start=1):
                i = futures[future]
                tables[i] = future.result()
                if progress is not None:
                    progress(done, total, names[i])
    if not tables:
        return DATASET_LAYOUT_SCHEMA.empty_table()
    return pa.concat_tables([tables[i] for i in range(total)])


def dataset_summary(
    dataset: ShuffleDataset,
    layout: pa.Table | None = None,
    *,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """A JSON-serializable description of a dataset: counts, sizes, skew and totals.

    ``per_subpartition`` sums what a reader of each subpartition receives over all files
    (broadcast chunks included, as for one file); ``skew`` is max over mean of those rows.
    ``per_file`` gives each file's regions, rows, bytes and own skew.

    Args:
        dataset: an opened dataset.
        layout: its :func:`dataset_layout`, when already at hand (else it is read).
        progress: passed to :func:`dataset_layout` when the layout is read here.
    """
    if layout is None:
        layout = dataset_layout(dataset, progress=progress)
    n = dataset.num_subpartitions
    totals = subpartition_totals(layout, n)
    files = layout.column("file").to_numpy()
    sub = layout.column("subpartition").to_numpy()
    rows = layout.column("rows").to_numpy()
    per_file_rows = np.zeros((dataset.num_files, n), dtype=np.int64)
    np.add.at(per_file_rows, (files, sub), rows)
    per_file = []
    compressions: set[str] = set()
    broadcast_regions = 0
    for i, entry in enumerate(dataset.manifest.files):
        shuffle_file = dataset.file(i)
        compressions.add(shuffle_file.compression)
        broadcast_regions += int(
            ((shuffle_file.meta.regions["flags"] & REGION_BROADCAST) != 0).sum()
        )
        per_file.append(
            {
                "file": i,
                "name": entry.data,
                "regions": entry.regions,
                "rows": entry.rows,
                "data_bytes": entry.data_size,
                "index_bytes": entry.index_size,
                "compression": shuffle_file.compression,
                "skew": skew(per_file_rows[i]),
            }
        )
    return {
        "kind": "dataset",
        "url": dataset.url,
        "files": dataset.num_files,
        "regions": sum(f.regions for f in dataset.manifest.files),
        "broadcast_regions": broadcast_regions,
        "subpartitions": n,
        "rows": dataset.num_rows,
        "data_bytes": sum(f.data_size for f in dataset.manifest.files),
        "index_bytes": sum(f.index_size for f in dataset.manifest.files),
        "compression": sorted(compressions),
        "partitioner": dataset.partitioner,
        "skew": skew(totals.column("rows").to_numpy()),
        "per_file": per_file,
        "per_subpartition": totals.to_pylist(),
    }
