"""What the commands compute, and the one interface through which it is shown.

Each command computes one of the results below and hands it to an :class:`Output`, which
renders it as text or as JSON (:mod:`arrowshuffle.cli.output`); a failure becomes a
:class:`CommandError`, rendered by the same output as one ``error: <message>`` line. The
commands never format text, and the outputs never compute.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from arrowshuffle._progress import ProgressBar
    from arrowshuffle.readers.balance import PlannedRead
    from arrowshuffle.readers.validate import ValidationReport
    from arrowshuffle.readers.validate_dataset import DatasetReport
    from arrowshuffle.writers.compact import CompactionReport
    from arrowshuffle.writers.vacuum import VacuumReport

#: Exit status: everything checked is valid (or the command did its work).
EXIT_OK = 0
#: Exit status: data breaks a rule of the format.
EXIT_INVALID = 1
#: Exit status: a usage error, or a storage problem (a missing file, a refused request).
EXIT_ERROR = 2

#: What validation can verify, in order: the structure (V1-V15, V20, V21 and, of a dataset,
#: M1-M11), chunk checksums (V16), decoding (V17, V18) and row placement (V19). The last three
#: need ``--deep``.
CHECKS = ("structure", "checksums", "decoding", "placement")


class CommandError(Exception):
    """A failure, shown as one line; its exit status and what it concerns.

    Attributes:
        message: the line's text, without the ``error:`` prefix.
        status: :data:`EXIT_INVALID` for invalid data, else :data:`EXIT_ERROR`.
        path: the path or URL the user gave, when the failure concerns one.
        violations: every broken rule found, as ``{"file", "rule", "message"}`` (``file`` is
            None for the file or manifest itself), when the failure is invalid data.
    """

    def __init__(
        self,
        message: str,
        *,
        status: int = EXIT_ERROR,
        path: str | None = None,
        violations: list[dict[str, Any]] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.path = path
        self.violations = violations or []


@dataclass(frozen=True)
class Checked:
    """Which of :data:`CHECKS` a validation verified, and why a requested one did not run."""

    verified: tuple[str, ...]
    not_verified: tuple[str, ...]
    deep: bool
    reasons: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """The JSON form: ``{"verified": [...], "not_verified": [...], "reasons": [...]}``."""
        return {
            "verified": list(self.verified),
            "not_verified": list(self.not_verified),
            "reasons": list(self.reasons),
        }


@dataclass(frozen=True)
class Validated:
    """One path that ``validate`` checked (whatever the outcome)."""

    path: str
    report: ValidationReport | DatasetReport
    checked: Checked


@dataclass(frozen=True)
class Inspected:
    """What ``inspect`` shows: a file's or a dataset's summary (``kind`` is which)."""

    kind: str
    summary: dict[str, Any]


@dataclass(frozen=True)
class Planned:
    """What ``plan`` shows: the balanced tasks of the selected subpartitions, and the skew."""

    url: str
    kind: str
    files: int
    subpartitions: int
    selected: int
    target_bytes: int
    skew_factor: float
    skew_min_bytes: int
    max_tasks: int | None
    tasks: list[PlannedRead]
    skew_before: float | None
    skew_after: float | None


@dataclass(frozen=True)
class Written:
    """What ``read`` wrote: rows into one output file."""

    out: str
    rows: int


@dataclass(frozen=True)
class Vacuumed:
    """What ``vacuum`` did or would do; ``expired`` maps removed version files to versions."""

    report: VacuumReport
    older_than: str
    expired: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Compacted:
    """What ``compact`` did or would do; ``target_bytes`` is the target file size."""

    report: CompactionReport
    target_bytes: int


class Output(Protocol):
    """Where the commands send their results (text or JSON: :mod:`arrowshuffle.cli.output`)."""

    def progress(self, total: int, label: str, *, min_total: int = 2) -> ProgressBar:
        """A progress bar on stderr (drawn on a terminal only), cleared before each line."""
        ...

    def validated(self, result: Validated) -> None:
        """One path of ``validate`` checked."""
        ...

    def validate_failed(self, path: str, error: CommandError) -> None:
        """One path of ``validate`` that could not be checked; the others go on."""
        ...

    def validate_done(self) -> None:
        """Every path of ``validate`` is done."""
        ...

    def inspected(self, result: Inspected) -> None:
        """The summary of ``inspect``."""
        ...

    def planned(self, result: Planned) -> None:
        """The plan of ``plan``."""
        ...

    def written(self, result: Written) -> None:
        """What ``read`` wrote."""
        ...

    def vacuumed(self, result: Vacuumed) -> None:
        """What ``vacuum`` removed and retained."""
        ...

    def compacted(self, result: Compacted) -> None:
        """What ``compact`` merged."""
        ...

    def note(self, message: str) -> None:
        """A remark beside the result (on stderr), such as a file written on the side."""
        ...

    def error(self, error: CommandError) -> None:
        """The failure that ended the command."""
        ...
