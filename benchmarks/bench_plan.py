"""Balanced read plans: task sizes on skewed keys, and the time to plan a large dataset.

Run from the repository root::

    python -m benchmarks.bench_plan                          # 2M rows, 8 files x 64 subpartitions
    python -m benchmarks.bench_plan --rows 400000 --repeats 3 --out /tmp/plan.json

Two parts:

* **Task balance.** The same generated rows twice, hash-partitioned by ``key`` with
  ``arrowshuffle.write_dataset(..., by="key")`` into ``--files`` files (one per producer) of
  ``--subpartitions`` subpartitions: once with a third of the rows on one key (the main job's
  hot key), once with Zipf(1.1) keys. For each, the slowest task's bytes over the mean task's
  bytes (max/mean), without a plan (one task per subpartition) and with
  ``plan(target_bytes=total/16, skew_min_bytes=total/256)``: the target gives about 16 tasks
  whatever the data size, and a threshold far below the target lets any subpartition above
  5x the median (Spark's default factor) be split. Goal: max/mean at most 1.5 with the plan.
* **Planning time.** A synthetic manifest of ``--plan-files`` files x ``--plan-subpartitions``
  subpartitions (10,000 x 1,000 by default) with per-subpartition totals; the files do not
  exist. The median wall time of ``open_dataset(dir).plan()`` (reading and decoding the
  manifest included) over ``--repeats`` runs, next to ``json.loads`` of the same bytes. The
  totals vary within 2x, so with the default skew settings (5x the median and 256 MiB) no
  subpartition is split: a split reads the index slices of the files, which a synthetic
  manifest does not have; the script checks that no task was split. Also timed: opening
  alone, and planning alone on an opened dataset.
* **Opening cost against N.** One local file of 200,000 rows written with ``N`` = 16, 256 and
  4,096 subpartitions (index 1 KB to 270 KB): the median time of ``open_file(path).read(3)``,
  next to pyarrow's own ``ipc.open_file(path).get_batch(0)`` of the same data file (which
  reads the footer, whatever ``N`` is). An open costs what the read needs, so it stays flat.
* **Planned against plain reads.** ``--many-files`` files of one row each (1,000 by default)
  in 16 subpartitions: the median time of opening the dataset, ``plan("4KiB")`` and reading
  every task (16 tasks, each over every file), over that of opening and one plain ``read()``
  of the same dataset; the two alternate, so that a busy machine slows both. A planned read
  opens each file once, proves its index at most twice and passes over a file proven to hold
  nothing of a task, so the ratio stays near 1 (it was about 5 when every task re-planned every
  file).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

import arrowshuffle
from arrowshuffle.format.manifest import Manifest, ManifestFile, SubpartitionTotals
from arrowshuffle.format.naming import new_file_name
from arrowshuffle.readers.manifest_io import load_manifest
from arrowshuffle.readers.storage import resolve
from arrowshuffle.writers.commit import commit_version
from arrowshuffle.writers.dataset_writer import commit_dataset, prepare_directory
from benchmarks.output import write_results
from benchmarks.timing import timed

#: The key that holds a third of the rows in the hot-key data.
HOT_KEY = 42
GOAL = 1.5


def keys(kind: str, rows: int, rng: np.random.Generator) -> np.ndarray:
    """``hot``: uniform over a million keys, a third of the rows on one; ``zipf``: Zipf(1.1)."""
    if kind == "zipf":
        return rng.zipf(1.1, rows).astype(np.int64)
    values = rng.integers(0, 1_000_000, rows, dtype=np.int64)
    values[rng.random(rows) < 1 / 3] = HOT_KEY
    return values


def write_data(path: Path, kind: str, args: argparse.Namespace) -> arrowshuffle.ShuffleDataset:
    """``args.files`` producers, each writing its share of the rows as one file."""
    rng = np.random.default_rng(args.seed)
    per_file = args.rows // args.files
    for f in range(args.files):
        key = keys(kind, per_file, rng)
        table = pa.table(
            {
                "key": key,
                "value": rng.standard_normal(per_file),
                "payload": pa.array(rng.integers(0, 10**9, per_file)).cast(pa.string()),
            }
        )
        arrowshuffle.write_dataset(
            table,
            path,
            num_subpartitions=args.subpartitions,
            by="key",
            memory=args.memory,
            mode="overwrite" if f == 0 else "append",
        )
    return arrowshuffle.open_dataset(path)


def ratio(values: np.ndarray) -> float:
    return float(values.max() / values.mean())


def balance(kind: str, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    dataset = write_data(work / kind, kind, args)
    sizes, rows = dataset.subpartition_sizes()
    total = int(sizes.sum())
    target, skew_min = max(1, total // 16), max(1, total // 256)
    seconds, tasks = timed(lambda: dataset.plan(target, skew_min_bytes=skew_min), args.repeats)
    task_bytes = np.array([t.bytes for t in tasks], dtype=np.float64)
    task_rows = np.array([t.rows for t in tasks], dtype=np.float64)
    assert int(task_rows.sum()) == dataset.num_rows, "the plan must cover every row"
    split = sorted({t.subpartitions.start for t in tasks if len(t.files) < dataset.num_files})
    result = {
        "data": kind,
        "rows": dataset.num_rows,
        "files": dataset.num_files,
        "subpartitions": dataset.num_subpartitions,
        "total_bytes": total,
        "target_bytes": target,
        "skew_min_bytes": skew_min,
        "skew_factor": 5.0,
        "without_plan": {
            "tasks": int(sizes.size),
            "max_over_mean_bytes": ratio(sizes.astype(np.float64)),
            "max_over_mean_rows": ratio(rows.astype(np.float64)),
            "largest_share": float(sizes.max() / total),
        },
        "with_plan": {
            "tasks": len(tasks),
            "max_over_mean_bytes": ratio(task_bytes),
            "max_over_mean_rows": ratio(task_rows),
            "largest_share": float(task_bytes.max() / total),
            "split_subpartitions": split,
            "split_tasks": sum(1 for t in tasks if len(t.files) < dataset.num_files),
            "plan_median_s": statistics.median(seconds),
        },
    }
    before, after = result["without_plan"], result["with_plan"]
    print(
        f"{kind:<5} {total / 1e6:8.1f} MB  max/mean bytes: {before['max_over_mean_bytes']:.2f} "
        f"({before['tasks']} tasks, one per subpartition) -> {after['max_over_mean_bytes']:.2f} "
        f"({after['tasks']} tasks, subpartitions {split} split; target {target:,} B, "
        f"skew min {skew_min:,} B)"
    )
    return result


def synthetic_manifest(num_files: int, n: int, seed: int) -> Manifest:
    """``num_files`` entries and per-subpartition totals within 2x of each other."""
    rng = np.random.default_rng(seed)
    # About 50 MiB per subpartition: a 128 MiB target coalesces two or three of them.
    sub_bytes = rng.integers(35 << 20, 70 << 20, n, dtype=np.int64)
    sub_rows = sub_bytes // 100
    file_bytes = int(sub_bytes.sum()) // num_files
    job = uuid.uuid4().hex
    files = tuple(
        ManifestFile(
            data=(name := new_file_name(i, f"{i:08x}", job_id=job)),
            index=name + ".idx",
            data_size=file_bytes,
            index_size=64 + 24 * n,
            rows=file_bytes // 100,
            regions=1,
            index_crc32c=0,
        )
        for i in range(num_files)
    )
    return Manifest(
        schema=pa.schema([("key", pa.int64()), ("value", pa.float64())]),
        num_subpartitions=n,
        partitioner={"name": "hash", "keys": ["key"], "num_subpartitions": n},
        files=files,
        sizes=SubpartitionTotals(tuple(sub_bytes.tolist()), tuple(sub_rows.tolist())),
    )


def planning_time(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    path = work / "synthetic"
    path.mkdir()
    directory = resolve(str(path), None)
    manifest = synthetic_manifest(args.plan_files, args.plan_subpartitions, args.seed)
    # Committed as version 1, as a writer would: an open lists the versions and reads it.
    commit_version(directory, lambda _: manifest, operation="write")
    raw = load_manifest(directory).raw

    def warm(work: Any) -> tuple[list[float], Any]:
        return timed(work, args.repeats, warmup=1)  # warm up: imports, page cache

    plan_s, tasks = warm(lambda: arrowshuffle.open_dataset(path).plan())
    open_s, opened = warm(lambda: arrowshuffle.open_dataset(path))
    alone_s, _ = warm(lambda: opened.plan())
    parse_s, _ = warm(lambda: json.loads(raw))
    if any(len(t.files) != args.plan_files for t in tasks):
        raise SystemExit("a synthetic subpartition was split: its files do not exist")

    def stat(seconds: list[float]) -> dict[str, float]:
        return {
            "median_s": statistics.median(seconds),
            "min_s": min(seconds),
            "max_s": max(seconds),
        }

    result = {
        "files": args.plan_files,
        "subpartitions": args.plan_subpartitions,
        "manifest_bytes": len(raw),
        "tasks": len(tasks),
        "target_bytes": 128 << 20,
        "skew_note": "default skew settings; totals within 2x, so nothing is split",
        "open_and_plan": stat(plan_s),
        "open_only": stat(open_s),
        "plan_only": stat(alone_s),
        "json_loads": stat(parse_s),
    }
    print(
        f"plan {args.plan_files:,} files x {args.plan_subpartitions:,} subpartitions "
        f"({len(raw) / 1e6:.1f} MB manifest, {len(tasks)} tasks): open + plan "
        f"{result['open_and_plan']['median_s'] * 1e3:.0f} ms (open alone "
        f"{result['open_only']['median_s'] * 1e3:.0f} ms, plan alone "
        f"{result['plan_only']['median_s'] * 1e3:.1f} ms, json.loads "
        f"{result['json_loads']['median_s'] * 1e3:.0f} ms), median of {args.repeats}"
    )
    return result


def open_cost(args: argparse.Namespace, work: Path) -> list[dict[str, Any]]:
    rows = 200_000
    rng = np.random.default_rng(args.seed)
    table = pa.table({"k": np.arange(rows, dtype=np.int64), "v": rng.random(rows)})
    out = []
    for n in (16, 256, 4096):
        path = work / f"open-{n}.arrow"
        ids = np.arange(rows) % n
        with arrowshuffle.ShuffleFileWriter(path, table.schema, n, memory="2MiB") as writer:
            for batch in table.to_batches(max_chunksize=20_000):
                writer.write(batch, subpartitions=ids[: batch.num_rows])
                ids = ids[batch.num_rows :]

        def ours(path: Path = path) -> int:
            return int(arrowshuffle.open_file(path).read(3).num_rows)

        def peer(path: Path = path) -> int:
            with pa.memory_map(str(path)) as source:
                return int(pa.ipc.open_file(source).get_batch(0).num_rows)

        ours_s, peer_s = [], []
        ours(), peer()  # warm up
        for _ in range(max(args.repeats, 5) * 6):
            for fn, sink in ((ours, ours_s), (peer, peer_s)):
                start = time.perf_counter()
                fn()
                sink.append(time.perf_counter() - start)
        index_bytes = (work / f"open-{n}.arrow.idx").stat().st_size
        entry = {
            "subpartitions": n,
            "index_bytes": index_bytes,
            "ours": {
                "median_s": statistics.median(ours_s),
                "min_s": min(ours_s),
                "max_s": max(ours_s),
            },
            "peer": {
                "median_s": statistics.median(peer_s),
                "min_s": min(peer_s),
                "max_s": max(peer_s),
            },
        }
        print(
            f"open + read one subpartition, N={n} ({index_bytes:,} B index): "
            f"{entry['ours']['median_s'] * 1e3:.3f} ms; pyarrow ipc.open_file + get_batch(0) "
            f"{entry['peer']['median_s'] * 1e3:.3f} ms"
        )
        out.append(entry)
    return out


def planned_against_plain(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    n, files = 16, args.many_files
    directory = prepare_directory(str(work / "many"), None)
    schema = pa.schema([("key", pa.int64()), ("payload", pa.string())])
    written = []
    for f in range(files):
        batch = pa.record_batch([pa.array([f]), pa.array([f"row-{f}"])], schema=schema)
        with arrowshuffle.ShuffleFileWriter(
            directory.child(new_file_name(f)).url, schema, n
        ) as writer:
            writer.write(batch, subpartitions=np.array([f % n]))
        assert writer.written is not None
        written.append(writer.written)
    commit_dataset(
        directory, written, schema=schema, num_subpartitions=n, partitioner={"name": "explicit"}
    )

    def plain() -> int:
        return int(arrowshuffle.open_dataset(directory.url).read().num_rows)

    def planned() -> int:
        dataset = arrowshuffle.open_dataset(directory.url)
        return sum(dataset.read(task=t).num_rows for t in dataset.plan("4KiB"))

    tasks = len(arrowshuffle.open_dataset(directory.url).plan("4KiB"))
    if plain() != files or planned() != files:  # also the warm-up
        raise SystemExit("the planned read and the plain read disagree")
    plain_s, planned_s = [], []
    for _ in range(args.repeats):
        for fn, sink in ((plain, plain_s), (planned, planned_s)):
            start = time.perf_counter()
            fn()
            sink.append(time.perf_counter() - start)
    result = {
        "files": files,
        "subpartitions": n,
        "tasks": tasks,
        "plain_median_s": statistics.median(plain_s),
        "planned_median_s": statistics.median(planned_s),
        "planned_over_plain": statistics.median(planned_s) / statistics.median(plain_s),
    }
    print(
        f"{files:,} one-row files: open + plan + read {tasks} tasks "
        f"{result['planned_median_s'] * 1e3:.0f} ms, open + one plain read "
        f"{result['plain_median_s'] * 1e3:.0f} ms: planned/plain "
        f"{result['planned_over_plain']:.2f} (medians of {args.repeats})"
    )
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2_000_000, help="rows of each dataset")
    parser.add_argument("--files", type=int, default=8, help="files (producers) per dataset")
    parser.add_argument("--subpartitions", type=int, default=64)
    parser.add_argument("--memory", default="16MiB", help="each writer's sort buffer")
    parser.add_argument("--plan-files", type=int, default=10_000)
    parser.add_argument("--plan-subpartitions", type=int, default=1_000)
    parser.add_argument("--many-files", type=int, default=1_000, help="one-row files")
    parser.add_argument("--repeats", type=int, default=5, help="runs per timing")
    parser.add_argument(
        "--only-many-files", action="store_true", help="run the planned-against-plain part alone"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=None, help="write the results as JSON here")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="arrowshuffle-bench-plan-") as tmp:
        work = Path(tmp)
        if args.only_many_files:
            many = planned_against_plain(args, work)
            if args.out:
                write_results(args.out, {"many_files": many})
            return 0
        balances = [balance(kind, args, work) for kind in ("hot", "zipf")]
        report = {
            "config": {
                "rows": args.rows,
                "files": args.files,
                "subpartitions": args.subpartitions,
                "memory": args.memory,
                "repeats": args.repeats,
                "goal_max_over_mean": GOAL,
            },
            "balance": balances,
            "planning": planning_time(args, work),
            "open_cost": open_cost(args, work),
            "many_files": planned_against_plain(args, work),
        }
    missed = [b["data"] for b in balances if b["with_plan"]["max_over_mean_bytes"] > GOAL]
    if missed:
        print(f"above the {GOAL}x goal with the plan: {', '.join(missed)}")
    if args.out:
        write_results(args.out, report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
