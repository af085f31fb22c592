"""``python -m benchmarks``: key figures from the scripts' JSON; a failing script is reported."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

runner = pytest.importorskip("benchmarks.__main__")
report = pytest.importorskip("benchmarks.report")


def timing(median: float, low: float, high: float) -> dict[str, float]:
    return {"median_s": median, "min_s": low, "max_s": high}


def test_format_figures_are_ratios_to_the_peers() -> None:
    doc = {
        "results": [
            {
                "compression": "zstd",
                "rows": 1000,
                "subpartition_rows": 10,
                "write": {
                    "shuffle": timing(3.0, 2.0, 4.0),
                    "plain": timing(1.5, 1.0, 2.0),
                    "sort_then_write": timing(6.0, 5.0, 7.0),
                },
                "read": {
                    "shuffle": timing(0.002, 0.001, 0.003),
                    "standalone": timing(0.001, 0.001, 0.001),
                    "read_all_and_filter": timing(0.008, 0.007, 0.009),
                },
                "bytes": {"shuffle_ratio": 1.5, "read_all_ratio": 30.0},
            }
        ]
    }
    found = report.figures("format", doc)
    ratios = [(f.peer_label, f.ratio) for f in found]
    assert ratios == [
        ("pyarrow.ipc write (unsorted)", pytest.approx(2.0)),
        ("sort by subpartition + pyarrow.ipc write", pytest.approx(0.5)),
        ("standalone Arrow file of those rows", pytest.approx(2.0)),
        ("read whole IPC file + filter", pytest.approx(0.25)),
        ("read whole IPC file", pytest.approx(0.05)),
    ]
    assert found[0].ours == report.Stat(3.0, 2.0, 4.0)
    assert report.format_stat(found[0].ours, "s") == "3.00 [2.00-4.00] s"
    assert report.format_stat(found[2].ours, "s") == "2.0 [1.0-3.0] ms"


def test_spark_figures_have_medians_only() -> None:
    layout = {"write_s": 2.0, "read_one_s": 1.0, "read_all_s": 4.0, "files": 4, "bytes": 10}
    doc = {
        "rows": 100,
        "subpartitions": 8,
        "results": {
            "arrowshuffle": layout,
            "repartition parquet": {**layout, "write_s": 8.0, "files": 8},
            "partitionBy parquet": {**layout, "read_all_s": 2.0, "files": 32},
        },
    }
    found = {(f.measure.split(",")[0], f.peer_label): f for f in report.figures("spark", doc)}
    assert len(found) == 8
    write = found[("Spark write", "df.repartition(n, key).write.parquet")]
    assert write.ratio == pytest.approx(0.25) and write.ours.low is None
    assert found[("files written", "df.write.partitionBy(sub).parquet")].ratio == 0.125
    assert (
        found[("Spark read of all subpartitions", "df.write.partitionBy(sub).parquet")].ratio == 2
    )


def test_commit_race_figures_are_shares_over_runs() -> None:
    def spread(*values: float) -> dict[str, float]:
        return {"median": sorted(values)[len(values) // 2], "min": min(values), "max": max(values)}

    summary = {
        "runs": 3,
        "lost": spread(4, 0, 10),
        "acknowledged": spread(20, 20, 20),
        "lost_after_vacuum": None,  # every final read failed: no figure
        "appends_failed": spread(0, 0, 0),
        "appends_attempted": spread(20, 21, 22),
        "compactions_not_committed": spread(1, 2, 3),
        "compactions_failed": spread(0, 0, 0),
        "compactions_attempted": spread(5, 5, 5),
        "read_failures": spread(1, 1, 1),
        "opens": spread(10, 10, 10),
        "not_one_version": spread(0, 0, 0),
        "reads_ok": spread(9, 9, 9),
        "unreadable": spread(0, 0, 1),
    }
    doc = {
        "config": {"appenders": 3, "readers": 2, "seconds": 30.0},
        "race": {"s3": {"runs": [], "summary": summary}},
    }
    found = {f.measure.split(",")[0]: f for f in report.figures("commits", doc)}
    assert len(found) == 7 and "acknowledged appends lost after vacuum(older_than=0)" not in found
    lost = found["acknowledged appends lost"]
    assert lost.ratio == pytest.approx(0.2) and lost.ours == report.Stat(4.0, 0.0, 10.0)
    assert found["final dataset unreadable"].peer == report.Stat(3.0)


def test_the_commit_race_recognizes_one_version_of_the_appends() -> None:
    bench = pytest.importorskip("benchmarks.bench_commits")
    appends = [bench.append_table(p, s) for p, s in ((0, 1), (1, 1), (1, 2), (2, 7))]
    ids = [t.column("id").to_numpy() for t in appends]
    whole = bench.appends_of(np.concatenate(ids))
    assert (whole["duplicated_ids"], whole["torn"], whole["foreign"]) == (0, 0, 0)
    assert whole["keys"].tolist() == [1, 10**6 + 1, 10**6 + 2, 2 * 10**6 + 7]
    assert all(50 <= t.num_rows <= 200 for t in appends)
    torn = bench.appends_of(np.concatenate([ids[0], ids[1][:-1]]))
    assert (torn["torn"], torn["duplicated_ids"]) == (1, 0)
    twice = bench.appends_of(np.concatenate([ids[0], ids[2], ids[2]]))
    assert (twice["torn"], twice["duplicated_ids"]) == (0, ids[2].size)
    assert bench.appends_of(np.concatenate([ids[3], [ids[3][0] + 999]]))["foreign"] == 1


def test_missing_fields_are_reported_not_raised_as_crashes() -> None:
    with pytest.raises(KeyError):
        report.figures("reads", {"local": {}})


@pytest.fixture
def fake_scripts(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """Replace the benchmark commands with tiny scripts: one fails, one succeeds."""
    scripts: dict[str, str] = {}

    def command(name: str, size: str, repeats: int, out: Path) -> list[str]:
        return [sys.executable, "-c", scripts[name], str(out)]

    monkeypatch.setattr(runner, "command", command)
    return scripts


def format_doc() -> dict[str, Any]:
    t = timing(1.0, 1.0, 1.0)
    return {
        "results": [
            {
                "compression": "none",
                "rows": 1,
                "subpartition_rows": 1,
                "write": {"shuffle": t, "plain": t, "sort_then_write": t},
                "read": {"shuffle": t, "standalone": t, "read_all_and_filter": t},
                "bytes": {"shuffle_ratio": 1.0, "read_all_ratio": 2.0},
            }
        ]
    }


def test_a_failing_benchmark_is_reported_and_the_others_still_run(
    fake_scripts: dict[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fake_scripts["partitioners"] = "import sys; print('partitioner trouble'); sys.exit(3)"
    fake_scripts["format"] = (
        "import json, pathlib, sys; "
        f"pathlib.Path(sys.argv[1]).write_text(json.dumps({format_doc()!r}))"
    )
    status = runner.main(["--only", "partitioners,format", "--out-dir", str(tmp_path / "out")])
    assert status == 1
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert list(summary["benchmarks"]) == ["format", "partitioners"]  # canonical order
    failed = summary["benchmarks"]["partitioners"]
    assert failed["status"] == "failed" and failed["exit_code"] == 3
    assert "partitioner trouble" in failed["error"]
    ok = summary["benchmarks"]["format"]
    assert ok["status"] == "ok" and len(ok["figures"]) == 5
    assert ok["figures"][4]["ratio"] == pytest.approx(0.5)
    text = (tmp_path / "out" / "BENCHMARKS.md").read_text()
    assert "read whole IPC file" in text and "`partitioners`: failed" in text
    assert "python -m benchmarks --only partitioners,format" in text
    assert "FAILED" in capsys.readouterr().out


def test_stale_results_are_not_reported(fake_scripts: dict[str, str], tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "format.json").write_text(json.dumps(format_doc()))  # from an earlier run
    fake_scripts["format"] = "pass"  # succeeds without writing results
    assert runner.main(["--only", "format", "--out-dir", str(out), "--no-markdown"]) == 1
    summary = json.loads((out / "summary.json").read_text())
    assert summary["benchmarks"]["format"]["status"] == "failed"
    assert "no readable results" in summary["benchmarks"]["format"]["error"]


def test_unknown_benchmark_name_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stopped:
        runner.main(["--only", "format,nope"])
    assert stopped.value.code == 2
    assert "--only" in capsys.readouterr().err


TRACKED = b"# Benchmarks\n\nthe committed figures of every benchmark\n"


@pytest.fixture
def tracked(tmp_path: Path) -> Path:
    """A stand-in for the committed BENCHMARKS.md."""
    path = tmp_path / "BENCHMARKS.md"
    path.write_bytes(TRACKED)
    return path


def test_a_partial_run_leaves_the_committed_report(
    fake_scripts: dict[str, str],
    tracked: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    fake_scripts["plan"] = "pass"
    out = tmp_path / "out"
    runner.main(["--only", "plan", "--out-dir", str(out), "--report", str(tracked)])
    assert tracked.read_bytes() == TRACKED
    assert "`plan`: failed" in (out / "BENCHMARKS.md").read_text()
    assert f"wrote {out / 'BENCHMARKS.md'}" in capsys.readouterr().out


def test_a_full_run_writes_the_committed_report_only_when_asked(
    fake_scripts: dict[str, str], tracked: Path, tmp_path: Path
) -> None:
    fake_scripts.update(dict.fromkeys(runner.BENCHMARKS, "pass"))
    out = tmp_path / "out"
    runner.main(["--out-dir", str(out), "--report", str(tracked)])
    assert tracked.read_bytes() == TRACKED
    assert (out / "BENCHMARKS.md").exists()
    runner.main(["--out-dir", str(out), "--report", str(tracked), "--update-report"])
    assert tracked.read_text() == (out / "BENCHMARKS.md").read_text()
    assert "`commits`: failed" in tracked.read_text()


def test_a_partial_run_may_not_update_the_report(
    tracked: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as stopped:
        runner.main(["--only", "plan", "--update-report", "--report", str(tracked)])
    assert stopped.value.code == 2
    assert "--update-report" in capsys.readouterr().err
    assert tracked.read_bytes() == TRACKED


def test_the_output_directory_may_not_hold_the_committed_report(
    tracked: Path, tmp_path: Path
) -> None:
    with pytest.raises(SystemExit) as stopped:
        runner.main(["--only", "plan", "--out-dir", str(tmp_path), "--report", str(tracked)])
    assert stopped.value.code == 2
    assert tracked.read_bytes() == TRACKED


def test_every_script_takes_the_runners_repeat_flag() -> None:
    # The scripts import the engines they compare with (polars, pyspark, moto) at the top.
    for engine in ("polars", "pyspark", "moto"):
        pytest.importorskip(engine, reason="the benchmark scripts need the dev extras")
    for name in runner.BENCHMARKS:
        argv = runner.command(name, "small", 2, Path("/tmp/x.json"))
        assert argv[argv.index(runner.REPEAT_FLAG) + 1] == "2"
        shown = subprocess.run(
            [sys.executable, "-m", f"benchmarks.bench_{name}", "--help"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        assert "--repeats" in shown, name
        assert "--repeat " not in shown and "--no-s3" not in shown, name


@pytest.mark.parametrize("name", ["reads", "verify", "wide", "commits"])
def test_s3_is_skipped_with_one_flag_and_the_old_spellings_still_parse(name: str) -> None:
    bench = pytest.importorskip(f"benchmarks.bench_{name}")
    assert bench.parse_args(["--skip-s3"]).skip_s3 is True
    assert bench.parse_args(["--no-s3"]).skip_s3 is True
    assert bench.parse_args([]).skip_s3 is False
    if name == "reads":
        assert bench.parse_args(["--repeat", "2"]).repeats == 2
        assert bench.parse_args(["--repeats", "3"]).repeats == 3
        assert bench.parse_args([]).repeats == 5
    if name == "commits":
        assert bench.parse_args(["--skip-s3"]).backends == ["local"]


def test_one_timing_loop_counts_warmups_and_repeats() -> None:
    timing = pytest.importorskip("benchmarks.timing")
    calls: list[int] = []

    def work() -> int:
        calls.append(1)
        return len(calls)

    seconds, last = timing.timed(work, 3, warmup=2)
    assert len(seconds) == 3 and all(s >= 0 for s in seconds)
    assert last == 5 and len(calls) == 5
    assert len(timing.time_calls(work, 2)) == 2
    assert timing.spread([3.0, 1.0, 2.0]) == {"median_s": 2.0, "min_s": 1.0, "max_s": 3.0}
    with pytest.raises(ValueError):
        timing.time_calls(work, 0)
