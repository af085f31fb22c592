"""The notebooks run top to bottom in a fresh kernel and save their plots as PNG files.

Each notebook runs in its own kernel process started from this interpreter (so the kernel
sees the same environment as the tests), with ``ARROWSHUFFLE_NOTEBOOK_OUTPUT`` pointing at a
temporary directory. A failing cell fails the test with the cell's error.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")
pytest.importorskip("matplotlib")

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
#: Seconds one cell may run (Spark's start is the slowest step on a busy machine).
CELL_TIMEOUT = 600

#: The plots each notebook promises to save.
EXPECTED_PLOTS = {
    "01_quickstart.ipynb": ["quickstart_rows_per_subpartition.png"],
    "02_layout_and_skew.ipynb": [
        "layout_even.png",
        "layout_skewed.png",
        "skew_subpartitions.png",
        "plan_tasks.png",
    ],
    "03_read_cost.ipynb": [
        "read_cost_consumers.png",
        "read_cost_regions.png",
        "read_cost_compression.png",
    ],
}


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


def run_notebook(name: str, output: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ARROWSHUFFLE_NOTEBOOK_OUTPUT", str(output))
    monkeypatch.setenv("PYSPARK_PYTHON", sys.executable)
    monkeypatch.setenv("PYSPARK_DRIVER_PYTHON", sys.executable)
    notebook = nbformat.read(NOTEBOOKS / name, as_version=4)
    manager = kernel_manager()
    client = nbclient.NotebookClient(
        notebook,
        km=manager,
        timeout=CELL_TIMEOUT,
        resources={"metadata": {"path": str(NOTEBOOKS)}},
    )
    try:
        client.execute()
    finally:
        if manager.has_kernel:
            manager.shutdown_kernel(now=True)


def assert_png(path: Path) -> None:
    assert path.exists(), f"the notebook did not save {path.name}"
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC, f"{path.name} is not a PNG file"
    from matplotlib import image

    pixels = image.imread(path)
    assert pixels.shape[0] > 50 and pixels.shape[1] > 50
    assert pixels.std() > 0, f"{path.name} is a blank picture"


@pytest.mark.parametrize(
    "name",
    [
        pytest.param("01_quickstart.ipynb", marks=pytest.mark.spark),
        "02_layout_and_skew.ipynb",
        pytest.param("03_read_cost.ipynb", marks=pytest.mark.s3),
    ],
)
def test_notebook_runs_and_saves_its_plots(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    output = tmp_path / "plots"
    run_notebook(name, output, monkeypatch)
    for plot in EXPECTED_PLOTS[name]:
        assert_png(output / plot)


def test_notebooks_are_built_from_their_generator() -> None:
    result = subprocess.run(
        [sys.executable, str(NOTEBOOKS / "build_notebooks.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_committed_notebooks_hold_no_outputs() -> None:
    for name in EXPECTED_PLOTS:
        notebook = nbformat.read(NOTEBOOKS / name, as_version=4)
        for cell in notebook.cells:
            if cell.cell_type == "code":
                assert cell.outputs == [] and cell.execution_count is None, name
