"""The single error hierarchy of arrowshuffle.

Every error raised on purpose derives from :class:`ArrowShuffleError`. Errors about bytes or
options are also :class:`ValueError`, errors about storage :class:`OSError` and a missing
optional dependency :class:`ImportError`, so callers that already catch the builtin classes
keep working.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any


class ArrowShuffleError(Exception):
    """Base class of every error arrowshuffle raises on purpose."""


class FormatError(ArrowShuffleError, ValueError):
    """Bytes that do not follow the arrowshuffle format.

    Attributes:
        rule: the validation rule of ``spec.md`` that the bytes break (``"V4"``), if one applies.
    """

    def __init__(self, message: str, *, rule: str | None = None) -> None:
        super().__init__(f"[{rule}] {message}" if rule else message)
        self.rule = rule
        self.detail = message


class CorruptFileError(FormatError):
    """A file that claims to be an arrowshuffle file but whose bytes are damaged."""


class ChecksumMismatchError(CorruptFileError):
    """A CRC32C stored in the index does not match the bytes it covers."""


class UnsupportedVersionError(FormatError):
    """A file written by a newer, incompatible version of the format."""


class SchemaMismatchError(FormatError):
    """Data whose Arrow schema differs from the one the file or dataset declares."""


class InvalidOptionError(ArrowShuffleError, ValueError):
    """An argument or option with a value that cannot be used."""


class PartitioningMismatchError(InvalidOptionError):
    """Datasets that are not partitioned alike, given where co-partitioned inputs are needed."""


class ShuffleIOError(ArrowShuffleError, OSError):
    """A storage operation that failed: a missing object, a refused request, a short read."""


class MissingObjectError(ShuffleIOError, FileNotFoundError):
    """A file or object that should exist and does not."""


class CommitConflictError(ArrowShuffleError):
    """A dataset commit that another job's commit made impossible (nothing was committed).

    Raised when an overwrite (or a first write) finds that the dataset moved on from the
    version it started from, or when a compaction finds some of its input files replaced.
    The job's own new files are removed; the dataset stays as the other job left it.

    Attributes:
        expected: the version the job started from (None: no dataset yet).
        found: the version in force when the job tried to commit.
    """

    def __init__(self, message: str, *, expected: int | None = None, found: int | None = None):
        super().__init__(message)
        self.expected = expected
        self.found = found

    def __reduce__(self) -> tuple[Any, ...]:
        return _rebuild_conflict, (str(self), self.expected, self.found)


def _rebuild_conflict(message: str, expected: int | None, found: int | None) -> CommitConflictError:
    return CommitConflictError(message, expected=expected, found=found)


class MissingExtraError(ArrowShuffleError, ImportError):
    """An optional dependency that a feature needs is not installed.

    Attributes:
        module: the module that could not be imported (``"polars"``).
        extra: the arrowshuffle extra that installs it (``"polars"``), if one does.
    """

    def __init__(self, module: str, extra: str | None, feature: str, detail: str = "") -> None:
        install = f"pip install 'arrowshuffle[{extra}]'" if extra else f"pip install {module}"
        found = f" ({detail})" if detail else ""
        super().__init__(
            f"{feature} needs {module}, which is not installed{found}; install it with {install}",
            name=module,
        )
        self.module = module
        self.extra = extra
        self.feature = feature
        self.detail = detail

    def __reduce__(self) -> tuple[type[MissingExtraError], tuple[str, str | None, str, str]]:
        # Rebuilt from its fields when pickled (Spark sends errors from workers to the driver).
        return type(self), (self.module, self.extra, self.feature, self.detail)


def import_optional(module: str, extra: str | None, feature: str) -> ModuleType:
    """Import an optional dependency, or raise :class:`MissingExtraError` naming its extra.

    Args:
        module: the module to import (``"matplotlib.figure"``).
        extra: the arrowshuffle extra that installs it (``"notebooks"``).
        feature: what needs it, for the message (``"plotting"``).

    Raises:
        MissingExtraError: the module (or one it imports) cannot be imported.
    """
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        # The top-level package names what to install even when a submodule was asked for.
        raise MissingExtraError(module.split(".")[0], extra, feature, str(exc)) from exc
