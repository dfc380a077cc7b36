"""llama-server's native endpoints, in the shapes llama.cpp's clients (its web UI, llama.vim,
llama.vscode, its server tests) read:

    POST /completion      (alias /completion/) prompt -> {content, tokens, stop, stop_type, ...}
    POST /infill          fill-in-the-middle with the model's FIM tokens
    POST /apply-template  chat messages -> {"prompt": the rendered template}
    GET  /props           default_generation_settings, total_slots, model_path, chat_template, ...
    GET  /slots           one entry per --parallel sequence (501 with --no-slots)
    GET  /metrics         ours plus llama.cpp's `llamacpp:*` names (501 with --no-metrics)

/completions (plural) and /v1/completions stay OpenAI's. Field checks follow the rest of the
server: an unknown field is a 400 naming it; fields llama.cpp clients send routinely that mean
nothing here (id_slot, samplers, ...) are accepted and listed in docs/SERVER.md.
"""
import copy
import inspect
import json
import math
import os
import time
from typing import Any, Dict, List, Optional, Union

from pydantic import Field, create_model
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response

import edgellm

from .. import sampling_fields
from .. import validation as V
from .. import vision
from . import protocol
from .answer_items import Answer
from .errors import APIError, invalid
from .lifecycle import (Encoder, Generation, check_token_ids, context_error, engine_error,
                        off_loop, read_json)
from .metrics import family
from .progress import (native_timings, progress_of, progress_timings, prompt_progress,
                       running_timings)
from .protocol import _INT, _NUM, checked
from .wire import Wire, parse, shape

JSON = Dict[str, Any]
MAX_PROMPTS = 64


def exceed_context(n_prompt: int, n_ctx: int) -> APIError:
    return context_error(f"request ({n_prompt} tokens) exceeds the available context size "
                         f"({n_ctx} tokens), try increasing it", None,
                         {"n_prompt_tokens": n_prompt, "n_ctx": n_ctx})


def not_supported(message: str) -> APIError:
    return APIError(501, message, "not_supported_error", None, "not_supported")


# --- the request body -------------------------------------------------------------------------

def _logit_bias(v, name):
    """llama-server's shapes: [[token id or text, bias or false], ...] or {"id": bias}.
    false bans the token (bias -100, which no logit survives)."""
    if not isinstance(v, (dict, list)):
        raise V.fail(f"'{name}' must be an array of [token, bias] pairs or an object", name,
                     "invalid_type")
    for i, p in enumerate(v if isinstance(v, list) else ()):
        if not (isinstance(p, list) and len(p) == 2):
            raise V.fail(f"'{name}[{i}]' must be a [token, bias] pair", name)
    out = []
    for key, bias in v.items() if isinstance(v, dict) else map(tuple, v):
        if bias is False:
            bias = -100.0
        elif isinstance(bias, bool) or not isinstance(bias, (int, float)):
            raise V.fail(f"'{name}' bias for {key!r} must be a number or false", name,
                         "invalid_type")
        else:  # the one rule of every route: finite, or -inf to ban the token
            bias = V.bias_value(bias, name)
        if isinstance(key, str) and key.lstrip("-").isdigit() and isinstance(v, dict):
            key = int(key)
        if isinstance(key, bool) or not isinstance(key, (int, str)):
            raise V.fail(f"'{name}' keys must be token ids or text, got {key!r}", name)
        out.append((key, bias if bias == -math.inf else max(-100.0, min(100.0, float(bias)))))
    return out


def _off(default):
    """A llama.cpp sampler edgellm does not have: accepted at its off value only (clients such
    as llama.cpp's web UI send every setting)."""
    def check(v, name):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or float(v) != float(default):
            raise V.fail(f"'{name}' is not supported (only {default}, off, is accepted)", name,
                         "unsupported")
        return v
    return checked(check, _NUM)


def _int(lo=None, hi=None):
    return checked(V.integer(lo, hi), _INT)


def _num(lo=None, hi=None):
    return checked(V.number(lo, hi), _NUM)


# The fields SamplingParams takes as they are: edgellm.sampling_fields' llama.cpp names, with
# their rules; the rest are llama-server's own forms: n_predict / max_tokens -1, a negative
# temperature (greedy), seed -1, logit_bias pairs.
_PLAIN = {w: f for w, f in sampling_fields.wire_names("llamacpp").items()
          if w not in ("n_predict", "max_tokens", "temperature", "seed", "n_probs", "logit_bias")}
NATIVE_FIELDS = {
    **{w: checked(sampling_fields.SAMPLING_RULES[f], sampling_fields.BY_NAME[f].json_schema)
       for w, f in sampling_fields.wire_names("llamacpp").items()},
    "n_predict": _int(-1), "max_tokens": _int(-1), "temperature": _num(), "seed": _int(),
    "min_keep": _int(0), "logit_bias": checked(_logit_bias, {"type": ["array", "object"]}),
    # samplers llama.cpp has and edgellm does not (sampling_fields.LLAMACPP_UNSUPPORTED): their
    # off values only; their settings are meaningless while they are off
    **{k: _off(d) if switch else Any
       for k, (d, switch) in sampling_fields.LLAMACPP_UNSUPPORTED.items()},
    # the server's
    "stream": bool, "return_tokens": bool, "timings_per_token": bool,
    "return_progress": bool,  # stream: prompt_progress chunks (progress.py)
    "post_sampling_probs": bool, "response_fields": List[str],
    "cache_prompt": bool,  # the prefix cache is always on
    "model": str,
    # sent routinely by llama.cpp clients; no effect here (docs/SERVER.md)
    "id_slot": _int(-1),  # no slot pinning: sequences are scheduled by the engine
    "n_indent": _int(0), "t_max_predict_ms": _num(0.0),
    "samplers": Any,      # the chain's order is fixed (llama.cpp's default order)
    "stream_options": Dict[str, Any],
    "backend_sampling": bool,  # sampling always runs on the CPU
    # llama-server's per-request draft settings: edgellm sizes each sequence's drafts from
    # measured step costs and its acceptance (bounded by serve --draft-max); the output does
    # not depend on them (greedy verification is exact, sampled drafts keep the distribution)
    "speculative.n_max": _int(0), "speculative.n_min": _int(0),
    "speculative.p_min": _num(0.0, 1.0),
}


def _body_model(name: str, doc: str, fields: JSON):
    """A model of `fields` (name -> type, or (type, default)); all optional unless a default
    is given."""
    def spec(k, t):
        t, default = t if isinstance(t, tuple) else (t, None)
        return (Optional[t] if t is bool or t is str else t,
                Field(default, alias=k) if "." in k else default)
    return create_model(name, __base__=Wire, __doc__=doc,
                        **{k.replace(".", "_"): spec(k, t) for k, t in fields.items()})


def _pieces(v, where):
    if isinstance(v, str):
        return [v]
    if isinstance(v, list) and all(type(x) is int and x >= 0 or isinstance(x, str) for x in v):
        return list(v)
    raise V.fail(f"'{where}' must be a string or an array of token ids and strings", where,
                 "invalid_type")


_PIECES = {"anyOf": [{"type": "string"}, {"type": "array", "items": {
    "anyOf": [{"type": "string"}, _INT]}}]}
SlotFileBody = shape("SlotFileBody", Wire, filename=str)  # POST /slots/{id}: save / restore
InfillFile = shape("InfillFile", Wire, text=str, filename=(str, "tmp"))
NativeCompletionBody = _body_model("NativeCompletionBody", "POST /completion", {
    **NATIVE_FIELDS, "prompt": (checked(lambda v, _: split_prompts(v, media=True), _PIECES), ...)})
InfillBody = _body_model("InfillBody", "POST /infill", {
    **NATIVE_FIELDS, "prompt": (str, ""), "input_prefix": checked(_pieces, _PIECES),
    "input_suffix": checked(_pieces, _PIECES), "input_extra": (List[InfillFile], [])})


# --- prompts ----------------------------------------------------------------------------------

Piece = Union[str, int]


class MediaPrompt(list):
    """A {"prompt_string": "...", "multimodal_data": [base64, ...]} prompt: its text (one piece)
    and its images (vision.base64_part), placed at its media markers (vision.MEDIA_MARKER)."""
    images: List[JSON] = []
    where: str = "prompt"


def split_prompts(v: Any, param: str = "prompt", limit: Optional[int] = MAX_PROMPTS,
                  media: bool = False) -> List[List[Piece]]:
    """llama-server's prompt shapes (its /completion's and its embeddings') -> prompts, each a
    list of text pieces and token ids:

    "text" | [id, ...] | [id or "text", ...] (one mixed prompt) | {"prompt_string": ...}
    | {"content": [{"type": "text", "text": ...}, ...]} | ["text", [ids], {...}, ...] (several
    prompts, at most `limit`). `media`: multimodal_data is taken (a MediaPrompt). A failure is a
    400 naming `param`.
    """
    def fail(message, code="invalid_type"):
        return invalid(message, param, code)

    def one(p, where) -> List[Piece]:
        if isinstance(p, str):
            return [p]
        if isinstance(p, list) and p:
            for k, x in enumerate(p):
                if type(x) is int and x < 0:
                    raise fail(f"'{where}[{k}]': token id {x} is negative", "invalid_value")
                if type(x) is not int and not isinstance(x, str):
                    raise fail(f"'{where}[{k}]' must be a string or a token id, got "
                               f"{V.type_name(x)}")
            return list(p)
        if not isinstance(p, dict):
            raise fail(f"'{where}' must be a string, an array of token ids (and strings) or an "
                       f"object, got {V.type_name(p)}")
        if "content" in p:
            parts = p["content"]
            if not isinstance(parts, list):
                raise fail(f"'{where}.content' must be an array of {{\"type\": \"text\"}} parts, "
                           f"got {V.type_name(parts)}")
            for k, part in enumerate(parts):
                if not isinstance(part, dict) or part.get("type") != "text" \
                        or not isinstance(part.get("text"), str):
                    raise fail(f"'{where}.content[{k}]' must be a {{\"type\": \"text\", \"text\": "
                               "...}} part: only text parts are supported (this model takes no "
                               "images, audio or video)", "invalid_value")
            return ["".join(part["text"] for part in parts)]
        extra = set(p) - {"prompt_string", "multimodal_data"}
        if extra:
            raise fail(f"unknown field '{where}.{sorted(extra)[0]}'", "unknown_field")
        text, data = p.get("prompt_string"), p.get("multimodal_data")
        if data and not media:
            raise fail(f"'{where}.multimodal_data': this model takes no images or audio",
                       "unsupported")
        if data:
            if not isinstance(text, str):
                raise fail(f"'{where}.prompt_string' must be a string (with a media marker "
                           f"'{vision.MEDIA_MARKER}' per multimodal_data entry)")
            if not isinstance(data, list):
                raise fail(f"'{where}.multimodal_data' must be an array of base64 strings, got "
                           f"{V.type_name(data)}")
            out = MediaPrompt([text])
            out.images = [vision.base64_part(d, f"{where}.multimodal_data[{k}]")
                          for k, d in enumerate(data)]
            out.where = where
            return out
        if isinstance(text, (str, list)):
            return one(text, where + ".prompt_string")
        raise fail(f"'{where}' must have 'content' or a 'prompt_string' string or array")

    if isinstance(v, list) and v and not any(type(x) is int for x in v):
        if limit is not None and len(v) > limit:
            raise fail(f"'{param}' has {len(v)} prompts, at most {limit} are allowed",
                       "invalid_value")
        return [one(p, f"{param}[{i}]") for i, p in enumerate(v)]
    return [one(v, param)]


def tokenize_pieces(llm, pieces: List[Piece], add_bos: bool = True) -> List[int]:
    """Text pieces are tokenized with special tokens parsed (as llama-server does); only a
    leading text piece gets the model's BOS."""
    ids: List[int] = []
    for i, p in enumerate(pieces):
        ids += [int(t) for t in llm.tokenize(p, add_special=add_bos and i == 0,
                                             parse_special=True)] if isinstance(p, str) else [int(p)]
    return ids


def media_ids(llm, p: MediaPrompt) -> List[int]:
    """A MediaPrompt's ids with its image blocks (vision.PromptIds), for a model that takes them."""
    v = vision.of(llm)
    if v is None:
        raise invalid(f"'{p.where}.multimodal_data': this model takes no images or audio",
                      "prompt", "unsupported")
    return v.raw_prompt_ids(p[0], p.images, lambda text: tokenize_pieces(llm, [text]), p.where)


# --- FIM tokens -------------------------------------------------------------------------------

FIM_TEXTS = {  # kind: vocabulary texts tried when GGUF has no tokenizer.ggml.fim_KIND_token_id
    "pre": ("<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<|fim▁begin|>", "<PRE>", "▁<PRE>"),
    "suf": ("<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<|fim▁hole|>", "<SUF>", "▁<SUF>"),
    "mid": ("<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<|fim▁end|>", "<MID>", "▁<MID>"),
    "rep": ("<|repo_name|>", "<repo_name>", "<reponame>"),
    "sep": ("<|file_sep|>", "<file_sep>"),
}
FIM_NEEDED = {"pre": "prefix", "suf": "suffix", "mid": "middle"}


def fim_tokens(llm) -> Dict[str, Optional[int]]:
    inner = getattr(llm, "llm", llm)
    md, tok = getattr(inner, "metadata", None) or {}, getattr(inner, "tokenizer", None)
    out: Dict[str, Optional[int]] = {}
    for kind, texts in FIM_TEXTS.items():
        tid = md.get(f"tokenizer.ggml.fim_{kind}_token_id") if isinstance(md, dict) else None
        if tid is None or (isinstance(tid, int) and tid < 0):
            tid = None
            for text in texts:
                try:
                    ids = llm.tokenize(text, add_special=False, parse_special=True)
                except Exception:  # noqa: BLE001 - a stand-in tokenizer may not parse specials
                    break
                if len(ids) == 1 and (tok is None or _token_text(tok, ids[0]) == text):
                    tid = int(ids[0])
                    break
        out[kind] = tid
    return out


def _token_text(tok, tid) -> Optional[str]:
    try:
        return tok.token_text(tid)
    except Exception:  # noqa: BLE001
        return None


def _bos_to_add(llm) -> Optional[int]:
    """The token the model puts before a prompt (its BOS when it adds one), else None."""
    try:
        ids, plain = (list(llm.tokenize("a", add_special=s, parse_special=False))
                      for s in (True, False))
    except Exception:  # noqa: BLE001
        return None
    return int(ids[0]) if len(ids) == len(plain) + 1 and ids[1:] == plain else None


def infill_prompt(llm, fim: Dict[str, Optional[int]], prefix: List[Piece], suffix: List[Piece],
                  extra: List[JSON], prompt_ids: List[int], n_batch: int, n_predict: Optional[int],
                  n_ctx: int) -> List[int]:
    """[rep]myproject\\n ([sep]file\\n text)* [sep]filename\\n [pre]prefix prompt [suf]suffix [mid]

    The prefix keeps its last 3/4 of a batch, the suffix what is left of the last quarter; the
    extra files fill what the context has left beyond a batch and twice n_predict (keeping the
    most recent), as llama-server does.
    """
    def tok(pieces):
        return [int(x) for p in pieces for x in (
            llm.tokenize(p, add_special=False, parse_special=False) if isinstance(p, str) else [p])]

    rep, sep = fim.get("rep"), fim.get("sep")
    extra_ids = [rep] + tok(["myproject\n"]) if rep is not None else []
    for chunk in extra:
        extra_ids += [sep] + tok([chunk.get("filename", "tmp") + "\n"]) if sep is not None \
            else tok(["\n\n--- snippet ---\n\n"])
        extra_ids += tok([chunk["text"]])
    if sep is not None:
        extra_ids += [sep] + tok(["filename\n"])
    pre, suf = tok(prefix), tok(suffix)
    pre = pre[len(pre) - min(len(pre), 3 * (n_batch // 4)):]
    suf = suf[:min(len(suf), max(0, n_batch // 4 - (2 + len(prompt_ids))))]
    n_extra = min(max(0, n_ctx - n_batch - 2 * (n_predict or 0)), len(extra_ids))
    out = extra_ids[len(extra_ids) - n_extra:] if n_extra else []
    bos = _bos_to_add(llm)
    if bos is not None:
        out.append(bos)  # the extra context goes before BOS, the FIM prefix after it
    return out + [fim["pre"]] + pre + list(prompt_ids) + [fim["suf"]] + suf + [fim["mid"]]


# --- the response objects ---------------------------------------------------------------------

SAMPLERS = list(sampling_fields.LLAMACPP_CHAIN)
_FIXED_SETTINGS = {  # what llama-server reports for features edgellm has no switch for
    "grammar_lazy": False, "grammar_triggers": [], "preserved_tokens": [],
    "chat_format": "Content-only", "reasoning_format": "none", "reasoning_in_content": False,
    "generation_prompt": "", "speculative.types": "none", "backend_sampling": False, "lora": []}


def generation_settings(params, fields: JSON, stream: bool = False) -> JSON:
    """llama-server's generation_settings (task params) for the effective SamplingParams."""
    p = {k: getattr(params, k, None) for k in ("max_tokens", "seed", "stop", "ignore_eos",
                                                "logit_bias", "logprobs", "grammar")}
    n_predict = -1 if p["max_tokens"] is None else int(p["max_tokens"])
    stop = p["stop"] or []
    return {
        **sampling_fields.llamacpp_settings(params), **copy.deepcopy(_FIXED_SETTINGS),
        "seed": 0xFFFFFFFF if p["seed"] is None else p["seed"],
        "stop": [stop] if isinstance(stop, str) else list(stop),
        "max_tokens": n_predict, "n_predict": n_predict,
        "ignore_eos": bool(p["ignore_eos"]), "stream": stream,
        # a ban (-inf) as llama-server reports it: false
        "logit_bias": [{"bias": b if math.isfinite(b) else False, "token": t}
                       for t, b in sorted((p["logit_bias"] or {}).items())],
        "n_probs": p["logprobs"] or 0, "min_keep": fields.get("min_keep", 0),
        "grammar": p["grammar"] or "", "samplers": list(SAMPLERS),
        **{k: bool(fields.get(k, False)) for k in ("timings_per_token", "post_sampling_probs")},
    }


def probs_json(items, post_sampling: bool) -> List[JSON]:
    """completion_probabilities: per token id/token/bytes/logprob and its top alternatives
    (prob/top_probs with post_sampling_probs: the same distribution, exponentiated)."""
    def one(t):
        lp = t.logprob if t.logprob is not None and math.isfinite(t.logprob) else -3.4e38
        return {"id": t.token_id, "token": t.token, "bytes": list(t.bytes), **(
            {"prob": math.exp(lp) if lp > -1e30 else 0.0} if post_sampling else {"logprob": lp})}

    top = "top_probs" if post_sampling else "top_logprobs"
    return [{**one(t), top: [one(x) for x in (t.top_logprobs or [])]} for t in items]


def pick_fields(obj: JSON, paths: List[str]) -> JSON:
    """response_fields: "a/b" -> obj["a"]["b"] under the key "a/b"; missing paths left out."""
    out, missing = {}, object()
    for path in paths:
        cur: Any = obj
        for part in path.split("/"):
            cur = cur.get(part, missing) if isinstance(cur, dict) else missing
        if cur is not missing:
            out[path] = cur
    return out


class NativeEncoder(Encoder):
    """/completion and /infill's answer: one final object per prompt (a list for several), or
    the stream of partials, each prompt's final as it finishes."""

    def __init__(self, api: "LlamaCppAPI", fields: JSON, ids_list: List[List[int]],
                 settings: JSON, stream: bool, n_ctx: int, t0: float):
        self.api, self.fields, self.settings, self.n_ctx, self.t0 = api, fields, settings, n_ctx, t0
        self.stream = stream
        self.results = {i: Answer(i, ids) for i, ids in enumerate(ids_list)}
        self.sent: set = set()  # prompts whose final went out
        self.per_token = bool(fields.get("timings_per_token"))

    def add(self, index: int, chunk) -> None:
        self.results[index].add(chunk)

    def response(self) -> Response:
        finals = [self._final(self.results[i]) for i in sorted(self.results)]
        return JSONResponse(finals[0] if len(finals) == 1 else finals)

    def events(self, index: int, chunk) -> List[JSON]:
        r, out, p = self.results[index], [], progress_of(chunk)
        if chunk.token_ids or chunk.text or p is not None:
            out.append(self._partial(r, chunk, None if chunk.token_ids or chunk.text else p))
        if chunk.finish_reason is not None:
            out.append(self._final(r))
        return out

    def finish(self) -> List[JSON]:  # nothing was generated (n_predict 0): every final now
        return [self._final(self.results[i]) for i in sorted(self.results) if i not in self.sent]

    def _partial(self, r: Answer, chunk, p=None) -> JSON:
        """A step's partial; with `p` (return_progress) one with no content and llama-server's
        prompt_progress."""
        out = {"index": r.index, "content": "" if p else chunk.text or "",
               "tokens": [] if p else [int(t) for t in chunk.token_ids], "stop": False,
               "id_slot": 0, "tokens_predicted": 0 if p else len(r.tokens),
               "tokens_evaluated": len(r.prompt_ids)}
        if self.per_token:
            out["timings"] = progress_timings(p) if p else \
                running_timings(self.t0, r.t_first, len(r.tokens), len(r.prompt_ids))
        if p:
            out["prompt_progress"] = prompt_progress(p)
        elif self.fields.get("n_probs") and chunk.logprobs:
            out["completion_probabilities"] = probs_json(
                chunk.logprobs, bool(self.fields.get("post_sampling_probs")))
        return out

    def _final(self, r: Answer) -> JSON:
        self.sent.add(r.index)
        fields, llm, n_prompt, n_gen = self.fields, self.api.host.llm, len(r.prompt_ids), len(r.tokens)
        word = r.stop_reason if r.finish_reason == "stop" and isinstance(r.stop_reason, str) else ""
        # llama-server: the context filled up -- generation stopped there, or (--context-shift)
        # the context was shifted to go on
        truncated = (bool(self.n_ctx) and r.finish_reason == "length" and
                     n_prompt + n_gen >= self.n_ctx) or bool((r.timings or {}).get("context_shifts"))
        try:
            prompt_text = llm.detokenize(r.prompt_ids) if llm is not None else ""
        except Exception:  # noqa: BLE001
            prompt_text = ""
        out = {"index": r.index, "content": "" if self.stream else r.text,
               "tokens": [] if self.stream or not fields.get("return_tokens") else list(r.tokens),
               "id_slot": 0, "stop": True, "model": self.api.config.model_id,
               "tokens_predicted": n_gen, "tokens_evaluated": n_prompt,
               "generation_settings": self.settings,
               "prompt": prompt_text if isinstance(prompt_text, str) else "",
               "has_new_line": "\n" in r.text, "truncated": truncated,
               "stop_type": "word" if word else {"stop": "eos", "length": "limit"}.get(
                   r.finish_reason, "none"),
               "stopping_word": word, "tokens_cached": n_prompt + n_gen,
               "timings": native_timings(r.timings, getattr(r.usage, "cached_tokens", 0) or 0)}
        if not self.stream and fields.get("n_probs"):
            out["completion_probabilities"] = probs_json(r.logprobs,
                                                         fields.get("post_sampling_probs", False))
        return pick_fields(out, fields["response_fields"]) if fields.get("response_fields") \
            else out


# --- the endpoints --------------------------------------------------------------------------------

class LlamaCppAPI:
    def __init__(self, routes):
        self.routes = routes          # the OpenAI routes (metrics_text)
        self.life, self.host, self.config, self.metrics = \
            routes.life, routes.host, routes.config, routes.metrics
        self.started_at = time.time()

    def endpoints(self) -> list:
        """(path, endpoint, method, request model) of each native route."""
        chat = protocol.ChatBody
        return [(path, fn, method, body) for paths, fn, method, body in (
            ("/completion /completions", self.completion, "POST", NativeCompletionBody),  # native too
            ("/infill", self.infill, "POST", InfillBody),
            ("/apply-template", self.apply_template, "POST", chat),
            ("/props", self.props, "GET", None), ("/slots", self.slots, "GET", None),
            ("/slots/{id_slot}", self.slot_action, "POST", SlotFileBody),
            ("/chat/completions/input_tokens /v1/chat/completions/input_tokens",
             self.chat_input_tokens, "POST", chat)) for path in paths.split()]

    # --- /completion and /infill ---------------------------------------------------------------
    async def completion(self, request: Request) -> Response:
        return await self._native(request, "completion", infill=False)

    async def infill(self, request: Request) -> Response:
        return await self._native(request, "infill", infill=True)

    def _prepare(self, llm, body: Any, infill: bool):
        m = parse(InfillBody if infill else NativeCompletionBody, body)
        fields = m.model_dump(by_alias=True, exclude_unset=True)
        if infill:
            fim = fim_tokens(llm)
            missing = [k for k in FIM_NEEDED if fim.get(k) is None]
            if missing:
                raise APIError(400, "infill is not supported by this model: it has no FIM "
                               + ", ".join(FIM_NEEDED[k] for k in missing) + " token (GGUF "
                               + ", ".join(f"tokenizer.ggml.fim_{k}_token_id" for k in missing)
                               + " or a vocabulary token such as "
                               + ", ".join(FIM_TEXTS[k][0] for k in missing) + ")",
                               "not_supported_error", None, "infill_unsupported")
            for key in ("input_prefix", "input_suffix"):  # after the FIM check, as llama-server
                if key not in fields:
                    raise invalid(f"'{key}' is required", key, "missing_field")
        params = self.host.sampling_params(self._sampling(llm, fields))
        n_ctx = self.host.n_ctx or 0
        if infill:
            prompt = [fields["prompt"]] if fields.get("prompt") else []
            ids_list = [infill_prompt(llm, fim, fields["input_prefix"], fields["input_suffix"],
                                      fields.get("input_extra", []),
                                      tokenize_pieces(llm, prompt, add_bos=False),
                                      self.config.max_batch_tokens,
                                      getattr(params, "max_tokens", None), n_ctx or 1 << 30)]
        else:  # as parsed: a MediaPrompt keeps its images, placed at its media markers
            ids_list = [media_ids(llm, p) if isinstance(p, MediaPrompt) else tokenize_pieces(llm, p)
                        for p in m.prompt]
        for ids in ids_list:
            if not ids:
                raise invalid("the prompt is empty (no tokens)", "prompt", "invalid_value")
            check_token_ids([ids], self.host.n_vocab, "prompt")
            if n_ctx and len(ids) >= n_ctx:
                raise exceed_context(len(ids), n_ctx)
        return fields, params, ids_list

    def _sampling(self, llm, fields: JSON) -> JSON:
        n = fields.get("n_predict", fields.get("max_tokens"))
        if fields.get("n_predict", n) != fields.get("max_tokens", n):
            raise invalid("'n_predict' and 'max_tokens' disagree; send one", "max_tokens",
                          "invalid_value")
        kw: JSON = {"max_tokens": None if n is None or n < 0 else n,
                    **{f: fields[w] for w, f in _PLAIN.items() if w in fields}}
        if "temperature" in fields:  # llama-server: negative temperature = greedy
            kw["temperature"] = max(0.0, float(fields["temperature"]))
        if fields.get("seed", -1) >= 0:
            kw["seed"] = fields["seed"]
        if fields.get("n_probs"):
            kw["logprobs"] = fields["n_probs"]
        if fields.get("logit_bias"):
            kw["logit_bias"] = {}
            for key, bias in fields["logit_bias"]:
                for t in [key] if isinstance(key, int) else llm.tokenize(
                        key, add_special=False, parse_special=False):
                    if int(t) < 0:
                        raise invalid(f"'logit_bias' has negative token id {t}", "logit_bias",
                                      "invalid_value")
                    check_token_ids([[int(t)]], getattr(getattr(llm, "llm", llm), "n_vocab",
                                                        None), "logit_bias")
                    kw["logit_bias"][int(t)] = bias
        if fields.get("return_progress") and fields.get("stream"):
            kw["return_progress"] = True  # llama-server: in stream mode only
        return kw

    async def _native(self, request: Request, endpoint: str, infill: bool) -> Response:
        t0 = time.monotonic()

        async def plan(llm) -> Generation:
            body = await read_json(request)
            try:  # tokenizing (and checking) the prompt pieces: in a thread, off the event loop
                fields, params, ids_list = await off_loop(self._prepare, llm, body, infill)
            except json.JSONDecodeError as e:
                raise invalid(f"the request body is not valid JSON: {e}", None,
                              "invalid_json") from None
            n_ctx, asked = self.host.n_ctx or 0, getattr(params, "max_tokens", None)
            shifts = bool(getattr(self.config, "context_shift", False))
            per_prompt = []
            for ids in ids_list:
                p = copy.copy(params)
                room = n_ctx - len(ids) if n_ctx and not shifts else None  # --context-shift: no end
                if room is not None and asked is not None and asked > room:
                    p.max_tokens = room  # llama-server stops at a full context (truncated: true)
                per_prompt.append(p)
            stream = bool(fields.get("stream", False))
            enc = NativeEncoder(self, fields, ids_list, generation_settings(params, fields, stream),
                                stream, n_ctx, t0)

            def open_streams():
                if asked == 0:  # llama-server: evaluate nothing new, answer at once (cache warming)
                    for r in enc.results.values():
                        r.finish_reason = "length"
                    return []
                return [llm.stream_chunks(ids, p) for ids, p in zip(ids_list, per_prompt)]

            def error(e: BaseException, _) -> APIError:
                if isinstance(e, edgellm.ContextLengthError) and ids_list:
                    return exceed_context(max(len(i) for i in ids_list), n_ctx)
                if isinstance(e, json.JSONDecodeError):
                    return invalid(f"the request body is not valid JSON: {e}", None, "invalid_json")
                return engine_error(e, "prompt")
            return Generation(open_streams, enc, stream, 1, len(ids_list), "prompt", error)
        return await self.life.run(request, endpoint, plan, "prompt")

    # --- /apply-template and input_tokens ------------------------------------------------------
    async def apply_template(self, request: Request) -> Response:
        """A chat request body -> {"prompt": the rendered template}."""
        async def work():
            llm = self.host.require_ready()
            body = await read_json(request)
            if isinstance(body, dict):  # llama-server's reasoning switches: no effect here
                body = {k: v for k, v in body.items()
                        if k not in ("reasoning_format", "enable_thinking")}
            req = protocol.parse_chat(body)  # the body of a chat request; sampling fields unused
            kw = {"add_generation_prompt": req.extra.get("add_generation_prompt", True),
                  "tools": req.tools}
            if req.chat_template_kwargs:
                if "chat_template_kwargs" not in inspect.signature(
                        llm.apply_chat_template).parameters:
                    raise invalid("'chat_template_kwargs' is not supported by this build",
                                  "chat_template_kwargs", "unsupported")
                kw["chat_template_kwargs"] = req.chat_template_kwargs
            prompt = await off_loop(llm.apply_chat_template, req.messages, **kw)
            return JSONResponse({"prompt": prompt})
        return await self.life.answer("apply-template", work, "prompt")

    async def chat_input_tokens(self, request: Request) -> Response:
        """A chat request body -> {"input_tokens": tokens of its rendered prompt}."""
        async def work():
            llm = self.host.require_ready()
            req = protocol.parse_chat(await read_json(request))
            prompt_ids = getattr(llm, "chat_prompt_ids", None)

            def count():  # rendering and tokenizing: off the event loop
                if prompt_ids is not None:
                    return prompt_ids(req.messages, tools=req.tools)
                # a stand-in engine: render, then tokenize with special tokens parsed
                return llm.tokenize(llm.apply_chat_template(req.messages, tools=req.tools),
                                    add_special=True, parse_special=True)
            return JSONResponse({"input_tokens": len(await off_loop(count))})
        return await self.life.answer("input_tokens", work, "prompt")

    # --- /props and /slots -------------------------------------------------------------------------
    def _slot(self, i: int, busy: bool, params=None) -> JSON:
        out = {"id": i, "n_ctx": self.host.n_ctx or 0, "speculative": self._speculative() != "off",
               "is_processing": busy}
        if params is not None:
            out.update(id_task=-1, params=generation_settings(params, {}))
        return out

    def _speculative(self) -> str:
        """The engine's drafting mode ("off": it does not draft; llama-server: a slot can
        speculate)."""
        mode = getattr(getattr(self.host.llm, "llm", self.host.llm), "speculative", "off")
        return mode if isinstance(mode, str) else "off"

    async def props(self, request: Request) -> Response:
        return await self.life.answer("props", self._props)

    async def _props(self) -> Response:
        from edgellm.chat_template import template_source
        llm = self.host.require_ready()
        inner = getattr(llm, "llm", llm)
        try:
            defaults = self.host.sampling_params({"max_tokens": None})
        except APIError:
            defaults = None
        tok, md = getattr(inner, "tokenizer", None), getattr(inner, "metadata", None) or {}

        def tok_text(attr):
            tid = getattr(tok, attr, None) if tok is not None else None
            return (_token_text(tok, tid) or "") if tid is not None else ""

        dgs = {**self._slot(0, False, defaults), "prompt": "", "next_token": [
            {"has_next_token": True, "has_new_line": False, "n_remain": -1, "n_decoded": 0}]}
        return JSONResponse({
            "default_generation_settings": dgs,
            "total_slots": self.config.parallel,
            "model_alias": self.config.model_id,
            "model_path": getattr(inner, "model_path", None) or self.config.model_path or "",
            "model_ftype": md.get("general.file_type") if isinstance(md, dict) else None,
            "n_ctx": self.host.n_ctx,
            "modalities": {"vision": getattr(inner, "takes_images", False) is True,
                           "video": False, "audio": False},
            "media_marker": vision.MEDIA_MARKER if vision.of(llm) else "",
            "endpoint_slots": self.config.slots_endpoint,
            "endpoint_props": True,
            "endpoint_metrics": self.config.metrics_endpoint,
            "ui": False,
            # the Jinja source of the template chat requests render with
            "chat_template": template_source(inner.chat_template),
            "chat_template_caps": {},
            "bos_token": tok_text("bos_id"),
            "eos_token": tok_text("eos_id"),
            "build_info": f"edgellm-{edgellm.__version__}",
            "is_sleeping": False,
            "cors_proxy_enabled": False,
            # speculative decoding: the mode and the draft model (llama-server's --model-draft)
            "speculative": self._speculative(),
            "model_draft_path": getattr(inner, "draft_model_path", None) or "",
        })

    async def slots(self, request: Request) -> Response:
        async def work():
            if not self.config.slots_endpoint:
                raise not_supported("This server does not support slots endpoint (start it "
                                    "with --slots)")
            self.host.require_ready()
            running = int((self.host.stats() or {}).get("running", 0))
            return JSONResponse([self._slot(i, i < running) for i in range(self.config.parallel)])
        return await self.life.answer("slots", work)

    async def slot_action(self, request: Request) -> Response:
        """POST /slots/{id}?action=save|restore|erase (llama-server's, under --slot-save-path):
        the slot's cached KV pages to / from a file in that folder, or dropped."""
        async def work():
            # as llama-server: independent of --no-slots (GET /slots), all actions need the folder
            folder = getattr(self.config, "slot_save_path", None)
            if not folder:
                raise not_supported("This server does not support slots action: start it with "
                                    "--slot-save-path DIR")
            action = request.query_params.get("action", "")
            if action not in ("save", "restore", "erase"):
                raise invalid(f"Invalid action {action!r}: one of save, restore, erase", "action")
            raw = request.path_params.get("id_slot", "")
            if not raw.isdigit() or int(raw) >= self.config.parallel:
                raise invalid(f"Invalid slot id {raw!r}: 0..{self.config.parallel - 1}", "id_slot")
            slot, llm = int(raw), self.host.require_ready()
            inner = getattr(llm, "llm", llm)
            if action == "erase":
                n = (await off_loop(inner.slot_erase, slot))["n_erased"]
                return JSONResponse({"id_slot": slot, "n_erased": n})
            filename = parse(SlotFileBody, await read_json(request)).filename
            if not _valid_filename(filename):
                raise invalid("Invalid filename: a plain file name (no folders, no '..')",
                              "filename")
            t0 = time.perf_counter()
            r = await off_loop(getattr(inner, f"slot_{action}"), slot,
                               os.path.join(folder, filename))
            n = ("n_saved", "n_written") if action == "save" else ("n_restored", "n_read")
            return JSONResponse({"id_slot": slot, "filename": filename, n[0]: r[n[0]],
                                 n[1]: r[n[1]],
                                 "timings": {f"{action}_ms": (time.perf_counter() - t0) * 1e3}})
        return await self.life.answer("slots", work, "prompt")

    # --- /metrics ------------------------------------------------------------------------------------
    async def metrics_endpoint(self, request: Request) -> Response:
        if not self.config.metrics_endpoint:
            return self.life.fail("metrics", not_supported(
                "This server does not support metrics endpoint (start it with --metrics)"))
        resp = await self.routes.metrics_text(request)
        text = resp.body.decode("utf-8") + llamacpp_metrics(self.host.stats(), self.metrics)
        out = PlainTextResponse(text, media_type="text/plain; version=0.0.4; charset=utf-8")
        # raw, to keep llama-server's capitalisation (Starlette lowercases header names)
        out.raw_headers.append((b"Process-Start-Time-Unix", str(int(self.started_at)).encode()))
        return out


def _valid_filename(name: str) -> bool:
    """A slot file name: 1..255 bytes of UTF-8, no path separator, NUL or control character, not
    '.' or '..', no leading or trailing space or dot-only name (llama.cpp's fs_validate_filename)."""
    return bool(name) and len(name.encode("utf-8", "surrogatepass")) <= 255 and \
        name.strip() == name and name.strip(".") != "" and \
        not any(c in '/\\:' or ord(c) < 32 or ord(c) == 127 for c in name)


def llamacpp_metrics(stats: Optional[dict], m) -> str:
    """llama-server's metric names, from the engine's counters and the server's timings."""
    e = stats or {}
    prompt_s = getattr(m, "prompt_ms_total", 0.0) / 1e3
    pred_s = getattr(m, "predicted_ms_total", 0.0) / 1e3
    prompt_tokens = e.get("prompt_tokens_total", 0)
    predicted = e.get("generated_tokens_total", 0)
    steps = e.get("steps", 0)
    spec = "Speculative decoding: "
    out: List[str] = []
    for name, kind, help_, value in [
        ("prompt_tokens_total", "counter", "Number of prompt tokens processed (cache hits "
         "excluded).", prompt_tokens),
        ("prompt_tokens_cached_total", "counter", "Number of prompt tokens taken from the prefix "
         "cache.", e.get("prefix_cache_hit_tokens", 0)),
        ("prompt_seconds_total", "counter", "Prompt process time", prompt_s),
        ("tokens_predicted_total", "counter", "Number of generation tokens processed.", predicted),
        ("tokens_predicted_seconds_total", "counter", "Predict process time", pred_s),
        ("n_decode_total", "counter", "Total number of engine steps (llama_decode() calls)", steps),
        ("n_tokens_max", "counter", "Largest observed n_tokens (prompt + generated) of a request.",
         getattr(m, "n_tokens_max", 0)),
        ("spec_decode_num_draft_tokens_total", "counter",
         spec + "tokens drafted (n-gram or draft model) and verified.", e.get("spec_drafted", 0)),
        ("spec_decode_num_accepted_tokens_total", "counter",
         spec + "drafted tokens the model accepted.", e.get("spec_accepted", 0)),
        ("spec_decode_num_drafts_total", "counter",
         spec + "drafts verified (sequence-steps with a draft).", e.get("spec_steps", 0)),
        ("prompt_tokens_seconds", "gauge", "Average prompt throughput in tokens/s.",
         prompt_tokens / prompt_s if prompt_s > 0 else 0.0),
        ("predicted_tokens_seconds", "gauge", "Average generation throughput in tokens/s.",
         predicted / pred_s if pred_s > 0 else 0.0),
        ("requests_processing", "gauge", "Number of requests processing.", e.get("running", 0)),
        ("requests_deferred", "gauge", "Number of requests deferred.", e.get("waiting", 0)),
        ("n_busy_slots_per_decode", "gauge", "Average number of busy slots per engine step.",
         predicted / steps if steps else 0.0),
    ]:
        family(out, f"llamacpp:{name}", kind, help_, [("", value)])
    return "\n".join(out) + "\n"
