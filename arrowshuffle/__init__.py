"""arrowshuffle: region-sorted shuffle files readable by any Arrow reader.

The public surface is what this module exports; everything else is private.
"""

from __future__ import annotations

from arrowshuffle.format.errors import (
    ArrowShuffleError,
    ChecksumMismatchError,
    CorruptFileError,
    FormatError,
    InvalidOptionError,
    MissingObjectError,
    SchemaMismatchError,
    ShuffleIOError,
    UnsupportedVersionError,
)
from arrowshuffle.readers.file_reader import ShuffleFile, open_file
from arrowshuffle.writers.file_writer import ShuffleFileWriter, WrittenFile

__version__ = "0.1.0"

__all__ = [
    "ArrowShuffleError",
    "ChecksumMismatchError",
    "CorruptFileError",
    "FormatError",
    "InvalidOptionError",
    "MissingObjectError",
    "SchemaMismatchError",
    "ShuffleFile",
    "ShuffleFileWriter",
    "ShuffleIOError",
    "UnsupportedVersionError",
    "WrittenFile",
    "__version__",
    "open_file",
]
