"""What a read covers, said once: a subpartition selection, a consumer's share or a planned task.

Every reader entry point (``ShuffleFile.read``, ``ShuffleDataset.iter_batches``,
``arrowshuffle.polars.scan``, ...) takes the same keywords; they become one :class:`Selection` at
the boundary, checked there, and the read path passes that object on. A selection becomes a list
of :class:`FileRead` once the reader's file and subpartition counts are known.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from arrowshuffle.format.errors import InvalidOptionError
from arrowshuffle.readers.assign import consumer_assignment
from arrowshuffle.readers.balance import PlannedRead
from arrowshuffle.readers.byte_ranges import Subpartitions, subpartition_runs


@dataclass(frozen=True)
class FileRead:
    """One file's part of a read.

    Attributes:
        file: the file's position in the reader's file list (0 for a single file).
        subpartitions: the subpartitions to read from it.
        regions: the regions to read (part of a skew split), or ``None`` for all of them.
    """

    file: int
    subpartitions: Subpartitions
    regions: range | None = None


@dataclass(frozen=True)
class Selection:
    """One kind of selection: ``subpartitions``, a consumer's share, or a ``task``.

    Attributes:
        subpartitions: an int, a range or an iterable of ints (kept as a list, so that every
            file sees the same ids); ``None`` for all, unless a consumer or a task is given.
        consumer: read what :func:`arrowshuffle.assign` gives this consumer ...
        num_consumers: ... of this many, each file being one producer.
        pattern: ``"all_to_all"`` or ``"pointwise"``; used with ``consumer`` only.
        task: one task of ``Readable.plan()``.

    Raises:
        InvalidOptionError: several kinds of selection at once, half of the consumer pair, or a
            task that is not a :class:`PlannedRead`.
    """

    subpartitions: Subpartitions | None = None
    consumer: int | None = None
    num_consumers: int | None = None
    pattern: str = "all_to_all"
    task: PlannedRead | None = None

    def __post_init__(self) -> None:
        by_consumer = self.consumer is not None or self.num_consumers is not None
        if self.task is not None:
            if self.subpartitions is not None or by_consumer:
                raise InvalidOptionError(
                    "pass either task= or subpartitions= / consumer=, not both"
                )
            if not isinstance(self.task, PlannedRead):
                raise InvalidOptionError(
                    f"task must be a PlannedRead from plan(), found {self.task!r}"
                )
        if by_consumer:
            if self.subpartitions is not None:
                raise InvalidOptionError(
                    "pass either subpartitions= or consumer=/num_consumers=, not both"
                )
            if self.consumer is None or self.num_consumers is None:
                raise InvalidOptionError("consumer= and num_consumers= go together; pass both")
        single = self.subpartitions
        # A numpy integer is one id, as an int is: the types subpartition_runs takes as one.
        if single is not None and not isinstance(single, (int, np.integer, range)):
            try:  # an iterator must serve every file (and every call on a polars frame)
                ids = list(single)
            except TypeError as exc:  # neither an int nor an iterable
                raise InvalidOptionError(
                    "subpartitions must be an int, a range or a list of ints, "
                    f"found {type(single).__name__}"
                ) from exc
            object.__setattr__(self, "subpartitions", ids)

    def file_reads(
        self, num_subpartitions: int, num_files: int, snapshot: str = ""
    ) -> list[FileRead]:
        """The selection over files of ``num_subpartitions`` subpartitions, in file order.

        ``snapshot`` is the reader's (``Readable.snapshot``): a task planned on another one
        is refused.

        Raises:
            InvalidOptionError: subpartition ids, a consumer or task files outside the reader,
                or a task planned on other data.
        """
        if self.task is not None:
            return _task_reads(self.task, num_subpartitions, num_files, snapshot)
        if self.consumer is not None and self.num_consumers is not None:
            chosen = consumer_assignment(
                num_subpartitions,
                self.consumer,
                self.num_consumers,
                self.pattern,
                num_producers=num_files,
            )
            return [FileRead(f, r) for f, r in chosen.pairs()]
        if self.subpartitions is None:
            return [FileRead(f, range(num_subpartitions)) for f in range(num_files)]
        subpartition_runs(self.subpartitions, num_subpartitions)  # refuse bad ids up front
        return [FileRead(f, self.subpartitions) for f in range(num_files)]

    def describe(self) -> str:
        """The selection in a few words (empty for "everything"), for ``explain()`` output."""
        words = []
        if self.subpartitions is not None:
            words.append(f"subpartitions={self.subpartitions!r}")
        if self.consumer is not None:
            words.append(f"consumer={self.consumer}/{self.num_consumers} {self.pattern}")
        if self.task is not None:
            words.append(f"task={_describe_task(self.task)}")
        return " ".join(words)


#: Everything: every subpartition of every file.
EVERYTHING = Selection()


def _task_reads(
    task: PlannedRead, num_subpartitions: int, num_files: int, snapshot: str
) -> list[FileRead]:
    if task.snapshot and snapshot and task.snapshot != snapshot:
        # Its file positions and regions would select other rows here, some or none of the
        # planned ones, with no other sign.
        raise InvalidOptionError(
            f"the task was planned on {task.snapshot}; this reader reads {snapshot}: read it "
            "with the dataset the plan was made on, or open that version "
            "(open_dataset(path, version=...)), or plan again"
        )
    subpartition_runs(task.subpartitions, num_subpartitions)  # refuses foreign ids
    bad = [f for f in task.files if not 0 <= f < num_files]
    if bad:
        raise InvalidOptionError(
            f"the task reads file {bad[0]}, the reader has {num_files} files: was it "
            "planned for another dataset?"
        )
    return [FileRead(f, task.subpartitions, task.regions) for f in task.files]


def _describe_task(task: PlannedRead) -> str:
    sub = task.subpartitions
    text = (
        f"subpartitions {sub.start}-{sub.stop - 1}" if len(sub) > 1 else f"subpartition {sub.start}"
    )
    text += f", {len(task.files)} files" if len(task.files) != 1 else f", file {task.files[0]}"
    if task.regions is not None:
        text += f", regions {task.regions.start}-{task.regions.stop - 1}"
    return f"({text}, {task.bytes} bytes, {task.rows} rows)"
