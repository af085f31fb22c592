"""The layout of a dataset as tables: every file's chunks, totals over all files, and skew.

The dataset-level counterpart of :mod:`arrowshuffle.readers.layout`: the numbers behind
``arrowshuffle inspect DATASET`` and the layout notebooks. Only the manifest and the indexes
are read, never the data.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, as_completed
from typing import Any

import numpy as np
import pyarrow as pa

from arrowshuffle.format.index import REGION_BROADCAST
from arrowshuffle.readers.dataset import ShuffleDataset
from arrowshuffle.readers.layout import LAYOUT_SCHEMA, file_layout, skew, subpartition_totals

#: The columns of :func:`dataset_layout`: the file's position in the manifest, then the
#: columns of :data:`~arrowshuffle.readers.layout.LAYOUT_SCHEMA`.
DATASET_LAYOUT_SCHEMA = pa.schema([pa.field("file", pa.int64(), nullable=False), *LAYOUT_SCHEMA])

#: Called after each file's index is read: (files done, files in total, data file name).
Progress = Callable[[int, int, str], None]

#: Indexes fetched at the same time on object stores.
DEFAULT_WORKERS = 8


def dataset_layout(
    dataset: ShuffleDataset,
    *,
    progress: Progress | None = None,
    workers: int = DEFAULT_WORKERS,
) -> pa.Table:
    """One row per (file, region, subpartition) chunk, file by file in manifest order.

    Within a file the rows are those of :func:`~arrowshuffle.readers.layout.file_layout`
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
