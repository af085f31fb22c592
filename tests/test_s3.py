"""Datasets on a real S3 endpoint (moto's server on 127.0.0.1), with requests counted there.

The counts come from the server's own view of each HTTP request (see ``S3RequestLog`` in
conftest.py), not from the readers' counters.
"""

from __future__ import annotations

import json
import posixpath
import urllib.request
from collections import Counter

import fsspec
import pyarrow as pa
import pytest
from dataset_factory import canonical, expected_rows, read_whole_file, write_dataset

from arrowshuffle.format.errors import MissingObjectError, ShuffleIOError
from arrowshuffle.format.naming import MANIFEST_NAME, VERSIONS_DIR
from arrowshuffle.readers.assign import assign
from arrowshuffle.readers.dataset import open_dataset
from arrowshuffle.readers.file_reader import open_file
from arrowshuffle.readers.scheduler import ReadOptions
from arrowshuffle.readers.validate_dataset import validate_dataset

pytestmark = pytest.mark.s3

N = 6


@pytest.fixture
def dataset(s3_endpoint, s3_bucket):
    options = s3_endpoint.storage_options()
    ds = write_dataset(
        f"{s3_bucket}/ds",
        num_files=3,
        num_subpartitions=N,
        batches_per_file=4,
        rows_per_batch=40,
        memory=3000,
        storage_options=options,
    )
    tables = [read_whole_file(u, options) for u in ds.data_urls]
    s3_endpoint.log.clear()
    return ds, tables


def is_versions_listing(request) -> bool:
    return f"prefix=ds%2F{VERSIONS_DIR}%2F" in request["query"]


def summarize(log, data_sizes):
    """Server-side requests by kind, after checking that every one was a GET.

    Opening the dataset is one listing of its manifest versions and one GET of the version in
    force (the compatibility copy ``_arrowshuffle_manifest.json`` is never read): both are
    returned as ``opening``, with the index and data GETs. No other request is made.
    """
    requests = log.requests()
    methods = Counter(r["method"] for r in requests)
    assert set(methods) <= {"GET"}, f"only GETs expected, found {dict(methods)}"
    listings = [r for r in requests if is_versions_listing(r)]
    versions = [r for r in requests if f"/ds/{VERSIONS_DIR}/" in r["path"]]
    assert not [r for r in requests if r["path"].endswith(MANIFEST_NAME)]
    index = Counter(r["path"] for r in requests if r["path"].endswith(".idx"))
    data = [r for r in requests if r["path"].endswith(".arrow")]
    assert len(listings) + len(versions) + sum(index.values()) + len(data) == len(requests)
    for r in data:
        size = data_sizes[posixpath.basename(r["path"])]
        assert r["range"] is not None, "a data file must never be fetched without a range"
        assert r["bytes"] <= size, f"a GET of {r['bytes']} bytes from a {size}-byte data file"
    return listings + versions, index, Counter(r["path"] for r in data)


def opened_once(opening) -> bool:
    """One request more than a single manifest cost: the listing that finds the version in
    force, then the GET of that version."""
    return [is_versions_listing(r) for r in opening] == [True, False]


#: With merging off (``max_gap=0``), the two ranges at the data file's ends that prove it
#: belongs to the index and that its regions cover every record batch (V13-V15, V21), once per
#: opened file; otherwise the read's one range is widened to the whole (small) file.
PROOF_GETS = 2


def data_sizes_of(ds):
    return {f.data: f.data_size for f in ds.manifest.files}


@pytest.mark.parametrize("max_gap", [0, 256 * 1024])
@pytest.mark.parametrize("selection", [2, range(1, 4)], ids=["one", "range"])
def test_reading_a_selection_costs_few_ranged_gets(s3_endpoint, dataset, selection, max_gap):
    ds, tables = dataset
    regions = [f.regions for f in ds.manifest.files]
    assert min(regions) >= 2, "the test needs several regions per file"
    got = open_dataset(ds.url, s3_endpoint.storage_options()).read(
        selection, options=ReadOptions(max_gap=max_gap)
    )
    opening, index, data = summarize(s3_endpoint.log, data_sizes_of(ds))
    assert opened_once(opening)
    assert len(index) == len(ds.manifest.files)
    assert max(index.values()) <= 2
    for f in ds.manifest.files:
        gets = sum(n for path, n in data.items() if path.endswith(f.data))
        if max_gap == 0:  # nothing is merged: the proof of V21 costs its own two ranges
            gets -= PROOF_GETS
        assert 1 <= gets <= f.regions
        if max_gap > 0:
            assert gets == 1, "small gaps between one file's chunks are merged into one GET"
    ids = [selection] if isinstance(selection, int) else list(selection)
    assert canonical(got).equals(canonical(expected_rows(tables, ids)))


def test_a_pointwise_consumer_touches_only_its_files(s3_endpoint, dataset):
    ds, tables = dataset
    reader = open_dataset(ds.url, s3_endpoint.storage_options())
    plan = assign(N, 2, "pointwise", num_producers=len(tables))[1]
    got = reader.read(
        consumer=1, num_consumers=2, pattern="pointwise", options=ReadOptions(max_gap=0)
    )
    _, index, data = summarize(s3_endpoint.log, data_sizes_of(ds))
    mine = {ds.manifest.files[f].data for f, _ in plan.pairs()}
    assert {posixpath.basename(p) for p in data} == mine
    assert {posixpath.basename(p) for p in index} == {m + ".idx" for m in mine}
    want = pa.concat_tables([expected_rows([tables[f]], list(r)) for f, r in plan.pairs()])
    assert canonical(got).equals(canonical(want))


def test_a_single_file_url_needs_no_metadata_request(s3_endpoint, dataset):
    ds, tables = dataset
    f = open_file(ds.data_urls[0], s3_endpoint.storage_options())
    got = f.read(4, options=ReadOptions(max_gap=0))
    _, index, data = summarize(s3_endpoint.log, data_sizes_of(ds))
    assert sum(index.values()) == 1
    assert sum(data.values()) <= ds.manifest.files[0].regions + PROOF_GETS  # max_gap=0
    assert canonical(got).equals(canonical(expected_rows(tables[:1], [4])))


def test_polars_reads_a_dataset_on_s3(s3_endpoint, dataset):
    pl = pytest.importorskip("polars")
    asp = pytest.importorskip("arrowshuffle.polars")
    ds, tables = dataset
    options = s3_endpoint.storage_options()
    lazy = asp.scan(ds.url, [0, 5], storage_options=options)
    got = lazy.filter(pl.col("value") > 0).collect(engine="streaming")
    opening, index, _ = summarize(s3_endpoint.log, data_sizes_of(ds))
    assert opened_once(opening) and max(index.values()) <= 2
    want = pl.from_arrow(expected_rows(tables, [0, 5])).filter(pl.col("value") > 0)
    assert got.sort("id").equals(want.sort("id"))
    assert asp.scan(ds.data_urls[2], 3, storage_options=options).collect().height == (
        expected_rows(tables[2:], [3]).num_rows
    )


def test_transient_server_errors_are_retried(s3_endpoint, dataset):
    ds, tables = dataset
    # No retries inside botocore, so that the reader's own retry loop is what recovers.
    options = s3_endpoint.storage_options(config_kwargs={"retries": {"total_max_attempts": 1}})
    target = ds.manifest.files[1].data
    s3_endpoint.log.fail_next("/" + target, 2)
    got = open_dataset(ds.url, options).read(3, options=ReadOptions(max_gap=0))
    statuses = [
        r["status"] for r in s3_endpoint.log.requests("GET") if r["path"].endswith("/" + target)
    ]
    assert statuses.count(500) == 2
    assert statuses[-1] == 206
    assert canonical(got).equals(canonical(expected_rows(tables, [3])))


def test_a_missing_dataset_and_a_missing_file_are_reported_with_their_url(
    s3_endpoint, s3_bucket, dataset
):
    ds, _ = dataset
    options = s3_endpoint.storage_options()
    with pytest.raises(MissingObjectError, match=rf"{s3_bucket}/nowhere is not an arrowshuffle"):
        open_dataset(f"{s3_bucket}/nowhere", options)
    fs = fsspec.filesystem("s3", **options)
    gone = ds.data_urls[2]
    fs.rm(gone)
    s3_endpoint.log.clear()
    with pytest.raises(MissingObjectError, match=rf"{gone} does not exist"):
        open_dataset(ds.url, options).read(1)
    # Not-found is not retried: one GET (the file's single merged range) and no more.
    name = posixpath.basename(gone)
    assert len([r for r in s3_endpoint.log.requests("GET") if r["path"].endswith(name)]) == 1


def _moto_auth(endpoint, value: str) -> None:
    request = urllib.request.Request(
        f"{endpoint.url}/moto-api/reset-auth",
        data=value.encode(),
        method="POST",
        headers={"Content-Type": "text/plain"},
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        assert json.load(response)["status"] == "ok"


def test_wrong_credentials_are_refused_clearly(s3_endpoint, dataset):
    boto3 = pytest.importorskip("boto3")
    ds, tables = dataset
    iam = boto3.client(
        "iam",
        endpoint_url=s3_endpoint.url,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        region_name="us-east-1",
    )
    iam.create_user(UserName="reader")
    iam.put_user_policy(
        UserName="reader",
        PolicyName="read-all",
        PolicyDocument=json.dumps(
            {
                "Version": "2012-10-17",
                "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}],
            }
        ),
    )
    key = iam.create_access_key(UserName="reader")["AccessKey"]
    good = s3_endpoint.storage_options(key=key["AccessKeyId"], secret=key["SecretAccessKey"])
    bad = s3_endpoint.storage_options(key=key["AccessKeyId"], secret="not-the-secret")
    _moto_auth(s3_endpoint, "0")  # from now on the server checks every signature
    try:
        got = open_dataset(ds.url, good).read(2)
        assert canonical(got).equals(canonical(expected_rows(tables, [2])))
        # Refused at the first request: the listing of the manifest versions.
        with pytest.raises(ShuffleIOError, match=rf"permission denied for s3://.*/{VERSIONS_DIR}"):
            open_dataset(ds.url, bad)
        with pytest.raises(ShuffleIOError, match=r"permission denied for s3://.*\.idx"):
            open_file(ds.data_urls[0], bad)
    finally:
        _moto_auth(s3_endpoint, "inf")
    denied = [r for r in s3_endpoint.log.requests() if r["status"] == 403]
    assert len(denied) == 2, "a refused request is not retried"


def test_dataset_validation_on_s3(s3_endpoint, dataset):
    ds, _ = dataset
    options = s3_endpoint.storage_options()
    calls = []
    report = validate_dataset(ds.url, storage_options=options, progress=lambda *a: calls.append(a))
    assert report.ok, report.all_violations
    assert sorted(done for done, _, _ in calls) == [1, 2, 3]
    fsspec.filesystem("s3", **options).rm(ds.data_urls[1] + ".idx")
    report = validate_dataset(ds.url, storage_options=options)
    assert [{v.rule for v in f.violations} for f in report.files] == [set(), {"M4"}, set()]
