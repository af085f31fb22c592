"""Hostile manifests: refused with the rule they break, without touching anything outside.

Every case goes through the reader (``open_dataset``), the validator (``validate_dataset``) and
the command line (``arrowshuffle validate``). Local cases place sentinels where traversal names
point (directories: reading one would be an IO error, not the manifest's rule) and audit the
files Python opens during the call (memory maps made by Arrow are not audited; the sentinels
cover them); S3 cases check the server's request log.
"""

from __future__ import annotations

import dataclasses
import json
import os
import posixpath
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import fsspec
import pytest
from dataset_factory import WrittenDataset, write_dataset
from manifest_edits import read_manifest_bytes, replace_manifest

import arrowshuffle.cli
from arrowshuffle.format.errors import CorruptFileError, FormatError, MissingObjectError
from arrowshuffle.format.manifest import decode_manifest, encode_manifest
from arrowshuffle.format.naming import VERSIONS_DIR
from arrowshuffle.readers.dataset import open_dataset
from arrowshuffle.readers.file_reader import FIRST_FETCH_LIMIT
from arrowshuffle.readers.validate_dataset import MANIFEST_RULES, validate_dataset

Doc = dict[str, Any]

# ---------------------------------------------------------------------- auditing opens


class _Opens:
    """Paths opened by this process while :meth:`watch` is active (``open`` audit events).

    An audit hook cannot be removed, so one hook is installed once and records only while a
    test watches.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._active = False
        self.paths: list[str] = []
        sys.addaudithook(self._hook)

    def _hook(self, event: str, args: tuple[Any, ...]) -> None:
        if event == "open" and self._active and args and isinstance(args[0], (str, bytes)):
            path = os.fsdecode(args[0])
            with self._lock:
                self.paths.append(os.path.abspath(path))

    def watch(self) -> _Watch:
        return _Watch(self)


class _Watch:
    def __init__(self, opens: _Opens) -> None:
        self._opens = opens

    def __enter__(self) -> list[str]:
        with self._opens._lock:
            self._opens.paths = []
            self._opens._active = True
        return self._opens.paths

    def __exit__(self, *exc: object) -> None:
        with self._opens._lock:
            self._opens._active = False


_OPENS = _Opens()


def outside(paths: list[str], root: Path, dataset: Path) -> list[str]:
    """Opened paths under ``root`` but not inside the dataset directory, and system files."""
    inside = str(dataset) + os.sep
    return [
        p
        for p in paths
        if (p.startswith(str(root) + os.sep) and not p.startswith(inside)) or p.startswith("/etc/")
    ]


# ---------------------------------------------------------------------- hostile edits


def name_of(index: int, name: str) -> Callable[[Doc], None]:
    def edit(doc: Doc) -> None:
        doc["files"][index]["data"] = name
        doc["files"][index]["index"] = name + ".idx"

    return edit


def field_of(index: int, key: str, value: Any) -> Callable[[Doc], None]:
    def edit(doc: Doc) -> None:
        doc["files"][index][key] = value

    return edit


def header(key: str, value: Any) -> Callable[[Doc], None]:
    def edit(doc: Doc) -> None:
        doc[key] = value

    return edit


def same_pair_twice(doc: Doc) -> None:
    doc["files"].append(dict(doc["files"][0]))


def same_data_under_two_entries(doc: Doc) -> None:
    doc["files"][1]["data"] = doc["files"][0]["data"]
    doc["files"][1]["index"] = doc["files"][0]["index"]


def index_named_as_another_data(doc: Doc) -> None:
    doc["files"][1]["index"] = doc["files"][0]["data"]


def data_named_as_another_index(doc: Doc) -> None:
    doc["files"][1]["data"] = doc["files"][0]["index"]
    doc["files"][1]["index"] = doc["files"][0]["index"] + ".idx"


def names_differing_in_case(doc: Doc) -> None:
    doc["files"][1]["data"] = doc["files"][0]["data"].upper()
    doc["files"][1]["index"] = doc["files"][1]["data"] + ".idx"


def index_under_another_name(doc: Doc) -> None:
    doc["files"][0]["index"] = "elsewhere.idx"


# (case id, edit of the JSON document or a function of the good bytes, rule, message part)
EDITS: list[tuple[str, Callable[[Doc], None], str, str]] = [
    ("parent", name_of(0, "../sentinel.arrow"), "M3", "'.' or '..' component"),
    ("absolute", name_of(0, "/etc/passwd"), "M3", "it is absolute"),
    ("up-and-out", name_of(0, "a/../../sentinel.arrow"), "M3", "'.' or '..' component"),
    ("s3-url", name_of(0, "s3://other/x.arrow"), "M3", "it is a URL"),
    ("file-url", name_of(0, "file:///etc/passwd"), "M3", "it is a URL"),
    ("http-url", name_of(0, "http://127.0.0.1:1/x.arrow"), "M3", "it is a URL"),
    ("backslash", name_of(0, "..\\sentinel.arrow"), "M3", "backslash"),
    ("drive", name_of(0, "c:sentinel.arrow"), "M3", "colon"),
    ("nul", name_of(0, "part\x00.arrow"), "M3", "control character"),
    ("empty", name_of(0, ""), "M3", "it is empty"),
    ("doubled-slash", name_of(0, "a//b.arrow"), "M3", "empty component"),
    ("index-elsewhere", index_under_another_name, "M3", "expected 'part-"),
    ("index-as-other-data", index_named_as_another_data, "M3", "where readers look for it"),
    ("same-pair-twice", same_pair_twice, "M8", "listed more than once"),
    ("same-data-twice", same_data_under_two_entries, "M8", "listed more than once"),
    ("data-as-other-index", data_named_as_another_index, "M8", "listed more than once"),
    ("case-only", names_differing_in_case, "M8", "case is ignored"),
    ("rows-bool", field_of(0, "rows", True), "M1", "found a boolean true"),
    ("rows-negative", field_of(0, "rows", -1), "M1", "found an integer -1"),
    ("regions-string", field_of(0, "regions", "3"), "M1", "'regions' to be an integer"),
    ("size-float", field_of(1, "data_size", 1.5), "M1", "found a number 1.5"),
    ("size-2**63", field_of(0, "index_size", 2**63), "M1", "from 0 to 2**63-1"),
    ("crc-2**32", field_of(0, "index_crc32c", 2**32), "M1", "from 0 to 2**32-1"),
    ("regions-2**32", field_of(0, "regions", 2**32), "M1", "from 0 to 2**32-1"),
    ("rows-missing", field_of(0, "rows", None), "M1", "found null"),
    ("subpartitions-2**31", header("num_subpartitions", 2**31), "M1", "from 1 to 2**31-1"),
    ("subpartitions-false", header("num_subpartitions", False), "M1", "found a boolean"),
    ("files-object", header("files", {}), "M1", "'files' to be an array"),
    ("entry-array", header("files", [[1, 2]]), "M1", "expected an object, found an array"),
    ("total-rows-string", header("total_rows", "many"), "M1", "'total_rows'"),
]


def deep_nesting(good: bytes) -> bytes:
    return b"[" * 100_000 + b"]" * 100_000


def deep_inside_properties(good: bytes) -> bytes:
    doc = json.loads(good)
    doc["properties"] = {"x": json.loads("[" * 70 + "]" * 70)}
    return json.dumps(doc).encode()


def not_utf8(good: bytes) -> bytes:
    return good.replace(b'"arrowshuffle-dataset"', b'"arrowshuffle-\xff"')


def utf16(good: bytes) -> bytes:
    return good.decode().encode("utf-16")


def key_twice(good: bytes) -> bytes:
    return good.rstrip()[:-1] + b', "files": []}'


def nan(good: bytes) -> bytes:
    return good.replace(b'"properties": {}', b'"properties": {"x": NaN}')


def huge_integer(good: bytes) -> bytes:
    return good.replace(b'"total_rows": ', b'"total_rows": ' + b"9" * 5000 + b', "x": ')


RAW: list[tuple[str, Callable[[bytes], bytes], str, str]] = [
    ("deep-100000", deep_nesting, "M1", "100000 deep, expected at most 64"),
    ("deep-in-properties", deep_inside_properties, "M1", "expected at most 64"),
    ("not-utf8", not_utf8, "M1", "not UTF-8: byte 0xff"),
    ("utf16", utf16, "M1", "not UTF-8"),
    ("key-twice", key_twice, "M1", "key 'files' twice"),
    ("nan", nan, "M1", "NaN"),
    ("huge-integer", huge_integer, "M1", "not JSON"),
]


def hostile_bytes(good: bytes, edit: Callable[..., Any], raw: bool) -> bytes:
    if raw:
        result: bytes = edit(good)
        return result
    doc = json.loads(good)
    edit(doc)
    return json.dumps(doc, indent=1).encode()


CASES = [pytest.param(edit, rule, part, False, id=name) for name, edit, rule, part in EDITS] + [
    pytest.param(edit, rule, part, True, id=name) for name, edit, rule, part in RAW
]


# ---------------------------------------------------------------------- local datasets


@pytest.fixture
def local(tmp_path: Path) -> tuple[WrittenDataset, Path, bytes]:
    """A dataset in ``tmp_path/ds`` and sentinels just outside it, where traversal points.

    The sentinels are directories: reading one would fail with an IO error, never with the
    manifest's rule.
    """
    ds = write_dataset(str(tmp_path / "ds"), num_files=2, num_subpartitions=4, seed=3)
    for name in ("sentinel.arrow", "sentinel.arrow.idx"):
        (tmp_path / name).mkdir()
    good = read_manifest_bytes(tmp_path / "ds")
    return ds, tmp_path / "ds", good


def run_cli(*args: str) -> tuple[int, str, str]:
    """``arrowshuffle`` in a subprocess: exit status, stdout, stderr."""
    done = subprocess.run(
        [sys.executable, "-m", "arrowshuffle.cli", *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    return done.returncode, done.stdout, done.stderr


@pytest.mark.parametrize(("edit", "rule", "part", "raw"), CASES)
def test_a_hostile_manifest_is_refused_everywhere(
    local: tuple[WrittenDataset, Path, bytes],
    capsys: pytest.CaptureFixture[str],
    edit: Callable[..., Any],
    rule: str,
    part: str,
    raw: bool,
) -> None:
    _, directory, good = local
    replace_manifest(directory, hostile_bytes(good, edit, raw))
    root = directory.parent

    with _OPENS.watch() as opened:
        with pytest.raises(FormatError) as caught:
            open_dataset(directory).read()
        report = validate_dataset(directory)
        status = arrowshuffle.cli.main(["validate", str(directory)])
    assert caught.value.rule == rule, caught.value
    assert part in str(caught.value)
    assert outside(opened, root, directory) == []

    assert not report.ok and report.files == []
    assert [v.rule for v in report.violations] == [rule]
    assert caught.value.detail.endswith(report.violations[0].message)  # the reader adds the URL

    out, err = capsys.readouterr()
    assert status == 1
    assert out.count("\n") == 1 and out.startswith(f"INVALID {directory}: [{rule}] "), out
    assert "Traceback" not in err


def test_the_command_line_refuses_deep_nesting_in_one_line(
    local: tuple[WrittenDataset, Path, bytes],
) -> None:
    _, directory, _ = local
    replace_manifest(directory, deep_nesting(b""))
    status, out, err = run_cli("validate", str(directory))
    assert status == 1
    assert out.startswith(
        f"INVALID {directory}: [M1] manifest nests arrays and objects 100000 deep, "
        "expected at most 64"
    )
    assert out.count("\n") == 1
    assert "Traceback" not in err and "RecursionError" not in err


def test_every_manifest_rule_is_documented() -> None:
    spec = (Path(__file__).parent.parent / "spec.md").read_text()
    for rule, text in MANIFEST_RULES.items():
        assert f"- **{rule}** — " in spec, rule
        assert text
    assert "M8" in MANIFEST_RULES


def test_a_duplicated_pair_is_not_read_twice(local: tuple[WrittenDataset, Path, bytes]) -> None:
    ds, directory, good = local
    rows = open_dataset(directory).read().num_rows
    assert rows == ds.manifest.total_rows
    replace_manifest(directory, hostile_bytes(good, same_pair_twice, False))
    with pytest.raises(FormatError, match=r"\[M8\]"):
        open_dataset(directory)


# ---------------------------------------------------------------------- sizes and counts


def rewrite(ds: WrittenDataset, directory: Path, **changes: Any) -> None:
    files = list(ds.manifest.files)
    files[0] = dataclasses.replace(files[0], **changes)
    manifest = dataclasses.replace(ds.manifest, files=tuple(files))
    replace_manifest(directory, manifest)


@pytest.mark.parametrize(
    ("changes", "rule", "part"),
    [
        ({"index_size": 2**50}, "M4", "the manifest lists 1125899906842624"),
        ({"data_size": 2**62}, "M4", "the manifest lists 4611686018427387904"),
        ({"regions": 2**31}, "M7", "regions"),
        ({"rows": 2**62}, "M7", "rows"),
    ],
    ids=["index_size", "data_size", "regions", "rows"],
)
def test_listed_sizes_and_counts_are_checked_before_use_locally(
    local: tuple[WrittenDataset, Path, bytes], changes: dict[str, int], rule: str, part: str
) -> None:
    ds, directory, _ = local
    rewrite(ds, directory, **changes)
    dataset = open_dataset(directory)  # lazily: nothing of the files is read yet
    with pytest.raises(CorruptFileError) as caught:
        dataset.read(0)
    assert caught.value.rule == rule
    assert part in str(caught.value)
    report = validate_dataset(directory)
    assert rule in {v.rule for v in report.files[0].violations}
    assert report.files[1].ok


def big_manifest(ds: WrittenDataset, count: int) -> bytes:
    first = ds.manifest.files[0]
    files = tuple(
        dataclasses.replace(
            first, data=f"part-{i:06d}-gone.arrow", index=f"part-{i:06d}-gone.arrow.idx"
        )
        for i in range(count)
    )
    return encode_manifest(dataclasses.replace(ds.manifest, files=files))


def test_two_hundred_thousand_missing_files_are_opened_lazily_and_reported_quickly(
    local: tuple[WrittenDataset, Path, bytes], capsys: pytest.CaptureFixture[str]
) -> None:
    ds, directory, _ = local
    raw = big_manifest(ds, 200_000)
    started = time.perf_counter()
    assert len(decode_manifest(raw).files) == 200_000
    replace_manifest(directory, raw)
    with _OPENS.watch() as opened:
        dataset = open_dataset(directory)
    assert dataset.num_files == 200_000
    assert not [p for p in opened if "-gone.arrow" in p], "opening touched listed files"
    with pytest.raises(MissingObjectError, match=r"part-000007-gone\.arrow"):
        dataset.file(7)
    report = validate_dataset(directory)
    assert len(report.files) == 200_000
    assert all(
        f.violations[0].rule == "M4" and "missing" in f.violations[0].message for f in report.files
    )
    assert arrowshuffle.cli.main(["validate", str(directory)]) == 1
    out, _ = capsys.readouterr()
    assert out.startswith(f"INVALID {directory}: part-000000-gone.arrow: [M4] ")
    # Generous for slow machines: decoding, opening and validating take seconds, not minutes.
    assert time.perf_counter() - started < 90


def test_a_read_of_one_file_needs_only_that_file(
    local: tuple[WrittenDataset, Path, bytes],
) -> None:
    ds, directory, _ = local
    # File 0 is gone: any plan or read that touched it would fail.
    for name in (ds.manifest.files[0].data, ds.manifest.files[0].index):
        (directory / name).unlink()
    dataset = open_dataset(directory)
    assert dataset.file(1).read(2).num_rows > 0
    assert dataset.read(consumer=1, num_consumers=2, pattern="pointwise").num_rows > 0
    with pytest.raises(MissingObjectError):
        dataset.read(consumer=0, num_consumers=2, pattern="pointwise")


# ---------------------------------------------------------------------- object storage


@pytest.fixture
def remote(s3_endpoint: Any, s3_bucket: str) -> Iterator[tuple[WrittenDataset, Any, str]]:
    options = s3_endpoint.storage_options()
    ds = write_dataset(f"{s3_bucket}/ds", num_files=3, num_subpartitions=4, storage_options=options)
    fs = fsspec.filesystem("s3", **options)
    # Objects outside the dataset's prefix that hostile names point at.
    bucket = s3_bucket.removeprefix("s3://")
    for name in ("sentinel.arrow", "sentinel.arrow.idx"):
        fs.pipe(f"{bucket}/{name}", b"outside the dataset")
    s3_endpoint.log.clear()
    yield ds, fs, bucket


def put_manifest(ds: WrittenDataset, payload: bytes) -> None:
    """Put ``payload`` in place of the dataset's manifest in force."""
    replace_manifest(ds.url, payload, ds.storage_options)


def requests_outside(log: Any, bucket: str) -> list[dict[str, Any]]:
    """Requests for anything but the dataset's own prefix (a listing of it is inside)."""
    return [
        r
        for r in log.requests()
        if not r["path"].startswith(f"/{bucket}/ds/")
        and not (r["path"].rstrip("/") == f"/{bucket}" and "prefix=ds" in r["query"])
    ]


@pytest.mark.s3
@pytest.mark.parametrize(
    "name",
    ["../sentinel.arrow", "ds/../../sentinel.arrow", "s3://other/x.arrow", "/sentinel.arrow"],
)
def test_names_that_leave_the_prefix_make_no_request_outside_it(
    s3_endpoint: Any, remote: tuple[WrittenDataset, Any, str], name: str
) -> None:
    ds, _, bucket = remote
    options = s3_endpoint.storage_options()
    doc = json.loads(encode_manifest(ds.manifest))
    name_of(1, name)(doc)
    put_manifest(ds, json.dumps(doc).encode())
    s3_endpoint.log.clear()
    with pytest.raises(FormatError) as caught:
        open_dataset(ds.url, options).read()
    assert caught.value.rule == "M3"
    report = validate_dataset(ds.url, storage_options=options)
    assert [v.rule for v in report.violations] == ["M3"]
    assert requests_outside(s3_endpoint.log, bucket) == []
    assert not [r for r in s3_endpoint.log.requests() if "sentinel" in r["path"]]


@pytest.mark.s3
def test_a_duplicated_pair_on_s3_is_refused_before_any_file_is_read(
    s3_endpoint: Any, remote: tuple[WrittenDataset, Any, str]
) -> None:
    ds, _, bucket = remote
    options = s3_endpoint.storage_options()
    doc = json.loads(encode_manifest(ds.manifest))
    same_pair_twice(doc)
    put_manifest(ds, json.dumps(doc).encode())
    s3_endpoint.log.clear()
    with pytest.raises(FormatError, match=r"\[M8\]"):
        open_dataset(ds.url, options)
    # Finding the version in force (one listing of the versions) and reading it: nothing else.
    listing, *gets = s3_endpoint.log.requests()
    assert listing["method"] == "GET" and f"prefix=ds%2F{VERSIONS_DIR}" in listing["query"]
    assert gets and all(r["path"].startswith(f"/{bucket}/ds/{VERSIONS_DIR}/") for r in gets)


def range_end(record: dict[str, Any]) -> int:
    """The last byte a ranged GET asked for (``bytes=a-b``)."""
    assert record["range"], f"an unranged GET of {record['path']}"
    return int(record["range"].split("-")[1] or 0)


@pytest.mark.s3
@pytest.mark.parametrize(
    ("changes", "rule"),
    [
        ({"index_size": 2**50}, "M4"),
        ({"index_size": 2**50, "regions": 2**31}, "M4"),
        ({"regions": 2**31}, "M7"),
        ({"index_size": 90_000}, "M4"),  # larger than the index, within the first request
        ({"data_size": 2**60}, "M7"),
    ],
    ids=["index_size", "both", "regions", "index_size_near", "data_size"],
)
def test_hostile_listed_sizes_on_s3_request_nothing_large(
    s3_endpoint: Any, remote: tuple[WrittenDataset, Any, str], changes: dict[str, int], rule: str
) -> None:
    ds, _, _ = remote
    options = s3_endpoint.storage_options()
    files = list(ds.manifest.files)
    files[0] = dataclasses.replace(files[0], **changes)
    put_manifest(ds, encode_manifest(dataclasses.replace(ds.manifest, files=tuple(files))))
    dataset = open_dataset(ds.url, options)
    s3_endpoint.log.clear()
    with pytest.raises(CorruptFileError) as caught:
        dataset.read(1)
    assert caught.value.rule == rule, caught.value
    gets = s3_endpoint.log.requests("GET")
    assert gets and all(range_end(r) < FIRST_FETCH_LIMIT for r in gets)
    assert len([r for r in gets if r["path"].endswith(files[0].index)]) == 1
    assert not [r for r in gets if r["path"].endswith(files[0].data)]


@pytest.mark.s3
def test_reading_one_file_of_a_dataset_touches_only_its_objects(
    s3_endpoint: Any, remote: tuple[WrittenDataset, Any, str]
) -> None:
    ds, _, bucket = remote
    dataset = open_dataset(ds.url, s3_endpoint.storage_options())
    s3_endpoint.log.clear()
    mine = ds.manifest.files[1]
    assert dataset.file(1).read(2).num_rows >= 0
    touched = {posixpath.basename(r["path"]) for r in s3_endpoint.log.requests()}
    assert touched == {mine.data, mine.index}
    assert requests_outside(s3_endpoint.log, bucket) == []


@pytest.mark.s3
def test_remote_validation_costs_two_listings_and_at_most_three_gets_per_file(
    s3_endpoint: Any, remote: tuple[WrittenDataset, Any, str]
) -> None:
    ds, fs, bucket = remote
    # One listed file is missing: the listing shows it, and it costs no request.
    gone = ds.manifest.files[2]
    fs.rm(f"{bucket}/ds/{gone.data}")
    s3_endpoint.log.clear()
    report = validate_dataset(ds.url, storage_options=s3_endpoint.storage_options())
    assert [f.ok for f in report.files] == [True, True, False]
    requests = s3_endpoint.log.requests()
    assert {r["method"] for r in requests} == {"GET"}, "no metadata (HEAD) request per file"
    listings = [r for r in requests if r["path"].rstrip("/") == f"/{bucket}"]
    # One listing of the versions finds the manifest in force; one of the directory gives sizes.
    assert len(listings) == 2
    assert sum(f"prefix=ds%2F{VERSIONS_DIR}%2F" in r["query"] for r in listings) == 1
    for f in ds.manifest.files[:2]:
        assert len([r for r in requests if r["path"].endswith("/" + f.index)]) == 1
        # Both ends in one round trip; a file smaller than the tail is one GET.
        assert 1 <= len([r for r in requests if r["path"].endswith("/" + f.data)]) <= 2
    assert not [r for r in requests if gone.data in r["path"]]
    assert requests_outside(s3_endpoint.log, bucket) == []


@pytest.mark.s3
def test_remote_validation_of_larger_files_reads_both_ends_in_one_round_trip(
    s3_endpoint: Any, s3_bucket: str
) -> None:
    options = s3_endpoint.storage_options()
    ds = write_dataset(
        f"{s3_bucket}/big",
        num_files=2,
        num_subpartitions=4,
        rows_per_batch=4000,
        memory=1 << 20,
        storage_options=options,
    )
    assert min(f.data_size for f in ds.manifest.files) > 256 * 1024
    s3_endpoint.log.clear()
    assert validate_dataset(ds.url, storage_options=options).ok
    for f in ds.manifest.files:
        gets = [r for r in s3_endpoint.log.requests("GET") if r["path"].endswith("/" + f.data)]
        assert len(gets) == 2 and sum(r["bytes"] for r in gets) < f.data_size // 2
    s3_endpoint.log.clear()
    assert validate_dataset(ds.url, deep=True, storage_options=options).ok
