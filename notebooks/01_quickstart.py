# %% [markdown]
# # Quickstart: write, validate and read a shuffle dataset
#
# A **shuffle dataset** is a directory of shuffle files plus a manifest written last.
# Each shuffle file is the output of one producer task: an ordinary Arrow IPC file whose
# rows are split into *subpartitions* by a partitioner, and a small index that says where
# each subpartition's chunks are. A consumer reads only its subpartition (or a contiguous
# range of them), with one ranged read per region of each file.
#
# This notebook writes the same orders twice, from **polars** and from **Spark**,
# validates both datasets, and reads one subpartition with **pyarrow**, **polars** and
# **Spark**. The data is small and Spark runs locally on two cores.
#
# Plots are saved as PNG files into the directory named by the environment variable
# `ARROWSHUFFLE_NOTEBOOK_OUTPUT` (default: `output/` beside the notebook).

# %%
import contextlib
import io
import os
import re
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

OUTPUT = Path(os.environ.get("ARROWSHUFFLE_NOTEBOOK_OUTPUT", "output")).resolve()
OUTPUT.mkdir(parents=True, exist_ok=True)
START = Path.cwd()
WORK = Path(tempfile.mkdtemp(prefix="arrowshuffle-notebook-"))
os.chdir(WORK)  # a scratch directory: the datasets are written here, and paths print short
plt.rcParams["figure.dpi"] = 72  # the figures shown here: small pictures

NUM_SUBPARTITIONS = 8
SUBPARTITION = 3  # the one we read back

# %% [markdown]
# ## Some orders, in polars

# %%
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

# %% [markdown]
# ## Write a dataset from polars
#
# Every producer task writes one shuffle file; here three slices of the frame play three
# tasks. `write_dataset` writes one file and then commits the dataset's manifest, written
# last, so a reader sees the previous dataset (or none) until that step; `mode="append"`
# adds the next task's file. `by="customer"` chooses the `hash` partitioner, which puts a
# row in the subpartition where Spark's `df.repartition(8, "customer")` would put it.

# %%
polars_path = Path("orders_from_polars")
for task, start in enumerate(range(0, ROWS, ROWS // 3)):
    manifest = arrowshuffle.write_dataset(
        orders.slice(start, ROWS // 3),
        polars_path,
        num_subpartitions=NUM_SUBPARTITIONS,
        by="customer",
        compression="lz4",
        mode="overwrite" if task == 0 else "append",
    )
for i, f in enumerate(manifest.files):
    print(f"file {i}: {f.rows:,} rows, {f.regions} region(s), {f.data_size:,} bytes")
# The directory: the data files beside their indexes, the manifest and its numbered versions.
# A data file is named part-<task>-<unique id>.arrow; the ids are elided here.
sorted(re.sub("[0-9a-f]{32}", "<id>", p.name) for p in polars_path.iterdir())

# %% [markdown]
# ## Validate
#
# `validate_dataset` checks the manifest's rules and every listed file's rules.
# `deep=True` also reads every chunk: checksums, decoding, row counts and, for the `hash`
# partitioner, that every row sits in the subpartition its key hashes to. The command line
# does the same: `arrowshuffle validate --deep PATH` (exit status 0 when valid).

# %%
report = validate_dataset(polars_path, deep=True)
assert report.ok, report.all_violations
print(report.summary)

with contextlib.redirect_stdout(io.StringIO()) as printed:
    status = arrowshuffle_cli(["validate", "--deep", str(polars_path)])
assert status == 0
print(printed.getvalue(), end="")

# %% [markdown]
# ## Read one subpartition with pyarrow and with polars
#
# `open_dataset` reads the manifest; `read(s)` fetches subpartition `s` from every file.
# `arrowshuffle.polars.scan` returns a LazyFrame: its projection, predicate and row limit
# are pushed into the reader.

# %%
dataset = arrowshuffle.open_dataset(polars_path)
with_pyarrow = dataset.read(SUBPARTITION)
print(f"{dataset.num_rows:,} rows in {dataset.num_files} files", end=", ")
print(f"{with_pyarrow.num_rows:,} of them in subpartition {SUBPARTITION}")

lazy = ash_polars.scan(polars_path, subpartitions=SUBPARTITION)
with_polars = lazy.collect()
assert with_polars.sort("order_id").equals(pl.from_arrow(with_pyarrow).sort("order_id"))

big_orders = lazy.filter(pl.col("amount") > 100).select("customer", "amount").collect()
big_orders.head()

# %% [markdown]
# ## Write the same orders from Spark
#
# `arrowshuffle.spark.register(spark)` adds the `arrowshuffle` format to a Spark
# session; `df.write.format("arrowshuffle")` then writes one shuffle file per Spark task
# and commits the manifest on the driver. Spark accepts the `overwrite` and `append` save
# modes for Python data sources.

# %%
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
spark_path = WORK / "orders_from_spark"  # absolute: for Spark's Python workers too
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

# %% [markdown]
# ## Read with Spark, and check against Spark's own repartition
#
# `spark.read.format("arrowshuffle")` splits the read into balanced planned tasks, one
# Spark partition each; `partitioning="subpartition"` gives one Spark partition per
# subpartition and `consumers` one per contiguous range; `subpartitions` keeps only some.
# The rows of subpartition 3 are the rows Spark's `repartition(8, "customer")` puts in
# partition 3, and the same rows polars wrote there.

# %%
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


# %% [markdown]
# ## Rows per subpartition
#
# Both datasets split the orders the same way, whoever wrote them.


# %%
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

# %% [markdown]
# ## Join without shuffling again
#
# The orders are stored partitioned by `customer`. A customers table written with the same
# partitioner (16 subpartitions: a multiple of 8, so subpartitions `t` and `t + 8` meet
# subpartition `t` of the orders) can be joined task by task: `arrowshuffle.polars.cogroup`
# gives each task's LazyFrames, `arrowshuffle.spark.map_cogroups` runs a function on each
# task's Arrow tables in Spark. Both check first that the datasets are partitioned alike.

# %%
customers = pl.DataFrame(
    {"customer": np.arange(5_000), "segment": rng.choice(["retail", "business"], 5_000)}
)
customers_path = WORK / "customers"
arrowshuffle.write_dataset(customers, customers_path, num_subpartitions=16, by="customer")
inputs = {"orders": str(spark_path), "customers": str(customers_path)}
TASK_BYTES = "256KiB"  # small tasks, to get several from little data (default: 2 per core)

groups = ash_polars.cogroup(inputs, target_bytes=TASK_BYTES)
per_task = groups.map(
    lambda f: (
        f["orders"]
        .join(f["customers"], on="customer")
        .group_by("segment")
        .agg(pl.col("amount").sum())
        .collect()
    )
)
cogrouped = pl.concat(list(per_task)).group_by("segment").agg(pl.col("amount").sum())
whole = orders.join(customers, on="customer").group_by("segment").agg(pl.col("amount").sum())
assert cogrouped.sort("segment")["amount"].round(6).equals(whole.sort("segment")["amount"].round(6))
print(f"{len(groups.tasks)} tasks")
cogrouped.sort("segment")

# %% [markdown]
# In Spark, the co-grouped DataFrame's plan is a `Range` of one row per task under
# `MapInArrow`: no `Exchange`. The same join of the datasets read through
# `spark.read.format("arrowshuffle")` shuffles both sides again.


# %%
def amount_by_segment(tables):
    joined = tables["orders"].join(tables["customers"], "customer", join_type="inner")
    return joined.group_by("segment").aggregate([("amount", "sum")])


per_task_sums = ash_spark.map_cogroups(
    spark, inputs, amount_by_segment, "segment string, amount_sum double", target_bytes=TASK_BYTES
)
per_task_sums.explain()
by_segment = per_task_sums.groupBy("segment").agg(F.sum("amount_sum").alias("amount"))
spark_result = {row.segment: row.amount for row in by_segment.collect()}
assert all(abs(spark_result[s] - a) < 1e-6 for s, a in whole.iter_rows())

read_orders = spark.read.format("arrowshuffle").load(str(spark_path))
read_customers = spark.read.format("arrowshuffle").load(str(customers_path))
read_orders.join(read_customers, "customer").explain()  # Exchange hashpartitioning on both sides

# %%
spark.stop()
os.chdir(START)
shutil.rmtree(WORK)
