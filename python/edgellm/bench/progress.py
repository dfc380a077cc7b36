"""A one-line progress bar on stderr; silent unless stderr is a terminal, so logs and pipes
stay clean."""
from __future__ import annotations

import sys
import time


class Progress:
    def __init__(self, total: int, label: str = "", stream=None, enabled=None):
        self.stream = stream if stream is not None else sys.stderr
        self.total = max(int(total), 1)
        self.done = 0
        self.label = label
        self.t0 = time.perf_counter()
        isatty = getattr(self.stream, "isatty", None)
        self.enabled = bool(isatty and isatty()) if enabled is None else enabled
        self._last = 0.0

    def update(self, n: int = 1, label: str = None) -> None:
        self.done = min(self.total, self.done + n)
        if label is not None:
            self.label = label
        if not self.enabled:
            return
        now = time.perf_counter()
        if now - self._last < 0.1 and self.done < self.total:
            return  # redraw at most 10 times a second
        self._last = now
        width = 30
        filled = int(width * self.done / self.total)
        elapsed = now - self.t0
        eta = elapsed * (self.total - self.done) / self.done if self.done else 0.0
        self.stream.write(f"\r{self.label} [{'#' * filled}{'.' * (width - filled)}] "
                          f"{100 * self.done / self.total:5.1f}% {elapsed:6.1f}s eta {eta:5.1f}s ")
        self.stream.flush()

    def close(self) -> None:
        if self.enabled:
            self.stream.write("\r" + " " * 90 + "\r")
            self.stream.flush()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
