"""The layout heatmap's axes and colour scales, read from the matplotlib figure (not pixels)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

import arrowshuffle
from arrowshuffle.plot import MAX_TICKS, plot_layout, tick_positions
from arrowshuffle.readers.layout import file_layout

pytest.importorskip("matplotlib")


def layout_table(bytes_grid: list[list[int]], files: list[int] | None = None) -> pa.Table:
    """A layout table with one row per (region, subpartition) cell of ``bytes_grid``.

    ``files`` gives each grid row's file (a dataset layout, regions numbered within their
    file); each chunk's rows are its bytes // 16.
    """
    files = files or [0] * len(bytes_grid)
    columns: dict[str, list[Any]] = {"file": [], "region": [], "subpartition": [], "bytes": []}
    for r, row in enumerate(bytes_grid):
        for s, size in enumerate(row):
            columns["file"].append(files[r])
            columns["region"].append(r - files.index(files[r]))
            columns["subpartition"].append(s)
            columns["bytes"].append(size)
    count = len(columns["bytes"])
    return pa.table(
        {
            **{name: pa.array(values, pa.int64()) for name, values in columns.items()},
            "rows": pa.array([b // 16 for b in columns["bytes"]], pa.int64()),
            "broadcast": pa.array([False] * count),
        }
    )


def panels(figure: Any) -> list[Any]:
    """The bytes and rows heatmaps (the colour bars are axes too)."""
    found = [a for a in figure.axes if a.images and a.get_label() != "<colorbar>"]
    assert [a.get_title() for a in found] == ["bytes per chunk", "rows per chunk"]
    return found


def assert_whole_numbers(ticks: Any) -> None:
    ticks = np.asarray(ticks, dtype=float)
    assert ticks.size > 0
    assert (ticks == np.round(ticks)).all(), ticks


def test_one_region_file_has_one_whole_number_tick_per_axis_cell(tmp_path: Path) -> None:
    path = tmp_path / "one.arrow"
    table = pa.table({"k": list(range(40)), "v": [1.5] * 40})
    ids = pa.array([i % 3 for i in range(40)], pa.int32())
    with arrowshuffle.ShuffleFileWriter(path, table.schema, num_subpartitions=3) as writer:
        writer.write(table, subpartitions=ids)
    with arrowshuffle.open_file(path) as shuffle_file:
        layout = file_layout(shuffle_file)
    assert set(layout.column("region").to_pylist()) == {0}
    assert "file" not in layout.column_names
    figure = plot_layout(layout, tmp_path / "one.png")
    for axes in panels(figure):
        assert list(axes.get_yticks()) == [0]  # not -0.4 ... 0.4
        assert [t.get_text() for t in axes.get_yticklabels()] == ["0"]
        assert list(axes.get_xticks()) == [0, 1, 2]
        assert axes.get_ylabel() == "region"
    assert (tmp_path / "one.png").read_bytes()[:4] == b"\x89PNG"


def test_colour_scale_starts_at_zero_and_says_so() -> None:
    figure = plot_layout(layout_table([[432, 448]]))  # rows: 27 and 28
    for axes, (low, high) in zip(panels(figure), [(432, 448), (27, 28)], strict=True):
        image = axes.images[0]
        assert image.get_clim() == (0, high)
        # Near sizes get near colours, not the two ends of the scale.
        assert image.norm(high) == pytest.approx(1.0)
        assert image.norm(low) > 0.9
        colorbar = image.colorbar
        assert "from 0" in colorbar.ax.get_ylabel()
        assert_whole_numbers(colorbar.get_ticks())


def test_an_all_empty_layout_still_has_a_scale_from_zero() -> None:
    figure = plot_layout(layout_table([[0, 0, 0]]))
    for axes in panels(figure):
        low, high = axes.images[0].get_clim()
        assert low == 0 and high > 0


def test_many_subpartitions_are_numbered_every_few() -> None:
    figure = plot_layout(layout_table([[100 + s for s in range(100)]] * 3))
    for axes in panels(figure):
        ticks = list(axes.get_xticks())
        assert ticks == list(range(0, 100, 5))
        assert len(ticks) <= MAX_TICKS
        assert list(axes.get_yticks()) == [0, 1, 2]


def test_many_regions_are_numbered_every_few() -> None:
    figure = plot_layout(layout_table([[64, 64]] * 30))
    for axes in panels(figure):
        assert list(axes.get_yticks()) == list(range(0, 30, 2))
        assert [t.get_text() for t in axes.get_yticklabels()][:3] == ["0", "2", "4"]
        assert list(axes.get_xticks()) == [0, 1]


def test_dataset_ticks_name_files_and_thin_out() -> None:
    # 60 files of 2 regions each: a tick at the first region of every 5th file.
    files = [f for f in range(60) for _ in range(2)]
    figure = plot_layout(layout_table([[10, 20, 30]] * 120, files=files))
    for axes in panels(figure):
        assert axes.get_ylabel() == "file / region"
        assert list(axes.get_yticks()) == list(range(0, 120, 10))
        labels = [t.get_text() for t in axes.get_yticklabels()]
        assert labels[:3] == ["file 0", "file 5", "file 10"]
        assert list(axes.get_xticks()) == [0, 1, 2]


def test_small_dataset_names_every_file() -> None:
    files = [0, 0, 1, 2, 2, 2]
    figure = plot_layout(layout_table([[5, 6]] * 6, files=files))
    for axes in panels(figure):
        assert list(axes.get_yticks()) == [0, 2, 3]
        assert [t.get_text() for t in axes.get_yticklabels()] == ["file 0", "file 1", "file 2"]


@pytest.mark.parametrize(
    ("count", "expected"),
    [
        (0, []),
        (1, [0]),
        (24, list(range(24))),
        (25, list(range(0, 25, 2))),
        (48, list(range(0, 48, 2))),
        (49, list(range(0, 49, 5))),
        (1000, list(range(0, 1000, 50))),
    ],
)
def test_tick_positions(count: int, expected: list[int]) -> None:
    ticks = tick_positions(count)
    assert ticks.tolist() == expected
    assert ticks.size <= MAX_TICKS
