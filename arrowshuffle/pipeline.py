"""The main job: a shuffle pipeline on local Spark, end to end, with a summary.

``python -m arrowshuffle.pipeline [--rows N] [--subpartitions N] [--out DIR] [--keep]``

1. start local Spark (``local[*]``) with the ``arrowshuffle`` data source;
2. generate rows in Spark (``spark.range`` and expressions) with a skewed key: a third of the
   rows share one key value;
3. write them as a shuffle dataset, hash-partitioned by the key (Spark computes each row's
   subpartition in the JVM);
4. validate every file (layout, checksums, and every row's subpartition recomputed);
5. read every subpartition back with Spark and with the pyarrow reader and check both against
   ``df.repartition(n, key)``: row counts and an order-free checksum of the rows for every
   subpartition, and the exact rows of the largest and of one other subpartition;
6. print a summary: files, regions, rows per subpartition, skew (max/mean) and timings.

Exit codes: 0 when every check passes, 1 when one fails, 2 when Spark cannot start (no Java).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from arrowshuffle.readers.validate import validate_file

KEY = "key"
#: Share of rows that carry the hot key (the skew of the generated data).
HOT_SHARE = 1 / 3


@dataclass
class Report:
    """Timings and check results gathered while the pipeline runs."""

    timings: dict[str, float] = field(default_factory=dict)
    checks: dict[str, bool] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    @contextlib.contextmanager
    def step(self, name: str) -> Iterator[None]:
        """Time the block as step ``name`` and say what runs."""
        print(f"... {name}", flush=True)
        start = time.perf_counter()
        try:
            yield
        finally:
            self.timings[name] = time.perf_counter() - start

    def check(self, name: str, ok: bool, detail: str = "") -> None:
        """Record a check; a failed one prints its detail."""
        self.checks[name] = ok
        if not ok:
            self.notes.append(f"FAILED {name}: {detail}")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """The command line."""
    parser = argparse.ArgumentParser(
        prog="python -m arrowshuffle.pipeline",
        description="Run a shuffle pipeline on local Spark: generate, write, validate, read "
        "back and check against Spark's own repartition.",
    )
    parser.add_argument("--rows", type=int, default=500_000, help="rows to generate")
    parser.add_argument("--subpartitions", type=int, default=16, help="subpartitions per file")
    parser.add_argument(
        "--files", type=int, default=4, help="Spark partitions writing, so shuffle files"
    )
    parser.add_argument("--keys", type=int, default=10_000, help="distinct key values")
    parser.add_argument(
        "--memory", default="4MiB", help="sort buffer of each writer; a full buffer is a region"
    )
    parser.add_argument(
        "--out",
        help="dataset directory (kept; a dataset already there is replaced); default: a "
        "temporary directory (removed)",
    )
    parser.add_argument(
        "--keep", action="store_true", help="keep the temporary dataset and print its path"
    )
    parser.add_argument("--master", default="local[*]", help="Spark master (default local[*])")
    args = parser.parse_args(argv)
    for name in ("rows", "subpartitions", "files", "keys"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1")
    return args


def generate(spark: Any, rows: int, files: int, keys: int) -> Any:
    """Rows with a skewed key, built from ``spark.range`` with deterministic expressions."""
    from pyspark.sql import functions as F

    hot = int(1 / HOT_SHARE)
    ids = spark.range(0, rows, numPartitions=files)
    return ids.select(
        F.col("id"),
        F.expr(f"CASE WHEN id % {hot} = 0 THEN 0 ELSE pmod(xxhash64(id), {keys}) + 1 END")
        .cast("long")
        .alias(KEY),
        F.expr(
            "element_at(array('north', 'süd', '東', 'ouest'), cast(pmod(id, 4) + 1 AS int))"
        ).alias("region"),
        F.expr("cast(pmod(xxhash64(id, 7), 10000000) / 100 AS decimal(12, 2))").alias("amount"),
        F.expr("timestamp_seconds(1700000000 + pmod(xxhash64(id, 11), 31536000))").alias("ts"),
        F.expr("cast(pmod(xxhash64(id, 13), 1000000) AS double) / 1000").alias("score"),
    )


def row_checksums(df: Any, partition: Any) -> dict[int, tuple[int, int]]:
    """Per partition expression value: (rows, sum of a per-row hash), order-free."""
    from pyspark.sql import functions as F

    row_hash = F.pmod(F.xxhash64(*[F.col(c) for c in df.columns]), F.lit(2**31 - 1))
    table = (
        df.select(partition.alias("p"), row_hash.alias("h"))
        .groupBy("p")
        .agg(F.count(F.lit(1)).alias("rows"), F.sum("h").alias("checksum"))
        .toArrow()
    )
    return {
        int(p): (int(r), int(c))
        for p, r, c in zip(
            table["p"].to_pylist(),
            table["rows"].to_pylist(),
            table["checksum"].to_pylist(),
            strict=True,
        )
    }


def validate_files(dataset: Any) -> tuple[list[str], list[str]]:
    """Validate every file with the validator's deep checks.

    Returns:
        The problems found, and the checks the validator could not run.
    """
    problems: list[str] = []
    skipped: list[str] = []
    for entry in dataset.manifest.files:
        report = validate_file(dataset.directory.child(entry.data).url, deep=True)
        problems.extend(f"{entry.data}: [{v.rule}] {v.message}" for v in report.violations)
        skipped.extend(f"{entry.data}: {why}" for why in report.summary.get("skipped", []))
    return problems, skipped


def sorted_by_id(table: pa.Table) -> pa.Table:
    """Rows in ``id`` order, so two tables with the same rows compare equal."""
    return table.take(pc.sort_indices(table, sort_keys=[("id", "ascending")]))


def run(
    args: argparse.Namespace, out: str, report: Report, spark: Any | None = None
) -> dict[str, Any]:
    """Run every step; return the facts the summary prints.

    Args:
        args: the parsed command line.
        out: the dataset directory.
        report: collects timings and checks.
        spark: a running SparkSession to use (left running); by default a local one is
            started and stopped.
    """
    from pyspark.sql import functions as F

    import arrowshuffle.spark as ash_spark
    from arrowshuffle.readers.dataset import open_dataset

    n = args.subpartitions
    own_session = spark is None
    if spark is None:
        with report.step("start Spark"):
            spark = ash_spark.local_session("arrowshuffle-pipeline", master=args.master)
    else:
        ash_spark.register(spark)
    df = None
    try:
        with report.step("generate"):
            df = generate(spark, args.rows, args.files, args.keys).cache()
            generated = df.count()
        report.check("generated rows", generated == args.rows, f"{generated} != {args.rows}")

        with report.step("write (arrowshuffle, hash)"):
            dataset = ash_spark.write(
                df,
                out,
                num_subpartitions=n,
                partition_by=KEY,
                compression="lz4",
                memory=args.memory,
                mode="overwrite",
            )
        report.check(
            "rows written", dataset.num_rows == args.rows, f"{dataset.num_rows} != {args.rows}"
        )

        with report.step("validate (deep)"):
            problems, skipped = validate_files(dataset)
        report.check("validation of every file", not problems, "; ".join(problems[:5]))
        report.notes.extend(f"not checked: {why}" for why in skipped[:5])

        with report.step("expected: df.repartition(n, key)"):
            expected = row_checksums(df.repartition(n, KEY), F.spark_partition_id())

        with report.step("read back with Spark"):
            back = (
                spark.read.format("arrowshuffle").option("partitioning", "subpartition").load(out)
            )
            spark_partitions = back.rdd.getNumPartitions()
            from_spark = row_checksums(back, F.spark_partition_id())
        report.check(
            "Spark read: one partition per subpartition",
            spark_partitions == n,
            f"{spark_partitions} partitions",
        )
        differ = sorted(
            s for s in set(expected) | set(from_spark) if expected.get(s) != from_spark.get(s)
        )
        report.check(
            "Spark read == repartition (rows and checksum per subpartition)",
            not differ,
            f"differs in subpartitions {differ}",
        )

        with report.step("read back with pyarrow"):
            local = open_dataset(out)
            counts = [local.read(s, columns=["id"]).num_rows for s in range(n)]
        want_counts = [expected.get(s, (0, 0))[0] for s in range(n)]
        report.check(
            "pyarrow read == repartition (rows per subpartition)",
            counts == want_counts,
            f"{counts} != {want_counts}",
        )

        with report.step("exact rows of two subpartitions"):
            largest = max(range(n), key=lambda s: counts[s])
            other = (largest + n // 2) % n
            for s in sorted({largest, other}):
                spark_rows = (
                    df.repartition(n, KEY)
                    .where(F.spark_partition_id() == s)
                    .toArrow()
                    .cast(local.schema)
                )
                ours = local.read(s)
                same = sorted_by_id(ours).equals(sorted_by_id(spark_rows))
                report.check(f"subpartition {s}: exact rows", same, "rows differ")

        stats = local.stats()
        return {
            "files": local.num_files,
            "regions": sum(local.file(i).num_regions for i in range(local.num_files)),
            "bytes": sum(f.data_size + f.index_size for f in local.manifest.files),
            "rows": local.num_rows,
            "rows_per_subpartition": counts,
            "chunks": stats.num_rows,
        }
    finally:
        if df is not None:
            df.unpersist()
        if own_session:
            spark.stop()


def format_summary(
    args: argparse.Namespace, out: str, facts: dict[str, Any], report: Report
) -> str:
    """The human-readable summary."""
    counts: list[int] = facts.get("rows_per_subpartition", [])
    lines = [
        "",
        "arrowshuffle pipeline on local Spark",
        f"  dataset          {out}",
        f"  rows             {facts.get('rows', 0):,} (generated {args.rows:,}, "
        f"{args.keys:,} keys, hot key share {HOT_SHARE:.0%})",
        f"  files            {facts.get('files', 0)} data/index pairs, "
        f"{facts.get('bytes', 0) / 2**20:.1f} MiB",
        f"  regions          {facts.get('regions', 0)} in total",
        f"  subpartitions    {args.subpartitions}",
    ]
    if counts:
        mean = sum(counts) / len(counts)
        skew = max(counts) / mean if mean else 0.0
        lines.append(
            f"  rows per subpartition  min {min(counts):,}  mean {mean:,.0f}  max {max(counts):,}"
        )
        lines.append(f"  skew (max/mean)  {skew:.2f}")
        lines.append("  " + " ".join(f"{s}:{c}" for s, c in enumerate(counts)))
    lines.append("timings")
    for name, seconds in report.timings.items():
        lines.append(f"  {name:<36} {seconds:8.2f} s")
    lines.append("checks")
    for name, ok in report.checks.items():
        lines.append(f"  {'ok  ' if ok else 'FAIL'} {name}")
    lines.extend(f"  {note}" for note in report.notes)
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the pipeline; return the exit code."""
    args = parse_args(argv)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from arrowshuffle.spark.session import SparkUnavailableError, check_spark_available

    try:
        check_spark_available()
    except SparkUnavailableError as exc:
        print(f"arrowshuffle pipeline: cannot start Spark: {exc}", file=sys.stderr)
        return 2
    temporary = None if args.out else tempfile.mkdtemp(prefix="arrowshuffle-pipeline-")
    out = args.out or os.path.join(str(temporary), "dataset")
    report = Report()
    try:
        facts = run(args, out, report)
    except Exception as exc:
        print(f"arrowshuffle pipeline failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    finally:
        if temporary is not None and not args.keep:
            shutil.rmtree(temporary, ignore_errors=True)
    if temporary is not None and args.keep:
        print(f"kept the dataset at {out}")
    where = out if temporary is None or args.keep else f"{out} (removed)"
    print(format_summary(args, where, facts, report))
    return 0 if all(report.checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
