"""Every validation rule of spec.md section 11 is implemented once, in the format package."""

from __future__ import annotations

import re
from pathlib import Path

import arrowshuffle.format.rules  # noqa: F401  (loads every implementing module)
from arrowshuffle.format.rule_registry import IMPLEMENTATIONS, MANIFEST_RULES, RULES

ROOT = Path(__file__).parent.parent
# The package's source folders outside the pure format layer.
OUTSIDE_FORMAT = [ROOT / "readers", ROOT / "writers", ROOT / "arrowshuffle"]


def spec_rules() -> list[str]:
    text = (ROOT / "spec.md").read_text()
    section = text[text.index("## 11. Validation rules") : text.index("## 12.")]
    return re.findall(r"^- \*\*([VM]\d+)\*\* — ", section, flags=re.MULTILINE)


def test_the_spec_lists_the_rules_once_each() -> None:
    rules = spec_rules()
    assert len(rules) == len(set(rules))
    assert {f"V{i}" for i in range(1, 22)} | {f"M{i}" for i in range(1, 12)} == set(rules)


def test_every_spec_rule_has_exactly_one_check_and_every_check_a_spec_rule() -> None:
    rules = set(spec_rules())
    assert rules - set(IMPLEMENTATIONS) == set(), "rules without a check"
    assert set(IMPLEMENTATIONS) - rules == set(), "checks without a rule"
    # The registry keeps one function per rule and refuses a second (test below).
    assert all(callable(f) for f in IMPLEMENTATIONS.values())


def test_summaries_sit_side_by_side_and_match_the_spec() -> None:
    rules = set(spec_rules())
    assert set(RULES) | set(MANIFEST_RULES) == rules
    assert set(RULES).isdisjoint(MANIFEST_RULES)
    text = (ROOT / "spec.md").read_text()
    for rule, summary in RULES.items():
        assert f"- **{rule}** — {summary}" in text, rule


def test_every_check_lives_in_the_format_package() -> None:
    for rule, function in IMPLEMENTATIONS.items():
        assert function.__module__.startswith("arrowshuffle.format."), (rule, function)


def test_a_rule_cannot_be_implemented_twice() -> None:
    import pytest

    from arrowshuffle.format.errors import ArrowShuffleError
    from arrowshuffle.format.rule_registry import implements

    before = dict(IMPLEMENTATIONS)
    with pytest.raises(ArrowShuffleError, match=r"V16.*again"):

        @implements("V16")
        def another() -> None: ...

    with pytest.raises(ArrowShuffleError, match="unknown rule V99"):

        @implements("V99")
        def unknown() -> None: ...

    assert before == IMPLEMENTATIONS


def test_no_module_outside_format_names_a_rule_of_its_own() -> None:
    pattern = re.compile(r"""rule\s*=\s*["'][VM]\d|Violation\(""")
    found = [
        f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
        for folder in OUTSIDE_FORMAT
        for path in sorted(folder.rglob("*.py"))
        for n, line in enumerate(path.read_text().splitlines(), start=1)
        if pattern.search(line)
    ]
    assert found == []
