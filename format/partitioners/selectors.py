"""Partitioners that ignore the rows' values: Flink's keyless channel selectors.

``round_robin`` (Flink's rebalance), ``random`` (shuffle), ``rescale``, ``broadcast``,
``forward`` and ``global``. The stateful ones keep their state across batches exactly as a Flink
selector does across records, so splitting the input into other batches changes nothing.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from arrowshuffle.format.errors import InvalidOptionError
from arrowshuffle.format.partitioners.base import (
    Batch,
    check_int,
    check_num_subpartitions,
    check_seed,
    constant_ids,
    spec_field,
)


def _spec_seed(spec: dict[str, Any]) -> int | None:
    return None if spec.get("seed") is None else spec_field(spec, "seed", int)


class RoundRobinPartitioner:
    """Flink's rebalance: start at a random subpartition, then cycle through all of them.

    As Flink's ``RebalancePartitioner``, the cursor starts at a random subpartition and
    advances before each row, so the first row goes to ``(start + 1) % n``; the cursor
    carries over from batch to batch, which keeps subpartition sizes within one row.

    Args:
        num_subpartitions: how many subpartitions there are.
        seed: makes the random start reproducible.
    """

    name: ClassVar[str] = "round_robin"
    OPTIONS: ClassVar[tuple[str, ...]] = ("seed",)
    REQUIRED: ClassVar[tuple[str, ...]] = ()
    RECOMPUTABLE: ClassVar[bool] = False
    broadcast = False

    def __init__(self, num_subpartitions: int, *, seed: int | None = None) -> None:
        self.num_subpartitions = check_num_subpartitions(num_subpartitions)
        self.seed = check_seed(seed)
        self.start = int(np.random.default_rng(self.seed).integers(self.num_subpartitions))
        self._cursor = self.start

    def spec(self) -> dict[str, Any]:
        """``{"name": "round_robin", "seed": ..., "num_subpartitions": n}``."""
        return {"name": self.name, "seed": self.seed, "num_subpartitions": self.num_subpartitions}

    def assign(self, batch: Batch) -> np.ndarray:
        """The next ``batch.num_rows`` subpartitions of the cycle."""
        n = self.num_subpartitions
        ids = (self._cursor + 1 + np.arange(batch.num_rows, dtype=np.int64)) % n
        self._cursor = (self._cursor + batch.num_rows) % n
        return ids

    @classmethod
    def from_spec(cls, spec: dict[str, Any], num_subpartitions: int) -> RoundRobinPartitioner:
        """A fresh partitioner with the spec's options (the cycle restarts)."""
        return cls(num_subpartitions, seed=_spec_seed(spec))


class RandomPartitioner:
    """Flink's shuffle: every row to a uniformly random subpartition.

    Args:
        num_subpartitions: how many subpartitions there are.
        seed: makes the sequence of subpartitions reproducible for the same batches.
    """

    name: ClassVar[str] = "random"
    OPTIONS: ClassVar[tuple[str, ...]] = ("seed",)
    REQUIRED: ClassVar[tuple[str, ...]] = ()
    RECOMPUTABLE: ClassVar[bool] = False
    broadcast = False

    def __init__(self, num_subpartitions: int, *, seed: int | None = None) -> None:
        self.num_subpartitions = check_num_subpartitions(num_subpartitions)
        self.seed = check_seed(seed)
        self._rng = np.random.default_rng(self.seed)

    def spec(self) -> dict[str, Any]:
        """``{"name": "random", "seed": ..., "num_subpartitions": n}``."""
        return {"name": self.name, "seed": self.seed, "num_subpartitions": self.num_subpartitions}

    def assign(self, batch: Batch) -> np.ndarray:
        """A random subpartition for every row, drawn from the partitioner's generator."""
        ids: np.ndarray = self._rng.integers(
            0, self.num_subpartitions, size=batch.num_rows, dtype=np.int64
        )
        return ids

    @classmethod
    def from_spec(cls, spec: dict[str, Any], num_subpartitions: int) -> RandomPartitioner:
        """A fresh partitioner with the spec's seed."""
        return cls(num_subpartitions, seed=_spec_seed(spec))


def rescale_targets(producer_index: int, num_producers: int, num_subpartitions: int) -> range:
    """The subpartitions producer ``i`` of ``P`` feeds under Flink's POINTWISE pattern.

    With ``N`` subpartitions (consumers), as Flink connects a pointwise edge:

    * ``P <= N``: producer ``i`` feeds ``[ceil(i*N/P), ceil((i+1)*N/P))``, a contiguous run
      of ``floor(N/P)`` or ``ceil(N/P)`` subpartitions; the runs of all producers cover
      ``0..N-1`` once (``P == N`` gives ``[i, i+1)``);
    * ``P > N``: consumer ``j`` reads producers ``[floor(j*P/N), floor((j+1)*P/N))``, so
      producer ``i`` feeds the single subpartition ``ceil((i+1)*N/P) - 1``.
    """
    p = check_int("num_producers", num_producers, 1)
    i = check_int("producer_index", producer_index, 0, p)
    n = check_num_subpartitions(num_subpartitions)
    if p <= n:
        return range((i * n + p - 1) // p, ((i + 1) * n + p - 1) // p)
    target = ((i + 1) * n + p - 1) // p - 1
    return range(target, target + 1)


class RescalePartitioner:
    """Flink's rescale: round robin over only the subpartitions this producer feeds.

    The file is the output of producer ``producer_index`` of ``num_producers``; under a
    POINTWISE pattern it feeds the contiguous subpartitions :func:`rescale_targets` gives, and
    as Flink's ``RescalePartitioner`` it cycles through them starting with the first.
    Subpartitions outside that run stay empty.

    Args:
        num_subpartitions: how many subpartitions there are (the consumers).
        producer_index: which producer writes this file, ``0 <= i < num_producers``.
        num_producers: how many producers write the dataset.
    """

    name: ClassVar[str] = "rescale"
    OPTIONS: ClassVar[tuple[str, ...]] = ("producer_index", "num_producers")
    REQUIRED: ClassVar[tuple[str, ...]] = ()
    RECOMPUTABLE: ClassVar[bool] = False
    PER_PRODUCER: ClassVar[tuple[str, ...]] = ("producer_index", "targets")
    broadcast = False

    def __init__(
        self, num_subpartitions: int, *, producer_index: int = 0, num_producers: int = 1
    ) -> None:
        self.num_subpartitions = check_num_subpartitions(num_subpartitions)
        self.targets = rescale_targets(producer_index, num_producers, self.num_subpartitions)
        self.producer_index = producer_index
        self.num_producers = num_producers
        self._cursor = -1  # as Flink's: advanced before each row, so the first row gets 0

    def spec(self) -> dict[str, Any]:
        """``{"name": "rescale", "producer_index": i, "num_producers": P, "targets": [a, b]}``."""
        return {
            "name": self.name,
            "producer_index": self.producer_index,
            "num_producers": self.num_producers,
            "targets": [self.targets.start, self.targets.stop],
            "num_subpartitions": self.num_subpartitions,
        }

    def assign(self, batch: Batch) -> np.ndarray:
        """The next rows of the cycle over this producer's subpartitions."""
        width = len(self.targets)
        steps = self._cursor + 1 + np.arange(batch.num_rows, dtype=np.int64)
        self._cursor = (self._cursor + batch.num_rows) % width
        return self.targets.start + steps % width

    @classmethod
    def from_spec(cls, spec: dict[str, Any], num_subpartitions: int) -> RescalePartitioner:
        """A fresh partitioner for the same producer."""
        return cls(
            num_subpartitions,
            producer_index=spec_field(spec, "producer_index", int),
            num_producers=spec_field(spec, "num_producers", int),
        )


class BroadcastPartitioner:
    """Every subpartition receives every row; the writer stores the rows once.

    A writer with this partitioner puts rows in broadcast regions, whose single chunk every
    subpartition's index entry points at, so a reader of any subpartition reads all rows.
    """

    name: ClassVar[str] = "broadcast"
    OPTIONS: ClassVar[tuple[str, ...]] = ()
    REQUIRED: ClassVar[tuple[str, ...]] = ()
    RECOMPUTABLE: ClassVar[bool] = False
    broadcast = True

    def __init__(self, num_subpartitions: int) -> None:
        self.num_subpartitions = check_num_subpartitions(num_subpartitions)

    def spec(self) -> dict[str, Any]:
        """``{"name": "broadcast", "num_subpartitions": n}``."""
        return {"name": self.name, "num_subpartitions": self.num_subpartitions}

    def assign(self, batch: Batch) -> np.ndarray:
        """Refused: a broadcast row belongs to every subpartition, not one.

        Raises:
            InvalidOptionError: always; writers check :attr:`broadcast` and store rows once.
        """
        raise InvalidOptionError(
            "the broadcast partitioner sends every row to every subpartition; there is no "
            "single subpartition per row (writers store broadcast rows once, see write_broadcast)"
        )

    @classmethod
    def from_spec(cls, spec: dict[str, Any], num_subpartitions: int) -> BroadcastPartitioner:
        """A broadcast partitioner."""
        return cls(num_subpartitions)


class ForwardPartitioner:
    """Flink's forward: producer ``i``'s rows go to consumer ``i`` only.

    In Flink a forward edge links producer ``i`` to consumer ``i`` of the same parallelism.
    In a shuffle dataset consumer ``i`` reads subpartition ``i`` of every file, so the file
    of producer ``i`` puts every row in subpartition ``i``; as Flink refuses a forward edge
    between different parallelisms, a producer index outside ``0..num_subpartitions-1`` is an
    error (use ``rescale`` for that).

    Args:
        num_subpartitions: how many subpartitions (consumers) there are.
        producer_index: which producer writes this file.
    """

    name: ClassVar[str] = "forward"
    OPTIONS: ClassVar[tuple[str, ...]] = ("producer_index",)
    REQUIRED: ClassVar[tuple[str, ...]] = ()
    RECOMPUTABLE: ClassVar[bool] = True
    PER_PRODUCER: ClassVar[tuple[str, ...]] = ("producer_index",)
    broadcast = False

    def __init__(self, num_subpartitions: int, *, producer_index: int = 0) -> None:
        self.num_subpartitions = check_num_subpartitions(num_subpartitions)
        if (
            isinstance(producer_index, bool)
            or not isinstance(producer_index, int)
            or not 0 <= producer_index < self.num_subpartitions
        ):
            raise InvalidOptionError(
                f"forward sends producer i's rows to subpartition i, so producer_index must be "
                f"in [0, {num_subpartitions}), found {producer_index!r}; with more producers "
                "than subpartitions use the rescale partitioner"
            )
        self.producer_index = producer_index

    def spec(self) -> dict[str, Any]:
        """``{"name": "forward", "producer_index": i, "num_subpartitions": n}``."""
        return {
            "name": self.name,
            "producer_index": self.producer_index,
            "num_subpartitions": self.num_subpartitions,
        }

    def assign(self, batch: Batch) -> np.ndarray:
        """Subpartition ``producer_index`` for every row."""
        return constant_ids(batch.num_rows, self.producer_index)

    @classmethod
    def from_spec(cls, spec: dict[str, Any], num_subpartitions: int) -> ForwardPartitioner:
        """The forward partitioner of the same producer."""
        return cls(num_subpartitions, producer_index=spec_field(spec, "producer_index", int))


class GlobalPartitioner:
    """Flink's global: every row goes to subpartition 0 (one consumer reads everything)."""

    name: ClassVar[str] = "global"
    OPTIONS: ClassVar[tuple[str, ...]] = ()
    REQUIRED: ClassVar[tuple[str, ...]] = ()
    RECOMPUTABLE: ClassVar[bool] = True
    broadcast = False

    def __init__(self, num_subpartitions: int) -> None:
        self.num_subpartitions = check_num_subpartitions(num_subpartitions)

    def spec(self) -> dict[str, Any]:
        """``{"name": "global", "num_subpartitions": n}``."""
        return {"name": self.name, "num_subpartitions": self.num_subpartitions}

    def assign(self, batch: Batch) -> np.ndarray:
        """Subpartition 0 for every row."""
        return constant_ids(batch.num_rows, 0)

    @classmethod
    def from_spec(cls, spec: dict[str, Any], num_subpartitions: int) -> GlobalPartitioner:
        """A global partitioner."""
        return cls(num_subpartitions)
