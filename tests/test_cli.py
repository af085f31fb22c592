"""The ``arrowshuffle`` command: exit codes, one-line errors, JSON output and ``read --out``."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.parquet as pq
import pytest
from manifest_edits import replace_manifest

import arrowshuffle
from arrowshuffle.cli import commands as cli_commands
from arrowshuffle.cli import main

VECTORS = Path(__file__).parent / "vectors" / "v1"
EXPECTED: dict[str, Any] = json.loads((VECTORS / "expected.json").read_text())["vectors"]
GOOD = str(VECTORS / "good_basic.arrow")
BROADCAST = str(VECTORS / "good_broadcast.arrow")
OVERLAP = str(VECTORS / "overlapping_chunks.arrow")
CORRUPT = str(VECTORS / "corrupt_chunk_byte.arrow")
#: What plain ``validate`` says it checked (and did not).
PLAIN = "(structure OK, checksums not verified: use --deep)"


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "arrowshuffle.cli", *args],
        capture_output=True,
        text=True,
        check=False,
        env=env,
    )


def entry_point() -> str:
    script = Path(sys.executable).parent / "arrowshuffle"
    if not script.exists():
        pytest.skip("the arrowshuffle console script is not installed in this environment")
    return str(script)


def no_traceback(result: subprocess.CompletedProcess[str]) -> None:
    assert "Traceback" not in result.stderr
    assert "Traceback" not in result.stdout


# ---------------------------------------------------------------------- validate


def test_validate_valid_files_exit_0() -> None:
    result = run("validate", GOOD, BROADCAST)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [f"OK {GOOD} {PLAIN}", f"OK {BROADCAST} {PLAIN}"]


def test_validate_entry_point_script() -> None:
    result = subprocess.run(
        [entry_point(), "validate", "--deep", GOOD, OVERLAP],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 1
    assert result.stdout.splitlines()[0].startswith(f"OK {GOOD} (structure, checksums and ")
    assert result.stdout.splitlines()[1].startswith(f"INVALID {OVERLAP}: [V9] ")


def test_validate_deep_only_damage_needs_deep() -> None:
    assert run("validate", CORRUPT).returncode == 0
    deep = run("validate", "--deep", CORRUPT)
    assert deep.returncode == 1
    assert deep.stdout.startswith(f"INVALID {CORRUPT}: [V16] ")


def test_validate_json_has_reports_with_numbers() -> None:
    result = run("validate", "--json", GOOD, OVERLAP)
    assert result.returncode == 1
    good, bad = json.loads(result.stdout)
    assert good["ok"] is True and good["violations"] == [] and good["error"] is None
    assert good["summary"]["rows"] == EXPECTED["good_basic"]["total_rows"]
    assert good["summary"]["regions"] == EXPECTED["good_basic"]["num_regions"]
    assert good["summary"]["subpartitions"] == EXPECTED["good_basic"]["num_subpartitions"]
    assert good["summary"]["bytes"] == Path(GOOD).stat().st_size
    assert bad["ok"] is False and bad["violations"][0]["rule"] == "V9"


def test_validate_missing_file_exit_2(tmp_path: Path) -> None:
    missing = str(tmp_path / "nothing.arrow")
    result = run("validate", GOOD, missing)
    assert result.returncode == 2
    assert result.stdout.splitlines() == [f"OK {GOOD} {PLAIN}"]
    assert result.stderr == f"error: {missing}: not found\n"
    assert len(result.stderr.strip().splitlines()) == 1
    no_traceback(result)


def test_validate_json_reports_io_errors(tmp_path: Path) -> None:
    missing = str(tmp_path / "nothing.arrow")
    result = run("validate", "--json", missing)
    assert result.returncode == 2
    (report,) = json.loads(result.stdout)
    # The shape of every failed path's entry, as the README gives it.
    assert set(report) == {"path", "ok", "error", "violations"}
    assert report["ok"] is False and report["error"] == f"{missing}: not found"
    assert report["path"] == missing and report["violations"] == []


def test_validate_index_path_gets_a_hint() -> None:
    result = run("validate", GOOD + ".idx")
    assert result.returncode == 2
    assert result.stderr.startswith(f"error: {GOOD}.idx: an index sidecar, not a data file: ")
    assert result.stderr.endswith(f"give the data file, {GOOD}\n")
    no_traceback(result)


def test_validate_missing_index_exit_2(tmp_path: Path) -> None:
    data = tmp_path / "lonely.arrow"
    shutil.copyfile(GOOD, data)
    result = run("validate", str(data))
    assert result.returncode == 2
    assert ".idx" in result.stderr
    no_traceback(result)


@pytest.mark.parametrize(
    "args",
    [
        ["validate"],
        ["validate", "--nope", GOOD],
        ["frobnicate", GOOD],
        ["inspect"],
        ["read", GOOD, "--out", "x.arrow"],
        ["validate", "--storage-option", "novalue", GOOD],
        [],
    ],
    ids=["no-path", "bad-flag", "bad-command", "inspect-no-path", "read-no-ids", "bad-kv", "none"],
)
def test_usage_errors_exit_2_without_traceback(args: list[str]) -> None:
    result = run(*args)
    assert result.returncode == 2
    assert "usage:" in result.stderr
    no_traceback(result)


def test_version() -> None:
    result = run("--version")
    assert result.returncode == 0
    assert result.stdout.strip() == f"arrowshuffle {arrowshuffle.__version__}"


# ---------------------------------------------------------------------- inspect


def test_inspect_json_numbers_match_the_vector() -> None:
    result = run("inspect", "--json", BROADCAST)
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    vector = EXPECTED["good_broadcast"]
    assert summary["regions"] == vector["num_regions"]
    assert summary["broadcast_regions"] == sum(vector["broadcast_regions"])
    assert summary["subpartitions"] == vector["num_subpartitions"]
    assert summary["rows"] == vector["total_rows"]
    assert summary["compression"] == "none"
    assert summary["partitioner"] == {"name": "explicit"}
    per_sub = np.array(vector["rows"]).sum(axis=0)  # broadcast rows reach every subpartition
    assert [t["rows"] for t in summary["per_subpartition"]] == per_sub.tolist()
    assert summary["skew"] == pytest.approx(per_sub.max() / per_sub.mean())
    assert [r["rows"] for r in summary["region_table"]] == [
        row[0] if b else sum(row)
        for row, b in zip(vector["rows"], vector["broadcast_regions"], strict=True)
    ]
    assert summary["data_bytes"] == Path(BROADCAST).stat().st_size


def test_inspect_text_table() -> None:
    result = run("inspect", GOOD)
    assert result.returncode == 0, result.stderr
    vector = EXPECTED["good_basic"]
    assert f"rows           {vector['total_rows']}" in result.stdout
    table = result.stdout.split("subpartition", 2)[-1].splitlines()[1:]
    rows = [int(line.split()[1]) for line in table if line.strip()]
    assert rows == np.array(vector["rows"]).sum(axis=0).tolist()


def test_inspect_zero_rows_has_no_skew() -> None:
    result = run("inspect", "--json", str(VECTORS / "good_zero_rows.arrow"))
    assert result.returncode == 0
    summary = json.loads(result.stdout)
    assert summary["skew"] is None and summary["rows"] == 0


def test_inspect_invalid_index_exit_1() -> None:
    path = str(VECTORS / "bad_index_magic.arrow")
    result = run("inspect", path)
    assert result.returncode == 1
    assert result.stderr.startswith(f"error: {path} is invalid: [V1] ")
    no_traceback(result)


# ---------------------------------------------------------------------- read


def read_output(path: Path, schema: pa.Schema) -> pa.Table:
    if path.suffix == ".arrow":
        return pa.ipc.open_file(path).read_all()
    if path.suffix == ".parquet":
        return pq.read_table(path)
    return pcsv.read_csv(
        path,
        convert_options=pcsv.ConvertOptions(
            column_types=schema, strings_can_be_null=True, quoted_strings_can_be_null=False
        ),
    )


@pytest.mark.parametrize(
    ("extension", "ids", "selection"),
    [(".arrow", "2", [2]), (".parquet", "1-3", range(1, 4)), (".csv", "0,3", [0, 3])],
)
def test_read_writes_what_the_library_reads(
    tmp_path: Path, extension: str, ids: str, selection: Any
) -> None:
    out = tmp_path / f"out{extension}"
    result = run("read", BROADCAST, "--subpartitions", ids, "--out", str(out))
    assert result.returncode == 0, result.stderr
    expected = arrowshuffle.open_file(BROADCAST).read(selection)
    assert read_output(out, expected.schema).equals(expected)
    assert f"wrote {expected.num_rows} rows" in result.stdout


def test_read_columns(tmp_path: Path) -> None:
    out = tmp_path / "cols.parquet"
    result = run("read", GOOD, "--subpartitions", "0-3", "--columns", "s,a", "--out", str(out))
    assert result.returncode == 0, result.stderr
    expected = arrowshuffle.open_file(GOOD).read(range(4), columns=["s", "a"])
    got = pq.read_table(out)
    assert got.column_names == ["s", "a"]
    assert got.equals(expected)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--subpartitions", "x"], "--subpartitions"),
        (["--subpartitions", "3-1"], "--subpartitions"),
        (["--subpartitions", "9"], "does not exist"),
        (["--subpartitions", "0-4000000000"], "does not exist"),
        (["--subpartitions", "1", "--columns", "nope"], "nope"),
    ],
)
def test_read_bad_arguments_exit_2(tmp_path: Path, args: list[str], message: str) -> None:
    out = tmp_path / "o.arrow"
    result = run("read", GOOD, *args, "--out", str(out))
    assert result.returncode == 2
    assert message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    no_traceback(result)
    assert list(tmp_path.iterdir()) == []


def test_read_unknown_extension_exit_2(tmp_path: Path) -> None:
    out = tmp_path / "o.json"
    result = run("read", GOOD, "--subpartitions", "1", "--out", str(out))
    assert result.returncode == 2
    assert ".arrow, .parquet or .csv" in result.stderr
    no_traceback(result)
    assert list(tmp_path.iterdir()) == []


def test_failed_read_leaves_no_partial_output(tmp_path: Path) -> None:
    out = tmp_path / "o.arrow"
    out_dir_before = set(tmp_path.iterdir())
    result = run("read", CORRUPT, "--subpartitions", "0-3", "--verify", "--out", str(out))
    assert result.returncode == 1
    assert "[V16]" in result.stderr
    no_traceback(result)
    assert set(tmp_path.iterdir()) == out_dir_before


def test_failed_read_keeps_an_existing_output(tmp_path: Path) -> None:
    out = tmp_path / "o.csv"
    out.write_text("previous\n")
    result = run("read", CORRUPT, "--subpartitions", "0-3", "--verify", "--out", str(out))
    assert result.returncode == 1
    assert out.read_text() == "previous\n"
    assert list(tmp_path.iterdir()) == [out]


def test_read_csv_of_nested_type_is_a_usage_error(tmp_path: Path) -> None:
    path = tmp_path / "nested.arrow"
    schema = pa.schema([("xs", pa.list_(pa.int64()))])
    with arrowshuffle.ShuffleFileWriter(path, schema, 2) as writer:
        writer.write(pa.table({"xs": [[1, 2], [3]]}, schema=schema), subpartitions=[0, 1])
    out = tmp_path / "nested.csv"
    result = run("read", str(path), "--subpartitions", "0-1", "--out", str(out))
    assert result.returncode == 2
    assert "csv" in result.stderr
    no_traceback(result)
    assert not out.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["nested.arrow", "nested.arrow.idx"]


def test_output_that_cannot_be_written_is_one_line(tmp_path: Path) -> None:
    out = tmp_path / "dir.csv"
    out.mkdir()  # a directory where the output file should go
    result = run("read", GOOD, "--subpartitions", "1", "--out", str(out))
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1
    no_traceback(result)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dir.csv"]


def test_unexpected_errors_are_one_line_unless_debugging(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def broken(*args: object) -> None:
        raise RuntimeError("something nobody expected")

    monkeypatch.setattr(cli_commands, "file_summary", broken)
    monkeypatch.delenv("ARROWSHUFFLE_DEBUG", raising=False)
    assert main(["inspect", GOOD]) == 2
    err = capsys.readouterr().err
    assert err == (
        "error: internal error: RuntimeError: something nobody expected (set "
        "ARROWSHUFFLE_DEBUG=1 to see where)\n"
    )
    monkeypatch.setenv("ARROWSHUFFLE_DEBUG", "1")
    with pytest.raises(RuntimeError):
        main(["inspect", GOOD])


# ---------------------------------------------------------------------- helpers and URLs


@pytest.mark.s3
def test_storage_options_reach_the_object_store(
    tmp_path: Path, s3_endpoint: Any, s3_bucket: str
) -> None:
    import fsspec

    options = s3_endpoint.storage_options()
    fs = fsspec.filesystem("s3", **options)
    for name in ("good_basic.arrow", "overlapping_chunks.arrow"):
        fs.put_file(str(VECTORS / name), f"{s3_bucket}/{name}")
        fs.put_file(str(VECTORS / name) + ".idx", f"{s3_bucket}/{name}.idx")
    flags = [
        "--storage-option",
        f"endpoint_url={options['endpoint_url']}",
        "--storage-option",
        "key=testing",
        "--storage-option",
        "secret=testing",
        "--storage-option",
        'client_kwargs={"region_name": "eu-west-1"}',
    ]
    good, bad = f"{s3_bucket}/good_basic.arrow", f"{s3_bucket}/overlapping_chunks.arrow"
    result = run("validate", "--deep", good, bad, *flags)
    assert result.returncode == 1, result.stderr
    assert result.stdout.splitlines()[0].startswith(f"OK {good} (structure, checksums ")
    assert result.stdout.splitlines()[1].startswith(f"INVALID {bad}: [V9]")
    out = tmp_path / "remote.arrow"
    result = run("read", good, "--subpartitions", "1-2", "--out", str(out), *flags)
    assert result.returncode == 0, result.stderr
    expected = arrowshuffle.open_file(GOOD).read(range(1, 3))
    assert pa.ipc.open_file(out).read_all().equals(expected)
    missing = run("inspect", f"{s3_bucket}/nothing.arrow", *flags)
    assert missing.returncode == 2
    no_traceback(missing)


# ---------------------------------------------------------------------- inspect --plot

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def assert_png(path: Path) -> tuple[int, int]:
    """The file is a PNG image with a non-empty picture; returns (height, width)."""
    from matplotlib import image

    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC
    pixels = image.imread(path)
    assert pixels.shape[0] > 0 and pixels.shape[1] > 0
    assert pixels.std() > 0  # not a blank canvas
    return pixels.shape[0], pixels.shape[1]


def test_inspect_plot_writes_a_png(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    out = tmp_path / "heatmap.png"
    result = run("inspect", BROADCAST, "--plot", str(out))
    assert result.returncode == 0, result.stderr
    assert_png(out)
    assert f"file           {BROADCAST}" in result.stdout  # the summary is still printed


def test_inspect_plot_with_json_keeps_stdout_json(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    out = tmp_path / "heatmap.png"
    result = run("inspect", "--json", GOOD, "--plot", str(out))
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["rows"] == EXPECTED["good_basic"]["total_rows"]
    assert_png(out)


def test_heatmap_grid_is_the_vector_layout() -> None:
    from arrowshuffle.plot import layout_grid
    from arrowshuffle.readers.layout import file_layout

    for name in ("good_basic", "good_broadcast"):
        with arrowshuffle.open_file(str(VECTORS / f"{name}.arrow")) as shuffle_file:
            grid = layout_grid(file_layout(shuffle_file))
        vector = EXPECTED[name]
        assert grid.rows.tolist() == vector["rows"]
        assert grid.rows.shape == (vector["num_regions"], vector["num_subpartitions"])
        assert grid.regions.tolist() == list(range(vector["num_regions"]))
        assert (grid.bytes[grid.rows > 0] > 0).all()


def test_inspect_plot_unknown_extension_is_a_usage_error(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    out = tmp_path / "heatmap.nope"
    result = run("inspect", GOOD, "--plot", str(out))
    assert result.returncode == 2
    assert "--plot" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    no_traceback(result)


def test_inspect_plot_without_matplotlib_gives_the_install_hint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for module in ("matplotlib", "matplotlib.figure", "matplotlib.backends.backend_agg"):
        monkeypatch.setitem(sys.modules, module, None)  # makes the import fail
    out = tmp_path / "heatmap.png"
    assert main(["inspect", GOOD, "--plot", str(out)]) == 2
    assert "pip install 'arrowshuffle[notebooks]'" in capsys.readouterr().err
    assert not out.exists()


# ---------------------------------------------------------------------- progress bar


def run_with_terminal_stderr(*args: str) -> tuple[int, str, str]:
    """Run the CLI with stderr on a pseudo-terminal; returns (status, stdout, terminal text)."""
    import os
    import pty

    master, slave = pty.openpty()
    try:
        process = subprocess.Popen(
            [sys.executable, "-m", "arrowshuffle.cli", *args],
            stdout=subprocess.PIPE,
            stderr=slave,
        )
        os.close(slave)
        slave = -1
        chunks = []
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # the child closed the terminal
                break
            if not chunk:
                break
            chunks.append(chunk)
        stdout, _ = process.communicate()
    finally:
        os.close(master)
        if slave >= 0:
            os.close(slave)
    return process.returncode, stdout.decode(), b"".join(chunks).decode(errors="replace")


def test_progress_bar_absent_when_piped() -> None:
    paths = [GOOD, BROADCAST, str(VECTORS / "good_zero_rows.arrow")]
    result = run("validate", *paths)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    assert result.stdout.splitlines() == [f"OK {p} {PLAIN}" for p in paths]


def test_progress_bar_drawn_on_a_terminal() -> None:
    paths = [GOOD, BROADCAST, str(VECTORS / "good_zero_rows.arrow")]
    status, stdout, terminal = run_with_terminal_stderr("validate", *paths)
    assert status == 0
    assert stdout.splitlines() == [f"OK {p} {PLAIN}" for p in paths]  # stdout stays clean
    assert "validate [" in terminal and f"/{len(paths)}" in terminal
    assert terminal.endswith("\r\x1b[2K")  # erased when done


def test_progress_bar_class_is_silent_off_a_terminal() -> None:
    import io

    from arrowshuffle._progress import ProgressBar

    stream = io.StringIO()
    with ProgressBar(10, "work", stream) as bar:
        for i in range(11):
            bar.update(i, f"item {i}")
    assert stream.getvalue() == ""


# ---------------------------------------------------------------------- datasets


@pytest.fixture
def dataset_dir(tmp_path: Path) -> Any:
    from dataset_factory import write_dataset

    return write_dataset(
        str(tmp_path / "ds"),
        num_files=3,
        num_subpartitions=6,
        batches_per_file=5,
        rows_per_batch=40,
        memory=2048,
        broadcast_batches=[2],
        seed=3,
    )


def expected_per_subpartition(data_urls: list[str], n: int) -> np.ndarray:
    """Rows a reader of each subpartition receives, from the data files read by plain pyarrow."""
    from dataset_factory import read_whole_file

    rows = np.zeros(n, dtype=np.int64)
    for url in data_urls:
        sp = read_whole_file(url).column("sp").to_numpy()
        rows += np.bincount(sp[sp >= 0], minlength=n)
        rows += int((sp == -1).sum())  # broadcast rows reach every subpartition
    return rows


def test_validate_dataset_ok_exit_0(dataset_dir: Any) -> None:
    result = run("validate", "--deep", dataset_dir.url, GOOD)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == (
        f"OK {dataset_dir.url} (dataset: 3 files, {3 * 5 * 40} rows, version 1 in force; "
        "structure, checksums and decoding OK, row placement not checked: partitioner "
        "'explicit' does not determine a row's subpartition; checked version 1)"
    )
    assert lines[1].startswith(f"OK {GOOD} (structure, checksums and decoding OK, ")


def test_validate_dataset_json(dataset_dir: Any) -> None:
    result = run("validate", "--json", dataset_dir.url)
    assert result.returncode == 0, result.stderr
    (report,) = json.loads(result.stdout)
    assert report["kind"] == "dataset" and report["ok"] is True and report["error"] is None
    assert [f["url"] for f in report["files"]] == dataset_dir.data_urls
    assert all(f["ok"] for f in report["files"])


def test_validate_dataset_with_a_missing_file_exit_1(dataset_dir: Any) -> None:
    victim = Path(dataset_dir.data_urls[1])
    victim.unlink()
    result = run("validate", dataset_dir.url)
    assert result.returncode == 1
    assert result.stdout.startswith(f"INVALID {dataset_dir.url}: {victim.name}: [M4] ")
    no_traceback(result)


def test_inspect_dataset_with_a_missing_index_exit_1(dataset_dir: Any) -> None:
    index = Path(dataset_dir.data_urls[1] + ".idx")
    index.unlink()
    inspected = run("inspect", dataset_dir.url)  # checked as validate does: M4
    assert inspected.returncode == 1
    assert inspected.stderr.startswith(f"error: {dataset_dir.url} is invalid: ")
    assert index.name in inspected.stderr and "[M4]" in inspected.stderr
    assert len(inspected.stderr.strip().splitlines()) == 1
    no_traceback(inspected)


def test_validate_dataset_with_a_damaged_chunk_needs_deep(dataset_dir: Any) -> None:
    data = Path(dataset_dir.data_urls[0])
    with arrowshuffle.open_file(str(data)) as shuffle_file:
        stats = shuffle_file.stats().to_pylist()
    chunk = next(c for c in stats if c["bytes"] > 0 and not c["broadcast"])
    raw = bytearray(data.read_bytes())
    raw[chunk["offset"] + chunk["bytes"] - 1] ^= 0xFF
    data.write_bytes(bytes(raw))
    assert run("validate", dataset_dir.url).returncode == 0
    deep = run("validate", "--deep", dataset_dir.url)
    assert deep.returncode == 1
    assert deep.stdout.startswith(f"INVALID {dataset_dir.url}: {data.name}: [V16] ")


def test_validate_and_inspect_damaged_manifest_exit_1(dataset_dir: Any) -> None:
    replace_manifest(dataset_dir.url, b"{not json")
    result = run("validate", dataset_dir.url)
    assert result.returncode == 1
    assert result.stdout.startswith(f"INVALID {dataset_dir.url}: [M1] ")
    inspected = run("inspect", dataset_dir.url)
    assert inspected.returncode == 1
    assert "[M1]" in inspected.stderr
    no_traceback(inspected)


def test_directory_without_manifest_exit_2(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    for command in ("validate", "inspect"):
        result = run(command, str(empty))
        assert result.returncode == 2
        assert "_arrowshuffle_manifest.json" in result.stderr
        no_traceback(result)


def test_inspect_dataset_totals_over_all_files(dataset_dir: Any) -> None:
    result = run("inspect", "--json", dataset_dir.url)
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    expected = expected_per_subpartition(dataset_dir.data_urls, 6)
    assert summary["kind"] == "dataset"
    assert summary["files"] == 3 and summary["subpartitions"] == 6
    assert summary["rows"] == 3 * 5 * 40
    assert [t["rows"] for t in summary["per_subpartition"]] == expected.tolist()
    assert summary["skew"] == pytest.approx(expected.max() / expected.mean())
    assert summary["broadcast_regions"] == 3  # one broadcast batch per file
    assert [f["name"] for f in summary["per_file"]] == [Path(u).name for u in dataset_dir.data_urls]
    assert [f["data_bytes"] for f in summary["per_file"]] == [
        Path(u).stat().st_size for u in dataset_dir.data_urls
    ]


def test_inspect_dataset_text_and_plot(dataset_dir: Any, tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    out = tmp_path / "dataset.png"
    result = run("inspect", dataset_dir.url, "--plot", str(out))
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"dataset        {dataset_dir.url}\n")
    table = result.stdout.split("\nsubpartition ", 1)[1].splitlines()[1:]
    rows = [int(line.split()[1]) for line in table if line.strip()]
    assert rows == expected_per_subpartition(dataset_dir.data_urls, 6).tolist()
    for url in dataset_dir.data_urls:
        assert Path(url).name in result.stdout
    assert_png(out)


def test_inspect_dataset_progress_on_a_terminal_only(dataset_dir: Any) -> None:
    piped = run("inspect", dataset_dir.url)
    assert piped.returncode == 0 and piped.stderr == ""
    status, stdout, terminal = run_with_terminal_stderr("inspect", dataset_dir.url)
    assert status == 0
    assert stdout == piped.stdout
    assert "inspect [" in terminal and "3/3" in terminal


@pytest.mark.s3
def test_dataset_on_object_storage(s3_endpoint: Any, s3_bucket: str, tmp_path: Path) -> None:
    from dataset_factory import write_dataset

    options = s3_endpoint.storage_options()
    written = write_dataset(
        f"{s3_bucket}/ds", num_files=3, num_subpartitions=4, storage_options=options, seed=5
    )
    flags = [
        "--storage-option",
        f"endpoint_url={options['endpoint_url']}",
        "--storage-option",
        "key=testing",
        "--storage-option",
        "secret=testing",
        "--storage-option",
        'client_kwargs={"region_name": "eu-west-1"}',
    ]
    url = f"{s3_bucket}/ds"
    result = run("validate", "--deep", url, *flags)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"OK {url} (dataset: 3 files, ")
    out = tmp_path / "remote.png"
    inspected = run("inspect", "--json", url, "--plot", str(out), *flags)
    assert inspected.returncode == 0, inspected.stderr
    summary = json.loads(inspected.stdout)
    assert summary["files"] == 3 and summary["rows"] == written.manifest.total_rows
    assert [f["name"] for f in summary["per_file"]] == [
        u.rsplit("/", 1)[1] for u in written.data_urls
    ]
    assert_png(out)


def test_output_closed_early_by_the_reader_is_not_an_error(tmp_path: Path) -> None:
    """`arrowshuffle inspect big | head` must not print a traceback or an error line."""
    path = tmp_path / "wide.arrow"
    table = pa.table({"k": np.arange(20_000, dtype=np.int64)})
    arrowshuffle.write(table, path, num_subpartitions=5_000, partitioner="round_robin")
    proc = subprocess.Popen(
        [sys.executable, "-m", "arrowshuffle.cli", "inspect", str(path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    assert proc.stdout.read(64)  # the table is far larger than a pipe buffer
    proc.stdout.close()
    stderr = proc.stderr.read().decode()
    proc.wait(timeout=60)
    assert "Traceback" not in stderr and "error" not in stderr.lower(), stderr
