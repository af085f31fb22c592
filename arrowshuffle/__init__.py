"""arrowshuffle: region-sorted shuffle files readable by any Arrow reader.

The public surface is what this module exports; everything else is private. Engine
integrations live in :mod:`arrowshuffle.polars` and :mod:`arrowshuffle.spark` and import their
engine only when used.

Importing the package loads only the error classes: every other name is imported from its
module on first use (PEP 562), so ``import arrowshuffle`` stays cheap for a CLI or a worker
that needs one function.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from arrowshuffle.format.errors import (
    ArrowShuffleError,
    ChecksumMismatchError,
    CommitConflictError,
    CorruptFileError,
    FormatError,
    InvalidOptionError,
    MissingExtraError,
    MissingObjectError,
    PartitioningMismatchError,
    SchemaMismatchError,
    ShuffleIOError,
    UnsupportedVersionError,
)

if TYPE_CHECKING:
    from arrowshuffle.format.partitioners import (
        PARTITIONER_NAMES,
        make_partitioner,
        partitioner_from_spec,
    )
    from arrowshuffle.readers.assign import ConsumerAssignment, assign
    from arrowshuffle.readers.balance import PlannedRead
    from arrowshuffle.readers.cogroup import CoGroup, cogroup
    from arrowshuffle.readers.cogroup_plan import CoGroupTask
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

#: The module each lazily imported public name comes from; the imports above mirror it.
_LAZY = {
    "PARTITIONER_NAMES": "arrowshuffle.format.partitioners",
    "make_partitioner": "arrowshuffle.format.partitioners",
    "partitioner_from_spec": "arrowshuffle.format.partitioners",
    "ConsumerAssignment": "arrowshuffle.readers.assign",
    "assign": "arrowshuffle.readers.assign",
    "PlannedRead": "arrowshuffle.readers.balance",
    "CoGroup": "arrowshuffle.readers.cogroup",
    "cogroup": "arrowshuffle.readers.cogroup",
    "CoGroupTask": "arrowshuffle.readers.cogroup_plan",
    "ShuffleDataset": "arrowshuffle.readers.dataset",
    "open_dataset": "arrowshuffle.readers.dataset",
    "ShuffleFile": "arrowshuffle.readers.file_reader",
    "open_file": "arrowshuffle.readers.file_reader",
    "file_layout": "arrowshuffle.readers.layout",
    "ReadOptions": "arrowshuffle.readers.scheduler",
    "ValidationReport": "arrowshuffle.readers.validate",
    "validate_file": "arrowshuffle.readers.validate",
    "DatasetReport": "arrowshuffle.readers.validate_dataset",
    "validate_dataset": "arrowshuffle.readers.validate_dataset",
    "write": "arrowshuffle.writers.api",
    "write_dataset": "arrowshuffle.writers.api",
    "CompactionReport": "arrowshuffle.writers.compact",
    "compact": "arrowshuffle.writers.compact",
    "ShuffleFileWriter": "arrowshuffle.writers.file_writer",
    "WrittenFile": "arrowshuffle.writers.file_writer",
    "MemoryPool": "arrowshuffle.writers.memory_pool",
    "set_default_memory_pool": "arrowshuffle.writers.memory_pool",
    "VacuumReport": "arrowshuffle.writers.vacuum",
    "vacuum": "arrowshuffle.writers.vacuum",
}


if not TYPE_CHECKING:  # type checkers see the imports above, and flag unknown names

    def __getattr__(name: str) -> Any:
        module = _LAZY.get(name)
        if module is None:
            raise AttributeError(f"module 'arrowshuffle' has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        globals()[name] = value  # later lookups skip this function
        return value


def __dir__() -> list[str]:
    # The public names only: not the submodules (format, readers, ...) or this module's imports.
    return sorted(__all__)


__all__ = [
    "PARTITIONER_NAMES",
    "ArrowShuffleError",
    "ChecksumMismatchError",
    "CoGroup",
    "CoGroupTask",
    "CommitConflictError",
    "CompactionReport",
    "ConsumerAssignment",
    "CorruptFileError",
    "DatasetReport",
    "FormatError",
    "InvalidOptionError",
    "MemoryPool",
    "MissingExtraError",
    "MissingObjectError",
    "PartitioningMismatchError",
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
    "cogroup",
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
