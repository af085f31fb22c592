"""Small shuffle datasets for reader tests, and an oracle that reads them with plain pyarrow.

Every row carries its own id (``id``), the subpartition it was written to (``sp``, -1 for
broadcast rows) and the file it went into (``file``), so that what a read should return can be
computed from the data files alone, with pyarrow's own IPC reader.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import fsspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from arrowshuffle.format.manifest import Manifest
from arrowshuffle.format.naming import new_file_name
from arrowshuffle.writers.dataset_writer import commit_dataset, prepare_directory
from arrowshuffle.writers.file_writer import ShuffleFileWriter

SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("sp", pa.int32()),
        ("file", pa.int32()),
        ("value", pa.float64()),
        ("name", pa.string()),
    ]
)


@dataclass
class WrittenDataset:
    url: str
    manifest: Manifest
    data_urls: list[str]
    storage_options: dict[str, Any] | None
    num_subpartitions: int


def make_batch(
    rng: np.random.Generator, first_id: int, rows: int, file: int, sp: np.ndarray
) -> pa.RecordBatch:
    ids = np.arange(first_id, first_id + rows, dtype=np.int64)
    return pa.record_batch(
        [
            pa.array(ids),
            pa.array(sp.astype(np.int32)),
            pa.array(np.full(rows, file, dtype=np.int32)),
            pa.array(rng.standard_normal(rows)),
            pa.array([f"row-{i}" for i in ids]),
        ],
        schema=SCHEMA,
    )


def write_dataset(
    url: str,
    *,
    num_files: int = 3,
    num_subpartitions: int = 8,
    batches_per_file: int = 4,
    rows_per_batch: int = 50,
    memory: int = 4096,
    broadcast_batches: Iterable[int] = (),
    seed: int = 0,
    skew: bool = False,
    storage_options: dict[str, Any] | None = None,
    compression: str = "none",
) -> WrittenDataset:
    """Write ``num_files`` files with small regions (a small ``memory``) and commit them.

    ``broadcast_batches`` lists batch numbers (per file) written as broadcast rows instead.
    ``skew`` sends most rows to subpartition 0.
    """
    rng = np.random.default_rng(seed)
    directory = prepare_directory(url, storage_options)
    written = []
    next_id = 0
    broadcast = set(broadcast_batches)
    for f in range(num_files):
        path = directory.child(new_file_name(f)).url
        with ShuffleFileWriter(
            path,
            SCHEMA,
            num_subpartitions,
            memory=memory,
            compression=compression,
            storage_options=storage_options,
        ) as writer:
            for b in range(batches_per_file):
                if b in broadcast:
                    sp = np.full(rows_per_batch, -1)
                    writer.write_broadcast(make_batch(rng, next_id, rows_per_batch, f, sp))
                else:
                    sp = rng.integers(0, num_subpartitions, rows_per_batch)
                    if skew:
                        sp[rng.random(rows_per_batch) < 0.7] = 0
                    writer.write(make_batch(rng, next_id, rows_per_batch, f, sp), subpartitions=sp)
                next_id += rows_per_batch
        assert writer.written is not None
        written.append(writer.written)
    manifest = commit_dataset(
        directory,
        written,
        schema=SCHEMA,
        num_subpartitions=num_subpartitions,
        partitioner={"name": "explicit"},
    )
    return WrittenDataset(
        url=directory.url,
        manifest=manifest,
        data_urls=[w.data_url for w in written],
        storage_options=storage_options,
        num_subpartitions=num_subpartitions,
    )


def read_whole_file(url: str, storage_options: dict[str, Any] | None = None) -> pa.Table:
    """Every row of a data file, read with pyarrow's IPC file reader (no arrowshuffle code)."""
    with fsspec.open(url, "rb", **(storage_options or {})) as f:
        return pa.ipc.open_file(pa.py_buffer(f.read())).read_all()


def expected_rows(tables: list[pa.Table], selection: Iterable[int]) -> pa.Table:
    """The rows a read of ``selection`` returns from these files, in no particular order.

    A regular row comes back if its subpartition is selected; a broadcast row once for every
    selected subpartition.
    """
    chosen = sorted(set(selection))
    parts = []
    for table in tables:
        regular = table.filter(pc.is_in(table["sp"], pa.array(chosen, pa.int32())))
        parts.append(regular)
        broadcast = table.filter(pc.equal(table["sp"], -1))
        parts.extend([broadcast] * len(chosen))
    if not parts:
        return SCHEMA.empty_table()
    return pa.concat_tables(parts)


def canonical(table: pa.Table) -> pa.Table:
    """Rows sorted by id, for comparing multisets of rows (rows with one id are identical)."""
    return table.sort_by([("id", "ascending")])
