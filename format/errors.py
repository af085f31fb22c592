"""The single error hierarchy of arrowshuffle.

Every error raised on purpose derives from :class:`ArrowShuffleError`. Errors about bytes or
options are also :class:`ValueError`; errors about storage are also :class:`OSError`, so callers
that already catch the builtin classes keep working.
"""

from __future__ import annotations


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


class ShuffleIOError(ArrowShuffleError, OSError):
    """A storage operation that failed: a missing object, a refused request, a short read."""


class MissingObjectError(ShuffleIOError, FileNotFoundError):
    """A file or object that should exist and does not."""
