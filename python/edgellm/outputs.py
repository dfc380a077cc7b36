"""What a request returns: `Completion` / `ChatCompletion`, the `CompletionChunk`s of a stream,
their `Usage` and per-token `TokenLogprob`s."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Union

__all__ = ["TopLogprob", "TokenLogprob", "Usage", "Completion", "CompletionChunk", "ChatCompletion"]


@dataclass
class TopLogprob:
    token_id: int
    token: str
    logprob: float
    bytes: List[int]


@dataclass
class TokenLogprob:
    token_id: int
    token: str
    logprob: float
    bytes: List[int]
    top_logprobs: List[TopLogprob]


@dataclass
class Usage:
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    cached_tokens: int = 0


@dataclass
class Completion:
    text: str
    token_ids: List[int]
    finish_reason: str                      # "stop" | "length" | "cancelled"
    usage: Usage
    logprobs: Optional[List[TokenLogprob]] = None
    prompt_logprobs: Optional[list] = None  # [None, TokenLogprob, ...]: one per prompt token
    index: int = 0
    stop_reason: Union[None, int, str] = None
    timings: Dict[str, float] = field(default_factory=dict)


@dataclass
class CompletionChunk:
    text: str
    token_ids: List[int]
    index: int = 0
    logprobs: Optional[List[TokenLogprob]] = None
    finish_reason: Optional[str] = None
    usage: Optional[Usage] = None
    timings: Optional[Dict[str, float]] = None
    stop_reason: Union[None, int, str] = None
    prompt_logprobs: Optional[list] = None
    delta: Any = None  # chat streams: the parsed edgellm.chat_output.ChatDelta of `text`
    # return_progress: {total, cache, processed, time_ms} on a prefill-progress chunk (no text,
    # no tokens); None on every other chunk
    progress: Optional[Dict[str, Any]] = None


@dataclass
class ChatCompletion(Completion):
    """A chat answer: `text` is the raw model output; `content`, `reasoning_content` and
    `tool_calls` are what it means under the model's chat format (edgellm.chat_output).
    finish_reason is "tool_calls" when the model ended its turn with calls."""
    content: Optional[str] = None
    reasoning_content: Optional[str] = None
    tool_calls: Optional[list] = None  # [edgellm.chat_output.ToolCall]
