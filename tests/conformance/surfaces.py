"""What a reader surface must provide, and the tests every surface runs against it.

As in fsspec's abstract tests: :class:`Surface` declares the fixtures a surface provides and
the mixins (:class:`ReadsVectors`, :class:`ValidatesVectors`) hold tests written only against
those fixtures. A surface is a small subclass that sets its kind and the vectors it takes and
overrides one fixture; ``conftest.py`` parametrizes its tests with every vector it takes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

import pyarrow as pa
import pytest

from arrowshuffle import FormatError
from conformance.vectors import (
    Kind,
    Vector,
    as_multiset,
    columns_of,
    expected,
    expected_rows,
)

#: A read surface: the rows of every subpartition of the vector, or a ``FormatError``.
ReadVector = Callable[[Vector], pa.Table]
#: A validating surface: the first broken rule it reports for the vector, ``None`` if valid.
ValidateVector = Callable[[Vector], "str | None"]


@dataclass(frozen=True)
class Known:
    """Why a surface does not yet do what a vector asks, and the exception its test fails with."""

    reason: str
    raises: type[BaseException]


class Surface:
    """A way to read or check vectors. Subclasses set the class attributes."""

    #: what the surface does (decides what it must make of each vector; see ``vectors.SEEN_BY``)
    KIND: ClassVar[Kind]
    #: ``"file"``: file vectors as a data file and its index; ``"dataset"``: every vector as a
    #: dataset directory (a file vector as a one-file dataset)
    TAKES: ClassVar[str]
    #: vector id -> why the surface does not yet do what the vector asks (a strict xfail)
    KNOWN: ClassVar[dict[str, Known]] = {}

    def outcome(self, vector: Vector) -> str | None:
        """The rule the surface must name for ``vector``, ``None`` if it must not object."""
        refused = expected(vector, self.KIND, as_dataset=self.TAKES == "dataset")
        return None if refused is None else refused.rule


class ReadsVectors(Surface):
    """A surface that returns rows: it provides the ``read_vector`` fixture."""

    KIND = Kind.READ
    #: whether the surface returns rows in the documented order (else compared as a multiset)
    ORDERED: ClassVar[bool] = True

    @pytest.fixture
    def read_vector(self) -> ReadVector:
        """Read every subpartition of a vector (verifying chunk checksums where possible)."""
        raise NotImplementedError

    def test_vector(self, vector: Vector, read_vector: ReadVector) -> None:
        rule = self.outcome(vector)
        if rule is not None:
            with pytest.raises(FormatError) as caught:
                read_vector(vector)
            assert caught.value.rule == rule, str(caught.value)
            return
        read = columns_of(read_vector(vector))
        want = expected_rows(vector)
        assert list(read) == list(want)
        if self.ORDERED:
            assert read == want
        else:
            assert as_multiset(read) == as_multiset(want)


class ValidatesVectors(Surface):
    """A surface that reports broken rules: it provides the ``validate_vector`` fixture."""

    KIND = Kind.VALIDATE

    @pytest.fixture
    def validate_vector(self) -> ValidateVector:
        """The first rule the surface reports broken for a vector, ``None`` when it is valid."""
        raise NotImplementedError

    def test_vector(self, vector: Vector, validate_vector: ValidateVector) -> None:
        assert validate_vector(vector) == self.outcome(vector)
