"""How an answer ended, said to the person at the terminal (`edgellm run`, one-shot and REPL):

- `LoopGuard`: an answer that keeps writing the same line is a loop, not an answer (a base model
  used as a chat model repeats the question until the context is full). After `REPEATS`
  identical non-empty lines in a row the answer is stopped, finish reason "repetition".
- `finish_notice`: one line when the answer did not end by itself -- a loop stopped, or the
  context full (the answer is cut; num_predict reached is what was asked for, said by nothing).
"""
from typing import Any, List, Optional, Tuple

REPEATS = 8  # identical lines in a row that make a loop


class LoopGuard:
    """Fed the streamed text; `looping` turns true at the REPEATS-th identical line in a row."""

    def __init__(self, repeats: int = REPEATS):
        self.repeats = repeats
        self._partial = ""
        self._last: Optional[str] = None
        self._count = 0
        self.looping = False

    def feed(self, text: str) -> bool:
        self._partial += text
        *lines, self._partial = self._partial.split("\n")
        for line in lines:
            key = line.strip()
            if not key:
                continue  # blank lines between the repeats do not break a loop
            self._count = self._count + 1 if key == self._last else 1
            self._last = key
            if self._count >= self.repeats:
                self.looping = True
        return self.looping


def finish_notice(finish_reason: Optional[str], timings: Optional[dict], max_tokens: Optional[int],
                  n_ctx: int, repeats: int = REPEATS) -> Optional[str]:
    """The line to show when an answer was stopped or cut; None when it ended as asked."""
    if finish_reason == "repetition":
        return (f"(stopped: the answer repeated the same line {repeats} times, a loop rather "
                "than an answer; a base model without a chat template does this -- try a chat "
                "model, or --chat-template)")
    if finish_reason == "length":
        n = int((timings or {}).get("predicted_n", 0) or 0)
        if max_tokens is None or n < max_tokens:
            return (f"(the answer was cut: the context of {n_ctx} tokens is full; /clear starts "
                    "afresh, /set parameter num_ctx N or -c N gives more room, --context-shift "
                    "keeps going)")
    return None


def stream_answer(stream, render, parts: Optional[List[str]] = None) -> Tuple[Any, Optional[str]]:
    """Write `stream`'s text as it comes (collected in `parts`); (the last chunk seen with a
    finish reason -- or the one that closed a loop --, the finish reason: the engine's, or
    "repetition" when LoopGuard stopped it; (None, None) when the stream ended without one)."""
    guard = LoopGuard()
    for chunk in stream:
        if chunk.text:
            render.answer_piece(chunk.text)
            if parts is not None:
                parts.append(chunk.text)
        if chunk.finish_reason is not None:
            return chunk, chunk.finish_reason
        if chunk.text and guard.feed(chunk.text):
            return chunk, "repetition"
    return None, None
