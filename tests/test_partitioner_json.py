"""A hostile partitioner spec in an index fails as rule V7, never as a raw Python error.

The spec is parsed with the manifest's parser: nesting is measured before parsing, a key twice
is refused, and an integer of thousands of digits is an error of the format.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from index_edits import reencode
from test_validate import load_generator, write_pair

import arrowshuffle
from arrowshuffle.cli import main
from arrowshuffle.format.errors import CorruptFileError
from arrowshuffle.format.index import decode_index, encode_partitioner
from arrowshuffle.readers.validate import validate_file

gen = load_generator()

HOSTILE = {
    "nested 5,000 deep": (b'{"name":"hash","x":' + b"[" * 5000 + b"]" * 5000 + b"}", "deep"),
    "nested 100,000 deep": (
        b'{"name":"hash","x":' + b"[" * 100_000 + b"]" * 100_000 + b"}",
        "deep",
    ),
    "an integer of 5,000 digits": (
        b'{"name":"hash","num_subpartitions":' + b"9" * 5000 + b"}",
        "not JSON",
    ),
    "a key twice": (b'{"name":"hash","name":"range"}', "twice"),
}


def with_partitioner_section(path: Path, raw: bytes) -> None:
    """Re-encode the index beside ``path`` with ``raw`` as its partitioner section."""
    index_path = Path(f"{path}.idx")
    index = decode_index(memoryview(index_path.read_bytes()))
    filler = {"name": "explicit", "p": ""}
    filler["p"] = "x" * (len(raw) - len(encode_partitioner(filler)))
    buf = bytearray(reencode(index, partitioner=filler))
    at = gen.Sections.of(buf).header_size + gen.pad8(gen.u32(buf, gen.SCHEMA_LENGTH_AT))
    assert gen.u32(buf, gen.PARTITIONER_LENGTH_AT) == len(raw)
    buf[at : at + len(raw)] = raw
    index_path.write_bytes(bytes(gen.refix(buf)))


@pytest.fixture(params=list(HOSTILE), ids=list(HOSTILE))
def hostile(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[Path, str]:
    raw, words = HOSTILE[request.param]
    path = write_pair(tmp_path)
    with_partitioner_section(path, raw)
    return path, words


def test_open_file_refuses_it_as_v7(hostile: tuple[Path, str]) -> None:
    path, words = hostile
    with pytest.raises(CorruptFileError) as caught:
        arrowshuffle.open_file(path)
    assert caught.value.rule == "V7"
    assert "partitioner spec" in str(caught.value) and words in str(caught.value)


def test_validate_reports_v7(hostile: tuple[Path, str]) -> None:
    path, words = hostile
    report = validate_file(path)
    assert [v.rule for v in report.violations] == ["V7"]
    assert words in report.violations[0].message


def test_the_cli_names_v7_without_a_traceback(
    hostile: tuple[Path, str], capsys: pytest.CaptureFixture[str]
) -> None:
    path, _ = hostile
    assert main(["validate", str(path)]) == 1
    assert main(["inspect", str(path)]) == 1
    out = capsys.readouterr()
    text = out.out + out.err
    assert "V7" in text
    assert "internal error" not in text and "Traceback" not in text
