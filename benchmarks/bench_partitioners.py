"""Benchmark the partitioners against polars' hashing, and the memory of a bounded write.

Run from the repository root::

    python -m benchmarks.bench_partitioners --rows 2000000 --repeats 5 \\
        --size 256MiB --out benchmarks/results/partitioners.json

Part 1, throughput. It generates ``--rows`` rows in memory: an int64 key, a string key of
about 16 bytes (random lengths 0..32) and a small integer column of precomputed subpartition
ids, cut into batches of 65536 rows as a writer receives them. For each key set (``int64``,
``string``, and the two columns together, ``int64+string``) it times every partitioner's
``assign`` over all batches, and on the same batches polars ``Series.hash`` (one key) or
``DataFrame.hash_rows`` (two keys), converted to polars before timing. Rows/s are taken from
the median of ``--repeats`` passes; ``x polars`` is the partitioner's rows/s over polars'.
``range`` takes one key and is skipped for two; ``broadcast`` assigns nothing (its rows are
stored once) and is not timed; ``column`` reads the precomputed ids whatever the key set.

Part 2, memory. A child process streams ``--size`` bytes of generated rows (same columns,
generated batch by batch, never materialized) through ``arrowshuffle.write`` with a hash
partitioner, 64 subpartitions, LZ4 and a ``--pool`` memory pool (256 MiB by default), into a
temporary directory. It reports its peak RSS (``getrusage``), its RSS before the write, the
peak of Arrow's allocated bytes, elapsed time and regions written.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from benchmarks.output import write_results
from benchmarks.timing import median, time_calls

BATCH_ROWS = 65536
NUM_SUBPARTITIONS = 64
KEY_SETS: dict[str, list[str]] = {
    "int64": ["k"],
    "string": ["s"],
    "int64+string": ["k", "s"],
}
PARTITIONERS = [
    "hash",
    "key_group",
    "range",
    "round_robin",
    "random",
    "rescale",
    "forward",
    "global",
    "column",
    "broadcast",
]
MiB = 1024 * 1024


# --------------------------------------------------------------------------- data


def generate_batch(rows: int, rng: np.random.Generator) -> pa.RecordBatch:
    """An int64 key, a string key of 16 bytes on average, a float and precomputed ids."""
    lengths = rng.integers(0, 33, rows, dtype=np.int32)
    offsets = np.zeros(rows + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    chars = rng.integers(ord("a"), ord("z") + 1, int(offsets[-1]), dtype=np.uint8)
    strings = pa.StringArray.from_buffers(rows, pa.py_buffer(offsets), pa.py_buffer(chars))
    return pa.record_batch(
        {
            "k": pa.array(rng.integers(-(2**62), 2**62, rows, dtype=np.int64)),
            "s": strings,
            "x": pa.array(rng.standard_normal(rows)),
            "pid": pa.array(rng.integers(0, NUM_SUBPARTITIONS, rows, dtype=np.int32)),
        }
    )


def generate(rows: int, seed: int) -> list[pa.RecordBatch]:
    rng = np.random.default_rng(seed)
    batches = []
    for start in range(0, rows, BATCH_ROWS):
        batches.append(generate_batch(min(BATCH_ROWS, rows - start), rng))
    return batches


# --------------------------------------------------------------------------- throughput


def median_seconds(run: Callable[[], object], repeats: int) -> tuple[float, float, float]:
    times = time_calls(run, repeats)
    return median(times), min(times), max(times)


def options_for(name: str, keys: list[str]) -> dict[str, Any] | None:
    if name in ("hash", "key_group"):
        return {"by": keys}
    if name == "range":
        return {"by": keys[0]} if len(keys) == 1 else None
    if name == "column":
        return {"by": "pid"}
    if name == "rescale":
        return {"producer_index": 1, "num_producers": 4}
    if name == "forward":
        return {"producer_index": 0}
    if name in ("round_robin", "random"):
        return {"seed": 1}
    return {}


def bench_throughput(batches: list[pa.RecordBatch], repeats: int) -> list[dict[str, Any]]:
    import polars as pl

    from arrowshuffle.format.partitioners import make_partitioner

    rows = sum(b.num_rows for b in batches)
    results: list[dict[str, Any]] = []
    for key_set, keys in KEY_SETS.items():
        frames = [pl.from_arrow(b.select(keys)) for b in batches]
        if len(keys) == 1:

            def polars_run(frames: list[Any] = frames, key: str = keys[0]) -> None:
                for frame in frames:
                    frame.get_column(key).hash()

            polars_name = "polars Series.hash"
        else:

            def polars_run(frames: list[Any] = frames, key: str = "") -> None:
                for frame in frames:
                    frame.hash_rows()

            polars_name = "polars DataFrame.hash_rows"
        polars_median, polars_min, polars_max = median_seconds(polars_run, repeats)
        polars_rate = rows / polars_median
        results.append(
            {
                "key_set": key_set,
                "partitioner": polars_name,
                "rows": rows,
                "median_s": polars_median,
                "min_s": polars_min,
                "max_s": polars_max,
                "rows_per_s": polars_rate,
                "x_polars": 1.0,
            }
        )
        for name in PARTITIONERS:
            options = options_for(name, keys)
            if options is None or name == "broadcast":
                results.append(
                    {"key_set": key_set, "partitioner": name, "rows": rows, "skipped": True}
                )
                continue
            partitioner = make_partitioner(name, num_subpartitions=NUM_SUBPARTITIONS, **options)

            def run(p: Any = partitioner) -> None:
                for batch in batches:
                    p.assign(batch)

            run()  # warm up (and fix range boundaries from the first batch)
            median, low, high = median_seconds(run, repeats)
            results.append(
                {
                    "key_set": key_set,
                    "partitioner": name,
                    "rows": rows,
                    "median_s": median,
                    "min_s": low,
                    "max_s": high,
                    "rows_per_s": rows / median,
                    "x_polars": (rows / median) / polars_rate,
                }
            )
    return results


# --------------------------------------------------------------------------- memory


def rss_bytes() -> int:
    """The current resident set size, from /proc (Linux)."""
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def peak_rss_bytes() -> int:
    """The peak resident set size of this process (``ru_maxrss`` is KiB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def memory_child(size: int, pool_bytes: int, directory: str) -> dict[str, Any]:
    """Run in a fresh process: stream ``size`` bytes of rows through ``write``."""
    import arrowshuffle as ash
    from arrowshuffle.writers.api import write
    from arrowshuffle.writers.memory_pool import MemoryPool

    rng = np.random.default_rng(0)
    template = generate_batch(BATCH_ROWS, rng)
    batch_bytes = template.nbytes
    count = max(1, size // batch_bytes)

    def batches() -> Iterator[pa.RecordBatch]:
        for _ in range(count):
            yield generate_batch(BATCH_ROWS, rng)

    del template
    reader = pa.RecordBatchReader.from_batches(generate_batch(1, rng).schema, batches())
    arrow_peak = [pa.total_allocated_bytes()]
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            arrow_peak[0] = max(arrow_peak[0], pa.total_allocated_bytes())
            done.wait(0.002)

    watcher = threading.Thread(target=watch, daemon=True)
    rss_before = rss_bytes()
    peak_before = peak_rss_bytes()
    watcher.start()
    start = time.perf_counter()
    written = write(
        reader,
        Path(directory) / "part-0.arrow",
        num_subpartitions=NUM_SUBPARTITIONS,
        by="k",
        compression="lz4",
        memory_pool=MemoryPool(pool_bytes),
        memory=0,
    )
    elapsed = time.perf_counter() - start
    done.set()
    watcher.join()
    return {
        "input_bytes": count * batch_bytes,
        "batches": count,
        "batch_bytes": batch_bytes,
        "pool_bytes": pool_bytes,
        "elapsed_s": elapsed,
        "input_mib_per_s": count * batch_bytes / MiB / elapsed,
        "regions": written.regions,
        "rows": written.rows,
        "data_bytes": written.data_size,
        "rss_before_write": rss_before,
        "peak_rss_before_write": peak_before,
        "peak_rss": peak_rss_bytes(),
        "peak_rss_above_start": peak_rss_bytes() - rss_before,
        "peak_arrow_allocated": arrow_peak[0],
        "version": ash.__version__,
    }


def bench_memory(size: int, pool_bytes: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as directory:
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "benchmarks.bench_partitioners",
                "--memory-child",
                directory,
                "--size",
                str(size),
                "--pool",
                str(pool_bytes),
            ],
            capture_output=True,
            text=True,
            check=True,
        )
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


# --------------------------------------------------------------------------- report


def print_table(results: list[dict[str, Any]], memory: dict[str, Any] | None) -> None:
    print(f"{'key set':<14} {'partitioner':<28} {'Mrows/s':>9} {'median ms':>10} {'x polars':>9}")
    for r in results:
        if r.get("skipped"):
            print(f"{r['key_set']:<14} {r['partitioner']:<28} {'n/a':>9}")
            continue
        print(
            f"{r['key_set']:<14} {r['partitioner']:<28} {r['rows_per_s'] / 1e6:>9.2f} "
            f"{r['median_s'] * 1e3:>10.1f} {r['x_polars']:>9.2f}"
        )
    if memory:
        print()
        print(
            f"write of {memory['input_bytes'] / MiB:.0f} MiB ({memory['rows']} rows) with a "
            f"{memory['pool_bytes'] / MiB:.0f} MiB pool: peak RSS "
            f"{memory['peak_rss'] / MiB:.0f} MiB ({memory['peak_rss_above_start'] / MiB:.0f} MiB "
            f"above the {memory['rss_before_write'] / MiB:.0f} MiB before the write), "
            f"peak Arrow allocation {memory['peak_arrow_allocated'] / MiB:.0f} MiB, "
            f"{memory['regions']} regions, {memory['elapsed_s']:.1f} s "
            f"({memory['input_mib_per_s']:.0f} MiB/s)"
        )


def parse_size(text: str) -> int:
    from arrowshuffle.format.notation import parse_bytes

    return parse_bytes(text, name="size")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=2_000_000, help="rows for the throughput part")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument(
        "--size", type=parse_size, default=256 * MiB, help="bytes of rows to write, up to 2GiB+"
    )
    parser.add_argument("--pool", type=parse_size, default=256 * MiB, help="memory pool size")
    parser.add_argument("--skip-memory", action="store_true")
    parser.add_argument("--skip-throughput", action="store_true")
    parser.add_argument("--out", default="benchmarks/results/partitioners.json")
    parser.add_argument("--memory-child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.memory_child:
        print(json.dumps(memory_child(args.size, args.pool, args.memory_child)))
        return

    results = [] if args.skip_throughput else bench_throughput(generate(args.rows, 1), args.repeats)
    memory = None if args.skip_memory else bench_memory(args.size, args.pool)
    print_table(results, memory)
    import polars as pl

    from arrowshuffle.format.parallel import num_threads

    threads = {"arrowshuffle": num_threads(), "polars": pl.thread_pool_size()}
    print(f"\nthreads: arrowshuffle {threads['arrowshuffle']}, polars {threads['polars']}")
    report = {
        "benchmark": "partitioners",
        "settings": {
            "threads": threads,
            "rows": args.rows,
            "repeats": args.repeats,
            "batch_rows": BATCH_ROWS,
            "num_subpartitions": NUM_SUBPARTITIONS,
            "size": args.size,
            "pool": args.pool,
        },
        "machine": {
            "python": platform.python_version(),
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "pyarrow": pa.__version__,
            "polars": pl.__version__,
            "numpy": np.__version__,
        },
        "throughput": results,
        "memory": memory,
    }
    write_results(args.out, report)


if __name__ == "__main__":
    main()
