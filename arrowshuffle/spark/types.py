"""Arrow <-> Spark types for the data source: the Spark schema of a dataset, and batches in it.

A dataset stores whatever Arrow schema its writer had. Spark sees a schema derived from it:
every Arrow type maps to the Spark type that holds its values without loss, and the reader
casts each batch to the Arrow form Spark expects for that Spark schema (``string`` for
``large_string``, microsecond timestamps in UTC, the same nullability and field order).
Spark refuses a batch whose schema differs from that form in any detail.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.types as pat

from arrowshuffle.format.arrow_types import plain_type, to_plain
from arrowshuffle.format.errors import SchemaMismatchError


def _types() -> Any:
    from pyspark.sql import types

    return types


def spark_type(arrow_type: pa.DataType, *, where: str = "field") -> Any:
    """The Spark ``DataType`` that holds the values of ``arrow_type`` without loss.

    Unsigned integers widen (``uint8`` -> short, ``uint16`` -> int, ``uint32`` -> long,
    ``uint64`` -> decimal(20, 0)); large and view string/binary/list types map to their plain
    Spark type; timestamps without a time zone are ``timestamp_ntz``; run-end encoded and
    dictionary columns map as their values, extension columns as their storage type.

    Raises:
        SchemaMismatchError: a type Spark has no equivalent for (the message names the field).
    """
    t = _types()
    # List views, run-end encoding, extension types and dictionaries: as their plain form,
    # which conform() converts batches to.
    at = plain_type(arrow_type)
    simple = {
        pa.bool_(): t.BooleanType(),
        pa.int8(): t.ByteType(),
        pa.int16(): t.ShortType(),
        pa.int32(): t.IntegerType(),
        pa.int64(): t.LongType(),
        pa.uint8(): t.ShortType(),
        pa.uint16(): t.IntegerType(),
        pa.uint32(): t.LongType(),
        pa.uint64(): t.DecimalType(20, 0),
        pa.float16(): t.FloatType(),
        pa.float32(): t.FloatType(),
        pa.float64(): t.DoubleType(),
        pa.date32(): t.DateType(),
        pa.date64(): t.DateType(),
        pa.null(): t.NullType(),
    }
    if at in simple:
        return simple[at]
    if pa.types.is_string(at) or pa.types.is_large_string(at) or pa.types.is_string_view(at):
        return t.StringType()
    if (
        pa.types.is_binary(at)
        or pa.types.is_large_binary(at)
        or pa.types.is_binary_view(at)
        or pa.types.is_fixed_size_binary(at)
    ):
        return t.BinaryType()
    if pa.types.is_decimal(at):
        if at.precision > 38:
            raise SchemaMismatchError(
                f"{where}: {at} has precision {at.precision}; Spark decimals hold at most 38 digits"
            )
        return t.DecimalType(at.precision, at.scale)
    if pa.types.is_timestamp(at):
        return t.TimestampType() if at.tz is not None else t.TimestampNTZType()
    if pa.types.is_duration(at):
        return t.DayTimeIntervalType()
    if (
        pa.types.is_list(at)
        or pa.types.is_large_list(at)
        or pa.types.is_fixed_size_list(at)
        or pa.types.is_list_view(at)
        or pa.types.is_large_list_view(at)
    ):
        element = spark_type(at.value_type, where=f"{where}.element")
        return t.ArrayType(element, containsNull=at.value_field.nullable)
    if pa.types.is_map(at):
        return t.MapType(
            spark_type(at.key_type, where=f"{where}.key"),
            spark_type(at.item_type, where=f"{where}.value"),
            valueContainsNull=at.item_field.nullable,
        )
    if pa.types.is_struct(at):
        return t.StructType(
            [
                t.StructField(
                    f.name, spark_type(f.type, where=f"{where}.{f.name}"), nullable=f.nullable
                )
                for f in at
            ]
        )
    raise SchemaMismatchError(
        f"{where}: Arrow type {at} has no Spark equivalent; read this dataset with the pyarrow "
        "or polars reader, or rewrite it with a Spark-compatible type"
    )


def spark_schema(schema: pa.Schema) -> Any:
    """The Spark ``StructType`` of a dataset whose Arrow schema is ``schema``."""
    t = _types()
    return t.StructType(
        [
            t.StructField(f.name, spark_type(f.type, where=f"field {f.name!r}"), f.nullable)
            for f in schema
        ]
    )


def spark_arrow_schema(struct: Any) -> pa.Schema:
    """The exact Arrow schema Spark expects of the batches a reader yields for ``struct``."""
    from pyspark.sql.pandas.types import to_arrow_schema

    schema: pa.Schema = to_arrow_schema(struct, timezone="UTC")
    return schema


def writer_arrow_schema(struct: Any) -> pa.Schema:
    """The Arrow schema a dataset written from a Spark DataFrame of schema ``struct`` has.

    Spark hands writers batches in this form except for the time zone of timestamps, which
    follows the session; the writer stores every timestamp in UTC, the same instants.
    """
    return spark_arrow_schema(struct)


def conform(batch: pa.RecordBatch, target: pa.Schema) -> pa.RecordBatch:
    """Return ``batch`` in exactly the ``target`` schema (columns by name, cast if needed).

    Raises:
        SchemaMismatchError: a target column the batch lacks, or values that cannot be cast.
    """
    if batch.schema.equals(target):
        return batch
    names = batch.schema.names
    missing = [name for name in target.names if name not in names]
    if missing:
        raise SchemaMismatchError(
            f"the dataset has no column {missing[0]!r}; expected columns {target.names}, "
            f"found {names}"
        )
    arrays = []
    for field in target:
        values = batch.column(field.name)
        if not values.type.equals(field.type):
            # pyarrow's cast from a list view to a list is broken, and it has none from run-end
            # encoded or extension arrays: those are first made plain.
            values = to_plain(values)
        if not values.type.equals(field.type):
            try:
                values = _floor_to(values, field.type)
                # Any other loss (overflow, bad values) is refused.
                options = pc.CastOptions(target_type=field.type, allow_time_truncate=True)
                values = pc.cast(values, options=options)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
                raise SchemaMismatchError(
                    f"column {field.name!r}: cannot convert {values.type} to Spark's "
                    f"{field.type}: {exc}"
                ) from exc
        arrays.append(values)
    return pa.RecordBatch.from_arrays(arrays, schema=target)


_NANOS = {"s": 1_000_000_000, "ms": 1_000_000, "us": 1_000, "ns": 1}
_MILLIS_PER_DAY = 86_400_000


def _floor_to(values: pa.Array, target: pa.DataType) -> pa.Array:
    """``values`` floored to ``target``'s coarser time unit (ns to us, date64 to days).

    For timestamps, dates and durations. Spark, and the hash partitioner that placed the rows,
    floor a finer instant (-1500 ns is -2 us); a truncating cast would give -1 us, a value that
    reads as another key than the one the row was placed by, so that a filter pruned by that
    key would miss the row. Floored as the stored integers (UTC instants for a timestamp), in
    the target's unit: pyarrow's ``floor_temporal`` fails on a local time an autumn hour
    repeats, wraps the lowest nanosecond instants around, and takes no durations.
    """
    source = values.type
    step = _floor_step(source, target)
    if step <= 1:
        return values
    ints = values.cast(pa.int64())
    floored = pa.array(
        np.floor_divide(pc.fill_null(ints, 0).to_numpy(), step),
        mask=ints.is_null().to_numpy(zero_copy_only=False),
    )
    if pat.is_date32(target):
        return floored.cast(pa.int32()).cast(target)  # days beyond int32 are refused
    if pat.is_timestamp(source):
        return floored.cast(pa.timestamp(target.unit, tz=source.tz))
    return floored.cast(target)


def _floor_step(source: pa.DataType, target: pa.DataType) -> int:
    """Source units per target unit when ``target`` is coarser, else 0."""
    if pat.is_date64(source) and pat.is_date32(target):
        return _MILLIS_PER_DAY
    same_kind = (pat.is_timestamp(source) and pat.is_timestamp(target)) or (
        pat.is_duration(source) and pat.is_duration(target)
    )
    return _NANOS[target.unit] // _NANOS[source.unit] if same_kind else 0
