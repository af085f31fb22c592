"""The one JSON parser of the format: bounded nesting, unique keys, bounded integers.

Manifests (rule M1) and the partitioner spec of an index (rule V7) are parsed here, so that
hostile text fails as a rule of the format, never as a raw ``RecursionError`` or
``ValueError``: nesting is measured before parsing (linear, without recursion), a key twice is
refused as ambiguous, and Python's bound on integer digits applies.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from arrowshuffle.format.errors import CorruptFileError, FormatError

__all__ = ["nesting_depth", "parse_json"]


def nesting_depth(data: bytes) -> int:
    """How deep arrays and objects nest in JSON text, without parsing it (linear, no recursion).

    Brackets inside strings do not count; a quote preceded by an odd run of backslashes does not
    end a string. For text that is not JSON the result is only an estimate, but it agrees with
    a JSON parser on every prefix the parser accepts.
    """
    raw = np.frombuffer(data, np.uint8)
    quotes = np.flatnonzero(raw == 0x22)
    if quotes.size and b"\\" in data:
        backslash = raw == 0x5C
        first = backslash.copy()  # the first backslash of each run
        first[1:] &= ~backslash[:-1]
        last = backslash.copy()  # the last backslash of each run
        last[:-1] &= ~backslash[1:]
        starts, lasts = np.flatnonzero(first), np.flatnonzero(last)
        after = quotes[quotes > 0]
        after = after[backslash[after - 1]]
        run = np.searchsorted(lasts, after - 1)
        escaped = after[(lasts[run] - starts[run]) % 2 == 0]  # an odd run escapes the quote
        quotes = np.setdiff1d(quotes, escaped, assume_unique=True)
    opening = (raw == 0x5B) | (raw == 0x7B)
    brackets = np.flatnonzero(opening | (raw == 0x5D) | (raw == 0x7D))
    # A bracket lies outside every string when an even number of quotes precede it.
    brackets = brackets[np.searchsorted(quotes, brackets) % 2 == 0]
    if not brackets.size:
        return 0
    return int(np.cumsum(np.where(opening[brackets], 1, -1)).max())


def parse_json(
    data: bytes, what: str, rule: str, max_depth: int, *, constants: bool = False
) -> Any:
    """UTF-8 JSON text of at most ``max_depth`` nested arrays and objects, each key once.

    Args:
        data: the text.
        what: names it in messages (``"manifest"``, ``"partitioner spec"``).
        rule: the rule that text which fails breaks.
        max_depth: the deepest nesting accepted.
        constants: accept ``NaN``, ``Infinity`` and ``-Infinity`` (as Python's encoder writes
            them for such floats).

    Raises:
        CorruptFileError: (``rule``) the text is not UTF-8 or JSON, nests too deep, repeats
            a key or holds an integer of too many digits.
    """
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CorruptFileError(
            f"{what} is not UTF-8: byte {data[exc.start]:#04x} at offset {exc.start} does not "
            "decode",
            rule=rule,
        ) from exc
    depth = nesting_depth(data)
    if depth > max_depth:
        raise CorruptFileError(
            f"{what} nests arrays and objects {depth} deep, expected at most {max_depth}",
            rule=rule,
        )

    def unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        # A key twice is ambiguous: parsers keep the first or the last.
        doc = dict(pairs)
        if len(doc) != len(pairs):
            seen: set[str] = set()
            for key, _ in pairs:
                if key in seen:
                    raise CorruptFileError(
                        f"{what} is ambiguous: an object has the key {key!r:.80} twice; "
                        "expected each key once",
                        rule=rule,
                    )
                seen.add(key)
        return doc

    def no_constant(name: str) -> Any:
        raise CorruptFileError(f"{what} is not JSON: it holds {name}", rule=rule)

    try:
        if constants:
            return json.loads(text, object_pairs_hook=unique_keys)
        return json.loads(text, object_pairs_hook=unique_keys, parse_constant=no_constant)
    except RecursionError as exc:  # cannot happen after the depth check; never let it out
        raise CorruptFileError(f"{what} nests too deep to parse", rule=rule) from exc
    except ValueError as exc:  # JSONDecodeError, or an integer of too many digits
        if isinstance(exc, FormatError):
            raise
        raise CorruptFileError(f"{what} is not JSON: {exc}", rule=rule) from exc
