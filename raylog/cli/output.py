"""What commands print: aligned tables, id lists and a progress line redrawn in place."""

from __future__ import annotations

import sys
import time
from typing import Any

#: How often a progress line is redrawn, and ``reassign-partitions --wait`` looks again.
PROGRESS_INTERVAL_S = 0.5


class Progress:
    """A one-line status redrawn in place (carriage return) on ``stream`` at most every
    PROGRESS_INTERVAL_S, when ``stream`` is a terminal; nothing at all otherwise, so that
    logs and pipes stay clean."""

    def __init__(self, stream: Any = None, enabled: bool = True):
        self._stream = stream or sys.stderr
        self._on = enabled and self._stream.isatty()
        self._drawn_at = 0.0
        self._width = 0

    def show(self, text: str) -> None:
        now = time.monotonic()
        if not self._on or now - self._drawn_at < PROGRESS_INTERVAL_S:
            return
        self._drawn_at = now
        self._stream.write("\r" + text.ljust(self._width))
        self._stream.flush()
        self._width = len(text)

    def clear(self) -> None:
        """Erase the line (the summary that follows gets a clean line)."""
        if self._width:
            self._stream.write("\r" + " " * self._width + "\r")
            self._stream.flush()
            self._width = 0


def table(rows: list[tuple[str, ...]]) -> str:
    """Rows as left-aligned columns (the first row is the header)."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in rows)


def ids_text(ids: Any) -> str:
    return ",".join(map(str, ids)) or "-"
