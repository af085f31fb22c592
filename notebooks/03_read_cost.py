# %% [markdown]
# # Read cost: bytes and requests on object storage
#
# A consumer of a subpartition range reads, from each file, the index slice of its range
# and then one byte range per region (neighbouring ranges closer than `max_gap` are merged
# into one request). On object storage every request costs latency, so the numbers that
# matter are **requests** and **bytes transferred**. This notebook counts both while varying:
#
# 1. the subpartitions each consumer reads,
# 2. the regions per file,
# 3. the compression.
#
# The datasets live in fsspec's in-memory file system (`memory://`), which arrowshuffle reads
# as it reads an object store: every byte range is a separate request through fsspec's
# `cat_ranges`, and every fetched chunk's checksum is checked. The counts come from the
# reader itself: `read_stats()` of a dataset reports the requests it issued and the bytes it
# received (the manifest, index slices and data ranges). On `s3://` the reader issues the same
# ranged requests; opening the dataset also lists its manifest versions once.
#
# **Read amplification** is bytes transferred (manifest and index included) over the bytes
# of the chunks the consumer needs. A modeled time, `requests x 20 ms + bytes / 100 MB/s`,
# puts requests and bytes on one scale (an in-memory read says nothing about S3's speed).

# %%
import os
from pathlib import Path

import fsspec
import matplotlib.pyplot as plt
import numpy as np
import polars as pl
import pyarrow as pa

from arrowshuffle import ReadOptions, ShuffleFileWriter, open_dataset
from arrowshuffle.format.naming import new_file_name
from arrowshuffle.readers.layout import dataset_layout
from arrowshuffle.writers.dataset_writer import commit_dataset, prepare_directory

OUTPUT = Path(os.environ.get("ARROWSHUFFLE_NOTEBOOK_OUTPUT", "output"))
OUTPUT.mkdir(parents=True, exist_ok=True)
STORE = "memory://arrowshuffle-read-cost"  # an object store in this process's memory
plt.rcParams["figure.dpi"] = 72  # the figures shown here: small pictures

pl.Config.set_tbl_rows(20)
pl.Config.set_tbl_cols(12)
NUM_SUBPARTITIONS = 32
NUM_FILES = 4
ROWS_PER_FILE = 12_000
LATENCY_S = 0.020
BANDWIDTH = 100e6  # bytes per second


# %% [markdown]
# ## Datasets to read
#
# `write_generated` writes the same generated rows (random subpartitions, so every
# subpartition is about the same size) as four files, with a given number of regions per
# file (the writer emits a region every `rows_per_region` rows here) and compression.


# %%
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
    url = f"{STORE}/{name}"
    directory = prepare_directory(url, storage_options=None)
    written = []
    rows_per_region = ROWS_PER_FILE // regions
    for task in range(NUM_FILES):
        table = generate(rng, ROWS_PER_FILE)
        ids = rng.integers(0, NUM_SUBPARTITIONS, ROWS_PER_FILE)
        path = directory.child(new_file_name(task)).url
        with ShuffleFileWriter(
            path, table.schema, NUM_SUBPARTITIONS, compression=compression
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
    """Bytes of the chunks a read of these subpartitions needs (broadcast: once)."""
    chosen = pl.from_arrow(layout).filter(
        pl.col("file").is_in(list(files)) & pl.col("subpartition").is_in(list(subpartitions))
    )
    return int(chosen["bytes"].sum())


def measured_read(url, **read_arguments):
    """Read once through a freshly opened dataset; return what the read cost."""
    dataset = open_dataset(url)
    table = dataset.read(**read_arguments)
    stats = dataset.read_stats()  # the manifest's requests and those of every file read
    requests, transferred = stats.requests, stats.bytes_read
    return {
        "rows": table.num_rows,
        "requests": requests,
        "bytes": transferred,
        "modeled_ms": 1e3 * (requests * LATENCY_S + transferred / BANDWIDTH),
    }


# %% [markdown]
# ## 1. Subpartitions per consumer
#
# One dataset (4 regions per file). `C` consumers split the 32 subpartitions into
# contiguous ranges of `32 / C`; each reads its range from every file. The first and the
# last consumer are measured, with the default `max_gap` (neighbouring byte ranges merged)
# and with `max_gap=0` (one request per region and file, exactly the chunks).

# %%
base_url = write_generated("regions-4", regions=4)
base = open_dataset(base_url)
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

# %%
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
left.set_ylim(bottom=0)
left.set_title(f"Requests ({NUM_FILES} files x 4 regions)")
right.set_ylabel("bytes transferred / bytes needed")
right.set_title("Read amplification")
figure.savefig(OUTPUT / "read_cost_consumers.png", dpi=100)
plt.show()

# %% [markdown]
# With exact ranges (`max_gap=0`) a consumer costs one manifest request and, per file, one
# index request, two requests of a few bytes at the data file's ends (before reading data the
# reader checks that the regions cover every record batch, rule V21 of spec.md) and one data
# request per region, whatever the size of its range: a contiguous range of subpartitions is
# one byte range per region. Here that is 1 + 4 x (1 + 2 + 4) = 29 requests. Its amplification
# is the manifest and index bytes, which matter less as the range grows. (The consumer of all
# 32 subpartitions reads each file's chunks as one contiguous range: 17 requests.)
#
# The default `max_gap` (256 KiB) merges byte ranges whose gap is smaller. The regions of
# this small dataset are smaller than that, so merging fetches whole files in one request
# each: fewer requests, many more bytes. With regions of tens of MiB, as writers with a
# real memory budget make, the same setting merges only nearby chunks.
#
# ## 2. Regions per file
#
# The same rows written with 1 to 16 regions per file. A reader of one subpartition makes
# one data request per region and file with exact ranges: more regions (a smaller sort
# buffer) mean more requests for the same rows. The chunks also get smaller, and each
# carries its own record batch header, so the needed bytes grow too.

# %%
rows = []
for regions in (1, 2, 4, 8, 16):
    url = write_generated(f"regions-{regions}", regions=regions)
    layout = dataset_layout(open_dataset(url))
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

# %%
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
left.set_ylim(bottom=0)
left.set_title("Requests to read one subpartition")
right.set_ylabel("ms (20 ms per request + 100 MB/s)")
right.set_ylim(bottom=0)
right.set_title("Modeled read time")
figure.savefig(OUTPUT / "read_cost_regions.png", dpi=100)
plt.show()

# %% [markdown]
# ## 3. Compression
#
# Arrow IPC compresses each record batch's buffers. Chunks of one subpartition compress
# on their own, so chunks must be large enough to compress well; here they hold a few
# hundred rows. Bytes transferred for one subpartition (4 regions per file, exact ranges),
# against the bytes of the same rows uncompressed.

# %%
rows = []
uncompressed = None
for compression in ("none", "lz4", "zstd"):
    url = write_generated(f"compression-{compression}", regions=4, compression=compression)
    dataset = open_dataset(url)
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

# %%
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

# %%
fsspec.filesystem("memory").rm(STORE.removeprefix("memory://"), recursive=True)
