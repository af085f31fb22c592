"""The README's examples work: every ```python block runs, top to bottom, as a reader pastes them.

The blocks run in order in one namespace, in a fresh working directory, exactly as written. A
block that needs an optional part runs with the test suite's own:

* a block that uses ``arrowshuffle.spark`` runs on the shared test session: the README starts
  one with ``arrowshuffle.spark.local_session()``, which here returns the ``spark`` fixture
  (starting a second session in the test process is slow and not what the tests share);
* a block that names an ``s3://`` URL runs against the local S3 endpoint (moto): through the
  standard AWS environment variables the README tells users to set (``AWS_ENDPOINT_URL``, the
  keys), with the bucket it names created there first;
* a block that imports polars needs polars.

Without an optional part (the core-only CI leg) the blocks that need it are left out and the
others still run: no example depends on one that needs an optional part (checked here, since
every block runs after the ones left out), and the test then reports what it left out as a skip.
Bash blocks are not run; the ``arrowshuffle`` commands they show must parse with the CLI's own
parser (commands and options exist).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"
_FENCE = re.compile(r"^```(\w*)[^\n]*$")


@dataclass(frozen=True)
class Block:
    """One fenced code block of the README."""

    language: str
    line: int  # the README line of the block's first line of code
    code: str

    @property
    def needs(self) -> tuple[str, ...]:
        """The optional parts the block uses: ``spark``, ``s3``, ``polars``."""
        found = []
        if "arrowshuffle.spark" in self.code:
            found.append("spark")
        if "s3://" in self.code:
            found.append("s3")
        if re.search(r"^\s*(import|from) (arrowshuffle\.)?polars\b", self.code, re.MULTILINE):
            found.append("polars")
        return tuple(found)


def readme_blocks(text: str) -> list[Block]:
    """The fenced code blocks of ``text``, in order."""
    blocks: list[Block] = []
    language: str | None = None
    start, lines = 0, []
    for number, line in enumerate(text.splitlines(), start=1):
        fence = _FENCE.match(line)
        if language is None and fence:
            language, start, lines = fence.group(1), number + 1, []
        elif language is not None and line.startswith("```"):
            blocks.append(Block(language, start, "\n".join(lines) + "\n"))
            language = None
        elif language is not None:
            lines.append(line)
    assert language is None, f"README.md: the block opened at line {start - 1} is not closed"
    return blocks


def test_the_readme_blocks_are_found() -> None:
    blocks = readme_blocks(README.read_text(encoding="utf-8"))
    python = [b for b in blocks if b.language == "python"]
    assert len(python) >= 8
    assert any("write_dataset" in b.code and "mode=" in b.code for b in python)
    assert {"spark", "s3", "polars"} <= {need for b in python for need in b.needs}


def _available(need: str, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Prepare ``need`` for the blocks; return why it is unavailable, or ``""``."""
    try:
        if need == "polars":
            pytest.importorskip("polars", reason="polars is not installed")
            return ""
        if need == "spark":
            import arrowshuffle.spark

            session = request.getfixturevalue("spark")
            monkeypatch.setattr(arrowshuffle.spark, "local_session", lambda *a, **k: session)
            return ""
        if need == "s3":
            endpoint = request.getfixturevalue("s3_endpoint")
            monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint.url)
            monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
            monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
            monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-west-1")
            return ""
    except pytest.skip.Exception as skipped:  # the fixture's own reason (no Java, no moto)
        return str(skipped.msg)
    raise AssertionError(f"unknown need {need}")


def _create_buckets(code: str, request: pytest.FixtureRequest) -> None:
    import fsspec

    endpoint = request.getfixturevalue("s3_endpoint")
    fs = fsspec.filesystem("s3", **endpoint.storage_options())
    for bucket in sorted(set(re.findall(r"s3://([a-z0-9][a-z0-9.-]+)", code))):
        if not fs.exists(bucket):
            fs.mkdir(bucket)


def test_every_python_block_runs_in_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> None:
    monkeypatch.chdir(tmp_path)
    text = README.read_text(encoding="utf-8")
    blocks = [b for b in readme_blocks(text) if b.language == "python"]
    namespace: dict[str, Any] = {"__name__": "__readme__"}
    missing: dict[str, str] = {}
    left_out: list[str] = []
    try:
        for block in blocks:
            for need in block.needs:
                if need not in missing:
                    missing[need] = _available(need, request, monkeypatch)
            absent = [need for need in block.needs if missing[need]]
            if absent:
                left_out.append(f"line {block.line} ({', '.join(absent)})")
                continue
            if "s3" in block.needs:
                _create_buckets(block.code, request)
            # Padded so that a traceback names the README's own line numbers.
            source = "\n" * (block.line - 1) + block.code
            exec(compile(source, str(README), "exec"), namespace)
    finally:
        if "s3" in missing and not missing["s3"]:
            import s3fs

            # The blocks' S3 file system was configured by this test's environment.
            s3fs.S3FileSystem.clear_instance_cache()
    if left_out:
        reasons = "; ".join(f"{need}: {why}" for need, why in missing.items() if why)
        pytest.skip(f"ran every README block but those at {', '.join(left_out)} ({reasons})")


def test_the_cli_commands_shown_parse() -> None:
    from arrowshuffle.cli import build_parser

    commands = []
    for block in readme_blocks(README.read_text(encoding="utf-8")):
        if block.language != "bash":
            continue
        for offset, line in enumerate(block.code.splitlines()):
            words = shlex.split(line, comments=True)
            if words[:1] == ["arrowshuffle"]:
                commands.append((block.line + offset, words[1:]))
    assert commands, "the README shows no arrowshuffle command"
    for line, argv in commands:
        try:
            build_parser().parse_args(argv)
        except SystemExit as exc:
            raise AssertionError(
                f"README.md line {line}: arrowshuffle {shlex.join(argv)} does not parse"
            ) from exc
