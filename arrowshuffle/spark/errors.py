"""This package's errors out of Spark's wrapping: the message first, the class kept.

The data source runs in Python workers, on the driver (options, planning, the commit) and on
the executors (tasks). An error it raises there reaches the calling Python process as Spark's
own exception (``AnalysisException``, ``PythonException``, a ``Py4JJavaError``) whose text
holds the worker's traceback and, last, the original class and message. :func:`spark_errors`
finds them there and raises the original class again, with the original message, chained from
Spark's exception (which keeps every detail).
"""

from __future__ import annotations

import contextlib
import importlib
import re
from collections.abc import Callable, Iterator

from arrowshuffle.format.errors import ArrowShuffleError, FormatError

#: A traceback's last line naming an error of this package: ``arrowshuffle.x.y.Name: message``.
_RAISED = re.compile(r"^(arrowshuffle(?:\.\w+)+)\.(\w+): ", re.MULTILINE)
#: Where Spark's text resumes after the worker's message: its SQL state, a JVM stack trace.
_SPARK_TAIL = re.compile(r"\n\s*SQLSTATE: |\n\tat |\n\s*JVM stacktrace:")
_RULE = re.compile(r"\[(\w+)\] (.*)", re.DOTALL)
_ERRNO = re.compile(r"\[Errno (\d+)\] (.*)", re.DOTALL)

__all__ = ["original_error", "spark_errors"]


def original_error(exc: BaseException) -> ArrowShuffleError | None:
    """The error of this package that Spark's exception ``exc`` reports, rebuilt, or None.

    None when ``exc`` reports no such error, or one that cannot be rebuilt with exactly its
    message (the caller then keeps Spark's exception).
    """
    text = str(exc)
    found = list(_RAISED.finditer(text))
    if not found:
        return None
    last = found[-1]
    cls = _error_class(last.group(1), last.group(2))
    if cls is None:
        return None
    rest = text[last.end() :]
    tail = _SPARK_TAIL.search(rest)
    message = (rest[: tail.start()] if tail else rest).rstrip()
    return _rebuild(cls, message)


@contextlib.contextmanager
def spark_errors() -> Iterator[None]:
    """Turn Spark's exceptions that wrap an error of this package back into that error.

    Example:
        >>> with spark_errors():  # doctest: +SKIP
        ...     df.write.format("arrowshuffle").mode("append").save(path)
    """
    try:
        yield
    except ArrowShuffleError:
        raise
    except Exception as exc:
        original = original_error(exc)
        if original is None:
            raise
        raise original from exc


def _error_class(module_name: str, name: str) -> type[ArrowShuffleError] | None:
    try:
        module = importlib.import_module(module_name)
    except ImportError:
        return None
    cls = getattr(module, name, None)
    if isinstance(cls, type) and issubclass(cls, ArrowShuffleError):
        return cls
    return None


def _rebuild(cls: type[ArrowShuffleError], message: str) -> ArrowShuffleError | None:
    """``cls`` built so that its text is ``message`` again (rule and errno included)."""
    attempts: list[Callable[[], ArrowShuffleError]] = []
    rule = _RULE.fullmatch(message)
    if rule is not None and issubclass(cls, FormatError):
        attempts.append(lambda: cls(rule.group(2), rule=rule.group(1)))
    errno = _ERRNO.fullmatch(message)
    if errno is not None and issubclass(cls, OSError):
        attempts.append(lambda: cls(int(errno.group(1)), errno.group(2)))
    attempts.append(lambda: cls(message))
    for attempt in attempts:
        try:
            error = attempt()
        except Exception:  # a class whose constructor takes other arguments
            continue
        if str(error) == message:
            return error
    return None
