"""Rule V21: an index whose regions leave record batches of its data file out is refused.

Dropping a region from an index, its checksums recomputed, leaves an index that passes every
CRC and every layout rule of the regions it keeps; a reader that trusted it would return the
rows of the other regions only. Every reader and plain validation must refuse it.
"""

from __future__ import annotations

from pathlib import Path

import fsspec
import numpy as np
import pyarrow as pa
import pytest
from index_edits import reencode

import arrowshuffle
from arrowshuffle.cli import main
from arrowshuffle.format.errors import CorruptFileError
from arrowshuffle.format.index import decode_index, index_checksum
from arrowshuffle.format.manifest import Manifest, ManifestFile, encode_manifest
from arrowshuffle.format.naming import MANIFEST_NAME
from arrowshuffle.readers.scheduler import ReadOptions
from arrowshuffle.readers.validate import validate_file

SCHEMA = pa.schema([("k", pa.int64()), ("s", pa.string())])
N = 4
REGIONS = 4
ROWS = 1500  # per region: 6,000 rows in all


def write_file(path: Path, *, broadcast: bool = False) -> Path:
    """Four regions of 1,500 rows (the second one broadcast if asked)."""
    with arrowshuffle.ShuffleFileWriter(path, SCHEMA, N, max_batch_rows=256) as writer:
        for r in range(REGIONS):
            keys = np.arange(r * ROWS, (r + 1) * ROWS, dtype=np.int64)
            table = pa.table({"k": keys, "s": pa.array(keys.astype(str))}, schema=SCHEMA)
            if broadcast and r == 1:
                writer.write_broadcast(table)
            else:
                writer.write(table, subpartitions=(keys * 7) % N)
            writer.flush_region()
    return path


def drop_region(path: Path, which: int) -> None:
    """Re-encode the index without region ``which``, with valid checksums."""
    index_path = Path(f"{path}.idx")
    index = decode_index(memoryview(index_path.read_bytes()))
    keep = np.delete(np.arange(index.num_regions), which)
    index_path.write_bytes(
        reencode(index, regions=index.meta.regions[keep], entries=index.entries[:, keep])
    )


def one_file_dataset(path: Path) -> Path:
    """A dataset directory that lists the pair at ``path`` exactly as its index describes it.

    Its single manifest, without a versions directory, is a dataset written before manifest
    versions (read as version 0): the layout of the oldest writers on purpose.
    """
    raw = Path(f"{path}.idx").read_bytes()
    index = decode_index(memoryview(raw))
    listed = ManifestFile(
        data=path.name,
        index=f"{path.name}.idx",
        data_size=path.stat().st_size,
        index_size=len(raw),
        rows=index.header.total_rows,
        regions=index.num_regions,
        index_crc32c=index_checksum(raw),
    )
    manifest = Manifest(index.schema, index.num_subpartitions, index.meta.partitioner, (listed,))
    (path.parent / MANIFEST_NAME).write_bytes(encode_manifest(manifest))
    return path.parent


WHICH = pytest.mark.parametrize("which", [0, 2, REGIONS - 1], ids=["first", "middle", "last"])


@pytest.fixture
def pair(tmp_path: Path) -> Path:
    return write_file(tmp_path / "part.arrow")


def test_the_writer_tiles_the_data_file(tmp_path: Path) -> None:
    for path, broadcast in ((tmp_path / "a.arrow", False), (tmp_path / "b.arrow", True)):
        write_file(path, broadcast=broadcast)
        assert validate_file(path, deep=True).ok
        # A broadcast region's rows reach every subpartition.
        rows = REGIONS * ROWS + ((N - 1) * ROWS if broadcast else 0)
        assert arrowshuffle.open_file(path).read().num_rows == rows


def test_a_file_without_rows_or_regions_is_valid(tmp_path: Path) -> None:
    path = tmp_path / "empty.arrow"
    with arrowshuffle.ShuffleFileWriter(path, SCHEMA, N) as writer:
        writer.flush_region()  # nothing buffered: no region
    assert decode_index(memoryview(Path(f"{path}.idx").read_bytes())).num_regions == 0
    assert validate_file(path).ok
    assert arrowshuffle.open_file(path).read().num_rows == 0


@WHICH
@pytest.mark.parametrize("verify", [True, False])
def test_a_local_read_refuses_an_index_without_a_region(
    pair: Path, which: int, verify: bool
) -> None:
    drop_region(pair, which)
    with pytest.raises(CorruptFileError) as caught:
        arrowshuffle.open_file(pair).read(verify=verify)
    assert caught.value.rule == "V21"
    with pytest.raises(CorruptFileError) as caught:
        arrowshuffle.open_file(pair).read([1], verify=verify)  # a single subpartition too
    assert caught.value.rule == "V21"


@WHICH
def test_plain_validation_refuses_an_index_without_a_region(
    pair: Path, which: int, capsys: pytest.CaptureFixture[str]
) -> None:
    drop_region(pair, which)
    report = validate_file(pair)
    assert report.violations[0].rule == "V21"
    assert main(["validate", str(pair)]) == 1
    out = capsys.readouterr()
    assert "V21" in out.out + out.err
    assert "Traceback" not in out.out + out.err


@WHICH
def test_a_dataset_read_refuses_an_index_without_a_region(tmp_path: Path, which: int) -> None:
    (tmp_path / "ds").mkdir()
    path = write_file(tmp_path / "ds" / "part.arrow")
    drop_region(path, which)
    dataset = arrowshuffle.open_dataset(one_file_dataset(path))
    with pytest.raises(CorruptFileError) as caught:
        dataset.read()
    assert caught.value.rule == "V21"


def upload(local: Path, bucket_url: str, options: dict[str, object]) -> str:
    fs = fsspec.filesystem("s3", **options)
    url = f"{bucket_url}/{local.name}"
    fs.put_file(str(local), url)
    fs.put_file(f"{local}.idx", f"{url}.idx")
    return url


@pytest.mark.s3
@WHICH
@pytest.mark.parametrize("verify", [True, False])
def test_an_s3_read_refuses_an_index_without_a_region(
    pair: Path, s3_endpoint: object, s3_bucket: str, which: int, verify: bool
) -> None:
    drop_region(pair, which)
    options = s3_endpoint.storage_options()  # type: ignore[attr-defined]
    url = upload(pair, s3_bucket, options)
    with pytest.raises(CorruptFileError) as caught:
        arrowshuffle.open_file(url, options).read([2], verify=verify)
    assert caught.value.rule == "V21"


def data_gets(log: object, name: str) -> list[dict[str, object]]:
    return [r for r in log.requests("GET", name) if not str(r["path"]).endswith(".idx")]  # type: ignore[attr-defined]


@pytest.mark.s3
def test_an_s3_read_proves_coverage_with_the_bytes_it_fetches(
    pair: Path, s3_endpoint: object, s3_bucket: str
) -> None:
    """A read of a small file near both its ends is widened to the whole file: one request
    fetches the chunks and the ends that prove them (V13-V15, V21)."""
    options = s3_endpoint.storage_options()  # type: ignore[attr-defined]
    url = upload(pair, s3_bucket, options)
    log = s3_endpoint.log  # type: ignore[attr-defined]
    log.clear()
    f = arrowshuffle.open_file(url, options)
    assert f.read().num_rows == REGIONS * ROWS
    gets = data_gets(log, "part.arrow")
    assert len(gets) == len(f.blocks()) == 1  # no request more than the read's own
    assert gets[0]["range"] == f"bytes=0-{pair.stat().st_size - 1}"


@pytest.mark.s3
def test_an_s3_read_far_from_the_ends_fetches_them_once(
    pair: Path, s3_endpoint: object, s3_bucket: str
) -> None:
    """Otherwise the proof costs two ranges, the file's first bytes and its end from where
    the last region ends (footer included), fetched together once per opened file."""
    options = s3_endpoint.storage_options()  # type: ignore[attr-defined]
    url = upload(pair, s3_bucket, options)
    log = s3_endpoint.log  # type: ignore[attr-defined]
    log.clear()
    f = arrowshuffle.open_file(url, options, options=ReadOptions(max_gap=0))
    f.read([1])
    gets = data_gets(log, "part.arrow")
    size = pair.stat().st_size
    assert len(gets) == len(f.blocks([1])) + 2
    last_end = int(f.meta.regions["offset"][-1] + f.meta.regions["length"][-1])
    assert {"bytes=0-15", f"bytes={last_end}-{size - 1}"} <= {r["range"] for r in gets}
    log.clear()
    f.read([2])
    assert len(data_gets(log, "part.arrow")) == len(f.blocks([2]))  # proven once per file
