"""Start a local Spark session ready for arrowshuffle (Java check, Python workers, data source)."""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Mapping
from typing import Any

from arrowshuffle.format.errors import ArrowShuffleError, InvalidOptionError

JAVA_HINT = (
    "Spark needs Java 17: install a JDK or JRE (for example the openjdk-17-jre-headless "
    "package) and put `java` on PATH or set JAVA_HOME"
)


class SparkUnavailableError(ArrowShuffleError, RuntimeError):
    """Spark cannot start here: no Java, or pyspark is not installed."""


def java_available() -> bool:
    """True when a ``java`` executable is on PATH or ``JAVA_HOME`` is set."""
    return shutil.which("java") is not None or bool(os.environ.get("JAVA_HOME"))


def check_spark_available() -> None:
    """Raise :class:`SparkUnavailableError` with an install hint if Spark cannot start.

    Raises:
        SparkUnavailableError: no Java, or no pyspark.
    """
    if not java_available():
        raise SparkUnavailableError(f"Java was not found. {JAVA_HINT}")
    try:
        import pyspark  # noqa: F401
    except ImportError:
        raise SparkUnavailableError(
            "pyspark is not installed: pip install 'arrowshuffle[spark]'"
        ) from None


def local_session(
    app_name: str = "arrowshuffle",
    *,
    master: str = "local[*]",
    config: Mapping[str, str] | None = None,
) -> Any:
    """A SparkSession on this machine with the ``arrowshuffle`` data source registered.

    Python workers run this interpreter (``PYSPARK_PYTHON`` defaults to ``sys.executable``),
    the session time zone is UTC and the console progress bar is off.

    Args:
        app_name: the Spark application name.
        master: the Spark master; ``local[*]`` uses every core.
        config: extra Spark settings, applied last.

    Raises:
        SparkUnavailableError: no Java, or no pyspark.
        InvalidOptionError: ``config`` is not a mapping of setting names to values.
    """
    if config is not None and not isinstance(config, Mapping):
        raise InvalidOptionError(
            f"config must be a mapping of Spark settings, found {type(config).__name__}"
        )
    check_spark_available()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    local = master.startswith("local")
    if local:  # a session on this machine listens on loopback only
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    from arrowshuffle.spark import register

    settings = {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.shuffle.partitions": "8",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        **(
            {"spark.driver.bindAddress": "127.0.0.1", "spark.driver.host": "127.0.0.1"}
            if local
            else {}
        ),
        **dict(config or {}),
    }
    builder = SparkSession.builder.master(master).appName(app_name)
    for key, value in settings.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    return session
