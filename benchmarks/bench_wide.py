"""Wide shuffles: M producer files x N subpartitions, one consumer's cost before and after compact.

On moto's S3 server (requests and bytes counted at the server): one consumer of ``C`` reads its
``N / C`` subpartitions of every file (all-to-all), from

* the dataset as the producers wrote it (M files),
* the same dataset after ``arrowshuffle.compact`` (one file per group of up to 1 GiB), with
  its default ``rebatch="auto"`` (tiny batches re-encoded as larger ones) and, as the peer,
  with ``rebatch=False`` (every input batch copied as bytes),
* the same rows as hive-partitioned Parquet, one directory per subpartition holding one file
  (the layout after a shuffle that wrote one file per subpartition; a per-producer layout would
  be M x N objects), read with polars and with pyarrow.

Modelled time is sequential: requests x latency + bytes / bandwidth, for 20 ms + 100 MB/s and
50 ms + 1 GB/s. Compaction itself is measured (time, bytes read and written, requests), both
ways, and the consumer's bytes after each are given as a ratio to the Parquet layout's. Locally,
one consumer's read time is measured against M (16 ... 1,024 files), before and after compact
(both ways, with the compaction times).

    python -m benchmarks.bench_wide                 # M = N = 1,000 (a few minutes)
    python -m benchmarks.bench_wide --quick         # M = 64, N = 200
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

import arrowshuffle
from arrowshuffle.format.naming import new_file_name
from arrowshuffle.writers.dataset_writer import commit_dataset, prepare_directory
from arrowshuffle.writers.file_writer import ShuffleFileWriter, WrittenFile
from benchmarks.bench_reads import moto_options, moto_server
from benchmarks.output import add_skip_s3, write_results
from benchmarks.timing import spread, timed

MB = 1_000_000
SCHEMA = pa.schema([("id", pa.int64()), ("sp", pa.int32()), ("v", pa.float64())])
MODELS = ((20, 100), (50, 1000))  # (ms per request, MB/s)


def write_producers(root: Path, files: int, n: int, rows: int, seed: int) -> list[WrittenFile]:
    """``files`` shuffle files in ``root`` (no manifest), ``rows`` small rows each."""
    rng = np.random.default_rng(seed)
    directory = prepare_directory(str(root), None)
    written = []
    for f in range(files):
        sp = rng.integers(0, n, rows)
        ids = np.arange(f * rows, (f + 1) * rows, dtype=np.int64)
        batch = pa.record_batch(
            [pa.array(ids), pa.array(sp.astype(np.int32)), pa.array(rng.standard_normal(rows))],
            schema=SCHEMA,
        )
        with ShuffleFileWriter(
            directory.child(new_file_name(f)).url, SCHEMA, n, memory="64MiB"
        ) as writer:
            writer.write(batch, subpartitions=sp)
        assert writer.written is not None
        written.append(writer.written)
    return written


def linked_dataset(source: Path, target: Path, written: list[WrittenFile], n: int) -> None:
    """A dataset at ``target`` of the first files of ``source`` (hard links) and a manifest."""
    target.mkdir(parents=True)
    moved = []
    for w in written:
        for url in (w.data_url, w.index_url):
            name = os.path.basename(url)
            os.link(source / name, target / name)
        moved.append(
            dataclasses.replace(
                w,
                data_url=str(target / os.path.basename(w.data_url)),
                index_url=str(target / os.path.basename(w.index_url)),
            )
        )
    commit_dataset(
        prepare_directory(str(target), None),
        moved,
        schema=SCHEMA,
        num_subpartitions=n,
        partitioner={"name": "explicit"},
    )


def write_hive(root: Path, source: Path, n: int) -> None:
    """The dataset's rows as ``root/sp=<s>/part-0.parquet``, one file per subpartition."""
    import pyarrow.parquet as pq

    dataset = arrowshuffle.open_dataset(str(source))
    step = max(1, n // 50)
    for first in range(0, n, step):
        table = dataset.read(range(first, min(n, first + step)))
        sp = table.column("sp").to_numpy()
        order = np.argsort(sp, kind="stable")
        table = table.take(pa.array(order))
        bounds = np.searchsorted(sp[order], np.arange(first, min(n, first + step) + 1))
        for i, s in enumerate(range(first, min(n, first + step))):
            part = table.slice(int(bounds[i]), int(bounds[i + 1] - bounds[i])).drop_columns(["sp"])
            (root / f"sp={s}").mkdir(parents=True, exist_ok=True)
            pq.write_table(part, root / f"sp={s}" / "part-0.parquet")


def consumer_range(n: int, consumers: int, c: int) -> range:
    width = n // consumers
    return range(c * width, (c + 1) * width)


def time_local(url: str, selection: range, repeats: int) -> dict[str, float]:
    times, rows = timed(lambda: arrowshuffle.open_dataset(url).read(selection).num_rows, repeats)
    return {**spread(times), "rows": rows}


def measure_local(args: argparse.Namespace, tmp: Path) -> list[dict[str, Any]]:
    counts = [int(m) for m in args.local_files.split(",")]
    source = tmp / "local-producers"
    written = write_producers(source, max(counts), args.subpartitions, args.rows, args.seed)
    selection = consumer_range(args.subpartitions, args.consumers, 0)
    out = []
    for m in counts:
        url = tmp / f"local-{m}"
        copied_url = tmp / f"local-{m}-copied"
        linked_dataset(source, url, written[:m], args.subpartitions)
        linked_dataset(source, copied_url, written[:m], args.subpartitions)
        before = time_local(str(url), selection, args.repeats)
        copied_report = arrowshuffle.compact(str(copied_url), rebatch=False)
        report = arrowshuffle.compact(str(url))
        after = time_local(str(url), selection, args.repeats)
        copied = time_local(str(copied_url), selection, args.repeats)
        if not before["rows"] == after["rows"] == copied["rows"]:
            raise SystemExit(
                f"M={m}: {before['rows']} rows before compaction, {after['rows']} after, "
                f"{copied['rows']} after a byte copy"
            )
        out.append(
            {
                "files": m,
                "before": before,
                "after": after,
                "after_copied": copied,
                "files_after": report.files_after,
                "compact_s": report.seconds,
                "compact_copied_s": copied_report.seconds,
            }
        )
        print(
            f"local M={m:>5}: one consumer {before['median_s'] * 1e3:8.1f} ms before, "
            f"{after['median_s'] * 1e3:8.1f} ms after compaction ({report.files_after} files), "
            f"{copied['median_s'] * 1e3:8.1f} ms after a byte-copy compaction; compaction "
            f"{report.seconds:.1f} s re-batching, {copied_report.seconds:.1f} s copying",
            flush=True,
        )
    return out


def _counted(counter: Any, action: Any) -> tuple[Any, dict[str, float]]:
    counter.take()
    start = time.perf_counter()
    result = action()
    seconds = time.perf_counter() - start
    # The server records a response once its body is sent, which may be after the client has
    # returned: wait until no record arrives, or a late one would count for the next action.
    records = counter.take()
    while True:
        time.sleep(0.2)
        late = counter.take()
        if not late:
            break
        records += late
    gets = [r for r in records if r[0] == "GET"]
    cost = {
        "requests": len(records),
        "gets": len(gets),
        "bytes": sum(r[2] for r in records),
        "seconds": seconds,
    }
    for latency, bandwidth in MODELS:
        cost[f"modeled_{latency}ms_{bandwidth}MBps_s"] = cost["requests"] * latency / 1000 + cost[
            "bytes"
        ] / (bandwidth * MB)
    return result, cost


def measure_s3(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    import fsspec
    import polars as pl
    import pyarrow.dataset as pads
    from pyarrow import fs as pafs

    local = tmp / "s3-producers"
    start = time.perf_counter()
    written = write_producers(local, args.files, args.subpartitions, args.rows, args.seed + 1)
    commit_dataset(
        prepare_directory(str(local), None),
        written,
        schema=SCHEMA,
        num_subpartitions=args.subpartitions,
        partitioner={"name": "explicit"},
    )
    hive_local = tmp / "s3-hive"
    write_hive(hive_local, local, args.subpartitions)
    print(f"wrote {args.files} files locally in {time.perf_counter() - start:.1f} s", flush=True)
    with moto_server() as (endpoint, counter):
        options, polars_options = moto_options(endpoint)
        bucket = f"bench-{uuid.uuid4().hex[:8]}"
        s3 = fsspec.filesystem("s3", **options)
        s3.mkdir(bucket)
        start = time.perf_counter()
        s3.put(str(local) + "/", f"{bucket}/shuffle/", recursive=True)
        s3.put(str(local) + "/", f"{bucket}/copied/", recursive=True)
        s3.put(str(hive_local) + "/", f"{bucket}/hive/", recursive=True)
        print(f"uploaded to moto in {time.perf_counter() - start:.1f} s", flush=True)
        url = f"s3://{bucket}/shuffle"
        selection = consumer_range(args.subpartitions, args.consumers, args.consumer)
        host = endpoint.removeprefix("http://")
        arrow_s3 = pafs.S3FileSystem(
            access_key="bench",
            secret_key="bench",
            endpoint_override=host,
            scheme="http",
            region="eu-west-1",
        )
        hive_paths = [f"{bucket}/hive/sp={s}/part-0.parquet" for s in selection]

        copied_url = f"s3://{bucket}/copied"

        def shuffle_read(at: str = url) -> int:
            return int(arrowshuffle.open_dataset(at, options).read(selection).num_rows)

        def compaction(at: str, rebatch: bool | str) -> dict[str, Any]:
            report, cost = _counted(
                counter,
                lambda: arrowshuffle.compact(at, storage_options=options, rebatch=rebatch),
            )
            cost.update(
                {
                    "bytes_read": report.bytes_read,
                    "bytes_written": report.bytes_written,
                    "files_before": report.files_before,
                    "files_after": report.files_after,
                }
            )
            return cost

        results: dict[str, Any] = {}
        rows, results["before"] = _counted(counter, shuffle_read)
        # The byte copy (the peer) first, then the default: same data, same server.
        results["compaction_copied"] = compaction(copied_url, False)
        results["compaction"] = compaction(url, "auto")
        rows_after, results["after"] = _counted(counter, shuffle_read)
        rows_copied, results["after, byte copy"] = _counted(
            counter, lambda: shuffle_read(copied_url)
        )
        polars_rows, results["hive parquet (polars)"] = _counted(
            counter,
            lambda: (
                pl.scan_parquet([f"s3://{p}" for p in hive_paths], storage_options=polars_options)
                .collect()
                .height
            ),
        )
        arrow_rows, results["hive parquet (pyarrow)"] = _counted(
            counter,
            lambda: (
                pads.dataset(hive_paths, format="parquet", filesystem=arrow_s3).to_table().num_rows
            ),
        )
        if len({rows, rows_after, rows_copied, polars_rows, arrow_rows}) != 1:
            raise SystemExit(
                f"readers disagree: {rows} rows before compaction, {rows_after} after, "
                f"{rows_copied} after a byte copy, {polars_rows} polars, {arrow_rows} pyarrow"
            )
        results["consumer_rows"] = rows
        return results


def print_s3(result: dict[str, Any], args: argparse.Namespace) -> None:
    print(
        f"\nS3 (moto), {args.files} files x {args.subpartitions} subpartitions, one consumer of "
        f"{args.consumers} ({result['consumer_rows']:,} rows):"
    )
    print(f"{'layout':<26}{'GETs':>8}{'bytes':>14}{'20ms+100MB/s':>14}{'50ms+1GB/s':>12}")
    labels = {
        "before": "arrowshuffle, M files",
        "after, byte copy": "compacted, byte copy",
        "after": "compacted, re-batched",
    }
    for name in (*labels, "hive parquet (polars)", "hive parquet (pyarrow)"):
        r = result[name]
        label = labels.get(name, name)
        print(
            f"{label:<26}{r['gets']:>8}{r['bytes']:>14,}{r['modeled_20ms_100MBps_s']:>13.2f}s"
            f"{r['modeled_50ms_1000MBps_s']:>11.2f}s"
        )
    for key, label in (("compaction_copied", "byte copy"), ("compaction", "re-batched")):
        c = result[key]
        print(
            f"compaction ({label}): {c['seconds']:.1f} s, {c['files_before']} -> "
            f"{c['files_after']} files, read {c['bytes_read']:,} data bytes, wrote "
            f"{c['bytes_written']:,} bytes, {c['requests']} requests"
        )
    ratio = result["before"]["gets"] / max(1, result["after"]["gets"])
    print(f"GETs per consumer: {ratio:.0f}x fewer after compaction")
    for name in ("hive parquet (polars)", "hive parquet (pyarrow)"):
        parquet = max(1, result[name]["bytes"])
        print(
            f"consumer bytes / {name}: {result['after, byte copy']['bytes'] / parquet:.2f}x "
            f"after a byte copy, {result['after']['bytes'] / parquet:.2f}x re-batched"
        )
    seconds = result["compaction"]["seconds"] / result["compaction_copied"]["seconds"]
    print(f"compaction time, re-batched / byte copy: {seconds:.2f}x")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--files", type=int, default=1000, help="producer files M on S3")
    parser.add_argument("--subpartitions", type=int, default=1000, help="subpartitions N")
    parser.add_argument("--consumers", type=int, default=100, help="consumers C")
    parser.add_argument("--consumer", type=int, default=0, help="which consumer is measured")
    parser.add_argument("--rows", type=int, default=2000, help="rows per producer file")
    parser.add_argument("--local-files", default="16,64,256,1024", help="M values measured locally")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="M = 64, N = 200, local M 16,64")
    add_skip_s3(parser)
    parser.add_argument("--out", help="write the results as JSON here")
    args = parser.parse_args(argv)
    if args.quick:
        args.files, args.subpartitions, args.local_files = 64, 200, "16,64"
    if args.subpartitions % args.consumers:
        parser.error("--subpartitions must be a multiple of --consumers")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    doc: dict[str, Any] = {"config": {k: v for k, v in vars(args).items() if k != "out"}}
    with tempfile.TemporaryDirectory(prefix="bench-wide-") as tmp:
        doc["local"] = measure_local(args, Path(tmp))
        if not args.skip_s3:
            doc["s3"] = measure_s3(args, Path(tmp))
            print_s3(doc["s3"], args)
    if args.out:
        write_results(args.out, doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
