"""The committed notebooks match their sources, hold their outputs, and still run.

Each notebook's source is a jupytext percent-format script (``notebooks/NN_name.py``);
``python notebooks/run.py`` builds the ``.ipynb`` from it, executes it and saves it with its
outputs. These tests check that every committed notebook has the cells of its source (a source
edited without a rebuild fails), that it was saved executed, with its pictures, and that it runs
top to bottom in a fresh kernel of this interpreter, saving its plots as PNG files.
"""

from __future__ import annotations

import base64
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

nbformat = pytest.importorskip("nbformat")
pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")
pytest.importorskip("jupytext")
pytest.importorskip("matplotlib")

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
#: A committed notebook stays below this size (its pictures are small PNGs).
MAX_NOTEBOOK_BYTES = 300_000

#: The PNG files each notebook promises to save, and so at least the pictures it shows.
EXPECTED_PLOTS = {
    "01_quickstart": ["quickstart_rows_per_subpartition.png"],
    "02_layout_and_skew": [
        "layout_even.png",
        "layout_skewed.png",
        "skew_subpartitions.png",
        "plan_tasks.png",
    ],
    "03_read_cost": [
        "read_cost_consumers.png",
        "read_cost_regions.png",
        "read_cost_compression.png",
    ],
}


def load_runner() -> ModuleType:
    """``notebooks/run.py``, the command that builds and executes the notebooks."""
    spec = importlib.util.spec_from_file_location("notebooks_run", NOTEBOOKS / "run.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(spec.name, module)
    spec.loader.exec_module(module)
    return module


runner = load_runner()


def committed(name: str) -> nbformat.NotebookNode:
    return nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4)


def assert_png_file(path: Path) -> None:
    assert path.exists(), f"the notebook did not save {path.name}"
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC, f"{path.name} is not a PNG file"
    from matplotlib import image

    pixels = image.imread(path)
    assert pixels.shape[0] > 50 and pixels.shape[1] > 50
    assert pixels.std() > 0, f"{path.name} is a blank picture"


def test_every_source_has_its_notebook_and_no_notebook_lacks_a_source() -> None:
    sources = {p.stem for p in runner.sources()}
    assert sources == set(EXPECTED_PLOTS)
    assert {p.stem for p in NOTEBOOKS.glob("*.ipynb")} == sources


@pytest.mark.parametrize("name", sorted(EXPECTED_PLOTS))
def test_committed_notebook_has_the_cells_of_its_source(name: str) -> None:
    source = NOTEBOOKS / f"{name}.py"
    built = runner.build(source)
    saved = committed(name)
    assert [c.cell_type for c in saved.cells] == [c.cell_type for c in built.cells]
    for saved_cell, built_cell in zip(saved.cells, built.cells, strict=True):
        assert saved_cell.source == built_cell.source, (
            f"{name}.ipynb differs from {name}.py: run python notebooks/run.py {name}"
        )
        assert saved_cell.id == built_cell.id
    assert runner.stale(source) is None


@pytest.mark.parametrize("name", sorted(EXPECTED_PLOTS))
def test_committed_notebook_was_saved_executed_with_its_pictures(name: str) -> None:
    path = NOTEBOOKS / f"{name}.ipynb"
    assert path.stat().st_size < MAX_NOTEBOOK_BYTES
    notebook = committed(name)
    assert notebook.metadata == runner.METADATA  # nothing of the kernel that ran it
    code = [c for c in notebook.cells if c.cell_type == "code"]
    # Executed top to bottom, once, in one kernel.
    assert [c.execution_count for c in code] == list(range(1, len(code) + 1))
    pictures = []
    for cell in code:
        assert cell.metadata == {}  # no timings
        for output in cell.outputs:
            assert output.output_type != "error", cell.source
            assert not (output.output_type == "stream" and output.name == "stderr")
            if "image/png" in output.get("data", {}):
                pictures.append(base64.b64decode(output.data["image/png"]))
    assert len(pictures) >= len(EXPECTED_PLOTS[name])
    for picture in pictures:
        assert picture[:8] == PNG_MAGIC
        assert len(picture) < 100_000


@pytest.mark.parametrize(
    "name",
    [
        pytest.param("01_quickstart", marks=pytest.mark.spark),
        "02_layout_and_skew",
        "03_read_cost",
    ],
)
def test_committed_notebook_runs_and_saves_its_plots(name: str, tmp_path: Path) -> None:
    notebook = committed(name)
    for cell in notebook.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    plots = tmp_path / "plots"
    executed = runner.execute(notebook, plots)
    for plot in EXPECTED_PLOTS[name]:
        assert_png_file(plots / plot)
    shown = [
        o
        for c in executed.cells
        if c.cell_type == "code"
        for o in c.outputs
        if "image/png" in o.get("data", {})
    ]
    assert len(shown) >= len(EXPECTED_PLOTS[name])
