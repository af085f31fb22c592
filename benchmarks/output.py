"""What every benchmark script shares besides timing: the object-store switch and the JSON file."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any


def add_skip_s3(parser: argparse.ArgumentParser, help: str = "skip the object-store part") -> None:
    """``--skip-s3`` (and its former spelling ``--no-s3``, so that older commands still run)."""
    parser.add_argument("--skip-s3", action="store_true", help=help)
    parser.add_argument(
        "--no-s3",
        dest="skip_s3",
        action="store_true",
        default=argparse.SUPPRESS,
        help=argparse.SUPPRESS,
    )


def write_results(
    path: str | os.PathLike[str], document: dict[str, Any], *, sort_keys: bool = False
) -> Path:
    """Write a script's results as JSON (its directory created) and say where."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(document, indent=1, sort_keys=sort_keys) + "\n")
    print(f"\nwrote {out}")
    return out
