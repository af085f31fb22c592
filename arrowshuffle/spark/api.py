"""Plain-Python entry points: register the data source, write and read DataFrames."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import subprocess
import sys
from collections.abc import Sequence
from typing import Any

from arrowshuffle.format.errors import InvalidOptionError, import_optional
from arrowshuffle.format.partitioners.base import check_num_subpartitions
from arrowshuffle.format.partitioners.range_partitioner import (
    boundaries_from_sample,
    default_sample_size,
    encode_boundaries,
)
from arrowshuffle.readers.dataset import ShuffleDataset, open_dataset
from arrowshuffle.readers.integrity import Verify, resolve_verify
from arrowshuffle.readers.storage import resolve
from arrowshuffle.spark.errors import spark_errors
from arrowshuffle.spark.options import (
    DEFAULT_PARTITIONING,
    FORMAT_NAME,
    parse_read_options,
    parse_write_options,
)
from arrowshuffle.spark.session import SparkUnavailableError
from arrowshuffle.writers.dataset_writer import exists_error, normalize_mode, read_manifest

#: Spark's seed for ``hash()`` and ``repartition``: only then do the JVM's ids match.
SPARK_SEED = 42
#: The column :func:`write` adds to carry the JVM-computed subpartition; never stored.
SUBPARTITION_COLUMN = "__arrowshuffle_subpartition__"

__all__ = [
    "FORMAT_NAME",
    "SUBPARTITION_COLUMN",
    "range_boundaries",
    "read",
    "register",
    "write",
]


def register(spark: Any) -> None:
    """Register the ``arrowshuffle`` data source with ``spark`` (a SparkSession).

    After this, ``df.write.format("arrowshuffle")`` and ``spark.read.format("arrowshuffle")``
    work in that session. Registering again is harmless.

    Raises:
        MissingExtraError: pyspark is not installed.
        InvalidOptionError: ``spark`` is not a SparkSession.
    """
    import_optional("pyspark.sql.datasource", "spark", "arrowshuffle.spark")
    check_session(spark)
    if getattr(spark, _REGISTERED, False):
        return  # registering again makes Spark log that it replaced the source
    check_worker_python(spark)
    from arrowshuffle.spark.datasource import ArrowShuffleDataSource

    spark.dataSource.register(ArrowShuffleDataSource)
    with contextlib.suppress(AttributeError, TypeError):
        setattr(spark, _REGISTERED, True)


#: Marks a session whose data source registry holds the arrowshuffle source.
_REGISTERED = "_arrowshuffle_registered"


def check_worker_python(spark: Any) -> None:
    """On a local session, refuse Python workers that cannot import arrowshuffle.

    Spark starts its Python workers with ``spark.pyspark.python``, else ``PYSPARK_PYTHON``,
    else ``python3`` from PATH: with a virtual environment that is not activated, that is
    another interpreter, and every task would fail deep in a Py4J trace. A cluster's workers
    are not this machine's, so only local masters are checked.

    Raises:
        SparkUnavailableError: the workers' interpreter cannot import arrowshuffle.
    """
    try:
        master = str(spark.sparkContext.master)
        configured = spark.sparkContext.getConf().get("spark.pyspark.python")
    except Exception:  # Spark Connect has no SparkContext: its workers are elsewhere
        return
    if not master.startswith("local"):
        return
    python = configured or os.environ.get("PYSPARK_PYTHON") or "python3"
    problem = _import_problem(python)
    if problem:
        raise SparkUnavailableError(
            f"Spark's Python workers run {python}, which cannot import arrowshuffle "
            f"({problem}); start Spark with PYSPARK_PYTHON={sys.executable} (the interpreter "
            "running this code), or activate its environment before starting Python"
        )


@functools.lru_cache(maxsize=8)
def _import_problem(python: str) -> str:
    """Why ``python`` cannot import arrowshuffle, or ``""`` when it can."""
    try:
        done = subprocess.run(
            [python, "-c", "import arrowshuffle.spark.datasource"],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return f"it cannot be started: {exc}"
    if done.returncode == 0:
        return ""
    lines = [line for line in done.stderr.strip().splitlines() if line.strip()]
    return lines[-1] if lines else f"exit status {done.returncode}"


def check_session(spark: Any) -> None:
    """Raise :class:`InvalidOptionError` unless ``spark`` looks like a SparkSession."""
    # Duck-typed: a classic and a Spark Connect session are unrelated classes.
    if not hasattr(spark, "dataSource") or not hasattr(spark, "read"):
        raise InvalidOptionError(
            f"expected a SparkSession (with a data source registry), found {type(spark).__name__}"
        )


def _option_text(name: str, value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (dict, list)):
        return json.dumps(value)
    if isinstance(value, (str, int, float)):
        return str(value)
    raise InvalidOptionError(
        f"option {name} must be a string, number, bool or JSON-serializable dict/list, "
        f"found {type(value).__name__}"
    )


def _quoted(name: str) -> str:
    """A column reference that takes ``name`` literally (dots and spaces included)."""
    return "`" + name.replace("`", "``") + "`"


def _columns(partition_by: str | Sequence[str] | None) -> list[str]:
    if partition_by is None:
        return []
    if isinstance(partition_by, str):
        return [c.strip() for c in partition_by.split(",")]
    return list(partition_by)


def range_boundaries(
    df: Any,
    column: str,
    num_subpartitions: int,
    *,
    sample_size: int | None = None,
    seed: int = 0,
) -> list[Any]:
    """Range boundaries for ``df``'s ``column``, drawn on the driver from a sample.

    Spark samples about three times ``sample_size`` keys (as its own ``RangePartitioner``
    oversamples), the driver cuts the sample down to ``sample_size`` and splits it into
    ``num_subpartitions`` equal parts. Two Spark jobs: a count and the sample.

    Args:
        df: the Spark DataFrame.
        column: the key column.
        num_subpartitions: how many ranges.
        sample_size: how many keys to keep (default 100 per subpartition, 10 000 .. 1 000 000).
        seed: the seed of the sample.

    Returns:
        At most ``num_subpartitions - 1`` strictly ascending boundaries, as the JSON values
        the ``boundaries`` partitioner option takes (and the spec records).

    Raises:
        InvalidOptionError: ``df`` is not a DataFrame or has no such column, its type cannot be
            range partitioned, or ``num_subpartitions`` is not a positive integer.
    """
    F = import_optional("pyspark.sql.functions", "spark", "arrowshuffle.spark")
    from arrowshuffle.spark.types import writer_arrow_schema

    if not hasattr(df, "sparkSession") or not hasattr(df, "select"):
        raise InvalidOptionError(f"expected a Spark DataFrame, found {type(df).__name__}")
    num_subpartitions = check_num_subpartitions(num_subpartitions)
    if column not in df.columns:
        raise InvalidOptionError(
            f"range partitioning by {column!r}, which the DataFrame does not have; its columns "
            f"are {df.columns}"
        )
    keys = df.select(F.col(_quoted(column)))
    key_type = writer_arrow_schema(keys.schema).field(0).type
    size = sample_size if sample_size is not None else default_sample_size(num_subpartitions)
    total = keys.count()
    if total == 0:
        return []
    # Oversampled so that a Bernoulli sample rarely falls short of ``size``.
    fraction = min(1.0, 3.0 * size / total)
    sample = keys.sample(withReplacement=False, fraction=fraction, seed=seed).toArrow()
    values = sample.column(0).combine_chunks().cast(key_type)
    bounds = boundaries_from_sample(values, num_subpartitions, sample_size=size, seed=seed)
    return encode_boundaries(bounds)


def _num_partitions(df: Any) -> int | None:
    """How many Spark partitions (producers) write ``df``, if the session can say."""
    try:
        return int(df.rdd.getNumPartitions())
    except Exception:  # Spark Connect has no RDDs
        return None


def _producer_options(
    df: Any, name: str | None, num_subpartitions: int, given: dict[str, Any]
) -> dict[str, Any]:
    """The partitioner options for ``forward``/``rescale``, checked against ``df`` up front.

    Raises:
        InvalidOptionError: ``forward`` with more Spark partitions than subpartitions;
            ``rescale`` when the number of partitions is unknown and not given.
    """
    if name not in ("forward", "rescale") or "producer_index" in given:
        return given
    producers = _num_partitions(df)
    if name == "forward" and producers is not None and producers > num_subpartitions:
        raise InvalidOptionError(
            f"the forward partitioner writes Spark partition i to subpartition i; the "
            f"DataFrame has {producers} partitions, num_subpartitions is {num_subpartitions}: "
            f"repartition it to at most {num_subpartitions}, or use the rescale partitioner"
        )
    if name == "rescale" and "num_producers" not in given:
        if producers is None:
            raise InvalidOptionError(
                "the rescale partitioner needs partitioner_options num_producers (the "
                "DataFrame's number of partitions), which this session cannot tell"
            )
        return {**given, "num_producers": producers}
    return given


def write(
    df: Any,
    path: str | os.PathLike[str],
    *,
    num_subpartitions: int,
    partition_by: str | Sequence[str] | None = None,
    partitioner: str | None = None,
    mode: str = "error",
    storage_options: dict[str, Any] | None = None,
    **options: Any,
) -> ShuffleDataset:
    """Write ``df`` as a shuffle dataset at ``path`` and return it opened.

    Each Spark partition of ``df`` becomes one shuffle file. For the ``hash`` partitioner (the
    default when ``partition_by`` is given) Spark computes every row's subpartition in the JVM
    as ``pmod(hash(cols), num_subpartitions)``, so subpartition ``s`` holds exactly the rows
    ``df.repartition(num_subpartitions, *cols)`` puts in partition ``s``.

    The options, the save mode and the DataFrame's columns are checked here, before Spark runs
    a job; an error the data source raises inside Spark all the same (a task's, the commit's)
    is raised as its own class with its own message, chained from Spark's exception.

    Args:
        df: the Spark DataFrame.
        path: the dataset directory, local (relative to this process's current directory)
            or any fsspec URL; created if missing.
        num_subpartitions: how many subpartitions every file is split into.
        partition_by: the key column(s), a list or ``"k1,k2"``.
        partitioner: the partitioner name (``hash`` when ``partition_by`` is given). Every
            Spark partition of ``df`` is one producer: ``forward`` writes partition ``i`` to
            subpartition ``i`` (at most ``num_subpartitions`` partitions), ``rescale`` takes
            the number of partitions as ``num_producers``, and ``range`` draws its boundaries
            once, on the driver, from a sample (:func:`range_boundaries`), unless
            ``partitioner_options`` gives ``boundaries``.
        mode: Spark's save modes: ``error`` (the default; also ``errorifexists``) refuses an
            existing dataset before any job runs, ``overwrite`` replaces it, ``append`` adds
            to it, ``ignore`` keeps it and writes nothing. The commit checks the mode again:
            a dataset another job created meanwhile fails an ``error`` or ``overwrite`` write
            with :class:`~arrowshuffle.format.errors.CommitConflictError`.
        storage_options: fsspec options for URLs (credentials, endpoint, ...).
        **options: other writer options: ``memory``, ``compression``, ``max_batch_rows``,
            ``partitioner_options`` (a dict); anything else is a storage option (refused for
            a local path, where it can only be a misspelt option).

    Returns:
        The dataset now at ``path`` (in ``ignore`` mode, the one that was already there).

    Raises:
        InvalidOptionError: a bad option, or an existing dataset in ``error`` mode.
        SchemaMismatchError: an ``append`` of data with another schema.
        CommitConflictError: another job committed to the dataset while this one wrote.
        MissingExtraError: pyspark is not installed.
    """
    F = import_optional("pyspark.sql.functions", "spark", "arrowshuffle.spark")
    if not hasattr(df, "sparkSession") or not hasattr(df, "write"):
        raise InvalidOptionError(f"expected a Spark DataFrame, found {type(df).__name__}")
    register(df.sparkSession)
    from arrowshuffle.spark.datasource import ArrowShuffleWriter

    mode = normalize_mode(mode)
    by = _columns(partition_by)
    name = (partitioner or ("hash" if by else "")).lower() or None
    target = os.fspath(path)
    settings: dict[str, Any] = {"num_subpartitions": num_subpartitions, **options}
    if by:
        settings["partition_by"] = ",".join(by)
    if name is not None:
        settings["partitioner"] = name
    if storage_options:
        settings["storage_options"] = storage_options
    settings["save_mode"] = mode
    parse_write_options(_option_texts(settings, target))  # before any Spark job (sampling)
    for column in by:
        if column not in df.columns:  # Spark's own error would name the hash expression
            raise InvalidOptionError(
                f"option partition_by names {column!r}, which the DataFrame does not have; "
                f"its columns are {df.columns}"
            )
    checks_existing = mode in ("error", "ignore")
    if checks_existing and read_manifest(resolve(target, storage_options)) is not None:
        if mode == "ignore":
            return open_dataset(target, storage_options)
        raise exists_error(target)
    given = dict(options.get("partitioner_options") or {})
    chosen = _producer_options(df, name, num_subpartitions, given)
    if name == "range" and len(by) == 1 and "boundaries" not in chosen and "sample" not in chosen:
        sampling = {k: chosen.pop(k) for k in ("sample_size", "seed") if k in chosen}
        chosen["boundaries"] = range_boundaries(df, by[0], num_subpartitions, **sampling)
    if chosen:
        settings["partitioner_options"] = chosen
    seed = given.get("seed", SPARK_SEED)
    if name == "hash" and by and seed == SPARK_SEED:
        if SUBPARTITION_COLUMN in df.columns:
            raise InvalidOptionError(f"the DataFrame already has a column {SUBPARTITION_COLUMN}")
        ids = F.pmod(F.hash(*[F.col(_quoted(c)) for c in by]), F.lit(num_subpartitions))
        df = df.withColumn(SUBPARTITION_COLUMN, ids)
        settings["subpartition_column"] = SUBPARTITION_COLUMN
    texts = _option_texts(settings, spark_path(target))
    overwrite = mode != "append"
    # What Spark's writer would refuse, refused here: columns, partitioner, the save mode.
    ArrowShuffleWriter(parse_write_options(texts), df.schema, overwrite)
    writer = df.write.format(FORMAT_NAME).mode("overwrite" if overwrite else "append")
    for key, value in texts.items():
        if key != "path":
            writer = writer.option(key, value)
    with spark_errors():
        writer.save(texts["path"])
    return open_dataset(target, storage_options)


def spark_path(path: str) -> str:
    """``path`` as Spark's Python workers must be given it: a local path made absolute here.

    The workers resolve a relative path in the directory Spark started in, not in this
    process's current directory.
    """
    if "://" in path or path.startswith("file:"):
        return path
    return os.path.abspath(path)


def _option_texts(settings: dict[str, Any], path: str) -> dict[str, str]:
    """The options as the data source receives them (strings), with the path."""
    texts = {key: _option_text(key, value) for key, value in settings.items()}
    texts["path"] = path
    return texts


def _default_parallelism(spark: Any) -> int | None:
    """The session's default parallelism (its cores), if the session exposes it."""
    try:
        return int(spark.sparkContext.defaultParallelism)
    except Exception:  # Spark Connect has no SparkContext: the planner's cores then
        return None


def _columns_text(columns: Sequence[str]) -> str:
    """The ``columns`` option: names joined by commas, or a JSON list if that is ambiguous.

    A string is the option's text already (``"a,b"``).
    """
    if isinstance(columns, str):
        return columns
    names = [str(c) for c in columns]
    plain = all(n and n == n.strip() and "," not in n for n in names)
    if plain and names and not names[0].startswith("["):
        return ",".join(names)
    return json.dumps(names)


def read(
    spark: Any,
    path: str | os.PathLike[str],
    *,
    partitioning: str | None = None,
    consumers: int | None = None,
    subpartitions: int | str | Sequence[int] | None = None,
    columns: Sequence[str] | None = None,
    target_bytes: int | str | None = None,
    skew_factor: float | None = None,
    skew_min_bytes: int | str | None = None,
    max_tasks: int | None = None,
    parallelism: int | None = None,
    verify: Verify = "auto",
    storage_options: dict[str, Any] | None = None,
    **options: Any,
) -> Any:
    """Read the dataset at ``path`` as a Spark DataFrame.

    By default every Spark partition reads one task of the dataset's read plan
    (:meth:`~arrowshuffle.readers.dataset.ShuffleDataset.plan`): small subpartitions coalesced,
    skewed ones split.

    Args:
        spark: the SparkSession.
        path: the dataset directory, local (relative to this process's current directory)
            or any fsspec URL.
        partitioning: ``"plan"`` (the default), ``"subpartition"`` (Spark partition ``i``
            reads the ``i``-th selected subpartition) or ``"consumers"`` (implied by
            ``consumers``).
        consumers: split the subpartitions into this many contiguous ranges, one Spark
            partition each.
        subpartitions: read only these: an int, a list, or text such as ``"0-7"``/``"1,4"``.
        columns: read only these columns, in this order (Spark does not tell a Python data
            source which columns a query uses: without it every column is read); a list of
            names, or the option's text (``"a,b"``).
        target_bytes: the bytes a planned task aims at (``"128MiB"``); by default the selected
            bytes over ``parallelism``, within 4 MiB .. 128 MiB.
        skew_factor: a subpartition above this multiple of the median (default 5) ...
        skew_min_bytes: ... and above this size (default 256 MiB) is split.
        max_tasks: the most planned tasks.
        parallelism: the tasks a plan without ``target_bytes`` aims to fill (default: the
            session's default parallelism).
        verify: check every chunk's CRC32C while reading: ``"auto"`` (the default) for
            object stores and not for local files, ``True`` always, ``False`` never.
        storage_options: fsspec options for URLs.
        **options: other options, passed as storage options.

    The options (and a ``subpartitions`` selection, against the dataset) are checked here,
    before Spark plans the query; an error the data source raises inside Spark while loading
    (no dataset at ``path``, say) is raised as its own class, chained from Spark's exception.

    Raises:
        InvalidOptionError: a bad option value, plan options with another partitioning, or
            subpartitions the dataset does not have.
        MissingObjectError: no dataset at ``path``.
    """
    register(spark)
    settings: dict[str, Any] = dict(options)
    if partitioning is not None:
        settings["partitioning"] = partitioning
    if consumers is not None:
        settings["consumers"] = consumers
    if subpartitions is not None:
        if isinstance(subpartitions, (str, int)):
            settings["subpartitions"] = str(subpartitions)
        else:
            settings["subpartitions"] = ",".join(str(int(s)) for s in subpartitions)
    if columns is not None:
        settings["columns"] = _columns_text(columns)
    plan = {
        "target_bytes": target_bytes,
        "skew_factor": skew_factor,
        "skew_min_bytes": skew_min_bytes,
        "max_tasks": max_tasks,
        "parallelism": parallelism,
    }
    settings.update({k: v for k, v in plan.items() if v is not None})
    mode = (partitioning or DEFAULT_PARTITIONING).strip().lower()
    planned = mode == "plan" and consumers is None
    if planned and target_bytes is None and parallelism is None:
        cores = _default_parallelism(spark)
        if cores is not None:
            settings["parallelism"] = cores
    if verify != "auto":
        settings["verify"] = resolve_verify(verify, remote=False)
    if storage_options:
        settings["storage_options"] = storage_options
    target = spark_path(os.fspath(path))
    texts = _option_texts(settings, target)
    config = parse_read_options(texts)  # the data source's own checks, before Spark's
    if config.subpartitions is not None:
        # Checked by Spark only when the query runs, where this call can no longer help.
        config.selection(open_dataset(target, config.storage_options).num_subpartitions)
    reader = spark.read.format(FORMAT_NAME)
    for key, value in texts.items():
        if key != "path":
            reader = reader.option(key, value)
    with spark_errors():
        return reader.load(target)
