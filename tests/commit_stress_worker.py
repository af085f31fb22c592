"""One process of the commit stress test (test_commit_stress.py): run one role until told to stop.

    python commit_stress_worker.py <role> <config json>

Roles: ``append`` (appends tagged tables), ``overwrite`` (now and then replaces the dataset with
a known table), ``compact``, ``vacuum`` (with a grace period no run outlives) and ``read``
(opens the dataset, waits, reads, and reports the version and the rows it got). Every role
appends one JSON line per event to its log, flushed at once: ``begin`` before an operation and
``done`` (with the version it committed) once it returned, so an operation is acknowledged
exactly when its ``done`` line exists. The commit's steps are slowed down by random pauses,
so that commits of different processes overlap.
"""

from __future__ import annotations

import json
import os
import random
import sys
import time
import traceback
from collections import defaultdict
from typing import Any

import arrowshuffle as ash
from arrowshuffle.writers import commit

#: The longest pause injected before each step of a commit, in seconds.
MAX_PAUSE = 0.05


def slow_down(rng: random.Random) -> None:
    """Pause a random 0 to 50 ms before the commit module lists, reads and creates versions."""
    for name in ("list_versions", "read_current", "create_exclusive"):
        real = getattr(commit, name)

        def paused(*args: Any, _real: Any = real, **kwargs: Any) -> Any:
            time.sleep(rng.uniform(0, MAX_PAUSE))
            return _real(*args, **kwargs)

        setattr(commit, name, paused)


def main() -> None:
    role, config = sys.argv[1], json.loads(sys.argv[2])
    url, options = config["url"], config["options"]
    rng = random.Random(config["seed"])
    slow_down(rng)
    log = open(config["log"], "a", buffering=1)  # noqa: SIM115 (open for the whole run)

    def record(**event: Any) -> None:
        log.write(json.dumps(event) + "\n")
        log.flush()

    def stopped() -> bool:
        return os.path.exists(config["stop"])

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from commit_checks import N, table_of

    # Warm up (imports, the storage client) before the run starts counting.
    ash.open_dataset(url, options).read()
    table_of("warm-up", 4)
    print("ready", flush=True)
    i = 0
    while not stopped():
        try:
            if role == "append":
                tag, rows = f"{config['name']}-{i}", rng.randint(1, 12)
                record(event="begin", op="append", tag=tag, rows=rows)
                manifest = ash.write_dataset(
                    table_of(tag, rows),
                    url,
                    num_subpartitions=N,
                    by="k",
                    mode="append",
                    storage_options=options,
                )
                record(event="done", op="append", tag=tag, rows=rows, version=manifest.version)
            elif role == "overwrite":
                time.sleep(rng.uniform(0.2, 0.8))
                tag, rows = f"{config['name']}-{i}", rng.randint(1, 12)
                record(event="begin", op="overwrite", tag=tag, rows=rows)
                try:
                    manifest = ash.write_dataset(
                        table_of(tag, rows),
                        url,
                        num_subpartitions=N,
                        by="k",
                        mode="overwrite",
                        storage_options=options,
                    )
                except ash.CommitConflictError as exc:
                    record(
                        event="conflict",
                        op="overwrite",
                        tag=tag,
                        expected=exc.expected,
                        found=exc.found,
                    )
                else:
                    record(
                        event="done", op="overwrite", tag=tag, rows=rows, version=manifest.version
                    )
            elif role == "compact":
                time.sleep(rng.uniform(0.05, 0.3))
                try:
                    report = ash.compact(url, target_file_size="4KiB", storage_options=options)
                except ash.CommitConflictError as exc:
                    record(event="conflict", op="compact", expected=exc.expected, found=exc.found)
                else:
                    record(event="done", op="compact", written=len(report.written))
            elif role == "vacuum":
                time.sleep(rng.uniform(0.1, 0.4))
                report = ash.vacuum(url, older_than=config["grace"], storage_options=options)
                record(event="done", op="vacuum", removed=list(report.removed))
            elif role == "read":
                dataset = ash.open_dataset(url, options)
                time.sleep(rng.uniform(0, 0.3))
                table = dataset.read()
                rows: dict[str, list[int]] = defaultdict(list)
                for tag, row in zip(
                    table["tag"].to_pylist(), table["row"].to_pylist(), strict=True
                ):
                    rows[tag].append(row)
                record(
                    event="read",
                    version=dataset.version,
                    tags={tag: len(numbers) for tag, numbers in rows.items()},
                    # every tag's rows once each: 0 .. n-1
                    exact=all(sorted(n) == list(range(len(n))) for n in rows.values()),
                )
            else:
                raise SystemExit(f"unknown role {role}")
        except Exception as exc:
            record(event="error", role=role, error=repr(exc), trace=traceback.format_exc())
            raise
        i += 1
    log.close()


if __name__ == "__main__":
    main()
