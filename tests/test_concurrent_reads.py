"""One ShuffleDataset object shared by 8 threads gives each of them the single-threaded result.

Files are opened lazily and index slices cached on first use, so the first reads of many
threads race to open the same files and fill the same caches.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from dataset_factory import canonical, write_dataset

import arrowshuffle as ash

THREADS = 8


def reads_in_threads(dataset: Any, selections: list[Any]) -> list[pa.Table]:
    """Run one read per selection, all in their own thread, started together."""
    barrier = threading.Barrier(len(selections))
    results: list[pa.Table | BaseException | None] = [None] * len(selections)

    def run(i: int) -> None:
        barrier.wait()
        try:
            results[i] = dataset.read(selections[i])
        except BaseException as exc:  # reported by the caller
            results[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(selections))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
        assert not t.is_alive(), "a concurrent read hung"
    for r in results:
        if isinstance(r, BaseException):
            raise r
    return [r for r in results if isinstance(r, pa.Table)]


def selections(num_subpartitions: int) -> list[Any]:
    """Overlapping selections: single subpartitions, ranges, lists and everything."""
    n = num_subpartitions
    return [0, n - 1, range(1, n - 1), [0, 2, 5], None, range(n), 3, [n - 1, 1]][:THREADS]


def check_dataset(url: str, storage_options: dict[str, Any] | None) -> None:
    chosen = selections(8)
    expected = [canonical(ash.open_dataset(url, storage_options).read(s)) for s in chosen]
    shared = ash.open_dataset(url, storage_options)  # one object, nothing opened yet
    for _ in range(2):  # the second round runs on warm caches
        got = reads_in_threads(shared, chosen)
        for want, table in zip(expected, got, strict=True):
            assert canonical(table).equals(want)


def test_eight_threads_share_one_local_dataset(tmp_path: Path) -> None:
    written = write_dataset(str(tmp_path / "ds"), num_files=6, broadcast_batches=[2], seed=3)
    check_dataset(written.url, None)


@pytest.mark.s3
def test_eight_threads_share_one_dataset_on_object_storage(
    s3_endpoint: Any, s3_bucket: str
) -> None:
    options = s3_endpoint.storage_options()
    written = write_dataset(
        f"{s3_bucket}/ds", num_files=4, broadcast_batches=[1], seed=5, storage_options=options
    )
    check_dataset(written.url, options)
