"""OpenAI's answers -- chat and legacy completions, whole or as stream chunks -- as typed models
(the response schemas of /openapi.json), built from the engine's CompletionChunks."""
import itertools
import time
from typing import Any, Dict, List, Literal, Optional

from pydantic import Field
from starlette.responses import JSONResponse

from .answer_items import Answer
from .lifecycle import Encoder
from .progress import progress_of, progress_timings, prompt_progress, running_timings, timings
from .sse import DONE
from .wire import Sparse, new_id, shape

JSON = Dict[str, Any]


# --- the shapes ----------------------------------------------------------------------------------
Top = shape("TopLogprob", token=str, logprob=float, bytes=List[int])
TokenLogprob = shape("TokenLogprob", Top, top_logprobs=List[Top])
ChatLogprobs = shape("ChatLogprobs", content=List[TokenLogprob], refusal=(Optional[str], None))
LegacyLogprobs = shape("LegacyLogprobs", tokens=List[str], token_logprobs=List[Optional[float]],
                       top_logprobs=List[Dict[str, float]], text_offset=List[int])
Function = shape("FunctionCall", name=str, arguments=str)
ToolCall = shape("ToolCall", id=Optional[str], type=(Literal["function"], "function"),
                 function=Function)
_Extras = dict(reasoning_content=(Optional[str], None), function_call=(Optional[JSON], None))
Message = shape("ChatMessage", Sparse, role=(Literal["assistant"], "assistant"),
                content=Optional[str], tool_calls=(Optional[List[ToolCall]], None), **_Extras)
Delta = shape("ChatDelta", Sparse, role=(Optional[Literal["assistant"]], None),
              content=(Optional[str], None), tool_calls=(Optional[List[JSON]], None), **_Extras)
_Choice = dict(index=int, finish_reason=Optional[str])
ChatChoice = shape("ChatChoice", message=Message, logprobs=Optional[ChatLogprobs], **_Choice)
ChunkChoice = shape("ChatChunkChoice", delta=Delta, logprobs=Optional[ChatLogprobs], **_Choice)
TextChoice = shape("TextChoice", text=str, logprobs=Optional[LegacyLogprobs], **_Choice)
Usage = shape("CompletionUsage", prompt_tokens=int, completion_tokens=int, total_tokens=int,
              prompt_tokens_details=shape("PromptTokensDetails", cached_tokens=int))
def _answer(name: str, obj: str, choice: type, **extra) -> type:
    """A whole answer or a stream chunk: usage (null on every chunk but the last when asked
    for); llama-server's timings, prompt_progress and __verbose where asked for."""
    return shape(name, Sparse, id=str, object=(Literal[obj], obj), created=int, model=str,
                 system_fingerprint=str, choices=List[choice], usage=(Optional[Usage], None),
                 timings=(Optional[JSON], None), **extra)


_Verbose = (Optional[JSON], Field(None, alias="__verbose"))
ChatCompletion = _answer("ChatCompletion", "chat.completion", ChatChoice, verbose=_Verbose)
ChatChunk = _answer("ChatCompletionChunk", "chat.completion.chunk", ChunkChoice,
                    prompt_progress=(Optional[JSON], None))
TextCompletion = _answer("TextCompletion", "text_completion", TextChoice,
                         prompt_progress=(Optional[JSON], None), verbose=_Verbose)

def _top(tl) -> JSON:
    return {"token": tl.token, "logprob": tl.logprob, "bytes": list(tl.bytes)}


def chat_logprobs(items) -> JSON:
    """`logprobs`: per token, its logprob, bytes and the top alternatives."""
    return {"content": [{**_top(t), "top_logprobs": [_top(x) for x in (t.top_logprobs or [])]}
                        for t in items]}


def legacy_logprobs(items, offset: int) -> JSON:
    """The completions API's parallel arrays; `offset` is where the first token's text starts."""
    return {"tokens": [t.token for t in items], "token_logprobs": [t.logprob for t in items],
            "top_logprobs": [{x.token: x.logprob for x in (t.top_logprobs or [])} for t in items],
            "text_offset": list(itertools.accumulate((len(t.token) for t in items),
                                                     initial=offset))[:-1]}


def chat_message(c: Answer) -> JSON:
    """The assistant message: parsed content, reasoning and tool calls."""
    m = c.message
    if m is None:
        return {"content": c.text}
    calls: List[JSON] = []
    for d in m.tool_calls:  # the pieces of each call merged
        if d.id is not None or d.index >= len(calls):
            calls.append({"id": d.id, "function": {"name": d.name or "", "arguments": d.arguments}})
        else:
            calls[d.index]["function"]["arguments"] += d.arguments
    out: JSON = {"content": m.content if (m.content or not calls) else None}
    if m.reasoning:
        out["reasoning_content"] = m.reasoning
    if calls:
        out["tool_calls"] = calls
    return out


def usage(choices: List[Answer], prompts: int = 1) -> Optional[JSON]:
    """Prompt tokens once per prompt (the n completions of one prompt share it), completion
    tokens summed over every choice."""
    done = [c for c in choices if c.usage is not None]
    if not done:
        return None
    n = max(1, len(choices) // max(1, prompts))
    per_prompt = {c.index // n: (c.usage.prompt_tokens, getattr(c.usage, "cached_tokens", 0) or 0)
                  for c in done}
    prompt = sum(p for p, _ in per_prompt.values())
    completion = sum(c.usage.completion_tokens for c in done)
    return {"prompt_tokens": prompt, "completion_tokens": completion,
            "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": sum(k for _, k in per_prompt.values())}}


class OpenAIEncoder(Encoder):
    """A chat or legacy completion request's answer: one JSON body, or its stream of chunks
    (a chat choice opens with a role chunk; prompt_progress and running timings as llama-server
    sends them; the usage chunk and [DONE] at the end)."""

    def __init__(self, kind: str, req, prompts: int, model: str, fingerprint: str,
                 verbose_prompt: Optional[str] = None):
        self.chat = kind == "chat"
        self.head = {"id": new_id("chatcmpl-" if self.chat else "cmpl-"),
                     "created": int(time.time()), "model": model,
                     "system_fingerprint": fingerprint}
        self.Chunk = ChatChunk if self.chat else TextCompletion
        self.req, self.prompts, self.verbose_prompt = req, prompts, verbose_prompt
        echo = req.prompts if req.echo else None
        self.choices = [Answer(i, prefix=echo[i // req.n] if echo else "")
                        for i in range(prompts * req.n)]  # in choice order
        self.want_logprobs = req.logprobs if self.chat else "logprobs" in req.sampling
        # timings_per_token (llama-server): each chunk carries the figures so far; the
        # prompt's are known once the first token is out (prompt_ms = time to it)
        self.per_token = bool(req.extra.get("timings_per_token"))
        self.t0 = time.monotonic()

    def _totals(self) -> JSON:
        first = next((c.timings for c in self.choices if c.timings), None)
        # llama-server sends the timings with the usage
        return {"usage": usage(self.choices, self.prompts),
                **({"timings": timings(first)} if first else {})}

    # --- the whole answer ------------------------------------------------------------------------
    def add(self, index: int, chunk) -> None:
        self.choices[index].add(chunk)

    def response(self) -> JSONResponse:
        ordered, lp = self.choices, self.want_logprobs
        if self.chat:
            body = ChatCompletion(**self.head, choices=[{
                "index": c.index, "message": self._legacy(chat_message(c)),
                "logprobs": chat_logprobs(c.logprobs) if lp else None,
                "finish_reason": self._finish(c.finish_reason)} for c in ordered],
                **self._totals())
        else:
            body = TextCompletion(**self.head, choices=[{
                "index": c.index, "text": c.text,
                "logprobs": legacy_logprobs(c.logprobs, len(c.prefix)) if lp else None,
                "finish_reason": c.finish_reason} for c in ordered], **self._totals())
        if self.verbose_prompt is not None:
            body.verbose = {"prompt": self.verbose_prompt,
                            "content": ordered[0].text if ordered else ""}
        return JSONResponse(body.model_dump(by_alias=True))

    # --- the stream ----------------------------------------------------------------------------
    def start(self):
        self.t0 = time.monotonic()
        return ()

    def events(self, index: int, chunk) -> List[JSON]:
        choice, out = self.choices[index], []
        parsed = getattr(chunk, "delta", None)
        has_text = bool(parsed) if parsed is not None else bool(chunk.text)
        progress = progress_of(chunk)
        if progress is not None:  # return_progress: llama-server's prompt_progress chunk
            # chat: a role delta (content null), as llama-server sends each progress update;
            # completions: empty text. Neither starts the choice's text.
            out.append(self._event(self._role(choice) if self.chat else
                                   {"index": index, "text": "", "logprobs": None,
                                    "finish_reason": None},
                                   prompt_progress=prompt_progress(progress),
                                   **({"timings": progress_timings(progress)}
                                      if self.per_token else {})))
        elif self.chat and not choice.started:
            # chat: a first chunk of its own says the role (content null), as OpenAI and
            # llama-server stream it
            out.append(self._event(self._role(choice)))
        if progress is None and (has_text or chunk.finish_reason is not None
                                 or chunk.logprobs or not choice.started):
            out.append(self._chunk(choice, chunk))
        return out

    def finish(self):
        if self.req.include_usage:
            return [self.Chunk(**self.head, choices=[], **self._totals())
                    .model_dump(), DONE]
        return [DONE]

    def _event(self, choice: JSON, **extra) -> JSON:
        if self.req.include_usage:
            extra.setdefault("usage", None)  # OpenAI: null on every chunk but the usage chunk
        return self.Chunk(**self.head, choices=[choice], **extra).model_dump()

    def _chunk(self, choice: Answer, chunk) -> JSON:
        """The event for one engine chunk of `choice` (already added to it)."""
        lp, extra = self.want_logprobs, {}
        if chunk.finish_reason is not None and chunk.timings:
            extra["timings"] = timings(chunk.timings)
        elif self.per_token:
            t = running_timings(self.t0, choice.t_first, len(choice.tokens))
            extra["timings"] = {k: v for k, v in t.items()
                                if k.startswith("predicted") or k == "prompt_ms"}
        if self.chat:
            delta: JSON = {}
            if not choice.started:
                choice.started = True
                delta["role"] = "assistant"
            parsed = getattr(chunk, "delta", None)
            # The role chunk says content null, not "", when it has no text (as llama-server;
            # llama.cpp's clients treat a non-null content delta as text).
            if parsed is None:
                if chunk.text or "role" in delta:
                    delta["content"] = chunk.text or None
            else:
                if parsed.content or ("role" in delta and not parsed.tool_calls):
                    delta["content"] = parsed.content or None
                if parsed.reasoning:
                    delta["reasoning_content"] = parsed.reasoning
                if parsed.tool_calls:
                    delta["tool_calls"] = [d.to_openai() for d in parsed.tool_calls]
            return self._event({"index": choice.index, "delta": self._legacy(delta),
                                "logprobs": chat_logprobs(chunk.logprobs or []) if lp else None,
                                "finish_reason": self._finish(chunk.finish_reason)}, **extra)
        text = chunk.text
        if not choice.started:
            choice.started = True
            text = choice.prefix + text
        start = choice.streamed_len + len(text) - len(chunk.text)
        choice.streamed_len += len(text)
        return self._event({"index": choice.index, "text": text,
                            "logprobs": legacy_logprobs(chunk.logprobs or [], start) if lp else None,
                            "finish_reason": chunk.finish_reason}, **extra)

    def _legacy(self, message: JSON) -> JSON:
        """A request with the legacy `functions` is answered in their shape: the (one) call as
        `function_call`."""
        if self.req.legacy_functions and "tool_calls" in message:
            message["function_call"] = message.pop("tool_calls")[0]["function"]
        return message

    def _finish(self, reason: Optional[str]) -> Optional[str]:
        return "function_call" if reason == "tool_calls" and self.req.legacy_functions else reason

    @staticmethod
    def _role(choice: Answer) -> JSON:
        """A chat stream's first event: the role, no content yet."""
        choice.started = True
        return {"index": choice.index, "delta": {"role": "assistant", "content": None},
                "logprobs": None, "finish_reason": None}
