"""The writer's compiled sort kernels against pyarrow's ``take``, byte for byte.

A data file holds the sorted batches' bytes, so "equal values" is not enough: the gathered
columns must serialize exactly as ``take``'s (offsets, string bytes, validity bitmaps with
their padding bits, zeroed null slots). Whole data files written with and without the kernels
must be identical too.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import arrowshuffle as ash
from arrowshuffle.format import _gather_jit
from arrowshuffle.format.gather import destinations, scatter_columns
from arrowshuffle.writers import sort_buffer

kernels = _gather_jit.kernels()
pytestmark = pytest.mark.skipif(
    kernels is None, reason="the compiled kernels are off (no numba, or ARROWSHUFFLE_JIT=0)"
)

STRING_TYPES = [pa.string(), pa.binary(), pa.large_string(), pa.large_binary()]


def ipc_bytes(*columns: pa.Array) -> bytes:
    """A batch of ``columns`` as its IPC message: what a data file stores of it."""
    batch = pa.RecordBatch.from_arrays(list(columns), [f"c{i}" for i in range(len(columns))])
    return bytes(batch.serialize().to_pybytes())


def values_for(t: pa.DataType, draw: Any, rows: int) -> list[Any]:
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        text = st.text(max_size=draw(st.sampled_from([0, 3, 40, 300])))
    else:
        text = st.binary(max_size=draw(st.sampled_from([0, 8, 33, 200])))
    return draw(st.lists(st.one_of(st.none(), text), min_size=rows, max_size=rows))


def with_bytes_under_nulls(arr: pa.Array) -> pa.Array:
    """``arr`` with every null row given three bytes of its own (an allowed layout)."""
    large = pa.types.is_large_string(arr.type) or pa.types.is_large_binary(arr.type)
    dtype = np.int64 if large else np.int32
    offsets = np.frombuffer(arr.buffers()[1], dtype=dtype)[arr.offset : arr.offset + len(arr) + 1]
    lengths = np.diff(offsets) + np.where(arr.is_null().to_numpy(zero_copy_only=False), 3, 0)
    new_offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(dtype)
    data = bytearray(int(new_offsets[-1]))
    old = arr.buffers()[2]
    old_bytes = b"" if old is None else old.to_pybytes()
    for i, valid in enumerate(arr.is_valid().to_pylist()):
        start = int(new_offsets[i])
        if valid:
            data[start : int(new_offsets[i + 1])] = old_bytes[offsets[i] : offsets[i + 1]]
        else:
            data[start : start + 3] = b"zzz"
    validity = pa.py_buffer(
        np.packbits(arr.is_valid().to_numpy(zero_copy_only=False), bitorder="little")
    )
    buffers = [validity, pa.py_buffer(new_offsets), pa.py_buffer(bytes(data))]
    return pa.Array.from_buffers(arr.type, len(arr), buffers, null_count=arr.null_count)


@st.composite
def arrays(draw: Any, types: list[pa.DataType]) -> pa.Array:
    """An array of a type from ``types``, with nulls, maybe a slice of a longer one."""
    t = draw(st.sampled_from(types))
    rows = draw(st.integers(0, 120))
    lead, tail = draw(st.integers(0, 13)), draw(st.integers(0, 5))
    values = values_for(t, draw, lead + rows + tail)
    arr = pa.array(values, type=t)
    if arr.null_count and draw(st.booleans()):
        # Null rows whose offsets still span bytes: take gives them none.
        arr = with_bytes_under_nulls(arr)
    return arr.slice(lead, rows) if draw(st.booleans()) else arr


FIXED_TYPES = [
    pa.int8(),
    pa.uint16(),
    pa.int32(),
    pa.float64(),
    pa.timestamp("us"),
    pa.decimal128(20, 3),
    pa.binary(3),
    pa.binary(16),
    pa.month_day_nano_interval(),
]


def fixed_values(t: pa.DataType, draw: Any, rows: int) -> pa.Array:
    """``rows`` values of fixed-width ``t`` from random bytes, some null."""
    width = t.bit_width // 8
    raw = draw(st.binary(min_size=rows * width, max_size=rows * width))
    nulls = draw(st.lists(st.booleans(), min_size=rows, max_size=rows))
    if pa.types.is_decimal(t):  # any bytes are not a valid decimal of its precision
        values = np.frombuffer(raw, np.uint8).reshape(rows, width)[:, :8].view(np.int64)[:, 0]
        return pa.array(
            [None if n else int(v) % 10**15 for v, n in zip(values, nulls, strict=True)], t
        )
    storage = pa.Array.from_buffers(pa.binary(width), rows, [None, pa.py_buffer(raw)])
    mask = pa.array(nulls, pa.bool_()) if any(nulls) else None
    plain = pa.Array.from_buffers(t, rows, [None, storage.buffers()[1]])
    return plain if mask is None else pc.if_else(mask, pa.scalar(None, t), plain)


@st.composite
def batches(draw: Any) -> tuple[pa.RecordBatch, int]:
    """A batch of one column of each kind the kernels move, maybe sliced, and ``lead``."""
    lead, rows = draw(st.integers(0, 13)), draw(st.integers(0, 150))
    columns = {}
    for t in STRING_TYPES:
        columns[str(t)] = pa.array(values_for(t, draw, lead + rows), type=t)
        if columns[str(t)].null_count and draw(st.booleans()):
            # Null rows whose offsets still span bytes: take gives them none.
            columns[str(t)] = with_bytes_under_nulls(columns[str(t)])
    for t in FIXED_TYPES:
        columns[str(t)] = fixed_values(t, draw, lead + rows)
    # Booleans with set value bits under null rows: take gives them clear ones.
    size = (lead + rows + 7) // 8
    bits = [draw(st.binary(min_size=size, max_size=size)) for _ in range(2)]
    columns["bool"] = pa.Array.from_buffers(
        pa.bool_(), lead + rows, [pa.py_buffer(bits[0]), pa.py_buffer(bits[1])]
    )
    columns["list"] = pa.array([[i] * (i % 3) for i in range(lead + rows)])
    batch = pa.record_batch(columns)
    return batch.slice(lead, rows), draw(st.sampled_from([1, 2, 7, 300]))


@settings(max_examples=300, deadline=None)
@given(data=st.data(), drawn=batches())
def test_scatter_columns_serializes_as_take_of_the_stable_sort(
    data: Any, drawn: tuple[pa.RecordBatch, int]
) -> None:
    batch, subpartitions = drawn
    ids = np.array(
        data.draw(
            st.lists(
                st.integers(0, subpartitions - 1), min_size=batch.num_rows, max_size=batch.num_rows
            )
        ),
        dtype=np.uint8 if subpartitions <= 256 else np.uint16,
    )
    dest, counts = destinations(ids, subpartitions, kernels)
    order = np.argsort(ids, kind="stable")
    assert counts.tolist() == np.bincount(ids, minlength=subpartitions).tolist()
    assert dest[order].tolist() == list(range(batch.num_rows))
    ours = scatter_columns(batch, ids, dest, counts, kernels)
    ours.validate(full=True)
    expected = pc.take(batch, pa.array(order))
    # Bytes, not equals(): random float bits hold NaNs, which equal nothing.
    for mine, theirs in zip(ours.columns, expected.columns, strict=True):
        assert mine.null_count == theirs.null_count
        assert ipc_bytes(mine) == ipc_bytes(theirs), mine.type


def test_scatter_columns_of_view_run_end_and_extension_columns_serializes_as_take() -> None:
    rows = 40_000
    rng = np.random.default_rng(3)
    strings = pa.array([f"v{i % 977}" * (i % 5) for i in range(rows)])
    batch = pa.record_batch(
        {
            "s": strings,
            "v": strings.cast(pa.string_view()),
            "r": pc.run_end_encode(pa.array(np.repeat(np.arange(rows // 8), 8))),
            "n": pa.array(np.arange(rows, dtype=np.int64)),
            # Built-in extension types over fixed-width storage go through take too.
            "u": pa.ExtensionArray.from_storage(
                pa.uuid(),
                pa.Array.from_buffers(
                    pa.binary(16), rows, [None, pa.py_buffer(rng.bytes(16 * rows))]
                ),
            ),
        }
    )
    ids = rng.integers(0, 9, rows).astype(np.uint8)
    dest, counts = destinations(ids, 9, kernels)
    ours = scatter_columns(batch, ids, dest, counts, kernels)
    expected = sort_buffer.take_batch(batch, pa.array(np.argsort(ids, kind="stable")))
    assert ours.equals(expected)
    assert ours.serialize().to_pybytes() == expected.serialize().to_pybytes()


def write_file(
    path: Path, batches: list[pa.RecordBatch], ids: list[np.ndarray], **kw: Any
) -> bytes:
    with ash.ShuffleFileWriter(path, batches[0].schema, 5, **kw) as writer:
        for batch, batch_ids in zip(batches, ids, strict=True):
            writer.write(batch, subpartitions=batch_ids)
    return path.read_bytes() + Path(f"{path}.idx").read_bytes()


@pytest.mark.parametrize("compression", ["none", "zstd"])
@pytest.mark.parametrize("memory", [None, "64KiB"])
def test_files_are_the_same_with_and_without_the_kernels(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, compression: str, memory: str | None
) -> None:
    rng = np.random.default_rng(7)
    batches, ids = [], []
    for b in range(6):
        rows = int(rng.integers(1, 30_000) if b % 3 else rng.integers(10_000, 30_000))
        lengths = rng.integers(0, 40, rows)
        text = ["x" * int(n) + str(i) for i, n in enumerate(lengths)]
        mask = rng.random(rows) < 0.1
        batch = pa.record_batch(
            {
                "key": pa.array(rng.integers(0, 1 << 40, rows), mask=rng.random(rows) < 0.05),
                "name": pa.array(text, mask=mask),
                "blob": pa.array([t.encode() for t in text], type=pa.large_binary()),
                "flag": pa.array(rng.random(rows) < 0.5),
            }
        )
        batches.append(batch.slice(b % 3) if b % 2 else batch)
        ids.append(rng.integers(0, 5, batches[-1].num_rows))
    # The file id is random: fix it so that two files of the same rows are the same bytes.
    monkeypatch.setattr(uuid, "uuid4", lambda: uuid.UUID(int=1))
    options = {"compression": compression, "memory": memory, "max_batch_rows": 7_000}
    gathered: list[int] = []

    def counted(batch: pa.RecordBatch, *args: Any) -> pa.RecordBatch:
        gathered.append(batch.num_rows)
        return scatter_columns(batch, *args)

    monkeypatch.setattr(sort_buffer, "scatter_columns", counted)
    fast = write_file(tmp_path / "fast.arrow", batches, ids, **options)
    # Large batches (as the writer buffers them) went through the kernels, small ones through take.
    assert gathered and min(gathered) >= sort_buffer.MIN_ROWS_PER_THREAD
    monkeypatch.setenv(_gather_jit.JIT_ENV, "0")
    plain = write_file(tmp_path / "plain.arrow", batches, ids, **options)
    assert fast == plain
    with pa.ipc.open_file(tmp_path / "fast.arrow") as data:
        assert data.read_all().num_rows == sum(b.num_rows for b in batches)
