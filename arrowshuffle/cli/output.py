"""The one place that renders the commands' results: as text for people, as JSON for machines.

Both renderers take the same result objects (:mod:`arrowshuffle.cli.results`), so the two
forms say the same thing:

* sizes: human-readable in text (``256 MiB``, :func:`~arrowshuffle.format.notation.format_size`),
  exact byte counts in JSON;
* id ranges (subpartitions, regions): inclusive in both, ``0-63`` in text (as
  ``--subpartitions`` takes them) and ``{"first": 0, "last": 63}`` in JSON;
* errors: one line ``error: <message>`` on stderr, never a traceback nor an ``[Errno N]``;
  with ``--json`` also an object on stdout: ``{"path", "ok": false, "error", "violations"}``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, TextIO

from arrowshuffle._progress import ProgressBar
from arrowshuffle.cli.results import (
    CommandError,
    Compacted,
    Inspected,
    Planned,
    Vacuumed,
    Validated,
    Written,
)
from arrowshuffle.format.notation import format_size
from arrowshuffle.readers.balance import PlannedRead
from arrowshuffle.readers.validate_dataset import DatasetReport

#: How each check of validation is named in text.
_CHECK_NAMES = {
    "structure": "structure",
    "checksums": "checksums",
    "decoding": "decoding",
    "placement": "row placement",
}


class _Base:
    """What both renderers share: the streams, progress bars and the error line."""

    def __init__(self, stdout: TextIO, stderr: TextIO) -> None:
        self.stdout = stdout
        self.stderr = stderr
        self._bars: list[ProgressBar] = []

    def progress(self, total: int, label: str, *, min_total: int = 2) -> ProgressBar:
        """A progress bar on stderr, drawn on a terminal only, cleared before each line."""
        bar = ProgressBar(total, label, self.stderr, min_total=min_total)
        self._bars.append(bar)
        return bar

    def _clear_bars(self) -> None:
        for bar in self._bars:
            bar.clear()  # a no-op for a bar that is not drawn

    def print(self, text: str) -> None:
        """A line (or lines) of the result on stdout."""
        self._clear_bars()
        print(text, file=self.stdout, flush=True)

    def note(self, message: str) -> None:
        """A remark on stderr, beside the result."""
        self._clear_bars()
        print(message, file=self.stderr, flush=True)

    def error(self, error: CommandError) -> None:
        """The ``error: <message>`` line on stderr."""
        self.note(f"error: {error.message}")


class TextOutput(_Base):
    """Results as text for people: aligned fields, tables, human-readable sizes."""

    def validated(self, result: Validated) -> None:
        """One line per path: ``OK`` and what was checked, or ``INVALID`` and the rule."""
        self.print(validated_line(result))

    def validate_failed(self, path: str, error: CommandError) -> None:
        """The error line of a path that could not be checked."""
        self.error(error)

    def validate_done(self) -> None:
        """Nothing more: every line is out."""

    def inspected(self, result: Inspected) -> None:
        """The summary's fields, then its tables."""
        summary = result.summary
        if result.kind == "dataset":
            self.print("\n".join(_dataset_lines(summary)))
            return
        lines = [
            f"file           {summary['url']}",
            f"format         v{summary['format_version']}",
            f"regions        {summary['regions']} ({summary['broadcast_regions']} broadcast)",
            f"subpartitions  {summary['subpartitions']}",
            f"rows           {summary['rows']}",
            f"data size      {format_size(summary['data_bytes'])}",
            f"index size     {format_size(summary['index_bytes'])}",
            f"compression    {summary['compression']}",
            f"partitioner    {json.dumps(summary['partitioner'], sort_keys=True)}",
            f"skew           {_skew_text(summary['skew'])}",
            "",
            *_subpartition_table(summary["per_subpartition"]),
        ]
        self.print("\n".join(lines))

    def planned(self, result: Planned) -> None:
        """The plan's fields, then one line per task."""
        tasks = result.tasks
        split = sum(1 for t in tasks if len(t.files) < result.files or t.regions is not None)
        lines = [
            f"{result.kind:<15}{result.url}",
            f"files          {result.files}",
            f"subpartitions  {result.selected} of {result.subpartitions}",
            f"target size    {format_size(result.target_bytes)}",
            f"skew min       {format_size(result.skew_min_bytes)}, "
            f"{result.skew_factor:g}x the median",
            f"tasks          {len(tasks)} ({split} of them part of a split subpartition)",
            f"skew before    {_ratio_text(result.skew_before)} (max/mean bytes, one task per "
            "subpartition)",
            f"skew after     {_ratio_text(result.skew_after)} (max/mean bytes of the planned "
            "tasks)",
            "",
            f"{'task':>6}  {'subpartitions':<13}  {'files':<14}  {'regions':<9}  {'rows':>12}  "
            f"{'size':>10}",
        ]
        lines.extend(
            f"{i:>6}  {ids_text(t.subpartitions):<13}  {_files_text(t, result.files):<14}  "
            f"{'all' if t.regions is None else ids_text(t.regions):<9}  {t.rows:>12}  "
            f"{format_size(t.bytes):>10}"
            for i, t in enumerate(tasks)
        )
        self.print("\n".join(lines))

    def written(self, result: Written) -> None:
        """``wrote N rows to OUT``."""
        self.print(f"wrote {result.rows} rows to {result.out}")

    def vacuumed(self, result: Vacuumed) -> None:
        """Removed files, then expired versions, then the summary; failures on stderr."""
        report = result.report
        root = report.url.rstrip("/")
        for name, reason in report.failed:
            self.note(f"error: could not remove {root}/{name}: {reason}")
        verb = "would remove" if report.dry_run else "removed"
        expire = "would expire" if report.dry_run else "expired"
        files = [name for name in report.removed if name not in result.expired]
        lines = [f"{verb} {root}/{name}" for name in files]
        lines += [f"{expire} version {v} ({root}/{name})" for name, v in result.expired.items()]
        count = len(files)
        summary = f"{verb} {count} {'object' if count == 1 else 'objects'}"
        if result.expired:
            summary += f", {expire} {versions_text(list(result.expired.values()))}"
        if report.recent:
            summary += f", kept {len(report.recent)} modified within {result.older_than}"
        if report.failed:
            summary += f", {len(report.failed)} could not be removed"
        if report.retained_versions:
            summary += f"; retained {versions_text(report.retained_versions)}"
        title = "dry run of" if report.dry_run else "vacuumed"
        self.print("\n".join([*lines, f"{title} {report.url}: {summary}"]))

    def compacted(self, result: Compacted) -> None:
        """One line per group, then the summary."""
        report = result.report
        merged = [g for g in report.groups if g.merged]
        verb = "would merge" if report.dry_run else "merged"
        lines = [
            f"{'group':>6}  {'files':<11}  {'size':>10}  {'rows':>12}  action"
            if report.groups
            else "no files",
        ]
        lines.extend(
            f"{g.index:>6}  {ids_text(range(g.files[0], g.files[-1] + 1)):<11}  "
            f"{format_size(g.data_bytes):>10}  {g.rows:>12}  {'merge' if g.merged else 'keep'}"
            for g in report.groups
        )
        summary = (
            f"{verb} {sum(len(g.files) for g in merged)} of {report.files_before} files into "
            f"{len(merged)}: {report.files_before} -> {report.files_after} files"
        )
        if not report.dry_run and merged:
            summary += (
                f", read {format_size(report.bytes_read)}, wrote "
                f"{format_size(report.bytes_written)} in {report.seconds:.1f} s"
            )
        elif not merged:
            summary = (
                f"nothing to merge: every group of up to {format_size(result.target_bytes)} "
                "holds one file"
            )
        title = "dry run of" if report.dry_run else "compacted"
        lines += ["", f"{title} {report.url}: {summary}"]
        self.print("\n".join(lines))


class JsonOutput(_Base):
    """Results as JSON for machines: exact numbers, ranges as ``{"first", "last"}``."""

    def __init__(self, stdout: TextIO, stderr: TextIO) -> None:
        super().__init__(stdout, stderr)
        self._reports: list[dict[str, Any]] = []

    def _dump(self, doc: object) -> None:
        self.print(json.dumps(doc, indent=1))

    def validated(self, result: Validated) -> None:
        """Kept for the list that :meth:`validate_done` prints."""
        report = result.report
        kind = {} if isinstance(report, DatasetReport) else {"kind": "file"}
        self._reports.append(
            {
                "path": result.path,
                **kind,
                **report.to_dict(),
                "checked": result.checked.to_dict(),
                "error": None,
            }
        )

    def validate_failed(self, path: str, error: CommandError) -> None:
        """The error line, and the path's entry in the list."""
        super().error(error)
        self._reports.append(
            {"path": path, "ok": False, "error": error.message, "violations": error.violations}
        )

    def validate_done(self) -> None:
        """The list of every path's report."""
        self._dump(self._reports)

    def inspected(self, result: Inspected) -> None:
        """The summary as it is."""
        self._dump(result.summary)

    def planned(self, result: Planned) -> None:
        """The plan, its tasks' ranges inclusive."""
        self._dump(
            {
                "url": result.url,
                "kind": result.kind,
                "files": result.files,
                "subpartitions": result.subpartitions,
                "target_bytes": result.target_bytes,
                "skew_factor": result.skew_factor,
                "skew_min_bytes": result.skew_min_bytes,
                "max_tasks": result.max_tasks,
                "tasks": [task_dict(t) for t in result.tasks],
                "skew_before": result.skew_before,
                "skew_after": result.skew_after,
            }
        )

    def written(self, result: Written) -> None:
        """``{"out", "rows"}``."""
        self._dump({"out": result.out, "rows": result.rows})

    def vacuumed(self, result: Vacuumed) -> None:
        """The report with its expired versions; failures on stderr too."""
        report = result.report
        root = report.url.rstrip("/")
        for name, reason in report.failed:
            self.note(f"error: could not remove {root}/{name}: {reason}")
        versions = sorted(result.expired.values())
        self._dump({**report.to_dict(), "expired_versions": versions, "error": None})

    def compacted(self, result: Compacted) -> None:
        """The report as it is."""
        self._dump(result.report.to_dict())

    def error(self, error: CommandError) -> None:
        """The error line on stderr, and an object on stdout."""
        super().error(error)
        self._dump(
            {
                "path": error.path,
                "ok": False,
                "error": error.message,
                "violations": error.violations,
            }
        )


# ---------------------------------------------------------------------- pieces of text


def validated_line(result: Validated) -> str:
    """``OK path (what was checked)`` or ``INVALID path: [rule] message (and N more ...)``."""
    path, report = result.path, result.report
    checked = checked_text(result)
    notes: list[str] = []
    if isinstance(report, DatasetReport):
        found = report.all_violations
        versions = f"checked {versions_text(report.summary.get('versions', []))}"
        if report.ok:
            files = report.summary.get("files", len(report.files))
            noun = "file" if files == 1 else "files"
            rows = report.summary.get("rows", 0)
            version = report.summary.get("version", 0)
            unlisted = len(report.summary.get("unlisted", []))
            note = f"; {unlisted} unlisted files ignored" if unlisted else ""
            return (
                f"OK {path} (dataset: {files} {noun}, {rows} rows, version {version} in force; "
                f"{checked}; {versions}{note})"
            )
        notes.append(versions)
    else:
        found = [(None, v) for v in report.violations]
        if report.ok:
            return f"OK {path} ({checked})"
    (where, first), *rest = found
    if rest:
        noun = "problem" if len(rest) == 1 else "problems"
        notes.insert(0, f"and {len(rest)} more {noun}; --json lists them")
    also = f" ({'; '.join(notes)})" if notes else ""
    prefix = f"{where}: " if where else ""
    return f"INVALID {path}: {prefix}{' '.join(str(first).split())}{also}"


def checked_text(result: Validated) -> str:
    """What a validation verified: ``structure OK, checksums not verified: use --deep``."""
    checked = result.checked
    if not checked.deep:
        return "structure OK, checksums not verified: use --deep"
    names = [_CHECK_NAMES[c] for c in checked.verified]
    text = f"{_and(names)} OK"
    missing = [_CHECK_NAMES[c] for c in checked.not_verified]
    if missing:
        why = "; ".join(r.removeprefix("V19: ") for r in checked.reasons)
        text += f", {_and(missing)} not checked" + (f": {why}" if why else "")
    return text


def _and(words: Sequence[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    if len(words) < 2:
        return "".join(words)
    return f"{', '.join(words[:-1])} and {words[-1]}"


def ids_text(ids: range) -> str:
    """``4`` or ``2-7`` (inclusive, as ``--subpartitions`` takes them)."""
    return str(ids.start) if len(ids) == 1 else f"{ids.start}-{ids.stop - 1}"


def ids_dict(ids: range) -> dict[str, int]:
    """``{"first": 2, "last": 7}``: the JSON form of the inclusive range ``2-7``."""
    return {"first": ids.start, "last": ids.stop - 1}


def task_dict(task: PlannedRead) -> dict[str, Any]:
    """A planned task in JSON: ranges inclusive, as in text."""
    return {
        "subpartitions": ids_dict(task.subpartitions),
        "files": list(task.files),
        "regions": None if task.regions is None else ids_dict(task.regions),
        "bytes": task.bytes,
        "rows": task.rows,
    }


def versions_text(versions: Sequence[int]) -> str:
    """``version 4``, ``versions 1-4``, or runs of consecutive versions: ``versions 1-2,4``."""
    if not versions:
        return "no version"
    if len(versions) == 1:
        return f"version {versions[0]}"
    return f"versions {_runs_text(versions)}"


def _runs_text(ids: Sequence[int]) -> str:
    """Runs of consecutive ids, inclusive: ``0-2,5``."""
    runs: list[list[int]] = []
    for i in sorted(ids):
        if runs and i == runs[-1][-1] + 1:
            runs[-1].append(i)
        else:
            runs.append([i])
    return ",".join(ids_text(range(run[0], run[-1] + 1)) for run in runs)


def _files_text(task: PlannedRead, num_files: int) -> str:
    """``all (8)`` for every file, else runs of consecutive files: ``3``, ``0-2``, ``0-2,5``."""
    if len(task.files) == num_files:
        return f"all ({num_files})"
    return _runs_text(task.files)


def _ratio_text(ratio: float | None) -> str:
    return "n/a (no bytes)" if ratio is None else f"{ratio:.3f}"


def _skew_text(skew: float | None) -> str:
    return "n/a (no rows)" if skew is None else f"{skew:.3f} (max/mean rows)"


def _subpartition_table(totals: list[dict[str, Any]]) -> list[str]:
    lines = [f"{'subpartition':>12}  {'rows':>12}  {'size':>10}  {'chunks':>6}"]
    lines.extend(
        f"{t['subpartition']:>12}  {t['rows']:>12}  {format_size(t['bytes']):>10}  {t['chunks']:>6}"
        for t in totals
    )
    return lines


def _dataset_lines(summary: dict[str, Any]) -> list[str]:
    lines = [
        f"dataset        {summary['url']}",
        f"version        {summary['version']} {_retention_text(summary)}",
        f"files          {summary['files']}",
        f"regions        {summary['regions']} ({summary['broadcast_regions']} broadcast)",
        f"subpartitions  {summary['subpartitions']}",
        f"rows           {summary['rows']}",
        f"data size      {format_size(summary['data_bytes'])}",
        f"index size     {format_size(summary['index_bytes'])}",
        f"compression    {', '.join(summary['compression']) or 'n/a (no files)'}",
        f"partitioner    {json.dumps(summary['partitioner'], sort_keys=True)}",
        f"skew           {_skew_text(summary['skew'])} over all files",
        *_read_cost_lines(summary["read_cost"]),
        "",
        f"{'file':>6}  {'regions':>7}  {'rows':>12}  {'size':>10}  {'skew':>7}  name",
    ]
    lines.extend(
        f"{f['file']:>6}  {f['regions']:>7}  {f['rows']:>12}  {format_size(f['data_bytes']):>10}  "
        f"{'n/a' if f['skew'] is None else format(f['skew'], '.3f'):>7}  {f['name']}"
        for f in summary["per_file"]
    )
    lines.append("")
    lines.extend(_subpartition_table(summary["per_subpartition"]))
    return lines


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
    return f"({where}; retained: {versions_text(retained)})"


def _read_cost_lines(cost: dict[str, Any]) -> list[str]:
    lines = [
        f"avg chunk      {format_size(int(cost['avg_chunk_bytes']))} ({cost['chunks']} non-empty "
        "chunks)",
        f"per consumer   ~{cost['requests_per_consumer']:g} requests for 1 of {cost['consumers']} "
        f"consumers ({cost['subpartitions_per_consumer']} subpartitions each): 1 manifest, "
        f"{cost['index_requests']} index, {cost['data_requests']:g} data (before merging ranges)",
    ]
    if cost["advice"]:
        lines.append(f"suggestion     {cost['advice']}")
    return lines
