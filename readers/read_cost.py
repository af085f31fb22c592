"""What one consumer of a dataset pays in requests: the advice of ``arrowshuffle inspect``.

A consumer of an even split reads ``N / C`` contiguous subpartitions of every file: one index
slice per file (one request when the index is at most 64 KiB, else two) and one ranged read per
region that holds any of its chunks (a broadcast region once), plus the manifest. Neighbouring
ranges that a reader merges make the real count lower; this estimate is the count before merging.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from arrowshuffle.format.notation import format_size
from arrowshuffle.readers.dataset import ShuffleDataset
from arrowshuffle.readers.file_reader import INDEX_PREFIX_BYTES

#: Subpartitions per consumer of the even split the estimate assumes (C = N / 8 consumers).
SUBPARTITIONS_PER_CONSUMER = 8
#: Below this average chunk size, compaction is suggested for datasets on object stores...
SMALL_CHUNK_REMOTE = 1024 * 1024
#: ... and below this one for local datasets too (a local read costs little per chunk).
SMALL_CHUNK_LOCAL = 16 * 1024


def read_cost(dataset: ShuffleDataset, layout: pa.Table) -> dict[str, Any]:
    """Average chunk size and estimated requests per consumer, with a compaction suggestion.

    Args:
        dataset: the opened dataset.
        layout: its :func:`~arrowshuffle.readers.layout.dataset_layout`.

    Returns:
        ``avg_chunk_bytes`` (non-empty chunks, a broadcast chunk once), ``consumers`` (C),
        ``subpartitions_per_consumer``, ``index_requests``, ``data_requests`` and
        ``requests_per_consumer`` (averages over the C consumers, the manifest included),
        ``suggest_compaction`` and ``advice`` (a sentence, or None).
    """
    n = dataset.num_subpartitions
    width = min(n, SUBPARTITIONS_PER_CONSUMER)
    consumers = -(-n // width)
    files = layout.column("file").to_numpy()
    regions = layout.column("region").to_numpy()
    sub = layout.column("subpartition").to_numpy()
    size = layout.column("bytes").to_numpy()
    broadcast = layout.column("broadcast").to_numpy(zero_copy_only=False)
    distinct = (size > 0) & (~broadcast | (sub == 0))
    chunks = int(distinct.sum())
    avg = float(size[distinct].sum() / chunks) if chunks else 0.0
    regular = (size > 0) & ~broadcast
    stride = np.int64(max(1, int(regions.max(initial=0)) + 1))
    keys = (files[regular].astype(np.int64) * stride + regions[regular]) * consumers + (
        sub[regular] // width
    )
    data = np.unique(keys).size / consumers + int(((size > 0) & broadcast & (sub == 0)).sum())
    index = sum(1 if f.index_size <= INDEX_PREFIX_BYTES else 2 for f in dataset.manifest.files)
    remote = not dataset.directory.is_local
    threshold = SMALL_CHUNK_REMOTE if remote else SMALL_CHUNK_LOCAL
    suggest = dataset.num_files > 1 and chunks > 0 and avg < threshold
    advice = None
    if suggest:
        where = "on object stores" if remote else "even on local disk"
        advice = (
            f"chunks average {format_size(int(avg))}, below {format_size(threshold)} {where}: "
            f"`arrowshuffle compact {dataset.url}` merges files so that a consumer makes one "
            "read per region instead of one per file and region"
        )
    return {
        "avg_chunk_bytes": round(avg, 1),
        "chunks": chunks,
        "consumers": consumers,
        "subpartitions_per_consumer": width,
        "index_requests": index,
        "data_requests": round(data, 1),
        "requests_per_consumer": round(1 + index + data, 1),
        "suggest_compaction": suggest,
        "advice": advice,
    }
