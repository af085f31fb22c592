"""The ``arrowshuffle`` command: validate, inspect, plan, read and vacuum shuffle data.

Every command takes shuffle files and, where it makes sense, datasets.

Exit status: 0 when everything is valid, 1 when a file breaks a rule of the format, 2 for a
usage error or a storage problem. Errors are one line on stderr, never a traceback (set
``ARROWSHUFFLE_DEBUG=1`` to see one).

A PATH of ``validate``, ``inspect`` or ``read`` may be a dataset (a directory or URL holding
``_arrowshuffle_manifest.json`` or manifest versions in ``_arrowshuffle_versions/``): it is
validated against the manifest rules and every listed file's rules, or inspected or read as a
whole. ``validate`` checks every manifest version the dataset retains, each distinct file once
(``--current-only``: the version in force alone) and says which versions it checked;
``inspect`` shows the version in force and the retained ones; ``inspect`` and ``read`` take
``--version N`` to read an earlier version while vacuum retains it (one that is not retained
is an error, exit status 2). Work over several files shows a progress bar on stderr when stderr
is a terminal, and nothing when it is piped.

``plan`` prints the balanced read tasks of a file or dataset, planned from sizes alone (the
manifest's totals, and the index slices of the subpartitions it splits), with the skew before
(max/mean of subpartition bytes, one task per subpartition) and after (max/mean of task bytes).

``compact`` merges groups of consecutive files of a dataset (up to ``--target-file-size`` of
data each) into one file per group and replaces the manifest atomically; ``--dry-run`` prints the
groups only.

``vacuum`` expires manifest versions replaced longer ago than its grace period and removes the
files no retained version lists and what failed writers left in a dataset directory; it prints
removed files and expired versions apart, and the versions retained. Exit 0 when done, 1 when a
retained manifest version cannot be decoded, 2 when there is no manifest or an object could not
be removed.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from collections.abc import Iterator, Sequence
from typing import Any, Protocol, TextIO

import numpy as np
import pyarrow as pa

import arrowshuffle
from arrowshuffle._progress import ProgressBar
from arrowshuffle.format.errors import (
    ArrowShuffleError,
    FormatError,
    InvalidOptionError,
    MissingExtraError,
)
from arrowshuffle.format.naming import (
    DATA_SUFFIX,
    INDEX_SUFFIX,
    MANIFEST_NAME,
    VERSIONS_DIR,
    temp_name,
    version_from_name,
)
from arrowshuffle.format.notation import (
    parse_bytes,
    parse_duration,
    parse_id_ranges,
    select_ids,
)
from arrowshuffle.readers.balance import (
    DEFAULT_SKEW_FACTOR,
    DEFAULT_SKEW_MIN_BYTES,
    DEFAULT_TARGET_BYTES,
    PlannedRead,
    skew_ratio,
)
from arrowshuffle.readers.dataset import ShuffleDataset, open_dataset, open_shuffle
from arrowshuffle.readers.file_reader import ShuffleFile, open_file
from arrowshuffle.readers.integrity import Verify
from arrowshuffle.readers.layout import dataset_layout, dataset_summary, file_layout, file_summary
from arrowshuffle.readers.manifest_io import list_versions
from arrowshuffle.readers.read_cost import read_cost
from arrowshuffle.readers.storage import resolve
from arrowshuffle.readers.validate import ValidationReport, validate_file
from arrowshuffle.readers.validate_dataset import DatasetReport, is_dataset, validate_dataset
from arrowshuffle.writers.compact import DEFAULT_MEMORY as DEFAULT_COMPACT_MEMORY
from arrowshuffle.writers.compact import DEFAULT_TARGET_FILE_SIZE, compact
from arrowshuffle.writers.vacuum import DEFAULT_OLDER_THAN, vacuum

EXIT_OK = 0
EXIT_INVALID = 1
EXIT_ERROR = 2
#: Output formats of ``read``, by file extension.
OUTPUT_FORMATS = {".arrow": "arrow", ".parquet": "parquet", ".csv": "csv"}
#: ``read --verify`` values, as the readers' ``verify`` argument.
_VERIFY_CHOICES: dict[str, Verify] = {"auto": "auto", "on": True, "off": False}


class _UsageError(Exception):
    """A command line that names something impossible (exit status 2)."""


# ---------------------------------------------------------------------- argument parsing


def _storage_option(text: str) -> tuple[str, Any]:
    """Parse ``KEY=VALUE``; a VALUE that is JSON (true, 3, {...}) is decoded, else kept."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, found {text!r}")
    try:
        return key, json.loads(value)
    except json.JSONDecodeError:
        return key, value


def _version_number(text: str) -> int:
    """A manifest version: an integer >= 0."""
    try:
        value = int(text, 10)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(
            f"expected a version number (0, 1, 2, ...), found {text!r}"
        )
    return value


def _add_version_option(command: argparse.ArgumentParser) -> None:
    command.add_argument(
        "--version",
        type=_version_number,
        metavar="N",
        help="of a dataset, read manifest version N instead of the one in force (while vacuum "
        "retains it)",
    )


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``arrowshuffle`` command."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--storage-option",
        metavar="KEY=VALUE",
        action="append",
        type=_storage_option,
        default=[],
        help="fsspec storage option for URLs (repeatable); JSON values are decoded",
    )
    parser = argparse.ArgumentParser(
        prog="arrowshuffle",
        description="Validate, inspect, plan, read and vacuum arrowshuffle files (Arrow IPC + "
        "index sidecar) and datasets.",
        epilog="Exit status: 0 valid, 1 invalid data, 2 usage or IO error.",
    )
    parser.add_argument(
        "--version", action="version", version=f"%(prog)s {arrowshuffle.__version__}"
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    validate = commands.add_parser(
        "validate", parents=[common], help="check files against the format's rules"
    )
    validate.add_argument(
        "paths", nargs="+", metavar="PATH", help="data files (.arrow) or dataset directories"
    )
    validate.add_argument(
        "--deep", action="store_true", help="also read every chunk: checksums, decoding, rows"
    )
    validate.add_argument(
        "--current-only",
        action="store_true",
        help="of a dataset, check the manifest version in force only (by default every "
        "retained version is checked, each file once)",
    )
    validate.add_argument("--json", action="store_true", help="print a JSON list of reports")

    inspect = commands.add_parser(
        "inspect", parents=[common], help="show regions, subpartitions, sizes and skew"
    )
    inspect.add_argument("path", metavar="PATH", help="a data file (.arrow) or a dataset")
    inspect.add_argument("--json", action="store_true", help="print JSON")
    inspect.add_argument(
        "--plot",
        metavar="PNG",
        help="also draw the region x subpartition heatmap of bytes and rows into this file "
        "(needs matplotlib)",
    )
    _add_version_option(inspect)

    plan = commands.add_parser(
        "plan",
        parents=[common],
        help="show balanced read tasks (coalesced and split subpartitions) and their skew",
    )
    plan.add_argument("path", metavar="PATH", help="a dataset or a data file (.arrow)")
    plan.add_argument(
        "--target-bytes",
        default=f"{DEFAULT_TARGET_BYTES // 2**20}MiB",
        metavar="SIZE",
        help="the bytes a task aims at, e.g. 64MiB or 1GB (default %(default)s)",
    )
    plan.add_argument(
        "--subpartitions", metavar="IDS", help="plan only these: 3, 2-7 (inclusive) or 1,4,9"
    )
    plan.add_argument(
        "--skew-factor",
        type=float,
        default=DEFAULT_SKEW_FACTOR,
        metavar="X",
        help="split a subpartition above X times the median ... (default %(default)g)",
    )
    plan.add_argument(
        "--skew-min-bytes",
        default=f"{DEFAULT_SKEW_MIN_BYTES // 2**20}MiB",
        metavar="SIZE",
        help="... that also holds more than SIZE (default %(default)s)",
    )
    plan.add_argument(
        "--max-tasks", type=int, metavar="N", help="at most N tasks: the target grows to fit"
    )
    plan.add_argument("--json", action="store_true", help="print a JSON object")

    read = commands.add_parser(
        "read", parents=[common], help="read subpartitions into an .arrow, .parquet or .csv file"
    )
    read.add_argument("path", metavar="PATH", help="a data file (.arrow) or a dataset")
    read.add_argument(
        "--subpartitions",
        required=True,
        metavar="IDS",
        help="3, 2-7 (inclusive) or 1,4,9",
    )
    read.add_argument("--columns", metavar="A,B", help="columns to keep, in this order")
    read.add_argument("--out", required=True, metavar="FILE", help="output .arrow/.parquet/.csv")
    read.add_argument(
        "--verify",
        choices=("auto", "on", "off"),
        nargs="?",
        const="on",
        default="auto",
        help="check chunk checksums while reading: auto (the default) on object stores only, "
        "on (also plain --verify) or off",
    )
    _add_version_option(read)

    vacuum_cmd = commands.add_parser(
        "vacuum",
        parents=[common],
        help="expire old manifest versions; remove files no retained version lists and what "
        "failed writers left in a dataset",
    )
    vacuum_cmd.add_argument("path", metavar="PATH", help="a dataset directory or URL")
    vacuum_cmd.add_argument(
        "--older-than",
        default=DEFAULT_OLDER_THAN,
        metavar="AGE",
        help="leave objects modified more recently, e.g. 30s, 15m, 1h, 2d or 0 "
        f"(default {DEFAULT_OLDER_THAN})",
    )
    vacuum_cmd.add_argument(
        "--dry-run", action="store_true", help="only print what would be removed"
    )
    vacuum_cmd.add_argument("--json", action="store_true", help="print a JSON object")

    compact_cmd = commands.add_parser(
        "compact",
        parents=[common],
        help="merge groups of small files of a dataset into larger ones (fewer reads per consumer)",
    )
    compact_cmd.add_argument("path", metavar="PATH", help="a dataset directory or URL")
    compact_cmd.add_argument(
        "--target-file-size",
        default=DEFAULT_TARGET_FILE_SIZE,
        metavar="SIZE",
        help="the most data bytes merged into one file, e.g. 256MiB (default %(default)s)",
    )
    compact_cmd.add_argument(
        "--memory",
        default=DEFAULT_COMPACT_MEMORY,
        metavar="SIZE",
        help="input bytes held at once while merging (default %(default)s)",
    )
    compact_cmd.add_argument(
        "--dry-run", action="store_true", help="only print the groups; write nothing"
    )
    compact_cmd.add_argument("--json", action="store_true", help="print a JSON object")
    return parser


# ---------------------------------------------------------------------- commands


def _validate(args: argparse.Namespace, storage: dict[str, Any], out: TextIO) -> int:
    reports: list[dict[str, Any]] = []
    status = EXIT_OK
    bar = ProgressBar(len(args.paths), "validate", sys.stderr)
    for done, path in enumerate(args.paths):
        bar.update(done, path)
        try:
            if _names_dataset(path, storage):
                report: ValidationReport | DatasetReport = _validate_dataset(args, path, storage)
            else:
                report = validate_file(path, deep=args.deep, storage_options=storage)
        except (ArrowShuffleError, OSError) as exc:
            if isinstance(exc, FormatError):
                raise  # not expected from the validators: they report broken rules
            status = EXIT_ERROR
            message = _one_line(exc) + _index_hint(path)
            bar.clear()
            _error(f"ERROR {path}: {message}")
            reports.append({"path": path, "ok": False, "error": message})
            continue
        bar.update(done + 1, path)
        if args.json:  # a dataset's report can list hundreds of thousands of files
            kind = {} if isinstance(report, DatasetReport) else {"kind": "file"}
            reports.append({"path": path, **kind, **report.to_dict(), "error": None})
        if not report.ok and status == EXIT_OK:
            status = EXIT_INVALID
        if not args.json:
            bar.clear()
            print(_report_line(path, report), file=out, flush=True)
    bar.close()
    if args.json:
        json.dump(reports, out, indent=1)
        out.write("\n")
    return status


def _names_dataset(path: str, storage: dict[str, Any]) -> bool:
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
    args: argparse.Namespace, path: str, storage: dict[str, Any]
) -> DatasetReport:
    with ProgressBar(0, f"validate {path}", sys.stderr) as bar:

        def progress(done: int, total: int, name: str) -> None:
            bar.update(done, name, total=total)

        return validate_dataset(
            path,
            deep=args.deep,
            current_only=args.current_only,
            storage_options=storage,
            progress=progress,
        )


def _index_hint(path: str) -> str:
    if path.rstrip("/").endswith("/" + MANIFEST_NAME) or path == MANIFEST_NAME:
        directory = os.path.dirname(path.rstrip("/")) or "."
        return f" (give the dataset directory, {directory!r}, not its manifest)"
    if path.endswith(INDEX_SUFFIX):
        return f" (give the data file, {path[: -len(INDEX_SUFFIX)]!r}, not its index)"
    return ""


def _report_line(path: str, report: ValidationReport | DatasetReport) -> str:
    notes: list[str] = []
    if isinstance(report, DatasetReport):
        found = report.all_violations
        checked = f"checked {_versions_text(report.summary.get('versions', []))}"
        if report.ok:
            files = report.summary.get("files", len(report.files))
            noun = "file" if files == 1 else "files"
            rows = report.summary.get("rows", 0)
            version = report.summary.get("version", 0)
            unlisted = len(report.summary.get("unlisted", []))
            note = f"; {unlisted} unlisted files ignored" if unlisted else ""
            return (
                f"OK {path} (dataset: {files} {noun}, {rows} rows, version {version} in force; "
                f"{checked}{note})"
            )
        notes.append(checked)
    else:
        found = [(None, v) for v in report.violations]
        if report.ok:
            return f"OK {path}"
    (where, first), *rest = found
    more = list(dict.fromkeys(v.rule for _, v in rest))  # distinct, in report order
    if more:
        notes.insert(0, f"more: {', '.join(more)}")
    also = f" ({'; '.join(notes)})" if notes else ""
    prefix = f"{where}: " if where else ""
    return f"INVALID {path}: {prefix}{_one_line(first)}{also}"


def _versions_text(versions: Sequence[int]) -> str:
    """``version 4``, ``versions 1-4``, or runs of consecutive versions: ``versions 1-2,4``."""
    if not versions:
        return "no version"
    if len(versions) == 1:
        return f"version {versions[0]}"
    runs: list[list[int]] = []
    for v in sorted(versions):
        if runs and v == runs[-1][-1] + 1:
            runs[-1].append(v)
        else:
            runs.append([v])
    text = ",".join(_ids_text(range(run[0], run[-1] + 1)) for run in runs)
    return f"versions {text}"


def _open(args: argparse.Namespace, storage: dict[str, Any]) -> ShuffleFile | ShuffleDataset:
    """The file or dataset at ``args.path``; with ``--version``, that version of the dataset.

    Whether a URL is a dataset costs a request only when its name is not a data file's.
    """
    if _names_dataset(args.path, storage):
        return open_dataset(args.path, storage, version=args.version)
    if args.version is not None:
        raise _UsageError(
            f"--version {args.version}: {args.path} is not a dataset; manifest versions belong "
            "to datasets (a directory or URL holding a manifest)"
        )
    return open_file(args.path, storage_options=storage)


def _inspect(args: argparse.Namespace, storage: dict[str, Any], out: TextIO) -> int:
    opened = _open(args, storage)
    if isinstance(opened, ShuffleDataset):
        return _inspect_dataset(args, opened, out)
    with opened as shuffle_file:
        summary = file_summary(shuffle_file)
        if args.plot:
            _plot(file_layout(shuffle_file), args.plot, f"{shuffle_file.url}")
    if args.json:
        json.dump(summary, out, indent=1)
        out.write("\n")
        return EXIT_OK
    lines = [
        f"file           {summary['url']}",
        f"format         v{summary['format_version']}",
        f"regions        {summary['regions']} ({summary['broadcast_regions']} broadcast)",
        f"subpartitions  {summary['subpartitions']}",
        f"rows           {summary['rows']}",
        f"data bytes     {summary['data_bytes']}",
        f"index bytes    {summary['index_bytes']}",
        f"compression    {summary['compression']}",
        f"partitioner    {json.dumps(summary['partitioner'], sort_keys=True)}",
        f"skew           {_skew_text(summary['skew'])}",
        "",
        *_subpartition_table(summary["per_subpartition"]),
    ]
    print("\n".join(lines), file=out)
    return EXIT_OK


def _inspect_dataset(args: argparse.Namespace, dataset: ShuffleDataset, out: TextIO) -> int:
    with ProgressBar(dataset.num_files, "inspect", sys.stderr) as bar:
        layout = dataset_layout(dataset, progress=lambda done, _, name: bar.update(done, name))
    summary = dataset_summary(dataset, layout)
    summary["read_cost"] = read_cost(dataset, layout)
    retained = [v.version for v in list_versions(dataset.directory)]
    summary["version"] = dataset.version
    summary["version_in_force"] = retained[-1] if retained else dataset.version
    summary["versions"] = retained
    if args.plot:
        _plot(layout, args.plot, f"{dataset.url} ({dataset.num_files} files)")
    if args.json:
        json.dump(summary, out, indent=1)
        out.write("\n")
        return EXIT_OK
    lines = [
        f"dataset        {summary['url']}",
        f"version        {summary['version']} {_retention_text(summary)}",
        f"files          {summary['files']}",
        f"regions        {summary['regions']} ({summary['broadcast_regions']} broadcast)",
        f"subpartitions  {summary['subpartitions']}",
        f"rows           {summary['rows']}",
        f"data bytes     {summary['data_bytes']}",
        f"index bytes    {summary['index_bytes']}",
        f"compression    {', '.join(summary['compression']) or 'n/a (no files)'}",
        f"partitioner    {json.dumps(summary['partitioner'], sort_keys=True)}",
        f"skew           {_skew_text(summary['skew'])} over all files",
        *_read_cost_lines(summary["read_cost"]),
        "",
        f"{'file':>6}  {'regions':>7}  {'rows':>12}  {'bytes':>14}  {'skew':>7}  name",
    ]
    lines.extend(
        f"{f['file']:>6}  {f['regions']:>7}  {f['rows']:>12}  {f['data_bytes']:>14}  "
        f"{'n/a' if f['skew'] is None else format(f['skew'], '.3f'):>7}  {f['name']}"
        for f in summary["per_file"]
    )
    lines.append("")
    lines.extend(_subpartition_table(summary["per_subpartition"]))
    print("\n".join(lines), file=out)
    return EXIT_OK


def _retention_text(summary: dict[str, Any]) -> str:
    """Which version ``inspect`` shows, against the one in force and the retained ones."""
    retained = summary["versions"]
    if not retained:
        return "(a dataset of one manifest, written before versions)"
    where = (
        "in force"
        if summary["version"] == summary["version_in_force"]
        else f"in force: {summary['version_in_force']}"
    )
    return f"({where}; retained: {_versions_text(retained)})"


def _read_cost_lines(cost: dict[str, Any]) -> list[str]:
    lines = [
        f"avg chunk      {cost['avg_chunk_bytes']:.0f} bytes ({cost['chunks']} non-empty chunks)",
        f"per consumer   ~{cost['requests_per_consumer']:g} requests for 1 of {cost['consumers']} "
        f"consumers ({cost['subpartitions_per_consumer']} subpartitions each): 1 manifest, "
        f"{cost['index_requests']} index, {cost['data_requests']:g} data (before merging ranges)",
    ]
    if cost["advice"]:
        lines.append(f"suggestion     {cost['advice']}")
    return lines


def _skew_text(skew: float | None) -> str:
    return "n/a (no rows)" if skew is None else f"{skew:.3f} (max/mean rows)"


def _subpartition_table(totals: list[dict[str, Any]]) -> list[str]:
    lines = [f"{'subpartition':>12}  {'rows':>12}  {'bytes':>14}  {'chunks':>6}"]
    lines.extend(
        f"{t['subpartition']:>12}  {t['rows']:>12}  {t['bytes']:>14}  {t['chunks']:>6}"
        for t in totals
    )
    return lines


def _plot(layout: pa.Table, path: str, title: str) -> None:
    """Draw the heatmap into ``path``; a missing matplotlib is a usage error with a hint."""
    from arrowshuffle.plot import plot_layout

    try:
        plot_layout(layout, path, title=title)
    except MissingExtraError as exc:
        raise _UsageError(f"--plot: {exc}") from exc
    except ValueError as exc:  # matplotlib refuses the file name's extension
        raise _UsageError(f"--plot {path!r}: {_one_line(exc)}") from exc
    _error(f"wrote {path}")


class _BatchWriter(Protocol):
    def write_batch(self, batch: pa.RecordBatch) -> None: ...

    def close(self) -> None: ...


def _open_writer(kind: str, path: str, schema: pa.Schema) -> _BatchWriter:
    writer: _BatchWriter
    try:
        if kind == "arrow":
            writer = pa.ipc.new_file(path, schema)
        elif kind == "parquet":
            import pyarrow.parquet as pq

            writer = pq.ParquetWriter(path, schema)
        else:
            import pyarrow.csv as pcsv

            writer = pcsv.CSVWriter(path, schema)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
        raise _UsageError(f"cannot write this schema as {kind}: {_one_line(exc)}") from exc
    return writer


def _write(writer: _BatchWriter, batch: pa.RecordBatch, kind: str) -> None:
    try:
        writer.write_batch(batch)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
        raise _UsageError(f"cannot write these columns as {kind}: {_one_line(exc)}") from exc


@contextlib.contextmanager
def _published(path: str) -> Iterator[str]:
    """Yield a temporary name beside ``path``; rename it to ``path`` only on success."""
    directory, name = os.path.split(os.path.abspath(path))
    temp = os.path.join(directory, temp_name(name))
    try:
        yield temp
        os.replace(temp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp)


def _read(args: argparse.Namespace, storage: dict[str, Any], out: TextIO) -> int:
    extension = os.path.splitext(args.out)[1].lower()
    kind = OUTPUT_FORMATS.get(extension)
    if kind is None:
        raise _UsageError(
            f"--out {args.out!r}: expected a file name ending in .arrow, .parquet or .csv, "
            f"found {extension or 'no extension'!r}"
        )
    runs = parse_id_ranges(args.subpartitions, name="--subpartitions")
    columns = None if args.columns is None else [c.strip() for c in args.columns.split(",")]
    rows = 0
    opened = _open(args, storage)
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
        verify = _VERIFY_CHOICES[args.verify]
        batches = opened.iter_batches(selection, columns=columns, verify=verify)
        with _published(args.out) as temp:
            writer = _open_writer(kind, temp, schema)
            try:
                for batch in batches:
                    _write(writer, batch, kind)
                    rows += batch.num_rows
            finally:
                writer.close()
    print(f"wrote {rows} rows to {args.out}", file=out)
    return EXIT_OK


def _plan(args: argparse.Namespace, storage: dict[str, Any], out: TextIO) -> int:
    # Options are checked before the data is opened: a typo costs no request.
    target = parse_bytes(args.target_bytes, name="--target-bytes")
    skew_min = parse_bytes(args.skew_min_bytes, name="--skew-min-bytes")
    runs = (
        None
        if args.subpartitions is None
        else parse_id_ranges(args.subpartitions, name="--subpartitions")
    )
    opened = open_shuffle(args.path, storage)
    with contextlib.ExitStack() as stack:
        if not isinstance(opened, ShuffleDataset):
            stack.enter_context(opened)
        what = "dataset" if isinstance(opened, ShuffleDataset) else "file"
        n = opened.num_subpartitions
        selection = (
            range(n) if runs is None else select_ids(runs, n, name="--subpartitions", what=what)
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
        before = skew_ratio(sizes[chosen].tolist())
        num_files, url = opened.num_files, opened.url
    after = skew_ratio([t.bytes for t in tasks])
    if args.json:
        doc = {
            "url": url,
            "kind": what,
            "files": num_files,
            "subpartitions": n,
            "target_bytes": target,
            "skew_factor": args.skew_factor,
            "skew_min_bytes": skew_min,
            "max_tasks": args.max_tasks,
            "tasks": [t.to_dict() for t in tasks],
            "skew_before": before,
            "skew_after": after,
        }
        json.dump(doc, out, indent=1)
        out.write("\n")
        return EXIT_OK
    split = sum(1 for t in tasks if len(t.files) < num_files or t.regions is not None)
    lines = [
        f"{what:<15}{url}",
        f"files          {num_files}",
        f"subpartitions  {len(chosen)} of {n}",
        f"target bytes   {target}",
        f"skew min       {skew_min} bytes, {args.skew_factor:g}x the median",
        f"tasks          {len(tasks)} ({split} of them part of a split subpartition)",
        f"skew before    {_ratio_text(before)} (max/mean bytes, one task per subpartition)",
        f"skew after     {_ratio_text(after)} (max/mean bytes of the planned tasks)",
        "",
        f"{'task':>6}  {'subpartitions':<13}  {'files':<14}  {'regions':<9}  {'rows':>12}  "
        f"{'bytes':>14}",
    ]
    lines.extend(
        f"{i:>6}  {_ids_text(t.subpartitions):<13}  {_files_text(t, num_files):<14}  "
        f"{'all' if t.regions is None else _ids_text(t.regions):<9}  {t.rows:>12}  {t.bytes:>14}"
        for i, t in enumerate(tasks)
    )
    print("\n".join(lines), file=out)
    return EXIT_OK


def _ratio_text(ratio: float | None) -> str:
    return "n/a (no bytes)" if ratio is None else f"{ratio:.3f}"


def _ids_text(ids: range) -> str:
    """``4`` or ``2-7`` (inclusive, as ``--subpartitions`` takes them)."""
    return str(ids.start) if len(ids) == 1 else f"{ids.start}-{ids.stop - 1}"


def _files_text(task: PlannedRead, num_files: int) -> str:
    """``all (8)`` for every file, else runs of consecutive files: ``3``, ``0-2``, ``0-2,5``."""
    if len(task.files) == num_files:
        return f"all ({num_files})"
    ids = np.asarray(task.files, dtype=np.int64)
    breaks = np.flatnonzero(np.diff(ids) != 1) + 1
    return ",".join(
        _ids_text(range(int(run[0]), int(run[-1]) + 1)) for run in np.split(ids, breaks)
    )


def _vacuum(args: argparse.Namespace, storage: dict[str, Any], out: TextIO) -> int:
    try:
        older_than = parse_duration(args.older_than, name="--older-than")
        report = vacuum(
            args.path, older_than=older_than, dry_run=args.dry_run, storage_options=storage
        )
    except (ArrowShuffleError, OSError) as exc:
        if args.json:  # machines get an object on stdout too; main() prints the error line
            refused = {"url": args.path, "ok": False, "dry_run": args.dry_run, "removed": []}
            json.dump({**refused, "error": _one_line(exc)}, out, indent=1)
            out.write("\n")
        raise
    for name, reason in report.failed:
        _error(f"ERROR could not remove {report.url.rstrip('/')}/{name}: {reason}")
    status = EXIT_OK if report.ok else EXIT_ERROR
    if args.json:
        versions = sorted(_expired_versions(report.removed).values())
        json.dump({**report.to_dict(), "expired_versions": versions, "error": None}, out, indent=1)
        out.write("\n")
        return status
    verb = "would remove" if report.dry_run else "removed"
    expire = "would expire" if report.dry_run else "expired"
    root = report.url.rstrip("/")
    expired = _expired_versions(report.removed)
    files = [name for name in report.removed if name not in expired]
    for name in files:
        print(f"{verb} {root}/{name}", file=out)
    for name, version in expired.items():
        print(f"{expire} version {version} ({root}/{name})", file=out)
    count = len(files)
    summary = f"{verb} {count} {'object' if count == 1 else 'objects'}"
    if expired:
        summary += f", {expire} {_versions_text(list(expired.values()))}"
    if report.recent:
        summary += f", kept {len(report.recent)} modified within {args.older_than}"
    if report.failed:
        summary += f", {len(report.failed)} could not be removed"
    if report.retained_versions:
        summary += f"; retained {_versions_text(report.retained_versions)}"
    title = "dry run of" if report.dry_run else "vacuumed"
    print(f"{title} {report.url}: {summary}", file=out)
    return status


def _expired_versions(removed: Sequence[str]) -> dict[str, int]:
    """The manifest versions among removed names (``_arrowshuffle_versions/<n>.json``)."""
    found: dict[str, int] = {}
    for name in removed:
        folder, _, base = name.rpartition("/")
        version = version_from_name(base) if folder == VERSIONS_DIR else None
        if version is not None:
            found[name] = version
    return found


def _compact(args: argparse.Namespace, storage: dict[str, Any], out: TextIO) -> int:
    # Options are checked before the dataset is opened: a typo costs no request.
    target = parse_bytes(args.target_file_size, name="--target-file-size")
    memory = parse_bytes(args.memory, name="--memory")
    if target < 1 or memory < 1:
        raise _UsageError("--target-file-size and --memory must be at least 1 byte")
    # The work's size is learnt on the way: the bar shows the latest step only.
    with ProgressBar(1, "compact", sys.stderr, min_total=1) as bar:
        report = compact(
            args.path,
            target_file_size=target,
            memory=memory,
            storage_options=storage,
            dry_run=args.dry_run,
            progress=lambda line: bar.update(0, line),
        )
    if args.json:
        json.dump(report.to_dict(), out, indent=1)
        out.write("\n")
        return EXIT_OK
    merged = [g for g in report.groups if g.merged]
    verb = "would merge" if report.dry_run else "merged"
    lines = [
        f"{'group':>6}  {'files':<11}  {'bytes':>14}  {'rows':>12}  action"
        if report.groups
        else "no files",
    ]
    lines.extend(
        f"{g.index:>6}  {_ids_text(range(g.files[0], g.files[-1] + 1)):<11}  "
        f"{g.data_bytes:>14}  {g.rows:>12}  {'merge' if g.merged else 'keep'}"
        for g in report.groups
    )
    summary = (
        f"{verb} {sum(len(g.files) for g in merged)} of {report.files_before} files into "
        f"{len(merged)}: {report.files_before} -> {report.files_after} files"
    )
    if not report.dry_run and merged:
        summary += (
            f", read {report.bytes_read} bytes, wrote {report.bytes_written} in "
            f"{report.seconds:.1f} s"
        )
    elif not merged:
        summary = f"nothing to merge: every group of {args.target_file_size} holds one file"
    lines += ["", f"{'dry run of' if report.dry_run else 'compacted'} {report.url}: {summary}"]
    print("\n".join(lines), file=out)
    return EXIT_OK


# ---------------------------------------------------------------------- entry point


def _one_line(exc: object) -> str:
    return " ".join(str(exc).split())


def _error(message: str) -> None:
    print(message, file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``arrowshuffle`` command and return its exit status."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version or a usage error already printed
        return int(exc.code or 0) if isinstance(exc.code, int) else EXIT_ERROR
    storage = dict(args.storage_option)
    commands = {
        "validate": _validate,
        "inspect": _inspect,
        "plan": _plan,
        "read": _read,
        "vacuum": _vacuum,
        "compact": _compact,
    }
    try:
        return commands[args.command](args, storage, sys.stdout)
    except BrokenPipeError:
        # The reader of our output went away (`| head`): stop quietly, as Unix tools do.
        with contextlib.suppress(OSError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_ERROR
    except FormatError as exc:
        _error(f"INVALID {getattr(args, 'path', '-')}: {_one_line(exc)}")
        return EXIT_INVALID
    except (ArrowShuffleError, OSError, _UsageError) as exc:
        _error(f"error: {_one_line(exc)}")
        return EXIT_ERROR
    except KeyboardInterrupt:
        _error("interrupted")
        return EXIT_ERROR
    except Exception as exc:
        if os.environ.get("ARROWSHUFFLE_DEBUG") == "1":
            raise
        _error(f"internal error: {type(exc).__name__}: {_one_line(exc)}")
        return EXIT_ERROR


if __name__ == "__main__":
    sys.exit(main())
