"""The numbered validation rules of ``spec.md`` section 11 and the one check of each.

Every rule is implemented once, by a function of :mod:`arrowshuffle.format` decorated with
:func:`implements`. A check either returns a :class:`Violation` (or None) that its caller raises
or collects, or, while decoding, raises the violation's error: the rule id is written only in
the check itself. Importing :mod:`arrowshuffle.format.rules` loads every implementing module.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from arrowshuffle.format.errors import ArrowShuffleError, CorruptFileError, FormatError

#: Rules of one shuffle file: ``id -> one-line summary`` (spec.md section 11).
RULES: dict[str, str] = {
    "V1": "the index starts with the magic ASHUFIDX and ends with the trailer magic ASHUFEND",
    "V2": "the major format version is supported and no unknown required flag is set",
    "V3": "the header CRC32C matches the header",
    "V4": "the section sizes add up and the index object has exactly the declared length",
    "V5": "the metadata CRC32C matches the schema, partitioner, region and CRC tables",
    "V6": "every subpartition's entry block and the whole index match their CRC32Cs",
    "V7": "the schema is an Arrow IPC schema message and the partitioner spec a JSON object",
    "V8": "every chunk lies inside the data file",
    "V9": "in a regular region, chunks are contiguous in ascending subpartition order and "
    "fill the region; regions are in ascending order and do not overlap",
    "V10": "in a broadcast region, every subpartition's entry is the region's single chunk",
    "V11": "a chunk has no bytes, no batches and no rows, or all three",
    "V12": "the header's total row count equals the rows of the entries",
    "V13": "the data file is an Arrow IPC file of exactly the length the index declares",
    "V14": "the data file carries the index's file id (the two belong together)",
    "V15": "the data file's schema equals the index's schema",
    "V16": "every chunk's bytes match the chunk's CRC32C (deep)",
    "V17": "every chunk decodes into its declared batches and rows with the file's schema (deep)",
    "V18": "the data file holds exactly the indexed batches and rows (deep)",
    "V19": "every row lies in the subpartition its partitioner assigns it (deep)",
    "V20": "no undefined region flag bit is set and every reserved field is zero",
    "V21": "the regions cover every record batch of the data file, from the first to the "
    "footer, without a gap",
}

#: Rules of a dataset: ``id -> one-line summary`` (spec.md section 11).
MANIFEST_RULES: dict[str, str] = {
    "M1": "the manifest is an arrowshuffle manifest with well-typed fields",
    "M2": "the manifest's format version is supported",
    "M3": "file names stay inside the dataset directory and each index is named <data file>.idx",
    "M4": "every listed data and index file is present with its listed size",
    "M5": "each index's trailer checksum equals the listed index checksum",
    "M6": "every file has the manifest's schema, subpartition count and partitioner "
    "(per-producer fields aside)",
    "M7": "each file's rows, regions and data length equal what its index declares",
    "M8": "every file is listed once",
    "M9": "the per-subpartition totals, when listed, are the sums over the files' indexes",
    "M10": "a manifest version file holds the version its name gives",
    "M11": "the retained manifest versions are consecutive",
}

#: ``rule id -> the function that implements it``, filled by :func:`implements`.
IMPLEMENTATIONS: dict[str, Callable[..., Any]] = {}

F = TypeVar("F", bound=Callable[..., Any])


def implements(*rules: str) -> Callable[[F], F]:
    """Record the decorated function as the one implementation of ``rules``.

    Raises:
        ArrowShuffleError: a rule is unknown or already has an implementation.
    """

    def register(function: F) -> F:
        for rule in rules:
            if rule not in RULES and rule not in MANIFEST_RULES:
                raise ArrowShuffleError(f"{function.__qualname__} implements unknown rule {rule}")
            other = IMPLEMENTATIONS.get(rule)
            if other is not None and other is not function:
                raise ArrowShuffleError(
                    f"rule {rule} is implemented by {other.__module__}.{other.__qualname__}; "
                    f"{function.__module__}.{function.__qualname__} implements it again"
                )
            IMPLEMENTATIONS[rule] = function
        return function

    return register


@dataclass(frozen=True)
class Violation:
    """One broken rule, with a message that names what was expected and what was found.

    Attributes:
        rule: the rule id (``"V16"``).
        message: what was expected and what was found.
        kind: the error class that a caller that stops at the violation raises.
    """

    rule: str
    message: str
    kind: type[FormatError] = field(default=CorruptFileError, compare=False, repr=False)

    def __str__(self) -> str:
        return f"[{self.rule}] {self.message}"

    def error(self, where: str | None = None) -> FormatError:
        """The error to raise for this violation, its message prefixed by ``where``."""
        message = f"{where}: {self.message}" if where else self.message
        return self.kind(message, rule=self.rule)

    @staticmethod
    def from_error(exc: FormatError, default_rule: str) -> Violation:
        """The violation a raised :class:`FormatError` reports (``default_rule`` if it has none)."""
        return Violation(exc.rule or default_rule, exc.detail, type(exc))
