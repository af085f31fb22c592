"""Round-trip properties of the shuffle file format, driven by hypothesis.

Every example writes random rows (a random schema with nulls, nested lists and structs) with
random subpartition ids through :class:`ShuffleFileWriter` and checks what comes back:

* the data file is a plain Arrow IPC file holding exactly the written rows (pyarrow and polars);
* ``read(s)`` returns the rows given id ``s`` (and every broadcast row), in write order;
* range and list reads return, region by region in file order, the rows of the selected
  subpartitions; broadcast rows once per selected subpartition;
* projections, ``verify=True``, the region count the memory budget implies, batch sizes.

Every row carries a ``__row`` column holding its position in write order, which is what makes
"the same rows" and "in write order" checkable without trusting the code under test.
"""

from __future__ import annotations

import itertools
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import arrowshuffle as ash

ROW = "__row"

# Strings and bytes that must always be in the pools, whatever hypothesis draws.
FIXED_TEXTS = ["", "é", "日本語", "🙂 emoji", "a\x00b", "plain"]
FIXED_BINARIES = [b"", b"\x00", b"\xff\xfe", b"abc"]

# --------------------------------------------------------------------------- schemas

INTEGER_TYPES = [
    pa.int8(),
    pa.int16(),
    pa.int32(),
    pa.int64(),
    pa.uint8(),
    pa.uint16(),
    pa.uint32(),
    pa.uint64(),
]
SIMPLE_TYPES = [
    *INTEGER_TYPES,
    pa.float32(),
    pa.float64(),
    pa.bool_(),
    pa.string(),
    pa.large_string(),
    pa.binary(),
    pa.large_binary(),
    pa.date32(),
    pa.date64(),
]


@st.composite
def timestamp_types(draw: st.DrawFn) -> pa.DataType:
    unit = draw(st.sampled_from(["s", "ms", "us", "ns"]))
    tz = draw(st.sampled_from([None, "UTC", "Europe/Paris"]))
    return pa.timestamp(unit, tz)


@st.composite
def decimal_types(draw: st.DrawFn) -> pa.DataType:
    precision = draw(st.integers(1, 38))
    scale = draw(st.integers(0, precision))
    return pa.decimal128(precision, scale)


def leaf_types() -> st.SearchStrategy[pa.DataType]:
    return st.one_of(st.sampled_from(SIMPLE_TYPES), timestamp_types(), decimal_types())


@st.composite
def data_types(draw: st.DrawFn, depth: int = 0) -> pa.DataType:
    kind = draw(st.sampled_from(["leaf", "leaf", "leaf", "list", "large_list", "struct"]))
    if depth >= 2 or kind == "leaf":
        return draw(leaf_types())
    if kind == "list":
        return pa.list_(draw(data_types(depth + 1)))
    if kind == "large_list":
        return pa.large_list(draw(data_types(depth + 1)))
    names = draw(st.lists(st.sampled_from("abcdef"), min_size=1, max_size=3, unique=True))
    return pa.struct([(name, draw(data_types(depth + 1))) for name in names])


@st.composite
def schemas(draw: st.DrawFn) -> pa.Schema:
    types = draw(st.lists(data_types(), min_size=1, max_size=5))
    fields = [pa.field(f"c{i}", t) for i, t in enumerate(types)]
    # The row id goes anywhere among the columns: the writer must not care about order.
    position = draw(st.integers(0, len(fields)))
    fields.insert(position, pa.field(ROW, pa.int64(), nullable=False))
    return pa.schema(fields)


# --------------------------------------------------------------------------- values


@dataclass
class Pools:
    """Values that strings and binaries are picked from, and the share of nulls."""

    texts: pa.Array
    binaries: pa.Array
    null_share: float


def _mask(rng: np.random.Generator, n: int, share: float) -> np.ndarray | None:
    if share == 0.0:
        return None
    mask: np.ndarray = rng.random(n) < share
    return mask


def make_array(t: pa.DataType, n: int, rng: np.random.Generator, pools: Pools) -> pa.Array:
    """Random values of type ``t`` with nulls (vectorized; nested types recurse)."""
    mask = _mask(rng, n, pools.null_share)
    if pa.types.is_integer(t):
        info = np.iinfo(t.to_pandas_dtype())
        values = rng.integers(info.min, info.max, size=n, dtype=info.dtype, endpoint=True)
        return pa.array(values, t, mask=mask)
    if pa.types.is_floating(t):
        values = rng.standard_normal(n) * 10.0 ** rng.integers(-5, 6, n)
        specials = np.array([0.0, -0.0, np.inf, -np.inf, 1e-30])
        pick = rng.random(n) < 0.05
        values[pick] = rng.choice(specials, int(pick.sum()))
        return pa.array(values.astype(t.to_pandas_dtype()), t, mask=mask)
    if pa.types.is_boolean(t):
        return pa.array(rng.random(n) < 0.5, t, mask=mask)
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return _pick(pools.texts.cast(t), n, rng, mask)
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return _pick(pools.binaries.cast(t), n, rng, mask)
    if pa.types.is_date32(t):
        return pa.array(rng.integers(-100_000, 100_000, n, dtype=np.int32), t, mask=mask)
    if pa.types.is_date64(t):
        days = rng.integers(-100_000, 100_000, n, dtype=np.int64)
        return pa.array(days * 86_400_000, t, mask=mask)
    if pa.types.is_timestamp(t):
        values = rng.integers(-(2**40), 2**40, n, dtype=np.int64)
        return pa.array(values, pa.int64(), mask=mask).cast(t)
    if pa.types.is_decimal(t):
        return _decimals(t, n, rng, mask)
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        lengths = rng.integers(0, 4, n)
        offsets = np.concatenate([[0], np.cumsum(lengths)])
        values = make_array(t.value_type, int(offsets[-1]), rng, pools)
        offset_type = pa.int64() if pa.types.is_large_list(t) else pa.int32()
        cls = pa.LargeListArray if pa.types.is_large_list(t) else pa.ListArray
        return cls.from_arrays(
            pa.array(offsets, offset_type), values, type=t, mask=_arrow_mask(mask)
        )
    if pa.types.is_struct(t):
        children = [make_array(t.field(i).type, n, rng, pools) for i in range(t.num_fields)]
        return pa.StructArray.from_arrays(children, fields=list(t), mask=_arrow_mask(mask))
    raise AssertionError(f"no generator for {t}")


def _arrow_mask(mask: np.ndarray | None) -> pa.Array | None:
    return None if mask is None else pa.array(mask)


def _pick(pool: pa.Array, n: int, rng: np.random.Generator, mask: np.ndarray | None) -> pa.Array:
    picked = pool.take(pa.array(rng.integers(0, len(pool), n)))
    if mask is None:
        return picked
    return pc.if_else(pa.array(mask), pa.nulls(n, pool.type), picked)


def _decimals(
    t: pa.Decimal128Type, n: int, rng: np.random.Generator, mask: np.ndarray | None
) -> pa.Array:
    # Unscaled values that fit the precision, sign-extended to 128-bit little endian.
    bound = 10 ** min(t.precision, 18) - 1
    unscaled = rng.integers(-bound, bound, n, dtype=np.int64, endpoint=True)
    words = np.empty((n, 2), dtype=np.int64)
    words[:, 0] = unscaled
    words[:, 1] = unscaled >> 63
    validity = None
    if mask is not None:
        validity = pa.array(~mask).buffers()[1]
    return pa.Array.from_buffers(t, n, [validity, pa.py_buffer(words.tobytes())])


def make_table(schema: pa.Schema, n: int, first_row: int, seed: int, pools: Pools) -> pa.Table:
    rng = np.random.default_rng(seed)
    columns = []
    for field in schema:
        if field.name == ROW:
            columns.append(pa.array(np.arange(first_row, first_row + n, dtype=np.int64)))
        else:
            columns.append(make_array(field.type, n, rng, pools))
    return pa.Table.from_arrays(columns, schema=schema)


# --------------------------------------------------------------------------- write plans


@dataclass
class Write:
    """One call to the writer: rows ``[start, stop)`` of the generated table."""

    start: int
    stop: int
    broadcast: bool
    as_table: bool  # pass a multi-chunk Table instead of a RecordBatch
    id_form: str  # how ids are passed: a numpy dtype name, "arrow" or "list"


@dataclass
class Case:
    """Everything one example writes."""

    schema: pa.Schema
    table: pa.Table  # every row in write order; __row == position
    ids: np.ndarray  # subpartition of every row; -1 for broadcast rows
    writes: list[Write]
    num_subpartitions: int
    budget: int
    target_regions: int
    max_batch_rows: int


@st.composite
def cases(draw: st.DrawFn) -> Case:
    schema = draw(schemas())
    texts = FIXED_TEXTS + draw(st.lists(st.text(max_size=12), max_size=6))
    binaries = FIXED_BINARIES + draw(st.lists(st.binary(max_size=12), max_size=6))
    pools = Pools(
        texts=pa.array(texts, pa.string()),
        binaries=pa.array(binaries, pa.binary()),
        null_share=draw(st.sampled_from([0.0, 0.1, 0.5, 1.0])),
    )
    num_rows = draw(st.one_of(st.integers(0, 30), st.integers(31, 3000), st.integers(31, 3000)))
    num_subpartitions = draw(st.integers(1, 40))
    # Regular writes: cut points over the rows (repeats give empty batches).
    num_batches = draw(st.integers(1, 64))
    cuts = sorted(
        draw(st.lists(st.integers(0, num_rows), min_size=num_batches - 1, max_size=num_batches - 1))
    )
    bounds = [0, *cuts, num_rows]
    regular = list(itertools.pairwise(bounds))
    # Broadcast writes, slotted in between regular ones.
    broadcast_sizes = draw(st.lists(st.integers(0, 40), max_size=3))
    order: list[tuple[bool, int]] = [(False, stop - start) for start, stop in regular]
    for size in broadcast_sizes:
        order.insert(draw(st.integers(0, len(order))), (True, size))
    writes: list[Write] = []
    position = 0
    id_forms = ["int8", "uint8", "int32", "uint16", "int64", "arrow", "list"]
    for broadcast, size in order:
        writes.append(
            Write(
                position,
                position + size,
                broadcast,
                draw(st.booleans()),
                draw(st.sampled_from(id_forms)),
            )
        )
        position += size
    seed = draw(st.integers(0, 2**32 - 1))
    table = make_table(schema, position, 0, seed, pools)
    rng = np.random.default_rng(seed + 1)
    id_mode = draw(st.sampled_from(["uniform", "sorted", "constant", "few"]))
    ids = _draw_ids(id_mode, position, num_subpartitions, rng)
    for w in writes:
        if w.broadcast:
            ids[w.start : w.stop] = -1
    target_regions = draw(st.integers(1, 50))
    budget = max(1, table.nbytes // target_regions)
    max_batch_rows = draw(st.one_of(st.integers(1, 8), st.sampled_from([100, 65536])))
    return Case(
        schema,
        table,
        ids,
        writes,
        num_subpartitions,
        budget,
        target_regions,
        max_batch_rows,
    )


def _draw_ids(mode: str, n: int, num_subpartitions: int, rng: np.random.Generator) -> np.ndarray:
    if mode == "constant":
        return np.full(n, rng.integers(0, num_subpartitions), dtype=np.int64)
    if mode == "few":
        chosen = rng.choice(num_subpartitions, size=min(3, num_subpartitions), replace=False)
        return chosen[rng.integers(0, len(chosen), n)].astype(np.int64)
    ids = rng.integers(0, num_subpartitions, n, dtype=np.int64)
    return np.sort(ids) if mode == "sorted" else ids


def _ids_argument(ids: np.ndarray, form: str) -> object:
    if form == "arrow":
        return pa.array(ids)
    if form == "list" and len(ids):
        # An empty Python list is a float array to numpy; test_writer covers that case.
        return ids.tolist()
    return ids.astype("int64" if form == "list" else form)


def _as_table(batch: pa.Table, rng: np.random.Generator) -> pa.Table:
    """The same rows as a Table of several chunks."""
    n = batch.num_rows
    cuts = sorted(rng.integers(0, n + 1, size=3).tolist())
    bounds = [0, *cuts, n]
    pieces = [batch.slice(a, b - a) for a, b in itertools.pairwise(bounds)]
    return pa.concat_tables(pieces)


def _as_batch(rows: pa.Table) -> pa.RecordBatch:
    batches = rows.combine_chunks().to_batches()
    return batches[0] if batches else pa.RecordBatch.from_pylist([], schema=rows.schema)


def write_case(case: Case, path: Path, compression: str) -> ash.WrittenFile:
    rng = np.random.default_rng(len(case.writes))
    writer = ash.ShuffleFileWriter(
        path,
        case.schema,
        case.num_subpartitions,
        memory=case.budget,
        max_batch_rows=case.max_batch_rows,
        compression=compression,
    )
    with writer:
        for w in case.writes:
            rows = case.table.slice(w.start, w.stop - w.start)
            data = _as_table(rows, rng) if w.as_table else _as_batch(rows)
            if w.broadcast:
                writer.write_broadcast(data)
            else:
                ids = case.ids[w.start : w.stop]
                writer.write(data, subpartitions=_ids_argument(ids, w.id_form))
        written = writer.close()
    # Closed once: a second close refuses instead of publishing again.
    with pytest.raises(ash.InvalidOptionError):
        writer.close()
    return written


# --------------------------------------------------------------------------- checks


def _sorted_by_row(table: pa.Table) -> pa.Table:
    return table.sort_by(ROW)


def _rows(table: pa.Table) -> np.ndarray:
    return np.asarray(table.column(ROW).to_numpy())


def _concat(schema: pa.Schema, tables: list[pa.Table]) -> pa.Table:
    return pa.concat_tables(tables) if tables else schema.empty_table()


def _regions_in_file(file_table: pa.Table, stats: pa.Table, num_regions: int) -> list[pa.Table]:
    """Cut the data file's rows (in file order) into regions, using the stats' row counts."""
    region = stats.column("region").to_numpy()
    rows = stats.column("rows").to_numpy()
    broadcast = stats.column("broadcast").to_numpy(zero_copy_only=False)
    per_region = []
    for r in range(num_regions):
        here = region == r
        # A broadcast chunk is stored once: every subpartition's entry counts the same rows.
        per_region.append(int(rows[here][0]) if broadcast[here][0] else int(rows[here].sum()))
    starts = np.concatenate([[0], np.cumsum(per_region)])
    assert starts[-1] == file_table.num_rows
    return [file_table.slice(int(a), int(b - a)) for a, b in itertools.pairwise(starts)]


def check_layout(case: Case, regions: list[pa.Table], stats: pa.Table) -> list[bool]:
    """Every region is sorted by subpartition (or all broadcast), matching the stats."""
    broadcast_flags = []
    for r, rows in enumerate(regions):
        ids = case.ids[_rows(rows)]
        here = stats.filter(pc.equal(stats.column("region"), r))
        is_broadcast = bool(here.column("broadcast")[0].as_py())
        broadcast_flags.append(is_broadcast)
        assert rows.num_rows > 0, f"region {r} is empty"
        if is_broadcast:
            assert (ids == -1).all(), f"broadcast region {r} holds regular rows"
            assert (here.column("rows").to_numpy() == rows.num_rows).all()
        else:
            assert (ids >= 0).all(), f"region {r} holds broadcast rows"
            assert (np.diff(ids) >= 0).all(), f"region {r} is not in subpartition order"
            counts = np.bincount(ids, minlength=case.num_subpartitions)
            np.testing.assert_array_equal(here.column("rows").to_numpy(), counts)
    return broadcast_flags


def expected_selection(
    regions: list[pa.Table], broadcast: list[bool], ids: np.ndarray, selected: list[int]
) -> list[pa.Table]:
    """File order, region by region: selected rows; broadcast chunks once per selected id."""
    parts = []
    for rows, is_broadcast in zip(regions, broadcast, strict=True):
        if is_broadcast:
            parts.extend([rows] * len(selected))
        else:
            parts.append(rows.filter(pa.array(np.isin(ids[_rows(rows)], selected))))
    return parts


def assert_same(actual: pa.Table, expected: pa.Table, what: str) -> None:
    assert actual.schema.equals(expected.schema), f"{what}: schema {actual.schema}"
    assert actual.num_rows == expected.num_rows, (
        f"{what}: {actual.num_rows} rows, expected {expected.num_rows}"
    )
    assert actual.equals(expected), f"{what}: rows differ"


def check_case(case: Case, compression: str, directory: Path, data: st.DataObject) -> None:
    path = directory / "part-0.arrow"
    written = write_case(case, path, compression)
    total = case.table.num_rows
    assert written.rows == total
    assert written.data_size == path.stat().st_size
    assert written.index_size == Path(written.index_url).stat().st_size
    assert sorted(p.name for p in directory.iterdir()) == ["part-0.arrow", "part-0.arrow.idx"]
    broadcast_mask = case.ids == -1

    # The data file is a plain Arrow IPC file with every written row exactly once.
    with pa.ipc.open_file(path) as ipc:
        assert ipc.schema.equals(case.schema)
        batches = [ipc.get_batch(i) for i in range(ipc.num_record_batches)]
    assert all(0 < b.num_rows <= case.max_batch_rows for b in batches)
    file_table = pa.Table.from_batches(batches, schema=case.schema)
    assert_same(_sorted_by_row(file_table), case.table, "pyarrow.ipc.open_file")

    with ash.open_file(path) as shuffle:
        assert shuffle.num_subpartitions == case.num_subpartitions
        assert shuffle.num_rows == total
        assert shuffle.compression == compression
        assert shuffle.schema.equals(case.schema)
        stats = shuffle.stats()
        num_regions = shuffle.num_regions
        assert written.regions == num_regions
        event(f"regions: {_bucket(num_regions)}")
        event(f"rows: {_bucket(total)}")
        event(f"broadcast writes: {sum(w.broadcast for w in case.writes) > 0}")
        assert stats.num_rows == num_regions * case.num_subpartitions
        check_region_count(case, num_regions)

        regions = _regions_in_file(file_table, stats, num_regions)
        broadcast = check_layout(case, regions, stats)

        # Single subpartitions: exactly the rows given that id, plus broadcast rows, in write
        # order (the table is in write order already).
        singles = []
        for s in range(case.num_subpartitions):
            got = shuffle.read(s)
            expected = case.table.filter(pa.array((case.ids == s) | broadcast_mask))
            assert_same(got, expected, f"read({s})")
            singles.append(got)

        # A range and a list: file order region by region, and the same multiset as the
        # concatenation of the single reads.
        a = data.draw(st.integers(0, case.num_subpartitions - 1), label="range start")
        b = data.draw(st.integers(a, case.num_subpartitions), label="range stop")
        chosen = data.draw(
            st.lists(st.integers(0, case.num_subpartitions - 1), max_size=8), label="list"
        )
        for selection, selected in [
            (range(a, b), list(range(a, b))),
            (chosen, sorted(set(chosen))),
            (None, list(range(case.num_subpartitions))),
        ]:
            got = shuffle.read(selection)
            parts = expected_selection(regions, broadcast, case.ids, selected)
            assert_same(got, _concat(case.schema, parts), f"read({selection!r})")
            from_singles = _concat(case.schema, [singles[s] for s in selected])
            assert_same(_canonical(got), _canonical(from_singles), f"read({selection!r}) multiset")

        # Projection: any columns, any order.
        columns = data.draw(st.permutations(case.schema.names), label="columns")
        columns = columns[: data.draw(st.integers(1, len(columns)), label="width")]
        s = data.draw(st.integers(0, case.num_subpartitions - 1), label="projected id")
        assert_same(shuffle.read(s, columns=columns), singles[s].select(columns), "projection")
        projected_range = shuffle.read(range(a, b), columns=columns)
        assert projected_range.column_names == columns

        # Checksums of every chunk hold.
        assert_same(shuffle.read(verify=True), shuffle.read(), "verify=True")

    # polars reads the data file too; without polars the case ends here, reported as skipped.
    pl = pytest.importorskip("polars")
    pl_testing = pytest.importorskip("polars.testing")
    pl_testing.assert_frame_equal(pl.read_ipc(path).sort(ROW), pl.from_arrow(case.table))


def _bucket(n: int) -> str:
    """Coarse size classes for hypothesis statistics."""
    for limit in (0, 1, 5, 20, 50):
        if n <= limit:
            return f"<={limit}"
    return ">50"


def _canonical(table: pa.Table) -> pa.Table:
    # Broadcast rows repeat, so __row is not unique; but rows with equal __row are the same
    # row, so sorting by it gives one canonical order for a multiset of rows.
    return table.sort_by(ROW)


def check_region_count(case: Case, num_regions: int) -> None:
    writes = [w for w in case.writes if w.stop > w.start]
    if case.table.num_rows == 0:
        assert num_regions == 0
        return
    assert num_regions >= 1
    # A region holds at least one buffered batch, and a write is buffered as at most one batch
    # per max_batch_rows rows of each input chunk (a Table here has at most 4 chunks).
    pieces = sum(-(-(w.stop - w.start) // case.max_batch_rows) + 3 * w.as_table for w in writes)
    assert num_regions <= pieces
    regular = [w for w in writes if not w.broadcast]
    if regular and len(regular) == len(writes):
        # Without broadcast writes, the budget alone cuts regions. A region holds at most
        # max(budget, largest input batch) bytes, and two neighbouring regions together hold
        # more than the budget. Allow 10% for the sorted copy's byte count.
        sizes = [case.table.slice(w.start, w.stop - w.start).nbytes for w in regular]
        total = sum(sizes)
        largest = max(sizes) * 1.1
        assert num_regions >= int(total / max(case.budget * 1.1, largest))
        assert num_regions <= 2 * total * 1.1 / case.budget + 1


# --------------------------------------------------------------------------- tests

PROPERTY_SETTINGS = settings(
    max_examples=17,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@pytest.mark.parametrize("compression", ["none", "lz4", "zstd"])
@PROPERTY_SETTINGS
@given(case=cases(), data=st.data())
def test_round_trip(case: Case, compression: str, data: st.DataObject) -> None:
    with tempfile.TemporaryDirectory() as directory:
        check_case(case, compression, Path(directory), data)
