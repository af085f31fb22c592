"""Benchmark the shuffle file format against plain Arrow IPC files.

Run from the repository root::

    python -m benchmarks.bench_format --rows 2000000 --subpartitions 64 --repeats 5 \\
        --out benchmarks/results/format.json

It generates rows in memory (an int64 key, a float64 and a string of about 16 bytes) with
random subpartition ids and measures, for each compression:

* write: :class:`arrowshuffle.ShuffleFileWriter` against ``pyarrow.ipc.new_file`` writing the
  same batches unsorted, and against sorting the rows by subpartition and then writing them
  (the simplest other way to get a subpartition-grouped file);
* read one subpartition: ``open_file(path).read(s)`` (a new open every time) against reading
  a standalone Arrow file that holds only that subpartition's rows, and against reading the
  whole plain file and filtering it (the naive alternative);
* bytes read per byte needed by each of the three reads.

Times are medians over ``--repeats`` runs, with min and max. Files live in a temporary
directory on local disk; reads run with a warm page cache (the files were just written).
``--profile`` prints where a shuffle write spends its time (cProfile).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import platform
import pstats
import statistics
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

import arrowshuffle as ash
from benchmarks.output import write_results
from benchmarks.timing import time_calls

SUBPARTITION_COLUMN = "subpartition"


# --------------------------------------------------------------------------- data


def generate(
    rows: int, num_subpartitions: int, batch_rows: int, seed: int
) -> tuple[list[pa.RecordBatch], np.ndarray]:
    """Rows (key, value, name) and a random subpartition id per row, vectorized."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(8, 25, rows, dtype=np.int32)  # 16 bytes on average
    offsets = np.zeros(rows + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    chars = rng.integers(ord("a"), ord("z") + 1, int(offsets[-1]), dtype=np.uint8)
    names = pa.StringArray.from_buffers(rows, pa.py_buffer(offsets), pa.py_buffer(chars))
    table = pa.table(
        {
            "key": pa.array(rng.integers(0, 2**62, rows, dtype=np.int64)),
            "value": pa.array(rng.standard_normal(rows)),
            "name": names,
        }
    )
    ids = rng.integers(0, num_subpartitions, rows, dtype=np.int32)
    return table.combine_chunks().to_batches(max_chunksize=batch_rows), ids


def input_batches(
    batches: list[pa.RecordBatch], ids: np.ndarray
) -> Iterator[tuple[pa.RecordBatch, np.ndarray]]:
    start = 0
    for batch in batches:
        yield batch, ids[start : start + batch.num_rows]
        start += batch.num_rows


# --------------------------------------------------------------------------- timing


@dataclass
class Timing:
    """Seconds of every repeat, summarized."""

    seconds: list[float] = field(default_factory=list)

    @property
    def median(self) -> float:
        return statistics.median(self.seconds)

    def summary(self) -> dict[str, float]:
        return {
            "median_s": self.median,
            "min_s": min(self.seconds),
            "max_s": max(self.seconds),
        }


def measure(run: Callable[[], Any], repeats: int, warmup: int = 1) -> Timing:
    return Timing(time_calls(run, repeats, warmup))


# --------------------------------------------------------------------------- writers


def ipc_options(compression: str) -> pa.ipc.IpcWriteOptions:
    return pa.ipc.IpcWriteOptions(compression=None if compression == "none" else compression)


def write_shuffle(
    path: Path,
    batches: list[pa.RecordBatch],
    ids: np.ndarray,
    num_subpartitions: int,
    memory: str,
    compression: str,
) -> ash.WrittenFile:
    # Repeated runs write the same path, as the plain writers do theirs.
    with ash.ShuffleFileWriter(
        path,
        batches[0].schema,
        num_subpartitions,
        memory=memory,
        compression=compression,
        overwrite=True,
    ) as writer:
        for batch, batch_ids in input_batches(batches, ids):
            writer.write(batch, subpartitions=batch_ids)
    assert writer.written is not None
    return writer.written


def write_plain(path: Path, batches: list[pa.RecordBatch], compression: str) -> None:
    with (
        pa.OSFile(str(path), "wb") as sink,
        pa.ipc.new_file(sink, batches[0].schema, options=ipc_options(compression)) as writer,
    ):
        for batch in batches:
            writer.write_batch(batch)


def write_sorted(
    path: Path, batches: list[pa.RecordBatch], ids: np.ndarray, compression: str
) -> None:
    """Sort all rows by subpartition (stable), then write them: the same grouping, one region."""
    table = pa.Table.from_batches(batches)
    order = np.argsort(ids, kind="stable")
    write_plain(path, table.take(pa.array(order)).to_batches(max_chunksize=64 * 1024), compression)


def with_ids(batches: list[pa.RecordBatch], ids: np.ndarray) -> list[pa.RecordBatch]:
    """The batches plus a subpartition id column: what a naive reader filters on."""
    out = []
    for batch, batch_ids in input_batches(batches, ids):
        out.append(batch.append_column(SUBPARTITION_COLUMN, pa.array(batch_ids)))
    return out


# --------------------------------------------------------------------------- readers


def read_standalone(path: Path) -> pa.Table:
    with pa.memory_map(str(path)) as source:
        return pa.ipc.open_file(source).read_all()


def read_and_filter(path: Path, subpartition: int) -> pa.Table:
    with pa.memory_map(str(path)) as source:
        table = pa.ipc.open_file(source).read_all()
    mask = pc.equal(table.column(SUBPARTITION_COLUMN), pa.scalar(subpartition, pa.int32()))
    return table.filter(mask).drop_columns([SUBPARTITION_COLUMN])


def read_shuffle(path: Path, subpartition: int) -> pa.Table:
    with ash.open_file(path) as shuffle:
        return shuffle.read(subpartition)


# --------------------------------------------------------------------------- benchmark


def bench_compression(
    directory: Path,
    batches: list[pa.RecordBatch],
    ids: np.ndarray,
    args: argparse.Namespace,
    compression: str,
) -> dict[str, Any]:
    rows = len(ids)
    nbytes = sum(b.nbytes for b in batches)
    shuffle_path = directory / f"shuffle-{compression}.arrow"
    plain_path = directory / f"plain-{compression}.arrow"
    sorted_path = directory / f"sorted-{compression}.arrow"

    write = {
        "shuffle": measure(
            lambda: write_shuffle(
                shuffle_path, batches, ids, args.subpartitions, args.memory, compression
            ),
            args.repeats,
        ),
        "plain": measure(lambda: write_plain(plain_path, batches, compression), args.repeats),
        "sort_then_write": measure(
            lambda: write_sorted(sorted_path, batches, ids, compression), args.repeats
        ),
    }
    written = write_shuffle(
        shuffle_path, batches, ids, args.subpartitions, args.memory, compression
    )

    # Read one subpartition: the shuffle file, a file of only its rows, the naive filter.
    subpartition = args.subpartitions // 2
    expected_rows = int((ids == subpartition).sum())
    naive_path = directory / f"naive-{compression}.arrow"
    write_plain(naive_path, with_ids(batches, ids), compression)
    alone_path = directory / f"alone-{compression}.arrow"
    alone_rows = pa.Table.from_batches(batches).filter(pa.array(ids == subpartition))
    write_plain(alone_path, alone_rows.to_batches(max_chunksize=64 * 1024), compression)

    check = read_shuffle(shuffle_path, subpartition)
    assert check.num_rows == expected_rows
    assert check.equals(alone_rows), "the shuffle read differs from the standalone rows"
    assert read_and_filter(naive_path, subpartition).num_rows == expected_rows

    read = {
        "shuffle": measure(lambda: read_shuffle(shuffle_path, subpartition), args.repeats),
        "standalone": measure(lambda: read_standalone(alone_path), args.repeats),
        "read_all_and_filter": measure(
            lambda: read_and_filter(naive_path, subpartition), args.repeats
        ),
    }

    # Bytes read per byte needed: the chunks of the subpartition are what is needed.
    with ash.open_file(shuffle_path) as shuffle:
        stats = shuffle.stats()
        chunk_bytes = pc.sum(
            stats.filter(pc.equal(stats.column("subpartition"), subpartition)).column("bytes")
        ).as_py()
        blocks = shuffle.blocks(subpartition)
        fetched = sum(b.end - b.offset for b in blocks)
        requests = len(blocks)
        regions = shuffle.num_regions
    index_bytes = written.index_size
    # The index is read whole locally; a remote reader fetches header, metadata and one slice.
    amplification = {
        "needed_bytes": chunk_bytes,
        "shuffle_data_bytes": fetched,
        "shuffle_index_bytes": index_bytes,
        "shuffle_data_requests": requests,
        "shuffle_ratio": (fetched + index_bytes) / chunk_bytes,
        "standalone_bytes": alone_path.stat().st_size,
        "standalone_ratio": alone_path.stat().st_size / chunk_bytes,
        "read_all_bytes": naive_path.stat().st_size,
        "read_all_ratio": naive_path.stat().st_size / chunk_bytes,
    }
    return {
        "compression": compression,
        "rows": rows,
        "in_memory_bytes": nbytes,
        "regions": regions,
        "data_file_bytes": written.data_size,
        "plain_file_bytes": plain_path.stat().st_size,
        "index_bytes": index_bytes,
        "subpartition_rows": expected_rows,
        "write": {
            name: {
                **t.summary(),
                "rows_per_s": rows / t.median,
                "mb_per_s": nbytes / t.median / 1e6,
            }
            for name, t in write.items()
        },
        "write_ratio_shuffle_vs_plain": write["shuffle"].median / write["plain"].median,
        "write_ratio_shuffle_vs_sort_then_write": write["shuffle"].median
        / write["sort_then_write"].median,
        "read": {name: t.summary() for name, t in read.items()},
        "read_ratio_shuffle_vs_standalone": read["shuffle"].median / read["standalone"].median,
        "read_ratio_read_all_vs_shuffle": read["read_all_and_filter"].median
        / read["shuffle"].median,
        "bytes": amplification,
    }


def profile_write(
    directory: Path, batches: list[pa.RecordBatch], ids: np.ndarray, args: argparse.Namespace
) -> str:
    profiler = cProfile.Profile()
    profiler.enable()
    write_shuffle(
        directory / "profile.arrow", batches, ids, args.subpartitions, args.memory, "none"
    )
    profiler.disable()
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out)
    stats.sort_stats("tottime").print_stats(15)
    stats.sort_stats("cumulative").print_stats(15)
    return out.getvalue()


# --------------------------------------------------------------------------- report


def format_table(results: list[dict[str, Any]]) -> str:
    lines = []
    for r in results:
        c = r["compression"]
        lines.append(
            f"\n== compression={c}: {r['rows']:,} rows, {r['in_memory_bytes'] / 1e6:.1f} MB in "
            f"memory, {r['regions']} regions, data file {r['data_file_bytes'] / 1e6:.1f} MB, "
            f"index {r['index_bytes']:,} B"
        )
        lines.append(
            f"{'write':<22}{'median s':>10}{'min s':>9}{'max s':>9}{'Mrows/s':>9}{'MB/s':>8}"
        )
        for name, w in r["write"].items():
            lines.append(
                f"{name:<22}{w['median_s']:>10.3f}{w['min_s']:>9.3f}{w['max_s']:>9.3f}"
                f"{w['rows_per_s'] / 1e6:>9.2f}{w['mb_per_s']:>8.0f}"
            )
        lines.append(
            f"  shuffle / plain = {r['write_ratio_shuffle_vs_plain']:.2f}x, "
            f"shuffle / sort-then-write = {r['write_ratio_shuffle_vs_sort_then_write']:.2f}x"
        )
        lines.append(
            f"{'read 1 subpartition':<22}{'median ms':>10}{'min ms':>9}{'max ms':>9}"
            f"   ({r['subpartition_rows']:,} rows)"
        )
        for name, t in r["read"].items():
            lines.append(
                f"{name:<22}{t['median_s'] * 1e3:>10.2f}{t['min_s'] * 1e3:>9.2f}"
                f"{t['max_s'] * 1e3:>9.2f}"
            )
        b = r["bytes"]
        lines.append(
            f"  shuffle / standalone = {r['read_ratio_shuffle_vs_standalone']:.2f}x, "
            f"read-all-and-filter / shuffle = {r['read_ratio_read_all_vs_shuffle']:.1f}x"
        )
        lines.append(
            f"  bytes read / needed: shuffle {b['shuffle_ratio']:.3f} "
            f"({b['shuffle_data_requests']} data ranges + index), "
            f"standalone {b['standalone_ratio']:.3f}, read-all {b['read_all_ratio']:.1f}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--subpartitions", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--batch-rows", type=int, default=64 * 1024, help="rows per input batch")
    parser.add_argument("--memory", default="64MiB", help="the shuffle writer's sort buffer")
    parser.add_argument(
        "--compression", nargs="+", default=["none", "zstd"], choices=["none", "lz4", "zstd"]
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dir", default=None, help="where to write the files (a temp dir)")
    parser.add_argument("--out", default=None, help="write the results as JSON here")
    parser.add_argument("--profile", action="store_true", help="profile one shuffle write")
    args = parser.parse_args(argv)

    batches, ids = generate(args.rows, args.subpartitions, args.batch_rows, args.seed)
    results = []
    profile = None
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        directory = Path(tmp)
        for compression in args.compression:
            results.append(bench_compression(directory, batches, ids, args, compression))
        if args.profile:
            profile = profile_write(directory, batches, ids, args)

    print(
        f"arrowshuffle {ash.__version__}, pyarrow {pa.__version__}, {os.cpu_count()} CPUs, "
        f"rows={args.rows:,}, subpartitions={args.subpartitions}, memory={args.memory}, "
        f"input batches of {args.batch_rows:,} rows, repeats={args.repeats}"
    )
    print(format_table(results))
    if profile is not None:
        print("\n== profile of one shuffle write (compression none)\n" + profile)
    if args.out:
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        report = {
            "arguments": vars(args),
            "machine": {
                "python": sys.version.split()[0],
                "pyarrow": pa.__version__,
                "arrowshuffle": ash.__version__,
                "cpus": os.cpu_count(),
                "platform": platform.platform(),
                "load_average": os.getloadavg(),
            },
            "results": results,
        }
        write_results(out, report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
