"""The Python API: `LLM` (blocking) and `AsyncLLM` (asyncio) over the C++ engine.

    from edgellm import LLM, SamplingParams
    llm = LLM("smollm2")                       # a path or a known model name
    print(llm.generate("The capital of France is", SamplingParams(temperature=0)).text)
    for piece in llm.stream("Once upon a time"):
        print(piece, end="", flush=True)

The engine runs on its own C++ thread and batches every request in flight (continuous
batching). Python threads only submit requests and receive their output: every wait releases
the GIL, so many threads (or one asyncio loop) can drive the same LLM at once. Breaking out of
a stream, closing its iterator or cancelling the asyncio task aborts the request in the engine,
which frees its KV pages at its next step.
"""
from __future__ import annotations

import asyncio
import functools
import inspect
import json
import os
import time
from dataclasses import dataclass, field
from typing import (Any, AsyncIterator, Dict, Iterator, List, Mapping, Optional, Sequence,
                    Union)

from . import _core
from ._core import InvalidRequestError, RequestCancelled
from .validation import token_ids, validate_messages

__all__ = [
    "SamplingParams", "TopLogprob", "TokenLogprob", "Usage", "Completion", "CompletionChunk",
    "ChatCompletion", "LLM", "AsyncLLM",
]

_POLL_S = 0.1  # a blocking wait wakes this often to let KeyboardInterrupt through
_DEFAULT_CONTEXT = 4096  # n_ctx None: min(trained, this), as the engine


# ---- request and result types ---------------------------------------------------------------

@dataclass
class SamplingParams:
    """How to sample. Defaults are llama.cpp's (common_params_sampling):

    max_tokens 128 (None: until end-of-generation or the context is full), min_tokens 0
    (end-of-generation and stop_token_ids are masked until that many tokens exist),
    temperature 0.8 (0: greedy), top_k 40 (<= 0 off), top_p 0.95, min_p 0.05, typical_p 1.0
    (off), repetition_penalty 1.0 (off) over the last repeat_last_n = 64 tokens of prompt +
    output (-1: all, 0: off), presence/frequency penalties 0, seed None (random).

    The chain runs in llama.cpp's order: logit_bias -> penalties (repetition: divide a positive
    logit, multiply a negative one; then frequency * count and presence) -> top_k -> typical_p
    -> top_p -> min_p -> temperature -> draw. Truncation sees untempered logits.

    logprobs=k returns, per generated token, its log-prob and the k most likely tokens under
    the model's distribution after logit_bias and penalties, before truncation and temperature
    (llama.cpp's n_probs, OpenAI's logprobs). prompt_logprobs=k does the same for every prompt
    token after the first (raw model distribution). With n > 1, completion i uses seed + i.
    json_schema / grammar / regex / response_format need a registered constraint factory
    (edgellm's grammar module); otherwise the request is rejected with InvalidRequestError.
    """
    max_tokens: Optional[int] = 128
    min_tokens: int = 0
    temperature: float = 0.8
    top_k: int = 40
    top_p: float = 0.95
    min_p: float = 0.05
    typical_p: float = 1.0
    repetition_penalty: float = 1.0
    repeat_last_n: int = 64
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    logit_bias: Optional[Dict[int, float]] = None
    seed: Optional[int] = None
    stop: Union[None, str, List[str]] = None
    stop_token_ids: Optional[List[int]] = None
    ignore_eos: bool = False
    logprobs: Optional[int] = None
    prompt_logprobs: Optional[int] = None
    n: int = 1
    json_schema: Union[None, dict, str] = None
    grammar: Optional[str] = None
    regex: Optional[str] = None
    response_format: Optional[dict] = None
    # Lazy constraint: free text until one of these strings appears in the output, then the
    # grammar (which starts by matching the trigger). Used for tool calls under tool_choice auto.
    grammar_triggers: Optional[List[str]] = None
    # Budget-aware closing: when the tokens left (max_tokens, or the context) would not otherwise
    # suffice, the grammar steers to the nearest complete document, so the output still parses.
    grammar_budget_close: bool = False
    # Streams only (llama-server's return_progress): while the prompt is prefilled, chunks with
    # empty text whose `progress` is {total, cache, processed, time_ms} -- one at admission
    # (processed == cache, the prefix-cache hit; time 0), then one per prefill chunk.
    return_progress: bool = False
    # Context shift (LLM(..., context_shift=True); llama-server's n_keep): when the context is
    # full, the first n_keep tokens (after a BOS the model adds) and the newer half of the rest
    # are kept and generation goes on; -1 keeps the whole prompt. No effect without the opt-in.
    # n_discard: how many tokens after the kept ones each shift drops (0: half of them).
    n_keep: int = 0
    n_discard: int = 0

    def stop_list(self) -> List[str]:
        if self.stop is None:
            return []
        return [self.stop] if isinstance(self.stop, str) else list(self.stop)

    def _schema_text(self) -> str:
        schema = self.json_schema
        rf = self.response_format
        if rf is not None:
            if not isinstance(rf, Mapping) or "type" not in rf:
                raise InvalidRequestError("response_format must be a dict with a 'type'")
            kind = rf["type"]
            if kind == "json_object":
                # llama-server's form: {"type": "json_object", "schema": {...}} is enforced too
                if schema is None:
                    schema = rf.get("schema", {"type": "object"})
            elif kind == "json_schema":
                inner = rf.get("json_schema")
                if not isinstance(inner, Mapping) or "schema" not in inner:
                    raise InvalidRequestError(
                        "response_format {'type': 'json_schema'} needs json_schema.schema")
                schema = inner["schema"]
            elif kind != "text":
                raise InvalidRequestError(f"response_format type {kind!r} is not supported "
                                          "(text, json_object, json_schema)")
        if schema is None:
            return ""
        if isinstance(schema, str):
            return schema
        try:
            return json.dumps(schema)
        except (RecursionError, ValueError, TypeError) as e:  # too deep, circular, not JSON
            raise InvalidRequestError(f"json_schema cannot be serialised to JSON: {e}") from None

    def __post_init__(self):
        self._checked()

    def _checked(self) -> Dict[str, Any]:
        """The fields after edgellm.validation's rules (the server applies the same ones):
        InvalidRequestError naming the field for a wrong type or range; ints stay ints (a
        fractional max_tokens is an error, never truncated), numbers become floats."""
        from .validation import validate_sampling

        v = validate_sampling({f: getattr(self, f) for f in self.__dataclass_fields__})
        for f in ("max_tokens", "temperature", "top_p", "min_p", "typical_p",
                  "repetition_penalty", "presence_penalty", "frequency_penalty"):
            setattr(self, f, v[f])
        return v

    def to_core(self, n_vocab: Optional[int] = None) -> "_core.SamplingParams":
        """The C++ parameters; with n_vocab, logit_bias / stop_token_ids ids are checked
        against the vocabulary here (the engine checks them again at submit)."""
        v = self._checked()
        if n_vocab is not None:
            from .validation import token_id
            for t in list(v["logit_bias"] or ()) + list(v["stop_token_ids"] or ()):
                token_id(t, "logit_bias" if t in (v["logit_bias"] or ()) else "stop_token_ids",
                         n_vocab)
        p = _core.SamplingParams()
        p.max_tokens = -1 if v["max_tokens"] is None else v["max_tokens"]
        p.min_tokens = v["min_tokens"]
        p.temperature = v["temperature"]
        p.top_k = v["top_k"]
        p.top_p = v["top_p"]
        p.min_p = v["min_p"]
        p.typical_p = v["typical_p"]
        p.repetition_penalty = v["repetition_penalty"]
        p.repeat_last_n = v["repeat_last_n"]
        p.presence_penalty = v["presence_penalty"]
        p.frequency_penalty = v["frequency_penalty"]
        if v["logit_bias"]:
            p.logit_bias = list(v["logit_bias"].items())
        if v["seed"] is not None:
            p.has_seed = True
            p.seed = v["seed"] & 0xFFFFFFFFFFFFFFFF
        p.stop = v["stop"] or []
        p.stop_token_ids = v["stop_token_ids"] or []
        p.ignore_eos = v["ignore_eos"]
        p.logprobs = -1 if v["logprobs"] is None else v["logprobs"]
        p.prompt_logprobs = -1 if v["prompt_logprobs"] is None else v["prompt_logprobs"]
        p.n = v["n"]
        p.return_progress = v["return_progress"]
        p.n_keep = v["n_keep"]
        p.n_discard = v["n_discard"]
        p.json_schema = self._schema_text()
        p.grammar = self.grammar or ""
        p.regex = self.regex or ""
        if self.grammar_triggers:
            if not (p.grammar or p.json_schema or p.regex):
                raise InvalidRequestError("grammar_triggers needs a grammar, json_schema or regex")
            p.grammar_triggers = list(v["grammar_triggers"])
        p.grammar_budget_close = v["grammar_budget_close"]
        return p


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


# ---- helpers --------------------------------------------------------------------------------

def _timings(t: Dict[str, float]) -> Dict[str, float]:
    out = dict(t)
    out["prompt_per_token_ms"] = t["prompt_ms"] / t["prompt_n"] if t.get("prompt_n") else 0.0
    out["predicted_per_token_ms"] = (t["predicted_ms"] / (t["predicted_n"] - 1)
                                     if t.get("predicted_n", 0) > 1 else 0.0)
    return out


def _usage(ev: dict) -> Usage:
    return Usage(ev["prompt_tokens"], ev["completion_tokens"],
                 ev["prompt_tokens"] + ev["completion_tokens"], ev["cached_tokens"])


def _raise_if_error(ev: dict) -> None:
    if ev.get("finished") and ev.get("finish_reason") == "error":
        raise _core.EdgeLLMError(ev.get("error") or "request failed in the engine")


class _MarkerSet:
    """`marker in vocab` without listing the whole vocabulary: one special-token lookup."""

    def __init__(self, tok):
        self._tok = tok

    def __contains__(self, text) -> bool:
        ids = self._tok.encode(text, False, True)
        return len(ids) == 1 and self._tok.token_text(ids[0]) == text


def _slot_id(slot) -> int:
    if isinstance(slot, bool) or not isinstance(slot, int) or not 0 <= slot < 2**31:
        raise InvalidRequestError(f"slot id must be a non-negative integer, got {slot!r}")
    return slot


def _is_batch(prompt) -> bool:
    """A list of prompts (strings or id lists), as opposed to one prompt given as ids."""
    return isinstance(prompt, (list, tuple)) and len(prompt) > 0 and \
        all(isinstance(p, (str, list, tuple)) for p in prompt)


def _parse_chunk(ch: "CompletionChunk", parsers: Dict[int, Any], new_parser) -> "CompletionChunk":
    """Attach the parsed ChatDelta of this chunk's text (one parser per choice index)."""
    parser = parsers.get(ch.index)
    if parser is None:
        parser = parsers[ch.index] = new_parser()
    delta = parser.feed(ch.text)
    if ch.finish_reason is not None:
        delta.extend(parser.finish())
        if parser.tool_calls and ch.finish_reason == "stop":
            ch.finish_reason = "tool_calls"
    ch.delta = delta
    return ch


# ---- LLM ------------------------------------------------------------------------------------

class LLM:
    """A model loaded into a continuous-batching engine.

    n_ctx: max tokens per sequence (default min(trained context, 4096)). kv_memory: bytes for
    the paged KV cache, one budget for all sequences and both layer groups (full attention and
    sliding window; default: two full contexts' worth of tokens, in every layer group however many
    sequences share them (KVCache::default_budget), which short requests share many
    at a time; committed as it is written; when it runs out the newest sequence is preempted and
    recomputed later). stats(): kv_bytes_used of kv_bytes_total, preemptions, pages.
    kv_type: "f16" (default), "q8_0" or "f32". max_seqs: sequences decoded together.
    max_batch_tokens: tokens per forward pass (prompt chunks + one per decoding sequence).
    page_size: KV page size in tokens (16..64).
    n_gpu_layers: the last N layers run on a CUDA GPU (-1 = all; CUDA builds only). Without CUDA
    or a usable GPU, a warning says why and the model runs on the CPU; `self.n_gpu_layers` holds
    the layers actually offloaded.

    Speculative decoding (several tokens verified per forward pass; greedy output is the model's
    own, sampled output keeps its distribution): speculative "auto" (default) drafts from the
    request's own history (n-gram / prompt lookup) and, with draft_model, from that model too;
    "ngram" uses the history only, "draft" the draft model only, "off" neither. draft_model: a
    GGUF path or known model name with the same vocabulary (refused with InvalidRequestError
    otherwise), loaded with the same threads. num_speculative_tokens: most tokens drafted per
    step (1..64; None: the engine's default, 32 n-gram / 8 draft-model tokens). Drafting is adaptive per sequence: it stops where
    acceptance would not pay (spec_adaptive=False always drafts the full k, for tests and
    benchmarks). stats() counts spec_drafted / spec_accepted / spec_acceptance; a completion's
    timings carry draft_n / draft_n_accepted when something was drafted for it.

    cache_dir: a persistent prefix cache (serve --cache-dir). Full KV pages of every prompt and
    reply are also written under this directory (one checksummed file per page, named by the
    model file's SHA-256, the KV layout and the token-hash chain; atomic renames; at most
    cache_max_bytes, default 2 GiB, least recently used removed first), and a prompt whose prefix
    is not in memory is looked up there: a new process reopening a long conversation reads its
    KV back instead of recomputing it. A file that fails its checks is deleted, never loaded.
    stats(): cache_disk_pages_read / _written / _corrupt, cache_disk_hit_tokens. slot_save /
    slot_restore / slot_erase: llama.cpp's slot files over the same page records.

    context_shift (llama.cpp's --context-shift; default False): a sequence that fills n_ctx
    while generating keeps its first SamplingParams.n_keep tokens and the newer half of the
    rest, which are prefilled again at positions 0.., and goes on generating instead of ending
    with finish_reason "length" (max_tokens still counts every generated token; the prompt must
    still fit n_ctx). What follows a shift is exactly what a fresh request with the kept tokens
    as its prompt would generate. stats()["context_shifts"] counts them, a completion's timings
    carry context_shifts when it shifted.
    """

    def __init__(self, model_path, n_ctx: Optional[int] = None, n_threads: Optional[int] = None, *,
                 kv_memory: Optional[int] = None, kv_type: str = "f16", max_seqs: int = 16,
                 max_batch_tokens: int = 512, page_size: int = 32,
                 chat_template: Optional[str] = None, n_gpu_layers: int = 0,
                 prefix_cache: bool = True, draft_model=None, speculative: str = "auto",
                 num_speculative_tokens: Optional[int] = None, spec_adaptive: bool = True,
                 context_shift: bool = False, cache_dir=None, cache_max_bytes: Optional[int] = None):
        from .models import resolve
        from .validation import check_engine_args

        t0 = time.perf_counter()
        a = check_engine_args(n_ctx=n_ctx, n_threads=n_threads, kv_memory=kv_memory,
                              kv_type=kv_type, max_seqs=max_seqs,
                              max_batch_tokens=max_batch_tokens, page_size=page_size,
                              n_gpu_layers=n_gpu_layers, prefix_cache=prefix_cache,
                              draft_model=draft_model, speculative=speculative,
                              num_speculative_tokens=num_speculative_tokens,
                              spec_adaptive=spec_adaptive, context_shift=context_shift,
                              cache_dir=cache_dir, cache_max_bytes=cache_max_bytes)
        path = resolve(model_path)
        self.model_path = str(path)
        # The draft is only loaded where it is used ("draft", "auto"); with "off" / "ngram" it
        # is accepted and ignored.
        draft_path = ""
        if a["draft_model"] is not None and a["speculative"] in ("draft", "auto"):
            draft_path = str(resolve(a["draft_model"]))
        # The memory plan before anything is loaded (edgellm.memory_plan): MemoryPlanError when
        # it cannot fit; with n_ctx unset, the largest context that fits.
        from .memory_plan import check as _check_memory
        self.memory_plan = _check_memory(self.model_path, a, draft_path)
        if a["n_ctx"] == 0 and self.memory_plan.n_ctx < min(_DEFAULT_CONTEXT,
                                                            self.memory_plan.n_ctx_train or _DEFAULT_CONTEXT):
            import warnings
            warnings.warn(f"n_ctx {self.memory_plan.n_ctx} chosen to fit the memory available "
                          f"({self.memory_plan.available} bytes, {self.memory_plan.machine.source})",
                          stacklevel=2)
            a["n_ctx"] = self.memory_plan.n_ctx
        cache_path, cache_key = "", ""
        if a["cache_dir"]:
            from .cache_dir import prepare
            try:
                cache_path, cache_key = prepare(a["cache_dir"], self.model_path)
            except OSError as e:
                raise InvalidRequestError(f"cache_dir {a['cache_dir']!r}: {e.strerror or e}") from None
        self._engine = _core.Engine(self.model_path, a["n_ctx"], a["n_threads"], a["kv_memory"],
                                    a["kv_type"], a["max_seqs"], a["max_batch_tokens"],
                                    a["page_size"], a["prefix_cache"],
                                    n_gpu_layers=a["n_gpu_layers"],
                                    speculative=a["speculative"],
                                    num_speculative_tokens=a["num_speculative_tokens"],
                                    draft_model=draft_path, spec_adaptive=a["spec_adaptive"],
                                    context_shift=a["context_shift"],
                                    cache_dir=cache_path, cache_key=cache_key,
                                    cache_max_bytes=a["cache_max_bytes"])
        # the persistent prefix cache's directory (None without one)
        self.cache_dir: Optional[str] = cache_path or None
        if cache_path:
            from . import cache_dir as _cache_dir
            _cache_dir.track(self)
        self.context_shift: bool = self._engine.context_shift
        # speculative decoding as configured: the mode, the loaded draft (None without one)
        self.speculative: str = self._engine.speculative
        self.draft_model_path: Optional[str] = self._engine.draft_model_path or None
        self.num_speculative_tokens: Optional[int] = self._engine.num_speculative_tokens or None
        self._tok = self._engine.tokenizer
        self.n_ctx: int = self._engine.n_ctx
        trained = self._engine.n_ctx_train
        if trained > 0 and self.n_ctx > trained:  # allowed, as llama.cpp does, with a warning
            import warnings
            warnings.warn(f"n_ctx {self.n_ctx} is beyond the model's trained context {trained}: "
                          "output past that length may degrade", stacklevel=2)
        self.n_vocab: int = self._engine.n_vocab
        self.n_threads: int = self._engine.n_threads
        self.isa: str = _core.isa()
        # Layers actually on the GPU: 0 when built without CUDA or no GPU could take them (the
        # engine printed a warning saying why and runs on the CPU).
        self.n_gpu_layers: int = self._engine.n_gpu_layers
        self._chat_template_override = chat_template
        # template variables every render gets unless a request's chat_template_kwargs say
        # otherwise (edgellm serve --reasoning off sets enable_thinking false here)
        self.chat_template_defaults: Dict[str, Any] = {}
        # limits of one template render (edgellm.chat_template.render_chat): time_limit seconds
        # (default 2), max_output characters (default 8 MiB plus twice the request's text)
        self.chat_template_limits: Dict[str, Any] = {}
        self._template = None
        self._metadata = None
        self.load_time: float = time.perf_counter() - t0

    @staticmethod
    def plan(model_path, n_ctx: Optional[int] = None, n_threads: Optional[int] = None, *,
             kv_memory: Optional[int] = None, kv_type: str = "f16", max_seqs: int = 16,
             max_batch_tokens: int = 512, page_size: int = 32, draft_model=None,
             speculative: str = "auto", **_ignored) -> "MemoryPlan":
        """The memory plan of LLM(model_path, ...) without loading it (edgellm.MemoryPlan:
        weights after repacking, KV per token and budget, scratch, load peak, total, and what
        the machine can give). The constructor's other arguments are accepted and ignored."""
        from .memory_plan import plan
        return plan(model_path, n_ctx, n_threads, kv_memory=kv_memory, kv_type=kv_type,
                    max_seqs=max_seqs, max_batch_tokens=max_batch_tokens, page_size=page_size,
                    draft_model=draft_model, speculative=speculative)

    # ---- model facts ----
    @property
    def metadata(self) -> dict:
        """GGUF metadata key -> value (scalars; long arrays such as the vocabulary left out)."""
        if self._metadata is None:
            from .model_file import ModelFile
            with ModelFile(self.model_path) as f:
                self._metadata = {k: v for k, v in f.metadata.items()
                                  if not (isinstance(v, list) and len(v) > 64)}
        return self._metadata

    @property
    def tokenizer(self):
        return self._tok

    # ---- tokens ----
    def tokenize(self, text: str, add_special: bool = True, parse_special: bool = False) -> List[int]:
        return list(self._tok.encode(text, add_special, parse_special))

    def detokenize(self, ids) -> str:
        return self._tok.decode(token_ids(ids, self.n_vocab, "ids"))

    def token_to_piece(self, id: int) -> bytes:  # noqa: A002 - the contract's name
        return self._tok.token_to_piece(token_ids([id], self.n_vocab, "id")[0], True)

    def _prompt_ids(self, prompt) -> List[int]:
        if isinstance(prompt, str):
            return self.tokenize(prompt, add_special=True, parse_special=False)
        return token_ids(prompt, self.n_vocab, "prompt")

    # ---- requests ----
    def _submit(self, ids: List[int], params: "_core.SamplingParams", channel, stream: bool) -> int:
        return self._engine.submit(ids, params, channel, stream)

    def _events(self, prompt, params: Optional[SamplingParams], stream: bool) -> Iterator[dict]:
        """Events of one request; leaving early (break, close, exception) aborts it."""
        params = params or SamplingParams()
        core = params.to_core(self.n_vocab)
        ids = self._prompt_ids(prompt)
        channel = _core.OutputChannel()
        rid = self._submit(ids, core, channel, stream)
        remaining = core.n
        try:
            while remaining:
                ev = channel.pop(_POLL_S)
                if ev is None:
                    continue
                if ev["finished"]:
                    remaining -= 1
                _raise_if_error(ev)
                yield ev
        finally:
            if remaining:
                self._engine.abort(rid)

    def _piece(self, tid: int):
        b = self._tok.token_to_piece(tid, True)
        return b.decode("utf-8", errors="replace"), list(b)

    def _token_logprob(self, tid: int, lp: float, top) -> TokenLogprob:
        text, raw = self._piece(tid)
        tops = []
        for t, l in top:
            tt, tb = self._piece(t)
            tops.append(TopLogprob(t, tt, l, tb))
        return TokenLogprob(tid, text, lp, raw, tops)

    def _completion(self, ev: dict, want_logprobs: bool, want_prompt: bool) -> Completion:
        c = Completion(text=ev["text"], token_ids=list(ev["token_ids"]),
                       finish_reason=ev["finish_reason"], usage=_usage(ev), index=ev["index"],
                       stop_reason=ev["stop_reason"], timings=_timings(ev["timings"]) if "timings" in ev else {})
        if want_logprobs:
            c.logprobs = [self._token_logprob(*x) for x in ev["logprobs"]]
        if want_prompt and "prompt_logprobs" in ev:
            c.prompt_logprobs = [None] + [self._token_logprob(*x) for x in ev["prompt_logprobs"]]
        return c

    def _chunk(self, ev: dict, want_logprobs: bool, want_prompt: bool) -> CompletionChunk:
        ch = CompletionChunk(text=ev["text"], token_ids=list(ev["token_ids"]), index=ev["index"],
                             progress=ev.get("progress"))
        if want_logprobs:
            ch.logprobs = [self._token_logprob(*x) for x in ev["logprobs"]]
        if want_prompt and "prompt_logprobs" in ev:
            ch.prompt_logprobs = [None] + [self._token_logprob(*x) for x in ev["prompt_logprobs"]]
        if ev["finished"]:
            ch.finish_reason = ev["finish_reason"]
            ch.usage = _usage(ev)
            ch.timings = _timings(ev["timings"])
            ch.stop_reason = ev["stop_reason"]
        return ch

    def _collect(self, prompt, params: SamplingParams) -> List[Completion]:
        want_lp = params.logprobs is not None
        want_prompt = params.prompt_logprobs is not None
        done = [self._completion(ev, want_lp, want_prompt)
                for ev in self._events(prompt, params, stream=False)]
        done.sort(key=lambda c: c.index)
        if want_prompt and done and done[0].prompt_logprobs is not None:
            for c in done[1:]:
                c.prompt_logprobs = done[0].prompt_logprobs
        return done

    def generate(self, prompt, params: Optional[SamplingParams] = None):
        """One prompt (str or ids) -> Completion (a list of n when params.n > 1); a list of
        prompts -> a list of results, all submitted at once and batched by the engine."""
        params = params or SamplingParams()
        if _is_batch(prompt):
            return self._generate_many(list(prompt), params)
        done = self._collect(prompt, params)
        return done if params.n > 1 else done[0]

    def _generate_many(self, prompts: list, params: SamplingParams):
        core = params.to_core(self.n_vocab)
        want_lp = params.logprobs is not None
        want_prompt = params.prompt_logprobs is not None
        channels, ids = [], []
        try:
            for p in prompts:
                ch = _core.OutputChannel()
                ids.append(self._submit(self._prompt_ids(p), core, ch, False))
                channels.append(ch)
            results = []
            for i, ch in enumerate(channels):
                got = []
                while len(got) < core.n:
                    ev = ch.pop(_POLL_S)
                    if ev is None:
                        continue
                    _raise_if_error(ev)
                    got.append(self._completion(ev, want_lp, want_prompt))
                got.sort(key=lambda c: c.index)
                results.append(got if params.n > 1 else got[0])
            return results
        except BaseException:
            for rid, ch in zip(ids, channels):
                if not ch.all_sent:
                    self._engine.abort(rid)
            raise

    def stream_chunks(self, prompt, params: Optional[SamplingParams] = None) -> Iterator[CompletionChunk]:
        params = params or SamplingParams()
        want_lp = params.logprobs is not None
        want_prompt = params.prompt_logprobs is not None
        for ev in self._events(prompt, params, stream=True):
            yield self._chunk(ev, want_lp, want_prompt)

    def stream(self, prompt, params: Optional[SamplingParams] = None) -> Iterator[str]:
        """Text pieces as they are produced (whole UTF-8 characters; stop strings never
        appear). With n > 1 the pieces of all completions interleave: use stream_chunks."""
        for ev in self._events(prompt, params, stream=True):
            if ev["text"]:
                yield ev["text"]

    # ---- chat ----
    def _chat_template(self) -> str:
        if self._template is None:
            from .chat_template import choose_template
            self._template = choose_template(self._tok.chat_template, self._engine.arch,
                                             _MarkerSet(self._tok), self._chat_template_override)
        return self._template

    @property
    def chat_format(self):
        """How this model's chat template writes tool calls and reasoning (edgellm.chat_output)."""
        if getattr(self, "_chat_format", None) is None:
            from .chat_output import ChatFormat
            from .chat_template import template_source
            self._chat_format = ChatFormat.detect(template_source(self._chat_template()))
        return self._chat_format

    def apply_chat_template(self, messages, add_generation_prompt: bool = True, tools=None,
                            chat_template_kwargs: Optional[Mapping[str, Any]] = None) -> str:
        """The rendered conversation. Assistant tool calls in the history are handed to the
        template with `arguments` as an object (OpenAI sends a JSON string); for a template that
        takes no tools, the tools are described in the system message."""
        return self._apply_template(messages, add_generation_prompt, tools, chat_template_kwargs)

    def _apply_template(self, messages, add_generation_prompt: bool, tools, chat_template_kwargs,
                        shield=None) -> str:
        from .chat_template import prepare_messages, render_chat

        tok = self._tok
        bos = tok.token_text(tok.bos_id) if tok.bos_id is not None else ""
        eos = tok.token_text(tok.eos_id) if tok.eos_id is not None else ""
        msgs = prepare_messages(messages)
        kwargs = {**self.chat_template_defaults, **dict(chat_template_kwargs or {})}
        if shield is not None:  # what the caller wrote is text: its control-token texts are held
            msgs, tools, kwargs = shield.protect(msgs), shield.protect(tools), shield.protect(kwargs)
        if tools:
            extra_system = self.chat_format.tool_system_prompt(tools)
            if extra_system:
                if msgs and msgs[0].get("role") in ("system", "developer"):
                    first = dict(msgs[0])
                    first["content"] = (first.get("content") or "") + "\n\n" + extra_system
                    msgs[0] = first
                else:
                    msgs.insert(0, {"role": "system", "content": extra_system})
        return render_chat(msgs, self._chat_template(), bos_token=bos, eos_token=eos,
                           add_generation_prompt=add_generation_prompt, tools=tools or None,
                           time_limit=self.chat_template_limits.get("time_limit"),
                           max_output=self.chat_template_limits.get("max_output"), **kwargs)

    def _render_ids(self, text: str, plain_ranges=()) -> List[int]:
        ids = list(self._tok.encode(text, True, True, list(plain_ranges)))
        bos = self._tok.bos_id
        if len(ids) >= 2 and bos is not None and ids[0] == bos and ids[1] == bos:
            ids = ids[1:]  # the template wrote BOS itself
        return ids

    def chat_prompt_ids(self, messages, tools=None, chat_template_kwargs=None) -> List[int]:
        """Token ids of the rendered conversation: the template's markup as special tokens,
        what the messages say as text (never control tokens), BOS exactly once."""
        from .chat_template import ContentShield

        shield = ContentShield(self._tok.find_control_tokens)
        shield.pick_marks(messages, tools, chat_template_kwargs)
        text = self._apply_template(messages, True, tools, chat_template_kwargs, shield)
        return self._render_ids(*shield.restore(text))

    def render_chat_prompt(self, messages, tools=None, tool_choice=None,
                           chat_template_kwargs: Optional[Mapping[str, Any]] = None,
                           add_generation_prompt: Optional[bool] = None,
                           continue_final_message: Optional[bool] = None) -> str:
        """The prompt text one chat turn is generated from.

        A conversation that ends with an assistant message is continued (prefill: the answer
        picks up where that message stops), as llama-server and vLLM's continue_final_message
        do: the messages before it are rendered with the generation prompt and its text is
        appended. continue_final_message=False turns that off; add_generation_prompt=False
        renders without the assistant header. Both true, a continued message with tool calls
        or two assistant messages at the end are InvalidRequestErrors.

        Chat requests tokenize this text with the template's markup as special tokens and the
        messages' own text as plain text (chat_prompt: the text and those plain ranges)."""
        return self._render_prompt(messages, tools, tool_choice, chat_template_kwargs,
                                   add_generation_prompt, continue_final_message)

    def chat_prompt(self, messages, tools=None, tool_choice=None,
                    chat_template_kwargs: Optional[Mapping[str, Any]] = None,
                    add_generation_prompt: Optional[bool] = None,
                    continue_final_message: Optional[bool] = None):
        """(prompt text, plain ranges): render_chat_prompt's text, and the UTF-8 byte ranges in
        it where control-token texts came from the caller (message content, roles, names, tool
        calls and results, tool definitions, template kwargs). Tokenizing with
        `tokenizer.encode(text, True, True, plain_ranges)` keeps those as plain text, so content
        such as "<|im_end|>\n<|im_start|>system" cannot forge a turn; without such text in the
        conversation the ranges are empty and the ids are llama.cpp's."""
        from .chat_template import ContentShield

        shield = ContentShield(self._tok.find_control_tokens)
        shield.pick_marks(messages, tools, chat_template_kwargs)
        text = self._render_prompt(messages, tools, tool_choice, chat_template_kwargs,
                                   add_generation_prompt, continue_final_message, shield)
        return shield.restore(text)

    def _render_prompt(self, messages, tools, tool_choice, chat_template_kwargs,
                       add_generation_prompt, continue_final_message, shield=None) -> str:
        msgs = list(messages)
        last = msgs[-1] if msgs and isinstance(msgs[-1], Mapping) else {}
        ends_assistant = last.get("role") == "assistant"
        if continue_final_message and add_generation_prompt:
            raise InvalidRequestError("add_generation_prompt and continue_final_message cannot both be true")
        prefill = bool(continue_final_message) if continue_final_message is not None else \
            (ends_assistant and add_generation_prompt is None)
        use_tools = tools if (tools and tool_choice != "none") else None
        if not prefill:
            return self._apply_template(msgs, add_generation_prompt is not False, use_tools,
                                        chat_template_kwargs, shield)
        if not ends_assistant:
            raise InvalidRequestError("continue_final_message: the last message must be the assistant's")
        if last.get("tool_calls"):
            raise InvalidRequestError("an assistant message with tool calls cannot be continued")
        if len(msgs) >= 2 and isinstance(msgs[-2], Mapping) and msgs[-2].get("role") == "assistant" \
                and continue_final_message is None:
            raise InvalidRequestError("the conversation ends with two assistant messages: only the "
                                      "last one can be continued")
        content = last.get("content") or ""
        if not isinstance(content, str):
            content = "\n\n".join(p.get("text", "") for p in content
                                   if isinstance(p, Mapping) and p.get("type") == "text")
        head = self._apply_template(msgs[:-1], True, use_tools, chat_template_kwargs, shield)
        return head + (shield.protect(content) if shield is not None else content)

    def _chat_request(self, messages, params: Optional[SamplingParams], tools, tool_choice,
                      parallel_tool_calls, chat_template_kwargs, add_generation_prompt=None,
                      continue_final_message=None):
        """(prompt ids, params with the tool-call constraint, parser factory) for one chat."""
        import dataclasses

        from .chat_output import check_tools

        validate_messages(messages)
        params = params or SamplingParams()
        tools = check_tools(tools, tool_choice)
        use_tools = bool(tools) and tool_choice != "none"
        text, plain = self.chat_prompt(messages, tools, tool_choice, chat_template_kwargs,
                                       add_generation_prompt, continue_final_message)
        ids = self._render_ids(text, plain)
        fmt = self.chat_format
        if use_tools:
            forced = tool_choice == "required" or isinstance(tool_choice, dict)
            has_constraint = bool(params.json_schema or params.grammar or params.regex or
                                  (params.response_format and params.response_format.get("type") != "text"))
            if has_constraint and forced:
                raise InvalidRequestError("tool_choice 'required' or a named function cannot be combined "
                                          "with response_format / json_schema / grammar")
            if not has_constraint:
                # llama-server's default: one call per turn unless parallel calls are asked for
                parallel = bool(parallel_tool_calls)
                gbnf, triggers = fmt.tool_grammar(_core.json_schema_to_gbnf, tools, tool_choice,
                                                  parallel, prompt=text)
                params = dataclasses.replace(params, grammar=gbnf, grammar_triggers=triggers or None)
        def new_parser():
            return fmt.parser(tools if use_tools else None, tool_choice, prompt=text)
        return ids, params, new_parser

    @staticmethod
    def _finish_chat(c: Completion, parser) -> ChatCompletion:
        parser.feed(c.text)
        parser.finish()
        fields = {f: getattr(c, f) for f in Completion.__dataclass_fields__}
        out = ChatCompletion(**fields)
        out.content = parser.content
        out.reasoning_content = parser.reasoning_content or None
        out.tool_calls = list(parser.tool_calls) or None
        if out.tool_calls and out.finish_reason == "stop":
            out.finish_reason = "tool_calls"
        return out

    def chat(self, messages, params: Optional[SamplingParams] = None, tools=None, tool_choice=None,
             parallel_tool_calls: Optional[bool] = None,
             chat_template_kwargs: Optional[Mapping[str, Any]] = None,
             add_generation_prompt: Optional[bool] = None,
             continue_final_message: Optional[bool] = None):
        """One chat turn -> ChatCompletion (a list of n when params.n > 1): `.content`,
        `.reasoning_content` and `.tool_calls` parsed from the output by the template's format.
        tools: OpenAI-style function tools; tool_choice: "none" | "auto" (default) | "required" |
        {"type": "function", "function": {"name": ...}} -- required and named calls are
        grammar-constrained to valid arguments, auto calls from their first marker on. A
        conversation ending with an assistant message is continued (render_chat_prompt)."""
        ids, params, new_parser = self._chat_request(messages, params, tools, tool_choice,
                                                     parallel_tool_calls, chat_template_kwargs,
                                                     add_generation_prompt, continue_final_message)
        done = [self._finish_chat(c, new_parser()) for c in self._collect(ids, params)]
        return done if params.n > 1 else done[0]

    def chat_stream(self, messages, params: Optional[SamplingParams] = None, tools=None,
                    **kw) -> Iterator[str]:
        """Content pieces as they are produced (reasoning and tool calls left out)."""
        for ch in self.chat_stream_chunks(messages, params, tools=tools, **kw):
            if ch.delta.content:
                yield ch.delta.content

    def chat_stream_chunks(self, messages, params: Optional[SamplingParams] = None, tools=None,
                           tool_choice=None, parallel_tool_calls: Optional[bool] = None,
                           chat_template_kwargs: Optional[Mapping[str, Any]] = None,
                           add_generation_prompt: Optional[bool] = None,
                           continue_final_message: Optional[bool] = None) -> Iterator[CompletionChunk]:
        """CompletionChunks whose `.delta` (edgellm.chat_output.ChatDelta) holds the parsed
        content, reasoning and tool-call pieces; the last chunk of a completion that made calls
        has finish_reason "tool_calls". The prompt as in render_chat_prompt."""
        ids, params, new_parser = self._chat_request(messages, params, tools, tool_choice,
                                                     parallel_tool_calls, chat_template_kwargs,
                                                     add_generation_prompt, continue_final_message)
        parsers: Dict[int, Any] = {}
        for ch in self.stream_chunks(ids, params):
            yield _parse_chunk(ch, parsers, new_parser)

    # ---- evaluation and state ----
    def eval_logits(self, ids):
        """float32 [len(ids), n_vocab]: the logits at every position of ids in a fresh context
        (computed between engine steps; running requests are not disturbed)."""
        return self._engine.eval_logits(token_ids(ids, self.n_vocab, "ids"))

    # ---- embeddings (python/edgellm/embeddings.py) ----
    def embed(self, texts, normalize=True, pooling=None) -> list:
        """One embedding per input (a string counts as one input; a list of strings or token-id
        lists gives one each), all submitted at once and batched by the engine: a list of
        n_embd floats each, or with pooling "none" a list of per-token vectors. pooling: None
        (the GGUF's pooling_type, else "mean"), "mean", "cls", "last", "none". normalize: True
        (L2), False, or llama.cpp's embd_normalize integer. Raises InvalidRequestError for empty
        input and ContextLengthError for an input longer than n_ctx (never truncated)."""
        return self.embeddings(texts, normalize, pooling).tolist()

    def embeddings(self, texts, normalize=True, pooling=None):
        """Like embed, as an edgellm.embeddings.Embeddings: float32 numpy arrays (`data`), the
        token count of each input (`token_counts`, `prompt_tokens`) and the pooling used."""
        from .embeddings import embeddings_sync
        return embeddings_sync(self, texts, normalize, pooling)

    @property
    def n_embd(self) -> int:
        return self._engine.n_embd

    @property
    def default_pooling(self) -> str:
        """The pooling embed uses when given none: the GGUF's pooling_type, else "mean"."""
        from .embeddings import pooling_name
        return pooling_name(int(self._engine.default_pooling))

    def stats(self) -> dict:
        return dict(self._engine.stats())

    # ---- persistent prefix cache and slots ----
    def flush_cache(self) -> None:
        """Wait until the pages cache_dir is being sent are written (close() and exit do too)."""
        self._engine.flush_cache()

    def slot_save(self, slot: int, path) -> dict:
        """llama.cpp's slot save: the KV of slot `slot`'s last sequence (its full pages in the
        prefix cache) and its tokens, to `path`. {"n_saved": tokens, "n_written": bytes}."""
        n, b = self._engine.slot_save(_slot_id(slot), os.fspath(path))
        return {"n_saved": n, "n_written": b}

    def slot_restore(self, slot: int, path) -> dict:
        """Reads a slot_save file into the prefix cache (a later prompt with those tokens reuses
        them) and makes it slot `slot`'s. A missing, corrupt or foreign file (another model, KV
        type or page size) is an InvalidRequestError; nothing of it is loaded.
        {"n_restored": tokens, "n_read": bytes}."""
        n, b = self._engine.slot_restore(_slot_id(slot), os.fspath(path))
        return {"n_restored": n, "n_read": b}

    def slot_erase(self, slot: int) -> dict:
        """Drops slot `slot`'s cached pages. {"n_erased": tokens}."""
        return {"n_erased": self._engine.slot_erase(_slot_id(slot))}

    def close(self) -> None:
        eng = getattr(self, "_engine", None)
        if eng is not None and not eng.closed:
            eng.close()  # queued cache_dir pages are written first

    def __enter__(self) -> "LLM":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


# ---- AsyncLLM -------------------------------------------------------------------------------

class _AsyncChannel:
    """An OutputChannel whose events wake an asyncio loop through a pipe. The pipe stays open
    until the engine has sent the request's last event, so no write can hit a reused fd."""

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self._loop = loop
        self._rfd, self._wfd = os.pipe()
        os.set_blocking(self._rfd, False)
        os.set_blocking(self._wfd, False)
        self.channel = _core.OutputChannel(self._wfd)
        self._ready = asyncio.Event()
        self._closing = False
        self._closed = False
        loop.add_reader(self._rfd, self._on_readable)

    def _on_readable(self) -> None:
        try:
            while os.read(self._rfd, 4096):
                pass
        except (BlockingIOError, InterruptedError):
            pass
        self._ready.set()
        if self._closing and self.channel.all_sent:
            self._close_now()

    def _close_now(self) -> None:
        if not self._closed:
            self._closed = True
            self._loop.remove_reader(self._rfd)
            os.close(self._rfd)
            os.close(self._wfd)

    async def get(self) -> dict:
        while True:
            ev = self.channel.try_pop()
            if ev is not None:
                return ev
            await self._ready.wait()
            self._ready.clear()

    def close(self) -> None:
        """Release the pipe now if the engine is done with it, else after its last event."""
        self._closing = True
        if self.channel.all_sent:
            self._close_now()


class AsyncLLM:
    """LLM for asyncio: the same constructor; awaitable generate/chat and async iterators.
    Cancelling the awaiting task or leaving an async iterator early aborts the request.

    generate / chat / stream* render chat templates and tokenize prompts in a worker thread
    (the loop's default executor; the tokenizer releases the GIL), so a long prompt or a slow
    template never stalls the event loop; their errors surface when awaited: from generate /
    chat, or from an iterator's first chunk. tokenize / detokenize / apply_chat_template stay
    plain calls (run them in an executor for large inputs)."""

    def __init__(self, *args, **kwargs):
        self.llm = LLM(*args, **kwargs)

    def __getattr__(self, name):  # n_ctx, n_vocab, metadata, isa, ...
        if name == "llm":
            raise AttributeError(name)
        return getattr(self.llm, name)

    async def _events(self, ids: List[int], params: SamplingParams, stream: bool):
        core = params.to_core(self.llm.n_vocab)
        ach = _AsyncChannel(asyncio.get_running_loop())
        remaining = core.n
        rid = None
        try:
            rid = self.llm._submit(ids, core, ach.channel, stream)
            while remaining:
                ev = await ach.get()
                if ev["finished"]:
                    remaining -= 1
                _raise_if_error(ev)
                yield ev
        finally:
            if remaining and rid is not None:
                self.llm._engine.abort(rid)
            ach.close()

    async def _collect(self, ids: List[int], params: SamplingParams):
        want_lp = params.logprobs is not None
        want_prompt = params.prompt_logprobs is not None
        done = []
        agen = self._events(ids, params, stream=False)
        try:
            async for ev in agen:
                done.append(self.llm._completion(ev, want_lp, want_prompt))
        finally:
            await agen.aclose()
        done.sort(key=lambda c: c.index)
        return done if params.n > 1 else done[0]

    async def _off_loop(self, fn, *args):
        """fn(*args) in a worker thread (prompt rendering and tokenizing)."""
        return await asyncio.get_running_loop().run_in_executor(None, functools.partial(fn, *args))

    async def _prompt_ids(self, prompt) -> List[int]:
        return await self._off_loop(self.llm._prompt_ids, prompt)

    async def _chat_request(self, *args):
        return await self._off_loop(self.llm._chat_request, *args)

    async def generate(self, prompt, params: Optional[SamplingParams] = None):
        params = params or SamplingParams()
        if _is_batch(prompt):
            return list(await asyncio.gather(*(self.generate(p, params) for p in prompt)))
        return await self._collect(await self._prompt_ids(prompt), params)

    async def chat(self, messages, params: Optional[SamplingParams] = None, tools=None,
                   tool_choice=None, parallel_tool_calls: Optional[bool] = None,
                   chat_template_kwargs: Optional[Mapping[str, Any]] = None,
                   add_generation_prompt: Optional[bool] = None,
                   continue_final_message: Optional[bool] = None):
        ids, params, new_parser = await self._chat_request(messages, params, tools, tool_choice,
                                                           parallel_tool_calls, chat_template_kwargs,
                                                           add_generation_prompt, continue_final_message)
        done = await self._collect(ids, params)
        if params.n > 1:
            return [self.llm._finish_chat(c, new_parser()) for c in done]
        return self.llm._finish_chat(done, new_parser())

    async def _chunks(self, prompt, params: Optional[SamplingParams]) -> AsyncIterator[CompletionChunk]:
        """prompt: text or ids, tokenized off the loop; or an awaitable of the ids."""
        params = params or SamplingParams()
        ids = await prompt if inspect.isawaitable(prompt) else await self._prompt_ids(prompt)
        want_lp = params.logprobs is not None
        want_prompt = params.prompt_logprobs is not None
        agen = self._events(ids, params, stream=True)
        try:
            async for ev in agen:
                yield self.llm._chunk(ev, want_lp, want_prompt)
        finally:
            await agen.aclose()

    def stream_chunks(self, prompt, params: Optional[SamplingParams] = None) -> AsyncIterator[CompletionChunk]:
        """Chunks as LLM.stream_chunks; the prompt is tokenized (and errors raised) at the first."""
        return self._chunks(prompt, params)

    async def stream(self, prompt, params: Optional[SamplingParams] = None) -> AsyncIterator[str]:
        agen = self._chunks(prompt, params)
        try:
            async for ch in agen:
                if ch.text:
                    yield ch.text
        finally:
            await agen.aclose()

    def chat_stream_chunks(self, messages, params: Optional[SamplingParams] = None, tools=None,
                           tool_choice=None, parallel_tool_calls: Optional[bool] = None,
                           chat_template_kwargs: Optional[Mapping[str, Any]] = None,
                           add_generation_prompt: Optional[bool] = None,
                           continue_final_message: Optional[bool] = None) -> AsyncIterator[CompletionChunk]:
        """As LLM.chat_stream_chunks: each chunk's `.delta` is its parsed ChatDelta. The prompt
        is rendered in a worker thread when the first chunk is awaited; a template or context
        error is raised there, before any chunk."""
        return self._chat_chunks((messages, params, tools, tool_choice, parallel_tool_calls,
                                  chat_template_kwargs, add_generation_prompt, continue_final_message))

    async def _chat_chunks(self, request) -> AsyncIterator[CompletionChunk]:
        ids, params, new_parser = await self._chat_request(*request)
        parsers: Dict[int, Any] = {}

        async def ready():
            return ids
        agen = self._chunks(ready(), params)
        try:
            async for ch in agen:
                yield _parse_chunk(ch, parsers, new_parser)
        finally:
            await agen.aclose()

    async def chat_stream(self, messages, params: Optional[SamplingParams] = None, tools=None,
                          **kw) -> AsyncIterator[str]:
        agen = self.chat_stream_chunks(messages, params, tools=tools, **kw)
        try:
            async for ch in agen:
                if ch.delta.content:
                    yield ch.delta.content
        finally:
            await agen.aclose()

    def tokenize(self, text: str, add_special: bool = True, parse_special: bool = False) -> List[int]:
        return self.llm.tokenize(text, add_special, parse_special)

    def detokenize(self, ids) -> str:
        return self.llm.detokenize(ids)

    def apply_chat_template(self, messages, add_generation_prompt: bool = True, tools=None,
                            chat_template_kwargs=None) -> str:
        return self.llm.apply_chat_template(messages, add_generation_prompt, tools,
                                            chat_template_kwargs)

    def stats(self) -> dict:
        return self.llm.stats()

    async def eval_logits(self, ids):
        return await asyncio.get_running_loop().run_in_executor(None, self.llm.eval_logits, ids)

    async def embed(self, texts, normalize=True, pooling=None) -> list:
        """LLM.embed, awaitable: every input submitted at once; cancelling aborts them."""
        return (await self.embeddings(texts, normalize, pooling)).tolist()

    async def embeddings(self, texts, normalize=True, pooling=None):
        from .embeddings import embeddings_async
        return await embeddings_async(self, texts, normalize, pooling)

    def close(self) -> None:
        self.llm.close()

    async def __aenter__(self) -> "AsyncLLM":
        return self

    async def __aexit__(self, *exc) -> None:
        self.close()

    def __enter__(self) -> "AsyncLLM":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
