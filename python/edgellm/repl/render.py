"""What the REPL writes: the banner, streamed answer text, the one-line timing summary, Ollama's
labelled --verbose block, notices and errors.

Colour and decoration are for terminals only: with `decorate=False` (stdout is a pipe or a
file) the banner and timing lines are not written and no escape code ever is, so the output
is exactly the answers.
"""
from __future__ import annotations

import os
import sys
from typing import Dict, Iterable, Optional, Tuple

__all__ = ["Renderer", "format_duration", "timing_line", "verbose_block"]

_DIM = "\x1b[2m"
_BOLD = "\x1b[1m"
_RED = "\x1b[31m"
_RESET = "\x1b[0m"


def format_duration(seconds: float) -> str:
    """Go's time.Duration style that Ollama prints: 2.345678s, 812.345ms, 95.2µs."""
    if seconds >= 1.0:
        return f"{seconds:.6f}".rstrip("0").rstrip(".") + "s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.6f}".rstrip("0").rstrip(".") + "ms"
    if seconds > 0:
        return f"{seconds * 1e6:.3f}".rstrip("0").rstrip(".") + "µs"
    return "0s"


def _rate(n: float, per_second: Optional[float]) -> str:
    return f"{per_second:.2f}" if n and per_second else "-"


def timing_line(timings: Dict[str, float]) -> str:
    """`prompt: N tok, X t/s · answer: M tok, Y t/s` from llama-server-named timings.
    Speculative decoding's counts are not in it: `--verbose` / `/set verbose` (the block) and
    `/show info` show them, as Ollama and llama.cpp show them only when asked."""
    pn = int(timings.get("prompt_n", 0))
    gn = int(timings.get("predicted_n", 0))
    return (f"prompt: {pn} tok, {_rate(pn, timings.get('prompt_per_second'))} t/s · "
            f"answer: {gn} tok, {_rate(gn, timings.get('predicted_per_second'))} t/s")


def verbose_block(timings: Dict[str, float], total_s: float, load_s: float) -> str:
    """Ollama's `--verbose` summary with its exact labels (people grep `eval rate:`); when
    speculative decoding drafted tokens for the answer, three more rows: draft count, draft
    accepted, draft acceptance."""
    pn = int(timings.get("prompt_n", 0))
    gn = int(timings.get("predicted_n", 0))
    rows = [
        ("total duration", format_duration(total_s)),
        ("load duration", format_duration(load_s)),
        ("prompt eval count", f"{pn} token(s)"),
        ("prompt eval duration", format_duration(timings.get("prompt_ms", 0.0) / 1e3)),
        ("prompt eval rate", f"{timings.get('prompt_per_second', 0.0):.2f} tokens/s"),
        ("eval count", f"{gn} token(s)"),
        ("eval duration", format_duration(timings.get("predicted_ms", 0.0) / 1e3)),
        ("eval rate", f"{timings.get('predicted_per_second', 0.0):.2f} tokens/s"),
    ]
    drafted = int(timings.get("draft_n", 0) or 0)
    if drafted > 0:  # speculative decoding drafted for this answer (llama-server's names)
        accepted = int(timings.get("draft_n_accepted", 0) or 0)
        rows += [
            ("draft count", f"{drafted} token(s)"),
            ("draft accepted", f"{accepted} token(s)"),
            ("draft acceptance", f"{100.0 * accepted / drafted:.1f}%"),
        ]
    return "\n".join(f"{label + ':':<22}{value}" for label, value in rows)


def _wants_color(stream) -> bool:
    if os.environ.get("NO_COLOR"):
        return False
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


class Renderer:
    """Writes to `out` (answers, banner, notices) and `err` (errors, the verbose block)."""

    def __init__(self, out=None, err=None, decorate: Optional[bool] = None,
                 color: Optional[bool] = None):
        self.out = out or sys.stdout
        self.err = err or sys.stderr
        self.decorate = self.out.isatty() if decorate is None else decorate
        self.color = (self.decorate and _wants_color(self.out)) if color is None else color
        self._at_line_start = True

    # ---- low level ----
    def _style(self, text: str, *codes: str) -> str:
        return "".join(codes) + text + _RESET if self.color and codes else text

    def write(self, text: str, stream=None) -> None:
        stream = stream or self.out
        stream.write(text)
        stream.flush()
        if text and stream is self.out:
            self._at_line_start = text.endswith("\n")

    def line(self, text: str = "", stream=None) -> None:
        self.write(text + "\n", stream)

    def end_line(self) -> None:
        """Move to a fresh line unless already at one (after a streamed answer)."""
        if not self._at_line_start:
            self.write("\n")

    # ---- pieces ----
    def answer_piece(self, text: str) -> None:
        self.write(text)

    def banner(self, rows: Iterable[Tuple[str, str]], title: str) -> None:
        if not self.decorate:
            return
        self.line(self._style(title, _BOLD))
        parts = [f"{k} {v}" for k, v in rows]
        self.line(self._style("  " + " · ".join(parts), _DIM))
        self.line(self._style('Type /? for help, """ to begin a multi-line message, Ctrl+D to exit.', _DIM))
        self.line()

    def timings(self, timings: Optional[Dict[str, float]]) -> None:
        if not self.decorate or not timings:
            return
        self.line(self._style(timing_line(timings), _DIM))

    def verbose(self, timings: Dict[str, float], total_s: float, load_s: float) -> None:
        # stderr, as Ollama: the block never mixes into an answer written to a pipe.
        self.line(verbose_block(timings, total_s, load_s), self.err)

    def notice(self, text: str) -> None:
        """Information about the session (not an answer): dim on a terminal."""
        self.line(self._style(text, _DIM))

    def info(self, text: str) -> None:
        self.line(text)

    def error(self, text: str) -> None:
        msg = f"Error: {text}"
        self.line(self._style(msg, _RED) if self.color and self.err.isatty() else msg, self.err)
