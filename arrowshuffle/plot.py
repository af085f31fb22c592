"""Heatmaps of a layout: bytes and rows per (region, subpartition) chunk.

Built on the layout tables of :func:`arrowshuffle.readers.layout.file_layout` and
:func:`arrowshuffle.readers.layout.dataset_layout`; a dataset's regions are stacked
file by file. matplotlib is an optional dependency (``pip install 'arrowshuffle[notebooks]'``)
and is imported only when a figure is drawn. Figures are drawn on matplotlib's Agg canvas,
without pyplot, so no global backend is changed.

Both axes are numbered by whole subpartitions and regions (thinned to a readable count), and
each colour scale starts at 0, so chunks of 432 and 448 bytes get nearly the same colour.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from arrowshuffle.format.errors import MissingExtraError, import_optional

#: The error raised when matplotlib is missing, by its earlier name.
PlottingUnavailableError = MissingExtraError

#: At most this many numbered ticks on an axis; longer axes are numbered every 2, 5, 10, ...
MAX_TICKS = 24


@dataclass(frozen=True)
class LayoutGrid:
    """A layout as matrices: a row per region (of every file, in order), a column per subpartition.

    Attributes:
        bytes: chunk bytes, shape ``(regions, subpartitions)``.
        rows: chunk rows, same shape.
        files: the file of each matrix row (all 0 for a single file).
        regions: each matrix row's region number within its file.
        broadcast: True for the rows of broadcast regions.
    """

    bytes: np.ndarray
    rows: np.ndarray
    files: np.ndarray
    regions: np.ndarray
    broadcast: np.ndarray

    @property
    def num_files(self) -> int:
        """How many files the grid spans."""
        return int(self.files.max()) + 1 if self.files.size else 0


def layout_grid(layout: pa.Table) -> LayoutGrid:
    """Turn a layout table (with or without a ``file`` column) into matrices."""
    count = layout.num_rows
    files = (
        layout.column("file").to_numpy()
        if "file" in layout.column_names
        else np.zeros(count, dtype=np.int64)
    )
    regions = layout.column("region").to_numpy()
    sub = layout.column("subpartition").to_numpy()
    width = int(sub.max()) + 1 if count else 0
    # Matrix row of each (file, region) pair, in file then region order.
    span = int(regions.max()) + 1 if count else 1
    pair = files.astype(np.int64) * span + regions
    keys, row = np.unique(pair, return_inverse=True)
    nbytes = np.zeros((keys.size, width), dtype=np.int64)
    nrows = np.zeros((keys.size, width), dtype=np.int64)
    nbytes[row, sub] = layout.column("bytes").to_numpy()
    nrows[row, sub] = layout.column("rows").to_numpy()
    broadcast = np.zeros(keys.size, dtype=bool)
    broadcast[row] = layout.column("broadcast").to_numpy(zero_copy_only=False)
    return LayoutGrid(
        bytes=nbytes,
        rows=nrows,
        files=keys // span,
        regions=keys % span,
        broadcast=broadcast,
    )


def _matplotlib() -> Any:
    figure = import_optional("matplotlib.figure", "notebooks", "plotting")
    agg = import_optional("matplotlib.backends.backend_agg", "notebooks", "plotting")
    ticker = import_optional("matplotlib.ticker", "notebooks", "plotting")
    return figure.Figure, agg.FigureCanvasAgg, ticker.MaxNLocator


def plot_layout(
    layout: pa.Table,
    path: str | os.PathLike[str] | None = None,
    *,
    title: str | None = None,
) -> Any:
    """Draw the region x subpartition heatmaps of bytes and rows side by side.

    Args:
        layout: a table from ``file_layout`` or ``dataset_layout``.
        path: when given, the figure is saved there (PNG, or any format matplotlib knows by
            the file's extension).
        title: a title above both panels.

    Returns:
        The ``matplotlib.figure.Figure`` (notebooks display it).

    Raises:
        MissingExtraError: matplotlib is not installed.
    """
    figure_class, canvas_class, whole_numbers = _matplotlib()
    grid = layout_grid(layout)
    height = float(np.clip(1.5 + 0.18 * grid.bytes.shape[0], 3.0, 12.0))
    figure = figure_class(figsize=(12.0, height), layout="constrained")
    canvas_class(figure)
    panels = figure.subplots(1, 2)
    for axes, values, what in (
        (panels[0], grid.bytes, "bytes"),
        (panels[1], grid.rows, "rows"),
    ):
        if values.size == 0:
            axes.text(0.5, 0.5, "no chunks", ha="center", va="center")
            axes.set_axis_off()
            continue
        # From 0, not from the smallest chunk: the colour is proportional to the size.
        top = max(int(values.max()), 1)
        image = axes.imshow(
            values, aspect="auto", interpolation="nearest", cmap="viridis", vmin=0, vmax=top
        )
        # Bytes and rows are counts: whole-number ticks on the colour bar too.
        figure.colorbar(
            image, ax=axes, label=f"{what} (scale from 0)", ticks=whole_numbers(integer=True)
        )
        axes.set_xlabel("subpartition")
        axes.set_xticks(tick_positions(values.shape[1]))
        axes.set_title(f"{what} per chunk")
        _label_regions(axes, grid)
    if title:
        figure.suptitle(title)
    if path is not None:
        figure.savefig(os.fspath(path), dpi=100)
    return figure


def tick_positions(count: int, most: int = MAX_TICKS) -> np.ndarray:
    """Whole-number ticks for ``count`` cells: every one, or every 2, 5, 10, 20, ... of them.

    The step is the smallest of 1, 2, 5, 10, 20, 50, ... that leaves at most ``most`` ticks
    (at least one); ticks start at 0.
    """
    if count <= 0:
        return np.zeros(0, dtype=np.int64)
    step = next(s for s in _steps() if -(-count // s) <= max(most, 1))
    return np.arange(0, count, step, dtype=np.int64)


def _steps() -> Iterator[int]:
    """1, 2, 5, 10, 20, 50, 100, ..."""
    scale = 1
    while True:
        yield from (scale, 2 * scale, 5 * scale)
        scale *= 10


def _label_regions(axes: Any, grid: LayoutGrid) -> None:
    """Number the y axis by region, or by file with lines between files for a dataset."""
    if grid.num_files <= 1:
        axes.set_ylabel("region")
        rows = tick_positions(grid.regions.size)
        axes.set_yticks(rows, [str(int(grid.regions[r])) for r in rows])
        return
    axes.set_ylabel("file / region")
    starts = np.flatnonzero(np.r_[True, grid.files[1:] != grid.files[:-1]])
    for start in starts[1:]:
        axes.axhline(start - 0.5, color="white", linewidth=0.8)
    # A tick at the first region of every file, or of every 2nd, 5th, 10th, ... file.
    shown = starts[tick_positions(starts.size)]
    axes.set_yticks(shown, [f"file {int(grid.files[s])}" for s in shown])
