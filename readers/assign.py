"""Consumer assignment: what each of ``C`` consumers reads from ``P`` files of ``N`` subpartitions.

Two patterns, named after the edges of a parallel job graph:

``all_to_all``
    Every consumer reads every file. Consumer ``i`` reads one contiguous subpartition range,
    the same in every file, cut with the key-group range formula::

        first = (i * N + C - 1) // C        # ceil(i * N / C)
        last  = ((i + 1) * N - 1) // C      # inclusive

    The ranges are disjoint, ascending and cover ``[0, N)``; their sizes differ by at most
    one. With more consumers than subpartitions some ranges are empty.

``pointwise``
    Each file is read by a few neighbouring consumers only, never by all.

    * ``P >= C``: consumer ``c`` reads files ``[c * P // C, (c + 1) * P // C)``, all of their
      subpartitions. Every file has exactly one reader; the groups differ in size by at most
      one file.
    * ``P < C``: file ``p`` is read by consumers ``[ceil(p * C / P), ceil((p + 1) * C / P))``,
      at least one. The ``k`` consumers attached to a file split its ``N`` subpartitions into
      ``k`` contiguous ranges with the key-group formula above (``C = k``). Every consumer
      reads exactly one file; with more attached consumers than subpartitions some ranges
      are empty.

In every case each consumer reads one contiguous range of files and one contiguous range of
subpartitions, and the union over all consumers holds every (file, subpartition) pair exactly
once.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass
from typing import Literal

from arrowshuffle.format.errors import InvalidOptionError
from arrowshuffle.readers.plan import Subpartitions, subpartition_runs

Pattern = Literal["all_to_all", "pointwise"]
PATTERNS: tuple[Pattern, ...] = ("all_to_all", "pointwise")


@dataclass(frozen=True)
class ConsumerAssignment:
    """What one consumer reads: a range of files (producers) and a range of subpartitions.

    Attributes:
        consumer: the consumer's index in ``[0, num_consumers)``.
        producers: the files it reads, or ``None`` for "every file" (``all_to_all`` without a
            producer count).
        subpartitions: the subpartitions it reads from each of those files.
    """

    consumer: int
    producers: range | None
    subpartitions: range

    def pairs(self, num_producers: int | None = None) -> list[tuple[int, range]]:
        """The ``(file, subpartition range)`` pairs this consumer reads, in file order.

        Args:
            num_producers: the number of files; needed only when :attr:`producers` is None.
        """
        producers = self.producers
        if producers is None:
            if num_producers is None:
                raise InvalidOptionError(
                    "this assignment covers every file: pass num_producers to list its pairs"
                )
            producers = range(_count(num_producers, "num_producers", minimum=0))
        if len(self.subpartitions) == 0:
            return []
        return [(p, self.subpartitions) for p in producers]


def normalize_pattern(pattern: str) -> Pattern:
    """Accept ``all_to_all``/``pointwise`` in any case, with ``-`` or ``_``."""
    if not isinstance(pattern, str):
        raise InvalidOptionError(f"pattern must be a string, found {pattern!r}")
    name = pattern.strip().lower().replace("-", "_")
    for known in PATTERNS:
        if known == name:
            return known
    raise InvalidOptionError(f"pattern must be one of {', '.join(PATTERNS)}; found {pattern!r}")


def key_group_range(num_subpartitions: int, num_consumers: int, consumer: int) -> range:
    """The contiguous subpartition range of ``consumer`` when ``num_consumers`` split ``[0, N)``."""
    n, c, i = num_subpartitions, num_consumers, consumer
    first = (i * n + c - 1) // c
    last = ((i + 1) * n - 1) // c
    return range(first, max(first, last + 1))


def assign(
    num_subpartitions: int,
    num_consumers: int,
    pattern: str = "all_to_all",
    *,
    num_producers: int | None = None,
) -> list[ConsumerAssignment]:
    """Assign the subpartitions of ``num_producers`` files to ``num_consumers`` consumers.

    See the module docstring for the exact rules of each pattern.

    Args:
        num_subpartitions: ``N``, the subpartition count of every file.
        num_consumers: ``C``, how many consumers share the reading.
        pattern: ``"all_to_all"`` or ``"pointwise"``.
        num_producers: ``P``, the number of files. Required for ``pointwise``; optional for
            ``all_to_all``, where the assignments then say "every file".

    Returns:
        One :class:`ConsumerAssignment` per consumer, in consumer order.

    Raises:
        InvalidOptionError: counts that are not positive integers, an unknown pattern, or
            ``pointwise`` without ``num_producers``.
    """
    n = _count(num_subpartitions, "num_subpartitions", minimum=1)
    c = _count(num_consumers, "num_consumers", minimum=1)
    kind = normalize_pattern(pattern)
    p = None if num_producers is None else _count(num_producers, "num_producers", minimum=0)
    if kind == "all_to_all":
        producers = None if p is None else range(p)
        return [ConsumerAssignment(i, producers, key_group_range(n, c, i)) for i in range(c)]
    if p is None:
        raise InvalidOptionError("the pointwise pattern needs num_producers (the file count)")
    if p >= c:
        return [
            ConsumerAssignment(i, range(i * p // c, (i + 1) * p // c), range(n)) for i in range(c)
        ]
    out: list[ConsumerAssignment] = []
    for producer in range(p):
        first = (producer * c + p - 1) // p
        stop = ((producer + 1) * c + p - 1) // p
        attached = stop - first
        for j in range(attached):
            out.append(
                ConsumerAssignment(
                    first + j, range(producer, producer + 1), key_group_range(n, attached, j)
                )
            )
    if p == 0:
        out = [ConsumerAssignment(i, range(0), range(0)) for i in range(c)]
    return out


def consumer_assignment(
    num_subpartitions: int,
    consumer: int,
    num_consumers: int,
    pattern: str = "all_to_all",
    *,
    num_producers: int | None = None,
) -> ConsumerAssignment:
    """The assignment of one consumer; see :func:`assign`.

    Raises:
        InvalidOptionError: ``consumer`` outside ``[0, num_consumers)``, or any error of
            :func:`assign`.
    """
    c = _count(num_consumers, "num_consumers", minimum=1)
    i = _count(consumer, "consumer", minimum=0)
    if i >= c:
        raise InvalidOptionError(f"consumer must be in [0, {c}) for {c} consumers, found {i}")
    return assign(num_subpartitions, c, pattern, num_producers=num_producers)[i]


def select_reads(
    num_subpartitions: int,
    num_files: int,
    subpartitions: Subpartitions | None = None,
    *,
    consumer: int | None = None,
    num_consumers: int | None = None,
    pattern: str = "all_to_all",
) -> list[tuple[int, Subpartitions | None]]:
    """Turn a reader's selection arguments into ``(file, subpartitions)`` pairs in file order.

    Either ``subpartitions`` (``None`` meaning all) applies to every file, or ``consumer`` and
    ``num_consumers`` pick the files and the subpartition range of that consumer.

    Raises:
        InvalidOptionError: both kinds of selection at once, only half of the consumer pair, or
            subpartition ids outside ``[0, num_subpartitions)``.
    """
    if consumer is None and num_consumers is None:
        if subpartitions is not None:
            if not isinstance(subpartitions, (int, range)):
                try:
                    subpartitions = list(subpartitions)  # an iterator must serve every file
                except TypeError as exc:  # neither an int nor an iterable
                    raise InvalidOptionError(
                        "subpartitions must be an int, a range or a list of ints, "
                        f"found {type(subpartitions).__name__}"
                    ) from exc
            subpartition_runs(subpartitions, num_subpartitions)  # refuse bad ids up front
        return [(f, subpartitions) for f in range(num_files)]
    if subpartitions is not None:
        raise InvalidOptionError("pass either subpartitions= or consumer=/num_consumers=, not both")
    if consumer is None or num_consumers is None:
        raise InvalidOptionError("consumer= and num_consumers= go together; pass both")
    chosen = consumer_assignment(
        num_subpartitions, consumer, num_consumers, pattern, num_producers=num_files
    )
    return [(f, r) for f, r in chosen.pairs()]


def _count(value: object, name: str, *, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise InvalidOptionError(f"{name} must be an integer, found {value!r}")
    number = int(value)
    if number < minimum:
        raise InvalidOptionError(f"{name} must be at least {minimum}, found {number}")
    return number
