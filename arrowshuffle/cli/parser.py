"""The options of the ``arrowshuffle`` command, and usage errors that say what was meant.

No option is ever abbreviated (``--dry`` is refused, not taken for ``--dry-run``): an unknown
option or command is an error that shows the command's usage and the closest name it knows.
"""

from __future__ import annotations

import argparse
import difflib
import json
import re
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

import arrowshuffle
from arrowshuffle.readers.balance import (
    DEFAULT_SKEW_FACTOR,
    DEFAULT_SKEW_MIN_BYTES,
    DEFAULT_TARGET_BYTES,
)
from arrowshuffle.writers.compact import DEFAULT_BATCH_ROWS as DEFAULT_COMPACT_BATCH_ROWS
from arrowshuffle.writers.compact import DEFAULT_MEMORY as DEFAULT_COMPACT_MEMORY
from arrowshuffle.writers.compact import DEFAULT_TARGET_FILE_SIZE
from arrowshuffle.writers.vacuum import DEFAULT_OLDER_THAN

#: Arguments that look like options but are numbers (``--skew-factor -1`` is judged later).
_NUMBER = re.compile(r"^-(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$")


class Parser(argparse.ArgumentParser):
    """An argument parser without abbreviations that suggests the option or command meant."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)
        #: The subcommands' parsers by name (on the top-level parser).
        self.commands: dict[str, Parser] = {}

    def parse_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> argparse.Namespace:
        """Parse, refusing unknown commands and options with a suggestion first."""
        argv = list(sys.argv[1:] if args is None else args)
        self._check_words(argv)
        return super().parse_args(argv, namespace)

    def _check_words(self, argv: list[str]) -> None:
        """Refuse an unknown command, or an option its command does not have."""
        for i, token in enumerate(argv):
            if token == "--":
                return
            if token.startswith("-"):
                continue  # the top level's own options: argparse judges them
            command = self.commands.get(token)
            if command is None:
                if self.commands:
                    self.error(
                        f"unknown command {token}{_suggestion(token, self.commands)}; the "
                        f"commands are {', '.join(self.commands)}"
                    )
                return
            command.check_options(argv[i + 1 :])
            return

    def check_options(self, argv: Sequence[str]) -> None:
        """Refuse options this parser does not have, naming the closest ones it has."""
        unknown = []
        for token in argv:
            if token == "--":
                break
            if not token.startswith("-") or token == "-" or _NUMBER.match(token):
                continue
            name = token.split("=", 1)[0]
            if name not in self._option_string_actions:
                unknown.append(name + _suggestion(name, self._option_string_actions))
        if unknown:
            self.error(f"unrecognized arguments: {', '.join(unknown)}")

    def error(self, message: str) -> NoReturn:
        """Print this command's usage and one ``error:`` line (``--help`` shows more); exit 2."""
        self.print_usage(sys.stderr)
        self.exit(2, f"error: {message}\n")


def _suggestion(word: str, known: Any) -> str:
    """`` (did you mean --deep?)`` when one of ``known`` is close to ``word``, else nothing."""
    close = difflib.get_close_matches(word, [str(k) for k in known], n=1, cutoff=0.6)
    return f" (did you mean {close[0]}?)" if close else ""


def _storage_option(text: str) -> tuple[str, Any]:
    """Parse ``KEY=VALUE``; a VALUE that is JSON (true, 3, {...}) is decoded, else kept."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, found {text!r}")
    try:
        return key, json.loads(value)
    except json.JSONDecodeError:
        return key, value


def _version_number(text: str) -> int:
    """A manifest version: an integer >= 0."""
    try:
        value = int(text, 10)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(
            f"expected a version number (0, 1, 2, ...), found {text!r}"
        )
    return value


def _add_version_option(command: argparse.ArgumentParser) -> None:
    command.add_argument(
        "--version",
        type=_version_number,
        metavar="N",
        help="of a dataset, read manifest version N instead of the one in force (while vacuum "
        "retains it)",
    )


def build_parser() -> Parser:
    """The argument parser of the ``arrowshuffle`` command."""
    common = Parser(add_help=False)
    common.add_argument(
        "--storage-option",
        metavar="KEY=VALUE",
        action="append",
        type=_storage_option,
        default=[],
        help="fsspec storage option for URLs (repeatable); JSON values are decoded",
    )
    parser = Parser(
        prog="arrowshuffle",
        description="Validate, inspect, plan, read, compact and vacuum arrowshuffle files (Arrow "
        "IPC + index sidecar) and datasets.",
        epilog="Exit status: 0 valid, 1 invalid data, 2 usage or IO error.",
    )
    parser.add_argument(
        "--version", action="version", version=f"%(prog)s {arrowshuffle.__version__}"
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    def command(name: str, help: str) -> Parser:
        sub = commands.add_parser(name, parents=[common], help=help)
        parser.commands[name] = sub
        return sub

    validate = command("validate", "check files against the format's rules")
    validate.add_argument(
        "paths", nargs="+", metavar="PATH", help="data files (.arrow) or dataset directories"
    )
    validate.add_argument(
        "--deep", action="store_true", help="also read every chunk: checksums, decoding, rows"
    )
    validate.add_argument(
        "--current-only",
        action="store_true",
        help="of a dataset, check the manifest version in force only (by default every "
        "retained version is checked, each file once)",
    )
    validate.add_argument("--json", action="store_true", help="print a JSON list of reports")

    inspect = command(
        "inspect", "check the structure, then show regions, subpartitions, sizes and skew"
    )
    inspect.add_argument("path", metavar="PATH", help="a data file (.arrow) or a dataset")
    inspect.add_argument("--json", action="store_true", help="print JSON")
    inspect.add_argument(
        "--plot",
        metavar="PNG",
        help="also draw the region x subpartition heatmap of bytes and rows into this file "
        "(needs matplotlib)",
    )
    _add_version_option(inspect)

    plan = command(
        "plan",
        "check the structure, then show balanced read tasks (coalesced and split "
        "subpartitions) and their skew",
    )
    plan.add_argument("path", metavar="PATH", help="a dataset or a data file (.arrow)")
    plan.add_argument(
        "--target-bytes",
        default=f"{DEFAULT_TARGET_BYTES // 2**20}MiB",
        metavar="SIZE",
        help="the bytes a task aims at, e.g. 64MiB or 1GB (default %(default)s)",
    )
    plan.add_argument(
        "--subpartitions", metavar="IDS", help="plan only these: 3, 2-7 (inclusive) or 1,4,9"
    )
    plan.add_argument(
        "--skew-factor",
        type=float,
        default=DEFAULT_SKEW_FACTOR,
        metavar="X",
        help="split a subpartition above X times the median ... (default %(default)g)",
    )
    plan.add_argument(
        "--skew-min-bytes",
        default=f"{DEFAULT_SKEW_MIN_BYTES // 2**20}MiB",
        metavar="SIZE",
        help="... that also holds more than SIZE (default %(default)s)",
    )
    plan.add_argument(
        "--max-tasks", type=int, metavar="N", help="at most N tasks: the target grows to fit"
    )
    plan.add_argument("--json", action="store_true", help="print a JSON object")

    read = command("read", "read subpartitions into an .arrow, .parquet or .csv file")
    read.add_argument("path", metavar="PATH", help="a data file (.arrow) or a dataset")
    read.add_argument(
        "--subpartitions",
        required=True,
        metavar="IDS",
        help="3, 2-7 (inclusive) or 1,4,9",
    )
    read.add_argument("--columns", metavar="A,B", help="columns to keep, in this order")
    read.add_argument("--out", required=True, metavar="FILE", help="output .arrow/.parquet/.csv")
    # The last of --verify and --no-verify wins, as with other --X/--no-X pairs.
    read.add_argument(
        "--no-verify",
        dest="verify",
        action="store_const",
        const="off",
        default=argparse.SUPPRESS,
        help="do not check chunk checksums (faster on local files; the structure is still checked)",
    )
    read.add_argument(
        "--verify",
        choices=("on", "off", "auto"),
        nargs="?",
        const="on",
        default="on",
        help="check every chunk's CRC32C while reading: on (the default; also plain "
        "--verify), off (as --no-verify) or auto (object stores only, as the library's "
        "readers)",
    )
    _add_version_option(read)

    vacuum_cmd = command(
        "vacuum",
        "expire old manifest versions; remove files no retained version lists and what "
        "failed writers left in a dataset",
    )
    vacuum_cmd.add_argument("path", metavar="PATH", help="a dataset directory or URL")
    vacuum_cmd.add_argument(
        "--older-than",
        default=DEFAULT_OLDER_THAN,
        metavar="AGE",
        help="leave objects modified more recently, e.g. 30s, 15m, 1h, 2d or 0 "
        f"(default {DEFAULT_OLDER_THAN})",
    )
    vacuum_cmd.add_argument(
        "--dry-run", action="store_true", help="only print what would be removed"
    )
    vacuum_cmd.add_argument("--json", action="store_true", help="print a JSON object")

    compact_cmd = command(
        "compact",
        "merge groups of small files of a dataset into larger ones (fewer reads per consumer)",
    )
    compact_cmd.add_argument("path", metavar="PATH", help="a dataset directory or URL")
    compact_cmd.add_argument(
        "--target-file-size",
        default=DEFAULT_TARGET_FILE_SIZE,
        metavar="SIZE",
        help="the most data bytes merged into one file, e.g. 256MiB (default %(default)s)",
    )
    compact_cmd.add_argument(
        "--memory",
        default=DEFAULT_COMPACT_MEMORY,
        metavar="SIZE",
        help="input bytes held at once while merging (default %(default)s)",
    )
    compact_cmd.add_argument(
        "--rebatch",
        choices=("auto", "always", "never"),
        default="auto",
        help="re-encode tiny batches as larger ones: auto when they average under 64 KiB "
        "(default %(default)s)",
    )
    compact_cmd.add_argument(
        "--batch-rows",
        type=int,
        default=DEFAULT_COMPACT_BATCH_ROWS,
        metavar="N",
        help="the most rows of one re-encoded batch (default %(default)s)",
    )
    compact_cmd.add_argument(
        "--dry-run", action="store_true", help="only print the groups; write nothing"
    )
    compact_cmd.add_argument("--json", action="store_true", help="print a JSON object")
    return parser
