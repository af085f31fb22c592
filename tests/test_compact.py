"""Compaction: merged files hold the same rows, validate, and replace the old ones atomically.

A compaction commits a new manifest version; the files it replaced stay for readers of the
earlier version until vacuum expires it.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

import fsspec
import numpy as np
import pyarrow as pa
import pytest
from dataset_factory import SCHEMA, canonical, make_batch
from dataset_factory import write_dataset as write_test_dataset
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from index_edits import reencode
from manifest_edits import manifest_in_force, read_manifest_bytes, replace_manifest

import arrowshuffle
from arrowshuffle.cli import main
from arrowshuffle.format.manifest import decode_manifest
from arrowshuffle.format.naming import MANIFEST_NAME, VERSIONS_DIR, new_file_name, version_name
from arrowshuffle.writers.dataset_writer import commit_dataset, prepare_directory
from arrowshuffle.writers.file_writer import ShuffleFileWriter

TESTS = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(TESTS)
#: What commits put beside the pairs: the manifest versions and the compatibility copy.
COMMITTED = {VERSIONS_DIR, MANIFEST_NAME}


def _listed(manifest: Any) -> set[str]:
    return {n for f in manifest.files for n in (f.data, f.index)}


def _multisets(url: str, storage: dict[str, Any] | None = None) -> dict[int, pa.Table]:
    dataset = arrowshuffle.open_dataset(url, storage)
    return {s: canonical(dataset.read(s)) for s in range(dataset.num_subpartitions)}


def _check_compacted(url: str, before: dict[int, pa.Table], storage: dict[str, Any] | None = None):
    after = _multisets(url, storage)
    assert after.keys() == before.keys()
    for s, table in before.items():
        assert after[s].equals(table), f"subpartition {s} changed"
    report = arrowshuffle.validate_dataset(url, deep=True, storage_options=storage)
    assert report.ok, report.all_violations[:3]
    dataset = arrowshuffle.open_dataset(url, storage)
    fs, _ = fsspec.core.url_to_fs(url, **(storage or {}))
    for entry in dataset.manifest.files:
        data = fs.cat_file(f"{url.rstrip('/')}/{entry.data}")
        # Any Arrow reader reads every stored row, without the index.
        assert pa.ipc.open_file(pa.py_buffer(data)).read_all().num_rows == entry.rows
        # polars too; without it the test ends here, reported as skipped.
        pl = pytest.importorskip("polars")
        assert pl.read_ipc(data).height == entry.rows
    return dataset


def test_round_trip_local(tmp_path):
    url = str(tmp_path / "ds")
    written = write_test_dataset(
        url, num_files=6, num_subpartitions=7, broadcast_batches=[2], compression="lz4"
    )
    before = _multisets(url)
    reader = arrowshuffle.open_dataset(url)  # opened before the compaction
    report = arrowshuffle.compact(url, target_file_size=40_000, memory=6000)
    assert report.files_before == 6 and report.files_after < 6
    assert report.bytes_read > 0 and report.bytes_written > 0
    dataset = _check_compacted(url, before)
    # Rows per subpartition are unchanged; the byte totals follow the re-batched chunks
    # (validate checks both against the indexes, M9).
    assert dataset.manifest.sizes is not None and written.manifest.sizes is not None
    assert dataset.manifest.sizes.rows == written.manifest.sizes.rows
    broadcast = dataset.stats().filter(pa.compute.field("broadcast"))
    assert broadcast.num_rows > 0
    merged = dataset.file(0)
    assert merged.num_regions > 1  # the memory bound split the group into several regions
    assert (reader.version, dataset.version) == (1, 2)
    assert dataset.manifest.operation == "compact"
    # The old files stay for the reader opened before, which still reads its rows.
    old, listed = _listed(written.manifest), _listed(dataset.manifest)
    assert set(os.listdir(url)) == old | listed | COMMITTED
    assert {s: canonical(reader.read(s)) for s in before} == before
    # Vacuum without a grace period removes exactly them (and version 1, which listed them).
    removed = arrowshuffle.vacuum(url, older_than=0).removed
    assert set(removed) == (old - listed) | {f"{VERSIONS_DIR}/{version_name(1)}"}
    assert set(os.listdir(url)) == listed | COMMITTED


def test_nothing_to_merge_keeps_manifest(tmp_path):
    url = str(tmp_path / "ds")
    write_test_dataset(url, num_files=3)
    in_force = manifest_in_force(url)
    manifest = in_force.read_bytes()
    report = arrowshuffle.compact(url, target_file_size=1)
    assert report.files_after == 3 and not report.written
    assert manifest_in_force(url) == in_force  # no version committed
    assert in_force.read_bytes() == manifest


def test_cli_dry_run_and_json(tmp_path, capsys):
    url = str(tmp_path / "ds")
    write_test_dataset(url, num_files=4)
    in_force = manifest_in_force(url)
    manifest = in_force.read_bytes()
    assert main(["compact", url, "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "would merge 4 of 4 files into 1" in out and "0-3" in out
    assert manifest_in_force(url) == in_force  # no version committed
    assert in_force.read_bytes() == manifest
    assert main(["compact", url, "--target-file-size", "1GiB", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["files_before"] == 4 and doc["files_after"] == 1 and not doc["dry_run"]
    assert main(["compact", url, "--target-file-size", "lots"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--target-file-size" in err
    assert main(["compact", str(tmp_path / "none")]) == 2


def test_append_after_compaction(tmp_path):
    url = str(tmp_path / "ds")
    write_test_dataset(url, num_files=4, num_subpartitions=5)
    arrowshuffle.compact(url)
    directory = prepare_directory(url, None)
    rng = np.random.default_rng(7)
    path = directory.child(new_file_name(9)).url
    with ShuffleFileWriter(path, SCHEMA, 5) as writer:
        sp = rng.integers(0, 5, 40)
        writer.write(make_batch(rng, 10_000, 40, 9, sp), subpartitions=sp)
    assert writer.written is not None
    commit_dataset(
        directory,
        [writer.written],
        schema=SCHEMA,
        num_subpartitions=5,
        partitioner={"name": "explicit"},
        mode="append",
    )
    dataset = arrowshuffle.open_dataset(url)
    assert dataset.num_files == 2 and dataset.num_rows == 4 * 4 * 50 + 40
    assert arrowshuffle.validate_dataset(url, deep=True).ok
    before = _multisets(url)
    arrowshuffle.compact(url)
    assert arrowshuffle.open_dataset(url).num_files == 1
    _check_compacted(url, before)


@pytest.mark.s3
def test_round_trip_s3_and_fewer_requests(s3_endpoint, s3_bucket):
    storage = s3_endpoint.storage_options()
    url = f"{s3_bucket}/ds"
    write_test_dataset(
        url,
        num_files=8,
        num_subpartitions=16,
        batches_per_file=2,
        memory=2500,
        storage_options=storage,
        broadcast_batches=[1],
    )
    before = _multisets(url, storage)

    def consumer_gets() -> int:
        # Opening is 2 GETs (the listing of the versions, the version in force), then an
        # index and a data GET per file: 2 + 2 * 8 before, 2 + 2 after.
        s3_endpoint.log.clear()
        table = arrowshuffle.open_dataset(url, storage).read(range(2, 4))
        assert table.num_rows > 0
        return len(s3_endpoint.log.requests("GET"))

    gets_before = consumer_gets()
    report = arrowshuffle.compact(url, storage_options=storage, memory="1MiB")
    assert report.files_after == 1
    gets_after = consumer_gets()
    assert gets_after < gets_before / 3, (gets_before, gets_after)
    assert (gets_before, gets_after) == (2 + 2 * 8, 2 + 2)
    _check_compacted(url, before, storage)
    fs = fsspec.filesystem("s3", **storage)

    def names() -> set[str]:
        return {p.rsplit("/", 1)[-1] for p in fs.ls(url, detail=False, refresh=True)}

    # The 8 replaced pairs stay until vacuum expires the version listing them.
    assert len(names()) == 2 * 8 + 2 + len(COMMITTED)
    arrowshuffle.vacuum(url, older_than=0, storage_options=storage)
    assert len(names() - COMMITTED) == 2  # one pair
    assert fs.ls(f"{url}/{VERSIONS_DIR}", detail=False, refresh=True) == [
        f"{url.removeprefix('s3://')}/{VERSIONS_DIR}/{version_name(2)}"
    ]


# ---------------------------------------------------------------------- properties


@st.composite
def _datasets(draw: Any) -> dict[str, Any]:
    files = draw(st.integers(1, 5))
    return {
        "n": draw(st.integers(1, 9)),
        "codecs": draw(
            st.lists(st.sampled_from(["none", "lz4", "zstd"]), min_size=files, max_size=files)
        ),
        "batches": draw(st.integers(1, 4)),
        "rows": draw(st.integers(1, 60)),
        "broadcast": draw(st.sets(st.integers(0, 3), max_size=2)),
        "writer_memory": draw(st.sampled_from([800, 2000, 50_000])),
        "target": draw(st.sampled_from([1, 3000, 9000, 10**9])),
        "memory": draw(st.sampled_from([1, 1500, 5000, 10**9])),
        "seed": draw(st.integers(0, 2**16)),
        "rebatch": draw(st.sampled_from(["auto", True, False])),
        "batch_rows": draw(st.sampled_from([1, 5, 40, 65536])),
    }


def _write_mixed(url: str, case: dict[str, Any]) -> None:
    """Like the factory's datasets, but each file with its own codec."""
    rng = np.random.default_rng(case["seed"])
    directory = prepare_directory(url, None)
    written, next_id, n = [], 0, case["n"]
    for f, codec in enumerate(case["codecs"]):
        path = directory.child(new_file_name(f)).url
        with ShuffleFileWriter(
            path, SCHEMA, n, memory=case["writer_memory"], compression=codec, max_batch_rows=17
        ) as writer:
            for b in range(case["batches"]):
                rows = case["rows"]
                if b in case["broadcast"]:
                    sp = np.full(rows, -1)
                    writer.write_broadcast(make_batch(rng, next_id, rows, f, sp))
                else:
                    sp = rng.integers(0, n, rows)
                    writer.write(make_batch(rng, next_id, rows, f, sp), subpartitions=sp)
                next_id += rows
        written.append(writer.written)
    commit_dataset(
        directory, written, schema=SCHEMA, num_subpartitions=n, partitioner={"name": "explicit"}
    )


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(case=_datasets())
def test_property_rows_unchanged(case):
    with tempfile.TemporaryDirectory() as tmp:
        url = os.path.join(tmp, "ds")
        _write_mixed(url, case)
        before = _multisets(url)
        order = _regular_order(url)
        manifest = decode_manifest(read_manifest_bytes(url))
        arrowshuffle.compact(
            url,
            target_file_size=case["target"],
            memory=case["memory"],
            rebatch=case["rebatch"],
            batch_rows=case["batch_rows"],
        )
        dataset = _check_compacted(url, before)
        # Each subpartition's rows keep their write order (broadcast rows aside: broadcast
        # regions follow the regular ones in a merged file).
        assert _regular_order(url) == order
        assert dataset.manifest.sizes is not None and manifest.sizes is not None
        assert dataset.manifest.sizes.rows == manifest.sizes.rows
        if case["rebatch"] is False:
            assert dataset.manifest.sizes == manifest.sizes  # chunks copied byte for byte
        assert dataset.num_rows == manifest.total_rows


def _regular_order(url: str) -> dict[int, list[int]]:
    """Per subpartition, the ids of its non-broadcast rows in the order a reader returns them."""
    dataset = arrowshuffle.open_dataset(url)
    out = {}
    for s in range(dataset.num_subpartitions):
        table = dataset.read(s)
        out[s] = table.filter(pa.compute.not_equal(table["sp"], -1))["id"].to_pylist()
    return out


# ---------------------------------------------------------------------- killed compaction

_CHILD = textwrap.dedent(
    """
    import sys
    import arrowshuffle

    def progress(line):
        print(line, flush=True)

    arrowshuffle.compact(sys.argv[1], target_file_size=int(sys.argv[2]), memory=int(sys.argv[3]),
                         progress=progress)
    print("done", flush=True)
    """
)


def _snapshot(url: str) -> dict[str, bytes]:
    """Every file of the dataset directory, the manifest versions included, by relative name."""
    root = Path(url)
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def _restore(url: str, snapshot: dict[str, bytes]) -> None:
    for name, data in snapshot.items():
        Path(url, name).parent.mkdir(parents=True, exist_ok=True)
        Path(url, name).write_bytes(data)


def _run_child(url: str, kill_after: int | None, fraction: float) -> int:
    """Run a compaction; kill it after ``kill_after`` progress lines plus ``fraction`` of the
    last interval between two lines. Returns the number of lines seen."""
    env = {**os.environ, "PYTHONPATH": ROOT}
    child = subprocess.Popen(
        [sys.executable, "-c", _CHILD, url, "30000", "3000"],
        stdout=subprocess.PIPE,
        env=env,
        text=True,
    )
    assert child.stdout is not None
    lines = 0
    last = time.perf_counter()
    interval = 0.0
    try:
        for _ in child.stdout:
            now = time.perf_counter()
            interval, last = now - last, now
            lines += 1
            if kill_after is not None and lines >= kill_after:
                time.sleep(fraction * min(interval, 0.2))
                child.send_signal(signal.SIGKILL)
                break
        child.wait(timeout=60)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    return lines


def test_killed_compaction_leaves_old_or_new(tmp_path):
    rng = random.Random(1234)
    template = str(tmp_path / "template")
    write_test_dataset(template, num_files=8, num_subpartitions=6, broadcast_batches=[3])
    before = _multisets(template)
    original = _snapshot(template)
    old_version = str(manifest_in_force(template).relative_to(template))
    assert old_version == f"{VERSIONS_DIR}/{version_name(1)}"
    old_listed = _listed(decode_manifest(original[old_version]))
    # One full run counts the progress lines, so that kill points cover the whole protocol.
    calibrate = str(tmp_path / "calibrate")
    _restore(calibrate, original)
    total = _run_child(calibrate, None, 0.0)
    assert total > 5
    outcomes = set()
    for trial in range(7):
        url = str(tmp_path / f"trial{trial}")
        _restore(url, original)
        _run_child(url, rng.randint(0, total), rng.random())
        state = _snapshot(url)
        # Whichever version is in force, version 1 and every file it lists are untouched:
        # no commit removes a file a version lists.
        for name in {old_version} | old_listed:
            assert state[name] == original[name], name
        in_force = str(manifest_in_force(url).relative_to(url))
        if in_force == old_version:
            outcomes.add("old")
            assert arrowshuffle.open_dataset(url).version == 1
            assert arrowshuffle.validate_dataset(url, deep=True).ok
        else:
            outcomes.add("new")
            assert in_force == f"{VERSIONS_DIR}/{version_name(2)}"
            dataset = _check_compacted(url, before)
            assert dataset.version == 2 and dataset.manifest.operation == "compact"
        assert _multisets(url) == before
        # Whatever was left behind, compacting again finishes the job, and vacuum leaves
        # exactly the files of the version in force.
        arrowshuffle.compact(url, target_file_size=30000, memory=3000)
        arrowshuffle.vacuum(url, older_than=0)
        dataset = _check_compacted(url, before)
        assert {str(p.relative_to(url)) for p in Path(url).iterdir()} == (
            _listed(dataset.manifest) | COMMITTED
        )
    # With this seed the kills land both before and after the new version is created.
    assert outcomes == {"old", "new"}, outcomes


# ---------------------------------------------------------------------- Spark


@pytest.mark.spark
def test_spark_written_dataset_local_and_distributed(spark, tmp_path):
    import arrowshuffle.spark as ash_spark

    df = spark.range(0, 3000).selectExpr("id", "id % 37 AS k", "cast(id * 1.5 AS double) AS v")
    for name, run in (
        ("local", lambda url: arrowshuffle.compact(url, memory="64KiB")),
        ("spark", lambda url: ash_spark.compact(spark, url, target_file_size="40KiB")),
    ):
        url = str(tmp_path / name)
        ash_spark.write(
            df.repartition(6), url, num_subpartitions=8, partition_by="k", mode="overwrite"
        )
        assert arrowshuffle.open_dataset(url).num_files == 6
        before = _multisets_by(url, "id")
        report = run(url)
        assert report.files_after < 6
        after = _multisets_by(url, "id")
        assert after == before
        assert arrowshuffle.validate_dataset(url, deep=True).ok  # V19: hash still holds


def _multisets_by(url: str, key: str) -> dict[int, list[int]]:
    dataset = arrowshuffle.open_dataset(url)
    return {
        s: sorted(dataset.read(s).column(key).to_pylist()) for s in range(dataset.num_subpartitions)
    }


def test_inspect_reports_read_cost_and_suggests_compaction(tmp_path, capsys):
    url = str(tmp_path / "ds")
    write_test_dataset(url, num_files=5, num_subpartitions=16)
    assert main(["inspect", url, "--json"]) == 0
    before = json.loads(capsys.readouterr().out)["read_cost"]
    assert before["consumers"] == 2 and before["subpartitions_per_consumer"] == 8
    assert before["index_requests"] == 5 and before["suggest_compaction"]
    assert 0 < before["avg_chunk_bytes"] < 16 * 1024
    assert main(["inspect", url]) == 0
    text = capsys.readouterr().out
    assert "avg chunk" in text and "arrowshuffle compact" in text
    arrowshuffle.compact(url)
    assert main(["inspect", url, "--json"]) == 0
    after = json.loads(capsys.readouterr().out)["read_cost"]
    assert after["requests_per_consumer"] < before["requests_per_consumer"] / 2
    assert after["avg_chunk_bytes"] > before["avg_chunk_bytes"]


@pytest.mark.s3
@pytest.mark.spark
def test_cli_and_spark_compaction_on_s3(spark, s3_endpoint, s3_bucket):
    """The CLI and the Spark entry point compact a dataset on the object store."""
    import arrowshuffle.spark as ash_spark

    storage = s3_endpoint.storage_options()
    flags = [
        f"--storage-option=endpoint_url={storage['endpoint_url']}",
        "--storage-option=key=testing",
        "--storage-option=secret=testing",
        '--storage-option=client_kwargs={"region_name": "eu-west-1"}',
    ]
    for name in ("cli", "spark"):
        url = f"{s3_bucket}/{name}"
        write_test_dataset(
            url, num_files=5, num_subpartitions=6, batches_per_file=2, storage_options=storage
        )
        before = _multisets(url, storage)
        if name == "cli":
            assert main(["compact", url, "--json", *flags]) == 0
        else:
            report = ash_spark.compact(spark, url, storage_options=storage, memory="1MiB")
            assert report.files_after == 1
        assert arrowshuffle.open_dataset(url, storage).num_files == 1
        _check_compacted(url, before, storage)


@pytest.mark.parametrize("rebatch", [False, True])
def test_a_chunk_whose_bytes_are_not_its_messages_is_refused_as_v17(tmp_path, rebatch):
    """Bytes that match their CRC32C but are not the declared messages stop compaction (V17)."""
    import dataclasses

    from arrowshuffle.format.crc import crc32c
    from arrowshuffle.format.index import ENTRY_DTYPE, decode_index, index_checksum

    url = str(tmp_path / "ds")
    write_test_dataset(url, num_files=2, num_subpartitions=3)
    manifest_path = manifest_in_force(url)
    manifest = decode_manifest(manifest_path.read_bytes())
    victim = manifest.files[0]
    data_path, index_path = tmp_path / "ds" / victim.data, tmp_path / "ds" / victim.index
    index = decode_index(index_path.read_bytes())
    entries = np.array(index.entries, dtype=ENTRY_DTYPE, copy=True)
    s, r = (int(i) for i in np.argwhere(entries["length"] > 0)[0])
    offset = int(entries[s, r]["offset"])
    data = bytearray(data_path.read_bytes())
    data[offset : offset + 4] = b"\0\0\0\0"  # the continuation marker of its first message
    data_path.write_bytes(bytes(data))
    length = int(entries[s, r]["length"])
    entries[s, r]["crc32c"] = crc32c(bytes(data[offset : offset + length]))
    raw = reencode(index, entries=entries)
    index_path.write_bytes(raw)
    listed = dataclasses.replace(victim, index_crc32c=index_checksum(raw))
    manifest = dataclasses.replace(manifest, files=(listed, *manifest.files[1:]))
    replace_manifest(url, manifest)
    before = manifest_path.read_bytes()
    assert arrowshuffle.validate_dataset(url).ok  # only a deep check of chunks tells

    with pytest.raises(arrowshuffle.CorruptFileError) as caught:
        arrowshuffle.compact(url, target_file_size=1 << 30, rebatch=rebatch)
    assert caught.value.rule == "V17"
    assert manifest_in_force(url) == manifest_path  # nothing was replaced
    assert manifest_path.read_bytes() == before
