"""Registering the Spark data source: once per session, and only with workers that can run it."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark.sql.datasource", reason="needs pyspark: pip install '.[spark]'")

from arrowshuffle.spark import api
from arrowshuffle.spark.session import SparkUnavailableError


def test_registering_twice_registers_the_source_once(
    spark: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pyspark.sql.datasource import DataSourceRegistration

    calls: list[str] = []
    original = DataSourceRegistration.register

    def counting(self: Any, source: Any) -> None:
        calls.append(source.name())
        original(self, source)

    monkeypatch.setattr(DataSourceRegistration, "register", counting)
    monkeypatch.delattr(spark, api._REGISTERED, raising=False)
    api.register(spark)
    api.register(spark)
    api.register(spark)
    assert calls == ["arrowshuffle"]
    assert spark.read.format("arrowshuffle") is not None


def test_workers_that_cannot_import_the_package_are_refused_with_the_fix(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An interpreter without this environment's packages, as a venv that is not activated.
    bare = tmp_path / "python3"
    bare.write_text(f'#!/bin/sh\nexec {sys.executable} -I -S "$@"\n')
    bare.chmod(0o755)
    if spark.sparkContext.getConf().get("spark.pyspark.python"):
        pytest.skip("the test session sets spark.pyspark.python, which wins over the variable")
    monkeypatch.setenv("PYSPARK_PYTHON", str(bare))
    with pytest.raises(SparkUnavailableError) as caught:
        api.check_worker_python(spark)
    message = str(caught.value)
    assert str(bare) in message
    assert f"PYSPARK_PYTHON={sys.executable}" in message
    assert "ModuleNotFoundError" in message
    monkeypatch.setenv("PYSPARK_PYTHON", sys.executable)
    api.check_worker_python(spark)  # this interpreter can


def test_a_worker_interpreter_that_does_not_exist_is_named(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    missing = os.fspath(tmp_path / "no-python")
    monkeypatch.setenv("PYSPARK_PYTHON", missing)
    with pytest.raises(SparkUnavailableError, match="cannot be started"):
        api.check_worker_python(spark)
