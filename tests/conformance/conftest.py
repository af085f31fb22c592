"""The conformance matrix: every vector parametrized into every surface's tests.

A surface class names the vectors it takes (``TAKES``) and its known failures (``KNOWN``); the
objects each vector needs (one-file datasets, copies in ``memory://`` and on S3) are built once
per test session.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conformance.surfaces import Known
from conformance.vectors import ALL_VECTORS, FILE_VECTORS, one_file_dataset


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Parametrize ``vector`` with the vectors of the test's surface class."""
    if "vector" not in metafunc.fixturenames or metafunc.cls is None:
        return
    takes = metafunc.cls.TAKES
    vectors = FILE_VECTORS if takes == "file" else ALL_VECTORS
    known: dict[str, Known] = metafunc.cls.KNOWN
    unknown = sorted(set(known) - {v.id for v in vectors})
    assert not unknown, f"{metafunc.cls.__name__}.KNOWN names no vector of its: {unknown}"
    metafunc.parametrize(
        "vector",
        [
            pytest.param(
                v,
                id=v.id,
                marks=[
                    pytest.mark.xfail(
                        strict=True, reason=known[v.id].reason, raises=known[v.id].raises
                    )
                ]
                if v.id in known
                else [],
            )
            for v in vectors
        ],
    )


@pytest.fixture(scope="session")
def dataset_dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Every vector as a local dataset directory: file vectors as one-file datasets."""
    root = tmp_path_factory.mktemp("conformance")
    dirs = {v.id: v.path for v in ALL_VECTORS if v.source == "dataset"}
    for vector in FILE_VECTORS:
        dirs[vector.id] = one_file_dataset(vector, root / vector.name)
    return dirs


def _upload(fs: Any, root: str, dirs: dict[str, Path]) -> dict[str, str]:
    """Copy every dataset directory (its manifest versions too) under ``root`` of ``fs``.

    Returns the path of each.
    """
    paths = {}
    for vector_id, directory in dirs.items():
        target = f"{root}/{vector_id}"
        fs.pipe(
            {
                f"{target}/{p.relative_to(directory).as_posix()}": p.read_bytes()
                for p in sorted(directory.rglob("*"))
                if p.is_file()
            }
        )
        paths[vector_id] = target
    return paths


@pytest.fixture(scope="session")
def memory_datasets(dataset_dirs: dict[str, Path]) -> Iterator[dict[str, str]]:
    """Every vector as a dataset in fsspec's memory file system: ``memory://`` URLs."""
    import fsspec

    fs = fsspec.filesystem("memory")
    root = f"/conformance-{uuid.uuid4().hex[:8]}"
    paths = _upload(fs, root, dataset_dirs)
    yield {k: f"memory://{v}" for k, v in paths.items()}
    fs.rm(root, recursive=True)


@pytest.fixture(scope="session")
def s3_datasets(s3_endpoint: Any, dataset_dirs: dict[str, Path]) -> dict[str, str]:
    """Every vector as a dataset in one bucket of the local S3 endpoint: ``s3://`` URLs."""
    import fsspec

    fs = fsspec.filesystem("s3", **s3_endpoint.storage_options())
    bucket = f"conformance-{uuid.uuid4().hex[:8]}"
    fs.mkdir(bucket)
    return {k: f"s3://{v}" for k, v in _upload(fs, bucket, dataset_dirs).items()}
