"""Generate the notebooks of this directory from the cell sources below.

The ``.ipynb`` files are written by this script and kept without outputs, so that a change to a
notebook is a reviewable change to this file. Run it after editing a cell::

    python notebooks/build_notebooks.py            # rewrite the notebooks
    python notebooks/build_notebooks.py --check    # exit 1 if a notebook differs from its cells

Every notebook saves its plots as PNG files into the directory named by the environment
variable ``ARROWSHUFFLE_NOTEBOOK_OUTPUT`` (default: ``output/`` beside the notebooks).
"""

# The cells below are checked by ruff as notebook code (100 columns there); here they sit
# eight columns deeper.
# ruff: noqa: E501

from __future__ import annotations

import argparse
import sys
import textwrap
from pathlib import Path

import nbformat

HERE = Path(__file__).resolve().parent

#: A cell is ("md", text) or ("code", source).
Cell = tuple[str, str]

#: Where plots go, and a scratch directory; pasted into each notebook's first code cell
#: (indented like the cells, which are dedented as a whole).
SETUP_OUTPUT = """
        OUTPUT = Path(os.environ.get("ARROWSHUFFLE_NOTEBOOK_OUTPUT", "output"))
        OUTPUT.mkdir(parents=True, exist_ok=True)
        WORK = Path(tempfile.mkdtemp(prefix="arrowshuffle-notebook-"))
"""

# ---------------------------------------------------------------------- 01 quickstart

QUICKSTART: list[Cell] = [
    (
        "md",
        """
        # Quickstart: write, validate and read a shuffle dataset

        A **shuffle dataset** is a directory of shuffle files plus a manifest written last.
        Each shuffle file is the output of one producer task: an ordinary Arrow IPC file whose
        rows are split into *subpartitions* by a partitioner, and a small index that says where
        each subpartition's chunks are. A consumer reads only its subpartition (or a contiguous
        range of them), with one ranged read per region of each file.

        This notebook writes the same orders twice, from **polars** and from **Spark**,
        validates both datasets, and reads one subpartition with **pyarrow**, **polars** and
        **Spark**. The data is small and Spark runs locally on two cores.

        Plots are saved as PNG files into the directory named by the environment variable
        `ARROWSHUFFLE_NOTEBOOK_OUTPUT` (default: `output/` beside the notebook).
        """,
    ),
    (
        "code",
        """
        import contextlib
        import io
        import os
        import shutil
        import sys
        import tempfile
        from pathlib import Path

        import matplotlib.pyplot as plt
        import numpy as np
        import polars as pl

        import arrowshuffle
        import arrowshuffle.polars as ash_polars
        import arrowshuffle.spark as ash_spark
        from arrowshuffle.cli import main as arrowshuffle_cli
        from arrowshuffle.readers.validate_dataset import validate_dataset
        """
        + SETUP_OUTPUT
        + """
        NUM_SUBPARTITIONS = 8
        SUBPARTITION = 3  # the one we read back
        """,
    ),
    (
        "md",
        """
        ## Some orders, in polars
        """,
    ),
    (
        "code",
        """
        rng = np.random.default_rng(7)
        ROWS = 60_000
        orders = pl.DataFrame(
            {
                "order_id": np.arange(ROWS),
                "customer": rng.integers(0, 5_000, ROWS),
                "amount": np.round(rng.gamma(2.0, 20.0, ROWS), 2),
                "country": rng.choice(["DE", "FR", "NL", "PL"], ROWS),
            }
        )
        orders.head()
        """,
    ),
    (
        "md",
        """
        ## Write a dataset from polars

        Every producer task writes one shuffle file; here three slices of the frame play three
        tasks. `write_dataset` writes one file and then commits the dataset's manifest, written
        last, so a reader sees the previous dataset (or none) until that step; `mode="append"`
        adds the next task's file. `by="customer"` chooses the `hash` partitioner, which puts a
        row in the subpartition where Spark's `df.repartition(8, "customer")` would put it.
        """,
    ),
    (
        "code",
        """
        polars_path = WORK / "orders_from_polars"
        for task, start in enumerate(range(0, ROWS, ROWS // 3)):
            manifest = arrowshuffle.write_dataset(
                orders.slice(start, ROWS // 3),
                polars_path,
                num_subpartitions=NUM_SUBPARTITIONS,
                by="customer",
                compression="lz4",
                mode="overwrite" if task == 0 else "append",
            )
        for f in manifest.files:
            print(f.data, f"{f.rows} rows, {f.regions} region(s), {f.data_size} bytes")
        sorted(p.name for p in polars_path.iterdir())
        """,
    ),
    (
        "md",
        """
        ## Validate

        `validate_dataset` checks the manifest's rules and every listed file's rules.
        `deep=True` also reads every chunk: checksums, decoding, row counts and, for the `hash`
        partitioner, that every row sits in the subpartition its key hashes to. The command line
        does the same: `arrowshuffle validate --deep PATH` (exit status 0 when valid).
        """,
    ),
    (
        "code",
        """
        report = validate_dataset(polars_path, deep=True)
        assert report.ok, report.all_violations
        print(report.summary)

        with contextlib.redirect_stdout(io.StringIO()) as printed:
            status = arrowshuffle_cli(["validate", "--deep", str(polars_path)])
        assert status == 0
        print(printed.getvalue())
        """,
    ),
    (
        "md",
        """
        ## Read one subpartition with pyarrow and with polars

        `open_dataset` reads the manifest; `read(s)` fetches subpartition `s` from every file.
        `arrowshuffle.polars.scan` returns a LazyFrame: its projection, predicate and row limit
        are pushed into the reader.
        """,
    ),
    (
        "code",
        """
        dataset = arrowshuffle.open_dataset(polars_path)
        with_pyarrow = dataset.read(SUBPARTITION)
        print(dataset, "->", with_pyarrow.num_rows, "rows in subpartition", SUBPARTITION)

        lazy = ash_polars.scan(polars_path, subpartitions=SUBPARTITION)
        with_polars = lazy.collect()
        assert with_polars.sort("order_id").equals(pl.from_arrow(with_pyarrow).sort("order_id"))

        big_orders = lazy.filter(pl.col("amount") > 100).select("customer", "amount").collect()
        big_orders.head()
        """,
    ),
    (
        "md",
        """
        ## Write the same orders from Spark

        `arrowshuffle.spark.register(spark)` adds the `arrowshuffle` format to a Spark
        session; `df.write.format("arrowshuffle")` then writes one shuffle file per Spark task
        and commits the manifest on the driver. Spark accepts the `overwrite` and `append` save
        modes for Python data sources.
        """,
    ),
    (
        "code",
        """
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # Python workers run this Python
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # a local session, local addresses
        from pyspark.sql import SparkSession
        from pyspark.sql import functions as F

        spark = (
            SparkSession.builder.master("local[2]")
            .appName("arrowshuffle-quickstart")
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.sql.shuffle.partitions", "4")
            .config("spark.driver.memory", "1g")
            .getOrCreate()
        )
        spark.sparkContext.setLogLevel("ERROR")
        ash_spark.register(spark)

        spark_orders = spark.createDataFrame(orders.to_arrow()).repartition(3)
        spark_path = WORK / "orders_from_spark"
        (
            spark_orders.write.format("arrowshuffle")
            .option("num_subpartitions", NUM_SUBPARTITIONS)
            .option("partition_by", "customer")
            .option("compression", "lz4")
            .mode("overwrite")
            .save(str(spark_path))
        )
        spark_report = validate_dataset(spark_path, deep=True)
        assert spark_report.ok, spark_report.all_violations
        print(spark_report.summary)
        """,
    ),
    (
        "md",
        """
        ## Read with Spark, and check against Spark's own repartition

        `spark.read.format("arrowshuffle")` splits the read into balanced planned tasks, one
        Spark partition each; `partitioning="subpartition"` gives one Spark partition per
        subpartition and `consumers` one per contiguous range; `subpartitions` keeps only some.
        The rows of subpartition 3 are the rows Spark's `repartition(8, "customer")` puts in
        partition 3, and the same rows polars wrote there.
        """,
    ),
    (
        "code",
        """
        from_spark = (
            spark.read.format("arrowshuffle")
            .option("subpartitions", str(SUBPARTITION))
            .load(str(spark_path))
        )
        spark_ids = {row.order_id for row in from_spark.select("order_id").collect()}

        repartitioned = spark_orders.repartition(NUM_SUBPARTITIONS, "customer")
        in_partition = repartitioned.where(F.spark_partition_id() == SUBPARTITION)
        reference_ids = {row.order_id for row in in_partition.select("order_id").collect()}

        polars_ids = set(with_pyarrow.column("order_id").to_pylist())
        assert spark_ids == reference_ids == polars_ids
        print(len(spark_ids), "orders in subpartition", SUBPARTITION, "by every route")
        """,
    ),
    (
        "md",
        """
        ## Rows per subpartition

        Both datasets split the orders the same way, whoever wrote them.
        """,
    ),
    (
        "code",
        """
        def rows_per_subpartition(path):
            stats = pl.from_arrow(arrowshuffle.open_dataset(path).stats())
            return (
                stats.group_by("subpartition")
                .agg(pl.col("rows").sum())
                .sort("subpartition")["rows"]
                .to_numpy()
            )


        from_polars_rows = rows_per_subpartition(polars_path)
        from_spark_rows = rows_per_subpartition(spark_path)
        assert (from_polars_rows == from_spark_rows).all()

        positions = np.arange(NUM_SUBPARTITIONS)
        figure, axes = plt.subplots(figsize=(8, 3.5))
        axes.bar(positions - 0.2, from_polars_rows, width=0.4, label="written by polars")
        axes.bar(positions + 0.2, from_spark_rows, width=0.4, label="written by Spark")
        axes.set_xlabel("subpartition")
        axes.set_ylabel("rows")
        axes.set_title("Rows per subpartition (hash of customer)")
        axes.legend()
        figure.savefig(OUTPUT / "quickstart_rows_per_subpartition.png", dpi=100)
        plt.show()
        """,
    ),
    (
        "code",
        """
        spark.stop()
        shutil.rmtree(WORK)
        """,
    ),
]

# ---------------------------------------------------------------------- 02 layout and skew

LAYOUT: list[Cell] = [
    (
        "md",
        """
        # Layout and skew

        A writer keeps rows in a memory-bounded sort buffer and writes a **region** each time
        the buffer is full: every subpartition's rows, in subpartition order. The index records
        one chunk per (region, subpartition). This notebook looks at that layout with the same
        library functions that `arrowshuffle inspect` uses (`dataset_layout` and
        `dataset_summary`; `file_layout` and `file_summary` for one file), draws it as a
        heatmap, computes skew statistics, shows what one hot key does to a subpartition and
        to the consumer that reads it, and how a read plan balances the tasks again.
        """,
    ),
    (
        "code",
        """
        import contextlib
        import io
        import json
        import os
        import shutil
        import tempfile
        from pathlib import Path

        import matplotlib.pyplot as plt
        import numpy as np
        import polars as pl
        import pyarrow as pa
        from IPython.display import Image

        import arrowshuffle
        from arrowshuffle.cli import main as arrowshuffle_cli
        from arrowshuffle.plot import plot_layout
        from arrowshuffle.readers.layout import dataset_layout, dataset_summary
        """
        + SETUP_OUTPUT
        + """
        NUM_SUBPARTITIONS = 16
        NUM_FILES = 4
        ROWS_PER_FILE = 40_000
        HOT_KEY = 42
        """,
    ),
    (
        "md",
        """
        ## Two datasets: even keys, and one hot key

        The same events twice: once with keys spread evenly over 10,000 values, once with a
        quarter of the rows carrying one hot key. Each has four files (four producer tasks)
        hash-partitioned by `key` into 16 subpartitions; a small sort buffer gives every file
        several regions.
        """,
    ),
    (
        "code",
        """
        def events(rng, rows, hot_share):
            keys = rng.integers(0, 10_000, rows)
            keys[rng.random(rows) < hot_share] = HOT_KEY
            return pa.table(
                {
                    "key": keys,
                    "value": rng.standard_normal(rows),
                    "payload": pa.array(rng.integers(0, 10**9, rows)).cast(pa.string()),
                }
            )


        def write_events(path, hot_share, seed=0):
            \"\"\"NUM_FILES producer tasks, one file each, in a small sort buffer.\"\"\"
            rng = np.random.default_rng(seed)
            for task in range(NUM_FILES):
                arrowshuffle.write_dataset(
                    events(rng, ROWS_PER_FILE, hot_share),
                    path,
                    num_subpartitions=NUM_SUBPARTITIONS,
                    by="key",
                    memory="256KiB",
                    max_batch_rows=4096,
                    mode="overwrite" if task == 0 else "append",
                )
            return arrowshuffle.open_dataset(path)


        even = write_events(WORK / "even", hot_share=0.0)
        skewed = write_events(WORK / "skewed", hot_share=0.25)
        print(even)
        print(skewed)
        """,
    ),
    (
        "md",
        """
        ## The layout as a DataFrame

        `dataset_layout` returns one row per (file, region, subpartition) chunk: its offset,
        bytes, rows and record batches, read from the indexes only. Here it becomes a polars
        DataFrame.
        """,
    ),
    (
        "code",
        """
        even_layout = dataset_layout(even)
        skewed_layout = dataset_layout(skewed)
        chunks = pl.from_arrow(skewed_layout)
        print(chunks.group_by("file").agg(pl.col("region").n_unique().alias("regions")).sort("file"))
        chunks.head()
        """,
    ),
    (
        "md",
        """
        `dataset_summary` is what `arrowshuffle inspect --json DATASET` prints: the same
        per-subpartition totals, from the same function.
        """,
    ),
    (
        "code",
        """
        summary = dataset_summary(skewed, skewed_layout)
        with contextlib.redirect_stdout(io.StringIO()) as printed:
            assert arrowshuffle_cli(["inspect", "--json", skewed.url]) == 0
        from_cli = json.loads(printed.getvalue())
        assert from_cli["per_subpartition"] == summary["per_subpartition"]

        totals = chunks.group_by("subpartition").agg(pl.col("rows").sum(), pl.col("bytes").sum())
        assert totals.sort("subpartition")["rows"].to_list() == [
            t["rows"] for t in summary["per_subpartition"]
        ]
        {k: summary[k] for k in ("files", "regions", "subpartitions", "rows", "skew")}
        """,
    ),
    (
        "md",
        """
        ## Heatmaps: bytes and rows per chunk

        Rows of the heatmap are regions, file after file; columns are subpartitions. With even
        keys every chunk of a region is about the same size. With a hot key one column lights
        up in every region of every file: all of the hot key's rows hash to one subpartition.
        `arrowshuffle inspect PATH --plot out.png` draws the same picture.
        """,
    ),
    (
        "code",
        """
        plot_layout(even_layout, OUTPUT / "layout_even.png", title="even keys")
        Image(filename=OUTPUT / "layout_even.png")
        """,
    ),
    (
        "code",
        """
        plot_layout(skewed_layout, OUTPUT / "layout_skewed.png", title="a quarter of rows on one key")
        Image(filename=OUTPUT / "layout_skewed.png")
        """,
    ),
    (
        "md",
        """
        ## Skew statistics

        Per subpartition: rows received over all files. `max/mean` is the skew that `inspect`
        reports (1.0 is perfectly even); `max/median` ignores the hot one in the middle;
        the coefficient of variation is the spread; `largest share` is the part of all rows
        that the busiest subpartition's consumer must process alone.
        """,
    ),
    (
        "code",
        """
        def skew_statistics(layout):
            rows = (
                pl.from_arrow(layout)
                .group_by("subpartition")
                .agg(pl.col("rows").sum())
                .sort("subpartition")["rows"]
                .to_numpy()
                .astype(float)
            )
            return {
                "max/mean": rows.max() / rows.mean(),
                "max/median": rows.max() / np.median(rows),
                "coefficient of variation": rows.std() / rows.mean(),
                "largest share": rows.max() / rows.sum(),
                "busiest subpartition": int(rows.argmax()),
            }


        statistics = pl.DataFrame(
            [
                {"dataset": "even", **skew_statistics(even_layout)},
                {"dataset": "skewed", **skew_statistics(skewed_layout)},
            ]
        )
        assert np.isclose(statistics["max/mean"][0], dataset_summary(even, even_layout)["skew"])
        statistics
        """,
    ),
    (
        "md",
        """
        ## What the hot key does to one subpartition

        The partitioner says where the hot key goes. That subpartition receives the hot rows on
        top of its share: its chunks are several times larger in every region, and the consumer
        that reads it (here, 4 consumers each read a contiguous range of 4 subpartitions, as
        `assign` gives them) reads several times more bytes than the others.
        """,
    ),
    (
        "code",
        """
        partitioner = arrowshuffle.make_partitioner("hash", num_subpartitions=NUM_SUBPARTITIONS, by="key")
        hot = int(partitioner.assign(pa.record_batch({"key": pa.array([HOT_KEY])}))[0])
        assert hot == statistics["busiest subpartition"][1]


        def per_subpartition(layout, column):
            return (
                pl.from_arrow(layout)
                .group_by("subpartition")
                .agg(pl.col(column).sum())
                .sort("subpartition")[column]
                .to_numpy()
            )


        even_bytes = per_subpartition(even_layout, "bytes")
        skewed_bytes = per_subpartition(skewed_layout, "bytes")
        others = np.delete(skewed_bytes, hot)
        print(f"hot key {HOT_KEY} -> subpartition {hot}")
        print(f"its bytes: {skewed_bytes[hot]:,} vs {int(np.median(others)):,} for a typical one")

        hot_chunks = chunks.filter(pl.col("subpartition") == hot)["bytes"]
        other_chunks = chunks.filter(pl.col("subpartition") != hot)["bytes"]
        print(f"median chunk: {int(hot_chunks.median()):,} bytes vs {int(other_chunks.median()):,}")

        consumers = arrowshuffle.assign(NUM_SUBPARTITIONS, 4)
        consumer_bytes = {
            "even": [int(even_bytes[c.subpartitions].sum()) for c in consumers],
            "skewed": [int(skewed_bytes[c.subpartitions].sum()) for c in consumers],
        }
        for c in consumers:
            print(f"consumer {c.consumer} reads subpartitions {c.subpartitions}")
        consumer_bytes
        """,
    ),
    (
        "code",
        """
        figure, (left, right) = plt.subplots(1, 2, figsize=(12, 3.8), layout="constrained")
        positions = np.arange(NUM_SUBPARTITIONS)
        left.bar(positions - 0.2, even_bytes / 1e6, width=0.4, label="even keys")
        colors = ["tab:red" if s == hot else "tab:orange" for s in positions]
        left.bar(positions + 0.2, skewed_bytes / 1e6, width=0.4, color=colors, label="hot key")
        left.set_xlabel("subpartition")
        left.set_ylabel("MB over all files")
        left.set_title(f"Bytes per subpartition (hot key -> {hot})")
        left.legend()

        width = 0.4
        ids = np.arange(len(consumers))
        right.bar(ids - width / 2, np.array(consumer_bytes["even"]) / 1e6, width, label="even keys")
        right.bar(ids + width / 2, np.array(consumer_bytes["skewed"]) / 1e6, width, label="hot key")
        right.set_xticks(ids, [f"consumer {i}" for i in ids])
        right.set_ylabel("MB read")
        right.set_title("Bytes each of 4 consumers reads")
        right.legend()
        figure.savefig(OUTPUT / "skew_subpartitions.png", dpi=100)
        plt.show()
        """,
    ),
    (
        "md",
        """
        ## Planning balanced reads

        One task per subpartition leaves one task with the hot key's bytes while the others
        wait. `plan()` balances the tasks from the sizes the dataset already records (the
        manifest's per-subpartition totals, and the index slices of the subpartitions it
        splits), without reading any data: contiguous small subpartitions are **coalesced** up
        to `target_bytes`, and a subpartition above `skew_factor` x the median and above
        `skew_min_bytes` is **split** into tasks over disjoint groups of its files. The
        defaults (128 MiB, 5x, 256 MiB) suit production sizes; this dataset has a few MB, so
        the target is an eighth of it and the skew threshold 64 KiB. `arrowshuffle plan PATH
        --target-bytes ...` prints the same plan.
        """,
    ),
    (
        "code",
        """
        subpartition_bytes, _ = skewed.subpartition_sizes()
        target = int(subpartition_bytes.sum()) // 8
        tasks = skewed.plan(target, skew_min_bytes="64KiB")

        with contextlib.redirect_stdout(io.StringIO()) as printed:
            cli = ["plan", "--json", skewed.url, "--target-bytes", str(target), "--skew-min-bytes", "64KiB"]
            assert arrowshuffle_cli(cli) == 0
        from_cli = json.loads(printed.getvalue())
        assert from_cli["tasks"] == [t.to_dict() for t in tasks]

        before = subpartition_bytes.astype(float)
        after = np.array([t.bytes for t in tasks], dtype=float)
        skew_before, skew_after = before.max() / before.mean(), after.max() / after.mean()
        assert np.isclose(skew_before, from_cli["skew_before"])
        assert np.isclose(skew_after, from_cli["skew_after"])
        print(f"{NUM_SUBPARTITIONS} tasks before, {len(tasks)} after planning (target {target:,} bytes)")
        print(f"skew (max/mean task bytes): {skew_before:.2f} before, {skew_after:.2f} after")


        def ids(first, last):
            return str(first) if first == last else f"{first}-{last}"


        plan_table = pl.DataFrame(
            [
                {
                    "subpartitions": ids(t.subpartitions[0], t.subpartitions[-1]),
                    "files": "all" if len(t.files) == NUM_FILES else ids(t.files[0], t.files[-1]),
                    "bytes": t.bytes,
                    "rows": t.rows,
                }
                for t in tasks
            ]
        )
        with pl.Config(tbl_rows=len(tasks)):
            print(plan_table)
        """,
    ),
    (
        "md",
        """
        Each task reads through the same path as any other read (`skewed.read(task=t)`, or one
        polars LazyFrame per task with `arrowshuffle.polars.scan_tasks`). Together the tasks
        return every row exactly once: the same rows as one read of the whole dataset.
        """,
    ),
    (
        "code",
        """
        from arrowshuffle.polars import read as read_polars
        from arrowshuffle.polars import scan_tasks

        frames = scan_tasks(skewed.url, target, skew_min_bytes="64KiB")
        parts = pl.collect_all(frames)
        assert [p.height for p in parts] == [t.rows for t in tasks]
        everything = read_polars(skewed.url)
        assert sum(p.height for p in parts) == skewed.num_rows == everything.height
        assert pl.concat(parts).sort(pl.all()).equals(everything.sort(pl.all()))
        print(f"{len(parts)} tasks cover all {skewed.num_rows:,} rows")
        """,
    ),
    (
        "code",
        """
        figure, (left, right) = plt.subplots(1, 2, figsize=(12, 3.8), sharey=True, layout="constrained")
        colors = ["tab:red" if s == hot else "tab:orange" for s in range(NUM_SUBPARTITIONS)]
        left.bar(np.arange(NUM_SUBPARTITIONS), before / 1e6, color=colors)
        left.axhline(before.mean() / 1e6, color="black", linestyle="--", label="mean")
        left.set_xlabel("task = subpartition")
        left.set_ylabel("MB read by the task")
        left.set_title(f"One task per subpartition: max/mean {skew_before:.2f}")
        left.legend()

        split = [len(t.files) < NUM_FILES for t in tasks]
        colors = ["tab:red" if s else "tab:blue" for s in split]
        right.bar(np.arange(len(tasks)), after / 1e6, color=colors)
        right.axhline(after.mean() / 1e6, color="black", linestyle="--", label="mean")
        right.set_xlabel("planned task (red: part of the split hot subpartition)")
        right.set_title(f"Planned tasks: max/mean {skew_after:.2f}")
        right.legend()
        figure.savefig(OUTPUT / "plan_tasks.png", dpi=100)
        plt.show()
        """,
    ),
    (
        "code",
        """
        shutil.rmtree(WORK)
        """,
    ),
]

# ---------------------------------------------------------------------- 03 read cost

READ_COST: list[Cell] = [
    (
        "md",
        """
        # Read cost: bytes and requests on object storage

        A consumer of a subpartition range reads, from each file, the index slice of its range
        and then one byte range per region (neighbouring ranges closer than `max_gap` are merged
        into one request). On object storage every request costs latency, so the numbers that
        matter are **requests** and **bytes transferred**. This notebook counts both at an S3
        endpoint (moto's server on 127.0.0.1, started and stopped here, requests counted by the
        server) while varying:

        1. the subpartitions each consumer reads,
        2. the regions per file,
        3. the compression.

        **Read amplification** is bytes transferred (manifest and index included) over the bytes
        of the chunks the consumer needs. A modeled time, `requests x 20 ms + bytes / 100 MB/s`,
        puts requests and bytes on one scale; moto's own speed says nothing about S3's.
        """,
    ),
    (
        "code",
        """
        import logging
        import os
        import shutil
        import tempfile
        import threading
        import uuid
        from pathlib import Path

        import fsspec
        import matplotlib.pyplot as plt
        import numpy as np
        import polars as pl
        import pyarrow as pa
        from moto.server import ThreadedMotoServer

        from arrowshuffle import ReadOptions, ShuffleFileWriter, open_dataset
        from arrowshuffle.format.naming import new_file_name
        from arrowshuffle.readers.layout import dataset_layout
        from arrowshuffle.writers.dataset_writer import commit_dataset, prepare_directory
        """
        + SETUP_OUTPUT
        + """
        pl.Config.set_tbl_rows(20)
        pl.Config.set_tbl_cols(12)
        NUM_SUBPARTITIONS = 32
        NUM_FILES = 4
        ROWS_PER_FILE = 12_000
        LATENCY_S = 0.020
        BANDWIDTH = 100e6  # bytes per second
        """,
    ),
    (
        "md",
        """
        ## A local S3 endpoint that counts requests

        A small WSGI layer in front of moto records every request and the bytes of its response.
        """,
    ),
    (
        "code",
        """
        class RequestCounter:
            \"\"\"Counts the requests and response bytes of the S3 server.\"\"\"

            def __init__(self, app):
                self.app = app
                self.lock = threading.Lock()
                self.records = []

            def take(self):
                with self.lock:
                    taken, self.records = self.records, []
                return taken

            def __call__(self, environ, start_response):
                record = {"method": environ["REQUEST_METHOD"], "bytes": 0}

                def body():
                    result = self.app(environ, start_response)
                    try:
                        for chunk in result:
                            record["bytes"] += len(chunk)
                            yield chunk
                    finally:
                        with self.lock:
                            self.records.append(record)
                        if hasattr(result, "close"):
                            result.close()

                return body()


        logging.getLogger("werkzeug").setLevel(logging.ERROR)
        for name in [n for n in os.environ if n.startswith("AWS_")]:
            del os.environ[name]
        os.environ["AWS_CONFIG_FILE"] = os.devnull
        os.environ["AWS_SHARED_CREDENTIALS_FILE"] = os.devnull
        os.environ["AWS_EC2_METADATA_DISABLED"] = "true"

        server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        server.start()
        host, port = server.get_host_and_port()
        counter = RequestCounter(server._server.app)
        server._server.app = counter
        STORAGE = {
            "endpoint_url": f"http://{host}:{port}",
            "key": "notebook",
            "secret": "notebook",
            "client_kwargs": {"region_name": "eu-west-1"},
            "use_listings_cache": False,
        }
        BUCKET = f"read-cost-{uuid.uuid4().hex[:8]}"
        fsspec.filesystem("s3", **STORAGE).mkdir(BUCKET)
        print("S3 endpoint", STORAGE["endpoint_url"], "bucket", BUCKET)
        """,
    ),
    (
        "md",
        """
        ## Datasets to read

        `write_generated` writes the same generated rows (random subpartitions, so every
        subpartition is about the same size) as four files, with a given number of regions per
        file (the writer emits a region every `rows_per_region` rows here) and compression.
        """,
    ),
    (
        "code",
        """
        def generate(rng, rows):
            return pa.table(
                {
                    "id": np.arange(rows),
                    "value": np.round(rng.standard_normal(rows), 3),
                    "label": rng.choice(["alpha", "beta", "gamma", "delta"], rows),
                }
            )


        def write_generated(name, *, regions, compression="none", seed=0):
            rng = np.random.default_rng(seed)
            url = f"s3://{BUCKET}/{name}"
            directory = prepare_directory(url, STORAGE)
            written = []
            rows_per_region = ROWS_PER_FILE // regions
            for task in range(NUM_FILES):
                table = generate(rng, ROWS_PER_FILE)
                ids = rng.integers(0, NUM_SUBPARTITIONS, ROWS_PER_FILE)
                path = directory.child(new_file_name(task)).url
                with ShuffleFileWriter(
                    path,
                    table.schema,
                    NUM_SUBPARTITIONS,
                    compression=compression,
                    storage_options=STORAGE,
                ) as writer:
                    for start in range(0, ROWS_PER_FILE, rows_per_region):
                        stop = start + rows_per_region
                        writer.write(table.slice(start, rows_per_region), subpartitions=ids[start:stop])
                        writer.flush_region()  # one region per slice
                written.append(writer.written)
            commit_dataset(
                directory,
                written,
                schema=table.schema,
                num_subpartitions=NUM_SUBPARTITIONS,
                partitioner={"name": "explicit"},
            )
            return url


        def needed_bytes(layout, files, subpartitions):
            \"\"\"Bytes of the chunks a read of these subpartitions needs (broadcast: once).\"\"\"
            chosen = pl.from_arrow(layout).filter(
                pl.col("file").is_in(list(files)) & pl.col("subpartition").is_in(list(subpartitions))
            )
            return int(chosen["bytes"].sum())


        def measured_read(url, **read_arguments):
            \"\"\"Read once through a fresh dataset; return requests and bytes the server saw.\"\"\"
            counter.take()
            table = open_dataset(url, STORAGE).read(**read_arguments)
            records = counter.take()
            requests = len(records)
            transferred = sum(r["bytes"] for r in records)
            return {
                "rows": table.num_rows,
                "requests": requests,
                "bytes": transferred,
                "modeled_ms": 1e3 * (requests * LATENCY_S + transferred / BANDWIDTH),
            }
        """,
    ),
    (
        "md",
        """
        ## 1. Subpartitions per consumer

        One dataset (4 regions per file). `C` consumers split the 32 subpartitions into
        contiguous ranges of `32 / C`; each reads its range from every file. The first and the
        last consumer are measured, with the default `max_gap` (neighbouring byte ranges merged)
        and with `max_gap=0` (one request per region and file, exactly the chunks).
        """,
    ),
    (
        "code",
        """
        base_url = write_generated("regions-4", regions=4)
        base = open_dataset(base_url, STORAGE)
        base_layout = dataset_layout(base)
        print(base, "regions per file:", [f.regions for f in base.manifest.files])

        rows = []
        for per_consumer in (1, 2, 4, 8, 16, 32):
            num_consumers = NUM_SUBPARTITIONS // per_consumer
            for consumer in sorted({0, num_consumers - 1}):
                first = consumer * per_consumer
                need = needed_bytes(base_layout, range(NUM_FILES), range(first, first + per_consumer))
                for max_gap in (None, 0):
                    gap = {} if max_gap is None else {"options": ReadOptions(max_gap=max_gap)}
                    read = measured_read(base_url, consumer=consumer, num_consumers=num_consumers, **gap)
                    rows.append(
                        {
                            "subpartitions per consumer": per_consumer,
                            "consumer": consumer,
                            "max_gap": "default" if max_gap is None else "0",
                            "needed": need,
                            "amplification": read["bytes"] / need,
                            **read,
                        }
                    )
        by_consumer = pl.DataFrame(rows)
        summary_consumers = (
            by_consumer.group_by("subpartitions per consumer", "max_gap")
            .agg(pl.col("requests", "bytes", "needed", "amplification", "modeled_ms").mean())
            .sort("max_gap", "subpartitions per consumer")
        )
        summary_consumers
        """,
    ),
    (
        "code",
        """
        figure, (left, right) = plt.subplots(1, 2, figsize=(12, 4), layout="constrained")
        for gap, style in (("default", "o-"), ("0", "s--")):
            part = summary_consumers.filter(pl.col("max_gap") == gap)
            x = part["subpartitions per consumer"]
            left.plot(x, part["requests"], style, label=f"max_gap {gap}")
            right.plot(x, part["amplification"], style, label=f"max_gap {gap}")
        for axes in (left, right):
            axes.set_xscale("log", base=2)
            axes.set_xlabel("subpartitions per consumer")
            axes.legend()
        left.set_ylabel("requests per consumer")
        left.set_title(f"Requests ({NUM_FILES} files x 4 regions)")
        right.set_ylabel("bytes transferred / bytes needed")
        right.set_title("Read amplification")
        figure.savefig(OUTPUT / "read_cost_consumers.png", dpi=100)
        plt.show()
        """,
    ),
    (
        "md",
        """
        With exact ranges (`max_gap=0`) a consumer costs one manifest request, one index request
        per file and one data request per region and file, whatever the size of its range: a
        contiguous range of subpartitions is one byte range per region. Its amplification is
        the manifest and index bytes, which matter less as the range grows. (The consumer of all
        32 subpartitions reads each file's chunks as one contiguous range.)

        The default `max_gap` (256 KiB) merges byte ranges whose gap is smaller. The regions of
        this small dataset are smaller than that, so merging fetches whole files in one request
        each: fewer requests, many more bytes. With regions of tens of MiB, as writers with a
        real memory budget make, the same setting merges only nearby chunks.

        ## 2. Regions per file

        The same rows written with 1 to 16 regions per file. A reader of one subpartition makes
        one data request per region and file with exact ranges: more regions (a smaller sort
        buffer) mean more requests for the same rows. The chunks also get smaller, and each
        carries its own record batch header, so the needed bytes grow too.
        """,
    ),
    (
        "code",
        """
        rows = []
        for regions in (1, 2, 4, 8, 16):
            url = write_generated(f"regions-{regions}", regions=regions)
            layout = dataset_layout(open_dataset(url, STORAGE))
            need = needed_bytes(layout, range(NUM_FILES), [5])
            for max_gap in (None, 0):
                gap = {} if max_gap is None else {"options": ReadOptions(max_gap=max_gap)}
                read = measured_read(url, subpartitions=5, **gap)
                rows.append(
                    {
                        "regions per file": regions,
                        "max_gap": "default" if max_gap is None else "0",
                        "needed": need,
                        "amplification": read["bytes"] / need,
                        **read,
                    }
                )
        by_regions = pl.DataFrame(rows)
        assert by_regions.filter(pl.col("max_gap") == "0")["requests"].is_sorted()
        by_regions
        """,
    ),
    (
        "code",
        """
        figure, (left, right) = plt.subplots(1, 2, figsize=(12, 4), layout="constrained")
        for gap, style in (("default", "o-"), ("0", "s--")):
            part = by_regions.filter(pl.col("max_gap") == gap)
            left.plot(part["regions per file"], part["requests"], style, label=f"max_gap {gap}")
            right.plot(part["regions per file"], part["modeled_ms"], style, label=f"max_gap {gap}")
        for axes in (left, right):
            axes.set_xscale("log", base=2)
            axes.set_xlabel("regions per file")
            axes.legend()
        left.set_ylabel("requests")
        left.set_title("Requests to read one subpartition")
        right.set_ylabel("ms (20 ms per request + 100 MB/s)")
        right.set_title("Modeled read time")
        figure.savefig(OUTPUT / "read_cost_regions.png", dpi=100)
        plt.show()
        """,
    ),
    (
        "md",
        """
        ## 3. Compression

        Arrow IPC compresses each record batch's buffers. Chunks of one subpartition compress
        on their own, so chunks must be large enough to compress well; here they hold a few
        hundred rows. Bytes transferred for one subpartition (4 regions per file, exact ranges),
        against the bytes of the same rows uncompressed.
        """,
    ),
    (
        "code",
        """
        rows = []
        uncompressed = None
        for compression in ("none", "lz4", "zstd"):
            url = write_generated(f"compression-{compression}", regions=4, compression=compression)
            dataset = open_dataset(url, STORAGE)
            need = needed_bytes(dataset_layout(dataset), range(NUM_FILES), [5])
            uncompressed = uncompressed or need
            read = measured_read(url, subpartitions=5, options=ReadOptions(max_gap=0))
            rows.append(
                {
                    "compression": compression,
                    "data bytes": sum(f.data_size for f in dataset.manifest.files),
                    "needed": need,
                    "vs uncompressed": need / uncompressed,
                    "amplification": read["bytes"] / need,
                    **read,
                }
            )
        by_compression = pl.DataFrame(rows)
        by_compression
        """,
    ),
    (
        "code",
        """
        figure, axes = plt.subplots(figsize=(7, 4), layout="constrained")
        names = by_compression["compression"].to_list()
        positions = np.arange(len(names))
        axes.bar(positions - 0.2, by_compression["needed"] / 1e3, width=0.4, label="chunk bytes")
        axes.bar(positions + 0.2, by_compression["bytes"] / 1e3, width=0.4, label="transferred")
        axes.set_xticks(positions, names)
        axes.set_ylabel("KB to read one subpartition")
        axes.set_title("Compression: bytes per read")
        axes.legend()
        figure.savefig(OUTPUT / "read_cost_compression.png", dpi=100)
        plt.show()
        """,
    ),
    (
        "code",
        """
        server.stop()
        shutil.rmtree(WORK)
        """,
    ),
]

NOTEBOOKS: dict[str, list[Cell]] = {
    "01_quickstart.ipynb": QUICKSTART,
    "02_layout_and_skew.ipynb": LAYOUT,
    "03_read_cost.ipynb": READ_COST,
}


def build(cells: list[Cell], stem: str) -> nbformat.NotebookNode:
    """A notebook without outputs; cell ids are derived from the name, so builds are stable."""
    notebook = nbformat.v4.new_notebook()
    notebook.metadata = {
        "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
        "language_info": {"name": "python"},
    }
    for i, (kind, text) in enumerate(cells):
        source = textwrap.dedent(text).strip("\n")
        if kind == "md":
            cell = nbformat.v4.new_markdown_cell(source)
        else:
            cell = nbformat.v4.new_code_cell(source)
        cell.id = f"{stem.replace('_', '-')}-{i:02d}"
        notebook.cells.append(cell)
    nbformat.validate(notebook)
    return notebook


def render(name: str) -> str:
    """The text of notebook ``name`` as this script writes it."""
    return nbformat.writes(build(NOTEBOOKS[name], Path(name).stem)) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only compare, write nothing")
    parser.add_argument("--out-dir", type=Path, default=HERE, help="where to write them")
    args = parser.parse_args(argv)
    stale = []
    for name in NOTEBOOKS:
        path = args.out_dir / name
        text = render(name)
        current = path.read_text() if path.exists() else None
        if current == text:
            continue
        stale.append(name)
        if not args.check:
            path.write_text(text)
            print(f"wrote {path}")
    if args.check and stale:
        print(f"out of date (run python notebooks/build_notebooks.py): {', '.join(stale)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
