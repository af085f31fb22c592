"""Every golden and broken vector through every reader surface, one expected outcome each.

Each class is one surface: its kind, the vectors it takes and the one fixture that reads or
checks a vector. The tests come from the mixins in ``surfaces.py``.
"""

from __future__ import annotations

import contextlib
import io
import re
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import arrowshuffle
from arrowshuffle import FormatError
from arrowshuffle.cli import main as cli_main
from conformance.surfaces import Known, ReadsVectors, ReadVector, ValidatesVectors, ValidateVector
from conformance.vectors import Kind, Vector

RULE = re.compile(r"\[([VM]\d+)\] ")
SPARK_QUERIES_AT_ONCE = 4
#: The classes of the errors a reader raises for broken bytes, as they appear in a traceback.
FORMAT_ERRORS = re.compile(
    r"\b(FormatError|CorruptFileError|ChecksumMismatchError|UnsupportedVersionError|"
    r"SchemaMismatchError)\b"
)

# Known failures: each names the exception the test fails with (none at present).
DATASET_READER_KNOWN: dict[str, Known] = {}
RANGED_READER_KNOWN: dict[str, Known] = {}


def run_cli(*args: str) -> tuple[int, str, str]:
    """``arrowshuffle ARGS`` in this process: exit status, stdout and stderr."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = cli_main(list(args))
    return status, out.getvalue(), err.getvalue()


def all_subpartitions(vector: Vector) -> str:
    return f"0-{vector.num_subpartitions - 1}"


# ---------------------------------------------------------------------- the Python API


class TestOpenFile(ReadsVectors):
    """``arrowshuffle.open_file`` on the local data file."""

    TAKES = "file"

    @pytest.fixture
    def read_vector(self) -> ReadVector:
        def read(vector: Vector) -> pa.Table:
            with arrowshuffle.open_file(vector.path) as f:
                return f.read(range(f.num_subpartitions), verify=True)

        return read


class TestOpenDatasetLocal(ReadsVectors):
    """``arrowshuffle.open_dataset`` on a local directory."""

    TAKES = "dataset"
    KNOWN = DATASET_READER_KNOWN

    @pytest.fixture
    def read_vector(self, dataset_dirs: dict[str, Path]) -> ReadVector:
        return lambda vector: arrowshuffle.open_dataset(dataset_dirs[vector.id]).read(verify=True)


class TestOpenDatasetMemory(ReadsVectors):
    """``arrowshuffle.open_dataset`` on fsspec's ``memory://`` file system (ranged reads)."""

    KIND = Kind.RANGED_READ
    TAKES = "dataset"
    KNOWN = RANGED_READER_KNOWN

    @pytest.fixture
    def read_vector(self, memory_datasets: dict[str, str]) -> ReadVector:
        return lambda vector: arrowshuffle.open_dataset(memory_datasets[vector.id]).read(
            verify=True
        )


@pytest.mark.s3
class TestOpenDatasetS3(ReadsVectors):
    """``arrowshuffle.open_dataset`` on the local S3 endpoint."""

    KIND = Kind.RANGED_READ
    TAKES = "dataset"
    KNOWN = RANGED_READER_KNOWN

    @pytest.fixture
    def read_vector(self, s3_endpoint: Any, s3_datasets: dict[str, str]) -> ReadVector:
        options = s3_endpoint.storage_options()
        return lambda vector: arrowshuffle.open_dataset(s3_datasets[vector.id], options).read(
            verify=True
        )


# ---------------------------------------------------------------------- polars


class TestPolarsScanFile(ReadsVectors):
    """``arrowshuffle.polars.scan`` on the local data file, collected."""

    TAKES = "file"

    @pytest.fixture
    def read_vector(self) -> ReadVector:
        pytest.importorskip("polars", reason="the polars surface needs arrowshuffle[polars]")
        from arrowshuffle import polars as ash_polars

        return lambda vector: ash_polars.scan(vector.path, verify=True).collect().to_arrow()


class TestPolarsScanDataset(ReadsVectors):
    """``arrowshuffle.polars.scan_dataset`` on a local directory, collected."""

    TAKES = "dataset"
    KNOWN = DATASET_READER_KNOWN

    @pytest.fixture
    def read_vector(self, dataset_dirs: dict[str, Path]) -> ReadVector:
        pytest.importorskip("polars", reason="the polars surface needs arrowshuffle[polars]")
        from arrowshuffle import polars as ash_polars

        return lambda vector: (
            ash_polars.scan_dataset(dataset_dirs[vector.id], verify=True).collect().to_arrow()
        )


# ---------------------------------------------------------------------- Spark


def spark_read(spark: Any, directory: Path) -> pa.Table:
    """Read a dataset through the Spark data source, its errors taken as the reader's.

    Spark carries a reader's error in its own exception, the traceback in its message: an
    arrowshuffle format error there is raised as that error, anything else as it is.
    """
    try:
        frame = spark.read.format("arrowshuffle").option("verify", "true").load(str(directory))
        return frame.toArrow()
    except Exception as exc:
        message = str(exc)
        rule = RULE.search(message)
        if rule is None or FORMAT_ERRORS.search(message) is None:
            raise
        raise FormatError(message, rule=rule.group(1)) from exc


@pytest.fixture(scope="session")
def spark_outcomes(spark: Any, dataset_dirs: dict[str, Path]) -> dict[str, Callable[[], pa.Table]]:
    """Every vector read once through Spark, a few queries at a time (one shared session).

    A failed query costs Spark a new Python worker; running queries side by side overlaps
    those starts. Each outcome returns the table or raises what the read raised.
    """
    import arrowshuffle.spark as ash_spark

    ash_spark.register(spark)

    def outcome(vector_id: str) -> Callable[[], pa.Table]:
        try:
            table = spark_read(spark, dataset_dirs[vector_id])
        except Exception as exc:
            error = exc

            def fail() -> pa.Table:
                raise error

            return fail
        return lambda: table

    ids = sorted(dataset_dirs)
    with ThreadPoolExecutor(max_workers=SPARK_QUERIES_AT_ONCE) as pool:
        return dict(zip(ids, pool.map(outcome, ids), strict=True))


@pytest.mark.spark
class TestSparkDataSource(ReadsVectors):
    """``spark.read.format("arrowshuffle")`` with ``verify`` on a local directory."""

    TAKES = "dataset"
    ORDERED = False  # Spark partitions come back in any order
    KNOWN = DATASET_READER_KNOWN

    @pytest.fixture
    def read_vector(self, spark_outcomes: dict[str, Callable[[], pa.Table]]) -> ReadVector:
        return lambda vector: spark_outcomes[vector.id]()


# ---------------------------------------------------------------------- the command line


class TestCliRead(ReadsVectors):
    """``arrowshuffle read FILE --subpartitions 0-(N-1) --out OUT.arrow`` (checksums verified)."""

    TAKES = "file"

    @pytest.fixture
    def read_vector(self, tmp_path: Path) -> ReadVector:
        def read(vector: Vector) -> pa.Table:
            out = tmp_path / "out.arrow"
            args = ["read", str(vector.path), "--subpartitions", all_subpartitions(vector)]
            status, stdout, stderr = run_cli(*args, "--out", str(out))
            if status == 1:
                assert stderr.startswith(f"error: {vector.path} is invalid: ["), stderr
                assert stderr.count("\n") == 1 and not stdout, (stdout, stderr)
                rule = RULE.search(stderr)
                assert rule is not None, stderr
                raise FormatError(stderr, rule=rule.group(1))
            assert status == 0, stderr
            with pa.ipc.open_file(out) as reader:
                table = reader.read_all()
            assert stdout == f"wrote {table.num_rows} rows to {out}\n"
            return table

        return read


class CliValidate(ValidatesVectors):
    """``arrowshuffle validate PATH`` (``--deep`` for the deep kind): exit 0 or 1, the rule."""

    @pytest.fixture
    def validate_vector(self, dataset_dirs: dict[str, Path]) -> ValidateVector:
        def validate(vector: Vector) -> str | None:
            path = str(vector.path if self.TAKES == "file" else dataset_dirs[vector.id])
            deep = ["--deep"] if self.KIND is Kind.DEEP else []
            status, stdout, stderr = run_cli("validate", *deep, path)
            assert status in (0, 1), (status, stdout, stderr)
            assert stdout.count("\n") == 1, stdout
            if status == 0:
                assert stdout.startswith(f"OK {path}"), stdout
                return None
            assert stdout.startswith(f"INVALID {path}: "), stdout
            rule = RULE.search(stdout)
            assert rule is not None, stdout
            return rule.group(1)

        return validate


class TestCliValidateFile(CliValidate):
    TAKES = "file"


class TestCliValidateFileDeep(CliValidate):
    KIND = Kind.DEEP
    TAKES = "file"


class TestCliValidateDataset(CliValidate):
    TAKES = "dataset"


class TestCliValidateDatasetDeep(CliValidate):
    KIND = Kind.DEEP
    TAKES = "dataset"


class ApiValidate(ValidatesVectors):
    """``arrowshuffle.validate_file`` / ``validate_dataset`` (``deep=True`` for the deep kind)."""

    @pytest.fixture
    def validate_vector(self, dataset_dirs: dict[str, Path]) -> ValidateVector:
        def validate(vector: Vector) -> str | None:
            deep = self.KIND is Kind.DEEP
            if self.TAKES == "file":
                report = arrowshuffle.validate_file(vector.path, deep=deep)
                return None if report.ok else report.violations[0].rule
            found = arrowshuffle.validate_dataset(dataset_dirs[vector.id], deep=deep)
            return None if found.ok else found.all_violations[0][1].rule

        return validate


class TestApiValidateFile(ApiValidate):
    TAKES = "file"


class TestApiValidateFileDeep(ApiValidate):
    KIND = Kind.DEEP
    TAKES = "file"


class TestApiValidateDataset(ApiValidate):
    TAKES = "dataset"


class TestApiValidateDatasetDeep(ApiValidate):
    KIND = Kind.DEEP
    TAKES = "dataset"
