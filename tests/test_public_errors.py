"""The error tree is closed: the public API raises only ArrowShuffleError subclasses.

Each case calls one public function or class (of ``arrowshuffle``, ``arrowshuffle.polars`` or
``arrowshuffle.spark``) with a bad argument: a wrong type, None, a negative number, a missing
path, a file of another format. The sweep asserts that what escapes is an
:class:`~arrowshuffle.ArrowShuffleError` of the expected class. To cover a new public
function, add cases to ``CASES``; ``test_the_sweep_covers_every_public_callable`` fails until
one exists.

Calls that do not match a signature at all (an unknown keyword, a missing required argument)
raise Python's own TypeError before any code of ours runs; they are not part of the sweep.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import arrowshuffle as ash
from arrowshuffle.cli import main

# ---------------------------------------------------------------------- the world the calls see


@dataclass(frozen=True)
class World:
    """Files the cases point at: good ones, missing ones and ones of another format."""

    root: Path
    file: str  # a valid shuffle file
    dataset: str  # a valid dataset directory
    missing: str  # nothing there
    text: str  # a text file, with a text "index" beside it
    plain: str  # a plain Arrow IPC file without an index
    bad_manifest: str  # a directory whose manifest is not JSON

    def opened_file(self) -> ash.ShuffleFile:
        return ash.open_file(self.file)

    def opened_dataset(self) -> ash.ShuffleDataset:
        return ash.open_dataset(self.dataset)


TABLE = pa.table({"k": list(range(200)), "v": [f"row-{i}" for i in range(200)]})


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> World:
    root = tmp_path_factory.mktemp("public-errors")
    ash.write(TABLE, root / "good.arrow", num_subpartitions=4, by="k")
    ash.write_dataset(TABLE, root / "ds", num_subpartitions=4, by="k")
    (root / "notes.txt").write_text("hello")
    (root / "notes.txt.idx").write_text("not an index " * 20)
    with pa.ipc.new_file(root / "plain.arrow", TABLE.schema) as writer:
        writer.write_table(TABLE)
    (root / "broken").mkdir()
    (root / "broken" / "_arrowshuffle_manifest.json").write_text("{not json")
    return World(
        root=root,
        file=str(root / "good.arrow"),
        dataset=str(root / "ds"),
        missing=str(root / "nothing-here"),
        text=str(root / "notes.txt"),
        plain=str(root / "plain.arrow"),
        bad_manifest=str(root / "broken"),
    )


# ---------------------------------------------------------------------- the cases


@dataclass(frozen=True)
class Case:
    """One bad call: ``covers`` names the public callable it exercises."""

    covers: str
    what: str
    call: Callable[[World], object]
    expected: type[ash.ArrowShuffleError]
    #: The optional package the callable needs; without it, MissingExtraError is expected.
    engine: str | None = None

    @property
    def id(self) -> str:
        return f"{self.covers}: {self.what}"


def _polars() -> Any:
    import arrowshuffle.polars

    return arrowshuffle.polars


def _spark() -> Any:
    import arrowshuffle.spark

    return arrowshuffle.spark


def _write_one(batch: Any, ids: Any = None) -> Callable[[World], object]:
    def call(w: World) -> object:
        with ash.ShuffleFileWriter(w.root / "writer.arrow", TABLE.schema, 4) as writer:
            if ids is None:
                writer.write(batch)
            else:
                writer.write(batch, subpartitions=ids)
        return writer

    return call


def _failing_query() -> Any:
    pl = pytest.importorskip("polars")
    return pl.LazyFrame({"k": ["a"]}).select(pl.col("k").cast(pl.Int64, strict=True))


def _unplannable_query(w: World) -> Any:
    pl = pytest.importorskip("polars")
    return pl.scan_parquet(str(w.root / "no-such-*.parquet"))


Invalid = ash.InvalidOptionError
Missing = ash.MissingObjectError
Corrupt = ash.CorruptFileError

CASES = [
    # open_file / ShuffleFile
    Case("open_file", "None", lambda w: ash.open_file(None), Invalid),
    Case("open_file", "an int path", lambda w: ash.open_file(3), Invalid),
    Case("open_file", "a missing path", lambda w: ash.open_file(w.missing), Missing),
    Case("open_file", "a plain Arrow file", lambda w: ash.open_file(w.plain), Missing),
    Case("open_file", "a text file", lambda w: ash.open_file(w.text), ash.FormatError),
    Case("open_file", "storage options a list", lambda w: ash.open_file(w.file, [1]), Invalid),
    Case("open_file", "an unknown protocol", lambda w: ash.open_file("nope://x/y"), Invalid),
    Case("ShuffleFile", "options an int", lambda w: ash.open_file(w.file, options=1), Invalid),
    Case("cogroup", "None", lambda w: ash.cogroup(None), Invalid),
    Case("cogroup", "a list", lambda w: ash.cogroup([w.dataset]), Invalid),
    Case("cogroup", "an int input", lambda w: ash.cogroup({"a": 3}), Invalid),
    Case("cogroup", "a missing input", lambda w: ash.cogroup({"a": w.missing}), Missing),
    Case("cogroup", "a file input", lambda w: ash.cogroup({"a": w.file}), Missing),
    Case(
        "cogroup",
        "target_bytes=-1",
        lambda w: ash.cogroup({"a": w.dataset}, target_bytes=-1),
        Invalid,
    ),
    Case(
        "cogroup", "parallelism=0", lambda w: ash.cogroup({"a": w.dataset}, parallelism=0), Invalid
    ),
    Case("CoGroup", "read(99)", lambda w: ash.cogroup({"a": w.dataset}).read(99), Invalid),
    Case("CoGroup", "read('x')", lambda w: ash.cogroup({"a": w.dataset}).read("x"), Invalid),
    Case(
        "CoGroup",
        "map(threads=0)",
        lambda w: list(ash.cogroup({"a": w.dataset}).map(len, threads=0)),
        Invalid,
    ),
    Case("ShuffleFile", "read(-1)", lambda w: w.opened_file().read(-1), Invalid),
    Case("ShuffleFile", "read(99)", lambda w: w.opened_file().read(99), Invalid),
    Case("ShuffleFile", "read(1.5)", lambda w: w.opened_file().read(1.5), Invalid),
    Case("ShuffleFile", "read([None])", lambda w: w.opened_file().read([None]), Invalid),
    Case("ShuffleFile", "read(columns=1)", lambda w: w.opened_file().read(columns=1), Invalid),
    Case(
        "ShuffleFile",
        "read(unknown column)",
        lambda w: w.opened_file().read(columns=["zz"]),
        Invalid,
    ),
    Case(
        "ShuffleFile",
        "read(verify='x')",
        lambda w: w.opened_file().read(verify="x"),
        Invalid,
    ),
    Case(
        "ShuffleFile",
        "read(options=str)",
        lambda w: w.opened_file().read(options="fast"),
        Invalid,
    ),
    Case(
        "ShuffleFile",
        "iter_batches(-1)",
        lambda w: list(w.opened_file().iter_batches(-1)),
        Invalid,
    ),
    Case("ShuffleFile", "entries('x')", lambda w: w.opened_file().entries("x"), Invalid),
    Case("ShuffleFile", "entries(-1)", lambda w: w.opened_file().entries(-1), Invalid),
    Case(
        "ShuffleFile", "blocks(regions='x')", lambda w: w.opened_file().blocks(regions="x"), Invalid
    ),
    Case(
        "ShuffleFile",
        "plan(skew_factor='x')",
        lambda w: w.opened_file().plan(skew_factor="x"),
        Invalid,
    ),
    Case("ShuffleFile", "read_tasks(None)", lambda w: w.opened_file().read_tasks(None), Invalid),
    Case("ShuffleFile", "read_tasks([1])", lambda w: w.opened_file().read_tasks([1]), Invalid),
    Case(
        "ShuffleFile",
        "file_tasks(columns=1)",
        lambda w: w.opened_file().file_tasks(columns=1),
        Invalid,
    ),
    # open_dataset / ShuffleDataset
    Case("open_dataset", "None", lambda w: ash.open_dataset(None), Invalid),
    Case("open_dataset", "a missing path", lambda w: ash.open_dataset(w.missing), Missing),
    Case("open_dataset", "a file", lambda w: ash.open_dataset(w.file), ash.ShuffleIOError),
    Case(
        "open_dataset", "a manifest not JSON", lambda w: ash.open_dataset(w.bad_manifest), Corrupt
    ),
    Case("ShuffleDataset", "file('x')", lambda w: w.opened_dataset().file("x"), Invalid),
    Case("ShuffleDataset", "file(99)", lambda w: w.opened_dataset().file(99), Invalid),
    Case("ShuffleDataset", "read(-1)", lambda w: w.opened_dataset().read(-1), Invalid),
    Case("ShuffleDataset", "read(2.5)", lambda w: w.opened_dataset().read(2.5), Invalid),
    Case("ShuffleDataset", "read(task='x')", lambda w: w.opened_dataset().read(task="x"), Invalid),
    Case(
        "ShuffleDataset",
        "plan(target_bytes=-1)",
        lambda w: w.opened_dataset().plan(target_bytes=-1),
        Invalid,
    ),
    Case(
        "ShuffleDataset",
        "plan(max_tasks=0)",
        lambda w: w.opened_dataset().plan(max_tasks=0),
        Invalid,
    ),
    Case(
        "PlannedRead",
        "a task of another dataset shape",
        lambda w: w.opened_dataset().read(
            task=ash.PlannedRead(range(0, 9), (0,), None, bytes=1, rows=1)
        ),
        Invalid,
    ),
    # validation
    Case("validate_file", "None", lambda w: ash.validate_file(None), Invalid),
    Case("validate_file", "a missing path", lambda w: ash.validate_file(w.missing), Missing),
    Case("validate_dataset", "None", lambda w: ash.validate_dataset(None), Invalid),
    Case("validate_dataset", "a missing path", lambda w: ash.validate_dataset(w.missing), Missing),
    Case(
        "validate_dataset",
        "workers=-1",
        lambda w: ash.validate_dataset(w.dataset, workers=-1),
        Invalid,
    ),
    Case(
        "validate_dataset",
        "workers='x'",
        lambda w: ash.validate_dataset(w.dataset, workers="x"),
        Invalid,
    ),
    Case(
        "validate_dataset",
        "progress=1",
        lambda w: ash.validate_dataset(w.dataset, progress=1),
        Invalid,
    ),
    # layout and assignment
    Case("file_layout", "None", lambda w: ash.file_layout(None), Invalid),
    Case("file_layout", "a path", lambda w: ash.file_layout(w.file), Invalid),
    Case("assign", "negative subpartitions", lambda w: ash.assign(-1, 2), Invalid),
    Case("assign", "None", lambda w: ash.assign(None, None), Invalid),
    Case("assign", "a float", lambda w: ash.assign(4.5, 2), Invalid),
    Case("assign", "an unknown pattern", lambda w: ash.assign(4, 2, "x"), Invalid),
    Case(
        "assign",
        "negative producers",
        lambda w: ash.assign(4, 2, "pointwise", num_producers=-1),
        Invalid,
    ),
    # partitioners
    Case(
        "make_partitioner",
        "an unknown name",
        lambda w: ash.make_partitioner("nope", num_subpartitions=4),
        Invalid,
    ),
    Case(
        "make_partitioner",
        "None",
        lambda w: ash.make_partitioner(None, num_subpartitions=4),
        Invalid,
    ),
    Case(
        "make_partitioner",
        "an unknown option",
        lambda w: ash.make_partitioner("hash", num_subpartitions=4, by="k", bogus=1),
        Invalid,
    ),
    Case(
        "make_partitioner",
        "by=1",
        lambda w: ash.make_partitioner("hash", num_subpartitions=4, by=1),
        Invalid,
    ),
    Case("partitioner_from_spec", "None", lambda w: ash.partitioner_from_spec(None, 4), Invalid),
    Case(
        "partitioner_from_spec",
        "a string",
        lambda w: ash.partitioner_from_spec("hash", 4),
        Invalid,
    ),
    Case(
        "partitioner_from_spec",
        "negative subpartitions",
        lambda w: ash.partitioner_from_spec({"name": "hash", "columns": ["k"]}, -1),
        Invalid,
    ),
    # options and memory
    Case("ReadOptions", "max_gap=-1", lambda w: ash.ReadOptions(max_gap=-1), Invalid),
    Case("ReadOptions", "io_threads='x'", lambda w: ash.ReadOptions(io_threads="x"), Invalid),
    Case("MemoryPool", "-1 bytes", lambda w: ash.MemoryPool(-1), Invalid),
    Case("MemoryPool", "None", lambda w: ash.MemoryPool(None), Invalid),
    Case("set_default_memory_pool", "'x'", lambda w: ash.set_default_memory_pool("x"), Invalid),
    Case("set_default_memory_pool", "a list", lambda w: ash.set_default_memory_pool([]), Invalid),
    # writing
    Case(
        "write",
        "None data",
        lambda w: ash.write(None, w.root / "o.arrow", num_subpartitions=2),
        Invalid,
    ),
    Case(
        "write",
        "a dict",
        lambda w: ash.write({"k": [1]}, w.root / "o.arrow", num_subpartitions=2),
        Invalid,
    ),
    Case("write", "None path", lambda w: ash.write(TABLE, None, num_subpartitions=2), Invalid),
    Case(
        "write",
        "negative subpartitions",
        lambda w: ash.write(TABLE, w.root / "o.arrow", num_subpartitions=-1),
        Invalid,
    ),
    Case(
        "write",
        "None subpartitions",
        lambda w: ash.write(TABLE, w.root / "o.arrow", num_subpartitions=None),
        Invalid,
    ),
    Case(
        "write",
        "an unknown column",
        lambda w: ash.write(TABLE, w.root / "o.arrow", num_subpartitions=2, by="zz"),
        Invalid,
    ),
    Case(
        "write",
        "partitioner=1",
        lambda w: ash.write(TABLE, w.root / "o.arrow", num_subpartitions=2, partitioner=1),
        Invalid,
    ),
    Case(
        "write",
        "compression=1",
        lambda w: ash.write(TABLE, w.root / "o.arrow", num_subpartitions=2, compression=1),
        Invalid,
    ),
    Case(
        "write",
        "max_batch_rows=-1",
        lambda w: ash.write(TABLE, w.root / "o.arrow", num_subpartitions=2, max_batch_rows=-1),
        Invalid,
    ),
    Case(
        "write",
        "memory=[]",
        lambda w: ash.write(TABLE, w.root / "o.arrow", num_subpartitions=2, memory=[]),
        Invalid,
    ),
    Case(
        "write",
        "a directory as path",
        lambda w: ash.write(TABLE, w.root, num_subpartitions=2),
        ash.ShuffleIOError,
    ),
    Case(
        "write_dataset",
        "None data",
        lambda w: ash.write_dataset(None, w.root / "wd", num_subpartitions=2),
        Invalid,
    ),
    Case(
        "write_dataset",
        "mode=1",
        lambda w: ash.write_dataset(TABLE, w.root / "wd", num_subpartitions=2, mode=1),
        Invalid,
    ),
    Case(
        "write_dataset",
        "append another schema",
        lambda w: ash.write_dataset(
            pa.table({"z": [1.0]}), w.dataset, num_subpartitions=4, mode="append"
        ),
        ash.SchemaMismatchError,
    ),
    Case(
        "write_dataset",
        "append to a manifest not JSON",
        lambda w: ash.write_dataset(TABLE, w.bad_manifest, num_subpartitions=4, mode="append"),
        Corrupt,
    ),
    Case(
        "ShuffleFileWriter",
        "None path",
        lambda w: ash.ShuffleFileWriter(None, TABLE.schema, 4),
        Invalid,
    ),
    Case(
        "ShuffleFileWriter",
        "None schema",
        lambda w: ash.ShuffleFileWriter(w.root / "x.arrow", None, 4),
        Invalid,
    ),
    Case(
        "ShuffleFileWriter",
        "-1 subpartitions",
        lambda w: ash.ShuffleFileWriter(w.root / "x.arrow", TABLE.schema, -1),
        Invalid,
    ),
    Case(
        "ShuffleFileWriter",
        "'x' subpartitions",
        lambda w: ash.ShuffleFileWriter(w.root / "x.arrow", TABLE.schema, "x"),
        Invalid,
    ),
    Case("ShuffleFileWriter", "write(None)", _write_one(None), Invalid),
    Case(
        "ShuffleFileWriter",
        "write(another schema)",
        _write_one(pa.record_batch({"z": [1.0]})),
        ash.SchemaMismatchError,
    ),
    Case(
        "ShuffleFileWriter",
        "write(ids too short)",
        _write_one(TABLE.to_batches()[0], [0, 1]),
        Invalid,
    ),
    Case(
        "ShuffleFileWriter",
        "write(ids out of range)",
        _write_one(TABLE.to_batches()[0], [9] * 200),
        Invalid,
    ),
    Case(
        "write",
        "a stream whose producer breaks",
        lambda w: ash.write(
            pa.RecordBatchReader.from_batches(TABLE.schema, iter([1])),
            w.root / "o.arrow",
            num_subpartitions=2,
        ),
        Invalid,
    ),
    Case(
        "write",
        "a polars query that fails",
        lambda w: ash.write(_failing_query(), w.root / "o.arrow", num_subpartitions=2),
        Invalid,
    ),
    Case(
        "write",
        "a polars query that cannot be planned",
        lambda w: ash.write(_unplannable_query(w), w.root / "o.arrow", num_subpartitions=2),
        Invalid,
    ),
    # maintenance
    Case("compact", "None", lambda w: ash.compact(None), Invalid),
    Case("compact", "a missing path", lambda w: ash.compact(w.missing), Missing),
    Case(
        "compact",
        "target_file_size=-1",
        lambda w: ash.compact(w.dataset, target_file_size=-1),
        Invalid,
    ),
    Case(
        "compact",
        "target_file_size=None",
        lambda w: ash.compact(w.dataset, target_file_size=None),
        Invalid,
    ),
    Case("compact", "a manifest not JSON", lambda w: ash.compact(w.bad_manifest), Corrupt),
    Case("vacuum", "None", lambda w: ash.vacuum(None), Invalid),
    Case("vacuum", "a missing path", lambda w: ash.vacuum(w.missing), Missing),
    Case("vacuum", "older_than=-1", lambda w: ash.vacuum(w.dataset, older_than=-1), Invalid),
    Case("vacuum", "older_than=None", lambda w: ash.vacuum(w.dataset, older_than=None), Invalid),
    # arrowshuffle.polars
    Case("polars.scan", "None", lambda w: _polars().scan(None), Invalid, "polars"),
    Case("polars.scan", "a missing path", lambda w: _polars().scan(w.missing), Missing, "polars"),
    Case("polars.scan", "a text file", lambda w: _polars().scan(w.text), ash.FormatError, "polars"),
    Case(
        "polars.scan", "subpartitions=1.5", lambda w: _polars().scan(w.file, 1.5), Invalid, "polars"
    ),
    Case(
        "polars.scan",
        "consumer=-1",
        lambda w: _polars().scan(w.file, consumer=-1, num_consumers=2),
        Invalid,
        "polars",
    ),
    Case(
        "polars.scan", "options=1", lambda w: _polars().scan(w.file, options=1), Invalid, "polars"
    ),
    Case(
        "polars.scan_file",
        "a dataset directory",
        lambda w: _polars().scan_file(w.dataset),
        Missing,
        "polars",
    ),
    Case(
        "polars.scan_dataset",
        "a file",
        lambda w: _polars().scan_dataset(w.file),
        ash.ShuffleIOError,
        "polars",
    ),
    Case("polars.scan_tasks", "None", lambda w: _polars().scan_tasks(None), Invalid, "polars"),
    Case(
        "polars.scan_tasks",
        "target_bytes=-1",
        lambda w: _polars().scan_tasks(w.dataset, target_bytes=-1),
        Invalid,
        "polars",
    ),
    Case("polars.cogroup", "None", lambda w: _polars().cogroup(None), Invalid, "polars"),
    Case(
        "polars.cogroup",
        "a missing input",
        lambda w: _polars().cogroup({"a": w.missing}),
        Missing,
        "polars",
    ),
    Case(
        "polars.PolarsCoGroup",
        "read(99)",
        lambda w: _polars().cogroup({"a": w.dataset}).read(99),
        Invalid,
        "polars",
    ),
    Case("polars.read", "None", lambda w: _polars().read(None), Invalid, "polars"),
    Case(
        "polars.read", "verify='x'", lambda w: _polars().read(w.file, verify="x"), Invalid, "polars"
    ),
    # arrowshuffle.spark helpers (no session needed: the arguments are refused first)
    Case("spark.register", "None session", lambda w: _spark().register(None), Invalid, "pyspark"),
    Case(
        "spark.read", "None session", lambda w: _spark().read(None, w.dataset), Invalid, "pyspark"
    ),
    Case(
        "spark.write",
        "None frame",
        lambda w: _spark().write(None, w.root / "sp", num_subpartitions=2),
        Invalid,
        "pyspark",
    ),
    Case(
        "spark.map_cogroups",
        "None session",
        lambda w: _spark().map_cogroups(None, {"a": w.dataset}, len, "x long"),
        Invalid,
        "pyspark",
    ),
    Case(
        "spark.compact",
        "None session",
        lambda w: _spark().compact(None, w.dataset),
        Invalid,
        "pyspark",
    ),
    Case("spark.local_session", "config=1", lambda w: _spark().local_session(config=1), Invalid),
    Case(
        "spark.range_boundaries",
        "None frame",
        lambda w: _spark().range_boundaries(None, "k", 4),
        Invalid,
        "pyspark",
    ),
]


def _present(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_only_arrowshuffle_errors_escape(case: Case, world: World) -> None:
    expected = case.expected
    if case.engine is not None and not _present(case.engine):
        expected = ash.MissingExtraError
    with pytest.raises(ash.ArrowShuffleError) as info:
        case.call(world)
    assert isinstance(info.value, expected), f"{type(info.value).__name__}: {info.value}"
    assert str(info.value).strip(), "the message is empty"


#: Exported callables the library returns and does not expect to be given: records of what a
#: call did. They are checked to be plain dataclasses, which hold data and run no code.
RECORDS = {
    "CoGroupTask",
    "CompactionReport",
    "ConsumerAssignment",
    "DatasetReport",
    "VacuumReport",
    "ValidationReport",
    "WrittenFile",
}
#: Spark helpers that take no argument to get wrong.
NO_ARGUMENTS = {"polars.clear_cache", "spark.check_spark_available", "spark.java_available"}


def _public_callables() -> set[str]:
    names = {n for n in ash.__all__ if callable(getattr(ash, n))}
    import arrowshuffle.polars
    import arrowshuffle.spark

    for prefix, module in (("polars", arrowshuffle.polars), ("spark", arrowshuffle.spark)):
        names |= {f"{prefix}.{n}" for n in module.__all__ if callable(getattr(module, n))}
    return names


def _error_classes() -> set[str]:
    """The exported exception classes, by the name the coverage check uses."""
    classes = {
        n
        for n in ash.__all__
        if isinstance(getattr(ash, n), type) and issubclass(getattr(ash, n), BaseException)
    }
    return classes | {"spark.SparkUnavailableError"}


def test_the_sweep_covers_every_public_callable() -> None:
    covered = {c.covers for c in CASES} | RECORDS | NO_ARGUMENTS | _error_classes()
    assert _public_callables() - covered == set(), "public callables without a bad-call case"
    assert covered - _public_callables() == set(), "cases for names that are not public"


def test_every_exported_error_is_in_the_tree() -> None:
    import arrowshuffle.spark

    classes = [getattr(ash, n) for n in _error_classes() if "." not in n]
    classes.append(arrowshuffle.spark.SparkUnavailableError)
    assert ash.MissingExtraError in classes and ash.CommitConflictError in classes
    assert ash.PartitioningMismatchError in classes
    assert len(classes) == 13
    for cls in classes:
        assert issubclass(cls, ash.ArrowShuffleError), cls


def test_records_are_plain_dataclasses() -> None:
    for name in RECORDS:
        assert dataclasses.is_dataclass(getattr(ash, name)), name


# ---------------------------------------------------------------------- missing extras

#: (package blocked, code run, extra named in the message)
EXTRAS = [
    (
        "polars",
        "import arrowshuffle.polars as m; m.scan({file!r})",
        "polars",
    ),
    (
        "pyspark",
        "import arrowshuffle.spark as m; m.register(object())",
        "spark",
    ),
    (
        "matplotlib",
        "import arrowshuffle as a, arrowshuffle.plot as p; "
        "p.plot_layout(a.file_layout(a.open_file({file!r})))",
        "notebooks",
    ),
    (
        "s3fs",
        "import arrowshuffle as a; a.open_file('s3://bucket/key.arrow')",
        "s3",
    ),
    (
        "pyspark",
        "import arrowshuffle.spark.datasource",
        "spark",
    ),
]


@pytest.mark.parametrize(
    ("package", "code", "extra"), EXTRAS, ids=["polars", "spark", "plot", "s3", "spark source"]
)
def test_a_missing_extra_names_what_to_install(
    package: str, code: str, extra: str, world: World
) -> None:
    # In a fresh interpreter, with the package made unimportable (None in sys.modules).
    script = (
        "import json, sys\n"
        f"sys.modules[{package!r}] = None\n"
        "import arrowshuffle\n"
        "try:\n"
        f"    {code.format(file=world.file)}\n"
        "except Exception as exc:\n"
        "    print(json.dumps({'classes': [c.__name__ for c in type(exc).__mro__],\n"
        "                      'message': str(exc), 'module': getattr(exc, 'module', None)}))\n"
        "else:\n"
        "    print(json.dumps(None))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True
    )
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result is not None, "no error raised"
    assert {"MissingExtraError", "ArrowShuffleError", "ImportError"} <= set(result["classes"])
    assert f"pip install 'arrowshuffle[{extra}]'" in result["message"]
    assert result["module"] == package


def test_missing_extra_error_survives_pickling() -> None:
    import pickle

    error = ash.MissingExtraError("polars", "polars", "arrowshuffle.polars", "no module")
    again = pickle.loads(pickle.dumps(error))
    assert type(again) is ash.MissingExtraError
    assert str(again) == str(error) and again.extra == "polars" and again.name == "polars"


# ---------------------------------------------------------------------- the CLI


@pytest.mark.parametrize(
    "argv",
    [
        ["inspect", "{missing}"],
        ["inspect", "{text}"],
        ["validate", "{plain}"],
        ["compact", "{bad_manifest}"],
        ["vacuum", "{dataset}", "--older-than", "soon"],
    ],
    ids=lambda a: " ".join(a),
)
def test_the_cli_reports_errors_as_exit_codes(
    argv: list[str], world: World, capsys: pytest.CaptureFixture[str]
) -> None:
    args = [a.format(**{k: str(v) for k, v in vars(world).items()}) for a in argv]
    status = main(args)
    err = capsys.readouterr().err
    assert status != 0
    assert "Traceback" not in err and err.strip()
