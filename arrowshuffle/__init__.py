"""arrowshuffle: region-sorted shuffle files readable by any Arrow reader.

The public surface is what this module exports; everything else is private. Engine
integrations live in :mod:`arrowshuffle.polars` and :mod:`arrowshuffle.spark` and import their
engine only when used.
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
from arrowshuffle.format.partitioners import (
    PARTITIONER_NAMES,
    make_partitioner,
    partitioner_from_spec,
)
from arrowshuffle.readers.assign import ConsumerAssignment, assign
from arrowshuffle.readers.balance import PlannedRead
from arrowshuffle.readers.dataset import ShuffleDataset, open_dataset
from arrowshuffle.readers.file_reader import ShuffleFile, open_file
from arrowshuffle.readers.layout import file_layout
from arrowshuffle.readers.scheduler import ReadOptions
from arrowshuffle.readers.validate import ValidationReport, validate_file
from arrowshuffle.readers.validate_dataset import DatasetReport, validate_dataset
from arrowshuffle.writers.api import write, write_dataset
from arrowshuffle.writers.compact import CompactionReport, compact
from arrowshuffle.writers.file_writer import ShuffleFileWriter, WrittenFile
from arrowshuffle.writers.memory_pool import MemoryPool, set_default_memory_pool
from arrowshuffle.writers.vacuum import VacuumReport, vacuum

__version__ = "0.1.0"

__all__ = [
    "PARTITIONER_NAMES",
    "ArrowShuffleError",
    "ChecksumMismatchError",
    "CompactionReport",
    "ConsumerAssignment",
    "CorruptFileError",
    "DatasetReport",
    "FormatError",
    "InvalidOptionError",
    "MemoryPool",
    "MissingObjectError",
    "PlannedRead",
    "ReadOptions",
    "SchemaMismatchError",
    "ShuffleDataset",
    "ShuffleFile",
    "ShuffleFileWriter",
    "ShuffleIOError",
    "UnsupportedVersionError",
    "VacuumReport",
    "ValidationReport",
    "WrittenFile",
    "__version__",
    "assign",
    "compact",
    "file_layout",
    "make_partitioner",
    "open_dataset",
    "open_file",
    "partitioner_from_spec",
    "set_default_memory_pool",
    "vacuum",
    "validate_dataset",
    "validate_file",
    "write",
    "write_dataset",
]
