"""Reading what the user types: one line at a time from a line reader, assembled into
messages by `read_message`.

Two line readers: `PromptToolkitReader` for people at a terminal (line editing, persistent
history, bracketed paste delivering a pasted block as one multi-line string, Ctrl+G to edit
in $EDITOR), and `PlainReader` (input() with readline where available) when stdout is not a
terminal or prompt_toolkit is unavailable. Both raise KeyboardInterrupt for Ctrl+C and
EOFError for Ctrl+D on an empty line, which is all the REPL loop relies on.
"""
from __future__ import annotations

import os
import re
from typing import List, Optional, Tuple

__all__ = ["PROMPT", "CONTINUATION", "BLOCK_QUOTE", "LineReader", "PromptToolkitReader",
           "PlainReader", "read_message", "history_path", "image_paths"]

PROMPT = ">>> "
CONTINUATION = "... "
BLOCK_QUOTE = '"""'


# An image file named in a message (Ollama's `ollama run`): a path starting with /, ./, ../ or ~/
# (spaces escaped with a backslash), or any path in quotes, ending in an image extension.
_IMAGE_PATH = re.compile(r"""(['"])((?:[^'"\n])+?\.(?:png|jpe?g|webp|gif))\1"""
                         r"""|((?:\.\.?/|~/|/)(?:\\ |\S)+?\.(?:png|jpe?g|webp|gif))(?=[\s,;:!?)]|$)""",
                         re.IGNORECASE)


def image_paths(text: str) -> Tuple[str, List[str]]:
    """(the text without the image files it names, their paths): each path that names an
    existing file is taken out, as `ollama run` does for a model that takes images."""
    found: List[str] = []

    def take(m) -> str:
        raw = m.group(2) or m.group(3)
        path = os.path.expanduser(raw.replace("\\ ", " "))
        if not os.path.isfile(path):
            return m.group(0)
        found.append(path)
        return ""
    rest = _IMAGE_PATH.sub(take, text)
    return (re.sub(r" {2,}", " ", rest).strip() if found else text), found


def history_path() -> str:
    """$EDGELLM_HISTORY, else $XDG_STATE_HOME/edgellm/history (~/.local/state/edgellm/history):
    history is state, not cache -- losing it on a cache purge would surprise people."""
    explicit = os.environ.get("EDGELLM_HISTORY")
    if explicit:
        return os.path.expanduser(explicit)
    state = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return os.path.join(state, "edgellm", "history")


class LineReader:
    """The interface: read_line(prompt, continuation) and remember(entry)."""

    def read_line(self, prompt: str, continuation: bool = False) -> str:
        raise NotImplementedError

    def remember(self, entry: str) -> None:
        """Add a whole multi-line entry to the history (continuation lines are not added)."""

    def close(self) -> None:
        pass


class PromptToolkitReader(LineReader):
    def __init__(self, history_file: Optional[str] = None):
        from prompt_toolkit import PromptSession
        from prompt_toolkit.history import FileHistory, InMemoryHistory
        from prompt_toolkit.key_binding import KeyBindings

        history = InMemoryHistory()
        if history_file:
            try:
                os.makedirs(os.path.dirname(history_file) or ".", exist_ok=True)
                with open(history_file, "ab"):
                    pass
                history = FileHistory(history_file)
            except OSError:
                pass  # an unwritable home: history for this session only
        self._history = history

        keys = KeyBindings()

        @keys.add("c-c")
        def _interrupt(event):
            # As Ollama: Ctrl+C with text on the line clears it; on an empty line it reaches
            # the REPL, which says how to exit.
            buf = event.app.current_buffer
            if buf.text:
                buf.reset()
            else:
                event.app.exit(exception=KeyboardInterrupt, style="class:aborting")

        @keys.add("c-g")
        def _edit(event):
            event.app.current_buffer.open_in_editor(validate_and_handle=False)

        self._session = PromptSession(history=history, key_bindings=keys)
        # Lines inside a """ block are not history entries of their own; the whole block is.
        self._block = PromptSession(history=InMemoryHistory(), key_bindings=keys)

    def read_line(self, prompt: str, continuation: bool = False) -> str:
        session = self._block if continuation else self._session
        return session.prompt(prompt)

    def remember(self, entry: str) -> None:
        self._history.append_string(entry)


class PlainReader(LineReader):
    """input(), with readline editing and history when the module exists."""

    def __init__(self, history_file: Optional[str] = None, stream=None):
        self._history_file = history_file
        self._readline = None
        try:
            import readline
            self._readline = readline
            if history_file and os.path.isfile(history_file):
                readline.read_history_file(history_file)
        except (ImportError, OSError):
            pass

    def read_line(self, prompt: str, continuation: bool = False) -> str:
        return input(prompt)

    def close(self) -> None:
        if self._readline is not None and self._history_file:
            try:
                os.makedirs(os.path.dirname(self._history_file) or ".", exist_ok=True)
                self._readline.write_history_file(self._history_file)
            except OSError:
                pass


def _closes_block(text: str) -> bool:
    return text.rstrip().endswith(BLOCK_QUOTE)


_SET_SYSTEM = "/set system"


def read_message(reader: LineReader) -> str:
    """One message: a line, a pasted block, or a \"\"\"-quoted block of lines.

    A line starting with \"\"\" opens a block (text after the quotes is its first line); the
    block ends with the line ending in \"\"\" (text before the quotes is its last line), as in
    Ollama; `/set system \"\"\"` opens one too and comes back as `/set system <block>`. A
    pasted multi-line string goes through the same rule, so a pasted block that is already
    quoted is not quoted twice. Ctrl+C inside a block abandons it (KeyboardInterrupt).
    """
    text = reader.read_line(PROMPT)
    stripped = text.lstrip()
    prefix = ""
    if stripped.startswith(_SET_SYSTEM) and stripped[len(_SET_SYSTEM):].lstrip().startswith(BLOCK_QUOTE):
        prefix = _SET_SYSTEM + " "
        stripped = stripped[len(_SET_SYSTEM):].lstrip()
    elif not stripped.startswith(BLOCK_QUOTE):
        return text
    first = stripped[len(BLOCK_QUOTE):]
    if _closes_block(first):
        body = first.rstrip()[:-len(BLOCK_QUOTE)]
        reader.remember(text)
        return prefix + body.strip("\n")
    lines: List[str] = [first] if first else []
    entered = [text]
    while True:
        line = reader.read_line(CONTINUATION, continuation=True)
        entered.append(line)
        if _closes_block(line):
            last = line.rstrip()[:-len(BLOCK_QUOTE)]
            if last:
                lines.append(last)
            break
        lines.append(line)
    reader.remember("\n".join(entered))
    return prefix + "\n".join(lines)


class quiet_typing:
    """While an answer streams: what is typed is not echoed into it (the terminal's echo is off)
    and is dropped when the answer ends, so it neither lands in the answer on screen nor
    surprises the next prompt; Ctrl+C still interrupts (signals stay on). No-op when stdin is
    not a terminal."""

    def __init__(self, stream=None):
        self.stream = stream
        self.fd = -1
        self.saved = None

    def __enter__(self):
        import sys

        try:
            import termios

            self.fd = (self.stream or sys.stdin).fileno()
            if not os.isatty(self.fd):
                return self
            self.saved = termios.tcgetattr(self.fd)
            quiet = termios.tcgetattr(self.fd)
            quiet[3] &= ~(termios.ECHO | termios.ICANON)
            termios.tcsetattr(self.fd, termios.TCSANOW, quiet)
        except (ImportError, OSError, ValueError):  # not a POSIX terminal
            self.saved = None
        return self

    def __exit__(self, *exc):
        if self.saved is not None:
            import termios

            try:
                termios.tcflush(self.fd, termios.TCIFLUSH)  # what was typed meanwhile goes
                termios.tcsetattr(self.fd, termios.TCSANOW, self.saved)
            except OSError:
                pass
        return False
