"""A one-line progress bar for long command-line work, drawn only on a terminal.

When the stream is not a terminal (piped, redirected, captured by a test) nothing is written,
so machine-readable output and logs stay clean.
"""

from __future__ import annotations

import shutil
import time
from typing import TextIO

#: Characters of the bar itself; the rest of the line holds the label and the counts.
BAR_WIDTH = 24
#: Redraw at most this often (seconds), except for the last step.
MIN_INTERVAL = 0.1


def is_terminal(stream: TextIO) -> bool:
    """True when ``stream`` is an interactive terminal."""
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # closed or file-like objects without a terminal
        return False


class ProgressBar:
    """``label [#######.........]  12/40  note``, redrawn in place with a carriage return.

    Args:
        total: how many steps make up the work.
        label: what is being done, shown first.
        stream: where to draw (a terminal); nothing is drawn when it is not one.
        min_total: draw only when there are at least this many steps (one file needs no bar).
    """

    def __init__(self, total: int, label: str, stream: TextIO, *, min_total: int = 2) -> None:
        self.label = label
        self.stream = stream
        self._terminal = is_terminal(stream)
        self._min_total = min_total
        self._closed = False
        self.total = 0
        self.enabled = False
        self._set_total(total)
        self._drawn = False
        self._last = 0.0
        self._done = 0
        self._note = ""

    def _set_total(self, total: int) -> None:
        self.total = max(0, total)
        self.enabled = self._terminal and not self._closed and self.total >= self._min_total

    def update(self, done: int, note: str = "", *, total: int | None = None) -> None:
        """Show ``done`` of ``total`` steps finished, with an optional note (a file name).

        ``total`` changes the number of steps, for work whose size is learnt on the way.
        """
        if total is not None and total != self.total:
            self._set_total(total)
        self._done = min(max(0, done), self.total)
        self._note = note
        if not self.enabled:
            return
        now = time.monotonic()
        if self._drawn and now - self._last < MIN_INTERVAL and self._done < self.total:
            return
        self._last = now
        self._draw()

    def _draw(self) -> None:
        filled = BAR_WIDTH * self._done // self.total if self.total else BAR_WIDTH
        bar = "#" * filled + "." * (BAR_WIDTH - filled)
        line = f"{self.label} [{bar}] {self._done}/{self.total}"
        if self._note:
            line += f"  {self._note}"
        width = shutil.get_terminal_size((80, 24)).columns
        self.stream.write("\r\x1b[2K" + line[: max(10, width - 1)])
        self.stream.flush()
        self._drawn = True

    def clear(self) -> None:
        """Erase the bar, so that a line of output can be printed; the next update redraws."""
        if self.enabled and self._drawn:
            self.stream.write("\r\x1b[2K")
            self.stream.flush()
            self._drawn = False

    def close(self) -> None:
        """Erase the bar for good."""
        self.clear()
        self._closed = True
        self.enabled = False

    def __enter__(self) -> ProgressBar:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
