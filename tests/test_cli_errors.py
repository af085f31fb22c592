"""What the ``arrowshuffle`` command says when something is wrong, and what it says it checked.

Every error is one line ``error: <message>`` on stderr naming the user's path, never an
``[Errno N]``; exit status 1 for invalid data, 2 for a usage or storage error.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import arrowshuffle
from arrowshuffle.format.notation import format_size

VECTORS = Path(__file__).parent / "vectors" / "v1"
GOOD = str(VECTORS / "good_basic.arrow")
CORRUPT = str(VECTORS / "corrupt_chunk_byte.arrow")  # one flipped byte in a chunk (V16)
PLAIN = "(structure OK, checksums not verified: use --deep)"


def run(*args: str, module: str = "arrowshuffle.cli") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", module, *args], capture_output=True, text=True, check=False
    )


def one_error_line(result: subprocess.CompletedProcess[str], status: int, *needles: str) -> str:
    """The run failed with ``status`` and one ``error:`` line holding every needle."""
    assert result.returncode == status, (result.stdout, result.stderr)
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1, result.stderr
    assert "[Errno" not in result.stderr and "Traceback" not in result.stderr
    for needle in needles:
        assert needle in result.stderr, (needle, result.stderr)
    return result.stderr.removeprefix("error: ").removesuffix("\n")


def copy_pair(source: str, target: Path) -> Path:
    shutil.copyfile(source, target)
    shutil.copyfile(source + ".idx", str(target) + ".idx")
    return target


@pytest.fixture
def truncated(tmp_path: Path) -> Path:
    """A shuffle file whose data file lost its last 20 bytes (V13, twice)."""
    path = copy_pair(GOOD, tmp_path / "truncated.arrow")
    data = path.read_bytes()
    path.write_bytes(data[:-20])
    return path


# ---------------------------------------------------------------------- what validate checked


def test_plain_validate_says_checksums_were_not_verified() -> None:
    result = run("validate", CORRUPT)
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"OK {CORRUPT} {PLAIN}\n"
    (report,) = json.loads(run("validate", "--json", CORRUPT).stdout)
    assert report["ok"] is True
    assert report["checked"]["verified"] == ["structure"]
    assert report["checked"]["not_verified"] == ["checksums", "decoding", "placement"]
    deep = run("validate", "--deep", "--json", CORRUPT)
    assert deep.returncode == 1
    (report,) = json.loads(deep.stdout)
    assert report["violations"][0]["rule"] == "V16"
    assert report["checked"]["verified"] == ["structure", "checksums", "decoding"]


def test_deep_validate_says_what_it_could_not_check() -> None:
    result = run("validate", "--deep", GOOD)
    assert result.returncode == 0
    assert result.stdout == (
        f"OK {GOOD} (structure, checksums and decoding OK, row placement not checked: "
        "partitioner 'explicit' does not determine a row's subpartition)\n"
    )
    hashed = str(VECTORS / "good_hash.arrow")
    result = run("validate", "--deep", "--json", hashed)
    (report,) = json.loads(result.stdout)
    assert report["checked"] == {
        "verified": ["structure", "checksums", "decoding", "placement"],
        "not_verified": [],
        "reasons": [],
    }
    text = run("validate", "--deep", hashed).stdout
    assert text == f"OK {hashed} (structure, checksums, decoding and row placement OK)\n"


# ---------------------------------------------------------------------- inspect and plan check


@pytest.mark.parametrize("command", ["inspect", "plan"])
def test_inspect_and_plan_refuse_a_truncated_data_file(truncated: Path, command: str) -> None:
    result = run(command, str(truncated))
    message = one_error_line(result, 1, f"{truncated} is invalid: [V13] ")
    assert message.endswith("(and 1 more problem; --json lists them)")
    assert result.stdout == ""
    listed = run(command, "--json", str(truncated))
    assert listed.returncode == 1 and listed.stderr == result.stderr
    doc = json.loads(listed.stdout)
    assert doc["ok"] is False and doc["path"] == str(truncated)
    assert [v["rule"] for v in doc["violations"]] == ["V13", "V13"]


@pytest.mark.parametrize("command", ["inspect", "plan"])
def test_inspect_and_plan_refuse_a_dataset_with_a_truncated_file(
    tmp_path: Path, command: str
) -> None:
    path = tmp_path / "ds"
    arrowshuffle.write_dataset(pa.table({"k": list(range(40))}), path, num_subpartitions=4, by="k")
    (data,) = arrowshuffle.open_dataset(path).data_files
    Path(data).write_bytes(Path(data).read_bytes()[:-8])
    result = run(command, str(path))
    one_error_line(result, 1, f"{path} is invalid: {Path(data).name}: [M4] ")


# ---------------------------------------------------------------------- read verifies


def test_read_verifies_checksums_unless_told_not_to(tmp_path: Path) -> None:
    out = tmp_path / "out.arrow"
    args = ["read", CORRUPT, "--subpartitions", "0-3", "--out", str(out)]
    one_error_line(run(*args), 1, f"{CORRUPT} is invalid: [V16] ")
    assert list(tmp_path.iterdir()) == []
    one_error_line(run(*args, "--verify"), 1, "[V16]")
    for skip in (["--no-verify"], ["--verify", "off"], ["--verify", "auto"]):
        result = run(*args, *skip)
        assert result.returncode == 0, (skip, result.stderr)
        out.unlink()
    assert run(*args, "--verify", "--no-verify").returncode == 0  # the last one wins
    out.unlink()
    one_error_line(run(*args, "--no-verify", "--verify"), 1, "[V16]")


# ---------------------------------------------------------------------- paths named


@pytest.fixture
def not_shuffle_files(tmp_path: Path) -> dict[str, str]:
    """Paths that are not shuffle data, by what they are."""
    parquet = tmp_path / "plain.parquet"
    pq.write_table(pa.table({"a": [1, 2]}), parquet)
    lone = tmp_path / "lone.arrow"
    with pa.ipc.new_file(lone, pa.schema([("a", pa.int64())])) as writer:
        writer.write_table(pa.table({"a": [1]}))
    text = tmp_path / "notes.txt"
    text.write_text("hello\n")
    directory = tmp_path / "folder"
    directory.mkdir()
    copy_pair(GOOD, tmp_path / "pair.arrow")
    return {
        "missing": str(tmp_path / "nowhere" / "exist.arrow"),
        "parquet": str(parquet),
        "arrow": str(lone),
        "text": str(text),
        "directory": str(directory),
        "index": str(tmp_path / "pair.arrow.idx"),
    }


EXPECTED_NAMING = {
    "missing": "{path}: not found",
    "parquet": "{path}: a Parquet file, not an arrowshuffle data file: no plain.parquet.idx "
    "sidecar",
    "arrow": "{path}: an Arrow IPC file, but not an arrowshuffle data file: no lone.arrow.idx "
    "sidecar",
    "text": "{path}: not an arrowshuffle data file: no notes.txt.idx sidecar",
    "directory": "{path}: a directory, not an arrowshuffle dataset: it has no "
    "_arrowshuffle_manifest.json and no _arrowshuffle_versions/ (nothing was committed there)",
    "index": "{path}: an index sidecar, not a data file: give the data file, {data}",
}


@pytest.mark.parametrize("what", sorted(EXPECTED_NAMING))
@pytest.mark.parametrize("command", ["read", "inspect", "plan", "validate"])
def test_a_path_that_is_not_shuffle_data_is_named_with_what_it_is(
    not_shuffle_files: dict[str, str], tmp_path: Path, command: str, what: str
) -> None:
    path = not_shuffle_files[what]
    extra = (
        ["--subpartitions", "0", "--out", str(tmp_path / "o.arrow")] if command == "read" else []
    )
    message = one_error_line(run(command, path, *extra), 2)
    assert message == EXPECTED_NAMING[what].format(path=path, data=path.removesuffix(".idx"))
    assert not (tmp_path / "o.arrow").exists()


def test_validate_goes_on_after_a_path_it_cannot_check(not_shuffle_files: dict[str, str]) -> None:
    result = run("validate", not_shuffle_files["parquet"], GOOD, "--json")
    assert result.returncode == 2
    failed, good = json.loads(result.stdout)
    assert failed == {
        "path": not_shuffle_files["parquet"],
        "ok": False,
        "error": EXPECTED_NAMING["parquet"].format(path=not_shuffle_files["parquet"]),
        "violations": [],
    }
    assert good["ok"] is True


# ---------------------------------------------------------------------- more problems


def test_more_problems_are_counted_not_coded(truncated: Path) -> None:
    result = run("validate", str(truncated))
    assert result.returncode == 1
    assert result.stdout.startswith(f"INVALID {truncated}: [V13] ")
    assert result.stdout.endswith(" (and 1 more problem; --json lists them)\n")
    assert "more:" not in result.stdout
    (report,) = json.loads(run("validate", "--json", str(truncated)).stdout)
    assert len(report["violations"]) == 2


# ---------------------------------------------------------------------- usage errors


@pytest.mark.parametrize(
    ("args", "usage", "hint"),
    [
        (["validate", "--deeep", GOOD], "usage: arrowshuffle validate ", "did you mean --deep?"),
        (["valdate", GOOD], "usage: arrowshuffle [-h]", "did you mean validate?"),
        (["inspect", GOOD, "--jsn"], "usage: arrowshuffle inspect ", "did you mean --json?"),
        (  # a required option is missing too: the misspelling is what is named
            ["read", GOOD, "--subpartition", "1", "--out", "x.arrow"],
            "usage: arrowshuffle read ",
            "did you mean --subpartitions?",
        ),
    ],
)
def test_a_misspelling_shows_the_commands_usage_and_what_was_meant(
    args: list[str], usage: str, hint: str
) -> None:
    result = run(*args)
    assert result.returncode == 2
    lines = result.stderr.splitlines()
    assert lines[0].startswith(usage), result.stderr
    assert lines[-1].startswith("error: ") and hint in lines[-1]
    assert result.stdout == ""


def test_options_are_never_abbreviated(tmp_path: Path) -> None:
    from dataset_factory import write_dataset

    written = write_dataset(str(tmp_path / "ds"), num_files=1)
    leftover = tmp_path / "ds" / "part-99999-leftover.arrow"
    leftover.write_bytes(b"x")
    result = run("vacuum", written.url, "--older-than", "0", "--dry")
    assert result.returncode == 2
    assert "unrecognized arguments: --dry (did you mean --dry-run?)" in result.stderr
    assert leftover.exists()  # --dry did not run a vacuum, dry or not
    for args in (["validate", "--dee", GOOD], ["plan", GOOD, "--target", "1"]):
        assert run(*args).returncode == 2, args


# ---------------------------------------------------------------------- read --out


def test_read_into_a_missing_directory_names_the_directory(tmp_path: Path) -> None:
    out = tmp_path / "nodir" / "x.parquet"
    message = one_error_line(run("read", GOOD, "--subpartitions", "1", "--out", str(out)), 2)
    assert message == (
        f"cannot write {out}: the directory {tmp_path / 'nodir'} does not exist (create it first)"
    )
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------------- one voice


def test_sizes_are_human_readable_in_text_and_exact_in_json() -> None:
    text = run("inspect", GOOD).stdout
    size = Path(GOOD).stat().st_size
    assert f"data size      {format_size(size)}\n" in text
    assert str(size) not in text
    assert json.loads(run("inspect", "--json", GOOD).stdout)["data_bytes"] == size
    plan = run("plan", GOOD, "--target-bytes", "256MiB").stdout
    assert "target size    256 MiB\n" in plan and "skew min       256 MiB, 5x the median\n" in plan
    assert "268435456" not in plan


def test_ranges_are_inclusive_in_text_and_json() -> None:
    text = run("plan", GOOD).stdout
    (task,) = [line.split() for line in text.split("\n\n", 1)[1].splitlines()[1:]]
    assert task[:2] == ["0", "0-3"]
    (planned,) = json.loads(run("plan", "--json", GOOD).stdout)["tasks"]
    assert planned["subpartitions"] == {"first": 0, "last": 3}


def test_the_compaction_advice_never_says_a_size_is_below_itself(tmp_path: Path) -> None:
    from dataset_factory import write_dataset

    written = write_dataset(str(tmp_path / "ds"), num_files=3, num_subpartitions=16)
    summary = json.loads(run("inspect", "--json", written.url).stdout)
    cost = summary["read_cost"]
    assert cost["suggest_compaction"] and cost["avg_chunk_bytes"] < 16 * 1024
    shown = format_size(int(cost["avg_chunk_bytes"]))
    assert cost["advice"].startswith(f"chunks average {shown}, below 16 KiB even on local disk: ")
    assert shown != "16 KiB"


def test_python_dash_m_arrowshuffle_is_the_command() -> None:
    result = run("validate", GOOD, module="arrowshuffle")
    assert result.returncode == 0 and result.stdout == f"OK {GOOD} {PLAIN}\n"


def test_unexpected_json_errors_are_objects_too(tmp_path: Path) -> None:
    missing = str(tmp_path / "missing")
    result = run("vacuum", missing, "--json")
    assert result.returncode == 2
    doc: dict[str, Any] = json.loads(result.stdout)
    assert doc["ok"] is False and doc["path"] == missing and doc["violations"] == []
    assert result.stderr == f"error: {doc['error']}\n"
