"""Many processes commit to one dataset at once; one appender is killed with SIGKILL.

Three appenders, a compactor, an overwriter, a vacuum loop (with a grace period no run
outlives) and two readers run as separate processes for a few seconds, on a local directory and
on the S3 endpoint, with random pauses inside every commit (see commit_stress_worker.py). Each
logs what it began and what was acknowledged, with the version each commit produced.

The model: the rows of version ``v`` are the rows of the last acknowledged overwrite at a
version ``<= v`` plus those of every acknowledged append committed after it, up to ``v``
(compactions never change rows). The append in flight when its process was killed may or may
not have landed: its rows are in a version completely or not at all. Afterwards:

* every retained version lists files that exist and reads as the model says, and so did every
  read of the reader processes at the version they opened;
* acknowledged appends after the last overwrite are in the dataset, each exactly once;
* commits produced distinct versions, and nothing but the killed job's files is unlisted;
* the dataset validates deep, and ``vacuum(older_than=0)`` leaves exactly the files the version
  in force lists, which read the same.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from commit_checks import LONG, Row, Target, diff, rows_of

import arrowshuffle as ash

WORKER = Path(__file__).with_name("commit_stress_worker.py")
ROLES = [
    ("append", "a0"),
    ("append", "a1"),
    ("append", "a2"),
    ("compact", "c"),
    ("overwrite", "o"),
    ("vacuum", "v"),
    ("read", "r0"),
    ("read", "r1"),
]
KILLED = "a0"
#: The run lasts at least this many seconds once every worker is ready ...
MIN_SECONDS = 4.0
#: ... and until the appenders were acknowledged this many appends, or this many seconds passed.
MIN_APPENDS = 20
MAX_SECONDS = 12.0
#: Versions read back in full besides the last one and those the readers saw.
SAMPLED_VERSIONS = 12


@dataclass
class Logs:
    """What the workers logged, by kind."""

    appends: dict[str, tuple[int, int]] = field(default_factory=dict)  # tag -> (rows, version)
    overwrites: dict[int, tuple[str, int]] = field(default_factory=dict)  # version -> (tag, rows)
    begun: dict[str, int] = field(default_factory=dict)  # tag -> rows
    reads: list[dict[str, Any]] = field(default_factory=list)
    conflicts: list[dict[str, Any]] = field(default_factory=list)
    compactions: int = 0
    errors: list[str] = field(default_factory=list)


def read_logs(directory: Path) -> Logs:
    logs = Logs()
    for path in sorted(directory.glob("*.log")):
        for line in path.read_text().splitlines():
            try:
                event = json.loads(line)
            except ValueError:
                continue  # a line cut short by the kill
            kind, op = event["event"], event.get("op")
            if kind == "begin":
                logs.begun[event["tag"]] = event["rows"]
            elif kind == "done" and op == "append":
                assert event["tag"] not in logs.appends
                logs.appends[event["tag"]] = (event["rows"], event["version"])
            elif kind == "done" and op == "overwrite":
                assert event["version"] not in logs.overwrites, event
                logs.overwrites[event["version"]] = (event["tag"], event["rows"])
            elif kind == "done" and op == "compact":
                logs.compactions += 1
            elif kind == "read":
                logs.reads.append(event)
            elif kind == "conflict":
                logs.conflicts.append(event)
            elif kind == "error":
                logs.errors.append(f"{path.name}: {event['trace']}")
    return logs


class Model:
    """The rows each version must hold, from the acknowledged appends and overwrites."""

    def __init__(self, logs: Logs, initial: tuple[int, str, int], killed: str | None) -> None:
        self.logs = logs
        self.overwrites = dict(logs.overwrites)
        self.overwrites[initial[0]] = (initial[1], initial[2])
        self.killed = killed  # the tag of the append in flight when its process was killed
        self.killed_rows = [] if killed is None else rows_of(killed, logs.begun[killed])
        versions = [v for _, v in logs.appends.values()] + list(self.overwrites)
        assert len(versions) == len(set(versions)), "two acknowledged commits share a version"

    def rows(self, version: int) -> list[Row]:
        base = max(v for v in self.overwrites if v <= version)
        tag, count = self.overwrites[base]
        rows = rows_of(tag, count)
        for append, (count, v) in self.logs.appends.items():
            if base < v <= version:
                rows += rows_of(append, count)
        return sorted(rows)

    def check(self, what: str, version: int, got: list[Row]) -> bool:
        """``got`` is version ``version``'s rows, with or without the killed append's."""
        expected = self.rows(version)
        if got == expected:
            return False
        with_killed = sorted(expected + self.killed_rows)
        assert self.killed_rows and got == with_killed, diff(f"{what} {version}", got, expected)
        return True


def start(role: str, name: str, target: Target, logs: Path, seed: int) -> subprocess.Popen:
    config = {
        "url": target.url,
        "options": target.options,
        "seed": seed,
        "log": str(logs / f"{name}.log"),
        "stop": str(logs / "stop"),
        "name": name,
        "grace": LONG,
    }
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(AWS_CONFIG_FILE=os.devnull, AWS_SHARED_CREDENTIALS_FILE=os.devnull)
    env["AWS_EC2_METADATA_DISABLED"] = "true"
    env["ARROWSHUFFLE_JIT"] = "0"  # numpy hash kernels: no compiler start-up in each process
    with open(logs / f"{name}.err", "wb") as err:  # a file: a full pipe would block the worker
        return subprocess.Popen(
            [sys.executable, str(WORKER), role, json.dumps(config)],
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            env=env,
        )


def stderr(logs: Path, name: str) -> str:
    return (logs / f"{name}.err").read_text(errors="replace")[-4000:]


def acknowledged(log: Path) -> int:
    """Operations a worker's log acknowledges so far."""
    try:
        return log.read_text().count('"event": "done"')
    except FileNotFoundError:
        return 0


def run_stress(target: Target, logs_dir: Path, seed: int) -> None:
    rng = random.Random(seed)
    logs_dir.mkdir()
    initial = target.write("init", 6, "overwrite")
    procs = {
        name: start(role, name, target, logs_dir, seed + i) for i, (role, name) in enumerate(ROLES)
    }
    try:
        for name, proc in procs.items():
            assert proc.stdout is not None
            assert proc.stdout.readline().strip() == "ready", f"{name}: {stderr(logs_dir, name)}"
        started = time.monotonic()
        # Kill the appender after 1 to 3 acknowledged appends, a random moment into the next.
        kill_after = rng.randint(1, 3)
        while acknowledged(logs_dir / f"{KILLED}.log") < kill_after:
            assert time.monotonic() - started < MAX_SECONDS, "the appender never committed"
            time.sleep(0.01)
        time.sleep(rng.uniform(0, 0.3))
        procs[KILLED].send_signal(signal.SIGKILL)
        while time.monotonic() - started < MAX_SECONDS and (
            time.monotonic() - started < MIN_SECONDS
            or sum(acknowledged(logs_dir / f"{name}.log") for name in ("a1", "a2")) < MIN_APPENDS
        ):
            time.sleep(0.05)
    finally:
        (logs_dir / "stop").touch()
        for proc in procs.values():
            proc.communicate(timeout=60)
    for name, proc in procs.items():
        expected = -signal.SIGKILL if name == KILLED else 0
        assert proc.returncode == expected, (
            f"{name} ended with {proc.returncode}: {stderr(logs_dir, name)}"
        )

    logs = read_logs(logs_dir)
    assert not logs.errors, "\n".join(logs.errors)
    killed_tags = [t for t in logs.begun if t.startswith(KILLED + "-") and t not in logs.appends]
    assert len(killed_tags) <= 1, killed_tags
    model = Model(logs, (initial.version, "init", 6), killed_tags[0] if killed_tags else None)
    # Enough happened for the run to mean something.
    assert len(logs.appends) >= 6 and logs.reads and logs.compactions, (
        len(logs.appends),
        len(logs.reads),
        logs.compactions,
    )
    for conflict in logs.conflicts:
        assert conflict["found"] is not None and conflict["found"] > conflict["expected"]

    # Readers read exactly their version's rows.
    for read in logs.reads:
        assert read["exact"], read
        got = sorted(r for tag, n in read["tags"].items() for r in rows_of(tag, n))
        model.check("a reader of version", read["version"], got)

    # Every version is retained (the vacuum loop's grace period outlives the run) and lists
    # files that exist; a sample of them, and the last, read as the model says.
    versions = target.versions()
    assert versions == list(range(1, versions[-1] + 1)), versions
    present = target.part_names()
    listed: set[str] = set()
    for version in versions:
        names = target.listed(version)
        assert names <= present, f"version {version} lists removed files {names - present}"
        listed |= names
    current = versions[-1]
    sample = {current, *rng.sample(versions, min(SAMPLED_VERSIONS, len(versions)))}
    sample |= {read["version"] for read in logs.reads[:SAMPLED_VERSIONS]}
    holds_killed = {v: model.check("version", v, target.read(v)) for v in sorted(sample)}
    # Once the killed append is in a version, it stays in every later one until an overwrite.
    for early in holds_killed:
        for late in holds_killed:
            if early < late and holds_killed[early]:
                replaced = any(early < v <= late for v in model.overwrites)
                assert holds_killed[late] or replaced, (early, late)
    # Only the killed append may have left files no version lists (its data file and index).
    unlisted = present - listed
    assert len(unlisted) <= 2 and (not unlisted or model.killed), unlisted

    # The version in force: the last overwrite and every acknowledged append after it, once.
    final = target.read()
    model.check("the version in force", current, final)
    last_overwrite = max(model.overwrites)
    counts = Counter(tag for tag, _ in final)
    for tag, (rows, version) in logs.appends.items():
        assert counts[tag] == (rows if version > last_overwrite else 0), (tag, version)
    report = ash.validate_dataset(target.url, deep=True, storage_options=target.options)
    assert report.ok, report

    vacuumed = ash.vacuum(target.url, older_than=0, storage_options=target.options)
    assert vacuumed.ok and vacuumed.retained_versions == (current,), vacuumed
    assert target.part_names() == target.listed(current)
    assert not target.temporaries()
    assert target.read() == final


def test_concurrent_processes_on_a_local_directory(tmp_path: Path) -> None:
    seed = random.randrange(2**32)
    try:
        run_stress(Target(str(tmp_path / "ds")), tmp_path / "logs", seed)
    except AssertionError as exc:
        raise AssertionError(f"seed {seed}: {exc}") from exc


@pytest.mark.s3
def test_concurrent_processes_on_s3(tmp_path: Path, s3_endpoint, s3_bucket) -> None:
    seed = random.randrange(2**32)
    s3_endpoint.log.delay_puts(0.0, 0.02)
    try:
        target = Target(f"{s3_bucket}/ds", s3_endpoint.storage_options())
        run_stress(target, tmp_path / "logs", seed)
    except AssertionError as exc:
        raise AssertionError(f"seed {seed}: {exc}") from exc
    finally:
        s3_endpoint.log.clear()
