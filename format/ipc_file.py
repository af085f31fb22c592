"""Arrow IPC file pieces as bytes: walking encapsulated messages and patching a file footer.

Pure functions (bytes in, bytes out, no IO). They let a writer copy record-batch messages from
one Arrow IPC file into another without decoding them: :func:`walk_messages` finds where each
message starts and how long its metadata and body are, and :func:`footer_with_blocks` lists
those places in a footer that pyarrow wrote for the same schema and no batch.

Layout facts used here (Arrow columnar format, "IPC File Format" and ``File.fbs``):

* an encapsulated message is ``0xFFFFFFFF``, an int32 metadata length ``L``, ``L`` bytes of a
  flatbuffer ``Message`` (padded so that the body starts 8-byte aligned), then
  ``Message.bodyLength`` body bytes; ``L == 0`` is the end-of-stream marker;
* the file ends with the footer flatbuffer, its int32 length and the magic ``ARROW1``;
* ``Footer`` fields: 0 version, 1 schema, 2 dictionaries, 3 recordBatches, 4 custom_metadata;
  ``Message`` fields: 0 version, 1 header_type, 2 header, 3 bodyLength, 4 custom_metadata;
* ``Block`` is ``{offset: int64, metaDataLength: int32, (4 bytes padding), bodyLength: int64}``.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

import numpy as np

from arrowshuffle.format.errors import CorruptFileError

ARROW_MAGIC = b"ARROW1"
CONTINUATION = 0xFFFFFFFF
#: The end-of-stream marker: continuation and a zero metadata length.
END_OF_STREAM = struct.pack("<Ii", CONTINUATION, 0)
#: One ``Block`` struct of a footer's ``recordBatches`` vector.
BLOCK_DTYPE = np.dtype(
    [("offset", "<i8"), ("meta_length", "<i4"), ("padding", "<i4"), ("body_length", "<i8")]
)
_FOOTER_RECORD_BATCHES = 3
_MESSAGE_BODY_LENGTH = 3
_U32 = struct.Struct("<I")
_I32 = struct.Struct("<i")
_U16 = struct.Struct("<H")
_I64 = struct.Struct("<q")


def _field_position(buf: bytes | memoryview, table: int, field: int, end: int) -> int | None:
    """Where field ``field`` of the flatbuffer table at ``table`` is stored, None if absent."""
    if not 0 <= table <= end - 4:
        raise CorruptFileError(f"a flatbuffer table at {table} lies outside the buffer")
    vtable = table - _I32.unpack_from(buf, table)[0]
    if not 0 <= vtable <= end - 4:
        raise CorruptFileError(f"a flatbuffer vtable at {vtable} lies outside the buffer")
    vtable_size = _U16.unpack_from(buf, vtable)[0]
    slot = 4 + 2 * field
    if slot + 2 > vtable_size or vtable + slot + 2 > end:
        return None
    offset = _U16.unpack_from(buf, vtable + slot)[0]
    return None if offset == 0 else table + offset


def walk_messages(
    data: bytes | memoryview, expected: int | None = None
) -> list[tuple[int, int, int]]:
    """The encapsulated record-batch messages that fill ``data`` exactly.

    Args:
        data: bytes holding zero or more complete encapsulated messages (a chunk).
        expected: how many messages there must be, when known.

    Returns:
        ``(offset, meta_length, body_length)`` per message, offsets relative to ``data``:
        what a footer ``Block`` says of it (``meta_length`` counts the continuation and the
        length prefix).

    Raises:
        CorruptFileError: the bytes are not whole messages, or not ``expected`` of them (a
            parse error: the caller's rule check names the rule, see ``format.chunks``).
    """
    view = memoryview(data).cast("B") if not isinstance(data, bytes) else data
    size = len(view)
    out: list[tuple[int, int, int]] = []
    position = 0
    while position < size:
        if position + 8 > size or _U32.unpack_from(view, position)[0] != CONTINUATION:
            raise CorruptFileError(
                f"expected an encapsulated IPC message (continuation 0xFFFFFFFF) at byte "
                f"{position} of {size}"
            )
        length = _I32.unpack_from(view, position + 4)[0]
        start = position + 8
        if length <= 0 or start + length > size:
            raise CorruptFileError(
                f"IPC message at byte {position} declares {length} metadata bytes; "
                f"{size - start} remain"
            )
        root = start + _U32.unpack_from(view, start)[0]
        field = _field_position(view, root, _MESSAGE_BODY_LENGTH, start + length)
        body = 0 if field is None else _I64.unpack_from(view, field)[0]
        end = start + length + body
        if body < 0 or end > size:
            raise CorruptFileError(
                f"IPC message at byte {position} declares a body of {body} bytes; "
                f"{size - start - length} remain"
            )
        out.append((position, 8 + length, body))
        position = end
    if expected is not None and len(out) != expected:
        raise CorruptFileError(
            f"expected {expected} IPC messages in {size} bytes, found {len(out)}"
        )
    return out


def split_file_tail(tail: bytes) -> tuple[bytes, int]:
    """The footer flatbuffer of an Arrow IPC file's tail, and where it starts in ``tail``.

    ``tail`` is any suffix of the file that holds the whole footer, its length and the magic.

    Raises:
        CorruptFileError: no ``ARROW1`` magic at the end or a footer length that does not fit.
    """
    if len(tail) < 10 or tail[-6:] != ARROW_MAGIC:
        raise CorruptFileError("an Arrow IPC file must end with the magic ARROW1")
    length = _I32.unpack_from(tail, len(tail) - 10)[0]
    start = len(tail) - 10 - length
    if length <= 0 or start < 0:
        raise CorruptFileError(
            f"the footer declares {length} bytes; {len(tail) - 10} are available"
        )
    return tail[start : start + length], start


def footer_blocks_range(footer: bytes | memoryview) -> tuple[int, int]:
    """Byte range ``[start, stop)`` of the ``recordBatches`` Block structs in ``footer``."""
    size = len(footer)
    root = _U32.unpack_from(footer, 0)[0] if size >= 4 else -1
    field = _field_position(footer, root, _FOOTER_RECORD_BATCHES, size)
    if field is None:
        return 0, 0
    vector = field + _U32.unpack_from(footer, field)[0]
    if not 0 <= vector <= size - 4:
        raise CorruptFileError("the footer's recordBatches vector lies outside it")
    count = _U32.unpack_from(footer, vector)[0]
    start = vector + 4
    stop = start + count * BLOCK_DTYPE.itemsize
    if stop > size:
        raise CorruptFileError(
            f"the footer lists {count} record batches, more than its {size} bytes hold"
        )
    return start, stop


def footer_with_blocks(footer: bytes, blocks: np.ndarray | Sequence[tuple[int, int, int]]) -> bytes:
    """``footer`` listing ``blocks`` as its record batches, whatever it listed before.

    The Block vector is appended after the footer's bytes and the ``recordBatches`` field is
    pointed at it: a flatbuffer offset points forward, which an appended vector is, and the
    vector it listed before stays behind, unreferenced. So a footer written once for no batch
    serves any number of them, at the cost of the blocks alone.

    Args:
        footer: a footer flatbuffer with a ``recordBatches`` field (pyarrow writes one, empty
            for a file without batches).
        blocks: ``(offset, meta_length, body_length)`` rows, absolute file offsets, in file
            order (an ``(n, 3)`` integer array or a sequence of triples).

    Raises:
        CorruptFileError: ``footer`` is not a footer flatbuffer with that field.
    """
    size = len(footer)
    root = _U32.unpack_from(footer, 0)[0] if size >= 4 else -1
    field = _field_position(footer, root, _FOOTER_RECORD_BATCHES, size)
    if field is None or field > size - 4:
        raise CorruptFileError("the footer has no recordBatches field to list the blocks in")
    rows = np.asarray(blocks, dtype=np.int64).reshape(-1, 3)
    start, stop = footer_blocks_range(footer)
    if not len(rows) and start == stop:
        return footer  # it lists no batch already
    structs = np.zeros(len(rows), dtype=BLOCK_DTYPE)
    structs["offset"] = rows[:, 0]
    structs["meta_length"] = rows[:, 1]
    structs["body_length"] = rows[:, 2]
    # The structs hold 8-byte integers: they start 8-byte aligned, after the vector's length.
    vector = size + (-(size + 4)) % 8
    out = bytearray(footer)
    out += bytes(vector - size)
    out += _U32.pack(len(rows))
    out += structs.tobytes()
    _U32.pack_into(out, field, vector - field)
    return bytes(out)


def file_tail(footer: bytes) -> bytes:
    """What follows the last record batch: end-of-stream marker, footer, length, magic."""
    return END_OF_STREAM + footer + _I32.pack(len(footer)) + ARROW_MAGIC
