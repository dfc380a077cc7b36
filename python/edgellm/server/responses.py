"""OpenAI response shapes (chat, legacy completions, their stream chunks) built from the engine's
CompletionChunks, plus llama-server's `timings` object."""
import time
import uuid
from typing import Any, Dict, List, Optional

from starlette.responses import JSONResponse

from .lifecycle import Encoder
from .progress import progress_of, progress_timings, prompt_progress
from .sse import DONE

JSON = Dict[str, Any]


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex}"


def timings(t: Optional[dict]) -> Optional[JSON]:
    """llama-server's timings, filling the per-token figures the engine may leave out."""
    if not t:
        return None
    out = dict(t)
    for kind in ("prompt", "predicted"):
        n, ms = out.get(f"{kind}_n"), out.get(f"{kind}_ms")
        if n is not None and ms is not None:
            out.setdefault(f"{kind}_per_token_ms", ms / n if n else 0.0)
            out.setdefault(f"{kind}_per_second", 1e3 * n / ms if ms else 0.0)
    return out


def _top(tl) -> JSON:
    return {"token": tl.token, "logprob": tl.logprob, "bytes": list(tl.bytes)}


def chat_logprobs(items) -> List[JSON]:
    """`logprobs.content` entries: token, logprob, bytes and the top alternatives."""
    return [{**_top(t), "top_logprobs": [_top(x) for x in (t.top_logprobs or [])]}
            for t in items]


def legacy_logprobs(items, offset: int) -> JSON:
    """The completions API's parallel arrays; `offset` is where the first token's text starts."""
    out = {"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []}
    for t in items:
        out["tokens"].append(t.token)
        out["token_logprobs"].append(t.logprob)
        out["top_logprobs"].append({x.token: x.logprob for x in (t.top_logprobs or [])})
        out["text_offset"].append(offset)
        offset += len(t.token)
    return out


class Choice:
    """One completion being assembled from its chunks."""

    def __init__(self, index: int, prefix: str = ""):
        self.index = index
        self.prefix = prefix         # the echoed prompt (completions with echo)
        self.parts: List[str] = [prefix] if prefix else []
        self.logprobs: list = []
        self.finish_reason: Optional[str] = None
        self.usage = None
        self.timings: Optional[dict] = None
        self.streamed_len = 0        # characters sent so far (legacy text_offset)
        self.started = False         # the first event of this choice has been sent
        self.message = None          # chat: the parsed message so far (ChatDelta)

    def add(self, chunk) -> None:
        if chunk.text:
            self.parts.append(chunk.text)
        delta = getattr(chunk, "delta", None)
        if delta is not None:
            if self.message is None:
                from edgellm.chat_output import ChatDelta
                self.message = ChatDelta()
            self.message.extend(delta)
        if chunk.logprobs:
            self.logprobs.extend(chunk.logprobs)
        if chunk.finish_reason is not None:
            self.finish_reason = chunk.finish_reason
        if chunk.usage is not None:
            self.usage = chunk.usage
        if chunk.timings:
            self.timings = chunk.timings

    @property
    def text(self) -> str:
        return "".join(self.parts)

    def chat_message(self) -> JSON:
        """The assistant message: parsed content, reasoning and tool calls."""
        m = self.message
        if m is None:
            return {"role": "assistant", "content": self.text}
        calls = _merged_calls(m.tool_calls)
        out: JSON = {"role": "assistant", "content": m.content if (m.content or not calls) else None}
        if m.reasoning:
            out["reasoning_content"] = m.reasoning
        if calls:
            out["tool_calls"] = calls
        return out


def _merged_calls(deltas) -> List[JSON]:
    calls: List[JSON] = []
    for d in deltas:
        if d.id is not None or d.index >= len(calls):
            calls.append({"id": d.id, "type": "function",
                          "function": {"name": d.name or "", "arguments": d.arguments}})
        else:
            calls[d.index]["function"]["arguments"] += d.arguments
    return calls


def usage(choices: List[Choice], prompts: int = 1) -> Optional[JSON]:
    """Prompt tokens once per prompt (the n completions of one prompt share it), completion
    tokens summed over every choice."""
    done = [c for c in choices if c.usage is not None]
    if not done:
        return None
    per_prompt: Dict[int, int] = {}
    cached: Dict[int, int] = {}
    n = max(1, len(choices) // max(1, prompts))
    for c in done:
        per_prompt[c.index // n] = c.usage.prompt_tokens
        cached[c.index // n] = getattr(c.usage, "cached_tokens", 0) or 0
    prompt = sum(per_prompt.values())
    completion = sum(c.usage.completion_tokens for c in done)
    return {"prompt_tokens": prompt, "completion_tokens": completion,
            "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": sum(cached.values())}}


class OpenAIEncoder(Encoder):
    """A chat or legacy completion request's answer: one JSON body, or its stream of chunks
    (a chat choice opens with a role chunk; prompt_progress and running timings as llama-server
    sends them; the usage chunk and [DONE] at the end)."""

    def __init__(self, kind: str, req, prompts: int, model: str, fingerprint: str,
                 verbose_prompt: Optional[str] = None):
        self.kind = kind  # "chat" | "completion"
        self.head = {"id": new_id("chatcmpl" if kind == "chat" else "cmpl"), "object": None,
                     "created": int(time.time()), "model": model,
                     "system_fingerprint": fingerprint}
        self.obj = "chat.completion.chunk" if kind == "chat" else "text_completion"
        self.req = req
        self.prompts = prompts
        self.verbose_prompt = verbose_prompt
        echo = req.prompts if req.echo else None
        self.choices = {i: Choice(i, echo[i // req.n] if echo else "")
                        for i in range(prompts * req.n)}
        self.want_logprobs = req.logprobs if kind == "chat" else "logprobs" in req.sampling
        # timings_per_token (llama-server): each chunk carries the figures so far; the
        # prompt's are known once the first token is out (prompt_ms = time to it)
        self.per_token = bool(req.extra.get("timings_per_token"))
        self.clock = {"start": time.monotonic(), "first": None, "n": 0}

    def _head(self, obj: str, choices: list) -> JSON:
        return {**self.head, "object": obj, "choices": choices}

    def _ordered(self) -> List[Choice]:
        return [self.choices[i] for i in sorted(self.choices)]

    def _totals(self, out: JSON) -> JSON:
        ordered = self._ordered()
        out["usage"] = usage(ordered, self.prompts)
        first = next((c.timings for c in ordered if c.timings), None)
        if first:
            out["timings"] = timings(first)  # llama-server sends them with the usage
        return out

    # --- the whole answer ------------------------------------------------------------------------
    def add(self, index: int, chunk) -> None:
        self.choices[index].add(chunk)

    def response(self) -> JSONResponse:
        ordered, lp = self._ordered(), self.want_logprobs
        if self.kind == "chat":
            body = self._head("chat.completion", [{
                "index": c.index, "message": self._legacy(c.chat_message()),
                "logprobs": {"content": chat_logprobs(c.logprobs), "refusal": None} if lp else None,
                "finish_reason": self._finish(c.finish_reason)} for c in ordered])
        else:
            body = self._head("text_completion", [{
                "index": c.index, "text": c.text,
                "logprobs": legacy_logprobs(c.logprobs, len(c.prefix)) if lp else None,
                "finish_reason": c.finish_reason} for c in ordered])
        self._totals(body)
        if self.verbose_prompt is not None:
            body["__verbose"] = {"prompt": self.verbose_prompt,
                                 "content": ordered[0].text if ordered else ""}
        return JSONResponse(body)

    # --- the stream ----------------------------------------------------------------------------
    def start(self):
        self.clock["start"] = time.monotonic()
        return ()

    def events(self, index: int, chunk) -> List[JSON]:
        choice, out = self.choices[index], []
        parsed = getattr(chunk, "delta", None)
        has_text = bool(parsed) if parsed is not None else bool(chunk.text)
        progress = progress_of(chunk)
        if progress is not None:  # return_progress: llama-server's prompt_progress chunk
            out.append(self._progress_chunk(choice, progress))
        elif self.kind == "chat" and not choice.started:
            # chat: a first chunk of its own says the role (content null), as OpenAI and
            # llama-server stream it
            out.append(self._role_chunk(choice))
        if progress is None and (has_text or chunk.finish_reason is not None
                                 or chunk.logprobs or not choice.started):
            event = self._chunk(choice, chunk)
            if self.per_token and "timings" not in event:
                event["timings"] = self._running_timings(chunk)
            out.append(event)
        return out

    def finish(self):
        if self.req.include_usage:
            return [self._totals(self._head(self.obj, [])), DONE]
        return [DONE]

    def _event(self, body: JSON) -> JSON:
        out = self._head(self.obj, [body])
        if self.req.include_usage:
            out["usage"] = None  # OpenAI: null on every chunk but the final usage chunk
        return out

    def _chunk(self, choice: Choice, chunk) -> JSON:
        """The event for one engine chunk of `choice` (already added to it)."""
        lp = self.want_logprobs
        if self.kind == "chat":
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
            body = {"index": choice.index, "delta": self._legacy(delta),
                    "logprobs": ({"content": chat_logprobs(chunk.logprobs or []), "refusal": None}
                                 if lp else None),
                    "finish_reason": self._finish(chunk.finish_reason)}
        else:
            text = chunk.text
            if not choice.started:
                choice.started = True
                text = choice.prefix + text
            start = choice.streamed_len + len(text) - len(chunk.text)
            body = {"index": choice.index, "text": text,
                    "logprobs": legacy_logprobs(chunk.logprobs or [], start) if lp else None,
                    "finish_reason": chunk.finish_reason}
            choice.streamed_len += len(text)
        out = self._event(body)
        if chunk.finish_reason is not None and chunk.timings:
            out["timings"] = timings(chunk.timings)
        return out

    def _legacy(self, message: JSON) -> JSON:
        """A request with the legacy `functions` is answered in their shape: the (one) call as
        `function_call`."""
        if self.req.legacy_functions and "tool_calls" in message:
            message["function_call"] = message.pop("tool_calls")[0]["function"]
        return message

    def _finish(self, reason: Optional[str]) -> Optional[str]:
        return "function_call" if reason == "tool_calls" and self.req.legacy_functions else reason

    def _role_chunk(self, choice: Choice) -> JSON:
        """A chat stream's first event: the role, no content yet."""
        choice.started = True
        return self._event({"index": choice.index, "delta": {"role": "assistant", "content": None},
                            "logprobs": None, "finish_reason": None})

    def _progress_chunk(self, choice: Choice, progress) -> JSON:
        # chat: a role delta (content null), as llama-server sends each progress update;
        # completions: empty text. Neither starts the choice's text.
        if self.kind == "chat":
            event = self._role_chunk(choice)
        else:
            event = self._event({"index": choice.index, "text": "", "logprobs": None,
                                 "finish_reason": None})
        if self.per_token:
            event["timings"] = progress_timings(progress)
        event["prompt_progress"] = prompt_progress(progress)
        return event

    def _running_timings(self, chunk) -> JSON:
        clock, now = self.clock, time.monotonic()
        clock["n"] += len(chunk.token_ids or ())
        if clock["first"] is None:
            clock["first"] = now
        prompt_ms = 1e3 * (clock["first"] - clock["start"])
        gen_ms = 1e3 * (now - clock["first"])
        n = clock["n"]
        return {"prompt_ms": prompt_ms, "predicted_n": n, "predicted_ms": gen_ms,
                "predicted_per_token_ms": gen_ms / (n - 1) if n > 1 else 0.0,
                "predicted_per_second": 1e3 * (n - 1) / gen_ms if n > 1 and gen_ms > 0 else 0.0}
