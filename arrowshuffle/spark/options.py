"""Options of the ``arrowshuffle`` Spark data source: parsed and checked once, on the driver.

Spark hands a data source its options as a case-insensitive map of strings. Known options are
parsed here into typed values; every other option is passed to fsspec as a storage option
(``endpoint_url``, ``key``, ...), with ``"true"``/``"false"`` turned into booleans. A
``storage_options`` option holding a JSON object gives storage options exactly (nested values,
case-sensitive keys); single options override its keys.

Writer options:
    ``path``, ``num_subpartitions`` (required), ``partition_by`` (``"k1,k2"``), ``partitioner``
    (default ``hash`` when ``partition_by`` is given), ``partitioner_options`` (JSON object of
    extra partitioner arguments), ``memory`` (``"256MiB"``; default: the process-wide pool),
    ``compression`` (``zstd``, the default, ``lz4`` or ``none``), ``max_batch_rows``,
    ``subpartition_column`` (a column that already holds each row's subpartition; it is not
    stored), ``storage_options``, ``save_mode``.

    Spark passes a Python data source only whether it overwrites, and accepts only its
    ``append`` and ``overwrite`` modes: ``save_mode`` (``error`` or ``ignore``; ``overwrite``
    and ``append`` when they agree with Spark's mode) gives the writer the mode to commit with.
    With ``error`` the job refuses an existing dataset before any task runs, and its commit
    fails if a dataset appeared meanwhile; with ``ignore`` it keeps an existing dataset (its
    tasks write nothing; files written before one appeared are removed at commit).
    :func:`arrowshuffle.spark.write` sets it from its ``mode``.

    Each Spark partition is one producer, so some partitioners need ``partitioner_options``
    that every task shares (checked before any task runs): ``range`` needs ``boundaries``
    (JSON values of the key's type, as the spec stores them; or a ``sample``), which
    :func:`arrowshuffle.spark.range_boundaries` draws on the driver; ``rescale`` needs
    ``num_producers``, the DataFrame's number of partitions. ``forward`` writes Spark partition
    ``i`` to subpartition ``i``: a task whose partition is not below ``num_subpartitions``
    fails. :func:`arrowshuffle.spark.write` fills in all three from the DataFrame.

Reader options:
    ``path``; ``partitioning``, how the read is cut into Spark partitions:

    * ``plan`` (the default): one Spark partition per task of
      :meth:`~arrowshuffle.readers.dataset.ShuffleDataset.plan`: contiguous small
      subpartitions coalesced up to ``target_bytes``, skewed ones split over groups of files
      (tuned by ``target_bytes``, ``skew_factor``, ``skew_min_bytes``, ``max_tasks``). Without
      ``target_bytes`` the target is the selected bytes divided by ``parallelism`` (default:
      the cores of the machine that plans the query), kept within 4 MiB .. 128 MiB, so a
      small read still fills every core;
    * ``subpartition``: Spark partition ``i`` reads the ``i``-th selected subpartition (all of
      them: partition ``s`` is subpartition ``s``), for jobs that rely on that;
    * ``consumers``: with option ``consumers`` P (which alone selects this mode), P contiguous
      ranges of subpartitions, one Spark partition each.

    ``subpartitions`` (``"3"``, ``"0-7"``, ``"1,4,6-9"``) limits any mode to those
    subpartitions; ``verify`` (check every chunk's CRC32C: ``auto``, the default, on object
    stores only; ``true``; ``false``); ``pushdown`` (``true``: equality filters on the
    partitioning key skip subpartitions, before planning; Spark also needs
    ``spark.sql.python.filterPushdown.enabled``); ``storage_options``.

    ``columns`` (``"a,b,c"``, or a JSON list of names for names holding commas): read only
    these columns, in this order. A Python data source is not told which columns a query
    uses, so without it (or a read schema, ``.schema("a long, b string")``) every column is
    read and sent to the JVM. A read schema may name any subset of the dataset's columns in
    any order, with the types the dataset's own schema gives them.

    ``batch_rows`` (default 65536) and ``batch_bytes`` (default 32 MiB): the batches a task
    reads (one per chunk, often a few thousand rows) are joined up to this many rows or bytes
    before they are sent to the JVM, where every batch has a cost of its own.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from arrowshuffle.format.errors import InvalidOptionError
from arrowshuffle.format.notation import parse_bytes, parse_id_ranges, select_ids
from arrowshuffle.readers.balance import (
    DEFAULT_SKEW_FACTOR,
    DEFAULT_SKEW_MIN_BYTES,
    DEFAULT_TARGET_BYTES,
    balanced_cuts,
    spread_target,
)
from arrowshuffle.readers.integrity import Verify
from arrowshuffle.writers.dataset_writer import SAVE_MODES, normalize_mode
from arrowshuffle.writers.file_writer import (
    DEFAULT_COMPRESSION,
    DEFAULT_MAX_BATCH_ROWS,
    normalize_compression,
)

#: The name of the data source: ``spark.read.format(FORMAT_NAME)``.
FORMAT_NAME = "arrowshuffle"

WRITER_OPTIONS = frozenset(
    {
        "path",
        "num_subpartitions",
        "partition_by",
        "partitioner",
        "partitioner_options",
        "memory",
        "compression",
        "max_batch_rows",
        "subpartition_column",
        "storage_options",
        "save_mode",
    }
)
#: The options that tune ``partitioning=plan`` (refused with the other modes).
PLAN_OPTIONS = ("target_bytes", "skew_factor", "skew_min_bytes", "max_tasks", "parallelism")
READER_OPTIONS = frozenset(
    {
        "path",
        "partitioning",
        "consumers",
        "subpartitions",
        "verify",
        "pushdown",
        "columns",
        "batch_rows",
        "batch_bytes",
        "storage_options",
        *PLAN_OPTIONS,
    }
)
#: The values of the ``partitioning`` reader option.
PARTITIONINGS = ("plan", "subpartition", "consumers")
#: The mode of a read that names none (and has no ``consumers``).
DEFAULT_PARTITIONING = "plan"
#: Without ``target_bytes``, a plan's target: the selected bytes over ``parallelism`` ...
DEFAULT_MAX_TARGET_BYTES = DEFAULT_TARGET_BYTES
#: ... but not below DEFAULT_MIN_TARGET_BYTES (4 MiB: smaller tasks cost more in Spark's
#: per-task overhead than they gain in parallelism; Spark's file sources count 4 MiB per file
#: opened for the same reason).
#: Targets a default plan tries, as multiples of one slot's share of the selected bytes.
PLAN_TARGET_FACTORS = (1.0, 1.1, 1.25, 0.5, 0.55, 1 / 3, 0.37)
#: What one more Spark task costs, in bytes read: a Python data source task's fixed cost
#: (scheduling, the Python worker's round trip, opening the read) measured as about as much
#: as reading this many bytes of a dataset on local Spark.
TASK_COST_BYTES = 2 * 1024 * 1024
#: The rows of a batch a Spark task sends to the JVM (smaller batches read are joined) ...
DEFAULT_BATCH_ROWS = 65536
#: ... unless it reaches these bytes first.
DEFAULT_BATCH_BYTES = 32 * 1024 * 1024
#: Options of either side: a writer ignores reader options and the other way round, so one
#: options dict can serve both.
ALL_OPTIONS = WRITER_OPTIONS | READER_OPTIONS


@dataclass(frozen=True)
class WriteOptions:
    """The parsed writer options."""

    path: str
    num_subpartitions: int
    partition_by: tuple[str, ...] = ()
    partitioner: str | None = None
    partitioner_options: dict[str, Any] = field(default_factory=dict)
    memory: int | None = None
    compression: str = DEFAULT_COMPRESSION
    max_batch_rows: int = DEFAULT_MAX_BATCH_ROWS
    subpartition_column: str | None = None
    storage_options: dict[str, Any] = field(default_factory=dict)
    #: The save mode to commit with (``error``, ``ignore``, ...); None: Spark's own mode.
    save_mode: str | None = None

    def commit_mode(self, overwrite: bool) -> str:
        """The mode the job commits with, given Spark's ``overwrite`` flag.

        Raises:
            InvalidOptionError: ``save_mode`` ``overwrite`` or ``append`` that contradicts
                Spark's mode.
        """
        spark_mode = "overwrite" if overwrite else "append"
        if self.save_mode is None:
            return spark_mode
        if self.save_mode in ("overwrite", "append") and self.save_mode != spark_mode:
            raise InvalidOptionError(
                f"option save_mode is {self.save_mode!r} but Spark's save mode is "
                f"{spark_mode!r}; give the same mode to .mode() or leave save_mode out"
            )
        return self.save_mode


@dataclass(frozen=True)
class SparkReadConfig:
    """The Spark source's reader options, parsed (the read tuning is :class:`ReadOptions`)."""

    path: str
    #: ``plan``, ``subpartition`` or ``consumers`` (see the module docstring).
    partitioning: str = DEFAULT_PARTITIONING
    consumers: int | None = None
    #: The ``subpartitions`` option, parsed; :meth:`selection` checks it against the dataset.
    subpartitions: tuple[range, ...] | None = None
    verify: Verify = "auto"
    pushdown: bool = False
    #: The ``columns`` option: the columns to read, in order; ``None``: every column.
    columns: tuple[str, ...] | None = None
    #: Batches read are joined up to these rows or bytes before they are sent to the JVM.
    batch_rows: int = DEFAULT_BATCH_ROWS
    batch_bytes: int = DEFAULT_BATCH_BYTES
    storage_options: dict[str, Any] = field(default_factory=dict)
    #: The plan's target; ``None``: derived from the selected bytes and ``parallelism``.
    target_bytes: int | None = None
    skew_factor: float = DEFAULT_SKEW_FACTOR
    skew_min_bytes: int = DEFAULT_SKEW_MIN_BYTES
    max_tasks: int | None = None
    #: How many tasks a plan without ``target_bytes`` aims to fill; ``None``: the cores here.
    parallelism: int | None = None

    def plan_target(self, selected_bytes: int) -> int:
        """The bytes a planned task aims at, for a selection of ``selected_bytes`` bytes.

        ``target_bytes`` when given; otherwise the selection spread over ``parallelism`` tasks,
        within [:data:`DEFAULT_MIN_TARGET_BYTES`, :data:`DEFAULT_MAX_TARGET_BYTES`].
        """
        if self.target_bytes is not None:
            return self.target_bytes
        return spread_target(selected_bytes, self.slots())

    def slots(self) -> int:
        """How many tasks run at once: ``parallelism``, or the cores of this machine."""
        return self.parallelism or os.cpu_count() or 1

    def plan_targets(self, sizes: Sequence[int] | np.ndarray) -> list[int]:
        """The targets a plan without ``target_bytes`` chooses among (see :meth:`plan_target`).

        ``sizes`` are the selected subpartitions' bytes, in order. The targets: the share of
        one slot (one wave of tasks), a little above it (so that subpartitions a little larger
        than the share do not leave one task over for a second wave), a half and a third of
        it (two or three waves, for skewed sizes), and for one, two and three waves the
        largest piece of a balanced cut (:func:`balanced_cuts`), with which filling tasks up
        to the target gives those pieces; all within
        [:data:`DEFAULT_MIN_TARGET_BYTES`, :data:`DEFAULT_MAX_TARGET_BYTES`].
        """
        if self.target_bytes is not None:
            return [self.target_bytes]
        values = np.asarray(sizes, dtype=np.int64)
        slots = self.slots()
        share = -(-int(values.sum()) // slots)
        candidates = [int(share * factor) for factor in PLAN_TARGET_FACTORS]
        for waves in (1, 2, 3):
            cuts = balanced_cuts(values, slots * waves)
            candidates.append(max(int(values[c.start : c.stop].sum()) for c in cuts))
        found: list[int] = []
        for candidate in candidates:
            target = spread_target(candidate, 1)
            if target not in found:
                found.append(target)
        return found

    def selection(self, num_subpartitions: int) -> tuple[int, ...]:
        """The subpartitions to read, ascending: those of the option, or all."""
        if self.subpartitions is None:
            return tuple(range(num_subpartitions))
        ids = select_ids(
            self.subpartitions, num_subpartitions, name="option subpartitions", what="dataset"
        )
        return tuple(ids)


def _lower(options: Mapping[str, str]) -> dict[str, str]:
    return {str(k).lower(): str(v) for k, v in options.items()}


def _path(opts: dict[str, str], action: str) -> str:
    path = opts.get("path", "").strip()
    if not path:
        raise InvalidOptionError(
            f"the arrowshuffle data source needs a path: .{action}('/data/shuffle') or "
            "option('path', ...)"
        )
    return path


def parse_int(value: str, name: str, *, minimum: int) -> int:
    """Parse an integer option of at least ``minimum``."""
    try:
        number = int(str(value).strip())
    except ValueError:
        raise InvalidOptionError(f"option {name} must be an integer, found {value!r}") from None
    if number < minimum:
        raise InvalidOptionError(f"option {name} must be at least {minimum}, found {number}")
    return number


def parse_bool(value: str, name: str) -> bool:
    """Parse ``true``/``false`` (also ``1``/``0``, ``yes``/``no``)."""
    text = str(value).strip().lower()
    if text in ("true", "1", "yes"):
        return True
    if text in ("false", "0", "no"):
        return False
    raise InvalidOptionError(f"option {name} must be true or false, found {value!r}")


def parse_float(value: str, name: str, *, above: float) -> float:
    """Parse a finite number greater than ``above``."""
    try:
        number = float(str(value).strip())
    except ValueError:
        raise InvalidOptionError(f"option {name} must be a number, found {value!r}") from None
    if not (number > above and number != float("inf")):
        raise InvalidOptionError(
            f"option {name} must be a finite number above {above:g}, found {value!r}"
        )
    return number


def parse_partitioning(opts: dict[str, str]) -> str:
    """The read's mode from ``partitioning`` and ``consumers``, checked against each other.

    Raises:
        InvalidOptionError: an unknown mode, ``consumers`` with another mode or missing for
            ``consumers``, or a plan option (``target_bytes``, ...) with a mode that is not
            ``plan``.
    """
    given = opts.get("partitioning", "").strip().lower() or None
    if given is not None and given not in PARTITIONINGS:
        raise InvalidOptionError(
            f"option partitioning must be one of {', '.join(PARTITIONINGS)}, "
            f"found {opts['partitioning']!r}"
        )
    if "consumers" in opts:
        if given not in (None, "consumers"):
            raise InvalidOptionError(
                f"option consumers gives partitioning 'consumers'; it cannot be combined with "
                f"partitioning {given!r}"
            )
        mode = "consumers"
    elif given == "consumers":
        raise InvalidOptionError(
            "partitioning 'consumers' needs option consumers (how many Spark partitions)"
        )
    else:
        mode = given or DEFAULT_PARTITIONING
    if mode != "plan":
        tuning = [name for name in PLAN_OPTIONS if name in opts]
        if tuning:
            raise InvalidOptionError(
                f"option {tuning[0]} tunes partitioning 'plan'; this read's partitioning is "
                f"{mode!r}"
            )
    return mode


def parse_verify(value: str) -> Verify:
    """Parse the ``verify`` option: ``auto``, or a boolean as :func:`parse_bool` reads it."""
    if str(value).strip().lower() == "auto":
        return "auto"
    try:
        return parse_bool(value, "verify")
    except InvalidOptionError:
        raise InvalidOptionError(
            f"option verify must be auto, true or false, found {value!r}"
        ) from None


def parse_columns(value: str, name: str = "partition_by") -> tuple[str, ...]:
    """Split ``"k1, k2"`` into column names (spaces around commas are dropped)."""
    names = tuple(part.strip() for part in str(value).split(","))
    if not all(names):
        raise InvalidOptionError(
            f"option {name} must be column names separated by commas, found {value!r}"
        )
    return names


def parse_read_columns(value: str) -> tuple[str, ...]:
    """The ``columns`` reader option: ``"a, b"`` or a JSON list of names, each named once.

    Raises:
        InvalidOptionError: no names, an empty name, or a name given twice.
    """
    text = str(value).strip()
    if text.startswith("["):
        try:
            parsed = json.loads(text)
        except json.JSONDecodeError as exc:
            raise InvalidOptionError(
                f"option columns must be names separated by commas or a JSON list of names, "
                f"found {value!r:.80} ({exc})"
            ) from None
        names_ok = isinstance(parsed, list) and all(isinstance(n, str) and n for n in parsed)
        if not (names_ok and parsed):
            raise InvalidOptionError(
                f"option columns must be a non-empty JSON list of names, found {value!r:.80}"
            )
        names = tuple(parsed)
    else:
        names = parse_columns(text, "columns")
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise InvalidOptionError(
            f"option columns names each column once, found {repeated[0]!r} more than once"
        )
    return names


def parse_json_object(value: str, name: str) -> dict[str, Any]:
    """Parse an option holding a JSON object."""
    try:
        parsed = json.loads(value)
    except json.JSONDecodeError as exc:
        raise InvalidOptionError(
            f"option {name} must be a JSON object, found {value!r:.80} ({exc})"
        ) from None
    if not isinstance(parsed, dict):
        raise InvalidOptionError(f"option {name} must be a JSON object, found {value!r:.80}")
    return parsed


def _storage_value(value: str) -> Any:
    lowered = value.strip().lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    return value


def storage_options(opts: dict[str, str], known: frozenset[str], path: str) -> dict[str, Any]:
    """The fsspec storage options: the ``storage_options`` JSON plus every unknown option.

    Options of the other side (a reader option given to a writer, or the reverse) are ignored.

    Raises:
        InvalidOptionError: unknown options on a local path, where no storage option applies
            (most likely a misspelt option name).
    """
    result: dict[str, Any] = {}
    if "storage_options" in opts:
        result.update(parse_json_object(opts["storage_options"], "storage_options"))
    extra = {k: v for k, v in opts.items() if k not in known and k not in ALL_OPTIONS}
    if extra and "://" not in path and not path.startswith("file:"):
        raise InvalidOptionError(
            f"unknown option(s) {sorted(extra)} for the local path {path!r}: the arrowshuffle "
            f"data source takes {sorted(known)} (other options are storage options for URLs)"
        )
    result.update({k: _storage_value(v) for k, v in extra.items()})
    return result


def parse_write_options(options: Mapping[str, str]) -> WriteOptions:
    """Parse and check the writer options (see the module docstring)."""
    opts = _lower(options)
    path = _path(opts, "save")
    storage = storage_options(opts, WRITER_OPTIONS, path)  # first: it catches misspelt names
    if "num_subpartitions" not in opts:
        raise InvalidOptionError(
            "the arrowshuffle writer needs option num_subpartitions (how many subpartitions "
            "each file is split into)"
        )
    num = parse_int(opts["num_subpartitions"], "num_subpartitions", minimum=1)
    if num > 2**31 - 1:
        raise InvalidOptionError(f"option num_subpartitions must be below 2**31, found {num}")
    by = parse_columns(opts["partition_by"]) if opts.get("partition_by", "").strip() else ()
    partitioner = opts.get("partitioner", "").strip().lower() or None
    column = opts.get("subpartition_column", "").strip() or None
    if partitioner is None and by:
        partitioner = "hash"
    if partitioner is None and column is None:
        raise InvalidOptionError(
            "the arrowshuffle writer needs option partition_by (hash partitioning by those "
            "columns, as df.repartition(n, cols)), option partitioner (for example "
            "'round_robin'), or option subpartition_column"
        )
    memory = parse_bytes(opts["memory"], name="option memory") if "memory" in opts else None
    save_mode = None
    if opts.get("save_mode", "").strip():
        try:
            save_mode = normalize_mode(opts["save_mode"].strip())
        except InvalidOptionError:
            raise InvalidOptionError(
                f"option save_mode must be one of {', '.join(SAVE_MODES)}, "
                f"found {opts['save_mode']!r}"
            ) from None
    return WriteOptions(
        path=path,
        num_subpartitions=num,
        partition_by=by,
        partitioner=partitioner,
        partitioner_options=(
            parse_json_object(opts["partitioner_options"], "partitioner_options")
            if "partitioner_options" in opts
            else {}
        ),
        memory=memory,
        compression=normalize_compression(opts.get("compression", DEFAULT_COMPRESSION)),
        max_batch_rows=(
            parse_int(opts["max_batch_rows"], "max_batch_rows", minimum=1)
            if "max_batch_rows" in opts
            else DEFAULT_MAX_BATCH_ROWS
        ),
        subpartition_column=column,
        storage_options=storage,
        save_mode=save_mode,
    )


def parse_read_options(options: Mapping[str, str]) -> SparkReadConfig:
    """Parse and check the reader options (see the module docstring)."""
    opts = _lower(options)
    path = _path(opts, "load")
    storage = storage_options(opts, READER_OPTIONS, path)
    consumers = (
        parse_int(opts["consumers"], "consumers", minimum=1) if "consumers" in opts else None
    )
    partitioning = parse_partitioning(opts)
    verify = parse_verify(opts["verify"]) if "verify" in opts else "auto"
    pushdown = parse_bool(opts["pushdown"], "pushdown") if "pushdown" in opts else False
    target = opts.get("target_bytes")
    skew_min = opts.get("skew_min_bytes")
    return SparkReadConfig(
        path=path,
        partitioning=partitioning,
        consumers=consumers,
        subpartitions=(
            None
            if opts.get("subpartitions") is None
            else parse_id_ranges(opts["subpartitions"], name="option subpartitions")
        ),
        verify=verify,
        pushdown=pushdown,
        columns=parse_read_columns(opts["columns"]) if "columns" in opts else None,
        batch_rows=(
            parse_int(opts["batch_rows"], "batch_rows", minimum=1)
            if "batch_rows" in opts
            else DEFAULT_BATCH_ROWS
        ),
        batch_bytes=(
            _positive_bytes(opts["batch_bytes"], "option batch_bytes")
            if "batch_bytes" in opts
            else DEFAULT_BATCH_BYTES
        ),
        storage_options=storage,
        target_bytes=(None if target is None else _positive_bytes(target, "option target_bytes")),
        skew_factor=(
            parse_float(opts["skew_factor"], "skew_factor", above=0)
            if "skew_factor" in opts
            else DEFAULT_SKEW_FACTOR
        ),
        skew_min_bytes=(
            DEFAULT_SKEW_MIN_BYTES
            if skew_min is None
            else parse_bytes(skew_min, name="option skew_min_bytes")
        ),
        max_tasks=(
            parse_int(opts["max_tasks"], "max_tasks", minimum=1) if "max_tasks" in opts else None
        ),
        parallelism=(
            parse_int(opts["parallelism"], "parallelism", minimum=1)
            if "parallelism" in opts
            else None
        ),
    )


def _positive_bytes(value: str, name: str) -> int:
    size = parse_bytes(value, name=name)
    if size < 1:
        raise InvalidOptionError(f"{name} must be at least 1 byte, found {value!r}")
    return size
