"""The commands: each computes its result and hands it to the output; none formats text.

``inspect`` and ``plan`` first check what they show with the checks of ``validate`` (the
structure: a file's V1-V15, V20, V21; a dataset's manifest rules and its files'), through
the same validation functions, and refuse invalid data (exit status 1). ``read`` checks each
chunk's checksum by default.

A path that is not what a command expects (a missing path, a Parquet file, an Arrow IPC file
without its index, a directory without a manifest) is named with what it is.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import posixpath
import re
from collections.abc import Iterator, Sequence
from typing import Any, Protocol, cast

import numpy as np
import pyarrow as pa

from arrowshuffle.cli.results import (
    CHECKS,
    EXIT_ERROR,
    EXIT_INVALID,
    EXIT_OK,
    Checked,
    CommandError,
    Compacted,
    Inspected,
    Output,
    Planned,
    Vacuumed,
    Validated,
    Written,
)
from arrowshuffle.format.errors import (
    ArrowShuffleError,
    FormatError,
    InvalidOptionError,
    MissingExtraError,
    MissingObjectError,
)
from arrowshuffle.format.naming import (
    DATA_SUFFIX,
    INDEX_SUFFIX,
    MANIFEST_NAME,
    VERSIONS_DIR,
    version_from_name,
)
from arrowshuffle.format.notation import (
    parse_bytes,
    parse_duration,
    parse_id_ranges,
    select_ids,
)
from arrowshuffle.format.rule_registry import Violation
from arrowshuffle.readers.balance import skew_ratio
from arrowshuffle.readers.dataset import ShuffleDataset, open_dataset
from arrowshuffle.readers.file_reader import ShuffleFile, open_file
from arrowshuffle.readers.integrity import Verify
from arrowshuffle.readers.layout import dataset_layout, dataset_summary, file_layout, file_summary
from arrowshuffle.readers.manifest_io import list_versions
from arrowshuffle.readers.read_cost import read_cost
from arrowshuffle.readers.storage import resolve
from arrowshuffle.readers.validate import ValidationReport, validate_file
from arrowshuffle.readers.validate_dataset import DatasetReport, is_dataset, validate_dataset
from arrowshuffle.writers.compact import Rebatch
from arrowshuffle.writers.compact import compact as compact_dataset
from arrowshuffle.writers.output import AtomicOutput
from arrowshuffle.writers.vacuum import vacuum as vacuum_dataset

#: Output formats of ``read``, by file extension.
OUTPUT_FORMATS = {".arrow": "arrow", ".parquet": "parquet", ".csv": "csv"}
#: ``read --verify`` values, as the readers' ``verify`` argument.
VERIFY_CHOICES: dict[str, Verify] = {"auto": "auto", "on": True, "off": False}
#: Magic bytes that tell what a file without an index is.
_PARQUET_MAGIC = b"PAR1"
_ARROW_MAGIC = b"ARROW1"
#: The ``[Errno N]`` that Python puts before an OSError's message.
_ERRNO = re.compile(r"\[Errno -?\d+\]\s*")


# ---------------------------------------------------------------------- validate


def validate(args: argparse.Namespace, storage: dict[str, Any], out: Output) -> int:
    """Check each path; every one is reported, whatever the others' outcome."""
    status = EXIT_OK
    with out.progress(len(args.paths), "validate") as bar:
        for done, path in enumerate(args.paths):
            bar.update(done, path)
            try:
                with _about(path, storage):
                    if names_dataset(path, storage):
                        report: ValidationReport | DatasetReport = _validate_dataset(
                            path, storage, out, deep=args.deep, current_only=args.current_only
                        )
                    else:
                        report = validate_file(path, deep=args.deep, storage_options=storage)
            except CommandError as exc:
                status = EXIT_ERROR
                out.validate_failed(path, exc)
                continue
            except (ArrowShuffleError, OSError) as exc:
                if isinstance(exc, FormatError):
                    raise  # not expected from the validators: they report broken rules
                status = EXIT_ERROR
                out.validate_failed(path, command_error(exc, path))
                continue
            bar.update(done + 1, path)
            if not report.ok and status == EXIT_OK:
                status = EXIT_INVALID
            out.validated(Validated(path, report, checked_of(report)))
    out.validate_done()
    return status


def names_dataset(path: str, storage: dict[str, Any]) -> bool:
    """A local directory, or a URL with a manifest inside (one existence check).

    URLs of data files (``.arrow``) and of indexes are taken as files without a request, so
    that validating many files costs no extra round trips.
    """
    location = resolve(path, storage)
    if location.is_local:
        return os.path.isdir(location.path)
    if location.path.rstrip("/").endswith((DATA_SUFFIX, INDEX_SUFFIX)):
        return False
    return is_dataset(path, storage)


def _validate_dataset(
    path: str, storage: dict[str, Any], out: Output, *, deep: bool, current_only: bool
) -> DatasetReport:
    with out.progress(0, f"validate {path}") as bar:

        def progress(done: int, total: int, name: str) -> None:
            bar.update(done, name, total=total)

        return validate_dataset(
            path,
            deep=deep,
            current_only=current_only,
            storage_options=storage,
            progress=progress,
        )


def checked_of(report: ValidationReport | DatasetReport) -> Checked:
    """Which checks a report's validation verified, and why a deep check did not run."""
    deep = bool(report.summary.get("deep"))
    skipped: list[str] = list(report.summary.get("skipped", []))
    if isinstance(report, DatasetReport):
        for file_report in report.files:
            skipped += file_report.summary.get("skipped", [])
    reasons = tuple(dict.fromkeys(skipped))  # distinct, in report order
    if not deep:
        verified: tuple[str, ...] = ("structure",)
    elif any(reason.startswith("deep checks") for reason in reasons):
        verified = ("structure",)
    elif any(reason.startswith("V19") for reason in reasons):
        verified = ("structure", "checksums", "decoding")
    else:
        verified = CHECKS
    not_verified = tuple(c for c in CHECKS if c not in verified)
    return Checked(verified, not_verified, deep=deep, reasons=reasons)


# ---------------------------------------------------------------------- paths


@contextlib.contextmanager
def _about(path: str, storage: dict[str, Any]) -> Iterator[None]:
    """Turn a missing object at ``path`` into an error saying what ``path`` is instead."""
    try:
        yield
    except MissingObjectError as exc:
        found = diagnose(path, storage)
        if found is None:
            raise
        raise CommandError(f"{path}: {found}", path=path) from exc


def diagnose(path: str, storage: dict[str, Any]) -> str | None:
    """What ``path`` is, when it is not a shuffle file or a dataset; None when it is one.

    Called on the error path only: a missing object was met while opening ``path``. Costs a
    few existence checks and, for a file without an index, a read of its first bytes.
    """
    try:
        location = resolve(path, storage)
        fs, where = location.fs, location.path
        if location.is_local:
            exists, directory = os.path.exists(where), os.path.isdir(where)
        else:
            directory = bool(fs.isdir(where))
            exists = directory or bool(fs.exists(where))
        if not exists:
            return "not found"
        if directory:
            if is_dataset(path, storage):
                return None  # a listed file or a version is missing: the error says which
            return (
                f"a directory, not an arrowshuffle dataset: it has no {MANIFEST_NAME} and no "
                f"{VERSIONS_DIR}/ (nothing was committed there)"
            )
        name = posixpath.basename(where.rstrip("/"))
        if name == MANIFEST_NAME:
            parent = os.path.dirname(path.rstrip("/")) or "."
            return f"a dataset's manifest, not a data file: give the dataset directory, {parent}"
        if name.endswith(INDEX_SUFFIX):
            data = path[: -len(INDEX_SUFFIX)]
            return f"an index sidecar, not a data file: give the data file, {data}"
        index = location.sibling(INDEX_SUFFIX)
        if index.fs.exists(index.path):
            return None
        with fs.open(where, "rb") as handle:
            head = handle.read(len(_ARROW_MAGIC))
    except Exception:  # the diagnosis is a courtesy: the original error stands without it
        return None
    sidecar = f"no {name}{INDEX_SUFFIX} sidecar"
    if head.startswith(_PARQUET_MAGIC):
        return f"a Parquet file, not an arrowshuffle data file: {sidecar}"
    if head == _ARROW_MAGIC:
        return f"an Arrow IPC file, but not an arrowshuffle data file: {sidecar}"
    return f"not an arrowshuffle data file: {sidecar}"


def _open(
    args: argparse.Namespace, storage: dict[str, Any], out: Output, *, check: bool
) -> ShuffleFile | ShuffleDataset:
    """The file or dataset at ``args.path``; with ``--version``, that version of the dataset.

    With ``check``, it is first validated as ``validate`` would (the structure only; the
    version shown, for a dataset) and refused with exit status 1 if it breaks a rule.
    Whether a URL is a dataset costs a request only when its name is not a data file's.
    """
    path, version = args.path, getattr(args, "version", None)
    with _about(path, storage):
        if not names_dataset(path, storage):
            if version is not None:
                raise CommandError(
                    f"--version {version}: {path} is not a dataset; manifest versions belong "
                    "to datasets (a directory or URL holding a manifest)"
                )
            if check:
                _refuse_invalid(path, validate_file(path, storage_options=storage))
            return open_file(path, storage_options=storage)
        if version is None:
            if check:
                report = _validate_dataset(path, storage, out, deep=False, current_only=True)
                _refuse_invalid(path, report)
            return open_dataset(path, storage)
        dataset = open_dataset(path, storage, version=version)
        if check:
            report = _validate_dataset(path, storage, out, deep=False, current_only=False)
            _refuse_invalid(path, report, version=version)
        return dataset


def _refuse_invalid(
    path: str, report: ValidationReport | DatasetReport, *, version: int | None = None
) -> None:
    """Raise an exit-status-1 error listing every broken rule, if the report has any."""
    found: list[tuple[str | None, Violation]]
    if isinstance(report, ValidationReport):
        found = [(None, v) for v in report.violations]
    elif version is None or version == report.summary.get("version"):
        found = [(None, v) for v in report.violations]
        found += [(f.name, v) for f in report.files for v in f.violations]
    else:
        found = [item for v in report.versions if v.version == version for item in v.violations]
    if found:
        raise invalid_error(path, found)


def invalid_error(path: str, found: Sequence[tuple[str | None, Violation]]) -> CommandError:
    """The error of invalid data: the first broken rule, and how many more there are."""
    (where, first), *rest = found
    more = ""
    if rest:
        noun = "problem" if len(rest) == 1 else "problems"
        more = f" (and {len(rest)} more {noun}; --json lists them)"
    prefix = f"{where}: " if where else ""
    return CommandError(
        f"{path} is invalid: {prefix}{one_line(first)}{more}",
        status=EXIT_INVALID,
        path=path,
        violations=[{"file": w, "rule": v.rule, "message": v.message} for w, v in found],
    )


# ---------------------------------------------------------------------- inspect and plan


def inspect(args: argparse.Namespace, storage: dict[str, Any], out: Output) -> int:
    """Check the structure, then summarize a file or a dataset."""
    opened = _open(args, storage, out, check=True)
    if isinstance(opened, ShuffleDataset):
        with out.progress(opened.num_files, "inspect") as bar:
            layout = dataset_layout(opened, progress=lambda done, _, name: bar.update(done, name))
        summary = dataset_summary(opened, layout)
        summary["read_cost"] = read_cost(opened, layout)
        retained = [v.version for v in list_versions(opened.directory)]
        summary["version"] = opened.version
        summary["version_in_force"] = retained[-1] if retained else opened.version
        summary["versions"] = retained
        if args.plot:
            files = f"{opened.num_files} file{'' if opened.num_files == 1 else 's'}"
            _plot(out, layout, args.plot, f"{opened.url} ({files})")
        out.inspected(Inspected("dataset", summary))
        return EXIT_OK
    with opened as shuffle_file:
        summary = file_summary(shuffle_file)
        if args.plot:
            _plot(out, file_layout(shuffle_file), args.plot, shuffle_file.url)
    out.inspected(Inspected("file", summary))
    return EXIT_OK


def _plot(out: Output, layout: pa.Table, path: str, title: str) -> None:
    """Draw the heatmap into ``path``; a missing matplotlib is a usage error with a hint."""
    from arrowshuffle.plot import plot_layout

    try:
        plot_layout(layout, path, title=title)
    except MissingExtraError as exc:
        raise CommandError(f"--plot: {exc}") from exc
    except ValueError as exc:  # matplotlib refuses the file name's extension
        raise CommandError(f"--plot {path}: {one_line(exc)}") from exc
    out.note(f"wrote {path}")


def plan(args: argparse.Namespace, storage: dict[str, Any], out: Output) -> int:
    """Check the structure, then plan balanced read tasks of a file or a dataset."""
    # Options are checked before the data is opened: a typo costs no request.
    target = parse_bytes(args.target_bytes, name="--target-bytes")
    skew_min = parse_bytes(args.skew_min_bytes, name="--skew-min-bytes")
    runs = (
        None
        if args.subpartitions is None
        else parse_id_ranges(args.subpartitions, name="--subpartitions")
    )
    opened = _open(args, storage, out, check=True)
    with contextlib.ExitStack() as stack:
        if isinstance(opened, ShuffleFile):
            stack.enter_context(opened)
        kind = "dataset" if isinstance(opened, ShuffleDataset) else "file"
        n = opened.num_subpartitions
        selection = (
            range(n) if runs is None else select_ids(runs, n, name="--subpartitions", what=kind)
        )
        tasks = opened.plan(
            target,
            subpartitions=selection,
            skew_factor=args.skew_factor,
            skew_min_bytes=skew_min,
            max_tasks=args.max_tasks,
        )
        sizes, _ = opened.subpartition_sizes()
        chosen = np.asarray(list(selection), dtype=np.int64)
        out.planned(
            Planned(
                url=opened.url,
                kind=kind,
                files=opened.num_files,
                subpartitions=n,
                selected=len(chosen),
                target_bytes=target,
                skew_factor=args.skew_factor,
                skew_min_bytes=skew_min,
                max_tasks=args.max_tasks,
                tasks=tasks,
                skew_before=skew_ratio(sizes[chosen].tolist()),
                skew_after=skew_ratio([t.bytes for t in tasks]),
            )
        )
    return EXIT_OK


# ---------------------------------------------------------------------- read


class _BatchWriter(Protocol):
    def write_batch(self, batch: pa.RecordBatch) -> None: ...

    def close(self) -> None: ...


def read(args: argparse.Namespace, storage: dict[str, Any], out: Output) -> int:
    """Read subpartitions of a file or a dataset into one .arrow, .parquet or .csv file."""
    extension = os.path.splitext(args.out)[1].lower()
    kind = OUTPUT_FORMATS.get(extension)
    if kind is None:
        raise CommandError(
            f"--out {args.out}: expected a file name ending in .arrow, .parquet or .csv, "
            f"found {extension or 'no extension'}"
        )
    if os.path.isdir(args.out):
        raise CommandError(f"--out {args.out}: a directory; give a file name inside it")
    runs = parse_id_ranges(args.subpartitions, name="--subpartitions")
    columns = None if args.columns is None else [c.strip() for c in args.columns.split(",")]
    rows = 0
    opened = _open(args, storage, out, check=False)
    with contextlib.ExitStack() as stack:
        if isinstance(opened, ShuffleFile):
            stack.enter_context(opened)
        what = "dataset" if isinstance(opened, ShuffleDataset) else "file"
        selection = select_ids(runs, opened.num_subpartitions, name="--subpartitions", what=what)
        schema = opened.schema
        if columns is not None:
            missing = [c for c in columns if c not in schema.names]
            if missing:
                raise InvalidOptionError(
                    f"--columns: no column {missing[0]!r} in the {what}; its columns are "
                    f"{schema.names}"
                )
            schema = pa.schema([schema.field(c) for c in columns], metadata=schema.metadata)
        batches = opened.iter_batches(
            selection, columns=columns, verify=VERIFY_CHOICES[args.verify]
        )
        # A missing directory is refused here, before anything is read.
        target = AtomicOutput(resolve(args.out, storage))
        try:
            writer = _open_writer(kind, target.file, schema)
            try:
                for batch in batches:
                    _write(writer, batch, kind)
                    rows += batch.num_rows
            finally:
                writer.close()
            target.commit()
        finally:
            target.discard()  # nothing once committed
    out.written(Written(args.out, rows))
    return EXIT_OK


def _open_writer(kind: str, sink: Any, schema: pa.Schema) -> _BatchWriter:
    try:
        if kind == "arrow":
            return cast(_BatchWriter, pa.ipc.new_file(sink, schema))
        if kind == "parquet":
            import pyarrow.parquet as pq

            return cast(_BatchWriter, pq.ParquetWriter(sink, schema))
        import pyarrow.csv as pcsv

        return cast(_BatchWriter, pcsv.CSVWriter(sink, schema))
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
        raise CommandError(f"cannot write this schema as {kind}: {one_line(exc)}") from exc


def _write(writer: _BatchWriter, batch: pa.RecordBatch, kind: str) -> None:
    try:
        writer.write_batch(batch)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
        raise CommandError(f"cannot write these columns as {kind}: {one_line(exc)}") from exc


# ---------------------------------------------------------------------- vacuum and compact


def vacuum(args: argparse.Namespace, storage: dict[str, Any], out: Output) -> int:
    """Expire old versions and remove unlisted files; exit status 2 if a removal failed."""
    older_than = parse_duration(args.older_than, name="--older-than")
    report = vacuum_dataset(
        args.path, older_than=older_than, dry_run=args.dry_run, storage_options=storage
    )
    out.vacuumed(Vacuumed(report, args.older_than, expired_versions(report.removed)))
    return EXIT_OK if report.ok else EXIT_ERROR


def expired_versions(removed: Sequence[str]) -> dict[str, int]:
    """The manifest versions among removed names (``_arrowshuffle_versions/<n>.json``)."""
    found: dict[str, int] = {}
    for name in removed:
        folder, _, base = name.rpartition("/")
        version = version_from_name(base) if folder == VERSIONS_DIR else None
        if version is not None:
            found[name] = version
    return found


_REBATCH: dict[str, Rebatch] = {"auto": "auto", "always": True, "never": False}


def compact(args: argparse.Namespace, storage: dict[str, Any], out: Output) -> int:
    """Merge groups of consecutive small files of a dataset (or only plan them)."""
    # Options are checked before the dataset is opened: a typo costs no request.
    target = parse_bytes(args.target_file_size, name="--target-file-size")
    memory = parse_bytes(args.memory, name="--memory")
    if target < 1 or memory < 1:
        raise CommandError("--target-file-size and --memory must be at least 1 byte")
    if args.batch_rows < 1:
        raise CommandError(f"--batch-rows must be at least 1, found {args.batch_rows}")
    # The work's size is learnt on the way: the bar shows the latest step only.
    with out.progress(1, "compact", min_total=1) as bar:
        report = compact_dataset(
            args.path,
            target_file_size=target,
            memory=memory,
            rebatch=_REBATCH[args.rebatch],
            batch_rows=args.batch_rows,
            storage_options=storage,
            dry_run=args.dry_run,
            progress=lambda line: bar.update(0, line),
        )
    out.compacted(Compacted(report, target))
    return EXIT_OK


# ---------------------------------------------------------------------- errors


def command_error(exc: BaseException, path: str | None) -> CommandError:
    """The one-line error for an exception that ended a command, with its exit status."""
    if isinstance(exc, CommandError):
        return exc
    text = one_line(exc)
    if isinstance(exc, FormatError):
        violation = {"file": None, "rule": exc.rule, "message": one_line(exc.detail)}
        what = f"{path} is invalid" if path else "invalid data"
        return CommandError(
            f"{what}: {text}", status=EXIT_INVALID, path=path, violations=[violation]
        )
    if isinstance(exc, (ArrowShuffleError, OSError)):
        return CommandError(text, path=path)
    return CommandError(
        f"internal error: {type(exc).__name__}: {text} (set ARROWSHUFFLE_DEBUG=1 to see where)",
        path=path,
    )


def one_line(exc: object) -> str:
    """An error's text on one line, without the ``[Errno N]`` that Python puts before it."""
    if isinstance(exc, OSError) and exc.strerror and len(exc.args) >= 2:
        text = str(exc.strerror)
        if exc.filename is not None:
            text = f"{exc.filename}: {text}"
    else:
        text = str(exc)
    return " ".join(_ERRNO.sub("", text).split())


#: Each command's function, by name.
COMMANDS = {
    "validate": validate,
    "inspect": inspect,
    "plan": plan,
    "read": read,
    "vacuum": vacuum,
    "compact": compact,
}
