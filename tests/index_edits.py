"""Edits of an index that keep every checksum valid: what a buggy or hostile writer can make."""

from __future__ import annotations

from typing import Any

from arrowshuffle.format.index import ShuffleIndex, encode_index


def reencode(index: ShuffleIndex, **changes: Any) -> bytes:
    """The index encoded again by the project's own encoder, with ``changes`` to its fields.

    ``changes`` names any of ``schema``, ``partitioner``, ``file_id``, ``data_length``,
    ``regions``, ``entries`` and ``compression``; the others are the index's own.
    """
    fields: dict[str, Any] = {
        "schema": index.schema,
        "partitioner": index.meta.partitioner,
        "file_id": index.header.file_id,
        "data_length": index.header.data_length,
        "regions": index.meta.regions,
        "entries": index.entries,
        "compression": index.header.compression,
    }
    unknown = set(changes) - set(fields)
    assert not unknown, f"not fields of an index: {sorted(unknown)}"
    return encode_index(**(fields | changes))
