"""The key figures of each benchmark's JSON, as ratios to a peer, rendered as text and Markdown.

Every figure compares arrowshuffle with a peer measured in the same run on the same data. All
figures are costs (seconds, bytes, requests, bytes read per byte needed), and the ratio is
always arrowshuffle / peer: below 1 means arrowshuffle needs less.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class Stat:
    """A median with the min and max over repeats, when the benchmark reports them."""

    median: float
    low: float | None = None
    high: float | None = None

    @classmethod
    def of(cls, entry: dict[str, Any], prefix: str = "") -> Stat:
        """From ``{median_s, min_s, max_s}`` style keys (``prefix`` + ``median_s`` ...)."""
        return cls(
            float(entry[f"{prefix}median_s"]),
            _maybe(entry.get(f"{prefix}min_s")),
            _maybe(entry.get(f"{prefix}max_s")),
        )


def _maybe(value: Any) -> float | None:
    return None if value is None else float(value)


@dataclass(frozen=True)
class Figure:
    """One comparison: arrowshuffle's cost and a peer's cost for the same work."""

    benchmark: str
    measure: str
    unit: str  # "s", "B", "requests", "files", "x" (a ratio of bytes)
    ours_label: str
    ours: Stat
    peer_label: str
    peer: Stat

    @property
    def ratio(self) -> float | None:
        """arrowshuffle / peer, on medians (None when the peer's cost is 0)."""
        return self.ours.median / self.peer.median if self.peer.median else None

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serializable form, with the ratio."""
        return {**asdict(self), "ratio": self.ratio}


# ---------------------------------------------------------------------- extraction


def format_figures(doc: dict[str, Any]) -> Iterator[Figure]:
    """bench_format: writes against pyarrow IPC, one-subpartition reads, bytes per byte."""
    for r in doc["results"]:
        c = r["compression"]
        write, read, nbytes = r["write"], r["read"], r["bytes"]
        rows = f"{r['rows']:,} rows"
        mine = "ShuffleFileWriter"
        yield Figure(
            "format",
            f"write {rows}, {c}",
            "s",
            mine,
            Stat.of(write["shuffle"]),
            "pyarrow.ipc write (unsorted)",
            Stat.of(write["plain"]),
        )
        yield Figure(
            "format",
            f"write {rows}, {c}",
            "s",
            mine,
            Stat.of(write["shuffle"]),
            "sort by subpartition + pyarrow.ipc write",
            Stat.of(write["sort_then_write"]),
        )
        subpartition = f"read 1 subpartition ({r['subpartition_rows']:,} rows), {c}"
        yield Figure(
            "format",
            subpartition,
            "s",
            "open_file().read(s)",
            Stat.of(read["shuffle"]),
            "standalone Arrow file of those rows",
            Stat.of(read["standalone"]),
        )
        yield Figure(
            "format",
            subpartition,
            "s",
            "open_file().read(s)",
            Stat.of(read["shuffle"]),
            "read whole IPC file + filter",
            Stat.of(read["read_all_and_filter"]),
        )
        yield Figure(
            "format",
            f"bytes read / bytes needed, {c}",
            "x",
            "shuffle file (data + index)",
            Stat(float(nbytes["shuffle_ratio"])),
            "read whole IPC file",
            Stat(float(nbytes["read_all_ratio"])),
        )


#: The partitioners shown per key set (the table would be long with all of them).
SHOWN_PARTITIONERS = {
    "int64": ("hash", "key_group", "range", "round_robin"),
    "string": ("hash",),
    "int64+string": ("hash",),
}


def partitioner_figures(doc: dict[str, Any]) -> Iterator[Figure]:
    """bench_partitioners: partitioner time vs polars hashing; the bounded write's memory."""
    rows = doc["throughput"]
    polars = {r["key_set"]: r for r in rows if str(r["partitioner"]).startswith("polars")}
    for r in rows:
        key_set = r["key_set"]
        if r.get("skipped") or r["partitioner"] not in SHOWN_PARTITIONERS.get(key_set, ()):
            continue
        peer = polars[key_set]
        yield Figure(
            "partitioners",
            f"assign {r['rows']:,} rows, {key_set} key",
            "s",
            r["partitioner"],
            Stat.of(r),
            peer["partitioner"],
            Stat.of(peer),
        )
    memory = doc.get("memory")
    if memory:
        size = f"{memory['input_bytes'] / 2**20:.0f} MiB"
        yield Figure(
            "partitioners",
            f"peak RSS growth while writing {size} ({memory['regions']} regions)",
            "B",
            "write() with a memory pool",
            Stat(float(memory["peak_rss_above_start"])),
            "the pool's size",
            Stat(float(memory["pool_bytes"])),
        )
        yield Figure(
            "partitioners",
            f"peak Arrow allocation while writing {size}",
            "B",
            "write() with a memory pool",
            Stat(float(memory["peak_arrow_allocated"])),
            "the pool's size",
            Stat(float(memory["pool_bytes"])),
        )


def _named_pair(benchmark: str, measure: str, entry: dict[str, Any]) -> Figure:
    """A timed figure from ``entry["ours"]`` and ``entry["peer"]``, each naming itself."""
    ours, peer = entry["ours"], entry["peer"]
    return Figure(benchmark, measure, "s", ours["name"], Stat.of(ours), peer["name"], Stat.of(peer))


def kernel_figures(doc: dict[str, Any]) -> Iterator[Figure]:
    """bench_kernels: Spark's hash vs polars' hash; the writer with ids vs a plain IPC write."""
    threads = doc["settings"]["threads"]
    ours_threads = f"{threads['arrowshuffle']} threads"
    for r in doc["hash"]:
        yield _named_pair(
            "kernels",
            f"hash {r['rows']:,} rows, {r['key_set']} key ({ours_threads}, polars "
            f"{threads['polars']}): {r['x_polars']:.2f}x polars' rows/s",
            r,
        )
    if doc.get("first_use"):
        yield _named_pair(
            "kernels",
            "a new process's first use of the compiled kernels (loaded from numba's cache)",
            doc["first_use"],
        )
    for w in doc.get("writers", [doc["writer"]]):
        yield _named_pair(
            "kernels",
            f"writer with ids given, {w['rows'] / 1e6:g}M rows int64/float64/string, "
            f"{w.get('compression', 'none')} ({ours_threads}): {w['x_plain']:.2f}x plain IPC's "
            "rows/s",
            w,
        )


LOCAL_PEERS = ("polars scan_ipc + filter", "hive parquet (polars)", "hive parquet (pyarrow)")


def reads_figures(doc: dict[str, Any]) -> Iterator[Figure]:
    """bench_reads: one-subpartition reads locally (time) and on S3 (requests, bytes, model)."""
    local = doc["local"]["methods"]
    ours = "arrowshuffle (pyarrow)"
    measure = "read 1 subpartition, local disk"
    for peer in LOCAL_PEERS:
        if peer in local:
            yield Figure(
                "reads", measure, "s", ours, Stat.of(local[ours]), peer, Stat.of(local[peer])
            )
    if "arrowshuffle (polars)" in local:
        peer = LOCAL_PEERS[0]
        yield Figure(
            "reads",
            measure,
            "s",
            "arrowshuffle (polars)",
            Stat.of(local["arrowshuffle (polars)"]),
            peer,
            Stat.of(local[peer]),
        )
    small = doc.get("small_reads")
    for case in small.get("cases", []) if small else []:
        names = list(case["methods"])
        for ours_name, peer_name in zip(names[0::2], names[1::2], strict=True):
            yield Figure(
                "reads",
                f"small read, {small['rows']:,} rows / {small['subpartitions']} subpartitions, "
                f"{case['label']}",
                "s",
                ours_name,
                Stat.of(case["methods"][ours_name]),
                peer_name,
                Stat.of(case["methods"][peer_name]),
            )
    for projection in doc.get("projection", {}).values():
        what = f"projected read, 4 of 16 columns ({projection['compression']})"
        methods = projection["methods"]
        yield Figure(
            "reads",
            what,
            "s",
            "4 of 16 columns",
            Stat.of(methods["4 of 16 columns"]),
            "all 16 columns",
            Stat.of(methods["all 16 columns"]),
        )
        yield Figure(
            "reads",
            what + ", bytes touched",
            "B",
            "4 of 16 columns",
            Stat(float(projection["bytes_projected"])),
            "all 16 columns",
            Stat(float(projection["bytes_full"])),
        )
    s3 = doc.get("s3")
    if not s3:
        return
    methods = s3["methods"]
    config = doc.get("config", {})
    model = (
        f"modeled time per read ({config.get('latency_ms', 20):g} ms/request, "
        f"{config.get('bandwidth_mbps', 100):g} MB/s)"
    )
    uncoalesced = "arrowshuffle (pyarrow, max_gap=0)"
    if uncoalesced in methods and LOCAL_PEERS[2] in methods:
        # Small regions let the default gap merge whole regions into one request: the same
        # read without merging shows the bytes side of that trade.
        yield Figure(
            "reads",
            "bytes transferred per read, S3 (moto)",
            "B",
            uncoalesced,
            Stat(float(methods[uncoalesced]["bytes_per_read"])),
            LOCAL_PEERS[2],
            Stat(float(methods[LOCAL_PEERS[2]]["bytes_per_read"])),
        )
    for peer in LOCAL_PEERS:
        if peer not in methods:
            continue
        for key, what, unit in (
            ("requests_per_read", "HTTP requests per read, S3 (moto)", "requests"),
            ("bytes_per_read", "bytes transferred per read, S3 (moto)", "B"),
            ("modeled_s", model, "s"),
        ):
            yield Figure(
                "reads",
                what,
                unit,
                ours,
                Stat(float(methods[ours][key])),
                peer,
                Stat(float(methods[peer][key])),
            )


SPARK_PEERS = {
    "repartition parquet": "df.repartition(n, key).write.parquet",
    "partitionBy parquet": "df.write.partitionBy(sub).parquet",
}


#: The data source's read modes, against the same rows as Parquet.
SPARK_READ_MODES = {
    "plan": "planned read (default), LZ4",
    "subpartition": "partitioning=subpartition",
    "consumers=2": "consumers=2",
}


#: Readers compared with the repartitioned Parquet read: the default, the same read of
#: uncompressed and of ZSTD files, and the floor of any Python data source (plain IPC files,
#: no checks).
SPARK_AGAINST_REPARTITIONED = {
    "plan": SPARK_READ_MODES["plan"],
    "plan, compression none": "planned read, compression none",
    "plan, compression zstd": "planned read, compression zstd (the writers' default)",
    "python source floor": "a minimal Python data source over plain IPC files",
}


def spark_figures(doc: dict[str, Any]) -> Iterator[Figure]:
    """bench_spark: Spark writes and reads of three layouts (medians only), and read modes."""
    results = doc["results"]
    ours = results["arrowshuffle"]
    rows = f"{doc['rows']:,} rows, {doc['subpartitions']} subpartitions"
    for peer, label in SPARK_PEERS.items():
        if peer not in results:
            continue
        theirs = results[peer]
        for key, what, unit in (
            ("write_s", f"Spark write, {rows}", "s"),
            ("read_one_s", "Spark read of 1 subpartition", "s"),
            ("read_all_s", "Spark read of all subpartitions", "s"),
            ("files", "files written", "files"),
        ):
            yield Figure(
                "spark",
                what,
                unit,
                "arrowshuffle data source",
                Stat(float(ours[key])),
                label,
                Stat(float(theirs[key])),
            )
    modes = doc.get("modes") or {}
    for data, entry in (modes.get("data") or {}).items():
        found = entry["results"]
        what = (
            f"Spark full read + groupBy(key), {modes['rows']:,} rows, "
            f"{modes['subpartitions']} subpartitions, {data}"
        )
        against = (
            (SPARK_READ_MODES, "parquet", "the same rows as Parquet"),
            (
                SPARK_AGAINST_REPARTITIONED,
                "repartition parquet",
                "df.repartition(n, key).write.parquet",
            ),
        )
        for modes_of, peer, peer_label in against:
            for mode, label in modes_of.items():
                if mode in found and peer in found:
                    yield Figure(
                        "spark",
                        what,
                        "s",
                        label,
                        Stat.of(found[mode]),
                        peer_label,
                        Stat.of(found[peer]),
                    )
        for peer, label in (("parquet", "Parquet"), ("repartition parquet", "repartitioned")):
            if "plan" in found and "cpu_median_s" in found["plan"] and peer in found:
                if "cpu_median_s" not in found[peer]:
                    continue
                yield Figure(
                    "spark",
                    f"{what}, CPU of Spark's processes",
                    "s",
                    SPARK_READ_MODES["plan"],
                    Stat.of(found["plan"], "cpu_"),
                    f"{label} Parquet" if peer != "parquet" else "the same rows as Parquet",
                    Stat.of(found[peer], "cpu_"),
                )


def plan_figures(doc: dict[str, Any]) -> Iterator[Figure]:
    """bench_plan: task balance with and without a plan; planning a large dataset."""
    names = {"hot": "a third of the rows on one key", "zipf": "Zipf(1.1) keys"}
    for b in doc["balance"]:
        before, after = b["without_plan"], b["with_plan"]
        target, skew_min = b["target_bytes"] / 2**20, b["skew_min_bytes"] / 2**20
        yield Figure(
            "plan",
            f"slowest / mean task bytes, {names.get(b['data'], b['data'])}, {b['files']} files "
            f"x {b['subpartitions']} subpartitions",
            "x",
            f"plan(target {target:.2f} MiB, skew min {skew_min:.2f} MiB): {after['tasks']} tasks",
            Stat(float(after["max_over_mean_bytes"])),
            f"one task per subpartition ({before['tasks']})",
            Stat(float(before["max_over_mean_bytes"])),
        )
    p = doc["planning"]
    yield Figure(
        "plan",
        f"plan {p['files']:,} files x {p['subpartitions']:,} subpartitions "
        f"({p['manifest_bytes'] / 1e6:.1f} MB manifest, {p['tasks']} tasks)",
        "s",
        "open_dataset(path).plan()",
        Stat.of(p["open_and_plan"]),
        "json.loads of the manifest",
        Stat.of(p["json_loads"]),
    )
    for entry in doc.get("open_cost", []):
        yield Figure(
            "plan",
            f"open_file + read one subpartition, N={entry['subpartitions']:,} "
            f"({entry['index_bytes']:,} B index)",
            "s",
            "arrowshuffle open_file(path).read(3)",
            Stat.of(entry["ours"]),
            "pyarrow ipc.open_file + get_batch(0)",
            Stat.of(entry["peer"]),
        )


def wide_figures(doc: dict[str, Any]) -> Iterator[Figure]:
    """bench_wide: one consumer of a wide shuffle, before and after compact, against Parquet."""
    config = doc["config"]
    for entry in doc["local"]:
        yield Figure(
            "wide",
            f"local read, 1 consumer of {config['consumers']}, {entry['files']:,} files x "
            f"{config['subpartitions']:,} subpartitions",
            "s",
            f"compacted ({entry['files_after']} files)",
            Stat.of(entry["after"]),
            f"{entry['files']:,} producer files",
            Stat.of(entry["before"]),
        )
    s3 = doc.get("s3")
    if not s3:
        return
    shape = (
        f"{config['files']:,} x {config['subpartitions']:,}, 1 consumer of {config['consumers']}"
    )
    after = s3["after"]
    for peer_key, peer in (
        ("before", f"{config['files']:,} producer files"),
        ("hive parquet (polars)", "hive parquet (polars)"),
        ("hive parquet (pyarrow)", "hive parquet (pyarrow)"),
    ):
        theirs = s3[peer_key]
        for key, what, unit in (
            ("gets", f"GETs, S3 (moto), {shape}", "requests"),
            ("bytes", f"bytes transferred, S3 (moto), {shape}", "B"),
            ("modeled_20ms_100MBps_s", "modeled time (20 ms/request, 100 MB/s)", "s"),
            ("modeled_50ms_1000MBps_s", "modeled time (50 ms/request, 1 GB/s)", "s"),
        ):
            yield Figure(
                "wide",
                what,
                unit,
                "arrowshuffle, compacted",
                Stat(float(after[key])),
                peer,
                Stat(float(theirs[key])),
            )


def polars_scan_figures(doc: dict[str, Any]) -> Iterator[Figure]:
    """bench_polars_scan: a LazyFrame per subpartition against pl.scan_parquet per bucket."""
    peer_label = doc["peer"]
    for part, what in (("scan", "build a LazyFrame"), ("scan_collect", "build and collect")):
        methods = doc[part]
        peer = Stat.of(methods[peer_label])
        for label, entry in methods.items():
            if label == peer_label:
                continue
            yield Figure(
                "polars_scan",
                f"{what} per subpartition, loop over all",
                "s",
                label,
                Stat.of(entry),
                peer_label,
                peer,
            )


def verify_figures(doc: dict[str, Any]) -> Iterator[Figure]:
    """bench_verify: reads that check every chunk's CRC32C against the same reads without."""
    for entry in doc["reads"]:
        yield Figure(
            "verify",
            f"read, {entry['label']}",
            "s",
            "verify=True",
            Stat.of(entry["on"]),
            "verify=False",
            Stat.of(entry["off"]),
        )


def _spread(entry: dict[str, Any]) -> Stat:
    """From ``{median, min, max}`` (counts over runs or repeats)."""
    return Stat(float(entry["median"]), _maybe(entry.get("min")), _maybe(entry.get("max")))


#: The race's figures: (measure, unit, what is counted, its summary key, peer, peer's key).
COMMIT_RACE_FIGURES = (
    ("acknowledged appends lost", "appends", "lost", "lost", "acknowledged", "acknowledged"),
    (
        "acknowledged appends lost, an unreadable dataset read file by file",
        "appends",
        "lost",
        "lost_from_files_left",
        "acknowledged",
        "acknowledged",
    ),
    (
        "acknowledged appends lost after vacuum(older_than=0)",
        "appends",
        "lost after vacuum",
        "lost_after_vacuum",
        "acknowledged",
        "acknowledged",
    ),
    (
        "appends that failed",
        "appends",
        "failed",
        "appends_failed",
        "attempted",
        "appends_attempted",
    ),
    (
        "compactions aborted or failed",
        "compactions",
        "aborted or failed",
        "compactions_not_committed",
        "attempted",
        "compactions_attempted",
    ),
    (
        "compactions failed (other than a CommitConflictError abort)",
        "compactions",
        "failed",
        "compactions_failed",
        "attempted",
        "compactions_attempted",
    ),
    (
        "reads that failed while the dataset was readable (stale readers)",
        "reads",
        "failed",
        "read_failures_while_readable",
        "reads",
        "reads_while_readable",
    ),
    ("reads that failed, all", "reads", "failed", "read_failures", "opens", "opens"),
    (
        "reads of no single version",
        "reads",
        "torn or duplicated",
        "not_one_version",
        "ok",
        "reads_ok",
    ),
    ("final dataset unreadable", "runs", "unreadable", "unreadable", "runs", None),
)


def commits_figures(doc: dict[str, Any]) -> Iterator[Figure]:
    """bench_commits: what concurrent commits do (counts over runs); requests of a commit."""
    config = doc["config"]
    for backend, entry in doc["race"].items():
        summary = entry["summary"]
        shape = (
            f"{backend}, {config['appenders']} appenders + compactor + {config['readers']} "
            f"readers, {config['seconds']:g} s"
        )
        for measure, unit, ours, key, peer, peer_key in COMMIT_RACE_FIGURES:
            if summary.get(key) is None:
                continue
            theirs = (
                Stat(float(summary["runs"])) if peer_key is None else _spread(summary[peer_key])
            )
            yield Figure(
                "commits", f"{measure}, {shape}", unit, ours, _spread(summary[key]), peer, theirs
            )
    requests = doc.get("requests")
    if not requests:
        return
    shape = f"{requests['files']} files x {requests['subpartitions']} subpartitions, S3 (moto)"
    read, append = requests["read"], requests["append"]
    yield Figure(
        "commits",
        f"HTTP requests of a cold open_dataset(url).read(5), {shape}",
        "requests",
        "open_dataset(url).read(5)",
        _spread(read["requests"]),
        "objects in the dataset",
        Stat(float(requests["objects"])),
    )
    yield Figure(
        "commits",
        f"cold open_dataset(url).read(5), {shape}",
        "s",
        "open_dataset(url).read(5)",
        Stat.of(read),
        "one cold GET of a 1 KiB object",
        Stat.of(requests["single_get"]),
    )
    yield Figure(
        "commits",
        "HTTP requests of one append of 1,000 rows, S3 (moto)",
        "requests",
        "the commit's (manifest, listings)",
        _spread(append["commit_requests"]),
        "the whole append's",
        _spread(append["requests"]),
    )
    yield Figure(
        "commits",
        "append of 1,000 rows, S3 (moto)",
        "s",
        "write_dataset(mode='append')",
        Stat.of(append),
        "plain PUT of the rows as one IPC file",
        Stat.of(requests["plain_put"]),
    )


def compression_figures(doc: dict[str, Any]) -> Iterator[Figure]:
    """bench_compression: each codec's bytes and write time against polars Parquet (zstd)."""
    local = doc["local"]
    parquet = local["parquet"]
    rows = doc["settings"]["rows"]
    for codec, r in local["codecs"].items():
        yield Figure(
            "compression",
            f"bytes, {rows:,} lineitem rows, compression={codec}",
            "B",
            f"data file + index ({codec})",
            Stat(float(r["data_bytes"] + r["index_bytes"])),
            parquet["name"],
            Stat(float(parquet["bytes"])),
        )
        yield Figure(
            "compression",
            f"write, {rows:,} lineitem rows, compression={codec}",
            "s",
            f"ShuffleFileWriter ({codec}, 64 subpartitions)",
            Stat.of(r["write"]),
            parquet["name"],
            Stat.of(parquet["write"]),
        )


def cogroup_figures(doc: dict[str, Any]) -> Iterator[Figure]:
    """bench_cogroup: co-grouped join + aggregate against engines that shuffle or join whole."""
    config, runs = doc["config"], doc["runs"]
    what = (
        f"join + aggregate, {config['lines']:,} lines x {config['orders']:,} orders, "
        f"{config['subpartitions']} subpartitions, a third of the lines on one key"
    )
    labels = {
        "spark cogroup": "arrowshuffle.spark.map_cogroups (no Exchange), zstd (default)",
        "spark cogroup, none": "arrowshuffle.spark.map_cogroups, compression none",
        "spark source": "Spark on the arrowshuffle source (shuffled again)",
        "spark parquet": "Spark on Parquet (its own exchange)",
        "polars cogroup": "arrowshuffle.polars.cogroup, zstd (default)",
        "polars cogroup, none": "arrowshuffle.polars.cogroup, compression none",
        "polars parquet": "polars, one join of the Parquet files",
        "duckdb parquet": "DuckDB on the Parquet files",
    }
    for ours, peer in (
        ("spark cogroup", "spark parquet"),
        ("spark cogroup, none", "spark parquet"),
        ("spark source", "spark parquet"),
        ("polars cogroup", "polars parquet"),
        ("polars cogroup, none", "polars parquet"),
        ("polars cogroup", "duckdb parquet"),
    ):
        if ours in runs and peer in runs:
            yield Figure(
                "cogroup",
                what,
                "s",
                labels[ours],
                Stat.of(runs[ours]),
                labels[peer],
                Stat.of(runs[peer]),
            )
    columns = doc.get("column_selection")
    if columns:
        yield Figure(
            "cogroup",
            f"Spark source read + aggregate of {config['lines']:,} lines",
            "s",
            '.option("columns", ...): the 4 columns needed',
            Stat.of(columns["runs"]["4 columns"]),
            "all 16 columns",
            Stat.of(columns["runs"]["all columns"]),
        )
        read = columns["data_bytes_read"]
        yield Figure(
            "cogroup",
            "data-file bytes the Spark source's read path reads",
            "B",
            "4 of 16 columns",
            Stat(float(read["4 columns"])),
            "all 16 columns",
            Stat(float(read["all columns"])),
        )
    balance = doc["balance"]
    yield Figure(
        "cogroup",
        "slowest co-grouped task's time / the mean (polars, one task at a time)",
        "x",
        f"split the hot key's group over files ({balance['split']['tasks']} tasks)",
        Stat(float(balance["split"]["max_over_mean_s"])),
        f"no split ({balance['no split']['tasks']} tasks)",
        Stat(float(balance["no split"]["max_over_mean_s"])),
    )


EXTRACTORS: dict[str, Callable[[dict[str, Any]], Iterator[Figure]]] = {
    "format": format_figures,
    "partitioners": partitioner_figures,
    "kernels": kernel_figures,
    "reads": reads_figures,
    "polars_scan": polars_scan_figures,
    "verify": verify_figures,
    "spark": spark_figures,
    "plan": plan_figures,
    "wide": wide_figures,
    "commits": commits_figures,
    "compression": compression_figures,
    "cogroup": cogroup_figures,
}


def figures(name: str, doc: dict[str, Any]) -> list[Figure]:
    """The key figures of one benchmark's JSON.

    Raises:
        KeyError: the JSON lacks a field the summary needs (the benchmark changed its output).
    """
    return list(EXTRACTORS[name](doc))


# ---------------------------------------------------------------------- rendering


def _scale(value: float, unit: str) -> tuple[float, str, str]:
    """The factor, unit name and number format that suit ``value``."""
    if unit == "s":
        return (1e3, "ms", ".1f") if abs(value) < 1 else (1.0, "s", ".2f")
    if unit == "B":
        for scale, name in ((1e9, "GB"), (1e6, "MB"), (1e3, "KB")):
            if abs(value) >= scale:
                return 1 / scale, name, ".2f"
        return 1.0, "B", ".0f"
    if unit == "x":
        return 1.0, "x", ".2f"
    return 1.0, "", "g" if value == int(value) else ".1f"


def format_value(value: float, unit: str) -> str:
    """A number with a readable unit: ms/s, KB/MB, counts, or a plain ratio (``2.50x``)."""
    factor, name, spec = _scale(value, unit)
    number = format(value * factor, spec)
    return f"{number}{name}" if name == "x" else f"{number} {name}".rstrip()


def format_stat(stat: Stat, unit: str) -> str:
    """``median [min-max] unit``, the range in the median's unit, when the script reports it."""
    factor, name, spec = _scale(stat.median, unit)
    if unit == "x" or stat.low is None:
        return format_value(stat.median, unit)
    median = format(stat.median * factor, spec)
    if stat.high is None:
        return f"{median} [min {format(stat.low * factor, spec)}] {name}".rstrip()
    low, high = format(stat.low * factor, spec), format(stat.high * factor, spec)
    return f"{median} [{low}-{high}] {name}".rstrip()


def format_ratio(ratio: float | None) -> str:
    """``0.42x`` or ``n/a``."""
    return "n/a" if ratio is None else f"{ratio:.2f}x"


def table_rows(found: list[Figure]) -> list[list[str]]:
    """The cells of the figures table, one list per figure."""
    return [
        [
            f.benchmark,
            f.measure,
            f.ours_label,
            format_stat(f.ours, f.unit),
            f.peer_label,
            format_stat(f.peer, f.unit),
            format_ratio(f.ratio),
        ]
        for f in found
    ]


HEADER = [
    "benchmark",
    "measure",
    "arrowshuffle",
    "median [min-max]",
    "peer",
    "peer median",
    "ratio",
]


def text_table(found: list[Figure]) -> str:
    """A fixed-width table for the terminal."""
    rows = [HEADER, *table_rows(found)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(HEADER))]
    lines = []
    for n, row in enumerate(rows):
        cells = [
            cell.rjust(w) if i == 6 else cell.ljust(w)
            for i, (cell, w) in enumerate(zip(row, widths, strict=True))
        ]
        lines.append("  ".join(cells).rstrip())
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    """A GitHub Markdown table (pipes in cells escaped)."""

    def line(cells: list[str]) -> str:
        return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"

    return "\n".join([line(header), "|" + "|".join("---" for _ in header) + "|", *map(line, rows)])
