"""Benchmark shuffle layouts written and read by Spark: arrowshuffle vs two Parquet layouts.

Run from the repository root::

    python -m benchmarks.bench_spark --rows 1000000 --subpartitions 16 --files 4 --repeats 3

One local Spark session (``local[*]``), one generated DataFrame (the main job's data: a skewed
long key, a string, a decimal, a timestamp and a double; cached before timing), then three
ways to lay out N subpartitions for downstream consumers:

``arrowshuffle``
    ``arrowshuffle.spark.write(df, partition_by=key)``: one data/index pair per Spark task
    (M files), region-sorted, LZ4 bodies. Spark computes the subpartitions (``pmod(hash)``).
``repartition parquet``
    ``df.repartition(N, key).write.parquet``: a full Spark shuffle first, then one Parquet file
    per subpartition (N files; Snappy).
``partitionBy parquet``
    ``df.withColumn("sub", pmod(hash(key), N)).write.partitionBy("sub").parquet``: the hive
    layout, one file per (task, subpartition) (M x N files; Snappy).

Measured, each as the median of ``--repeats`` runs: the write's wall time, the data files,
objects (data files plus index sidecars) and bytes it produces, reading one subpartition (a
typical one, not the hot key's) and reading all of them back with Spark. Reads compute a sum
over a hash of every column, so every byte of every column is decoded (a ``count()`` would let
Parquet answer from its footers). Results are printed as a table with ratios to arrowshuffle
and written as JSON.

Then the read modes of the data source (``--modes-rows`` rows, default 2M, in
``--modes-subpartitions`` subpartitions written as ``--modes-files`` files; ``0`` skips them):
the wall time of a full read aggregated by key (``groupBy(key)``, an aggregate of every
column) with ``partitioning=plan`` (the default: the target is the selected bytes over the
cores), a plan at ``target_bytes=128MiB``, ``partitioning=subpartition`` (one Spark partition
per subpartition), ``consumers=2``, and the same rows as Parquet read by Spark, written as
``df.write.parquet`` (one file per writing task) and as ``df.repartition(n, key).write.parquet``
(one file per subpartition); once on the main job's hot-key data (a third of the rows on one
key) and once with uniform keys. The modes read LZ4 files; the planned read also runs on the same
rows written with ZSTD, the writers' default. Two more readers bound the source's cost: the
planned read of the same rows written uncompressed, and a floor, a minimal Python data source
that yields the batches of plain memory-mapped IPC files of the same rows (one per core) with no
index, plan or check: what any Python data source pays to hand Arrow batches to Spark. The read
modes run interleaved, each repeat in another order.
"""

from __future__ import annotations

import argparse
import functools
import os
import platform
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import arrowshuffle
from arrowshuffle.format.naming import INDEX_SUFFIX
from benchmarks import timing
from benchmarks.output import write_results

DEFAULT_OUT = Path(__file__).parent / "results" / "spark.json"
LAYOUTS = ("arrowshuffle", "repartition parquet", "partitionBy parquet")
#: The data source's read modes (name: reader options) and the Parquet peer, compared on one
#: full read aggregated by key.
READ_MODES: dict[str, dict[str, str]] = {
    "plan": {"partitioning": "plan"},
    "plan 128MiB": {"partitioning": "plan", "target_bytes": "128MiB"},
    "subpartition": {"partitioning": "subpartition"},
    "consumers=2": {"consumers": "2"},
}
PARQUET = "parquet"
#: The same rows shuffled by key into the subpartition count first (a Spark shuffle's output).
REPARTITION_PARQUET = "repartition parquet"
#: The planned read of the same rows written uncompressed (the modes above read LZ4).
PLAN_UNCOMPRESSED = "plan, compression none"
#: The planned read of the same rows written with the writers' default codec (ZSTD).
PLAN_ZSTD = "plan, compression zstd"
#: The floor of any Python data source: the same rows from plain memory-mapped IPC files,
#: one per core, yielded as Arrow batches with no index, plan or check.
PYTHON_SOURCE_FLOOR = "python source floor"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--subpartitions", type=int, default=16)
    parser.add_argument("--files", type=int, default=4, help="Spark tasks writing (M)")
    parser.add_argument("--keys", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--master", default="local[*]")
    parser.add_argument(
        "--modes-rows", type=int, default=2_000_000, help="rows of the read-mode runs (0: skip)"
    )
    parser.add_argument("--modes-subpartitions", type=int, default=64)
    parser.add_argument("--modes-files", type=int, default=8)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="JSON results file")
    return parser.parse_args(argv)


def timed(fn: Callable[[], Any], repeats: int) -> tuple[float, Any]:
    """Median wall time of ``repeats`` calls, and the last call's result."""
    times, result = timing.timed(fn, repeats)
    return timing.median(times), result


def data_files(path: str, current: list[str] | None = None) -> tuple[int, int, int]:
    """Data files under ``path``, all objects (index sidecars too) and their bytes.

    Manifests, success markers and checksum files are not counted. ``current`` (a dataset's
    listed data files) limits the count to those files and their sidecars: an overwrite keeps
    the older versions' files until a vacuum, and they are not part of the write measured.
    """
    if current is not None:
        pairs = [(f, f + INDEX_SUFFIX) for f in current]
        return len(pairs), 2 * len(pairs), sum(os.path.getsize(p) for pair in pairs for p in pair)
    data = objects = size = 0
    for root, _, names in os.walk(path):
        for name in names:
            if name.startswith((".", "_")) or name.endswith(".crc"):
                continue
            objects += 1
            data += not name.endswith(".idx")
            size += os.path.getsize(os.path.join(root, name))
    return data, objects, size


def full_scan(df: Any) -> int:
    """Decode every column of every row: the sum of a hash of each row."""
    from pyspark.sql import functions as F

    row_hash = F.pmod(F.xxhash64(*[F.col(c) for c in df.columns]), F.lit(2**31 - 1))
    return int(df.select(F.sum(row_hash)).collect()[0][0] or 0)


def repartition_file(path: str, subpartition: int) -> list[str]:
    """The Parquet file(s) Spark wrote for partition ``subpartition`` (``part-0000s-...``)."""
    prefix = f"part-{subpartition:05d}-"
    return [
        os.path.join(path, name)
        for name in sorted(os.listdir(path))
        if name.startswith(prefix) and name.endswith(".parquet")
    ]


def stats(times: list[float]) -> dict[str, float]:
    """Median, min and max of a list of wall times."""
    return timing.spread(times)


def tree_cpu_seconds() -> float | None:
    """CPU seconds used so far by this process and its descendants (Spark's JVM, its Python
    workers; exited children count through their parents). None where /proc is missing.

    On a machine shared with other work, wall times drift with the load; CPU time much less.
    """
    try:
        stats = {}
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    with open(f"/proc/{entry}/stat") as f:
                        fields = f.read().rsplit(")", 1)[1].split()
                except OSError:
                    continue
                # After the name: state, ppid, ... utime stime cutime cstime (fields 14-17).
                stats[int(entry)] = (int(fields[1]), sum(int(x) for x in fields[11:15]))
    except OSError:
        return None
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in stats.items():
        children.setdefault(ppid, []).append(pid)
    total, todo = 0, [os.getpid()]
    while todo:
        pid = todo.pop()
        total += stats.get(pid, (0, 0))[1]
        todo.extend(children.get(pid, []))
    return total / os.sysconf("SC_CLK_TCK")


def aggregate(df: Any) -> list[tuple[Any, ...]]:
    """A full read aggregated by key, touching every column; sorted, to compare.

    Every column is aggregated so that Parquet, which reads only the columns a query uses
    (the Python data source reads them all), decodes as much as the data source.
    """
    from pyspark.sql import functions as F

    from arrowshuffle.pipeline import KEY

    rows = (
        df.groupBy(KEY)
        .agg(
            F.count(F.lit(1)),
            F.sum("id"),
            F.max("region"),
            F.sum("amount"),
            F.max("ts"),
            F.sum("score"),
        )
        .collect()
    )
    # A sum of doubles depends on the order rows arrive in: compare it rounded.
    return sorted((*r[:-1], round(float(r[-1]), 3)) for r in rows)


def floor_source(spark: Any) -> str:
    """Register the floor data source with ``spark``; return its format name.

    Its reader yields every batch of a list of plain Arrow IPC files, one file per Spark
    partition, memory-mapped: what reaching the JVM through a Python data source costs when
    reading costs nothing. Defined here, not at module level, so that it is pickled by value
    (the workers need not import the benchmarks).
    """
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    class FilePartition(InputPartition):
        def __init__(self, path: str) -> None:
            self.path = path

    class FloorReader(DataSourceReader):
        def __init__(self, paths: list[str]) -> None:
            self.paths = paths

        def partitions(self) -> list[FilePartition]:
            return [FilePartition(p) for p in self.paths]

        def read(self, partition: InputPartition) -> Any:
            import pyarrow as pa

            assert isinstance(partition, FilePartition)
            with pa.memory_map(partition.path) as source:
                reader = pa.ipc.open_file(source)
                yield from (reader.get_batch(i) for i in range(reader.num_record_batches))

    class FloorSource(DataSource):
        @classmethod
        def name(cls) -> str:
            return "arrowshuffle_bench_floor"

        def reader(self, schema: Any) -> FloorReader:
            return FloorReader(self.options["paths"].split(","))

    spark.dataSource.register(FloorSource)
    return str(FloorSource.name())


def write_plain_files(path: str, pieces: int, out: str) -> list[str]:
    """The rows of dataset ``path`` as ``pieces`` uncompressed IPC files (64Ki-row batches)."""
    import pyarrow as pa

    from arrowshuffle.readers.dataset import open_dataset

    table = open_dataset(path).read().combine_chunks()
    step = -(-table.num_rows // pieces)
    paths = []
    for i in range(pieces):
        name = f"{out}-{i}.arrow"
        with pa.OSFile(name, "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
            writer.write_table(table.slice(i * step, step), max_chunksize=1 << 16)
        paths.append(name)
    return paths


def read_modes(spark: Any, args: argparse.Namespace, work: str) -> dict[str, Any]:
    """Time a full aggregated read in every read mode and from Parquet, on two key skews."""
    from pyspark.sql import functions as F

    import arrowshuffle.spark as ash_spark
    from arrowshuffle.pipeline import KEY, generate
    from arrowshuffle.readers.dataset import open_dataset

    n = args.modes_subpartitions
    out: dict[str, Any] = {}
    floor = floor_source(spark)
    hot = generate(spark, args.modes_rows, args.modes_files, args.keys)
    uniform = hot.withColumn(
        KEY, (F.pmod(F.xxhash64(F.col("id"), F.lit(3)), F.lit(args.keys)) + 1).cast("long")
    )
    for data, df in (("hot key", hot), ("uniform keys", uniform)):
        print(f"... read modes, {data}: write", flush=True)
        df = df.cache()
        df.count()
        path = os.path.join(work, f"modes-{data.replace(' ', '_')}")
        parquet = path + ".parquet"
        repartitioned = path + ".repartition.parquet"
        ash_spark.write(
            df, path, num_subpartitions=n, partition_by=KEY, compression="lz4", mode="overwrite"
        )
        ash_spark.write(
            df, path + ".none", num_subpartitions=n, partition_by=KEY, compression="none"
        )
        ash_spark.write(
            df, path + ".zstd", num_subpartitions=n, partition_by=KEY, compression="zstd"
        )
        df.write.mode("overwrite").parquet(parquet)
        df.repartition(n, KEY).write.mode("overwrite").parquet(repartitioned)
        expected = aggregate(df)
        df.unpersist()
        dataset = open_dataset(path)
        sizes, _ = dataset.subpartition_sizes()
        readers: dict[str, Callable[[], Any]] = {
            PARQUET: lambda p=parquet: spark.read.parquet(p),
            REPARTITION_PARQUET: lambda p=repartitioned: spark.read.parquet(p),
        }
        for mode, options in READ_MODES.items():
            readers[mode] = lambda o=options, p=path: (
                spark.read.format("arrowshuffle").options(**o).load(p)
            )
        source = spark.read.format("arrowshuffle")
        readers[PLAN_UNCOMPRESSED] = functools.partial(source.load, path + ".none")
        readers[PLAN_ZSTD] = functools.partial(source.load, path + ".zstd")
        plain = write_plain_files(path, spark.sparkContext.defaultParallelism, path)
        floor_read = spark.read.format(floor).schema(source.load(path).schema)
        readers[PYTHON_SOURCE_FLOOR] = functools.partial(
            floor_read.option("paths", ",".join(plain)).load
        )
        results: dict[str, Any] = {}
        times: dict[str, list[float]] = {name: [] for name in readers}
        cpus: dict[str, list[float]] = {name: [] for name in readers}
        print(f"... read modes, {data}: read", flush=True)
        for name, make in readers.items():  # one untimed run each: Python workers, JIT
            if aggregate(make()) != expected:
                raise SystemExit(f"read modes, {data}, {name}: the aggregate differs")
        names = list(readers)
        for r in range(args.repeats):  # interleaved, so drifts of the machine hit every mode
            for name in names[r % len(names) :] + names[: r % len(names)]:
                make = readers[name]
                cpu = tree_cpu_seconds()
                start = time.perf_counter()
                aggregate(make())
                times[name].append(time.perf_counter() - start)
                after = tree_cpu_seconds()
                if cpu is not None and after is not None:
                    cpus[name].append(after - cpu)
        for name, make in readers.items():
            results[name] = {**stats(times[name]), "partitions": make().rdd.getNumPartitions()}
            if cpus[name]:
                results[name].update({f"cpu_{k}": v for k, v in stats(cpus[name]).items()})
        out[data] = {
            "bytes": int(sizes.sum()),
            "max_over_mean_subpartition": float(sizes.max() / sizes.mean()),
            "results": results,
        }
    return out


def print_modes(modes: dict[str, Any], args: argparse.Namespace) -> None:
    """The read-mode table: medians, partitions and ratios to Parquet."""
    print()
    print(
        f"{args.modes_rows:,} rows, {args.modes_subpartitions} subpartitions in "
        f"{args.modes_files} files, master {args.master}, full read + groupBy(key), "
        f"median of {args.repeats}; x = time / Parquet's time, x rep = time / repartitioned "
        "Parquet's time, cpu = CPU seconds of this process tree (Spark's JVM and workers)"
    )
    for data, entry in modes.items():
        results = entry["results"]
        base = results[PARQUET]["median_s"]
        print(
            f"{data}: {entry['bytes'] / 2**20:.1f} MiB, largest subpartition "
            f"{entry['max_over_mean_subpartition']:.1f}x the mean"
        )
        rep = results[REPARTITION_PARQUET]["median_s"]
        header = (
            f"  {'mode':<20}{'partitions':>11}{'median s':>10}{'min s':>8}{'max s':>8}"
            f"{'x':>7}{'x rep':>7}{'cpu s':>8}{'cpu x':>7}"
        )
        print(header)
        for name, r in results.items():
            cpu = r.get("cpu_median_s")
            cpu_base = results[PARQUET].get("cpu_median_s")
            cpu_text = f"{cpu:>8.2f}{cpu / cpu_base:>7.2f}" if cpu and cpu_base else ""
            print(
                f"  {name:<20}{r['partitions']:>11}{r['median_s']:>10.2f}{r['min_s']:>8.2f}"
                f"{r['max_s']:>8.2f}{r['median_s'] / base:>7.2f}{r['median_s'] / rep:>7.2f}"
                f"{cpu_text}"
            )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import functions as F

    import arrowshuffle.spark as ash_spark
    from arrowshuffle.pipeline import KEY, generate

    n = args.subpartitions
    spark = ash_spark.local_session(
        "arrowshuffle-bench",
        master=args.master,
        config={"spark.sql.shuffle.partitions": str(n)},
    )
    work = tempfile.mkdtemp(prefix="arrowshuffle-bench-")
    try:
        df = generate(spark, args.rows, args.files, args.keys).cache()
        df.count()
        sub = F.pmod(F.hash(F.col(KEY)), F.lit(n))
        counts = {
            int(r["s"]): int(r["count"]) for r in df.groupBy(sub.alias("s")).count().collect()
        }
        hot = max(counts, key=lambda s: counts[s])
        typical = sorted((s for s in counts if s != hot), key=lambda s: counts[s])[
            (len(counts) - 1) // 2
        ]
        paths = {name: os.path.join(work, name.replace(" ", "_")) for name in LAYOUTS}

        writers: dict[str, Callable[[], Any]] = {
            "arrowshuffle": lambda: ash_spark.write(
                df,
                paths["arrowshuffle"],
                num_subpartitions=n,
                partition_by=KEY,
                compression="lz4",
                mode="overwrite",
            ),
            "repartition parquet": lambda: (
                df.repartition(n, KEY).write.mode("overwrite").parquet(paths["repartition parquet"])
            ),
            "partitionBy parquet": lambda: (
                df.withColumn("sub", sub)
                .write.mode("overwrite")
                .partitionBy("sub")
                .parquet(paths["partitionBy parquet"])
            ),
        }

        def read_one(name: str) -> Callable[[], int]:
            path = paths[name]
            if name == "arrowshuffle":
                return lambda: full_scan(ash_spark.read(spark, path, subpartitions=typical))
            if name == "repartition parquet":
                return lambda: full_scan(spark.read.parquet(*repartition_file(path, typical)))
            return lambda: full_scan(
                spark.read.parquet(path).where(F.col("sub") == typical).drop("sub")
            )

        def read_all(name: str) -> Callable[[], int]:
            path = paths[name]
            if name == "arrowshuffle":
                return lambda: full_scan(spark.read.format("arrowshuffle").load(path))
            if name == "repartition parquet":
                return lambda: full_scan(spark.read.parquet(path))
            return lambda: full_scan(spark.read.parquet(path).drop("sub"))

        results: dict[str, dict[str, Any]] = {}
        expected_all = full_scan(df)
        expected_one = full_scan(df.where(sub == typical))
        for name in LAYOUTS:
            print(f"... {name}: write", flush=True)
            write_s, _ = timed(writers[name], args.repeats)
            listed = None
            if name == "arrowshuffle":
                listed = arrowshuffle.open_dataset(paths[name]).data_files
            files, objects, size = data_files(paths[name], listed)
            print(f"... {name}: read", flush=True)
            one_s, one = timed(read_one(name), args.repeats)
            all_s, everything = timed(read_all(name), args.repeats)
            if (one, everything) != (expected_one, expected_all):
                raise SystemExit(f"{name}: the read-back rows differ from the source")
            results[name] = {
                "write_s": write_s,
                "files": files,
                "objects": objects,
                "bytes": size,
                "read_one_s": one_s,
                "read_all_s": all_s,
            }
        df.unpersist()
        modes = read_modes(spark, args, work) if args.modes_rows > 0 else {}
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)

    base = results["arrowshuffle"]
    header = (
        f"{'layout':<22}{'files':>7}{'objects':>9}{'MiB':>8}{'write s':>9}{'x':>6}"
        f"{'read 1 s':>10}{'x':>6}{'read all s':>12}{'x':>6}"
    )
    lines = [header, "-" * len(header)]
    for name in LAYOUTS:
        r = results[name]
        lines.append(
            f"{name:<22}{r['files']:>7}{r['objects']:>9}{r['bytes'] / 2**20:>8.1f}"
            f"{r['write_s']:>9.2f}{r['write_s'] / base['write_s']:>6.2f}"
            f"{r['read_one_s']:>10.2f}{r['read_one_s'] / base['read_one_s']:>6.2f}"
            f"{r['read_all_s']:>12.2f}{r['read_all_s'] / base['read_all_s']:>6.2f}"
        )
    print()
    print(
        f"{args.rows:,} rows, {n} subpartitions, {args.files} writing tasks, master "
        f"{args.master}, median of {args.repeats}; x = time / arrowshuffle's time; "
        f"read 1 = subpartition {typical} ({counts[typical]:,} rows; hot one: "
        f"{counts[hot]:,})"
    )
    print("\n".join(lines))
    if modes:
        print_modes(modes, args)

    args.out.parent.mkdir(parents=True, exist_ok=True)
    document = {
        "benchmark": "spark layouts",
        "rows": args.rows,
        "subpartitions": n,
        "files": args.files,
        "keys": args.keys,
        "repeats": args.repeats,
        "master": args.master,
        "read_one_subpartition": typical,
        "rows_in_read_one": counts[typical],
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
        },
        "results": results,
        "modes": {
            "rows": args.modes_rows,
            "subpartitions": args.modes_subpartitions,
            "files": args.modes_files,
            "data": modes,
        },
    }
    write_results(args.out, document, sort_keys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
