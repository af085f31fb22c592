"""The ``arrowshuffle`` command: validate, inspect, plan, read, vacuum and compact shuffle data.

Every command takes shuffle files and, where it makes sense, datasets. The package is three
parts: :mod:`~arrowshuffle.cli.parser` (the options), :mod:`~arrowshuffle.cli.commands`
(each command computes a result, :mod:`~arrowshuffle.cli.results`) and
:mod:`~arrowshuffle.cli.output` (the one place that renders results, as text or ``--json``).

Exit status: 0 when everything is valid, 1 when data breaks a rule of the format, 2 for a
usage error or a storage problem. Errors are one line ``error: <message>`` on stderr, never
a traceback (set ``ARROWSHUFFLE_DEBUG=1`` to see one of an unexpected error).

A PATH of ``validate``, ``inspect``, ``plan`` or ``read`` may be a dataset (a directory or URL
holding ``_arrowshuffle_manifest.json`` or manifest versions in ``_arrowshuffle_versions/``).
``validate`` checks the structure of files and datasets (with ``--deep`` also every chunk's
checksum, its decoding and every row's subpartition) and says what it checked; for a dataset,
every manifest version it retains, each distinct file once (``--current-only``: the version in
force alone). ``inspect`` and ``plan`` first run the same structural checks and refuse invalid
data. ``inspect`` shows the version in force and the retained ones; ``inspect`` and ``read``
take ``--version N`` to read an earlier version while vacuum retains it. ``read`` checks every
chunk's checksum unless given ``--no-verify``. Work over several files shows a progress bar on
stderr when stderr is a terminal, and nothing when it is piped.

``plan`` prints the balanced read tasks of a file or dataset, planned from sizes alone (the
manifest's totals, and the index slices of the subpartitions it splits), with the skew before
(max/mean of subpartition bytes, one task per subpartition) and after (max/mean of task bytes).

``compact`` merges groups of consecutive files of a dataset (up to ``--target-file-size`` of
data each) into one file per group and replaces the manifest atomically; ``--dry-run`` prints the
groups only.

``vacuum`` expires manifest versions replaced longer ago than its grace period and removes the
files no retained version lists and what failed writers left in a dataset directory; it prints
removed files and expired versions apart, and the versions retained. Exit 0 when done, 1 when a
retained manifest version cannot be decoded, 2 when there is no manifest or an object could not
be removed.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Sequence

from arrowshuffle.cli.commands import COMMANDS, command_error
from arrowshuffle.cli.output import JsonOutput, TextOutput
from arrowshuffle.cli.parser import build_parser
from arrowshuffle.cli.results import EXIT_ERROR, EXIT_INVALID, EXIT_OK, CommandError
from arrowshuffle.format.errors import ArrowShuffleError

__all__ = ["EXIT_ERROR", "EXIT_INVALID", "EXIT_OK", "build_parser", "main"]


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``arrowshuffle`` command and return its exit status."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version or a usage error already printed
        return int(exc.code or 0) if isinstance(exc.code, int) else EXIT_ERROR
    json_wanted = bool(getattr(args, "json", False))
    output = (JsonOutput if json_wanted else TextOutput)(sys.stdout, sys.stderr)
    storage = dict(args.storage_option)
    try:
        return COMMANDS[args.command](args, storage, output)
    except BrokenPipeError:
        # The reader of our output went away (`| head`): stop quietly, as Unix tools do.
        with contextlib.suppress(OSError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_ERROR
    except KeyboardInterrupt:
        output.error(CommandError("interrupted"))
        return EXIT_ERROR
    except Exception as exc:
        expected = isinstance(exc, (ArrowShuffleError, OSError, CommandError))
        if not expected and os.environ.get("ARROWSHUFFLE_DEBUG") == "1":
            raise
        error = command_error(exc, getattr(args, "path", None))
        output.error(error)
        return error.status
