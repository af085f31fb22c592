"""Dataset validation, inspection and reads over numbered manifest versions (spec.md, 8.1, 11).

Validation checks every version a dataset retains (M10 and M11 too), each distinct file once;
``--current-only`` checks the version in force alone. ``inspect`` and ``read`` take ``--version``;
``vacuum`` reports the versions it expires. The versioned vectors of tests/vectors/v1/versioned
are the fixed cases; datasets written here by the real writers are the others.
"""

from __future__ import annotations

import contextlib
import filecmp
import io
import json
import shutil
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from test_vectors import VECTORS, load_generator

import arrowshuffle as ash
from arrowshuffle.cli import main as cli_main
from arrowshuffle.format.errors import MissingObjectError
from arrowshuffle.format.naming import MANIFEST_NAME, VERSIONS_DIR, version_name
from arrowshuffle.readers import validate_dataset as validation
from arrowshuffle.readers.validate_dataset import is_dataset, validate_dataset

VERSIONED = VECTORS / "versioned"
EXPECTED: dict[str, Any] = json.loads((VERSIONED / "expected.json").read_text())["datasets"]
GOOD = VERSIONED / "good_versioned"
GOOD_VERSIONS: dict[str, Any] = EXPECTED["good_versioned"]["versions"]
#: What plain ``validate`` says it checked (and did not).
PLAIN = "structure OK, checksums not verified: use --deep"


def run_cli(*args: str) -> tuple[int, str, str]:
    """``arrowshuffle ARGS`` in this process: exit status, stdout and stderr."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = cli_main(list(args))
    return status, out.getvalue(), err.getvalue()


def columns(table: pa.Table) -> dict[str, list[Any]]:
    return {name: table.column(name).to_pylist() for name in table.column_names}


def version_file(directory: Path, version: int) -> Path:
    return directory / VERSIONS_DIR / version_name(version)


@pytest.fixture
def counted_checks(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """How many times validation checks each data file (by name)."""
    checks: Counter[str] = Counter()
    check_file = validation._check_file

    def counting(directory: Any, manifest: Any, entry: Any, *args: Any) -> Any:
        checks[entry.data] += 1
        return check_file(directory, manifest, entry, *args)

    monkeypatch.setattr(validation, "_check_file", counting)
    return checks


def write_chain(path: Path, appends: int = 3, *, compact_all: bool = True) -> None:
    """A dataset of ``appends`` commits of one file each, then a compaction of every file."""
    table = pa.table({"k": np.arange(60, dtype=np.int64), "v": np.arange(60) * 0.5})
    for i in range(appends):
        ash.write_dataset(
            table.slice(i * 20, 20),
            path,
            num_subpartitions=4,
            partitioner="round_robin",
            mode="error" if i == 0 else "append",
        )
    if compact_all:
        ash.compact(str(path), target_file_size="1GiB")


# ---------------------------------------------------------------------- each file once


def test_every_version_is_checked_and_each_file_once(counted_checks: Counter[str]) -> None:
    progress: list[tuple[int, int, str]] = []
    report = validate_dataset(GOOD, progress=lambda *call: progress.append(call))
    assert report.ok, report.all_violations
    assert report.summary["version"] == 4
    assert report.summary["versions"] == [1, 2, 3, 4]
    assert [v.version for v in report.versions] == [1, 2, 3]
    assert all(v.ok and v.violations == [] for v in report.versions)
    assert [v.summary["files"] for v in report.versions] == [1, 2, 3]
    assert [v.summary["operation"] for v in report.versions] == ["write", "append", "append"]
    # 8 listings over 4 versions, 4 distinct files: each checked once.
    every_listing = [name for info in GOOD_VERSIONS.values() for name in info["files"]]
    assert len(every_listing) == 8
    assert counted_checks == Counter(set(every_listing))
    assert [call[:2] for call in progress] == [(i, 4) for i in range(1, 5)]
    # The main report is the version in force's.
    assert [f.name for f in report.files] == GOOD_VERSIONS["4"]["files"]
    doc = json.loads(json.dumps(report.to_dict()))
    assert [v["version"] for v in doc["versions"]] == [1, 2, 3]
    assert doc["summary"]["versions"] == [1, 2, 3, 4]


def test_current_only_checks_the_version_in_force_alone(counted_checks: Counter[str]) -> None:
    report = validate_dataset(GOOD, current_only=True)
    assert report.ok
    assert report.summary["versions"] == [4] and report.versions == []
    assert counted_checks == Counter(GOOD_VERSIONS["4"]["files"])
    # Files that only earlier, retained versions list are not "unlisted".
    assert report.summary["unlisted"] == []


def test_written_chain_checks_every_version_and_files_once(
    tmp_path: Path, counted_checks: Counter[str]
) -> None:
    path = tmp_path / "ds"
    write_chain(path)
    report = validate_dataset(path, deep=True)
    assert report.ok, report.all_violations
    assert report.summary["versions"] == [1, 2, 3, 4]
    assert report.summary["files"] == 1 and report.summary["rows"] == 60
    # Three appended files and the merged one, each checked once.
    assert len(counted_checks) == 4 and set(counted_checks.values()) == {1}
    assert report.summary["unlisted"] == []
    stray = path / "part-00099-stray.arrow"
    stray.write_bytes(b"not listed by any version")
    assert validate_dataset(path).summary["unlisted"] == [stray.name]


def test_a_file_is_checked_again_against_another_versions_partitioner(
    tmp_path: Path, counted_checks: Counter[str]
) -> None:
    """The cache key holds what M6 compares: the same entry under another spec is checked."""
    directory = tmp_path / "ds"
    shutil.copytree(GOOD, directory)
    path = version_file(directory, 2)
    doc = json.loads(path.read_text())
    doc["partitioner"] = {"name": "explicit", "note": "edited by hand"}
    path.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    report = validate_dataset(directory)
    assert not report.ok
    assert report.violations == [] and all(f.ok for f in report.files)
    by_version = {v.version: v for v in report.versions}
    assert by_version[1].ok and by_version[3].ok
    assert not by_version[2].ok
    assert [(name, v.rule) for name, v in by_version[2].violations] == [
        (name, "M6") for name in GOOD_VERSIONS["2"]["files"]
    ]
    assert all(v.message.startswith("version 2: ") for _, v in by_version[2].violations)
    # Version 2's two files once more, under its own partitioner; the others once.
    assert sorted(counted_checks.values()) == [1, 1, 2, 2]
    assert {n for n, c in counted_checks.items() if c == 2} == set(GOOD_VERSIONS["2"]["files"])


# ---------------------------------------------------------------------- broken earlier versions


def test_a_broken_earlier_version_is_reported_with_its_number(tmp_path: Path) -> None:
    directory = tmp_path / "ds"
    shutil.copytree(GOOD, directory)
    version_file(directory, 2).write_text("{not json")
    report = validate_dataset(directory)
    assert not report.ok
    assert report.violations == [] and all(f.ok for f in report.files)
    assert [(v.version, v.ok) for v in report.versions] == [(1, True), (2, False), (3, True)]
    ((where, violation),) = report.versions[1].violations
    assert where is None and violation.rule == "M1"
    assert violation.message.startswith("version 2: ")
    assert report.all_violations == [(None, violation)]
    assert validate_dataset(directory, current_only=True).ok

    status, stdout, stderr = run_cli("validate", str(directory))
    assert status == 1, stderr
    assert stdout.startswith(f"INVALID {directory}: [M1] version 2: ")
    assert stdout.endswith("(checked versions 1-4)\n") and stdout.count("\n") == 1
    status, stdout, _ = run_cli("validate", "--current-only", str(directory))
    assert status == 0
    assert stdout == (
        f"OK {directory} (dataset: 2 files, 45 rows, version 4 in force; {PLAIN}; "
        "checked version 4)\n"
    )


def test_a_file_only_earlier_versions_list_is_checked() -> None:
    report = validate_dataset(VERSIONED / "older_version_file_missing")
    missing = GOOD_VERSIONS["1"]["files"][0]
    assert missing not in GOOD_VERSIONS["4"]["files"]
    assert not report.ok and report.violations == [] and all(f.ok for f in report.files)
    for version in report.versions:  # versions 1 to 3 list it
        assert [(name, v.rule) for name, v in version.violations] == [(missing, "M4")]
        assert version.violations[0][1].message.startswith(f"version {version.version}: ")
    assert validate_dataset(VERSIONED / "older_version_file_missing", current_only=True).ok


# ---------------------------------------------------------------------- M10 and M11


@pytest.mark.parametrize(
    ("name", "rule", "versions", "checked", "in_force"),
    [
        ("version_number_differs", "M10", [1, 2, 3, 4], "versions 1-4", True),
        ("older_version_number_differs", "M10", [1, 2, 3, 4], "versions 1-4", False),
        ("version_gap", "M11", [1, 3, 4], "versions 1,3-4", True),
    ],
)
def test_m10_and_m11_through_the_api_and_the_cli(
    name: str, rule: str, versions: list[int], checked: str, in_force: bool
) -> None:
    directory = VERSIONED / name
    assert EXPECTED[name]["rule"] == rule
    report = validate_dataset(directory)
    assert not report.ok
    assert report.summary["versions"] == versions
    (first, *rest) = report.all_violations
    assert first[0] is None and first[1].rule == rule and rest == []
    if in_force:  # the dataset's own violations: the version in force, or the run of versions
        assert report.violations == [first[1]]
    else:
        assert report.violations == [] and not report.versions[1].ok
        assert first[1].message.startswith("version 2: manifest version file 2 holds version 7")

    status, stdout, stderr = run_cli("validate", str(directory))
    assert status == 1 and stderr == ""
    assert stdout.startswith(f"INVALID {directory}: [{rule}] ")
    assert stdout.endswith(f"(checked {checked})\n")

    status, stdout, _ = run_cli("validate", "--json", str(directory))
    assert status == 1
    (doc,) = json.loads(stdout)
    assert doc["ok"] is False and doc["error"] is None
    assert doc["summary"]["versions"] == versions and doc["summary"]["version"] == 4
    found = [v["rule"] for v in doc["violations"]] + [
        v["rule"] for version in doc["versions"] for v in version["violations"]
    ]
    assert found == [rule]

    status, stdout, _ = run_cli("validate", "--current-only", str(directory))
    if rule == "M10" and in_force:  # the version in force is what breaks it
        assert status == 1 and stdout.startswith(f"INVALID {directory}: [M10] ")
    else:
        assert status == 0, stdout
        assert stdout.endswith(f"version 4 in force; {PLAIN}; checked version 4)\n")


def test_m10_json_names_the_version_and_no_file() -> None:
    status, stdout, _ = run_cli(
        "validate", "--json", str(VERSIONED / "older_version_number_differs")
    )
    assert status == 1
    (doc,) = json.loads(stdout)
    assert [(v["version"], v["ok"]) for v in doc["versions"]] == [(1, True), (2, False), (3, True)]
    (violation,) = doc["versions"][1]["violations"]
    assert violation["file"] is None and violation["rule"] == "M10"
    assert violation["message"].startswith("version 2: ")


# ---------------------------------------------------------------------- time travel


@pytest.mark.parametrize("version", sorted(GOOD_VERSIONS, key=int))
def test_every_version_of_the_vector_reads_what_it_lists(version: str) -> None:
    info = GOOD_VERSIONS[version]
    dataset = ash.open_dataset(GOOD, version=int(version))
    assert dataset.version == int(version)
    assert dataset.manifest.operation == info["operation"]
    assert [f.data for f in dataset.manifest.files] == info["files"]
    # No broadcast region: every subpartition as one run is each file in file order.
    assert columns(dataset.read()) == info["reads"]["file_rows"]


def test_read_version_writes_that_version(tmp_path: Path) -> None:
    for version, info in GOOD_VERSIONS.items():
        out = tmp_path / f"v{version}.arrow"
        args = ["read", str(GOOD), "--subpartitions", "0-3", "--out", str(out)]
        status, stdout, stderr = run_cli(*args, "--version", version)
        assert status == 0, stderr
        rows = len(info["reads"]["file_rows"]["a"])
        assert stdout == f"wrote {rows} rows to {out}\n"
        with pa.ipc.open_file(out) as reader:
            assert columns(reader.read_all()) == info["reads"]["file_rows"]
    # Without --version: the version in force.
    out = tmp_path / "now.arrow"
    status, _, _ = run_cli("read", str(GOOD), "--subpartitions", "0-3", "--out", str(out))
    assert status == 0
    with pa.ipc.open_file(out) as reader:
        assert columns(reader.read_all()) == GOOD_VERSIONS["4"]["reads"]["file_rows"]
    # Some subpartitions and columns of an earlier version.
    out = tmp_path / "some.arrow"
    args = ["read", str(GOOD), "--version", "2", "--subpartitions", "1", "--columns", "a"]
    status, _, stderr = run_cli(*args, "--out", str(out))
    assert status == 0, stderr
    with pa.ipc.open_file(out) as reader:
        table = reader.read_all()
    assert table.column_names == ["a"]
    assert (
        table.column("a").to_pylist()
        == columns(ash.open_dataset(GOOD, version=2).read(1, columns=["a"]))["a"]
    )
    assert table.num_rows > 0


def test_inspect_version_text_and_json() -> None:
    status, stdout, stderr = run_cli("inspect", str(GOOD))
    assert status == 0, stderr
    lines = stdout.splitlines()
    assert lines[1] == "version        4 (in force; retained: versions 1-4)"
    assert lines[2] == "files          2"
    status, stdout, _ = run_cli("inspect", str(GOOD), "--version", "2")
    assert status == 0
    lines = stdout.splitlines()
    assert lines[1] == "version        2 (in force: 4; retained: versions 1-4)"
    assert lines[2] == "files          2"
    assert "rows           30" in lines
    assert all(
        any(line.endswith(f"  {name}") for line in lines) for name in GOOD_VERSIONS["2"]["files"]
    )
    status, stdout, _ = run_cli("inspect", "--json", str(GOOD), "--version", "1")
    assert status == 0
    summary = json.loads(stdout)
    assert (summary["version"], summary["version_in_force"]) == (1, 4)
    assert summary["versions"] == [1, 2, 3, 4]
    assert summary["files"] == 1 and summary["rows"] == 14
    assert [f["name"] for f in summary["per_file"]] == GOOD_VERSIONS["1"]["files"]


def test_inspect_of_a_dataset_of_one_manifest() -> None:
    legacy = VECTORS / "datasets" / "good_dataset"
    status, stdout, _ = run_cli("inspect", "--json", str(legacy))
    assert status == 0
    summary = json.loads(stdout)
    assert (summary["version"], summary["versions"]) == (0, [])
    status, stdout, _ = run_cli("inspect", str(legacy), "--version", "0")
    assert status == 0
    assert stdout.splitlines()[1] == (
        "version        0 (a dataset of one manifest, written before versions)"
    )
    status, stdout, stderr = run_cli("inspect", str(legacy), "--version", "1")
    assert status == 2 and stdout == ""
    assert "has no manifest version 1: it holds no manifest versions" in stderr
    assert stderr.count("\n") == 1


@pytest.mark.parametrize("command", ["inspect", "read"])
def test_version_of_a_shuffle_file_is_a_usage_error(command: str, tmp_path: Path) -> None:
    data = str(VECTORS / "good_basic.arrow")
    out = str(tmp_path / "o.arrow")
    extra = [] if command == "inspect" else ["--subpartitions", "0", "--out", out]
    status, stdout, stderr = run_cli(command, data, "--version", "1", *extra)
    assert status == 2 and stdout == ""
    assert stderr.startswith("error: --version 1: ") and "not a dataset" in stderr
    assert stderr.count("\n") == 1 and "Traceback" not in stderr
    status, _, stderr = run_cli(command, str(GOOD), "--version", "x", *extra)
    assert status == 2 and "expected a version number" in stderr


def test_a_version_that_vacuum_expired_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "ds"
    write_chain(path, appends=3, compact_all=False)
    assert ash.open_dataset(path, version=1).num_files == 1
    report = ash.vacuum(str(path), older_than=0)
    assert report.retained_versions == (3,)
    assert not version_file(path, 1).exists() and version_file(path, 3).exists()
    with pytest.raises(
        MissingObjectError, match="no manifest version 1: only version 3 is retained"
    ):
        ash.open_dataset(path, version=1)
    out = tmp_path / "out.arrow"
    for args in (
        ["read", str(path), "--version", "1", "--subpartitions", "0", "--out", str(out)],
        ["inspect", str(path), "--version", "2"],
    ):
        status, stdout, stderr = run_cli(*args)
        assert status == 2 and stdout == ""
        assert stderr.startswith("error: ") and stderr.count("\n") == 1
        assert f"has no manifest version {args[3]}: only version 3 is retained" in stderr
    assert not out.exists()
    # What is left is one valid version, every file still listed.
    after = validate_dataset(path)
    assert after.ok and after.summary["versions"] == [3] and after.versions == []


def test_vacuum_prints_expired_versions_apart_from_removed_files(tmp_path: Path) -> None:
    path = tmp_path / "ds"
    write_chain(path, appends=2)  # versions 1 and 2 list the two appended files, 3 the merged one
    replaced = sorted(p.name for p in path.glob("part-*") if p.name not in merged_names(path))
    assert len(replaced) == 4

    status, stdout, stderr = run_cli("vacuum", str(path), "--older-than", "0", "--dry-run")
    assert status == 0, stderr
    lines = stdout.splitlines()
    assert sorted(lines[:4]) == [f"would remove {path}/{name}" for name in replaced]
    assert lines[4:6] == [
        f"would expire version {v} ({path}/{VERSIONS_DIR}/{version_name(v)})" for v in (1, 2)
    ]
    assert lines[6] == (
        f"dry run of {path}: would remove 4 objects, would expire versions 1-2; retained version 3"
    )
    status, stdout, _ = run_cli("vacuum", str(path), "--older-than", "0", "--json")
    assert status == 0
    doc = json.loads(stdout)
    assert doc["expired_versions"] == [1, 2] and doc["retained_versions"] == [3]
    assert sorted(doc["removed"]) == sorted(
        replaced + [f"{VERSIONS_DIR}/{version_name(v)}" for v in (1, 2)]
    )
    status, stdout, _ = run_cli("vacuum", str(path), "--older-than", "0")
    assert stdout.splitlines() == [f"vacuumed {path}: removed 0 objects; retained version 3"]


def merged_names(path: Path) -> set[str]:
    files = ash.open_dataset(path).manifest.files
    return {name for f in files for name in (f.data, f.index)}


# ---------------------------------------------------------------------- versions without the copy


def test_a_directory_of_versions_without_the_manifest_copy_is_a_dataset(tmp_path: Path) -> None:
    import fsspec

    directory = tmp_path / "ds"
    shutil.copytree(GOOD, directory)
    (directory / MANIFEST_NAME).unlink()
    assert is_dataset(directory, None)
    empty = tmp_path / "empty"
    empty.mkdir()
    assert not is_dataset(empty, None)
    # A URL is a dataset by its manifest or its versions: validate takes it as one.
    fs = fsspec.filesystem("memory")
    root = f"/versions-{uuid.uuid4().hex[:8]}"
    fs.pipe(
        {
            f"{root}/{p.relative_to(directory).as_posix()}": p.read_bytes()
            for p in directory.rglob("*")
            if p.is_file()
        }
    )
    try:
        url = f"memory://{root}"
        assert is_dataset(url, None)
        status, stdout, stderr = run_cli("validate", url)
        assert status == 0, stderr
        assert stdout == (
            f"OK {url} (dataset: 2 files, 45 rows, version 4 in force; {PLAIN}; "
            "checked versions 1-4)\n"
        )
    finally:
        fs.rm(root, recursive=True)


# ---------------------------------------------------------------------- object storage


@pytest.mark.s3
def test_every_version_on_s3_fetches_each_index_once(
    s3_endpoint: Any, s3_bucket: str, tmp_path: Path
) -> None:
    import fsspec

    options = s3_endpoint.storage_options()
    fs = fsspec.filesystem("s3", **options)
    url = f"{s3_bucket}/ds"
    for p in sorted(GOOD.rglob("*")):
        if p.is_file() and p.name != MANIFEST_NAME:  # no copy: the versions make the dataset
            fs.pipe(f"{url}/{p.relative_to(GOOD).as_posix()}", p.read_bytes())
    s3_endpoint.log.clear()
    report = validate_dataset(url, storage_options=options)
    assert report.ok, report.all_violations
    assert report.summary["versions"] == [1, 2, 3, 4]
    distinct = {name for info in GOOD_VERSIONS.values() for name in info["files"]}
    index_gets = [r for r in s3_endpoint.log.requests("GET") if r["path"].endswith(".idx")]
    assert sorted(Path(r["path"]).name for r in index_gets) == sorted(f"{n}.idx" for n in distinct)
    # A broken earlier version on S3: reported with its number, the version in force fine.
    fs.pipe(f"{url}/{VERSIONS_DIR}/{version_name(2)}", b"{not json")
    flags = [f"--storage-option=endpoint_url={options['endpoint_url']}"]
    flags += ["--storage-option=key=testing", "--storage-option=secret=testing"]
    flags += ['--storage-option=client_kwargs={"region_name": "eu-west-1"}']
    status, stdout, stderr = run_cli("validate", url, *flags)
    assert status == 1, stderr
    assert stdout.startswith(f"INVALID {url}: [M1] version 2: ")
    status, stdout, stderr = run_cli("validate", "--current-only", url, *flags)
    assert status == 0, stderr
    assert stdout.endswith(f"version 4 in force; {PLAIN}; checked version 4)\n")
    # An earlier version read from the object store.
    out = tmp_path / "v1.arrow"
    args = ["read", url, "--version", "1", "--subpartitions", "0-3", "--out", str(out)]
    status, _, stderr = run_cli(*args, *flags)
    assert status == 0, stderr
    with pa.ipc.open_file(out) as reader:
        assert columns(reader.read_all()) == GOOD_VERSIONS["1"]["reads"]["file_rows"]


# ---------------------------------------------------------------------- the vectors themselves


def test_readme_lists_every_versioned_vector_with_its_rule() -> None:
    readme = (VECTORS / "README.md").read_text()
    for name, entry in EXPECTED.items():
        row = next((line for line in readme.splitlines() if line.startswith(f"| `{name}` ")), "")
        assert row, f"{name} is not listed in the README"
        assert f"| {entry.get('rule', 'valid')} " in row


def test_generator_reproduces_the_versioned_vectors(tmp_path: Path) -> None:
    document = load_generator().generate_versioned(tmp_path)
    assert document["datasets"] == EXPECTED
    fresh_root = tmp_path / "versioned"
    committed = sorted(p.relative_to(VERSIONED) for p in VERSIONED.rglob("*") if p.is_file())
    fresh = sorted(p.relative_to(fresh_root) for p in fresh_root.rglob("*") if p.is_file())
    assert committed == fresh
    if pa.__version__ == json.loads((VERSIONED / "expected.json").read_text())["pyarrow"]:
        names = [str(p) for p in committed]
        _, mismatch, errors = filecmp.cmpfiles(VERSIONED, fresh_root, names, shallow=False)
        assert mismatch == [] and errors == []
