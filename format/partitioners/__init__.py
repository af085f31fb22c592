"""Partitioners: assign every row of a batch to a subpartition, vectorized.

Each partitioner has ``.assign(batch)`` (one subpartition id per row), ``.spec()`` (a JSON
description stored in the index and the manifest) and ``.broadcast``. Build one by name with
:func:`make_partitioner`, rebuild one from a stored spec with :func:`partitioner_from_spec`,
and check rows against a spec with :func:`recompute_subpartitions`.

=============== ============================================================ ==============
name            rows go to                                                   recomputable
=============== ============================================================ ==============
``hash``        ``pmod(spark_murmur3(by), n)``, as Spark's ``repartition``   yes
``key_group``   Flink's key group ``murmur(key hash) % n``                   yes
``range``       the range between sampled boundaries that holds the key      yes
``round_robin`` a cycle from a random start (Flink's rebalance)              no
``random``      a random subpartition (Flink's shuffle)                      no
``rescale``     a cycle over this producer's pointwise subpartitions         no
``broadcast``   every subpartition, stored once                              no
``forward``     subpartition ``producer_index``                              yes
``global``      subpartition 0                                               yes
``column``      the id in an integer column                                  yes
=============== ============================================================ ==============
"""

from arrowshuffle.format.partitioners.base import Partitioner
from arrowshuffle.format.partitioners.column import ColumnPartitioner
from arrowshuffle.format.partitioners.hashing import (
    HashPartitioner,
    KeyGroupPartitioner,
    key_group_range,
    operator_for_key_group,
)
from arrowshuffle.format.partitioners.range_partitioner import (
    RangePartitioner,
    boundaries_from_sample,
)
from arrowshuffle.format.partitioners.registry import (
    PARTITIONER_NAMES,
    PER_PRODUCER_FIELDS,
    dataset_spec,
    is_recomputable,
    make_partitioner,
    partitioner_from_spec,
    recompute_subpartitions,
)
from arrowshuffle.format.partitioners.selectors import (
    BroadcastPartitioner,
    ForwardPartitioner,
    GlobalPartitioner,
    RandomPartitioner,
    RescalePartitioner,
    RoundRobinPartitioner,
    rescale_targets,
)

__all__ = [
    "PARTITIONER_NAMES",
    "PER_PRODUCER_FIELDS",
    "BroadcastPartitioner",
    "ColumnPartitioner",
    "ForwardPartitioner",
    "GlobalPartitioner",
    "HashPartitioner",
    "KeyGroupPartitioner",
    "Partitioner",
    "RandomPartitioner",
    "RangePartitioner",
    "RescalePartitioner",
    "RoundRobinPartitioner",
    "boundaries_from_sample",
    "dataset_spec",
    "is_recomputable",
    "key_group_range",
    "make_partitioner",
    "operator_for_key_group",
    "partitioner_from_spec",
    "recompute_subpartitions",
    "rescale_targets",
]
