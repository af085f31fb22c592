"""Concurrent commits: what appenders, a compactor and readers running at once do to a dataset.

Run from the repository root::

    python -m benchmarks.bench_commits --seconds 30 --backends local,s3 --out /tmp/commits.json
    python -m benchmarks.bench_commits --seconds 90 --runs 3 --backends s3 --scenarios race

Only the public API is used (``write_dataset``, ``compact``, ``vacuum``, ``open_dataset``,
``validate``/``validate_dataset``), so the same script measures any commit protocol.

Two scenarios:

* **race** (local directory and S3): a first commit creates the dataset (``mode="overwrite"``),
  then ``--appenders`` processes append small tables (50-200 rows of unique int64 ``id``\\ s,
  hash-partitioned by ``k`` into 8 subpartitions) back to back, one process compacts in a loop
  (``compact(path, target_file_size="64MiB")``, short pauses) and ``--readers`` processes open
  the dataset, wait 0-1.5 s (so that commits land in between) and read it whole. Every worker
  is a separate process (spawn). An appender logs an append (fsync'ed) only once
  ``write_dataset`` has returned: only those appends are *acknowledged*. A reader checks that
  what it read is one version of the dataset: no id twice, and every append either whole or
  absent (the row count of each append follows from its id, so no reader needs the logs).
  After ``--seconds`` the workers are told to stop and finish what they are doing; then the
  dataset is read: unreadable or not, acknowledged appends missing (lost), ids read twice; then
  ``vacuum(path, older_than=0)``, a read again (lost after vacuum), and the validator.
  Compaction that raises ``CommitConflictError`` counts as a clean abort; any other exception
  of a compaction is a failure, any exception of an append a failed (unacknowledged) append,
  counted by class. A compaction that finds a listed file gone means the dataset lists a
  deleted file, and no whole read can succeed from then on: reads that failed before the first
  such compaction are counted apart, as stale reads (their files were removed after the open);
  a dataset that no longer reads is read file by file (``dataset.file(i)``) to count the
  acknowledged appends the remaining files miss. On S3 the workers reach moto's server
  (127.0.0.1) through ``tests/fault_proxy.py``'s proxy, which delays every PUT, POST and DELETE
  by 0-0.8 s (``--s3-write-delay``) and serializes conditional requests (moto checks a
  condition and writes in two steps; serialized, a race seen here is not moto's). moto may
  still log ``ValueError: I/O operation on closed file`` when two plain PUTs of one key
  overlap: it answers 500 and the client retries. The final checks go to moto directly.
* **requests** (S3, no delays, counted at a proxy): a dataset of 4 files (4 appends of
  ``--request-rows`` rows, 64 subpartitions). A cold ``open_dataset(url).read(5)`` (a fresh
  s3fs instance each time): HTTP requests by method and the median time over
  ``--read-repeats``, next to a cold GET of a 1 KiB object. One ``write_dataset(...,
  mode="append")`` of 1,000 rows: requests by method, how many belong to the commit (their
  path holds the manifest's name, ``_arrowshuffle_manifest``, or they list the directory or
  manifests; s3fs's one-key listing under a new file's own name, part of its existence check,
  is the file's), and the median time over ``--append-repeats`` (one s3fs instance), next to a
  plain PUT of the same rows as one Arrow IPC file. ``--repeats R`` sets 3R reads, 2R appends.

The JSON (``--out``) holds every run's counts, a summary per backend (median, min and max over
``--runs``) and ``figures``, the key figures as ``python -m benchmarks`` shows them.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import multiprocessing
import os
import random
import statistics
import sys
import tempfile
import time
import traceback
import urllib.parse
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

import arrowshuffle
from benchmarks.output import add_skip_s3, write_results

#: Subpartitions of the race's dataset.
NUM_SUBPARTITIONS = 8
#: Rows of one append: between these bounds, a function of the append's (process, sequence).
ROWS_LO, ROWS_HI = 50, 200
#: What every manifest object's name holds, whatever the commit protocol calls its versions.
MANIFEST_STEM = "_arrowshuffle_manifest"
#: The exception class of a compaction that found the dataset changed and stood back.
CONFLICT = "CommitConflictError"
BACKENDS = ("local", "s3")
SCENARIOS = ("race", "requests")

# ---------------------------------------------------------------------- the appends


def append_rows(keys: np.ndarray) -> np.ndarray:
    """Rows of the appends ``keys`` (``process * 10**6 + sequence``), 50 to 200 each."""
    proc, seq = keys // 10**6, keys % 10**6
    return ROWS_LO + (proc * 7919 + seq * 104729) % (ROWS_HI - ROWS_LO + 1)


def append_key(proc: int, seq: int) -> int:
    return proc * 10**6 + seq


def append_table(proc: int, seq: int) -> pa.Table:
    """Append ``seq`` of process ``proc``: ids ``proc * 10**9 + seq * 1000 + i``."""
    rows = int(append_rows(np.array([append_key(proc, seq)]))[0])
    ids = proc * 10**9 + seq * 1000 + np.arange(rows, dtype=np.int64)
    return pa.table({"id": ids, "k": (ids // 7) % 1009, "v": ids.astype(np.float64) * 0.5})


def appends_of(ids: np.ndarray) -> dict[str, Any]:
    """What a read returned, against the appends' ids: one version or not.

    ``duplicated_ids``: ids read more than once; ``torn``: appends read in part (some of their
    rows missing), ``foreign``: ids no append writes; ``keys``: the appends present.
    """
    ids = np.asarray(ids, dtype=np.int64)
    unique = np.unique(ids)
    keys, per_append = np.unique(unique // 1000, return_counts=True)
    expected = append_rows(keys)
    foreign = int(np.count_nonzero(unique % 1000 >= append_rows(unique // 1000)))
    return {
        "rows": int(ids.size),
        "duplicated_ids": int(ids.size - unique.size),
        "torn": int(np.count_nonzero(per_append != expected)),
        "foreign": foreign,
        "keys": keys,
    }


# ---------------------------------------------------------------------- the workers


class Tally:
    """Exceptions counted by class name, with the first message of each."""

    def __init__(self) -> None:
        self.counts: collections.Counter[str] = collections.Counter()
        self.samples: dict[str, str] = {}

    def add(self, exc: BaseException) -> None:
        name = type(exc).__name__
        self.counts[name] += 1
        self.samples.setdefault(name, " ".join(str(exc).split())[:400])

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def to_dict(self) -> dict[str, Any]:
        return {"by_class": dict(self.counts), "samples": self.samples}


def worker(
    role: str,
    index: int,
    path: str,
    options: dict[str, Any] | None,
    settings: dict[str, Any],
    ready: Any,
    stop: Any,
    out_dir: str,
) -> None:
    """One worker process: wait for the others, run ``role`` until ``stop``, write the result."""
    result: dict[str, Any] = {"role": role, "index": index}
    rng = random.Random(settings["seed"] * 1000 + index * 10 + BACKENDS.index(settings["backend"]))
    try:
        warm_up(role, index, path, options, settings, Path(out_dir))
        ready.wait(timeout=settings["start_timeout"])
        started = time.monotonic()
        if role == "appender":
            result.update(appender(index, path, options, settings, rng, stop, Path(out_dir)))
        elif role == "compactor":
            result.update(compactor(path, options, settings, rng, stop))
        else:
            result.update(reader(path, options, settings, rng, stop))
        result["seconds"] = time.monotonic() - started
    except BaseException as exc:  # reported, not lost in a child's stderr
        result["crashed"] = f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"
    finally:
        out = Path(out_dir) / f"{role}-{index}.json"
        out.write_text(json.dumps(result, indent=1) + "\n")


def warm_up(
    role: str,
    index: int,
    path: str,
    options: dict[str, Any] | None,
    settings: dict[str, Any],
    out_dir: Path,
) -> None:
    """Load what the first operation would (modules, the storage client) before the clock runs:
    six processes doing that at once on a small machine take seconds."""
    arrowshuffle.open_dataset(path, options).read()
    if role == "appender":
        scratch = out_dir / f"warm-up-{index}.arrow"
        arrowshuffle.write(append_table(index + 1, 0), str(scratch), num_subpartitions=8, by="k")
        scratch.unlink()
        Path(f"{scratch}.idx").unlink()
    elif role == "compactor":
        arrowshuffle.compact(
            path,
            target_file_size=settings["target_file_size"],
            storage_options=options,
            dry_run=True,
        )


def event(begin: float, start: float, outcome: str) -> tuple[float, float, str]:
    """``(start, seconds, outcome)`` of one operation, times from the worker's start."""
    return (round(start - begin, 3), round(time.perf_counter() - start, 3), outcome)


def appender(
    index: int,
    path: str,
    options: dict[str, Any] | None,
    settings: dict[str, Any],
    rng: random.Random,
    stop: Any,
    out_dir: Path,
) -> dict[str, Any]:
    proc = index + 1  # process 0 is the first commit
    failures = Tally()
    seconds: list[float] = []
    events: list[tuple[float, float, str]] = []  # (start, seconds, outcome), from the start
    seq = attempted = 0
    begin = time.perf_counter()
    with (
        open(out_dir / f"acknowledged-{proc}.log", "a") as acked,
        open(out_dir / f"failed-{proc}.log", "a") as failed,
    ):
        while not stop.is_set():
            seq += 1
            table = append_table(proc, seq)
            attempted += 1
            start = time.perf_counter()
            try:
                arrowshuffle.write_dataset(
                    table,
                    path,
                    num_subpartitions=NUM_SUBPARTITIONS,
                    by="k",
                    mode="append",
                    storage_options=options,
                )
            except Exception as exc:
                failures.add(exc)
                failed.write(f"{append_key(proc, seq)}\n")
                failed.flush()
                events.append(event(begin, start, type(exc).__name__))
            else:
                # Acknowledged: on disk before anything else happens.
                acked.write(f"{append_key(proc, seq)}\n")
                acked.flush()
                os.fsync(acked.fileno())
                seconds.append(time.perf_counter() - start)
                events.append(event(begin, start, "acknowledged"))
            if settings["append_pause"]:
                time.sleep(rng.uniform(0, settings["append_pause"]))
    return {
        "attempted": attempted,
        "acknowledged": len(seconds),
        "failed": failures.to_dict(),
        "median_s": statistics.median(seconds) if seconds else None,
        "events": events,
    }


def compactor(
    path: str,
    options: dict[str, Any] | None,
    settings: dict[str, Any],
    rng: random.Random,
    stop: Any,
) -> dict[str, Any]:
    aborted, failed = Tally(), Tally()
    attempted = committed = nothing = merged = 0
    seconds: list[float] = []
    events: list[tuple[float, float, str]] = []
    begin = time.perf_counter()
    while not stop.is_set():
        attempted += 1
        start = time.perf_counter()
        try:
            report = arrowshuffle.compact(
                path, target_file_size=settings["target_file_size"], storage_options=options
            )
        except Exception as exc:
            (aborted if type(exc).__name__ == CONFLICT else failed).add(exc)
            events.append(event(begin, start, type(exc).__name__))
        else:
            before = getattr(report, "files_before", 0)
            after = getattr(report, "files_after", before)
            if after < before:
                committed += 1
                merged += before - after
                seconds.append(time.perf_counter() - start)
                events.append(event(begin, start, f"committed {before} -> {after} files"))
            else:
                nothing += 1
                events.append(event(begin, start, f"nothing to merge ({before} files)"))
        time.sleep(rng.uniform(0, settings["compact_pause"]))
    return {
        "attempted": attempted,
        "committed": committed,
        "nothing_to_merge": nothing,
        "files_removed_by_merging": merged,
        "aborted": aborted.to_dict(),
        "failed": failed.to_dict(),
        "median_committed_s": statistics.median(seconds) if seconds else None,
        "events": events,
    }


def reader(
    path: str,
    options: dict[str, Any] | None,
    settings: dict[str, Any],
    rng: random.Random,
    stop: Any,
) -> dict[str, Any]:
    open_failures, read_failures = Tally(), Tally()
    opens = ok = duplicated = torn = not_one = 0
    samples: list[dict[str, int]] = []
    # (start, seconds, outcome): "ok", "not one version", "open <class>" or "<class>".
    events: list[tuple[float, float, str]] = []
    begin = time.perf_counter()
    while not stop.is_set():
        start = time.perf_counter()
        try:
            dataset = arrowshuffle.open_dataset(path, options)
        except Exception as exc:
            open_failures.add(exc)
            events.append(event(begin, start, f"open {type(exc).__name__}"))
            time.sleep(0.1)
            continue
        opens += 1
        time.sleep(rng.uniform(0, settings["reader_pause"]))
        start = time.perf_counter()
        try:
            table = dataset.read()
        except Exception as exc:
            read_failures.add(exc)
            events.append(event(begin, start, type(exc).__name__))
            continue
        ok += 1
        found = appends_of(table.column("id").to_numpy())
        duplicated += bool(found["duplicated_ids"])
        bad = bool(found["torn"] or found["foreign"])
        torn += bad
        wrong = bool(found["duplicated_ids"]) or bad
        not_one += wrong
        events.append(event(begin, start, "not one version" if wrong else "ok"))
        if wrong and len(samples) < 5:
            samples.append({k: v for k, v in found.items() if k != "keys"})
    return {
        "opens": opens,
        "open_failures": open_failures.to_dict(),
        "reads_ok": ok,
        "read_failures": read_failures.to_dict(),
        "duplicated": duplicated,
        "torn": torn,
        "not_one_version": not_one,
        "not_one_version_samples": samples,
        "events": events,
    }


# ---------------------------------------------------------------------- one race


def read_keys(log_dir: Path, pattern: str) -> np.ndarray:
    keys = [
        int(line)
        for log in sorted(log_dir.glob(pattern))
        for line in log.read_text().split()
        if line.strip()
    ]
    return np.array(sorted(keys), dtype=np.int64)


def validator() -> tuple[str, Any] | tuple[None, None]:
    """The facade's dataset validator: ``validate`` where it exists, else ``validate_dataset``."""
    names = dir(arrowshuffle)
    for name in ("validate", "validate_dataset"):
        if name in names:
            return name, getattr(arrowshuffle, name)
    return None, None


def final_read(path: str, options: dict[str, Any] | None) -> tuple[dict[str, Any] | None, str]:
    try:
        dataset = arrowshuffle.open_dataset(path, options)
        table = dataset.read()
    except Exception as exc:
        return None, f"{type(exc).__name__}: {' '.join(str(exc).split())[:400]}"
    found = appends_of(table.column("id").to_numpy())
    found["files"] = int(getattr(dataset, "num_files", -1))
    return found, ""


def salvage(path: str, options: dict[str, Any] | None, acked: np.ndarray) -> dict[str, Any]:
    """For a dataset that does not read: its listed files that still read one by one, and the
    acknowledged appends missing from those (``dataset.file(i)``, where the reader has it)."""
    try:
        dataset = arrowshuffle.open_dataset(path, options)
        files = int(dataset.num_files)
        open_one = dataset.file
    except Exception as exc:
        return {"salvage_error": f"{type(exc).__name__}: {exc}"[:400]}
    keys, unreadable = [], 0
    for i in range(files):
        try:
            keys.append(appends_of(open_one(i).read().column("id").to_numpy())["keys"])
        except Exception:
            unreadable += 1
    present = np.concatenate(keys) if keys else np.array([], dtype=np.int64)
    return {
        "files": files,
        "files_unreadable": unreadable,
        "lost_from_files_left": int(np.count_nonzero(~np.isin(acked, present))),
    }


def validate(path: str, options: dict[str, Any] | None) -> dict[str, Any]:
    name, fn = validator()
    if fn is None:
        return {"function": None, "ok": None}
    try:
        report = fn(path, storage_options=options)
    except Exception as exc:
        return {"function": name, "ok": False, "error": f"{type(exc).__name__}: {exc}"[:400]}
    ok = report if isinstance(report, bool) else bool(getattr(report, "ok", False))
    out: dict[str, Any] = {"function": name, "ok": ok}
    if not ok and hasattr(report, "to_dict"):
        with contextlib.suppress(Exception):
            out["report"] = json.loads(json.dumps(report.to_dict(), default=str))
    return out


def final_state(
    path: str, options: dict[str, Any] | None, acked: np.ndarray, unacked: np.ndarray
) -> dict[str, Any]:
    """Read the dataset, vacuum it with no grace period, read it again; validate."""
    out: dict[str, Any] = {"acknowledged": int(acked.size)}
    found, error = final_read(path, options)
    out["unreadable"] = found is None
    out["error"] = error or None
    if found is not None:
        present = found["keys"]
        out.update(
            rows=found["rows"],
            files=found["files"],
            lost=int(np.count_nonzero(~np.isin(acked, present))),
            duplicated_ids=found["duplicated_ids"],
            torn_appends=found["torn"] + found["foreign"],
            unacknowledged_visible=int(np.count_nonzero(np.isin(unacked, present))),
        )
    else:
        out.update(salvage(path, options, acked))
    out["validate"] = validate(path, options)
    try:
        report = arrowshuffle.vacuum(path, older_than=0, storage_options=options)
        out["vacuum_removed"] = len(getattr(report, "removed", ()))
        out["vacuum_error"] = None
    except Exception as exc:
        out["vacuum_removed"] = 0
        out["vacuum_error"] = f"{type(exc).__name__}: {exc}"[:400]
    after, error = final_read(path, options)
    out["unreadable_after_vacuum"] = after is None
    out["error_after_vacuum"] = error or None
    if after is not None:
        out["lost_after_vacuum"] = int(np.count_nonzero(~np.isin(acked, after["keys"])))
        out["duplicated_ids_after_vacuum"] = after["duplicated_ids"]
    out["validate_after_vacuum"] = validate(path, options)
    return out


def stop_all(processes: list[Any], timeout: float) -> list[str]:
    """Wait for every worker to end; terminate (then kill) those still running."""
    started = [p for p in processes if p.pid is not None]
    deadline = time.monotonic() + timeout
    for p in started:
        p.join(max(0.1, deadline - time.monotonic()))
    stopped = []
    for p in started:
        if p.is_alive():
            stopped.append(p.name)
            p.terminate()
            p.join(10)
            if p.is_alive():
                p.kill()
                p.join(10)
    return stopped


def race(
    backend: str,
    path: str,
    options: dict[str, Any] | None,
    final_options: dict[str, Any] | None,
    args: argparse.Namespace,
    run: int,
) -> dict[str, Any]:
    """One race: a first commit, then appenders, a compactor and readers for ``args.seconds``."""
    settings = {
        "backend": backend,
        "seed": args.seed + run,
        "append_pause": args.append_pause,
        "compact_pause": args.compact_pause,
        "reader_pause": args.reader_pause,
        "target_file_size": args.target_file_size,
        "start_timeout": 120.0,
    }
    with tempfile.TemporaryDirectory(prefix="arrowshuffle-bench-commits-logs-") as logs:
        log_dir = Path(logs)
        arrowshuffle.write_dataset(
            append_table(0, 1),
            path,
            num_subpartitions=NUM_SUBPARTITIONS,
            by="k",
            mode="overwrite",
            storage_options=final_options,
        )
        (log_dir / "acknowledged-0.log").write_text(f"{append_key(0, 1)}\n")
        context = multiprocessing.get_context("spawn")
        roles = [("appender", i) for i in range(args.appenders)]
        roles += [("compactor", 0)] + [("reader", i) for i in range(args.readers)]
        ready = context.Barrier(len(roles) + 1)
        stop = context.Event()
        processes = [
            context.Process(
                target=worker,
                args=(role, i, path, options, settings, ready, stop, logs),
                name=f"{role}-{i}",
                daemon=True,
            )
            for role, i in roles
        ]
        terminated: list[str] = []
        try:
            for p in processes:
                p.start()
            ready.wait(timeout=settings["start_timeout"])
            start = time.monotonic()
            while time.monotonic() - start < args.seconds:
                time.sleep(max(0.0, min(0.5, args.seconds - (time.monotonic() - start))))
                if not all(p.is_alive() for p in processes):
                    break  # a worker ended early: it crashed; its result says why
            elapsed = time.monotonic() - start
            stop.set()
            terminated = stop_all(processes, args.stop_timeout)
        finally:
            stop.set()
            terminated += stop_all(processes, 5.0)
        results = collections.defaultdict(list)
        for role, i in roles:
            out = log_dir / f"{role}-{i}.json"
            found = json.loads(out.read_text()) if out.exists() else {"crashed": "no result"}
            results[role].append(found)
        acked = read_keys(log_dir, "acknowledged-*.log")
        unacked = read_keys(log_dir, "failed-*.log")
    final = final_state(path, final_options, acked, unacked)
    return summarize_run(backend, elapsed, results, final, terminated)


def merge_counts(parts: list[dict[str, Any]]) -> dict[str, Any]:
    counts: collections.Counter[str] = collections.Counter()
    samples: dict[str, str] = {}
    for part in parts:
        counts.update(part["by_class"])
        for name, text in part["samples"].items():
            samples.setdefault(name, text)
    return {"by_class": dict(counts), "samples": samples}


def summarize_run(
    backend: str,
    elapsed: float,
    results: dict[str, list[dict[str, Any]]],
    final: dict[str, Any],
    terminated: list[str],
) -> dict[str, Any]:
    appenders, readers = results["appender"], results["reader"]
    comp = results["compactor"][0]
    crashed = {
        f"{r.get('role')}-{r.get('index')}": r["crashed"]
        for rs in results.values()
        for r in rs
        if "crashed" in r
    }
    ok_appenders = [a for a in appenders if "attempted" in a]
    ok_readers = [r for r in readers if "opens" in r]
    # A compaction that finds a listed file gone means the dataset lists a deleted file: from
    # then on no read of the whole dataset can succeed. Reads that failed before are stale.
    broken_at = min(
        (start for start, _, outcome in comp.get("events", []) if outcome == "MissingObjectError"),
        default=None,
    )
    before = [
        outcome
        for r in ok_readers
        for start, _, outcome in r.get("events", [])
        if broken_at is None or start < broken_at
    ]
    append_failures = merge_counts([a["failed"] for a in ok_appenders])
    medians = [a["median_s"] for a in ok_appenders if a["median_s"] is not None]
    return {
        "backend": backend,
        "seconds": elapsed,
        "appends": {
            # The first commit is acknowledged too; the totals below count it.
            "attempted": 1 + sum(a["attempted"] for a in ok_appenders),
            "acknowledged": 1 + sum(a["acknowledged"] for a in ok_appenders),
            "failed": append_failures,
            "median_s": statistics.median(medians) if medians else None,
        },
        "compactions": {
            key: comp.get(key)
            for key in (
                "attempted",
                "committed",
                "nothing_to_merge",
                "files_removed_by_merging",
                "aborted",
                "failed",
                "median_committed_s",
            )
        },
        "readers": {
            "opens": sum(r["opens"] for r in ok_readers),
            "open_failures": merge_counts([r["open_failures"] for r in ok_readers]),
            "reads_ok": sum(r["reads_ok"] for r in ok_readers),
            "read_failures": merge_counts([r["read_failures"] for r in ok_readers]),
            "duplicated": sum(r["duplicated"] for r in ok_readers),
            "torn": sum(r["torn"] for r in ok_readers),
            "not_one_version": sum(r["not_one_version"] for r in ok_readers),
            "broken_at_s": broken_at,
            "reads_while_readable": len(before),
            "read_failures_while_readable": sum(o not in ("ok", "not one version") for o in before),
            "not_one_version_samples": [
                s for r in ok_readers for s in r["not_one_version_samples"]
            ],
        },
        "final": final,
        "workers": {"terminated": terminated, "crashed": crashed},
        "per_worker": {role: found for role, found in results.items()},
    }


def total(entry: dict[str, Any] | None) -> int:
    """Exceptions counted in a :meth:`Tally.to_dict` (0 for a worker that reported none)."""
    return sum(entry["by_class"].values()) if entry else 0


#: The per-run numbers summarized over runs, and how to get each from a run.
METRICS: dict[str, Any] = {
    "appends_attempted": lambda r: r["appends"]["attempted"],
    "acknowledged": lambda r: r["appends"]["acknowledged"],
    "appends_failed": lambda r: total(r["appends"]["failed"]),
    "compactions_attempted": lambda r: r["compactions"]["attempted"],
    "compactions_committed": lambda r: r["compactions"]["committed"],
    "compactions_aborted": lambda r: total(r["compactions"]["aborted"]),
    "compactions_failed": lambda r: total(r["compactions"]["failed"]),
    "compactions_not_committed": lambda r: sum(
        total(r["compactions"][k]) for k in ("aborted", "failed")
    ),
    "opens": lambda r: r["readers"]["opens"],
    "reads_ok": lambda r: r["readers"]["reads_ok"],
    "read_failures": lambda r: (
        sum(r["readers"]["read_failures"]["by_class"].values())
        + sum(r["readers"]["open_failures"]["by_class"].values())
    ),
    "not_one_version": lambda r: r["readers"]["not_one_version"],
    "reads_while_readable": lambda r: r["readers"].get("reads_while_readable"),
    "read_failures_while_readable": lambda r: r["readers"].get("read_failures_while_readable"),
    "unreadable": lambda r: int(r["final"]["unreadable"]),
    "lost": lambda r: r["final"].get("lost"),
    # Unreadable datasets: what the listed files that remain miss (readable ones: lost).
    "lost_from_files_left": lambda r: r["final"].get(
        "lost_from_files_left", r["final"].get("lost")
    ),
    "duplicated_ids": lambda r: r["final"].get("duplicated_ids"),
    "lost_after_vacuum": lambda r: r["final"].get("lost_after_vacuum"),
    "unreadable_after_vacuum": lambda r: int(r["final"]["unreadable_after_vacuum"]),
    "validate_ok": lambda r: (
        None if r["final"]["validate"]["ok"] is None else int(r["final"]["validate"]["ok"])
    ),
    "validate_ok_after_vacuum": lambda r: (
        None
        if r["final"]["validate_after_vacuum"]["ok"] is None
        else int(r["final"]["validate_after_vacuum"]["ok"])
    ),
}


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {"runs": len(runs)}
    for name, get in METRICS.items():
        values = [v for v in map(get, runs) if v is not None]
        out[name] = (
            {
                "median": statistics.median(values),
                "min": min(values),
                "max": max(values),
                "values": values,
            }
            if values
            else None
        )
    return out


# ---------------------------------------------------------------------- S3 (moto)


def s3_options(endpoint: str, **extra: Any) -> dict[str, Any]:
    """s3fs options for moto behind ``endpoint``, with timeouts so that nothing waits forever."""
    return {
        "endpoint_url": endpoint,
        "key": "bench",
        "secret": "bench",
        "client_kwargs": {"region_name": "eu-west-1"},
        "use_listings_cache": False,
        "config_kwargs": {"connect_timeout": 10, "read_timeout": 60},
        **extra,
    }


@contextlib.contextmanager
def moto() -> Iterator[tuple[str, str]]:
    """moto's S3 server on 127.0.0.1 and a fresh bucket: ``(endpoint, bucket)``."""
    import fsspec

    from benchmarks.bench_reads import moto_server

    with moto_server() as (endpoint, _):
        bucket = f"bench-commits-{uuid.uuid4().hex[:8]}"
        fsspec.filesystem("s3", **s3_options(endpoint, skip_instance_cache=True)).mkdir(bucket)
        yield endpoint, bucket


# ---------------------------------------------------------------------- requests


def list_prefix(method: str, path: str, query: str) -> str | None:
    """The prefix a request lists (``""`` for a whole bucket), or None for any other request."""
    if method != "GET" or path.strip("/").partition("/")[2]:
        return None  # an object's request, not the bucket's
    params = urllib.parse.parse_qs(query, keep_blank_values=True)
    if "location" in params or "versioning" in params:
        return None
    return params.get("prefix", [""])[0]


def is_commit_request(method: str, path: str, query: str, directory: str) -> bool:
    """A request of the commit: the manifest (any version of it), or a listing of the dataset
    directory (``directory``, its key prefix) or of manifests. A listing under a data file's
    own name (how s3fs checks that a name is not a directory) belongs to the file's write."""
    if MANIFEST_STEM in path:
        return True
    prefix = list_prefix(method, path, query)
    if prefix is None:
        return False
    return prefix.rstrip("/") == directory.rstrip("/") or MANIFEST_STEM in prefix


def timing(seconds: list[float]) -> dict[str, float]:
    return {
        "median_s": statistics.median(seconds),
        "min_s": min(seconds),
        "max_s": max(seconds),
    }


def counted(
    log: list[tuple[str, str, str, str | None]], queries: list[str], directory: str
) -> dict[str, Any]:
    """Requests by method; those of the commit; listings; each request as a line."""
    requests = [
        (method, path, query) for (_, method, path, _), query in zip(log, queries, strict=True)
    ]
    by_method = collections.Counter(method for method, _, _ in requests)
    commit = collections.Counter(
        method
        for method, path, query in requests
        if is_commit_request(method, path, query, directory)
    )
    listings = sum(1 for r in requests if list_prefix(*r) is not None)
    return {
        "total": len(requests),
        "by_method": dict(by_method),
        "commit": sum(commit.values()),
        "commit_by_method": dict(commit),
        "listings": listings,
        "requests": [f"{m} {p}{'?' + q if q else ''}" for m, p, q in requests],
    }


def spread(values: list[int]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def requests_scenario(endpoint: str, bucket: str, args: argparse.Namespace) -> dict[str, Any]:
    """Requests and time of a cold one-subpartition read and of one append, counted at a proxy."""
    import fsspec

    from tests.fault_proxy import FaultProxy

    rng = np.random.default_rng(args.seed)
    url = f"s3://{bucket}/requests"
    with FaultProxy(endpoint, rate=0.0) as proxy:
        warm = s3_options(proxy.url)
        for f in range(4):
            ids = np.arange(f * args.request_rows, (f + 1) * args.request_rows, dtype=np.int64)
            table = pa.table(
                {"id": ids, "k": rng.integers(0, 10**6, ids.size), "v": rng.random(ids.size)}
            )
            arrowshuffle.write_dataset(
                table,
                url,
                num_subpartitions=64,
                by="k",
                mode="overwrite" if f == 0 else "append",
                storage_options=warm,
            )
        fs = fsspec.filesystem("s3", **warm)
        probe = f"{bucket}/plain/probe"
        fs.pipe_file(probe, b"x" * 1024)
        directory = url.removeprefix("s3://").partition("/")[2]

        def timed(fn: Any, options: dict[str, Any]) -> tuple[float, dict[str, Any], Any]:
            """Run ``fn(options)``: seconds, the requests it made (counted), its value."""
            mark = len(proxy.log)
            start = time.perf_counter()
            value = fn(options)
            seconds = time.perf_counter() - start
            log, queries = proxy.log[mark:], proxy.queries[mark:]
            return seconds, counted(log, queries, directory), value

        def cold() -> dict[str, Any]:
            return s3_options(proxy.url, skip_instance_cache=True)

        reads = [
            timed(lambda o: arrowshuffle.open_dataset(url, o).read(5).num_rows, cold())
            for _ in range(args.read_repeats)
        ]
        single = [
            timed(lambda o: len(fsspec.filesystem("s3", **o).cat_file(probe)), cold())
            for _ in range(args.read_repeats)
        ]
        files = arrowshuffle.open_dataset(url, warm).num_files

        appends, plain = [], []
        for r in range(args.append_repeats):
            ids = 10**9 + r * 1000 + np.arange(1000, dtype=np.int64)
            small = pa.table({"id": ids, "k": rng.integers(0, 10**6, 1000), "v": rng.random(1000)})
            appends.append(
                timed(
                    lambda o, t=small: arrowshuffle.write_dataset(
                        t, url, num_subpartitions=64, by="k", mode="append", storage_options=o
                    ),
                    warm,
                )
            )
            sink = pa.BufferOutputStream()
            with pa.ipc.new_file(sink, small.schema) as writer:
                writer.write_table(small)
            payload = sink.getvalue().to_pybytes()
            plain.append(
                timed(lambda o, r=r, p=payload: fs.pipe_file(f"{bucket}/plain/{r}", p), warm)
            )

    read_counts = [c for _, c, _ in reads]
    append_counts = [c for _, c, _ in appends]
    return {
        "files": 4,
        "rows_per_file": args.request_rows,
        "subpartitions": 64,
        "objects": 2 * files,
        "read": {
            "what": "cold open_dataset(url).read(5), a fresh s3fs instance each time",
            "rows": reads[0][2],
            "repeats": len(reads),
            **timing([s for s, _, _ in reads]),
            "requests": spread([c["total"] for c in read_counts]),
            "by_method": read_counts[0]["by_method"],
            "listings": read_counts[0]["listings"],
            "log": read_counts[0]["requests"],
        },
        "single_get": {
            "what": "cold cat_file of a 1 KiB object (a fresh s3fs instance each time)",
            **timing([s for s, _, _ in single]),
            "requests": spread([c["total"] for _, c, _ in single]),
        },
        "append": {
            "what": "write_dataset(1,000 rows, mode='append'), one s3fs instance for all",
            "repeats": len(appends),
            **timing([s for s, _, _ in appends]),
            "requests": spread([c["total"] for c in append_counts]),
            "commit_requests": spread([c["commit"] for c in append_counts]),
            "by_method": append_counts[0]["by_method"],
            "commit_by_method": append_counts[0]["commit_by_method"],
            "listings": append_counts[0]["listings"],
            "log": append_counts[0]["requests"],
        },
        "plain_put": {
            "what": "pipe_file of the same rows as one Arrow IPC file (same s3fs instance)",
            **timing([s for s, _, _ in plain]),
            "requests": spread([c["total"] for _, c, _ in plain]),
        },
    }


# ---------------------------------------------------------------------- reporting


def classes(entry: dict[str, Any] | None) -> str:
    if not entry or not entry["by_class"]:
        return "0"
    return ", ".join(f"{n} {name}" for name, n in sorted(entry["by_class"].items()))


def print_run(run: dict[str, Any]) -> None:
    a, c, r, f = run["appends"], run["compactions"], run["readers"], run["final"]
    print(
        f"  {run['seconds']:.0f} s: appends acknowledged {a['acknowledged']} of {a['attempted']}"
        f" (failed: {classes(a['failed'])}); compactions committed {c['committed']},"
        f" nothing to merge {c['nothing_to_merge']}, aborted {classes(c['aborted'])},"
        f" failed {classes(c['failed'])} of {c['attempted']}"
    )
    print(
        f"  readers: {r['opens']} opens, {r['reads_ok']} reads ok, failures"
        f" {classes(r['read_failures'])} (open: {classes(r['open_failures'])}),"
        f" not one version {r['not_one_version']}"
    )
    if r["broken_at_s"] is not None:
        print(
            f"  the dataset lists a deleted file from about {r['broken_at_s']:.0f} s (a compaction"
            f" found it gone); before that {r['read_failures_while_readable']} of"
            f" {r['reads_while_readable']} reads failed"
        )
    if f["unreadable"]:
        print(f"  final: UNREADABLE ({f['error']})")
        if "lost_from_files_left" in f:
            print(
                f"  {f['files_unreadable']} of its {f['files']} listed files are gone; the files"
                f" left miss {f['lost_from_files_left']} of {f['acknowledged']} acknowledged"
                " appends"
            )
    else:
        print(
            f"  final: {f['files']} files, {f['rows']:,} rows; acknowledged appends lost"
            f" {f['lost']} of {f['acknowledged']}, ids read twice {f['duplicated_ids']},"
            f" unacknowledged appends visible {f['unacknowledged_visible']}"
        )
    after = (
        f"UNREADABLE ({f['error_after_vacuum']})"
        if f["unreadable_after_vacuum"]
        else f"lost {f['lost_after_vacuum']}"
    )
    print(
        f"  vacuum(older_than=0): removed {f['vacuum_removed']}"
        f"{' (' + f['vacuum_error'] + ')' if f['vacuum_error'] else ''}; after it {after};"
        f" {f['validate']['function']} ok: {f['validate']['ok']}"
        f" (after vacuum: {f['validate_after_vacuum']['ok']})"
    )
    w = run["workers"]
    if w["terminated"] or w["crashed"]:
        print(f"  workers terminated: {w['terminated']}; crashed: {list(w['crashed'])}")


def print_requests(req: dict[str, Any]) -> None:
    read, append = req["read"], req["append"]
    print(
        f"\nrequests, S3 (moto, counted at a proxy), {req['files']} files x"
        f" {req['subpartitions']} subpartitions of {req['rows_per_file']:,} rows:"
    )
    print(
        f"  cold open_dataset(url).read(5): {read['requests']['median']:g} requests"
        f" {read['by_method']}, median {read['median_s'] * 1e3:.0f} ms over {read['repeats']}"
        + f" (one cold GET {req['single_get']['median_s'] * 1e3:.0f} ms)"
    )
    print(
        f"  append of 1,000 rows: {append['requests']['median']:g} requests"
        f" {append['by_method']}, of which commit {append['commit_requests']['median']:g}"
        f" {append['commit_by_method']}; median {append['median_s'] * 1e3:.0f} ms over"
        f" {append['repeats']} (plain PUT of the rows {req['plain_put']['median_s'] * 1e3:.0f} ms)"
    )


# ---------------------------------------------------------------------- entry point


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=30.0, help="length of one race")
    parser.add_argument("--runs", type=int, default=1, help="races per backend")
    parser.add_argument("--backends", default="local,s3", help="local, s3 or both")
    add_skip_s3(parser, "drop s3 from --backends")
    parser.add_argument("--scenarios", default="race,requests", help="race, requests or both")
    parser.add_argument("--appenders", type=int, default=3)
    parser.add_argument("--readers", type=int, default=2)
    parser.add_argument(
        "--append-pause", type=float, default=0.0, help="an appender waits 0..this s between"
    )
    parser.add_argument(
        "--compact-pause", type=float, default=0.2, help="the compactor waits 0..this s between"
    )
    parser.add_argument(
        "--reader-pause", type=float, default=1.5, help="a reader waits 0..this s after opening"
    )
    parser.add_argument("--target-file-size", default="64MiB")
    parser.add_argument(
        "--s3-write-delay",
        default="0,0.8",
        help="lo,hi: seconds the proxy holds back each S3 write in the race",
    )
    parser.add_argument(
        "--stop-timeout", type=float, default=180.0, help="seconds workers get to finish"
    )
    parser.add_argument("--request-rows", type=int, default=100_000, help="rows per file")
    parser.add_argument("--read-repeats", type=int, default=15)
    parser.add_argument("--append-repeats", type=int, default=10)
    parser.add_argument(
        "--repeats",
        type=int,
        default=None,
        help="R: 3R cold reads and 2R appends (the defaults are R = 5)",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=None, help="write the results as JSON here")
    args = parser.parse_args(argv)
    args.backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    if args.skip_s3:
        args.backends = [b for b in args.backends if b != "s3"]
    args.scenarios = [s.strip() for s in args.scenarios.split(",") if s.strip()]
    if not set(args.backends) <= set(BACKENDS) or not args.backends:
        parser.error(f"--backends: expected names from {', '.join(BACKENDS)}")
    if not set(args.scenarios) <= set(SCENARIOS) or not args.scenarios:
        parser.error(f"--scenarios: expected names from {', '.join(SCENARIOS)}")
    if args.repeats is not None:
        args.read_repeats, args.append_repeats = 3 * args.repeats, 2 * args.repeats
    lo, hi = (float(x) for x in args.s3_write_delay.split(","))
    args.s3_write_delay = (lo, hi)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    report: dict[str, Any] = {
        "config": {
            "seconds": args.seconds,
            "runs": args.runs,
            "appenders": args.appenders,
            "readers": args.readers,
            "compactors": 1,
            "subpartitions": NUM_SUBPARTITIONS,
            "rows_per_append": [ROWS_LO, ROWS_HI],
            "append_pause": args.append_pause,
            "compact_pause": args.compact_pause,
            "reader_pause": args.reader_pause,
            "target_file_size": args.target_file_size,
            "s3_write_delay": list(args.s3_write_delay),
            "cores": os.cpu_count(),
            "argv": sys.argv[1:] if argv is None else argv,
        },
        "race": {},
    }
    need_s3 = "s3" in args.backends and ("race" in args.scenarios or "requests" in args.scenarios)
    with contextlib.ExitStack() as stack:
        endpoint = bucket = None
        if need_s3:
            endpoint, bucket = stack.enter_context(moto())
        if "race" in args.scenarios:
            for backend in args.backends:
                runs = []
                for run in range(args.runs):
                    print(
                        f"race, {backend}, run {run + 1}/{args.runs}: {args.appenders} appenders,"
                        f" 1 compactor, {args.readers} readers, {args.seconds:g} s",
                        flush=True,
                    )
                    runs.append(race_on(backend, run, args, endpoint, bucket))
                    print_run(runs[-1])
                report["race"][backend] = {"runs": runs, "summary": summarize(runs)}
        if "requests" in args.scenarios and endpoint is not None and bucket is not None:
            report["requests"] = requests_scenario(endpoint, bucket, args)
            print_requests(report["requests"])
    from benchmarks.report import figures, text_table

    found = figures("commits", report)
    report["figures"] = [f.to_dict() for f in found]
    if found:
        print()
        print(text_table(found))
    if args.out:
        write_results(args.out, report)
        print(f"\nwrote {args.out}")
    return 0


def race_on(
    backend: str,
    run: int,
    args: argparse.Namespace,
    endpoint: str | None,
    bucket: str | None,
) -> dict[str, Any]:
    if backend == "local":
        with tempfile.TemporaryDirectory(prefix="arrowshuffle-bench-commits-") as tmp:
            path = str(Path(tmp) / "dataset")
            return race(backend, path, None, None, args, run)
    from tests.fault_proxy import FaultProxy

    assert endpoint is not None and bucket is not None
    path = f"s3://{bucket}/race-{run}"
    with FaultProxy(
        endpoint,
        rate=0.0,
        write_delay=args.s3_write_delay,
        serialize_conditional=True,
        seed=args.seed + run,
    ) as proxy:
        result = race(backend, path, s3_options(proxy.url), s3_options(endpoint), args, run)
        result["proxy"] = {"delayed_writes": proxy.delayed_writes, "requests": len(proxy.log)}
    return result


if __name__ == "__main__":
    raise SystemExit(main())
