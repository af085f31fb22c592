"""Run every benchmark on generated data and summarize them in one table.

From the repository root::

    python -m benchmarks                         # small: a few minutes on 2 cores, Spark included
    python -m benchmarks --size medium --repeats 5
    python -m benchmarks --only format,reads --out-dir /tmp/bench
    python -m benchmarks --update-report         # a full run that rewrites BENCHMARKS.md

Each benchmark script runs as its own process with the flags of the chosen size, so that one
failing (or timing out) is reported and the others still run. The runner collects their JSON
files, prints the key figures (each a ratio to a peer measured in the same run, with the
absolute medians and, where the script reports them, min and max over repeats beside it),
and writes ``summary.json`` and the table (``BENCHMARKS.md``) into the output directory. Only a
full run (no ``--only``) with ``--update-report`` writes the committed ``BENCHMARKS.md`` at the
repository root, so that a partial run never replaces the other benchmarks' figures.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import platform
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from benchmarks.report import (
    HEADER,
    Figure,
    figures,
    markdown_table,
    table_rows,
    text_table,
)

ROOT = Path(__file__).resolve().parent.parent
#: The committed report; only a full run with --update-report writes it.
REPORT = ROOT / "BENCHMARKS.md"
BENCHMARKS = (
    "format",
    "partitioners",
    "kernels",
    "reads",
    "polars_scan",
    "verify",
    "spark",
    "plan",
    "wide",
    "commits",
    "compression",
    "cogroup",
)
SIZES = ("small", "medium", "large")
#: Repeats per size when --repeats is not given.
DEFAULT_REPEATS = {"small": 3, "medium": 5, "large": 5}
#: Seconds one benchmark may run before it is stopped, per size.
DEFAULT_TIMEOUT = {"small": 900, "medium": 3600, "large": 6 * 3600}
#: The flag every script takes for its repeat count.
REPEAT_FLAG = "--repeats"
MiB = 2**20

#: The data of each benchmark, per size. small fits a 2-core machine in a few minutes in all;
#: medium is close to the scripts' own defaults; large is the scale the issues ask about (a 2 GiB
#: write with a 256 MiB pool, millions of rows per layout).
SIZE_FLAGS: dict[str, dict[str, list[str]]] = {
    "small": {
        "format": ["--rows", "200000", "--subpartitions", "32", "--memory", "4MiB"],
        "partitioners": ["--rows", "262144", "--size", "64MiB", "--pool", "16MiB"],
        # The kernels' figures are defined at these sizes: seconds, even on 2 cores.
        "kernels": ["--rows", "2000000", "--writer-rows", "4000000"],
        "reads": [
            "--rows", "200000", "--files", "4", "--subpartitions", "32",
            "--region-bytes", str(1 * MiB), "--samples", "4",
            "--s3-rows", "40000", "--s3-region-bytes", str(64 * 1024),
        ],
        "polars_scan": ["--rows", "200000", "--files", "4", "--subpartitions", "128"],
        "verify": ["--rows", "500000", "--s3-rows", "50000"],
        "spark": [
            "--rows", "100000", "--subpartitions", "8", "--files", "2", "--master", "local[2]",
        ],
        "plan": ["--rows", "400000", "--files", "8", "--subpartitions", "64"],
        "wide": ["--quick"],
        "commits": ["--seconds", "15", "--request-rows", "50000"],
        "compression": ["--rows", "300000", "--s3-rows", "50000"],
        "cogroup": ["--lines", "1000000", "--orders", "250000", "--subpartitions", "64"],
    },
    "medium": {
        "format": ["--rows", "2000000", "--subpartitions", "64", "--memory", "64MiB"],
        "partitioners": ["--rows", "2000000", "--size", "256MiB", "--pool", "64MiB"],
        "kernels": ["--rows", "2000000", "--writer-rows", "4000000"],
        "reads": ["--rows", "2000000", "--files", "8", "--subpartitions", "64"],
        "polars_scan": ["--rows", "1000000", "--files", "8", "--subpartitions", "128"],
        "verify": ["--rows", "2000000", "--s3-rows", "200000"],
        "spark": ["--rows", "1000000", "--subpartitions", "16", "--files", "4"],
        "plan": ["--rows", "2000000", "--files", "8", "--subpartitions", "64"],
        "wide": ["--files", "256", "--subpartitions", "500", "--local-files", "16,64,256"],
        "commits": ["--seconds", "30", "--runs", "2"],
        "compression": ["--rows", "1000000", "--s3-rows", "100000"],
        "cogroup": ["--lines", "2000000", "--orders", "500000", "--subpartitions", "64"],
    },
    "large": {
        "format": ["--rows", "10000000", "--subpartitions", "256", "--memory", "256MiB"],
        "partitioners": ["--rows", "10000000", "--size", "2GiB", "--pool", "256MiB"],
        "kernels": ["--rows", "10000000", "--writer-rows", "10000000"],
        "reads": [
            "--rows", "10000000", "--files", "16", "--subpartitions", "256",
            "--region-bytes", str(16 * MiB), "--s3-rows", "1000000",
            "--s3-region-bytes", str(1 * MiB),
        ],
        "polars_scan": ["--rows", "4000000", "--files", "16", "--subpartitions", "256"],
        "verify": ["--rows", "10000000", "--s3-rows", "1000000"],
        "spark": ["--rows", "10000000", "--subpartitions", "64", "--files", "8"],
        "plan": ["--rows", "10000000", "--files", "8", "--subpartitions", "64"],
        "wide": [],  # M = N = 1,000
        "commits": ["--seconds", "90", "--runs", "3"],
        "compression": ["--rows", "6000000", "--s3-rows", "500000"],
        "cogroup": ["--lines", "6000000", "--orders", "1500000", "--subpartitions", "64"],
    },
}  # fmt: skip


@dataclass
class Outcome:
    """What happened to one benchmark run."""

    name: str
    argv: list[str]
    status: str = "not run"  # ok | failed | timeout | not run
    exit_code: int | None = None
    seconds: float = 0.0
    error: str | None = None
    log: str | None = None
    results: dict[str, Any] | None = None
    figures: list[Figure] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "exit_code": self.exit_code,
            "seconds": round(self.seconds, 1),
            "command": shlex.join(self.argv),
            "error": self.error,
            "log": self.log,
            "figures": [f.to_dict() for f in self.figures],
            "results": self.results,
        }


# ---------------------------------------------------------------------- running


def command(name: str, size: str, repeats: int, out: Path) -> list[str]:
    """The command line of one benchmark."""
    return [
        sys.executable,
        "-m",
        f"benchmarks.bench_{name}",
        *SIZE_FLAGS[size][name],
        REPEAT_FLAG,
        str(repeats),
        "--out",
        str(out),
    ]


def child_environment() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONUNBUFFERED"] = "1"
    env.setdefault("PYSPARK_PYTHON", sys.executable)
    env.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    # The scripts import the package from the repository they sit in.
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    return env


def stop_group(process: subprocess.Popen[bytes]) -> None:
    """Stop the benchmark and everything it started (Spark's JVM, moto's server)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def tail(path: Path, lines: int = 15) -> str:
    text = path.read_text(errors="replace").rstrip().splitlines()
    return "\n".join(text[-lines:])


def run_one(name: str, size: str, repeats: int, out_dir: Path, timeout: float) -> Outcome:
    """Run one benchmark script; its output goes to ``<name>.log``, its results to JSON."""
    out = out_dir / f"{name}.json"
    log = out_dir / f"{name}.log"
    argv = command(name, size, repeats, out)
    outcome = Outcome(name, argv, log=str(log))
    out.unlink(missing_ok=True)  # never report a previous run's figures
    start = time.perf_counter()
    with open(log, "wb") as sink:
        process = subprocess.Popen(
            argv,
            cwd=ROOT,
            env=child_environment(),
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            outcome.exit_code = process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            stop_group(process)
            outcome.status = "timeout"
            outcome.error = f"stopped after {timeout:.0f} s"
        except BaseException:
            stop_group(process)
            raise
    outcome.seconds = time.perf_counter() - start
    if outcome.status == "timeout":
        return outcome
    if outcome.exit_code != 0:
        outcome.status = "failed"
        outcome.error = f"exit status {outcome.exit_code}; last lines:\n{tail(log)}"
        return outcome
    try:
        outcome.results = json.loads(out.read_text())
    except (OSError, ValueError) as exc:
        outcome.status = "failed"
        outcome.error = f"no readable results at {out}: {exc}"
        return outcome
    try:
        outcome.figures = figures(name, outcome.results)
    except (KeyError, TypeError, ValueError) as exc:
        outcome.status = "failed"
        outcome.error = f"the results lack a field the summary needs: {exc!r}"
        return outcome
    outcome.status = "ok"
    return outcome


# ---------------------------------------------------------------------- the machine


def _first_line(path: str, prefix: str) -> str | None:
    with contextlib.suppress(OSError), open(path) as f:
        for line in f:
            if line.startswith(prefix):
                return line.split(":", 1)[1].strip()
    return None


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "not installed"


def _java_version() -> str:
    try:
        found = subprocess.run(
            ["java", "-version"], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return "not found"
    lines = (found.stderr or found.stdout).strip().splitlines()
    return lines[0] if lines else "unknown"


def machine() -> dict[str, Any]:
    """Cores, memory, CPU model, OS and the versions that shape the figures."""
    memory_kb = _first_line("/proc/meminfo", "MemTotal")
    memory = int(memory_kb.split()[0]) * 1024 if memory_kb else None
    return {
        "cores": os.cpu_count(),
        "memory_bytes": memory,
        "cpu_model": _first_line("/proc/cpuinfo", "model name") or platform.processor(),
        "os": platform.platform(),
        "python": platform.python_version(),
        "java": _java_version(),
        **{
            package: _version(package)
            for package in ("arrowshuffle", "pyarrow", "polars", "pyspark", "numpy", "moto")
        },
    }


# ---------------------------------------------------------------------- reports


def shown_command(argv: list[str]) -> str:
    """The command as a reader would type it from the repository root."""
    inside = str(ROOT) + os.sep
    words = ["python", *(a.removeprefix(inside) for a in argv[1:])]
    return shlex.join(words)


def status_rows(outcomes: list[Outcome]) -> list[list[str]]:
    return [[o.name, o.status, f"{o.seconds:.0f} s", shown_command(o.argv)] for o in outcomes]


def print_report(outcomes: list[Outcome]) -> None:
    found = [f for o in outcomes for f in o.figures]
    print()
    if found:
        print(text_table(found))
        print("\nratio = arrowshuffle / peer on medians: below 1 means arrowshuffle needs less.")
    for o in outcomes:
        if o.status != "ok":
            print(f"\n{o.name}: {o.status.upper()}: {o.error}\n  log: {o.log}")


def markdown(summary: dict[str, Any], outcomes: list[Outcome]) -> str:
    m = summary["machine"]
    memory = f"{m['memory_bytes'] / 2**30:.1f} GiB" if m["memory_bytes"] else "unknown"
    load = summary["load_average"]
    machine_rows = [
        ["cores", str(m["cores"])],
        ["memory", memory],
        ["CPU", str(m["cpu_model"])],
        ["OS", str(m["os"])],
        ["Python", m["python"]],
        ["Java", m["java"]],
        *[[p, m[p]] for p in ("arrowshuffle", "pyarrow", "polars", "pyspark", "numpy", "moto")],
        ["load average (1 min) at start / end", f"{load['start']:.1f} / {load['end']:.1f}"],
    ]
    found = [f for o in outcomes for f in o.figures]
    # The load before the first benchmark is other work; by the end it includes the benchmarks.
    busy = (
        f" The machine was busy with other work when this run started (load average"
        f" {load['start']:.1f} on {m['cores']} cores): absolute times are inflated and noisy,"
        " while each peer ran in the same run under the same load."
        if m["cores"] and load["start"] >= m["cores"]
        else ""
    )
    parts = [
        "# Benchmarks",
        "",
        "The latest full run of the benchmark suite (`benchmarks/`), written by"
        " `python -m benchmarks --update-report`."
        " Every figure compares arrowshuffle with a peer measured in the same run, on the same"
        " generated data. All figures are costs (time, bytes, requests, files), and"
        " **ratio = arrowshuffle / peer** on medians: below 1 means arrowshuffle needs less."
        " Times are medians over the repeats, with [min-max] where the script reports them.",
        "",
        "## Command",
        "",
        "```bash",
        summary["command"],
        "```",
        "",
        f"Size `{summary['size']}`, {summary['repeats']} repeats, run on {summary['started']}"
        f" in {summary['seconds'] / 60:.1f} minutes.{busy}",
        "",
        "## Machine",
        "",
        markdown_table(["", ""], machine_rows),
        "",
        "## Key figures",
        "",
        markdown_table(HEADER, table_rows(found)) if found else "No benchmark produced figures.",
        "",
        "## Runs",
        "",
        markdown_table(["benchmark", "status", "wall time", "command"], status_rows(outcomes)),
    ]
    failed = [o for o in outcomes if o.status != "ok"]
    if failed:
        parts += ["", "Failures:", ""]
        for o in failed:
            parts += [f"* `{o.name}`: {o.status}: {(o.error or '').splitlines()[0]}"]
    parts += ["", NOTES]
    return "\n".join(parts) + "\n"


NOTES = """## What each benchmark measures

* `format` (`benchmarks/bench_format.py`): `ShuffleFileWriter` against `pyarrow.ipc` writing the
  same batches unsorted, and against sorting the rows by subpartition first; reading one
  subpartition with `open_file(path).read(s)` (a fresh open each time) against a standalone Arrow
  file of only its rows and against reading the whole file and filtering; bytes read per byte of
  the subpartition. Local disk, warm page cache.
* `partitioners` (`benchmarks/bench_partitioners.py`): each partitioner's `assign` over the same
  batches as polars `Series.hash` (one key) or `DataFrame.hash_rows` (two keys); then a child
  process streams generated rows through `write()` with a `MemoryPool` and reports its peak RSS
  growth and Arrow's peak allocation next to the pool's size.
* `kernels` (`benchmarks/bench_kernels.py`): Spark's hash (the `hash` partitioner, `pmod(hash(keys),
  64)`) of int64, string and int64+string keys in batches of 65536 rows against polars
  `Series.hash` / `DataFrame.hash_rows` of the same batches, both on every core (the thread counts
  are in the measure); and `ShuffleFileWriter.write(batch, subpartitions=ids)` of 4M rows
  (int64, float64, string) against a plain `pyarrow.ipc` write of the same batches. Each repeat runs
  both sides back to back, alternating which goes first. With numba, also a new process's first
  hash and sort (the compiled kernels loaded from numba's cache) against a new process that only
  imports the same modules.
* `reads` (`benchmarks/bench_reads.py`): one subpartition of a multi-file dataset read with
  arrowshuffle (pyarrow and polars), with polars `scan_ipc(...).filter(...)` over the same data
  files, and from a hive-partitioned Parquet copy (polars and pyarrow); then the same on moto's S3
  server on 127.0.0.1, where HTTP requests and response bytes are counted at the server and time is
  modeled as requests x latency + bytes / bandwidth (moto's own speed says nothing about S3's).
  At the small size the regions are smaller than the reader's default `max_gap` (256 KiB), so a
  default read merges each file's regions into one request: fewer requests, more bytes. The
  `max_gap=0` row is the same read with exact ranges (one request per region and file).
  Its small reads open a 4M-row file and read one subpartition (or four) of 64, against a
  standalone Arrow file of just those rows, memory-mapped, with the same codec: once for a file
  written with the writer's defaults (one region, zstd) and once each for a 64 MiB sort buffer
  (three regions) with LZ4 and uncompressed.
* `polars_scan` (`benchmarks/bench_polars_scan.py`): one LazyFrame per subpartition, for every
  subpartition: `arrowshuffle.polars.scan(path, subpartitions=s)` (the opened dataset kept per
  manifest version), the same opening the dataset on every call, and `scan(opened_dataset, s)`,
  against `pl.scan_parquet("<hive>/sp=<s>/")` over a hive-partitioned Parquet copy; building the
  frames only (the per-call overhead), then building and collecting them. Local disk, warm cache.
* `verify` (`benchmarks/bench_verify.py`): the same dataset read with `verify=True` against
  `verify=False`, locally (memory-mapped, warm page cache; whole dataset and one subpartition)
  and on moto's S3 server on 127.0.0.1 (open + read), the two settings alternating; `verify="auto"`
  (the default) is on for object stores and off for local files.
* `spark` (`benchmarks/bench_spark.py`): local Spark writes the same cached DataFrame with the
  arrowshuffle data source, with `repartition(n, key).write.parquet` and with
  `write.partitionBy(sub).parquet`, then reads one subpartition and all of them back, decoding
  every column. The script reports medians only.
* `plan` (`benchmarks/bench_plan.py`): the same rows hash-partitioned by key into 8 files x 64
  subpartitions, once with a third of the rows on one key and once with Zipf(1.1) keys; the
  slowest task's bytes over the mean task's bytes with `plan()` (target = total / 16, skew
  threshold = total / 256, factor 5) against one task per subpartition (goal: at most 1.5x).
  Then `open_dataset(path).plan()` on a synthetic manifest of 10,000 files x 1,000 subpartitions
  (manifest decode included; totals within 2x of each other, so nothing is split and the files
  need not exist) against `json.loads` of the same bytes. Last, opening one local file and
  reading one subpartition at N = 16, 256 and 4,096 subpartitions, against pyarrow's own
  `ipc.open_file(path).get_batch(0)` of the same data file.
* `wide` (`benchmarks/bench_wide.py`): M producer files x N subpartitions of small rows on
  moto's S3 server (1,000 x 1,000 at the large size; `--quick` at the small one): one consumer of
  100 reads its contiguous range from every file, before and after `compact`, against the same
  rows as hive-partitioned Parquet read by polars and pyarrow; GETs and bytes are counted at the
  server and time is modeled (20 ms per request + 100 MB/s, and 50 ms + 1 GB/s). Also compaction's
  own time and bytes, and one consumer's local read time against M, before and after.
* `commits` (`benchmarks/bench_commits.py`): what concurrent commits do to one dataset, locally and
  on moto's S3 server behind a proxy that delays every write by 0-0.8 s: 3 processes append small
  tables, one compacts in a loop and 2 read the whole dataset, for a fixed time. Counted: appends
  acknowledged and then lost (missing from the final read, and after `vacuum`), failed appends,
  compactions that aborted or failed, reads that failed (their files were removed since the
  open) or returned no single version, and whether the dataset stayed readable; the peer of each
  count is what it is a share of. Then, on S3 without delays, the HTTP requests of a cold
  one-subpartition read and of one append (and how many of those are the commit's), with their
  time against one cold GET and one plain PUT.
* `compression` (`benchmarks/bench_compression.py`): rows shaped like TPC-H lineitem (16
  columns) hash-partitioned by order key into 64 subpartitions, written with each body
  compression (`none`, `lz4`, `zstd`): write time and bytes against polars `write_parquet` (zstd)
  of the same rows, a local read of one subpartition (time, against the uncompressed file in the
  JSON), and on moto's S3 server the requests and response bytes of opening the file and reading
  one subpartition (moto's speed says nothing about S3's, so there is no time).
* `cogroup` (`benchmarks/bench_cogroup.py`): TPC-H-shaped lineitem (16 columns, a third of the
  lines on one order key) and orders, each stored hash-partitioned by order key (64
  subpartitions) and as Parquet; a join + aggregate needing 4 of lineitem's columns, run by
  Spark `local[2]` on Parquet (its own shuffles), Spark on the arrowshuffle source (shuffled
  again), `arrowshuffle.spark.map_cogroups` (no Exchange: checked), polars' one big join on
  Parquet, `arrowshuffle.polars.cogroup`, and DuckDB on Parquet; every result checked equal to
  DuckDB's. Also the slowest co-grouped task over the mean, with and without a skew split.

Rerun one benchmark larger with its own flags, e.g. `python -m benchmarks.bench_reads --help`, or
all of them with `python -m benchmarks --size medium` (near the scripts' defaults) or `--size large`
(the scale of the issues: a 2 GiB write with a 256 MiB pool, 10 million rows per layout).
The runner keeps each script's output in `<out-dir>/<name>.log` and its JSON in
`<out-dir>/<name>.json`; `<out-dir>/summary.json` holds everything shown here, and
`<out-dir>/BENCHMARKS.md` this table. Only a full run with `--update-report` rewrites the
committed `BENCHMARKS.md`."""


# ---------------------------------------------------------------------- entry point


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description="Run every benchmark on generated data and summarize them in one table.",
    )
    parser.add_argument("--size", choices=SIZES, default="small", help="data size (small)")
    parser.add_argument(
        "--only",
        help=f"comma-separated benchmarks to run (default: all of {','.join(BENCHMARKS)})",
    )
    parser.add_argument("--repeats", type=int, help="repeats per measurement (3 small, else 5)")
    parser.add_argument(
        "--out-dir",
        type=Path,
        default=ROOT / "benchmarks" / "results",
        help="where JSON results, logs and summary.json go (benchmarks/results)",
    )
    parser.add_argument(
        "--update-report",
        action="store_true",
        help="also write the committed report (--report); only for a full run, without --only",
    )
    parser.add_argument(
        "--report",
        "--markdown",
        dest="report",
        type=Path,
        default=REPORT,
        help="the committed report --update-report writes (BENCHMARKS.md at the repository root)",
    )
    parser.add_argument("--no-markdown", action="store_true", help="write no Markdown table at all")
    parser.add_argument("--timeout", type=float, help="seconds per benchmark before it is stopped")
    args = parser.parse_args(argv)
    partial = args.only is not None
    if args.only is None:
        args.only = ",".join(BENCHMARKS)
    chosen = [n.strip() for n in args.only.split(",") if n.strip()]
    unknown = [n for n in chosen if n not in BENCHMARKS]
    if unknown or not chosen:
        parser.error(f"--only: expected names from {', '.join(BENCHMARKS)}, found {args.only!r}")
    args.only = [n for n in BENCHMARKS if n in chosen]
    if args.update_report and partial:
        parser.error(
            "--update-report rewrites the whole report and needs a full run: drop --only"
            f" (the table of a partial run goes to <out-dir>/{REPORT.name})"
        )
    if args.update_report and args.no_markdown:
        parser.error("--update-report and --no-markdown contradict each other")
    args.out_dir = args.out_dir.resolve()
    args.report = args.report.resolve()
    if not args.update_report and args.out_dir / REPORT.name == args.report:
        parser.error(
            f"--out-dir {args.out_dir} would overwrite the committed report {args.report}"
            " without --update-report: choose another output directory"
        )
    if args.repeats is None:
        args.repeats = DEFAULT_REPEATS[args.size]
    if args.repeats < 1:
        parser.error(f"--repeats must be at least 1, found {args.repeats}")
    if args.timeout is None:
        args.timeout = DEFAULT_TIMEOUT[args.size]
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    shown = ["python", "-m", "benchmarks", *(sys.argv[1:] if argv is None else argv)]
    out_dir: Path = args.out_dir
    out_dir.mkdir(parents=True, exist_ok=True)
    started = dt.datetime.now(dt.timezone.utc)
    load_start = os.getloadavg()[0]
    print(f"benchmarks: {', '.join(args.only)}; size {args.size}; {args.repeats} repeats")
    begin = time.perf_counter()
    outcomes = []
    for i, name in enumerate(args.only, start=1):
        print(f"[{i}/{len(args.only)}] {name} ...", end=" ", flush=True)
        outcome = run_one(name, args.size, args.repeats, out_dir, args.timeout)
        print(f"{outcome.status} in {outcome.seconds:.0f} s", flush=True)
        outcomes.append(outcome)
    summary = {
        "command": shlex.join(shown),
        "size": args.size,
        "repeats": args.repeats,
        "started": started.strftime("%Y-%m-%d %H:%M UTC"),
        "seconds": time.perf_counter() - begin,
        "load_average": {"start": load_start, "end": os.getloadavg()[0]},
        "machine": machine(),
        "benchmarks": {o.name: o.to_dict() for o in outcomes},
    }
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    print_report(outcomes)
    print(f"\nwrote {out_dir / 'summary.json'}")
    if not args.no_markdown:
        text = markdown(summary, outcomes)
        local = out_dir / REPORT.name
        local.write_text(text)
        print(f"wrote {local}")
        if args.update_report:
            args.report.write_text(text)
            print(f"wrote {args.report} (the committed report)")
        else:
            print(f"left {args.report} as it was (a full run with --update-report rewrites it)")
    return 0 if all(o.status == "ok" for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
