"""``arrowshuffle plan``: balanced read tasks and their skew, as text and JSON, with exit codes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from dataset_factory import WrittenDataset, write_dataset
from manifest_edits import replace_manifest

import arrowshuffle
from arrowshuffle.cli import main
from arrowshuffle.format.notation import format_size
from arrowshuffle.readers.balance import PlannedRead

#: 16 subpartitions; about 70% of all rows in subpartition 0, the rest spread evenly.
N = 16
FILES = 6


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "arrowshuffle.cli", *args],
        capture_output=True,
        text=True,
        check=False,
    )


def as_json(task: PlannedRead) -> dict[str, Any]:
    """A planned task as ``plan --json`` shows it: id ranges inclusive, ``{"first", "last"}``."""
    regions = task.regions
    return {
        "subpartitions": {"first": task.subpartitions.start, "last": task.subpartitions.stop - 1},
        "files": list(task.files),
        "regions": None if regions is None else {"first": regions.start, "last": regions.stop - 1},
        "bytes": task.bytes,
        "rows": task.rows,
    }


def plan_json(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    assert main(["plan", "--json", *args]) == 0, capsys.readouterr().err
    doc: dict[str, Any] = json.loads(capsys.readouterr().out)
    return doc


@pytest.fixture(scope="module")
def hot(tmp_path_factory: pytest.TempPathFactory) -> WrittenDataset:
    return write_dataset(
        str(tmp_path_factory.mktemp("hot") / "ds"),
        num_files=FILES,
        num_subpartitions=N,
        batches_per_file=4,
        rows_per_batch=100,
        memory=8192,
        skew=True,
        seed=7,
    )


@pytest.fixture(scope="module")
def total_bytes(hot: WrittenDataset) -> int:
    sizes, _ = arrowshuffle.open_dataset(hot.url).subpartition_sizes()
    return int(sizes.sum())


def test_hot_subpartition_is_split_and_the_skew_falls(
    hot: WrittenDataset, total_bytes: int, capsys: pytest.CaptureFixture[str]
) -> None:
    target = total_bytes // 8
    doc = plan_json(capsys, hot.url, "--target-bytes", str(target), "--skew-min-bytes", "0")
    dataset = arrowshuffle.open_dataset(hot.url)
    planned = dataset.plan(target, skew_min_bytes=0)
    assert doc["tasks"] == [as_json(t) for t in planned]
    assert doc["target_bytes"] == target and doc["files"] == FILES and doc["subpartitions"] == N
    split = [t for t in doc["tasks"] if t["subpartitions"] == {"first": 0, "last": 0}]
    assert len(split) > 1, "subpartition 0 should be split over its files"
    assert sorted(f for t in split for f in t["files"]) == list(range(FILES))
    sizes, _ = dataset.subpartition_sizes()
    assert doc["skew_before"] == pytest.approx(sizes.max() / sizes.mean())
    task_bytes = np.array([t["bytes"] for t in doc["tasks"]])
    assert doc["skew_after"] == pytest.approx(task_bytes.max() / task_bytes.mean())
    assert doc["skew_before"] > 5 and doc["skew_after"] < 1.5
    assert sum(t["rows"] for t in doc["tasks"]) == dataset.num_rows


def test_text_lists_every_task(
    hot: WrittenDataset, total_bytes: int, capsys: pytest.CaptureFixture[str]
) -> None:
    target = str(total_bytes // 8)
    assert main(["plan", hot.url, "--target-bytes", target, "--skew-min-bytes", "0"]) == 0
    text = capsys.readouterr().out
    planned = arrowshuffle.open_dataset(hot.url).plan(int(target), skew_min_bytes=0)
    assert text.startswith(f"dataset        {hot.url}\n")
    assert f"tasks          {len(planned)} (" in text
    assert "skew before    " in text and "skew after     " in text
    table = text.split("\n\n", 1)[1].splitlines()
    assert table[0].split() == ["task", "subpartitions", "files", "regions", "rows", "size"]
    cells = [line.split() for line in table[1:]]
    assert [(int(c[-3]), " ".join(c[-2:])) for c in cells] == [
        (t.rows, format_size(t.bytes)) for t in planned
    ]
    assert f"target size    {format_size(int(target))}\n" in text
    for c, t in zip(cells, planned, strict=True):
        whole = len(t.files) == FILES
        assert (c[2:4] == ["all", f"({FILES})"]) if whole else c[2] == _runs(t.files)
        first, last = t.subpartitions.start, t.subpartitions.stop - 1
        assert c[1] == (str(first) if first == last else f"{first}-{last}")


def _runs(files: tuple[int, ...]) -> str:
    return str(files[0]) if len(files) == 1 else f"{files[0]}-{files[-1]}"


def test_regions_are_shown_when_one_file_is_split(
    hot: WrittenDataset, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = plan_json(capsys, hot.url, "--target-bytes", "1", "--skew-min-bytes", "0")
    by_region = [t for t in doc["tasks"] if t["regions"] is not None]
    assert by_region and all(len(t["files"]) == 1 for t in by_region)
    assert main(["plan", hot.url, "--target-bytes", "1", "--skew-min-bytes", "0"]) == 0
    text = capsys.readouterr().out
    first = by_region[0]
    region = first["regions"]["first"]
    assert any(
        line.split()[1:4] == ["0", str(first["files"][0]), str(region)]
        for line in text.splitlines()
        if line.strip().split(" ")[0].isdigit()
    )


def test_selection_and_max_tasks(hot: WrittenDataset, capsys: pytest.CaptureFixture[str]) -> None:
    doc = plan_json(capsys, hot.url, "--subpartitions", "2-5,9", "--target-bytes", "1")
    assert [t["subpartitions"] for t in doc["tasks"]] == [
        {"first": s, "last": s} for s in (2, 3, 4, 5, 9)
    ]
    sizes, _ = arrowshuffle.open_dataset(hot.url).subpartition_sizes()
    chosen = sizes[[2, 3, 4, 5, 9]]
    assert doc["skew_before"] == pytest.approx(chosen.max() / chosen.mean())
    capped = plan_json(capsys, hot.url, "--target-bytes", "1", "--max-tasks", "3")
    assert len(capped["tasks"]) <= 3 and capped["max_tasks"] == 3


def test_a_single_file(hot: WrittenDataset, capsys: pytest.CaptureFixture[str]) -> None:
    path = hot.data_urls[0]
    doc = plan_json(capsys, path, "--target-bytes", "2KB", "--skew-min-bytes", "0")
    assert doc["kind"] == "file" and doc["files"] == 1 and doc["target_bytes"] == 2000
    with arrowshuffle.open_file(path) as one:
        assert doc["tasks"] == [as_json(t) for t in one.plan(2000, skew_min_bytes=0)]
        assert sum(t["rows"] for t in doc["tasks"]) == one.num_rows
    assert main(["plan", path]) == 0
    assert capsys.readouterr().out.startswith(f"file           {path}\n")


def test_a_dataset_without_rows(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    empty = write_dataset(str(tmp_path / "empty"), num_files=2, batches_per_file=0)
    doc = plan_json(capsys, empty.url)
    assert doc["skew_before"] is None and doc["skew_after"] is None
    assert main(["plan", empty.url]) == 0
    assert "skew before    n/a" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--target-bytes", "lots"], "--target-bytes must be a byte count"),
        (["--target-bytes", "0"], "target_bytes must be at least 1 byte, found 0"),
        (["--skew-min-bytes", "-1"], "--skew-min-bytes must be a byte count"),
        (["--skew-factor", "0"], "skew_factor must be above 0, found 0.0"),
        (["--max-tasks", "0"], "max_tasks must be at least 1, found 0"),
        (["--subpartitions", "3-99"], "subpartition 99 does not exist: the dataset has"),
        (["--subpartitions", "x"], "--subpartitions: expected a number"),
    ],
)
def test_bad_options_exit_2(
    hot: WrittenDataset, args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["plan", hot.url, *args]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("error: ") and message in captured.err
    assert len(captured.err.strip().splitlines()) == 1


def test_usage_and_storage_errors_exit_2_without_traceback(tmp_path: Path) -> None:
    for args in (["plan"], ["plan", str(tmp_path / "missing")], ["plan", "x", "--skew-factor"]):
        result = run(*args)
        assert result.returncode == 2, args
        assert "Traceback" not in result.stderr + result.stdout


def test_damaged_manifest_exit_1(tmp_path: Path) -> None:
    damaged = write_dataset(str(tmp_path / "ds"), num_files=1)
    replace_manifest(damaged.url, b"{not json")
    result = run("plan", damaged.url)
    assert result.returncode == 1
    assert result.stderr.startswith(f"error: {damaged.url} is invalid: [M1] ")
    assert len(result.stderr.strip().splitlines()) == 1


@pytest.mark.s3
def test_on_object_storage(
    s3_endpoint: Any, s3_bucket: str, capsys: pytest.CaptureFixture[str]
) -> None:
    options = s3_endpoint.storage_options()
    written = write_dataset(
        f"{s3_bucket}/hot",
        num_files=3,
        num_subpartitions=8,
        rows_per_batch=80,
        skew=True,
        seed=2,
        storage_options=options,
    )
    flags = [
        "--storage-option",
        f"endpoint_url={options['endpoint_url']}",
        "--storage-option",
        "key=testing",
        "--storage-option",
        "secret=testing",
        "--storage-option",
        'client_kwargs={"region_name": "eu-west-1"}',
    ]
    url = f"{s3_bucket}/hot"
    plan = ["--target-bytes", "4KB", "--skew-min-bytes", "0", "--skew-factor", "2"]
    doc = plan_json(capsys, url, *plan, *flags)
    dataset = arrowshuffle.open_dataset(url, options)
    planned = dataset.plan(4000, skew_min_bytes=0, skew_factor=2)
    assert doc["tasks"] == [as_json(t) for t in planned]
    assert any(len(t["files"]) < 3 for t in doc["tasks"])
    assert sum(t["rows"] for t in doc["tasks"]) == written.manifest.total_rows
    missing = run("plan", f"{s3_bucket}/nothing", *flags)
    assert missing.returncode == 2 and "Traceback" not in missing.stderr
