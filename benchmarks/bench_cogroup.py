"""Co-partitioned join + aggregate: co-grouped reads against engines that shuffle or join whole.

Run from the repository root::

    python -m benchmarks.bench_cogroup                         # 2M lines, 500k orders, N = 64
    python -m benchmarks.bench_cogroup --lines 6000000 --orders 1500000 --repeats 5

Data (generated with numpy, shaped like TPC-H): ``lineitem`` with 16 columns and ``orders``
with 9, joined on the order key; **a third of the lines are on one order key** (a hot key).
Both are written twice as arrowshuffle datasets (with the default ZSTD and with
``compression="none"``) hash-partitioned by their order key into
``--subpartitions`` subpartitions (``--files`` producer files for lineitem, 2 for orders), and
once as Parquet files (pyarrow, zstd, the same file counts).

The query, in every engine: the lines joined with their order (inner join on the order key),
revenue ``sum(l_extendedprice * (1 - l_discount))`` and a count per ``(o_orderpriority,
l_shipmode)``. It needs 4 of lineitem's 16 columns. Every engine's result is checked equal to
DuckDB's (counts exactly, sums to 1e-9 relative) before any time is reported.

Timed (medians over ``--repeats``; the engines alternate within each repeat):

* Spark ``local[2]`` on Parquet: ``spark.read.parquet`` join + groupBy, with Spark's default
  planning (its shuffles, or a broadcast of the orders when they are small; AQE on).
* Spark on the arrowshuffle source: ``spark.read.format("arrowshuffle")`` for both, the same
  DataFrame query (Spark shuffles both again: a Python source cannot report partitioning).
* arrowshuffle in Spark: ``arrowshuffle.spark.map_cogroups`` — each Spark task reads the same
  subpartitions of both datasets, joins and aggregates them with pyarrow; Spark adds up the
  per-task partial aggregates. The physical plan of the co-grouped part is printed and must
  have no ``Exchange``.
* the two co-grouped runs again on the uncompressed datasets (``, none``): Arrow's ZSTD
  decompression of the small batches of a shuffle costs more than the join itself, and a local
  uncompressed read is zero-copy.
* polars, one big join of the Parquet files (``scan_parquet`` both, lazy join + group_by).
* arrowshuffle in polars: ``arrowshuffle.polars.cogroup(...).map(...)`` on two threads, each
  task a lazy join + group_by, partial aggregates concatenated and added up.
* DuckDB on the Parquet files (the same SQL).

Column selection: the lineitem dataset read through the Spark source, all 16 columns (a Python
data source gets no pruned schema, so Spark reads them all) against ``.option("columns", ...)``
naming the 4 the query needs, then aggregated: Spark's time, and the data-file bytes the
source's read path reads for every task of its plan (counted by the reader: bytes mapped and
touched locally; run in this process, since Spark's Python workers are other processes).

Skew: the co-grouped plan splits the hot key's group over lineitem's files (``split="l"``;
each piece reads the whole group of orders). Each task of the polars run is timed alone (one
thread) with and without the split: the slowest task's time over the mean.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

import arrowshuffle
from benchmarks import timing
from benchmarks.output import write_results

DEFAULT_OUT = Path("benchmarks/results/cogroup.json")
#: The datasets' directories and their compression: the default (ZSTD), and none (zero-copy).
LAYOUTS: dict[str, str | None] = {"shuffle": None, "shuffle-none": "none"}
HOT_KEY = 7
GROUP_KEYS = ["o_orderpriority", "l_shipmode"]
LINE_COLUMNS = ["l_orderkey", "l_extendedprice", "l_discount", "l_shipmode"]
ORDER_COLUMNS = ["o_orderkey", "o_orderpriority"]
SQL = """
SELECT o_orderpriority, l_shipmode,
       sum(l_extendedprice * (1 - l_discount)) AS revenue, count(*) AS lines
FROM lineitem JOIN orders ON l_orderkey = o_orderkey
GROUP BY o_orderpriority, l_shipmode
"""


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lines", type=int, default=2_000_000, help="lineitem rows")
    parser.add_argument("--orders", type=int, default=500_000, help="orders rows")
    parser.add_argument("--subpartitions", type=int, default=64)
    parser.add_argument("--files", type=int, default=8, help="lineitem producer files")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--skip-spark", action="store_true", help="polars and DuckDB only")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="JSON results file")
    return parser.parse_args(argv)


# ---------------------------------------------------------------------------- data


def _strings(rng: np.random.Generator, values: list[str], rows: int) -> pa.Array:
    return pa.DictionaryArray.from_arrays(
        pa.array(rng.integers(0, len(values), rows), pa.int32()), pa.array(values)
    ).cast(pa.string())


def _comments(rng: np.random.Generator, rows: int, width: int) -> pa.Array:
    words = np.array([f"w{i:03d}" for i in range(1000)])
    parts = [words[rng.integers(0, 1000, rows)] for _ in range(width)]
    return pa.array(np.char.add(np.char.add(parts[0], " "), parts[1]) if width > 1 else parts[0])


def generate(lines: int, orders: int, seed: int) -> tuple[pa.Table, pa.Table]:
    """TPC-H-like ``lineitem`` (16 columns) and ``orders`` (9), a third of lines on one key."""
    rng = np.random.default_rng(seed)
    days = np.datetime64("1992-01-01")
    orderdate = days + rng.integers(0, 2400, orders).astype("timedelta64[D]")
    order_table = pa.table(
        {
            "o_orderkey": np.arange(orders, dtype=np.int64),
            "o_custkey": rng.integers(0, orders // 10 + 1, orders, dtype=np.int64),
            "o_orderstatus": _strings(rng, ["F", "O", "P"], orders),
            "o_totalprice": rng.uniform(800, 500_000, orders).round(2),
            "o_orderdate": pa.array(orderdate, pa.date32()),
            "o_orderpriority": _strings(
                rng, ["1-URGENT", "2-HIGH", "3-MEDIUM", "4-NOT SPECIFIED", "5-LOW"], orders
            ),
            "o_clerk": _strings(rng, [f"Clerk#{i:09d}" for i in range(1000)], orders),
            "o_shippriority": np.zeros(orders, dtype=np.int32),
            "o_comment": _comments(rng, orders, 2),
        }
    )
    keys = rng.integers(0, orders, lines, dtype=np.int64)
    keys[rng.random(lines) < 1 / 3] = HOT_KEY
    ship = days + rng.integers(0, 2500, lines).astype("timedelta64[D]")
    quantity = rng.integers(1, 51, lines).astype(np.float64)
    line_table = pa.table(
        {
            "l_orderkey": keys,
            "l_partkey": rng.integers(0, 200_000, lines, dtype=np.int64),
            "l_suppkey": rng.integers(0, 10_000, lines, dtype=np.int64),
            "l_linenumber": rng.integers(1, 8, lines).astype(np.int32),
            "l_quantity": quantity,
            "l_extendedprice": (quantity * rng.uniform(900, 2000, lines)).round(2),
            "l_discount": rng.integers(0, 11, lines) / 100.0,
            "l_tax": rng.integers(0, 9, lines) / 100.0,
            "l_returnflag": _strings(rng, ["A", "N", "R"], lines),
            "l_linestatus": _strings(rng, ["F", "O"], lines),
            "l_shipdate": pa.array(ship, pa.date32()),
            "l_commitdate": pa.array(ship + 30, pa.date32()),
            "l_receiptdate": pa.array(ship + 10, pa.date32()),
            "l_shipinstruct": _strings(
                rng, ["DELIVER IN PERSON", "COLLECT COD", "NONE", "TAKE BACK RETURN"], lines
            ),
            "l_shipmode": _strings(
                rng, ["AIR", "FOB", "MAIL", "RAIL", "REG AIR", "SHIP", "TRUCK"], lines
            ),
            "l_comment": _comments(rng, lines, 1),
        }
    )
    return line_table, order_table


def write_inputs(work: Path, lines: pa.Table, orders: pa.Table, args: argparse.Namespace) -> None:
    """Each table as a hash-partitioned dataset and as Parquet files, with equal file counts."""
    for name, table, key, files in (
        ("lineitem", lines, "l_orderkey", args.files),
        ("orders", orders, "o_orderkey", 2),
    ):
        step = -(-table.num_rows // files)
        (work / "parquet" / name).mkdir(parents=True)
        for f in range(files):
            part = table.slice(f * step, step)
            for layout, compression in LAYOUTS.items():
                arrowshuffle.write_dataset(
                    part,
                    work / layout / name,
                    num_subpartitions=args.subpartitions,
                    partitioner="hash",
                    by=[key],
                    mode="error" if f == 0 else "append",
                    **({} if compression is None else {"compression": compression}),
                )
            pq.write_table(part, work / "parquet" / name / f"part-{f}.parquet", compression="zstd")


def directory_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


# ---------------------------------------------------------------------------- results


def normalized(table: pa.Table) -> dict[tuple[str, str], tuple[float, int]]:
    """``{(priority, shipmode): (revenue, lines)}`` of a result table."""
    rows = table.select([*GROUP_KEYS, "revenue", "lines"]).to_pylist()
    return {(r[GROUP_KEYS[0]], r[GROUP_KEYS[1]]): (r["revenue"], int(r["lines"])) for r in rows}


def check_equal(
    name: str, got: pa.Table, expected: dict[tuple[str, str], tuple[float, int]]
) -> None:
    found = normalized(got)
    if found.keys() != expected.keys():
        raise SystemExit(f"{name}: groups differ from DuckDB's: {sorted(found)[:4]} ...")
    for key, (revenue, count) in expected.items():
        got_revenue, got_count = found[key]
        if got_count != count or not np.isclose(got_revenue, revenue, rtol=1e-9, atol=0):
            raise SystemExit(f"{name}: {key} = {found[key]}, DuckDB {expected[key]}")


# ---------------------------------------------------------------------------- engines


def duckdb_query(work: Path) -> Callable[[], pa.Table]:
    import duckdb

    con = duckdb.connect()
    for name in ("lineitem", "orders"):
        files = str(work / "parquet" / name / "*.parquet")
        con.execute(f"CREATE VIEW {name} AS SELECT * FROM read_parquet('{files}')")
    return lambda: con.sql(SQL).to_arrow_table()


def polars_parquet(work: Path) -> Callable[[], pa.Table]:
    import polars as pl

    def run() -> pa.Table:
        lines = pl.scan_parquet(work / "parquet" / "lineitem" / "*.parquet")
        orders = pl.scan_parquet(work / "parquet" / "orders" / "*.parquet")
        return polars_query(pl, lines, orders).collect().to_arrow()

    return run


def polars_query(pl: Any, lines: Any, orders: Any) -> Any:
    return (
        lines.join(orders, left_on="l_orderkey", right_on="o_orderkey")
        .group_by(GROUP_KEYS)
        .agg(
            (pl.col("l_extendedprice") * (1 - pl.col("l_discount"))).sum().alias("revenue"),
            pl.len().alias("lines"),
        )
    )


def polars_cogroup(work: Path, split: bool, layout: str = "shuffle") -> Callable[[], pa.Table]:
    import polars as pl

    import arrowshuffle.polars as ash_polars

    def run() -> pa.Table:
        groups = ash_polars.cogroup(
            inputs(work, layout),
            columns={"l": LINE_COLUMNS, "o": ORDER_COLUMNS},
            split="l" if split else None,
        )
        parts = groups.map(lambda f: polars_query(pl, f["l"], f["o"]).collect())
        return (
            pl.concat(list(parts))
            .group_by(GROUP_KEYS)
            .agg(pl.col("revenue").sum(), pl.col("lines").sum())
            .to_arrow()
        )

    return run


def inputs(work: Path, layout: str = "shuffle") -> dict[str, str]:
    return {"l": str(work / layout / "lineitem"), "o": str(work / layout / "orders")}


def task_balance(work: Path, split: bool) -> dict[str, Any]:
    """Each task of the polars co-grouped query timed alone: slowest over mean."""
    import polars as pl

    import arrowshuffle.polars as ash_polars

    groups = ash_polars.cogroup(
        inputs(work),
        columns={"l": LINE_COLUMNS, "o": ORDER_COLUMNS},
        split="l" if split else None,
    )
    seconds = []
    for task in groups.tasks:

        def one(t: Any = task) -> Any:
            frames = groups.read(t)
            return polars_query(pl, frames["l"], frames["o"]).collect()

        seconds.append(timing.elapsed(one)[0])
    values = np.array(seconds)
    task_bytes = np.array([t.bytes for t in groups.tasks], dtype=np.float64)
    return {
        "tasks": len(seconds),
        "split_tasks": sum(1 for t in groups.tasks if t.split),
        "max_over_mean_s": float(values.max() / values.mean()),
        "max_over_mean_bytes": float(task_bytes.max() / task_bytes.mean()),
    }


def spark_queries(spark: Any, work: Path) -> dict[str, Callable[[], pa.Table]]:
    from pyspark.sql import functions as F

    import arrowshuffle.spark as ash_spark

    def query(lines: Any, orders: Any) -> pa.Table:
        joined = lines.join(orders, lines.l_orderkey == orders.o_orderkey)
        result = joined.groupBy(*GROUP_KEYS).agg(
            F.sum(F.col("l_extendedprice") * (1 - F.col("l_discount"))).alias("revenue"),
            F.count(F.lit(1)).alias("lines"),
        )
        return pa.Table.from_pandas(result.toPandas(), preserve_index=False)

    def parquet() -> pa.Table:
        return query(
            spark.read.parquet(str(work / "parquet" / "lineitem")),
            spark.read.parquet(str(work / "parquet" / "orders")),
        )

    def source() -> pa.Table:
        return query(
            ash_spark.read(spark, str(work / "shuffle" / "lineitem")),
            ash_spark.read(spark, str(work / "shuffle" / "orders")),
        )

    def cogrouped(layout: str) -> Callable[[], pa.Table]:
        def run() -> pa.Table:
            totals = (
                cogroup_frame(spark, work, layout)
                .groupBy(*GROUP_KEYS)
                .agg(F.sum("revenue").alias("revenue"), F.sum("lines").alias("lines"))
            )
            return pa.Table.from_pandas(totals.toPandas(), preserve_index=False)

        return run

    return {
        "spark parquet": parquet,
        "spark source": source,
        "spark cogroup": cogrouped("shuffle"),
        "spark cogroup, none": cogrouped("shuffle-none"),
    }


def cogroup_frame(spark: Any, work: Path, layout: str = "shuffle") -> Any:
    """The per-task partial aggregates of the co-grouped query, as a Spark DataFrame."""
    import arrowshuffle.spark as ash_spark

    return ash_spark.map_cogroups(
        spark,
        inputs(work, layout),
        partial_aggregate,
        "o_orderpriority string, l_shipmode string, revenue double, lines long",
        columns={"l": LINE_COLUMNS, "o": ORDER_COLUMNS},
        split="l",
    )


def column_selection(spark: Any, work: Path, repeats: int) -> dict[str, Any]:
    """Spark source reads of 16 columns against 4: time, and the bytes the read path reads."""
    from pyspark.sql import functions as F

    import arrowshuffle.spark as ash_spark

    path = str(work / "shuffle" / "lineitem")

    def query(columns: list[str] | None) -> Callable[[], Any]:
        def run() -> Any:
            frame = ash_spark.read(spark, path, columns=columns)
            return (
                frame.groupBy("l_shipmode")
                .agg(F.sum(F.col("l_extendedprice") * (1 - F.col("l_discount"))), F.count("*"))
                .collect()
            )

        return run

    timings: dict[str, list[float]] = {"all columns": [], "4 columns": []}
    runs = {"all columns": query(None), "4 columns": query(LINE_COLUMNS)}
    if sorted(map(tuple, runs["all columns"]())) != sorted(map(tuple, runs["4 columns"]())):
        raise SystemExit("column selection changed the Spark query's result")
    for repeat in range(repeats):
        for name in runs if repeat % 2 == 0 else reversed(list(runs)):
            timings[name].append(timing.elapsed(runs[name])[0])
    read_bytes = {}
    for name, columns in (("all columns", None), ("4 columns", LINE_COLUMNS)):
        dataset = arrowshuffle.open_dataset(path)
        for task in dataset.plan():
            dataset.read(task=task, columns=columns)
        read_bytes[name] = sum(dataset.file(i).data_bytes_read for i in range(dataset.num_files))
    return {
        "runs": {name: timing.spread(values) for name, values in timings.items()},
        "data_bytes_read": read_bytes,
    }


def partial_aggregate(tables: dict[str, pa.Table]) -> pa.Table:
    """One task's join and partial aggregate, in pyarrow (what each Spark task runs)."""
    import pyarrow.compute as pc

    lines, orders = tables["l"], tables["o"]
    joined = lines.join(orders, "l_orderkey", "o_orderkey", join_type="inner")
    revenue = pc.multiply(joined["l_extendedprice"], pc.subtract(1, joined["l_discount"]))
    joined = joined.append_column("revenue", revenue)
    out = joined.group_by(GROUP_KEYS).aggregate([("revenue", "sum"), ("revenue", "count")])
    columns = {k: out[k] for k in GROUP_KEYS}
    return pa.table({**columns, "revenue": out["revenue_sum"], "lines": out["revenue_count"]})


# ---------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    work = Path(tempfile.mkdtemp(prefix="arrowshuffle-cogroup-"))
    try:
        lines, orders = generate(args.lines, args.orders, args.seed)
        write_inputs(work, lines, orders, args)
        del lines, orders
        runs: dict[str, Callable[[], pa.Table]] = {
            "duckdb parquet": duckdb_query(work),
            "polars parquet": polars_parquet(work),
            "polars cogroup": polars_cogroup(work, split=True),
            "polars cogroup, none": polars_cogroup(work, split=True, layout="shuffle-none"),
        }
        spark = None
        plan_text = ""
        if not args.skip_spark:
            import arrowshuffle.spark as ash_spark

            spark = ash_spark.local_session(
                "arrowshuffle-bench-cogroup",
                master=args.master,
                config={"spark.sql.shuffle.partitions": str(args.subpartitions)},
            )
            runs.update(spark_queries(spark, work))
            frame = cogroup_frame(spark, work)
            plan_text = str(frame._jdf.queryExecution().executedPlan().toString())
            if "Exchange" in plan_text:
                raise SystemExit(f"the co-grouped Spark plan has an Exchange:\n{plan_text}")
        expected = normalized(runs["duckdb parquet"]())
        for name, run in runs.items():
            check_equal(name, run(), expected)  # also a warm-up of every engine
        seconds: dict[str, list[float]] = {name: [] for name in runs}
        for repeat in range(args.repeats):
            order = list(runs) if repeat % 2 == 0 else list(reversed(runs))
            for name in order:
                seconds[name].append(timing.elapsed(runs[name])[0])
        columns = column_selection(spark, work, args.repeats) if spark is not None else None
        balance = {
            "split": task_balance(work, split=True),
            "no split": task_balance(work, split=False),
        }
        if spark is not None:
            spark.stop()
        document = {
            "config": {
                "lines": args.lines,
                "orders": args.orders,
                "subpartitions": args.subpartitions,
                "files": args.files,
                "repeats": args.repeats,
                "master": args.master,
                "cpus": os.cpu_count(),
                "python": platform.python_version(),
                "pyarrow": pa.__version__,
            },
            "bytes": {
                **{
                    layout: {n: directory_bytes(work / layout / n) for n in ("lineitem", "orders")}
                    for layout in LAYOUTS
                },
                "parquet": {
                    n: directory_bytes(work / "parquet" / n) for n in ("lineitem", "orders")
                },
            },
            "runs": {name: timing.spread(s) for name, s in seconds.items()},
            "balance": balance,
            "column_selection": columns,
            "spark_cogroup_plan": plan_text,
        }
        print_summary(document)
        write_results(args.out, document, sort_keys=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


#: (ours, peer, goal) pairs the summary and the report show.
COMPARISONS = (
    ("spark cogroup", "spark parquet", 0.8),
    ("spark cogroup, none", "spark parquet", 0.8),
    ("spark source", "spark parquet", None),
    ("polars cogroup", "polars parquet", 0.8),
    ("polars cogroup, none", "polars parquet", 0.8),
    ("polars cogroup", "duckdb parquet", None),
    ("spark cogroup", "duckdb parquet", None),
)


def print_summary(doc: dict[str, Any]) -> None:
    runs = doc["runs"]
    for name, entry in runs.items():
        print(f"{name:16s} median {entry['median_s']:.3f} s")
    for ours, peer, goal in COMPARISONS:
        if ours in runs and peer in runs:
            ratio = runs[ours]["median_s"] / runs[peer]["median_s"]
            print(f"{ours} / {peer}: {ratio:.2f}x" + (f" (goal <= {goal})" if goal else ""))
    columns = doc.get("column_selection")
    if columns:
        runs, read = columns["runs"], columns["data_bytes_read"]
        print(
            "Spark source, 4 of 16 columns / all: "
            f"{runs['4 columns']['median_s'] / runs['all columns']['median_s']:.2f}x time, "
            f"{read['4 columns'] / read['all columns']:.2f}x bytes read (goal <= 0.35)"
        )
    for kind, entry in doc["balance"].items():
        print(
            f"tasks, {kind}: {entry['tasks']} ({entry['split_tasks']} split), slowest / mean "
            f"{entry['max_over_mean_s']:.2f}x time, {entry['max_over_mean_bytes']:.2f}x bytes"
        )


if __name__ == "__main__":
    raise SystemExit(main())
