"""What checking chunk CRC32Cs costs: reads with ``verify=True`` against ``verify=False``.

Two settings, each a median over repeats of the same read with and without verification:

* local: a memory-mapped dataset (warm page cache), read whole and one subpartition at a time;
* object storage: the same layout, smaller, on moto's S3 server on 127.0.0.1 (no proxy), where
  ``verify="auto"`` (the default) is on; each repeat opens the dataset afresh.

Usage::

    python -m benchmarks.bench_verify                 # 2M rows locally, 200k on S3
    python -m benchmarks.bench_verify --rows 500000 --s3-rows 50000 --repeats 5
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import uuid
from collections.abc import Callable
from typing import Any

from arrowshuffle.readers.dataset import open_dataset
from benchmarks.bench_reads import generate, moto_options, moto_server, write_shuffle
from benchmarks.output import add_skip_s3, write_results
from benchmarks.timing import elapsed

SUBPARTITIONS = 16


def seconds(read: Callable[[], Any]) -> float:
    return elapsed(read)[0]


def compare(label: str, read: Callable[[bool], Any], repeats: int) -> dict[str, Any]:
    """Median (min, max) seconds of ``read(False)`` and ``read(True)``, and their ratio."""
    read(False), read(True)  # warm up: page cache, imports, connections
    offs, ons = [], []
    for _ in range(repeats):
        # Alternate the two settings, so that drift (other load, caches) hits both alike.
        offs.append(seconds(lambda: read(False)))
        ons.append(seconds(lambda: read(True)))
    off, on = statistics.median(offs), statistics.median(ons)
    print(
        f"{label:<36} verify off {off * 1e3:8.2f} ms  on {on * 1e3:8.2f} ms  ratio {on / off:.2f}"
    )
    return {
        "label": label,
        "off": {"median_s": off, "min_s": min(offs), "max_s": max(offs)},
        "on": {"median_s": on, "min_s": min(ons), "max_s": max(ons)},
        "ratio": on / off,
    }


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2_000_000, help="rows of the local dataset")
    parser.add_argument("--s3-rows", type=int, default=200_000, help="rows of the S3 dataset")
    parser.add_argument("--files", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=21, help="reads per median")
    add_skip_s3(parser)
    parser.add_argument("--out", default=None, help="write the results as JSON here")
    args = parser.parse_args(argv)
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    results: list[dict[str, Any]] = []

    with tempfile.TemporaryDirectory() as tmp:
        url = f"{tmp}/ds"
        write_shuffle(
            url, list(generate(args.rows, args.files, SUBPARTITIONS, 1)), SUBPARTITIONS, 64 << 20
        )
        dataset = open_dataset(url)
        size = sum(f.data_size for f in dataset.manifest.files)
        print(f"local: {args.rows:,} rows, {size / 1e6:.0f} MB in {args.files} files")
        results.append(
            compare("local, whole dataset", lambda v: dataset.read(verify=v), args.repeats)
        )
        results.append(
            compare("local, one subpartition", lambda v: dataset.read(3, verify=v), args.repeats)
        )

    if not args.skip_s3:
        results.extend(s3_costs(args))
    if args.out:
        config = {"rows": args.rows, "s3_rows": args.s3_rows, "files": args.files}
        document = {"config": config, "reads": results}
        write_results(args.out, document)


def s3_costs(args: argparse.Namespace) -> list[dict[str, Any]]:
    """The same comparison on moto's S3 server, each read opening the dataset afresh."""
    with moto_server() as (endpoint, _):
        import fsspec

        options, _ = moto_options(endpoint)
        bucket = f"bench-{uuid.uuid4().hex[:8]}"
        fsspec.filesystem("s3", **options).mkdir(bucket)
        url = f"s3://{bucket}/ds"
        tables = list(generate(args.s3_rows, args.files, SUBPARTITIONS, 2))
        write_shuffle(url, tables, SUBPARTITIONS, 4 << 20, storage_options=options)
        print(f"S3 (moto): {args.s3_rows:,} rows in {args.files} files")
        return [
            compare(
                "S3, whole dataset (open + read)",
                lambda v: open_dataset(url, options).read(verify=v),
                args.repeats,
            ),
            compare(
                "S3, one subpartition (open + read)",
                lambda v: open_dataset(url, options).read(3, verify=v),
                args.repeats,
            ),
        ]


if __name__ == "__main__":
    main()
