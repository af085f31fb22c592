# %% [markdown]
# # Layout and skew
#
# A writer keeps rows in a memory-bounded sort buffer and writes a **region** each time
# the buffer is full: every subpartition's rows, in subpartition order. The index records
# one chunk per (region, subpartition). This notebook looks at that layout with the same
# library functions that `arrowshuffle inspect` uses (`dataset_layout` and
# `dataset_summary`; `file_layout` and `file_summary` for one file), draws it as a
# heatmap, computes skew statistics, shows what one hot key does to a subpartition and
# to the consumer that reads it, and how a read plan balances the tasks again.

# %%
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

import arrowshuffle
from arrowshuffle.cli import main as arrowshuffle_cli
from arrowshuffle.plot import plot_layout
from arrowshuffle.readers.layout import dataset_layout, dataset_summary

OUTPUT = Path(os.environ.get("ARROWSHUFFLE_NOTEBOOK_OUTPUT", "output"))
OUTPUT.mkdir(parents=True, exist_ok=True)
WORK = Path(tempfile.mkdtemp(prefix="arrowshuffle-notebook-"))
# Figures are shown in the notebook (also the ones plot_layout returns), as small pictures.
# %matplotlib inline
plt.rcParams["figure.dpi"] = 72

NUM_SUBPARTITIONS = 16
NUM_FILES = 4
ROWS_PER_FILE = 40_000
HOT_KEY = 42


# %% [markdown]
# ## Two datasets: even keys, and one hot key
#
# The same events twice: once with keys spread evenly over 10,000 values, once with a
# quarter of the rows carrying one hot key. Each has four files (four producer tasks)
# hash-partitioned by `key` into 16 subpartitions; a small sort buffer gives every file
# several regions.


# %%
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
    """NUM_FILES producer tasks, one file each, in a small sort buffer."""
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
for name, dataset in (("even", even), ("skewed", skewed)):
    print(f"{name}: {dataset.num_files} files, {dataset.num_rows:,} rows")

# %% [markdown]
# ## The layout as a DataFrame
#
# `dataset_layout` returns one row per (file, region, subpartition) chunk: its offset,
# bytes, rows and record batches, read from the indexes only. Here it becomes a polars
# DataFrame.

# %%
even_layout = dataset_layout(even)
skewed_layout = dataset_layout(skewed)
chunks = pl.from_arrow(skewed_layout)
print(chunks.group_by("file").agg(pl.col("region").n_unique().alias("regions")).sort("file"))
chunks.head()

# %% [markdown]
# `dataset_summary` is what `arrowshuffle inspect --json DATASET` prints: the same
# per-subpartition totals, from the same function.

# %%
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

# %% [markdown]
# ## Heatmaps: bytes and rows per chunk
#
# Rows of the heatmap are regions, file after file; columns are subpartitions. With even
# keys every chunk of a region is about the same size. With a hot key one column lights
# up in every region of every file: all of the hot key's rows hash to one subpartition.
# `arrowshuffle inspect PATH --plot out.png` draws the same picture.

# %%
plot_layout(even_layout, OUTPUT / "layout_even.png", title="even keys")

# %%
plot_layout(skewed_layout, OUTPUT / "layout_skewed.png", title="a quarter of rows on one key")


# %% [markdown]
# ## Skew statistics
#
# Per subpartition: rows received over all files. `max/mean` is the skew that `inspect`
# reports (1.0 is perfectly even); `max/median` ignores the hot one in the middle;
# the coefficient of variation is the spread; `largest share` is the part of all rows
# that the busiest subpartition's consumer must process alone.


# %%
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

# %% [markdown]
# ## What the hot key does to one subpartition
#
# The partitioner says where the hot key goes. That subpartition receives the hot rows on
# top of its share: its chunks are several times larger in every region, and the consumer
# that reads it (here, 4 consumers each read a contiguous range of 4 subpartitions, as
# `assign` gives them) reads several times more bytes than the others.

# %%
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

# %%
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

# %% [markdown]
# ## Planning balanced reads
#
# One task per subpartition leaves one task with the hot key's bytes while the others
# wait. `plan()` balances the tasks from the sizes the dataset already records (the
# manifest's per-subpartition totals, and the index slices of the subpartitions it
# splits), without reading any data: contiguous small subpartitions are **coalesced** up
# to `target_bytes`, and a subpartition above `skew_factor` x the median and above
# `skew_min_bytes` is **split** into tasks over disjoint groups of its files. The
# defaults (128 MiB, 5x, 256 MiB) suit production sizes; this dataset has a few MB, so
# the target is an eighth of it and the skew threshold 64 KiB. `arrowshuffle plan PATH
# --target-bytes ...` prints the same plan.

# %%
subpartition_bytes, _ = skewed.subpartition_sizes()
target = int(subpartition_bytes.sum()) // 8
tasks = skewed.plan(target, skew_min_bytes="64KiB")

with contextlib.redirect_stdout(io.StringIO()) as printed:
    cli = ["plan", "--json", skewed.url, "--target-bytes", str(target), "--skew-min-bytes", "64KiB"]
    assert arrowshuffle_cli(cli) == 0
from_cli = json.loads(printed.getvalue())
# The CLI gives id ranges inclusive, {"first", "last"}, as its text does (0-63).
assert [(t["subpartitions"]["first"], t["files"], t["bytes"]) for t in from_cli["tasks"]] == [
    (t.subpartitions.start, list(t.files), t.bytes) for t in tasks
]

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

# %% [markdown]
# Each task reads through the same path as any other read (`skewed.read(task=t)`, or one
# polars LazyFrame per task with `arrowshuffle.polars.scan_tasks`). Together the tasks
# return every row exactly once: the same rows as one read of the whole dataset.

# %%
from arrowshuffle.polars import read as read_polars
from arrowshuffle.polars import scan_tasks

frames = scan_tasks(skewed.url, target, skew_min_bytes="64KiB")
parts = pl.collect_all(frames)
assert [p.height for p in parts] == [t.rows for t in tasks]
everything = read_polars(skewed.url)
assert sum(p.height for p in parts) == skewed.num_rows == everything.height
assert pl.concat(parts).sort(pl.all()).equals(everything.sort(pl.all()))
print(f"{len(parts)} tasks cover all {skewed.num_rows:,} rows")

# %%
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

# %%
shutil.rmtree(WORK)
