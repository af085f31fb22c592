"""Compare the writer's body compression codecs on rows resembling TPC-H ``lineitem``.

Run from the repository root::

    python -m benchmarks.bench_compression --rows 1000000 --repeats 5 \\
        --out benchmarks/results/compression.json

The rows have lineitem's 16 columns: sorted order keys, part and supplier keys, line numbers,
quantities and prices as float64 with two decimals, three dates, four low-cardinality strings
and a comment of 3-6 words from a small vocabulary (TPC-H's comments are drawn from a grammar,
so they compress like text, not like random bytes). Rows go to 64 subpartitions by Spark's hash
of ``l_orderkey``, computed once.

For every codec (``none``, ``lz4``, ``zstd``), each repeat:

* writes the rows with ``ShuffleFileWriter.write(batch, subpartitions=ids)`` (bytes: data file
  plus index), against polars ``write_parquet`` (zstd, its default) of the same rows, the two
  alternating;
* reads one subpartition of 64 back locally with ``open_file(path).read(s)`` (a fresh open
  each time, warm page cache), the subpartition changing each repeat;
* on moto's S3 server on 127.0.0.1 (``--s3-rows`` rows), counts the HTTP requests and response
  bytes of opening the file and reading one subpartition. moto's speed says nothing about S3's,
  so only requests and bytes are reported there.

Times are medians over ``--repeats`` with min and max; ratios are of medians in the same run.
The load average before and after is recorded.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from benchmarks.output import write_results
from benchmarks.timing import spread

CODECS = ("none", "lz4", "zstd")
NUM_SUBPARTITIONS = 64
BATCH_ROWS = 65536
WORDS = tuple(
    " ".join(
        [
            "furiously carefully quickly slyly blithely final regular special pending express",
            "ironic bold even silent unusual idle deposits requests packages accounts foxes",
            "theodolites pinto beans instructions dependencies asymptotes courts platelets",
            "dolphins excuses ideas sleep wake haggle nag use integrate are cajole detect boost",
            "affix along across above according to the among after against",
        ]
    ).split(" ")
)
RETURN_FLAGS = ("A", "N", "R")
LINE_STATUS = ("F", "O")
SHIP_INSTRUCT = ("DELIVER IN PERSON", "COLLECT COD", "NONE", "TAKE BACK RETURN")
SHIP_MODES = ("REG AIR", "AIR", "RAIL", "SHIP", "TRUCK", "MAIL", "FOB")


def choice_strings(values: tuple[str, ...], picks: np.ndarray) -> pa.Array:
    """``values[picks]`` as a string array, built from a dictionary without per-row Python."""
    return pa.DictionaryArray.from_arrays(pa.array(picks.astype(np.int32)), pa.array(values)).cast(
        pa.string()
    )


def comments(rows: int, rng: np.random.Generator) -> pa.Array:
    """3-6 words of the vocabulary per row, separated by spaces, vectorized."""
    vocab = np.frombuffer("".join(WORDS).encode(), dtype=np.uint8)
    word_len = np.array([len(w) for w in WORDS], dtype=np.int64)
    word_start = np.cumsum(word_len) - word_len
    counts = rng.integers(3, 7, rows)
    words = rng.integers(0, len(WORDS), int(counts.sum()))
    # Each word is followed by a space except the last of its row.
    ends_row = np.zeros(len(words), dtype=bool)
    ends_row[np.cumsum(counts) - 1] = True
    piece_len = word_len[words] + ~ends_row
    total = int(piece_len.sum())
    piece_start = np.cumsum(piece_len) - piece_len
    # Byte i of the output copies byte (i - piece_start) of its word, or is a space.
    owner = np.repeat(np.arange(len(words)), piece_len)
    within = np.arange(total) - piece_start[owner]
    src = word_start[words][owner] + within
    is_space = within >= word_len[words][owner]
    chars = vocab[np.minimum(src, len(vocab) - 1)]
    chars[is_space] = ord(" ")
    row_len = np.add.reduceat(piece_len, np.cumsum(counts) - counts)
    offsets = np.zeros(rows + 1, dtype=np.int32)
    np.cumsum(row_len, out=offsets[1:])
    return pa.StringArray.from_buffers(rows, pa.py_buffer(offsets), pa.py_buffer(chars))


def lineitem(rows: int, seed: int) -> pa.Table:
    """``rows`` rows shaped like TPC-H lineitem (orders of 1-7 lines, keys in order)."""
    rng = np.random.default_rng(seed)
    lines = rng.integers(1, 8, rows)  # lines per order; more than needed, cut below
    order = np.repeat(np.arange(1, rows + 1, dtype=np.int64), lines)[:rows]
    starts = np.flatnonzero(np.r_[True, order[1:] != order[:-1]])
    linenumber = (np.arange(rows) - np.repeat(starts, np.diff(np.r_[starts, rows])) + 1).astype(
        np.int32
    )
    orderkey = (order // 8) * 32 + order % 8  # TPC-H's sparse order keys
    quantity = rng.integers(1, 51, rows).astype(np.float64)
    price = np.round(rng.uniform(900.0, 2100.0, rows), 2)
    ship = rng.integers(8036, 10561, rows).astype(np.int32)  # 1992-01-02 .. 1998-12-01
    commit = ship + rng.integers(-60, 61, rows).astype(np.int32)
    receipt = ship + rng.integers(1, 31, rows).astype(np.int32)
    table = pa.table(
        {
            "l_orderkey": orderkey,
            "l_partkey": rng.integers(1, 200_001, rows, dtype=np.int64),
            "l_suppkey": rng.integers(1, 10_001, rows, dtype=np.int64),
            "l_linenumber": linenumber,
            "l_quantity": quantity,
            "l_extendedprice": np.round(quantity * price, 2),
            "l_discount": rng.integers(0, 11, rows) / 100.0,
            "l_tax": rng.integers(0, 9, rows) / 100.0,
            "l_returnflag": choice_strings(RETURN_FLAGS, rng.integers(0, 3, rows)),
            "l_linestatus": choice_strings(LINE_STATUS, rng.integers(0, 2, rows)),
            "l_shipdate": pa.array(ship, pa.date32()),
            "l_commitdate": pa.array(commit, pa.date32()),
            "l_receiptdate": pa.array(receipt, pa.date32()),
            "l_shipinstruct": choice_strings(SHIP_INSTRUCT, rng.integers(0, 4, rows)),
            "l_shipmode": choice_strings(SHIP_MODES, rng.integers(0, 7, rows)),
            "l_comment": comments(rows, rng),
        }
    )
    return table


def subpartition_ids(table: pa.Table) -> np.ndarray:
    from arrowshuffle.format.partitioners import make_partitioner

    partitioner = make_partitioner("hash", num_subpartitions=NUM_SUBPARTITIONS, by=["l_orderkey"])
    return np.concatenate([partitioner.assign(b) for b in table.to_batches(BATCH_ROWS)])


def write_shuffle(
    path: str, table: pa.Table, ids: np.ndarray, codec: str, options: dict[str, Any] | None = None
) -> None:
    import arrowshuffle as ash

    with ash.ShuffleFileWriter(
        path, table.schema, NUM_SUBPARTITIONS, compression=codec, storage_options=options
    ) as writer:
        offset = 0
        for batch in table.to_batches(BATCH_ROWS):
            writer.write(batch, subpartitions=ids[offset : offset + batch.num_rows])
            offset += batch.num_rows


def measure_local(table: pa.Table, ids: np.ndarray, repeats: int) -> dict[str, Any]:
    import polars as pl

    import arrowshuffle as ash

    frame = pl.from_arrow(table)
    assert isinstance(frame, pl.DataFrame)
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        parquet = Path(tmp) / "lineitem.parquet"
        writes: dict[str, list[float]] = {codec: [] for codec in CODECS}
        parquet_writes: list[float] = []
        reads: dict[str, list[float]] = {codec: [] for codec in CODECS}
        for i in range(repeats + 1):
            for codec in CODECS if i % 2 == 0 else CODECS[::-1]:
                path = Path(tmp) / f"{codec}.arrow"
                for leftover in (path, Path(f"{path}.idx")):
                    leftover.unlink(missing_ok=True)
                start = time.perf_counter()
                write_shuffle(str(path), table, ids, codec)
                took = time.perf_counter() - start
                if i:  # the first round warms up
                    writes[codec].append(took)
            parquet.unlink(missing_ok=True)
            start = time.perf_counter()
            frame.write_parquet(parquet, compression="zstd")
            if i:
                parquet_writes.append(time.perf_counter() - start)
            s = (i * 17) % NUM_SUBPARTITIONS
            for codec in CODECS:
                start = time.perf_counter()
                with ash.open_file(Path(tmp) / f"{codec}.arrow") as f:
                    f.read(s)
                if i:
                    reads[codec].append(time.perf_counter() - start)
        parquet_bytes = parquet.stat().st_size
        for codec in CODECS:
            path = Path(tmp) / f"{codec}.arrow"
            data = path.stat().st_size
            index = Path(f"{path}.idx").stat().st_size
            results[codec] = {
                "write": spread(writes[codec]),
                "read_one": spread(reads[codec]),
                "data_bytes": data,
                "index_bytes": index,
                "x_parquet_bytes": (data + index) / parquet_bytes,
            }
    return {
        "codecs": results,
        "parquet": {
            "name": "polars write_parquet (zstd)",
            "write": spread(parquet_writes),
            "bytes": parquet_bytes,
        },
        "arrow_bytes": table.nbytes,
    }


def measure_s3(table: pa.Table, ids: np.ndarray, reads: int) -> dict[str, Any]:
    import fsspec

    import arrowshuffle as ash
    from benchmarks.bench_reads import moto_options, moto_server

    results: dict[str, Any] = {}
    with moto_server() as (endpoint, counter):
        options, _ = moto_options(endpoint)
        bucket = f"bench-{uuid.uuid4().hex[:8]}"
        fsspec.filesystem("s3", **options).mkdir(bucket)
        for codec in CODECS:
            url = f"s3://{bucket}/{codec}.arrow"
            write_shuffle(url, table, ids, codec, options)
            counter.take()
            requests = transferred = 0
            rows = 0
            for i in range(reads):
                s = (i * 17) % NUM_SUBPARTITIONS
                with ash.open_file(url, dict(options)) as f:
                    rows += f.read(s).num_rows
                records = counter.take()
                requests += len(records)
                transferred += sum(sent for _, _, sent in records)
            results[codec] = {
                "requests_per_read": requests / reads,
                "bytes_per_read": transferred / reads,
                "rows_per_read": rows / reads,
            }
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000, help="rows written locally")
    parser.add_argument("--s3-rows", type=int, default=100_000, help="rows written to moto")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", default="benchmarks/results/compression.json")
    args = parser.parse_args(argv)

    import polars as pl

    load_before = os.getloadavg()[0]
    table = lineitem(args.rows, 0)
    ids = subpartition_ids(table)
    local = measure_local(table, ids, args.repeats)
    small = lineitem(args.s3_rows, 1)
    s3 = measure_s3(small, subpartition_ids(small), args.repeats)
    load_after = os.getloadavg()[0]

    print(f"load average {load_before:.2f} before, {load_after:.2f} after; {os.cpu_count()} CPUs")
    pq = local["parquet"]
    print(
        f"{args.rows:,} lineitem rows ({local['arrow_bytes'] / 2**20:.1f} MiB in Arrow); polars "
        f"parquet zstd: {pq['bytes'] / 2**20:.1f} MiB, written in {pq['write']['median_s']:.3f} s"
    )
    base = local["codecs"]["none"]
    print(
        f"{'codec':<6} {'write s':>8} {'x none':>7} {'MiB':>7} {'x parquet':>10} "
        f"{'read 1/64 ms':>13} {'x none':>7} {'S3 req':>7} {'S3 KiB':>8}"
    )
    for codec in CODECS:
        r = local["codecs"][codec]
        print(
            f"{codec:<6} {r['write']['median_s']:>8.3f} "
            f"{r['write']['median_s'] / base['write']['median_s']:>7.2f} "
            f"{(r['data_bytes'] + r['index_bytes']) / 2**20:>7.1f} {r['x_parquet_bytes']:>10.2f} "
            f"{r['read_one']['median_s'] * 1e3:>13.2f} "
            f"{r['read_one']['median_s'] / base['read_one']['median_s']:>7.2f} "
            f"{s3[codec]['requests_per_read']:>7.1f} {s3[codec]['bytes_per_read'] / 1024:>8.1f}"
        )
    report = {
        "benchmark": "compression",
        "settings": {
            "rows": args.rows,
            "s3_rows": args.s3_rows,
            "repeats": args.repeats,
            "batch_rows": BATCH_ROWS,
            "num_subpartitions": NUM_SUBPARTITIONS,
        },
        "machine": {
            "python": platform.python_version(),
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "pyarrow": pa.__version__,
            "polars": pl.__version__,
            "load_average": {"before": load_before, "after": load_after},
        },
        "local": local,
        "s3": s3,
    }
    write_results(args.out, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
