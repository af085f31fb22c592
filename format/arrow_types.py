"""Arrow types that pyarrow's compute kernels do not fully cover: gathering rows, plain forms.

A shuffle file stores every column in the type its writer was given (spec.md section 4, rule 7),
with two exceptions: dictionary-encoded columns are stored decoded, and unions whose members
hold a view or run-end encoded type are refused. Gaps of pyarrow 26 are filled here, with
vectorized code and no per-row Python:

* ``take`` has no kernel for ``string_view``, ``binary_view`` and ``run_end_encoded`` arrays,
  nor for a struct, list, map or extension array that holds one. :func:`gather` takes rows of
  any such array: views go through their large offset-based type and back (both casts are
  lossless), run-end encoded arrays gather their runs, and containers gather their children.
* Engines that read Arrow do not all take every type: polars and Spark have no list views, no
  run-end encoding and no Arrow extension types. :func:`to_plain` rewrites an array in its
  plain form (a list view as a list, a run-end encoded array decoded, an extension array as
  its storage, a dictionary decoded), at any depth. pyarrow's own cast from a list view to a
  list returns an array with one offset too few, so it is not used.
* A slice or concatenation of a view array keeps every data buffer (or list view's values)
  it points into whole, and the IPC writer writes them whole: a subpartition's slice of a
  sorted batch would carry the rows of every subpartition. :func:`compact_views` rewrites such
  an array with only the bytes its rows use, in its own type.
* ``concat_arrays`` and ``concat_batches`` have no builder for an extension type inside a
  run-end encoded array's values: :func:`concat_batches` joins such columns itself.
* ``run_end_decode`` and ``dictionary_decode`` have no kernel for view values:
  :func:`decode_runs` and :func:`decode_dictionary` do. (A cast of a sliced run-end encoded
  array, even to its own type, drops the slice offset: callers cast only the columns that
  need it.)
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.types as pat

from arrowshuffle.format.errors import SchemaMismatchError

__all__ = [
    "check_storable",
    "child_types",
    "compact_views",
    "concat_arrays",
    "concat_batches",
    "concatenates",
    "decode_dictionaries",
    "decode_dictionary",
    "decode_runs",
    "empty_array",
    "empty_batch",
    "gather",
    "has_dictionary",
    "holds_views",
    "is_plain",
    "narrow_runs",
    "plain_type",
    "run_end_fill",
    "run_end_fills",
    "stored_type",
    "take_batch",
    "takes",
    "to_plain",
    "with_child_types",
]


_R = TypeVar("_R")


def _cached_per_type(fn: Callable[[pa.DataType], _R]) -> Callable[[pa.DataType], _R]:
    """``fn`` with its answers cached per type, where the type can be hashed.

    A subclass of ``pyarrow.ExtensionType`` compares by value but cannot be hashed: its answer
    is computed afresh.
    """
    cached = functools.lru_cache(maxsize=1024)(fn)

    @functools.wraps(fn)
    def per_type(t: pa.DataType) -> _R:
        try:
            hash(t)
        except TypeError:
            return fn(t)
        return cached(t)

    return per_type


def _is_extension(t: pa.DataType) -> bool:
    return isinstance(t, pa.BaseExtensionType)


def child_types(t: pa.DataType) -> list[pa.DataType]:
    """The types directly inside ``t`` (an extension's storage, a dictionary's values...)."""
    if _is_extension(t):
        return [t.storage_type]
    if pat.is_dictionary(t):
        return [t.value_type]
    if pat.is_run_end_encoded(t):
        return [t.value_type]
    return [t.field(i).type for i in range(t.num_fields)]


@_cached_per_type
def takes(t: pa.DataType) -> bool:
    """True when pyarrow's ``take`` kernel gathers arrays of type ``t``.

    A list view's ``take`` moves its offsets and sizes only, and a dictionary's its indices,
    so they take whatever their values, with one exception: pyarrow 26 loses the data buffers
    of list-view values that hold an extension type over a view type.
    """
    if pat.is_string_view(t) or pat.is_binary_view(t) or pat.is_run_end_encoded(t):
        return False
    if pat.is_list_view(t) or pat.is_large_list_view(t):
        return not _extension_over_views(t.value_type)
    if pat.is_dictionary(t):
        return True
    return all(takes(child) for child in child_types(t))


def _extension_over_views(t: pa.DataType) -> bool:
    """True when ``t`` holds, at any depth, an extension type whose storage holds a view."""
    if _is_extension(t) and holds_views(t.storage_type):
        return True
    return any(_extension_over_views(c) for c in child_types(t))


def _holds_extension(t: pa.DataType) -> bool:
    return _is_extension(t) or any(_holds_extension(c) for c in child_types(t))


@_cached_per_type
def concatenates(t: pa.DataType) -> bool:
    """True when ``pyarrow.concat_arrays`` joins arrays of type ``t``.

    pyarrow 26 concatenates a run-end encoded array's values with a builder, and has none for
    extension types: it raises for a run-end encoded array that holds one at any depth.
    """
    if pat.is_run_end_encoded(t) and _holds_extension(t.value_type):
        return False
    return all(concatenates(child) for child in child_types(t))


def has_dictionary(t: pa.DataType) -> bool:
    """True when ``t`` is, or holds at any depth, a dictionary type."""
    return pat.is_dictionary(t) or any(has_dictionary(c) for c in child_types(t))


def stored_type(t: pa.DataType) -> pa.DataType:
    """The type a column of type ``t`` is stored in: ``t`` with dictionaries decoded."""
    if not has_dictionary(t):
        return t
    if pat.is_dictionary(t):
        return stored_type(t.value_type)
    return with_child_types(t, [stored_type(c) for c in child_types(t)])


def check_storable(name: str, t: pa.DataType) -> None:
    """Refuse a column type the writer cannot gather (a union holding a view type).

    Raises:
        SchemaMismatchError: naming the column and its type.
    """
    if pat.is_union(t) and not takes(t):
        raise SchemaMismatchError(
            f"column {name!r} has type {t}: a union whose members hold a view or run-end "
            "encoded type cannot be stored; cast those members to their plain types first"
        )
    for child in child_types(t):
        check_storable(name, child)


def with_child_types(t: pa.DataType, children: list[pa.DataType]) -> pa.DataType:
    """``t`` with its child types replaced (struct, list kinds, map, run-end encoded)."""
    if pat.is_struct(t):
        return pa.struct([t.field(i).with_type(c) for i, c in enumerate(children)])
    if pat.is_map(t):
        entries = children[0]
        return pa.map_(
            t.key_field.with_type(entries.field(0).type),
            t.item_field.with_type(entries.field(1).type),
            keys_sorted=t.keys_sorted,
        )
    if pat.is_list(t):
        return pa.list_(t.value_field.with_type(children[0]))
    if pat.is_large_list(t):
        return pa.large_list(t.value_field.with_type(children[0]))
    if pat.is_fixed_size_list(t):
        return pa.list_(t.value_field.with_type(children[0]), t.list_size)
    if pat.is_list_view(t):
        return pa.list_view(t.value_field.with_type(children[0]))
    if pat.is_large_list_view(t):
        return pa.large_list_view(t.value_field.with_type(children[0]))
    if pat.is_run_end_encoded(t):
        return pa.run_end_encoded(t.run_end_type, children[0])
    if pat.is_union(t):
        fields = [t.field(i).with_type(c) for i, c in enumerate(children)]
        return pa.union(fields, t.mode, t.type_codes)
    raise SchemaMismatchError(f"type {t} has no child types to replace")


# ---------------------------------------------------------------------- gathering rows


def take_batch(batch: pa.RecordBatch, indices: pa.Array) -> pa.RecordBatch:
    """``batch.take(indices)`` for a batch of any column types (see :func:`gather`)."""
    if all(takes(t) for t in batch.schema.types):
        return batch.take(indices)
    idx = indices.to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
    columns = [col.take(indices) if takes(col.type) else gather(col, idx) for col in batch.columns]
    return pa.RecordBatch.from_arrays(columns, schema=batch.schema)


def _null_mask(arr: pa.Array, idx: np.ndarray | None = None) -> pa.Array | None:
    """The null mask of ``arr`` (rows ``idx`` of it), or None when it has no nulls."""
    if not arr.null_count:
        return None
    mask = pc.is_null(arr)
    return mask if idx is None else mask.take(pa.array(idx))


def gather(arr: pa.Array, idx: np.ndarray) -> pa.Array:
    """Rows ``idx`` (int64 positions) of ``arr``, of any type ``take`` lacks a kernel for.

    Raises:
        SchemaMismatchError: a union whose members ``take`` cannot gather
            (:func:`check_storable` refuses those before any row is written).
    """
    t = arr.type
    if takes(t):
        return arr.take(pa.array(idx))
    if pat.is_string_view(t) or pat.is_binary_view(t):
        wide = pa.large_string() if pat.is_string_view(t) else pa.large_binary()
        return arr.cast(wide).take(pa.array(idx)).cast(t)
    if _is_extension(t):
        return pa.ExtensionArray.from_storage(t, gather(arr.storage, idx))
    if pat.is_run_end_encoded(t):
        return _gather_runs(arr, idx)
    mask = _null_mask(arr, idx)
    if pat.is_list_view(t) or pat.is_large_list_view(t):
        # What take does: the rows' offsets and sizes move, the values stay as they are.
        offsets, sizes = arr.offsets.to_numpy()[idx], arr.sizes.to_numpy()[idx]
        kind = pa.LargeListViewArray if pat.is_large_list_view(t) else pa.ListViewArray
        return kind.from_arrays(pa.array(offsets), pa.array(sizes), arr.values, type=t, mask=mask)
    if pat.is_struct(t):
        children = [gather(arr.field(i), idx) for i in range(t.num_fields)]
        return pa.StructArray.from_arrays(children, fields=list(t), mask=mask)
    if pat.is_fixed_size_list(t):
        size = t.list_size
        rows = (idx + arr.offset)[:, None] * size + np.arange(size, dtype=np.int64)
        values = gather(arr.values, rows.reshape(-1))
        return _fixed_size_list(values, t, len(idx), mask)
    if pat.is_list(t) or pat.is_large_list(t) or pat.is_map(t):
        offsets = arr.offsets.to_numpy()
        rows, landed = _ranges(offsets[:-1][idx], (offsets[1:] - offsets[:-1])[idx])
        new_offsets = np.append(landed, len(rows)).astype(offsets.dtype)
        if pat.is_map(t):
            entries = arr.values
            keys, items = gather(entries.field(0), rows), gather(entries.field(1), rows)
            return pa.MapArray.from_arrays(pa.array(new_offsets), keys, items, type=t, mask=mask)
        kind = pa.LargeListArray if pat.is_large_list(t) else pa.ListArray
        values = gather(arr.values, rows)
        return kind.from_arrays(pa.array(new_offsets), values, type=t, mask=mask)
    raise SchemaMismatchError(f"rows of type {t} cannot be gathered")


def _ranges(starts: np.ndarray, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The positions in ranges ``[start, start + length)``, one range after the other.

    Returns:
        ``(rows, landed)``: the positions (int64), and where each range begins among them.
    """
    lengths = lengths.astype(np.int64, copy=False)
    landed = np.zeros(len(lengths), dtype=np.int64)
    np.cumsum(lengths[:-1], out=landed[1:])
    total = int(landed[-1] + lengths[-1]) if len(lengths) else 0
    rows = np.repeat(starts.astype(np.int64) - landed, lengths) + np.arange(total, dtype=np.int64)
    return rows, landed


def _list_view_values(arr: pa.Array) -> tuple[np.ndarray, pa.Array]:
    """A list view's sizes (0 for a null row) and the values of its rows, in row order.

    Gathered with :func:`gather`: ``list_flatten`` returns views that point past their buffers
    when the values are an extension type over a view type.
    """
    sizes = pc.list_value_length(arr).fill_null(0).to_numpy()
    rows, _ = _ranges(arr.offsets.to_numpy(), sizes)
    return sizes, gather(arr.values, rows)


def _compact_list_view(arr: pa.Array, mask: pa.Array | None) -> pa.Array:
    """A list view holding only the values its rows use; values shared by rows stay shared.

    The rows' value ranges are merged; the values in them are gathered in order, and each
    row's offset moves to where its range landed.
    """
    t = arr.type
    sizes = pc.list_value_length(arr).fill_null(0).to_numpy().astype(np.int64)
    starts = arr.offsets.to_numpy().astype(np.int64)
    live = sizes > 0
    offsets = np.zeros(len(arr), dtype=np.int64)
    values = arr.values.slice(0, 0)
    if live.any():
        order = np.argsort(starts[live], kind="stable")
        first, last = starts[live][order], (starts + sizes)[live][order]
        reach = np.maximum.accumulate(last)
        opens = np.flatnonzero(np.concatenate(([True], first[1:] > reach[:-1])))
        range_starts = first[opens]
        range_ends = reach[np.append(opens[1:] - 1, len(first) - 1)]
        if len(opens) == 1 and range_starts[0] == 0 and range_ends[0] == len(arr.values):
            offsets[live], values = starts[live], arr.values  # every value is used
        else:
            rows, moved_to = _ranges(range_starts, range_ends - range_starts)
            which = np.searchsorted(range_starts, starts[live], side="right") - 1
            offsets[live] = moved_to[which] + (starts[live] - range_starts[which])
            values = gather(arr.values, rows)
    index = np.int64 if pat.is_large_list_view(t) else np.int32
    kind = pa.LargeListViewArray if pat.is_large_list_view(t) else pa.ListViewArray
    return kind.from_arrays(
        pa.array(offsets.astype(index)),
        pa.array(sizes.astype(index)),
        compact_views(values),
        type=t,
        mask=mask,
    )


def _fixed_size_list(
    values: pa.Array, t: pa.DataType, rows: int, mask: pa.Array | None
) -> pa.Array:
    """A fixed-size list array of ``rows`` rows; ``mask`` is True where a row is null.

    ``FixedSizeListArray.from_arrays`` divides by the list size: lists of size 0 are built
    from their buffers.
    """
    if t.list_size:
        return pa.FixedSizeListArray.from_arrays(values, type=t, mask=mask)
    validity = None if mask is None else pc.invert(mask).buffers()[1]
    nulls = 0 if mask is None else int(pc.sum(mask).as_py() or 0)
    return pa.Array.from_buffers(t, rows, [validity], null_count=nulls, children=[values[:0]])


def _gather_runs(arr: pa.Array, idx: np.ndarray) -> pa.Array:
    """Rows ``idx`` of a run-end encoded array: the runs they fall in, merged where adjacent."""
    t = arr.type
    physical = _physical_rows(arr, idx)
    if len(idx):
        starts = np.flatnonzero(np.diff(physical)) + 1
        new_ends = np.append(starts, len(idx))
        firsts = physical[np.concatenate(([0], starts))]
    else:
        new_ends = firsts = np.zeros(0, dtype=np.int64)
    values = gather(arr.values, firsts.astype(np.int64, copy=False))
    ends = pa.array(new_ends.astype(t.run_end_type.to_pandas_dtype()), type=t.run_end_type)
    return pa.RunEndEncodedArray.from_arrays(ends, values, type=t)


def concat_batches(batches: list[pa.RecordBatch]) -> pa.RecordBatch:
    """``pyarrow.concat_batches`` for batches of one schema with any column types.

    Columns pyarrow cannot concatenate (:func:`concatenates`) are joined by
    :func:`concat_arrays`; the others by pyarrow.
    """
    if len(batches) == 1:
        return batches[0]
    schema = batches[0].schema
    if all(concatenates(t) for t in schema.types):
        return pa.concat_batches(batches)
    columns = [
        concat_arrays([b.column(i) for b in batches])
        if not concatenates(field.type)
        else pa.concat_arrays([b.column(i) for b in batches])
        for i, field in enumerate(schema)
    ]
    return pa.RecordBatch.from_arrays(columns, schema=schema)


def concat_arrays(arrays: list[pa.Array]) -> pa.Array:
    """The rows of ``arrays`` (of one type, any of them sliced) in one array, in their type.

    Raises:
        SchemaMismatchError: a union that holds what pyarrow cannot concatenate
            (:func:`check_storable` refuses those before any row is written).
    """
    t = arrays[0].type
    if concatenates(t):
        return pa.concat_arrays(arrays)
    if _is_extension(t):
        return pa.ExtensionArray.from_storage(t, concat_arrays([a.storage for a in arrays]))
    if pat.is_run_end_encoded(t):
        return _concat_runs(arrays)
    mask = None
    if any(a.null_count for a in arrays):
        mask = pa.concat_arrays([pc.is_null(a) for a in arrays])
    if pat.is_struct(t):
        children = [concat_arrays([a.field(i) for a in arrays]) for i in range(t.num_fields)]
        return pa.StructArray.from_arrays(children, fields=list(t), mask=mask)
    if pat.is_fixed_size_list(t):
        size = t.list_size
        pieces = [a.values.slice(a.offset * size, len(a) * size) for a in arrays]
        return _fixed_size_list(concat_arrays(pieces), t, sum(len(a) for a in arrays), mask)
    if pat.is_list(t) or pat.is_large_list(t) or pat.is_map(t):
        return _concat_lists(arrays, mask)
    if pat.is_list_view(t) or pat.is_large_list_view(t):
        # Rows keep their views: each array's offsets move past the values before it.
        offsets, base = [], 0
        for a in arrays:
            offsets.append(a.offsets.to_numpy().astype(np.int64) + base)
            base += len(a.values)
        index = pa.int64() if pat.is_large_list_view(t) else pa.int32()
        sizes = [a.sizes.to_numpy() for a in arrays]
        kind = pa.LargeListViewArray if pat.is_large_list_view(t) else pa.ListViewArray
        return kind.from_arrays(
            pa.array(np.concatenate(offsets), index),
            pa.array(np.concatenate(sizes), index),
            concat_arrays([a.values for a in arrays]),
            type=t,
            mask=mask,
        )
    raise SchemaMismatchError(f"arrays of type {t} cannot be concatenated")


def _concat_lists(arrays: list[pa.Array], mask: pa.Array | None) -> pa.Array:
    """Lists, large lists or maps joined: each array's value range, offsets moved after it."""
    t = arrays[0].type
    offsets, values, base = [np.zeros(1, np.int64)], [], 0
    for a in arrays:
        own = a.offsets.to_numpy().astype(np.int64)  # the slice's own len + 1 offsets
        values.append(a.values.slice(int(own[0]), int(own[-1] - own[0])))
        offsets.append(own[1:] - own[0] + base)
        base += int(own[-1] - own[0])
    index = pa.int64() if pat.is_large_list(t) else pa.int32()
    joined = pa.array(np.concatenate(offsets), index)
    if pat.is_map(t):
        keys = concat_arrays([v.field(0) for v in values])
        items = concat_arrays([v.field(1) for v in values])
        return pa.MapArray.from_arrays(joined, keys, items, type=t, mask=mask)
    kind = pa.LargeListArray if pat.is_large_list(t) else pa.ListArray
    return kind.from_arrays(joined, concat_arrays(values), type=t, mask=mask)


@_cached_per_type
def narrow_runs(t: pa.DataType) -> bool:
    """True when ``t`` holds, at any depth, a run-end encoded type with 16- or 32-bit ends.

    Such arrays can hold no more rows than their run-end type counts to: concatenating
    several of them can overflow it (see :func:`run_end_fill`).
    """
    if pat.is_run_end_encoded(t) and t.run_end_type.bit_width < 64:
        return True
    return any(narrow_runs(child) for child in child_types(t))


def run_end_fills(schema: pa.Schema) -> Callable[[pa.RecordBatch], float] | None:
    """:func:`run_end_fill` when ``schema`` has a narrow run-end encoded column, else None."""
    return run_end_fill if any(narrow_runs(t) for t in schema.types) else None


def run_end_fill(batch: pa.RecordBatch) -> float:
    """The largest share of its run-end type's range that a run-end array of ``batch`` spans.

    0.0 without a narrow run-end encoded column (:func:`narrow_runs`). Batches whose shares
    add up to at most 1 concatenate without overflowing any run end; the share of an array
    inside a list counts only the values of the batch's own rows.
    """
    return max((_fill(column) for column in batch.columns if narrow_runs(column.type)), default=0.0)


def _fill(arr: pa.Array) -> float:
    t = arr.type
    if not narrow_runs(t):
        return 0.0
    if _is_extension(t):
        return _fill(arr.storage)
    if pat.is_run_end_encoded(t):
        own: float = len(arr) / ((1 << (t.run_end_type.bit_width - 1)) - 1)
        return max(own, _fill(arr.values))  # the values from this array's first run on
    if pat.is_struct(t):
        return max(_fill(arr.field(i)) for i in range(t.num_fields))
    if pat.is_fixed_size_list(t):
        return _fill(arr.values.slice(arr.offset * t.list_size, len(arr) * t.list_size))
    if pat.is_list(t) or pat.is_large_list(t) or pat.is_map(t):
        offsets = arr.offsets
        first, last = offsets[0].as_py(), offsets[len(arr)].as_py()
        return _fill(arr.values.slice(first, last - first))
    return _fill(arr.values) if pat.is_list_view(t) or pat.is_large_list_view(t) else 0.0


def _concat_runs(arrays: list[pa.Array]) -> pa.Array:
    """Run-end encoded arrays joined: the runs each one's rows fall in, ends moved after it."""
    t = arrays[0].type
    ends, values, base = [], [], 0
    for a in arrays:
        if not len(a):
            continue
        run_ends = a.run_ends.to_numpy().astype(np.int64)
        first, last = np.searchsorted(run_ends, [a.offset, a.offset + len(a) - 1], side="right")
        own = np.minimum(run_ends[first : last + 1], a.offset + len(a)) - a.offset
        ends.append(own + base)
        values.append(a.values.slice(int(first), int(last - first + 1)))
        base += len(a)
    if not ends:
        return empty_array(t)
    # pa.array refuses an end past the run-end type's range (numpy's cast would wrap it).
    run_ends_out = pa.array(np.concatenate(ends), type=t.run_end_type)
    return pa.RunEndEncodedArray.from_arrays(run_ends_out, concat_arrays(values), type=t)


def decode_dictionary(arr: pa.Array) -> pa.Array:
    """A dictionary array decoded (``dictionary_decode`` takes, which view values lack)."""
    values = arr.dictionary
    t = values.type
    if takes(t):
        return arr.dictionary_decode()
    if not (pat.is_string_view(t) or pat.is_binary_view(t)):
        raise SchemaMismatchError(f"a dictionary of {t} values cannot be decoded")
    wide = values.cast(pa.large_string() if pat.is_string_view(t) else pa.large_binary())
    return pa.DictionaryArray.from_arrays(arr.indices, wide).dictionary_decode().cast(t)


def _rebuild(
    arr: pa.Array, child: Callable[[pa.Array], pa.Array], out: pa.DataType, mask: pa.Array | None
) -> pa.Array | None:
    """``arr`` rebuilt as type ``out`` around ``child`` of each of its children.

    For run-end encoded, struct, list, large list, map and fixed-size list arrays; None for
    other types. Only the values the rows use are passed to ``child`` (from offset 0 on).
    ``mask`` is True where a row is null (None for a run-end encoded array, which has none).
    """
    t = arr.type
    if pat.is_run_end_encoded(t):
        runs = _concat_runs([arr])  # its own runs only, from run end 0
        return pa.RunEndEncodedArray.from_arrays(runs.run_ends, child(runs.values), type=out)
    if pat.is_struct(t):
        children = [child(arr.field(i)) for i in range(t.num_fields)]
        return pa.StructArray.from_arrays(children, fields=list(out), mask=mask)
    if pat.is_fixed_size_list(t):
        size = t.list_size
        values = child(arr.values.slice(arr.offset * size, len(arr) * size))
        return _fixed_size_list(values, out, len(arr), mask)
    if pat.is_list(t) or pat.is_large_list(t) or pat.is_map(t):
        own = arr.offsets.to_numpy()
        offsets = pa.array(own - own[0])
        entries = arr.values.slice(int(own[0]), int(own[-1] - own[0]))
        if pat.is_map(t):
            keys, items = (child(entries.field(i)) for i in (0, 1))
            return pa.MapArray.from_arrays(offsets, keys, items, type=out, mask=mask)
        kind = pa.LargeListArray if pat.is_large_list(t) else pa.ListArray
        return kind.from_arrays(offsets, child(entries), type=out, mask=mask)
    return None


def decode_dictionaries(arr: pa.Array) -> pa.Array:
    """``arr`` in its :func:`stored_type`: every dictionary, at any depth, decoded.

    Only the containers on the way to a dictionary are rebuilt; their other children are kept
    as they are. (pyarrow's cast to the stored type would also cast them, and a cast of a
    sliced run-end encoded array drops its slice offset: a struct of a run-end encoded and a
    dictionary column lost its rows' run values.)

    Raises:
        SchemaMismatchError: a dictionary inside a union or an extension type.
    """
    t = arr.type
    if not has_dictionary(t):
        return arr
    if pat.is_dictionary(t):
        return decode_dictionaries(decode_dictionary(arr))
    out = stored_type(t)
    mask = _null_mask(arr)
    rebuilt = _rebuild(arr, decode_dictionaries, out, mask)
    if rebuilt is not None:
        return rebuilt
    if pat.is_list_view(t) or pat.is_large_list_view(t):
        kind = pa.LargeListViewArray if pat.is_large_list_view(t) else pa.ListViewArray
        values = decode_dictionaries(arr.values)
        # from_arrays takes no sliced offsets and sizes beside a mask: they are copied.
        offsets, sizes = (pa.array(a.to_numpy()) for a in (arr.offsets, arr.sizes))
        return kind.from_arrays(offsets, sizes, values, type=out, mask=mask)
    raise SchemaMismatchError(f"the dictionaries inside {t} cannot be decoded")


def decode_runs(arr: pa.Array) -> pa.Array:
    """A run-end encoded array decoded (``run_end_decode`` has no kernel for view values)."""
    return gather(arr.values, _physical_rows(arr, np.arange(len(arr), dtype=np.int64)))


def _physical_rows(arr: pa.Array, idx: np.ndarray) -> np.ndarray:
    """The run of a run-end encoded array that each logical row of ``idx`` falls in."""
    run_ends: np.ndarray = arr.run_ends.to_numpy()
    rows: np.ndarray = np.searchsorted(run_ends, idx + arr.offset, side="right")
    return rows.astype(np.int64, copy=False)


def empty_batch(schema: pa.Schema) -> pa.RecordBatch:
    """A batch of no rows of ``schema`` (``from_pylist`` has no builder for unions)."""
    return pa.RecordBatch.from_arrays([empty_array(f.type) for f in schema], schema=schema)


def empty_array(t: pa.DataType) -> pa.Array:
    """An array of no rows of type ``t``.

    Built from its children: ``pyarrow.nulls`` gives a run-end encoded child (of a struct, a
    list...) a validity bitmap, which such an array may not have.
    """
    if _is_extension(t):
        return pa.ExtensionArray.from_storage(t, empty_array(t.storage_type))
    if pat.is_run_end_encoded(t):
        ends = pa.array([], t.run_end_type)
        return pa.RunEndEncodedArray.from_arrays(ends, empty_array(t.value_type), type=t)
    if pat.is_struct(t) and t.num_fields:
        children = [empty_array(t.field(i).type) for i in range(t.num_fields)]
        return pa.StructArray.from_arrays(children, fields=list(t))
    if pat.is_map(t):
        keys, items = empty_array(t.key_type), empty_array(t.item_type)
        return pa.MapArray.from_arrays(pa.array([0], pa.int32()), keys, items, type=t)
    if pat.is_list(t) or pat.is_large_list(t):
        large = pat.is_large_list(t)
        kind = pa.LargeListArray if large else pa.ListArray
        offsets = pa.array([0], pa.int64() if large else pa.int32())
        return kind.from_arrays(offsets, empty_array(t.value_type), type=t)
    if pat.is_list_view(t) or pat.is_large_list_view(t):
        large = pat.is_large_list_view(t)
        kind = pa.LargeListViewArray if large else pa.ListViewArray
        index = pa.array([], pa.int64() if large else pa.int32())
        return kind.from_arrays(index, index, empty_array(t.value_type), type=t)
    if pat.is_fixed_size_list(t):
        return _fixed_size_list(empty_array(t.value_type), t, 0, None)
    return pa.nulls(0, t)  # unions, dictionaries and leaves


# ---------------------------------------------------------------------- compact views

#: A string view stores values of at most this many bytes inside its view, not in a buffer.
_INLINE_VIEW = 12
#: Unused view data not worth a copy to drop.
_SLACK = 4096


@_cached_per_type
def holds_views(t: pa.DataType) -> bool:
    """True when ``t`` is, or holds at any depth, a string, binary or list view type."""
    if pat.is_string_view(t) or pat.is_binary_view(t):
        return True
    if pat.is_list_view(t) or pat.is_large_list_view(t):
        return True
    return any(holds_views(c) for c in child_types(t))


def _views_compact(arr: pa.Array) -> bool:
    """True when a string or binary view array's data buffers hold little but its rows' bytes."""
    _, view_buffer, *data = arr.buffers()
    held = sum(b.size for b in data if b is not None)
    if held <= _SLACK:
        return True
    # Each view is 16 bytes and starts with its value's length (int32).
    rows = arr.offset + len(arr)
    views = np.frombuffer(view_buffer, dtype=np.int32, count=4 * rows).reshape(-1, 4)
    lengths = views[arr.offset :, 0].astype(np.int64)
    used = int(lengths[lengths > _INLINE_VIEW].sum())
    return bool(held <= used + used // 4 + _SLACK)


def compact_views(arr: pa.Array) -> pa.Array:
    """``arr`` with the same rows and type, holding only the view data its rows use.

    Arrays that hold no view type, or whose views use most of their buffers, are returned as
    they are.
    """
    t = arr.type
    if not holds_views(t) or pat.is_dictionary(t):  # dictionaries are stored decoded
        return arr
    if pat.is_string_view(t) or pat.is_binary_view(t):
        if _views_compact(arr):
            return arr
        wide = arr.cast(pa.large_string() if pat.is_string_view(t) else pa.large_binary())
        try:
            return wide.cast(t)
        except pa.ArrowCapacityError:
            return arr  # the rows' bytes exceed one view buffer (2 GiB): written as they are
    if pat.is_union(t):
        return arr  # check_storable refuses unions over string views; list views stay whole
    if _is_extension(t):
        return pa.ExtensionArray.from_storage(t, compact_views(arr.storage))
    mask = _null_mask(arr)
    if pat.is_list_view(t) or pat.is_large_list_view(t):
        return _compact_list_view(arr, mask)
    rebuilt = _rebuild(arr, compact_views, t, mask)
    if rebuilt is not None:
        return rebuilt
    raise SchemaMismatchError(f"type {t} holds views that cannot be compacted")


# ---------------------------------------------------------------------- plain forms


@_cached_per_type
def is_plain(t: pa.DataType) -> bool:
    """True when ``t`` holds no list view, run-end encoding, extension or dictionary type."""
    if (
        pat.is_list_view(t)
        or pat.is_large_list_view(t)
        or pat.is_run_end_encoded(t)
        or _is_extension(t)
        or pat.is_dictionary(t)
    ):
        return False
    return all(is_plain(c) for c in child_types(t))


def plain_type(t: pa.DataType) -> pa.DataType:
    """The type :func:`to_plain` gives arrays of type ``t``."""
    if is_plain(t):
        return t
    if _is_extension(t) or pat.is_dictionary(t) or pat.is_run_end_encoded(t):
        return plain_type(child_types(t)[0])
    if pat.is_list_view(t):
        return pa.list_(t.value_field.with_type(plain_type(t.value_type)))
    if pat.is_large_list_view(t):
        return pa.large_list(t.value_field.with_type(plain_type(t.value_type)))
    return with_child_types(t, [plain_type(c) for c in child_types(t)])


def to_plain(arr: pa.Array) -> pa.Array:
    """``arr`` in its plain form (see the module docstring): the same values, row for row.

    Raises:
        SchemaMismatchError: a union holding a type without a plain form of the same layout.
    """
    t = arr.type
    if is_plain(t):
        return arr
    if _is_extension(t):
        return to_plain(arr.storage)
    if pat.is_dictionary(t):
        return to_plain(decode_dictionary(arr))
    if pat.is_run_end_encoded(t):
        return to_plain(decode_runs(arr))
    mask = _null_mask(arr)
    if pat.is_list_view(t) or pat.is_large_list_view(t):
        large = pat.is_large_list_view(t)
        sizes, flat = _list_view_values(arr)
        offsets = np.zeros(len(arr) + 1, dtype=np.int64 if large else np.int32)
        np.cumsum(sizes, out=offsets[1:])
        values = to_plain(flat)
        kind = pa.LargeListArray if large else pa.ListArray
        return kind.from_arrays(pa.array(offsets), values, type=plain_type(t), mask=mask)
    rebuilt = _rebuild(arr, to_plain, plain_type(t), mask)
    if rebuilt is not None:
        return rebuilt
    raise SchemaMismatchError(f"type {t} has no plain form")
