"""The per-call cost of ``arrowshuffle.polars.scan`` against ``pl.scan_parquet`` per hive bucket.

A job that handles one subpartition at a time builds one LazyFrame per subpartition. One run
writes the same rows as an arrowshuffle dataset and as hive-partitioned Parquet
(``sp=<s>/part-<f>.parquet``) and times, over a loop of every subpartition:

* building the LazyFrames only (the scan overhead; per call = loop time / subpartitions):
  ``scan(path, subpartitions=s)`` (the opened dataset cached by path and manifest version),
  the same with that cache emptied before every call (an open per call), and
  ``scan(opened_dataset, subpartitions=s)``, against ``pl.scan_parquet("<root>/sp=<s>/")``;
* building and collecting each one, against the same for Parquet.

Each repeat runs every method back to back (in a rotating order); medians over repeats.

Usage::

    python -m benchmarks.bench_polars_scan
    python -m benchmarks.bench_polars_scan --rows 400000 --files 4 --subpartitions 128
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa

import arrowshuffle.polars as asp
from arrowshuffle.readers.dataset import open_dataset
from benchmarks.bench_reads import generate, write_hive, write_shuffle
from benchmarks.output import write_results
from benchmarks.timing import elapsed, spread

#: The peer of every figure.
PEER = "pl.scan_parquet per hive bucket"


def methods(shuffle: str, hive: str, n: int) -> dict[str, Callable[[int], Any]]:
    """What one call does per subpartition ``s``, by label."""
    dataset = open_dataset(shuffle)

    def cold(s: int) -> Any:
        asp.clear_cache()
        return asp.scan(shuffle, subpartitions=s)

    return {
        "scan(path)": lambda s: asp.scan(shuffle, subpartitions=s),
        "scan(path), opened every call": cold,
        "scan(opened dataset)": lambda s: asp.scan(dataset, subpartitions=s),
        PEER: lambda s: pl.scan_parquet(f"{hive}/sp={s}/"),
    }


def loop(call: Callable[[int], Any], n: int, collect: bool) -> Callable[[], int]:
    def run() -> int:
        rows = 0
        for s in range(n):
            frame = call(s)
            if collect:
                rows += frame.collect().height
        return rows

    return run


def measure(
    calls: dict[str, Callable[[int], Any]], n: int, repeats: int, collect: bool
) -> dict[str, Any]:
    """Seconds per loop over every subpartition, per method; medians and ratios to the peer."""
    labels = list(calls)
    runs = {label: loop(calls[label], n, collect) for label in labels}
    rows = {label: runs[label]() for label in labels}  # warm up (imports, page cache)
    if collect and len({rows[label] for label in labels}) != 1:
        raise SystemExit(f"the methods returned different row counts: {rows}")
    seconds: dict[str, list[float]] = {label: [] for label in labels}
    for r in range(repeats):
        for label in labels[r % len(labels) :] + labels[: r % len(labels)]:
            seconds[label].append(elapsed(runs[label])[0])
    out: dict[str, Any] = {}
    peer = spread(seconds[PEER])["median_s"]
    for label in labels:
        stats = spread(seconds[label])
        out[label] = {
            **stats,
            "per_call_ms": stats["median_s"] / n * 1e3,
            "ratio_vs_peer": stats["median_s"] / peer,
        }
    return out


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=400_000)
    parser.add_argument("--files", type=int, default=4, help="writer tasks = data files")
    parser.add_argument("--subpartitions", type=int, default=128)
    parser.add_argument("--region-bytes", type=int, default=2 << 20, help="sort buffer")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument(
        "--out",
        type=Path,
        default=Path(__file__).resolve().parent / "results" / "polars_scan.json",
        help="JSON output",
    )
    return parser.parse_args(argv)


def _output(path: str) -> Any:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    return open(path, "wb")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    n = args.subpartitions
    result: dict[str, Any] = {
        "config": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}
        | {
            "python": sys.version.split()[0],
            "machine": platform.machine(),
            "cpus": os.cpu_count(),
            "pyarrow": pa.__version__,
            "polars": pl.__version__,
            "loadavg": _loadavg(),
        },
        "peer": PEER,
    }
    with tempfile.TemporaryDirectory(prefix="bench-polars-scan-") as tmp:
        root = Path(tmp)
        tables = list(generate(args.rows, args.files, n, args.seed))
        write_shuffle(str(root / "shuffle"), tables, n, args.region_bytes)
        write_hive(str(root / "hive"), tables, n, _output)
        del tables
        calls = methods(str(root / "shuffle"), str(root / "hive"), n)
        result["scan"] = measure(calls, n, args.repeats, collect=False)
        result["scan_collect"] = measure(calls, n, args.repeats, collect=True)
    for part, title in (("scan", "build LazyFrames"), ("scan_collect", "build and collect")):
        print(f"{title}, {n} subpartitions (per call, median of {args.repeats})")
        for label, m in result[part].items():
            print(
                f"  {label:<34} {m['per_call_ms']:8.3f} ms/call  "
                f"x{m['ratio_vs_peer']:.2f} of the peer"
            )
    write_results(args.out, result)
    return 0


def _loadavg() -> str | None:
    try:
        return Path("/proc/loadavg").read_text().strip()
    except OSError:
        return None


if __name__ == "__main__":
    raise SystemExit(main())
