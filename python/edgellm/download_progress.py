"""One progress bar of a download's bytes on stderr: `edgellm pull`, `edgellm models fetch` and
the first use of a model that must be fetched.

A download reports through the callback Ollama's /api/pull streams, `progress(status, completed,
total)`: "pulling <digest>" lines carry the bytes of one file (a model in several files, or a model
with its mmproj, announces every file with 0 first), any other status ("pulling manifest",
"verifying sha256 digest", "success") carries no bytes. `ByteBar` sums the files into one bar:
on a terminal one line redrawn in place (label, percent, bar, bytes, rate, time left), elsewhere
(a pipe, a log) a plain line at every tenth and at the end, so a log never holds a carriage return.

Standard library only: edgellm/models.py, which uses it, also runs before the package is built.
"""
from __future__ import annotations

import sys
import threading
import time
from typing import Callable, Dict, Optional, Tuple

ProgressFn = Callable[[str, Optional[int], Optional[int]], None]

_REDRAW_S = 0.1  # a terminal line is redrawn at most this often
_WIDTH = 24      # the bar's cells


def human_bytes(n: float) -> str:
    """Decimal units, as Ollama's HumanBytes: 98362432 -> '98 MB', 1.5e9 -> '1.5 GB'."""
    for unit, div in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if n >= div:
            value = n / div
            if value >= 10 or value == int(value):
                return f"{int(value)} {unit}"
            return f"{value:.1f} {unit}"
    return f"{int(n)} B"


def _duration(s: float) -> str:
    s = int(s)
    return f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s"


class ByteBar:
    """The sum of a download's files as one bar on `stream` (stderr by default).

    Use as the progress callback: bar = ByteBar("smollm2"); fetch(..., progress=bar)."""

    def __init__(self, label: str, stream=None, interactive: Optional[bool] = None):
        self.label = label
        self.stream = stream if stream is not None else sys.stderr
        if interactive is None:
            isatty = getattr(self.stream, "isatty", None)
            interactive = bool(isatty and isatty())
        self.interactive = interactive
        self._files: Dict[str, Tuple[int, int]] = {}  # status -> (completed, total)
        self._lock = threading.Lock()  # callbacks come from download threads
        self._t0 = time.monotonic()
        self._last_draw = 0.0
        self._tenths = -1  # the last tenth a plain line was written for
        self._drawn = False
        self._closed = False

    # the progress(status, completed, total) callback
    def __call__(self, status: str, completed: Optional[int] = None,
                 total: Optional[int] = None) -> None:
        if total is None or not status.startswith("pulling "):
            return  # a step without bytes: the bar says enough
        with self._lock:
            announced = status in self._files
            self._files[status] = (max(0, min(int(completed or 0), int(total))), int(total))
            if announced or completed:  # a file announced with 0 waits for the others' totals
                self._draw(final=False)

    @property
    def completed(self) -> int:
        return sum(c for c, _ in self._files.values())

    @property
    def total(self) -> int:
        return sum(t for _, t in self._files.values())

    def _draw(self, final: bool) -> None:
        done, total = self.completed, self.total
        if total <= 0:
            return
        now = time.monotonic()
        elapsed = max(now - self._t0, 1e-6)
        if self.interactive:
            if not final and now - self._last_draw < _REDRAW_S and done < total:
                return
            self._last_draw = now
            frac = done / total
            filled = int(_WIDTH * frac)
            rate = done / elapsed
            tail = (f"{_duration(elapsed)}" if final or done >= total else
                    f"{human_bytes(rate)}/s, {_duration((total - done) / rate) if rate else '?'} left")
            line = (f"{self.label} {100 * frac:3.0f}% |{'#' * filled}{' ' * (_WIDTH - filled)}| "
                    f"{human_bytes(done)}/{human_bytes(total)} ({tail})")
            self.stream.write("\r\x1b[K" + line)
            self._drawn = True
        else:
            tenths = 10 * done // total
            if tenths == self._tenths or (tenths >= 10 and not final):
                return
            self._tenths = tenths
            self.stream.write(f"{self.label}: {10 * tenths}% of {human_bytes(total)}"
                              f"{f' in {elapsed:.1f} s' if tenths >= 10 else ''}\n")
        self.stream.flush()

    def note(self, message: str) -> None:
        """A line of its own above the bar (a resumed download, a warning), the bar redrawn."""
        with self._lock:
            if self.interactive and self._drawn:
                self.stream.write("\r\x1b[K" + message + "\n")
                self._last_draw = 0.0
                self._draw(final=False)
            else:
                self.stream.write(message + "\n")
            self.stream.flush()

    def close(self) -> None:
        """Ends the bar: its last state at 100 % when complete, then a newline on a terminal."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            if self.total and self.completed >= self.total:
                self._draw(final=True)
            if self.interactive and self._drawn:
                self.stream.write("\n")
                self.stream.flush()

    def __enter__(self) -> "ByteBar":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
