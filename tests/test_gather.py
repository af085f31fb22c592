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
from arrowshuffle.format.gather import counting_sort, take_array, take_columns
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


@settings(max_examples=300, deadline=None)
@given(data=st.data(), arr=arrays(STRING_TYPES))
def test_take_array_serializes_as_take(data: Any, arr: pa.Array) -> None:
    n = len(arr)
    if n and data.draw(st.booleans()):
        order = np.array(data.draw(st.permutations(range(n))), dtype=np.int32)
    else:
        count = data.draw(st.integers(0, 150)) if n else 0
        order = np.array(
            data.draw(st.lists(st.integers(0, max(n - 1, 0)), min_size=count, max_size=count)),
            dtype=np.int64,
        )
    ours = take_array(arr, order, kernels)
    ours.validate(full=True)
    expected = pc.take(arr, pa.array(order))
    assert ours.equals(expected)
    assert ours.null_count == expected.null_count
    assert ipc_bytes(ours) == ipc_bytes(expected)


@settings(max_examples=100, deadline=None)
@given(data=st.data(), rows=st.integers(0, 200), subpartitions=st.integers(1, 300))
def test_counting_sort_is_a_stable_sort(data: Any, rows: int, subpartitions: int) -> None:
    ids = np.array(
        data.draw(st.lists(st.integers(0, subpartitions - 1), min_size=rows, max_size=rows)),
        dtype=np.uint8 if subpartitions <= 256 else np.uint16,
    )
    order, counts = counting_sort(ids, subpartitions, kernels)
    assert order.tolist() == np.argsort(ids, kind="stable").tolist()
    assert counts.tolist() == np.bincount(ids, minlength=subpartitions).tolist()


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_take_columns_of_mixed_types_serializes_as_take(data: Any) -> None:
    rows = data.draw(st.integers(1, 80))
    strings = pa.array(values_for(pa.string(), data.draw, rows), type=pa.string())
    flags = pa.array(
        data.draw(st.lists(st.one_of(st.none(), st.booleans()), min_size=rows, max_size=rows)),
        type=pa.bool_(),
    )
    views = strings.cast(pa.string_view())
    numbers = pa.array(np.arange(rows, dtype=np.int64))
    batch = pa.RecordBatch.from_arrays([strings, flags, views, numbers], ["s", "b", "v", "n"])
    order = np.array(data.draw(st.permutations(range(rows))), dtype=np.int32)
    ours = take_columns(batch, order, kernels)
    expected = sort_buffer.take_batch(batch, pa.array(order))
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
        return take_columns(batch, *args)

    monkeypatch.setattr(sort_buffer, "take_columns", counted)
    fast = write_file(tmp_path / "fast.arrow", batches, ids, **options)
    # Large batches (as the writer buffers them) went through the kernels, small ones through take.
    assert gathered and min(gathered) >= sort_buffer.MIN_ROWS_PER_THREAD
    monkeypatch.setenv(_gather_jit.JIT_ENV, "0")
    plain = write_file(tmp_path / "plain.arrow", batches, ids, **options)
    assert fast == plain
    with pa.ipc.open_file(tmp_path / "fast.arrow") as data:
        assert data.read_all().num_rows == sum(b.num_rows for b in batches)
