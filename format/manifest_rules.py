"""The checks of a dataset's files against its manifest (rules M4-M7 and M9). Pure.

Rules M1-M3 and M8 are checked while decoding the manifest (:mod:`arrowshuffle.format.manifest`);
these need what the files hold. Dataset validation collects their violations; the dataset
reader and compaction raise the first one for the files they open.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from arrowshuffle.format.errors import SchemaMismatchError
from arrowshuffle.format.index import IndexHeader, ShuffleIndex
from arrowshuffle.format.manifest import Manifest, ManifestFile
from arrowshuffle.format.partitioners.registry import dataset_spec
from arrowshuffle.format.rule_registry import Violation, implements


@implements("M11")
def check_version_sequence(versions: Sequence[int]) -> Violation | None:
    """M11: the versions a dataset directory holds are consecutive, ending at the current one.

    Vacuum removes expired versions oldest first, so the retained ones are always a run; a gap
    means a version file was removed by hand (or lost), and a reader of that version fails.

    Args:
        versions: the version numbers found, in any order.
    """
    ordered = sorted(versions)
    missing = sorted(set(range(ordered[0], ordered[-1] + 1)) - set(ordered)) if ordered else []
    if not missing:
        return None
    shown = ", ".join(str(v) for v in missing[:10]) + (" ..." if len(missing) > 10 else "")
    return Violation(
        "M11",
        f"manifest versions {ordered[0]} to {ordered[-1]} are retained but {shown} "
        f"{'is' if len(missing) == 1 else 'are'} missing; expected consecutive versions",
    )


@implements("M4")
def check_listed_size(what: str, name: str, listed: int, actual: int | None) -> Violation | None:
    """M4: a listed data file or index exists and has its listed size.

    Args:
        what: ``"data file"`` or ``"index"``.
        name: its name (or URL).
        listed: the size the manifest lists (for an index, its header's ``index_length`` too).
        actual: the object's size, or None when it does not exist.
    """
    if actual is None:
        return Violation("M4", f"the listed {what} {name} is missing")
    if actual == listed:
        return None
    return Violation("M4", f"the {what} {name} is {actual} bytes, the manifest lists {listed}")


@implements("M5")
def check_index_checksum(name: str, stored: int, listed: int) -> Violation | None:
    """M5: the index's whole-index CRC32C (its trailer) is the listed ``index_crc32c``."""
    if stored == listed:
        return None
    return Violation(
        "M5",
        f"the index of {name} has checksum {stored:#010x}, the manifest lists {listed:#010x}",
    )


@implements("M6")
def check_file_agrees(
    name: str,
    expected: tuple[pa.Schema, int, Mapping[str, Any]],
    found: tuple[pa.Schema, int, Mapping[str, Any]],
) -> list[Violation]:
    """M6: a file has the dataset's schema, subpartition count and partitioner spec.

    Partitioner specs are compared without the fields that name one producer
    (:func:`~arrowshuffle.format.partitioners.dataset_spec`): files of ``forward`` and
    ``rescale`` producers differ there and nowhere else.

    Args:
        name: the file, for messages.
        expected: the manifest's ``(schema, num_subpartitions, partitioner)``.
        found: the file's index's ``(schema, num_subpartitions, partitioner)``.

    Returns:
        One violation per differing field, schema first (a :class:`SchemaMismatchError`).
    """
    (schema, subpartitions, partitioner), (file_schema, file_subpartitions, file_partitioner) = (
        expected,
        found,
    )
    out: list[Violation] = []
    # Field metadata may differ: writers of one dataset may annotate their fields differently.
    if not file_schema.equals(schema, check_metadata=False):
        out.append(
            Violation(
                "M6",
                f"{name} has schema {file_schema}, the manifest {schema}",
                SchemaMismatchError,
            )
        )
    if file_subpartitions != subpartitions:
        out.append(
            Violation(
                "M6", f"{name} has {file_subpartitions} subpartitions, the manifest {subpartitions}"
            )
        )
    # A different partitioner (say, another hash seed) puts rows in other subpartitions than
    # the manifest promises: a reader that pruned by it would silently miss rows.
    if dataset_spec(file_partitioner) != dataset_spec(partitioner):
        out.append(
            Violation(
                "M6",
                f"{name} has partitioner {dict(file_partitioner)}, the manifest "
                f"{dict(partitioner)}",
            )
        )
    return out


def manifest_expects(manifest: Manifest) -> tuple[pa.Schema, int, Mapping[str, Any]]:
    """What rule M6 expects of every file of ``manifest``."""
    return manifest.schema, manifest.num_subpartitions, manifest.partitioner


def index_has(index: ShuffleIndex) -> tuple[pa.Schema, int, Mapping[str, Any]]:
    """What rule M6 compares of a decoded index."""
    return index.schema, index.num_subpartitions, index.meta.partitioner


def listed_counts(entry: ManifestFile) -> dict[str, int]:
    """What rule M7 compares of a manifest entry."""
    return {"rows": entry.rows, "regions": entry.regions, "data bytes": entry.data_size}


def declared_counts(header: IndexHeader) -> dict[str, int]:
    """What rule M7 compares of an index's header."""
    return {
        "rows": header.total_rows,
        "regions": header.num_regions,
        "data bytes": header.data_length,
    }


@implements("M7")
def check_file_counts(
    name: str, listed: Mapping[str, int], declared: Mapping[str, int]
) -> list[Violation]:
    """M7: a file's rows, regions and data bytes are what its index declares.

    Compares the keys present in both (``rows``, ``regions``, ``data bytes``), so that a caller
    that knows only some of them (the header is not fetched yet) checks those.
    """
    return [
        Violation("M7", f"the manifest lists {listed[key]} {key} for {name}, its index {value}")
        for key, value in declared.items()
        if key in listed and listed[key] != value
    ]


@implements("M9")
def check_subpartition_totals(manifest: Manifest, totals: np.ndarray) -> Violation | None:
    """M9: the listed per-subpartition totals are the sums over the files' entries.

    Args:
        manifest: the manifest (without totals, the rule does not apply).
        totals: shape ``(2, N)``, bytes and rows per subpartition summed over every index.
    """
    if manifest.sizes is None:
        return None
    listed = np.array([manifest.sizes.bytes, manifest.sizes.rows], dtype=np.int64)
    wrong = np.argwhere(totals != listed)
    if wrong.size == 0:
        return None
    what, s = (int(v) for v in wrong[0])
    kind = ("bytes", "rows")[what]
    return Violation(
        "M9",
        f"the manifest lists {int(listed[what, s])} {kind} for subpartition {s}, its files' "
        f"indexes hold {int(totals[what, s])}",
    )
