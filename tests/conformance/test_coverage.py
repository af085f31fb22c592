"""The vectors break every rule of the specification, and the outcome table covers them."""

from __future__ import annotations

import pytest

from conformance import test_surfaces
from conformance.surfaces import ReadsVectors, Surface, ValidatesVectors
from conformance.vectors import (
    ALL_VECTORS,
    FILE_VECTORS,
    SEEN_BY,
    Kind,
    Vector,
    expected,
    spec_rules,
)


def test_spec_lists_the_rules_of_section_11() -> None:
    rules = spec_rules()
    assert rules == [f"V{i}" for i in range(1, 22)] + [f"M{i}" for i in range(1, 12)]


def test_every_rule_of_the_spec_is_broken_by_a_vector() -> None:
    broken = {v.rule for v in ALL_VECTORS}
    missing = [rule for rule in spec_rules() if rule not in broken]
    assert missing == []


def test_every_rule_has_one_entry_in_the_outcome_table() -> None:
    assert {key.split()[0] for key in SEEN_BY} == set(spec_rules())
    assert all(SEEN_BY[key] & {Kind.DEEP} for key in SEEN_BY)  # deep validation sees all
    assert {v.key for v in ALL_VECTORS if v.key is not None} <= set(SEEN_BY)


@pytest.mark.parametrize("vector", ALL_VECTORS, ids=lambda v: v.id)
def test_a_vector_that_some_reader_reads_says_what_it_reads(vector: Vector) -> None:
    """Where a kind of reader does not refuse a vector, expected.json holds its rows."""

    read_somewhere = any(
        expected(vector, kind, as_dataset=as_dataset) is None
        for kind in (Kind.READ, Kind.RANGED_READ)
        for as_dataset in ((False, True) if vector in FILE_VECTORS else (True,))
    )
    if read_somewhere:
        assert vector.reads is not None
    if vector.source == "file":  # and no file vector says what no reader reads
        assert vector.reads is None or read_somewhere


def surfaces() -> list[type[Surface]]:
    return [
        cls
        for cls in vars(test_surfaces).values()
        if isinstance(cls, type) and cls.__name__.startswith("Test") and issubclass(cls, Surface)
    ]


def test_the_matrix_has_every_surface_and_kind() -> None:
    classes = surfaces()
    assert {cls.KIND for cls in classes} == set(Kind)
    assert {cls.TAKES for cls in classes if issubclass(cls, ReadsVectors)} == {"file", "dataset"}
    validators = {(cls.KIND, cls.TAKES) for cls in classes if issubclass(cls, ValidatesVectors)}
    assert validators == {(k, t) for k in (Kind.VALIDATE, Kind.DEEP) for t in ("file", "dataset")}
