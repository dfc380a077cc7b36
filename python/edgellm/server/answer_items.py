"""An answer assembled from its engine chunks (`Answer`: every API's encoder keeps one a
choice), and its items -- reasoning, text, tool calls -- assembled from the chat API's ChatDeltas:
the state both the Anthropic and the Responses builders keep; each makes its own items and
stream events (`begin`, `extend`, `extend_call`, `end`).

Items follow the order the model writes them; a new kind of piece closes the open item.
Whitespace-only text between items (the newline after </think> or before a tool call) starts no
item: it is held back, and goes to the next text item where `keep_held()` says so. A tool call's
pieces find their item by the chat API's call index; arguments of a call continued after
another item began still join it, without an event (a stream cannot reopen an item).
"""
import time
from typing import Any, Dict, List, Optional, Union

from edgellm.chat_output import ChatDelta

JSON = Dict[str, Any]


class Answer:
    """One completion (choice `index`, of `prompt_ids`) being assembled from its chunks; `prefix`
    is the echoed prompt (legacy completions with echo)."""

    def __init__(self, index: int, prompt_ids: Optional[List[int]] = None, prefix: str = ""):
        self.index, self.prompt_ids, self.prefix = index, prompt_ids or [], prefix
        self.parts: List[str] = [prefix] if prefix else []
        self.tokens: List[int] = []
        self.logprobs: list = []
        self.finish_reason: Optional[str] = None
        self.stop_reason: Any = None
        self.usage = self.timings = None
        self.t_first: Optional[float] = None  # monotonic time of the first token
        self.message: Optional[ChatDelta] = None  # the parsed chat message so far, if any
        self.streamed_len = 0        # characters sent so far (legacy text_offset)
        self.started = False         # the first event of this choice has been sent

    def add(self, chunk) -> None:
        if chunk.text:
            self.parts.append(chunk.text)
        if chunk.token_ids:
            self.t_first = self.t_first or time.monotonic()
            self.tokens.extend(int(t) for t in chunk.token_ids)
        delta = getattr(chunk, "delta", None)
        if delta is not None:
            if self.message is None:
                self.message = ChatDelta()
            self.message.extend(delta)
        if chunk.logprobs:
            self.logprobs.extend(chunk.logprobs)
        if chunk.finish_reason is not None:
            self.finish_reason = chunk.finish_reason
            self.stop_reason = getattr(chunk, "stop_reason", None)
        if chunk.usage is not None:
            self.usage = chunk.usage
        if chunk.timings:
            self.timings = chunk.timings

    @property
    def text(self) -> str:
        return "".join(self.parts)


class ItemAssembler:
    def __init__(self, items: Optional[list] = None):
        self.items: list = [] if items is None else items
        self.open: Union[str, tuple, None] = None  # "reasoning" | "text" | ("call", index)
        self.held = ""                             # whitespace text not yet given an item
        self.calls: Dict[int, int] = {}            # the chat API's call index -> item position

    def feed(self, delta: ChatDelta) -> List[JSON]:
        """The stream events of one delta."""
        events: List[JSON] = []
        if delta.reasoning:
            events += self._piece("reasoning", delta.reasoning)
        if delta.content:
            events += self._piece("text", delta.content)
        for tc in delta.tool_calls or ():
            events += self._call(tc)
        return events

    def _piece(self, kind: str, text: str) -> List[JSON]:
        events: List[JSON] = []
        if self.open != kind:
            if kind == "text" and not text.strip():
                self.held += text
                return events
            events = self._open_item(kind)
            if kind == "text":
                text, self.held = (self.held + text if self.keep_held() else text), ""
        return events + self.extend(len(self.items) - 1, kind, text)

    def _call(self, tc) -> List[JSON]:
        key, pos, events = ("call", tc.index), self.calls.get(tc.index), []
        if pos is None or (self.open != key and (tc.id is not None or tc.name is not None)):
            self.held = ""
            events = self._open_item(key, tc)
            pos = self.calls[tc.index] = len(self.items) - 1
        return events + self.extend_call(pos, tc, live=self.open == key
                                         and pos == len(self.items) - 1)

    def _open_item(self, key, tc=None) -> List[JSON]:
        events = self.close_item()
        events += self.begin("call" if isinstance(key, tuple) else key, tc)
        self.open = key
        return events

    def close_item(self, status: str = "completed") -> List[JSON]:
        if self.open is None:
            return []
        self.open = None
        return self.end(len(self.items) - 1, status)

    # -- what a builder supplies --
    def keep_held(self) -> bool:
        """Whether held whitespace goes to the text item now beginning (items[-1])."""
        return True

    def begin(self, kind: str, tc) -> List[JSON]:
        """Append a new item of `kind` (reasoning, text, call: `tc` its first piece)."""
        raise NotImplementedError

    def extend(self, pos: int, kind: str, text: str) -> List[JSON]:
        raise NotImplementedError

    def extend_call(self, pos: int, tc, live: bool) -> List[JSON]:
        """A piece of the call at `pos` (`live`: it is the open item, events may follow)."""
        raise NotImplementedError

    def end(self, pos: int, status: str) -> List[JSON]:
        raise NotImplementedError
