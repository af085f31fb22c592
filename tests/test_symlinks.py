"""Symbolic links in a local dataset directory: a listed file that leads out of it is refused.

A manifest's names are plain relative names (rule M3), but on a local file system a plain name
can still lead out of the directory through a link: the file's own, or a subdirectory's. Every
reader of a dataset (open_dataset, validate_dataset, compaction) refuses such a file as it
refuses a ``..`` name, and vacuum never removes through one. A link that stays inside the
directory is followed.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
from pathlib import Path

import pytest
from dataset_factory import WrittenDataset, write_dataset
from manifest_edits import manifest_in_force, replace_manifest

import arrowshuffle as ash
from arrowshuffle.cli import main
from arrowshuffle.format.errors import FormatError
from arrowshuffle.format.naming import INDEX_SUFFIX
from arrowshuffle.readers.storage import resolve
from arrowshuffle.writers.dataset_writer import read_manifest


@pytest.fixture
def dataset(tmp_path: Path) -> WrittenDataset:
    return write_dataset(str(tmp_path / "ds"), num_files=3, num_subpartitions=4)


def names(written: WrittenDataset) -> list[str]:
    return [f.data for f in written.manifest.files]


def link_out(root: Path, name: str, outside: Path) -> Path:
    """Move ``root/name`` to ``outside`` and leave a link to it in its place."""
    outside.mkdir(exist_ok=True)
    target = outside / name
    shutil.move(root / name, target)
    (root / name).symlink_to(target)
    return target


def subdirectory_out(written: WrittenDataset, tmp_path: Path) -> Path:
    """The first pair moved into ``outside/sub``, listed as ``sub/<name>`` through a link."""
    root = Path(written.url)
    sub = tmp_path / "outside" / "sub"
    sub.mkdir(parents=True)
    first = written.manifest.files[0]
    for name in (first.data, first.index):
        shutil.move(root / name, sub / name)
    (root / "sub").symlink_to(sub, target_is_directory=True)
    moved = dataclasses.replace(first, data=f"sub/{first.data}", index=f"sub/{first.index}")
    manifest = dataclasses.replace(written.manifest, files=(moved, *written.manifest.files[1:]))
    replace_manifest(written.url, manifest)
    return sub


@pytest.fixture(params=["data file", "index", "subdirectory"])
def leading_out(request: pytest.FixtureRequest, dataset: WrittenDataset, tmp_path: Path) -> str:
    """A dataset whose first pair leads out through a link; returns what the link is."""
    root = Path(dataset.url)
    first = dataset.manifest.files[0]
    if request.param == "data file":
        link_out(root, first.data, tmp_path / "outside")
        return first.data
    if request.param == "index":
        link_out(root, first.index, tmp_path / "outside")
        return first.index
    subdirectory_out(dataset, tmp_path)
    return "sub"


def test_the_data_is_readable_before_the_links(dataset: WrittenDataset) -> None:
    assert ash.open_dataset(dataset.url).read().num_rows == 3 * 4 * 50


def test_open_dataset_refuses_a_link_out(dataset: WrittenDataset, leading_out: str) -> None:
    with pytest.raises(FormatError, match=r"outside the dataset directory") as raised:
        ash.open_dataset(dataset.url).read()
    assert raised.value.rule == "M3"
    message = str(raised.value)
    # The message names the link and where it points.
    assert f"{os.path.join(dataset.url, leading_out)} -> " in message
    assert "outside" in message


def test_a_planned_read_refuses_it_too(dataset: WrittenDataset, leading_out: str) -> None:
    opened = ash.open_dataset(dataset.url)
    with pytest.raises(FormatError) as raised:
        for task in opened.plan("1KiB"):
            opened.read(task=task)
    assert raised.value.rule == "M3"


def test_validate_dataset_reports_m3(dataset: WrittenDataset, leading_out: str) -> None:
    report = ash.validate_dataset(dataset.url, deep=True)
    assert not report.ok
    first = report.files[0]
    assert [v.rule for v in first.violations] == ["M3"]
    assert "symbolic link" in first.violations[0].message
    assert all(f.ok for f in report.files[1:])
    assert main(["validate", dataset.url]) == 1


def test_compaction_refuses_and_changes_nothing(
    dataset: WrittenDataset, leading_out: str, tmp_path: Path
) -> None:
    root = Path(dataset.url)
    in_force = manifest_in_force(root)
    manifest_before = in_force.read_bytes()
    outside_before = sorted(p.name for p in (tmp_path / "outside").rglob("*"))
    with pytest.raises(FormatError) as raised:
        ash.compact(dataset.url, target_file_size="1GiB")
    assert raised.value.rule == "M3"
    assert manifest_in_force(root) == in_force  # no version was committed
    assert in_force.read_bytes() == manifest_before
    assert sorted(p.name for p in (tmp_path / "outside").rglob("*")) == outside_before


def test_a_link_inside_the_directory_is_followed(dataset: WrittenDataset) -> None:
    root = Path(dataset.url)
    first = dataset.manifest.files[0]
    (root / "kept").mkdir()
    for name in (first.data, first.index):
        shutil.move(root / name, root / "kept" / name)
        (root / name).symlink_to(Path("kept") / name)  # relative: stays inside
    assert ash.open_dataset(dataset.url).read().num_rows == 3 * 4 * 50
    assert ash.validate_dataset(dataset.url, deep=True).ok
    assert main(["validate", dataset.url]) == 0


def test_a_dataset_directory_reached_through_a_link_is_read(
    dataset: WrittenDataset, tmp_path: Path
) -> None:
    """The directory itself may be a link: names are resolved against where it leads."""
    (tmp_path / "alias").symlink_to(dataset.url, target_is_directory=True)
    assert ash.open_dataset(str(tmp_path / "alias")).read().num_rows == 3 * 4 * 50
    assert ash.validate_dataset(str(tmp_path / "alias")).ok


def test_vacuum_never_removes_through_a_link_out(dataset: WrittenDataset, tmp_path: Path) -> None:
    root = Path(dataset.url)
    outside = tmp_path / "outside"
    outside.mkdir()
    # An unlisted pair name (a leftover, by its name) that is a link to a file elsewhere.
    stray = "part-99999-00000000000000000000000000000000-ffffffff.arrow"
    victim = outside / "precious.arrow"
    victim.write_bytes(b"not part of the dataset")
    (root / stray).symlink_to(victim)
    (root / (stray + INDEX_SUFFIX)).symlink_to(victim)
    # A subdirectory leading out, holding leftover-looking names: never looked into.
    (outside / "sub").mkdir()
    (outside / "sub" / stray).write_bytes(b"also elsewhere")
    (root / "sub").symlink_to(outside / "sub", target_is_directory=True)
    assert ash.vacuum(dataset.url, older_than=0, dry_run=True).removed == ()
    report = ash.vacuum(dataset.url, older_than=0)
    assert report.removed == ()
    assert sorted(name for name, _ in report.failed) == [stray, stray + INDEX_SUFFIX]
    assert all("[M3]" in reason and str(victim) in reason for _, reason in report.failed)
    assert victim.read_bytes() == b"not part of the dataset"
    assert (outside / "sub" / stray).exists()
    assert (root / stray).is_symlink()
    assert read_manifest(resolve(dataset.url)) == dataset.manifest
    assert ash.open_dataset(dataset.url).read().num_rows == 3 * 4 * 50


def test_vacuum_removes_a_leftover_link_that_stays_inside(dataset: WrittenDataset) -> None:
    root = Path(dataset.url)
    stray = "part-99999-00000000000000000000000000000000-ffffffff.arrow"
    (root / "elsewhere.bin").write_bytes(b"kept: not a leftover name")
    (root / stray).symlink_to("elsewhere.bin")
    report = ash.vacuum(dataset.url, older_than=0)
    assert report.removed == (stray,)
    assert not (root / stray).exists()
    assert (root / "elsewhere.bin").exists()
