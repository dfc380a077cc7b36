"""The conversation a REPL session holds: an optional system prompt and the user/assistant
turns after it, plus the two operations that reshape it -- dropping the oldest turns when the
rendered prompt outgrows the context, and saving/loading it as JSON.

The system prompt is kept apart from the turns so that /clear and context trimming can never
lose it, and so /set system can replace it at any point in the conversation.
"""
from __future__ import annotations

import json
import os
from typing import Any, Callable, Dict, List, Mapping, Optional

__all__ = ["Conversation", "ConversationFileError", "ContextOverflow", "FORMAT"]

FORMAT = "edgellm-conversation"  # the "format" tag of a saved conversation file
_VERSION = 1


class ConversationFileError(ValueError):
    """A conversation file that cannot be read or written; the message names the file."""


class ContextOverflow(ValueError):
    """Even the newest message alone (with the system prompt and the answer's room) does not fit."""


class Conversation:
    def __init__(self, system: Optional[str] = None, messages: Optional[List[Dict[str, str]]] = None):
        self.system: Optional[str] = system or None
        self.messages: List[Dict[str, str]] = list(messages or [])

    # ---- the messages the model sees ----
    def rendered(self) -> List[Dict[str, str]]:
        head = [{"role": "system", "content": self.system}] if self.system else []
        return head + [dict(m) for m in self.messages]

    def add(self, role: str, content: str) -> None:
        self.messages.append({"role": role, "content": content})

    def clear(self) -> None:
        """Forget the turns; the system prompt stays (Ollama's /clear)."""
        self.messages.clear()

    def last_user_index(self) -> Optional[int]:
        for i in range(len(self.messages) - 1, -1, -1):
            if self.messages[i]["role"] == "user":
                return i
        return None

    def rewind_last_answer(self) -> bool:
        """For /regen: drop the last assistant answer (and anything after the user message it
        answered) so the conversation ends with that user message again. False if there is no
        answered user message."""
        i = self.last_user_index()
        if i is None or i == len(self.messages) - 1:
            return False
        del self.messages[i + 1:]
        return True

    # ---- fitting into the context ----
    def drop_oldest_until(self, fits: Callable[[List[Dict[str, str]]], bool]) -> int:
        """Drop the oldest turns until `fits(self.rendered())`; returns how many messages went.

        A turn is a user message and the answers after it, so the conversation still starts
        with a user message (several chat templates insist on alternation). The newest user
        message is never dropped: when it alone does not fit, ContextOverflow is raised and
        the conversation is left as it was.
        """
        if fits(self.rendered()):
            return 0
        kept = list(self.messages)
        dropped = 0
        while True:
            starts = [i for i, m in enumerate(kept) if m["role"] == "user"]
            if len(starts) < 2:
                raise ContextOverflow(
                    "the message is too long for the context even without earlier turns")
            cut = starts[1]
            dropped += cut
            kept = kept[cut:]
            trial = Conversation(self.system, kept)
            if fits(trial.rendered()):
                self.messages = kept
                return dropped

    # ---- saving and loading ----
    def to_json(self, parameters: Optional[Mapping[str, Any]] = None, model: Optional[str] = None) -> dict:
        doc: Dict[str, Any] = {"format": FORMAT, "version": _VERSION}
        if model:
            doc["model"] = model
        doc["system"] = self.system
        doc["messages"] = [dict(m) for m in self.messages]
        doc["parameters"] = dict(parameters or {})
        return doc

    def save(self, path: str, parameters: Optional[Mapping[str, Any]] = None,
             model: Optional[str] = None) -> None:
        doc = self.to_json(parameters, model)
        path = os.path.expanduser(path)
        tmp = f"{path}.tmp{os.getpid()}"
        try:
            with open(tmp, "w", encoding="utf-8") as f:
                json.dump(doc, f, ensure_ascii=False, indent=2)
                f.write("\n")
            os.replace(tmp, path)  # never leave a half-written conversation behind
        except OSError as e:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise ConversationFileError(f"cannot write {path}: {e.strerror or e}") from None

    @classmethod
    def load(cls, path: str) -> "tuple[Conversation, Any]":
        """(conversation, the file's raw 'parameters' value) from a saved file."""
        path = os.path.expanduser(path)
        try:
            with open(path, encoding="utf-8") as f:
                doc = json.load(f)
        except OSError as e:
            raise ConversationFileError(f"cannot read {path}: {e.strerror or e}") from None
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise ConversationFileError(f"{path} is not a JSON conversation: {e}") from None
        return cls.from_json(doc, path), doc.get("parameters")

    @classmethod
    def from_json(cls, doc: Any, where: str) -> "Conversation":
        if not isinstance(doc, Mapping):
            raise ConversationFileError(f"{where}: expected a JSON object with 'messages'")
        if doc.get("format", FORMAT) != FORMAT:
            raise ConversationFileError(f"{where}: format {doc.get('format')!r} is not {FORMAT!r}")
        system = doc.get("system")
        if system is not None and not isinstance(system, str):
            raise ConversationFileError(f"{where}: 'system' must be a string or null")
        raw = doc.get("messages")
        if not isinstance(raw, list):
            raise ConversationFileError(f"{where}: 'messages' must be a list")
        messages = []
        for i, m in enumerate(raw):
            content = m.get("content") if isinstance(m, Mapping) else None
            parts = isinstance(content, list) and all(isinstance(p, Mapping) for p in content)
            if not (isinstance(content, str) or parts) or m.get("role") not in ("system", "user", "assistant"):
                raise ConversationFileError(
                    f"{where}: messages[{i}] must be {{'role': 'user'|'assistant'|'system', "
                    "'content': string (or content parts: a message with images)}")
            if m["role"] == "system":
                # A file written by another tool may carry the system prompt as a message.
                if system is None:
                    system = m["content"]
                continue
            messages.append({"role": m["role"], "content": m["content"]})
        return cls(system, messages)
