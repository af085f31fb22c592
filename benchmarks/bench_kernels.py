"""Benchmark the two kernels that set the speed of a write: Spark's hash and the writer's gather.

Run from the repository root::

    python -m benchmarks.bench_kernels --rows 2000000 --writer-rows 4000000 --repeats 7 \\
        --out benchmarks/results/kernels.json

Part 1, hash. ``--rows`` rows in batches of 65536 (as a writer receives them): an int64 key,
a string key of 16 bytes on average (random lengths 0..32) and both together. Each repeat
times arrowshuffle's ``hash`` partitioner (Spark's ``pmod(hash(keys), 64)``) over all batches
and, right before or after it (the order alternates), polars hashing the same batches:
``Series.hash`` for one key, ``DataFrame.hash_rows`` for two. Both use every core they are
given: polars its own thread pool, arrowshuffle its kernel threads (``ARROWSHUFFLE_NUM_THREADS``
or the usable CPUs).

Part 2, writer. ``--writer-rows`` rows (int64, float64, a string of 16 bytes on average) in
batches of 65536 with random subpartition ids are written with
``ShuffleFileWriter.write(batch, subpartitions=ids)``, and the same batches with a plain
``pyarrow.ipc.new_file`` writer, in a rotating order, into a temporary directory. Both sides
use the same body compression: once uncompressed and once with the writer's default codec
(``--codecs``). With numba installed, the writer also runs with its compiled sort kernels off
(``ARROWSHUFFLE_JIT=0``: pyarrow's ``take`` sorts), in the same rotation.

Part 3, first use (with numba installed). A new Python process, as a Spark task's worker is,
imports the package, hashes 20,000 rows by an int64 and a string key and sorts them with the
writer's kernels; the peer is a new process that imports the same modules and stops. The
difference is what a process pays to load the compiled kernels from numba's on-disk cache
(filled by a first, untimed run). Wall time of the whole child process.

Times are medians over ``--repeats`` with min and max; ratios are of medians taken in the same
run. The load average before and after is recorded: other work on the machine slows both sides.
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from arrowshuffle.format._gather_jit import JIT_ENV, kernels
from arrowshuffle.writers.file_writer import DEFAULT_COMPRESSION
from benchmarks.output import write_results
from benchmarks.timing import spread

BATCH_ROWS = 65536
NUM_SUBPARTITIONS = 64
KEY_SETS: dict[str, list[str]] = {"int64": ["k"], "string": ["s"], "int64+string": ["k", "s"]}


def strings(rows: int, low: int, high: int, rng: np.random.Generator) -> pa.Array:
    """Random lowercase strings with lengths uniform in ``[low, high]``, vectorized."""
    lengths = rng.integers(low, high + 1, rows, dtype=np.int32)
    offsets = np.zeros(rows + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    chars = rng.integers(ord("a"), ord("z") + 1, int(offsets[-1]), dtype=np.uint8)
    return pa.StringArray.from_buffers(rows, pa.py_buffer(offsets), pa.py_buffer(chars))


def hash_batches(rows: int, seed: int) -> list[pa.RecordBatch]:
    rng = np.random.default_rng(seed)
    out = []
    for start in range(0, rows, BATCH_ROWS):
        n = min(BATCH_ROWS, rows - start)
        out.append(
            pa.record_batch(
                {
                    "k": pa.array(rng.integers(-(2**62), 2**62, n, dtype=np.int64)),
                    "s": strings(n, 0, 32, rng),
                }
            )
        )
    return out


def writer_batches(rows: int, seed: int) -> tuple[list[pa.RecordBatch], list[np.ndarray]]:
    rng = np.random.default_rng(seed)
    batches, ids = [], []
    for start in range(0, rows, BATCH_ROWS):
        n = min(BATCH_ROWS, rows - start)
        batches.append(
            pa.record_batch(
                {
                    "key": pa.array(rng.integers(0, 2**62, n, dtype=np.int64)),
                    "value": pa.array(rng.standard_normal(n)),
                    "name": strings(n, 8, 24, rng),
                }
            )
        )
        ids.append(rng.integers(0, NUM_SUBPARTITIONS, n, dtype=np.int32))
    return batches, ids


def summary(seconds: list[float]) -> dict[str, float]:
    return spread(seconds)


def interleaved(
    ours: Callable[[], object],
    peer: Callable[[], object],
    repeats: int,
    before: Callable[[], object] = lambda: None,
) -> tuple[dict[str, float], dict[str, float]]:
    """Time both ``repeats`` times, alternating which goes first, after one warm-up each.

    ``before`` runs, untimed, before every run.
    """
    times = interleaved_runs({"ours": ours, "peer": peer}, repeats, before)
    return times["ours"], times["peer"]


def interleaved_runs(
    runs: dict[str, Callable[[], object]],
    repeats: int,
    before: Callable[[], object] = lambda: None,
) -> dict[str, dict[str, float]]:
    """Time every run ``repeats`` times, in an order that rotates, after one warm-up round.

    ``before`` runs, untimed, before every run.
    """
    times: dict[str, list[float]] = {name: [] for name in runs}
    order = list(runs.items())
    for i in range(repeats + 1):
        for name, run in order[i % len(order) :] + order[: i % len(order)]:
            before()
            start = time.perf_counter()
            run()
            if i:  # the first round warms up
                times[name].append(time.perf_counter() - start)
    return {name: summary(seconds) for name, seconds in times.items()}


def bench_hash(rows: int, repeats: int) -> list[dict[str, Any]]:
    import polars as pl

    from arrowshuffle.format.partitioners import make_partitioner

    batches = hash_batches(rows, 1)
    results = []
    for key_set, keys in KEY_SETS.items():
        frames = [pl.from_arrow(b.select(keys)) for b in batches]
        partitioner = make_partitioner("hash", num_subpartitions=NUM_SUBPARTITIONS, by=keys)

        def ours(p: Any = partitioner) -> None:
            for batch in batches:
                p.assign(batch)

        if len(keys) == 1:
            peer_name = "polars Series.hash"

            def peer(frames: list[Any] = frames, key: str = keys[0]) -> None:
                for frame in frames:
                    frame.get_column(key).hash()

        else:
            peer_name = "polars DataFrame.hash_rows"

            def peer(frames: list[Any] = frames, key: str = "") -> None:
                for frame in frames:
                    frame.hash_rows()

        mine, theirs = interleaved(ours, peer, repeats)
        results.append(
            {
                "key_set": key_set,
                "rows": rows,
                "ours": {"name": "hash partitioner (Spark Murmur3, pmod 64)", **mine},
                "peer": {"name": peer_name, **theirs},
                "x_polars": theirs["median_s"] / mine["median_s"],
            }
        )
    return results


def bench_writer(
    rows: int, repeats: int, memory: str | None, compression: str = "none"
) -> dict[str, Any]:
    import arrowshuffle as ash

    batches, ids = writer_batches(rows, 0)
    schema = batches[0].schema
    with tempfile.TemporaryDirectory() as tmp:
        # Every run writes a new file, as a shuffle does: replacing a large file would time the
        # file system freeing the old one.
        shuffle_path = Path(tmp) / "shuffle.arrow"
        plain_path = Path(tmp) / "plain.arrow"

        def remove_files() -> None:
            for path in Path(tmp).iterdir():
                path.unlink()

        def ours() -> None:
            with ash.ShuffleFileWriter(
                shuffle_path, schema, NUM_SUBPARTITIONS, memory=memory, compression=compression
            ) as writer:
                for batch, batch_ids in zip(batches, ids, strict=True):
                    writer.write(batch, subpartitions=batch_ids)

        def ours_with_take() -> None:
            # The same writer with its compiled sort kernels off: pyarrow's take sorts.
            previous = os.environ.get(JIT_ENV)
            os.environ[JIT_ENV] = "0"
            try:
                ours()
            finally:
                if previous is None:
                    del os.environ[JIT_ENV]
                else:
                    os.environ[JIT_ENV] = previous

        options = pa.ipc.IpcWriteOptions(compression=None if compression == "none" else compression)

        def peer() -> None:
            with (
                pa.OSFile(str(plain_path), "wb") as sink,
                pa.ipc.new_file(sink, schema, options=options) as writer,
            ):
                for batch in batches:
                    writer.write_batch(batch)

        runs = {"ours": ours, "peer": peer}
        if kernels() is not None:
            runs["take"] = ours_with_take
        times = interleaved_runs(runs, repeats, before=remove_files)
        mine, theirs = times["ours"], times["peer"]
        remove_files()  # the writer refuses to replace a pair it wrote in the last repeat
        ours()
        with ash.open_file(shuffle_path) as written:
            regions = written.num_regions
    return {
        "rows": rows,
        "bytes": sum(b.nbytes for b in batches),
        "memory": memory or "default pool share",
        "compression": compression,
        "regions": regions,
        "ours": {
            "name": f"ShuffleFileWriter.write(batch, subpartitions=ids), {compression}",
            **mine,
        },
        "peer": {"name": f"pyarrow.ipc write (same batches), {compression}", **theirs},
        "x_plain": theirs["median_s"] / mine["median_s"],
        # The writer sorting with pyarrow's take (ARROWSHUFFLE_JIT=0), when numba is here.
        "take": {"name": f"the same writer, ARROWSHUFFLE_JIT=0, {compression}", **times["take"]}
        if "take" in times
        else None,
        "x_take": times["take"]["median_s"] / mine["median_s"] if "take" in times else None,
    }


_IMPORTS = """
import numpy as np
import pyarrow as pa
from arrowshuffle.format import _gather_jit
from arrowshuffle.format.gather import destinations, scatter_columns
from arrowshuffle.format.partitioners import make_partitioner
"""
_FIRST_USE = """
rng = np.random.default_rng(0)
rows = 20000
batch = pa.record_batch({
    "k": pa.array(rng.integers(0, 1 << 40, rows)),
    "s": pa.array(np.char.add("k", rng.integers(0, 10**6, rows).astype(str)).astype(object)),
})
ids = make_partitioner("hash", num_subpartitions=64, by=["k"]).assign(batch).astype(np.uint8)
make_partitioner("hash", num_subpartitions=64, by=["s"]).assign(batch)
kernels = _gather_jit.kernels()
dest, counts = destinations(ids, 64, kernels)
scatter_columns(batch, ids, dest, counts, kernels)
"""


def bench_first_use(repeats: int) -> dict[str, Any]:
    """A new process's first hash and sort against a new process's imports alone."""

    def child(code: str) -> Callable[[], None]:
        def run() -> None:
            env = {k: v for k, v in os.environ.items() if k != JIT_ENV}
            # Run outside the repository: its folders would shadow the installed package.
            subprocess.run(
                [sys.executable, "-c", code], check=True, env=env, cwd=tempfile.gettempdir()
            )

        return run

    # The untimed warm-up round fills numba's cache, as the first process on a machine does.
    mine, theirs = interleaved(child(_IMPORTS + _FIRST_USE), child(_IMPORTS), repeats)
    return {
        "ours": {"name": "new process: imports, first hash and sort of 20,000 rows", **mine},
        "peer": {"name": "new process: the same imports", **theirs},
        "kernels_load_s": mine["median_s"] - theirs["median_s"],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=2_000_000, help="rows hashed per repeat")
    parser.add_argument("--writer-rows", type=int, default=4_000_000, help="rows written")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--memory", default=None, help="the writer's memory= (default pool)")
    parser.add_argument(
        "--codecs",
        default=f"none,{DEFAULT_COMPRESSION}",
        help="body compressions of the writer comparison, comma-separated (both sides use each)",
    )
    parser.add_argument(
        "--skip-hash", action="store_true", help="run the writer part only (no hash, no first use)"
    )
    parser.add_argument("--out", default="benchmarks/results/kernels.json")
    args = parser.parse_args(argv)

    import polars as pl

    from arrowshuffle.format.parallel import num_threads

    threads = {"arrowshuffle": num_threads(), "polars": pl.thread_pool_size()}
    load_before = os.getloadavg()[0]
    hashes = [] if args.skip_hash else bench_hash(args.rows, args.repeats)
    first_use = None if args.skip_hash or kernels() is None else bench_first_use(args.repeats)
    writers = [
        bench_writer(args.writer_rows, args.repeats, args.memory, codec)
        for codec in args.codecs.split(",")
    ]
    load_after = os.getloadavg()[0]

    print(
        f"threads: arrowshuffle {threads['arrowshuffle']}, polars {threads['polars']}; "
        f"{os.cpu_count()} CPUs; load average {load_before:.2f} before, {load_after:.2f} after"
    )
    print(f"{'key set':<14} {'ours ms':>9} {'polars ms':>10} {'x polars':>9}")
    for r in hashes:
        print(
            f"{r['key_set']:<14} {r['ours']['median_s'] * 1e3:>9.1f} "
            f"{r['peer']['median_s'] * 1e3:>10.1f} {r['x_polars']:>9.2f}"
        )
    for writer in writers:
        ours_s, plain_s = writer["ours"]["median_s"], writer["peer"]["median_s"]
        print(
            f"writer, {writer['rows']:,} rows int64/float64/string, {writer['regions']} regions, "
            f"{writer['compression']}: {ours_s:.3f} s vs plain pyarrow.ipc {plain_s:.3f} s = "
            f"{writer['x_plain']:.2f}x its throughput"
        )
        if writer["take"] is not None:
            take_s = writer["take"]["median_s"]
            print(
                f"  with ARROWSHUFFLE_JIT=0 (take sorts): {take_s:.3f} s = "
                f"{plain_s / take_s:.2f}x plain; the kernels are {writer['x_take']:.2f}x as fast"
            )
    if first_use is not None:
        print(
            f"first use in a new process: {first_use['ours']['median_s']:.2f} s vs "
            f"{first_use['peer']['median_s']:.2f} s for its imports alone: the kernels load in "
            f"{first_use['kernels_load_s']:.2f} s"
        )
    report = {
        "benchmark": "kernels",
        "settings": {
            "rows": args.rows,
            "writer_rows": args.writer_rows,
            "repeats": args.repeats,
            "batch_rows": BATCH_ROWS,
            "num_subpartitions": NUM_SUBPARTITIONS,
            "threads": threads,
        },
        "machine": {
            "python": platform.python_version(),
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "pyarrow": pa.__version__,
            "polars": pl.__version__,
            "numpy": np.__version__,
            "load_average": {"before": load_before, "after": load_after},
        },
        "hash": hashes,
        "first_use": first_use,
        # The first codec's comparison (none by default) under its historical key.
        "writer": writers[0],
        "writers": writers,
    }
    write_results(args.out, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
