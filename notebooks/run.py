"""Build the notebooks from their sources, execute them and save them with their outputs.

Each notebook's source is the jupytext percent-format script beside it (``01_quickstart.py``
for ``01_quickstart.ipynb``): edit the script, then run::

    python notebooks/run.py                  # build, execute and save every notebook
    python notebooks/run.py 02_layout_and_skew   # only some (names with or without suffix)
    python notebooks/run.py --check          # exit 1 if a notebook's cells differ from its source

A notebook is executed top to bottom in a fresh kernel of this interpreter, and saved with its
outputs and without what changes from run to run (timings, the kernel's version, what other
processes print to stderr), so that a rebuild differs only where an output does. The notebooks
draw their figures at 72 dpi, which keeps each saved notebook to a few hundred KiB at most. The
PNG files the notebooks save on their own go to a temporary directory
(``ARROWSHUFFLE_NOTEBOOK_OUTPUT``), not into the repository.

Needs the ``[notebooks]`` extra; notebook 01 also needs ``[spark]`` and Java 17.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
#: Seconds one cell may run (Spark's start is the slowest step on a busy machine).
CELL_TIMEOUT = 600
#: The metadata every saved notebook carries, whatever kernel executed it. The ``jupytext``
#: entry pairs the notebook with its script for Jupyter's jupytext extension.
METADATA = {
    "jupytext": {
        "formats": "ipynb,py:percent",
        "notebook_metadata_filter": "-all",
        "cell_metadata_filter": "-all",
    },
    "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
    "language_info": {"name": "python"},
}


def sources() -> list[Path]:
    """The notebook sources: ``NN_name.py`` beside this file, in order."""
    return sorted(HERE.glob("[0-9][0-9]_*.py"))


def notebook_path(source: Path) -> Path:
    """The notebook built from ``source``."""
    return source.with_suffix(".ipynb")


def build(source: Path) -> Any:
    """The notebook of ``source``, without outputs; cell ids follow the cell's position."""
    import jupytext
    import nbformat

    notebook = jupytext.read(source, fmt="py:percent")
    stem = source.stem.replace("_", "-")
    for i, cell in enumerate(notebook.cells):
        cell.metadata = {}
        cell.id = f"{stem}-{i:02d}"
    notebook.metadata = copy.deepcopy(METADATA)
    notebook.nbformat, notebook.nbformat_minor = 4, 5
    nbformat.validate(notebook)
    return notebook


def kernel_manager() -> Any:
    """A kernel manager that starts ``python -m ipykernel_launcher`` with this interpreter.

    The installed ``python3`` kernelspec may name a bare ``python`` that resolves to another
    interpreter on PATH; building the spec from ``sys.executable`` avoids that.
    """
    from ipykernel.kernelspec import get_kernel_dict
    from jupyter_client.kernelspec import KernelSpec, KernelSpecManager
    from jupyter_client.manager import KernelManager

    class ThisInterpreter(KernelSpecManager):
        def get_kernel_spec(self, kernel_name: str) -> KernelSpec:
            spec = KernelSpec(**get_kernel_dict())
            spec.argv = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
            return spec

    return KernelManager(kernel_name="python3", kernel_spec_manager=ThisInterpreter())


@contextlib.contextmanager
def _environment(values: dict[str, str]) -> Iterator[None]:
    """Set environment variables (which the kernel inherits) for the duration of a block."""
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def execute(notebook: Any, plots: Path, timeout: int = CELL_TIMEOUT) -> Any:
    """Run every cell of ``notebook`` in a fresh kernel; return it with its outputs.

    The kernel starts in this directory with ``ARROWSHUFFLE_NOTEBOOK_OUTPUT=plots``; Spark's
    Python workers run this interpreter too. A failing cell raises nbclient's
    ``CellExecutionError`` naming the cell and its error.
    """
    import nbclient

    manager = kernel_manager()
    client = nbclient.NotebookClient(
        notebook,
        km=manager,
        timeout=timeout,
        record_timing=False,
        resources={"metadata": {"path": str(HERE)}},
    )
    environment = {
        "ARROWSHUFFLE_NOTEBOOK_OUTPUT": str(plots),
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
    }
    try:
        with _environment(environment):
            client.execute()
    finally:
        if manager.has_kernel:
            manager.shutdown_kernel(now=True)
    return clean(notebook)


def clean(notebook: Any) -> Any:
    """Drop what changes from run to run: the kernel's metadata, cell metadata, and stderr.

    What a cell prints to stderr is the noise of other processes (a JVM's start-up warnings
    with their timestamps, say); a cell that fails raises instead of printing. Its stdout,
    values and pictures stay.
    """
    notebook.metadata = copy.deepcopy(METADATA)
    for cell in notebook.cells:
        cell.metadata = {}
        if cell.cell_type == "code":
            cell.outputs = [
                o for o in cell.outputs if not (o.output_type == "stream" and o.name == "stderr")
            ]
    return notebook


def stale(source: Path) -> str | None:
    """Why the saved notebook of ``source`` does not match it, or None when it does."""
    import nbformat

    path = notebook_path(source)
    if not path.exists():
        return f"{path.name} is missing"
    saved = nbformat.read(path, as_version=4)
    built = build(source)
    if [(c.cell_type, c.source) for c in saved.cells] != [
        (c.cell_type, c.source) for c in built.cells
    ]:
        return f"{path.name} differs from {source.name}"
    return None


def _select(names: list[str]) -> list[Path]:
    every = sources()
    if not names:
        return every
    chosen = []
    for name in names:
        stem = Path(name).name.removesuffix(".ipynb").removesuffix(".py")
        match = [s for s in every if s.stem == stem]
        if not match:
            known = ", ".join(s.stem for s in every)
            raise SystemExit(f"no notebook source {stem}.py (known: {known})")
        chosen += match
    return chosen


def main(argv: list[str] | None = None) -> int:
    """Build, execute and save the chosen notebooks, or only compare them with ``--check``."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("notebooks", nargs="*", help="notebook names (default: all)")
    parser.add_argument(
        "--check", action="store_true", help="only compare saved notebooks with their sources"
    )
    args = parser.parse_args(argv)
    chosen = _select(args.notebooks)
    if args.check:
        problems = [p for p in map(stale, chosen) if p]
        for problem in problems:
            print(f"{problem} (run python notebooks/run.py)")
        return 1 if problems else 0
    import nbformat

    with tempfile.TemporaryDirectory(prefix="arrowshuffle-notebook-plots-") as plots:
        for source in chosen:
            path = notebook_path(source)
            print(f"executing {source.name} ...", flush=True)
            notebook = execute(build(source), Path(plots) / source.stem)
            nbformat.write(notebook, path)
            print(f"wrote {path.name} ({path.stat().st_size / 1024:.0f} KiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
