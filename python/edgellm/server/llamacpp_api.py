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
import os
import inspect
import json
import logging
import math
import time
from typing import Any, Dict, List, Optional, Union

from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response

import edgellm

from pydantic import Field, create_model

from .. import sampling_fields
from .. import validation as V
from .. import vision
from . import protocol
from .errors import APIError, invalid
from .metrics import family
from .lifecycle import (Encoder, Generation, check_token_ids, context_error, engine_error,
                        off_loop, read_json)
from .answer_items import Answer
from .progress import (native_timings, progress_of, progress_timings, prompt_progress,
                       running_timings)
from .protocol import _INT, _NUM, checked
from .wire import Wire, parse, shape

log = logging.getLogger("edgellm.server")

JSON = Dict[str, Any]
MAX_PROMPTS = 64

# --- errors in llama-server's types -----------------------------------------------------------


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
    pairs = v.items() if isinstance(v, dict) else [tuple(p) for p in v]
    out = []
    for key, bias in pairs:
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
    if isinstance(v, list) and all(_is_id(x) or isinstance(x, str) for x in v):
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
    def one(p, where) -> List[Piece]:
        if isinstance(p, str):
            return [p]
        if isinstance(p, dict):
            if "content" in p:
                return [_text_parts(p["content"], where, param)]
            extra = set(p) - {"prompt_string", "multimodal_data"}
            if extra:
                raise invalid(f"unknown field '{where}.{sorted(extra)[0]}'", param, "unknown_field")
            if p.get("multimodal_data") and media:
                return media_prompt(p, where, param)
            if p.get("multimodal_data"):
                raise invalid(f"'{where}.multimodal_data': this model takes no images or audio",
                              param, "unsupported")
            if isinstance(p.get("prompt_string"), (str, list)):
                return one(p["prompt_string"], where + ".prompt_string")
            raise invalid(f"'{where}' must have 'content' or a 'prompt_string' string or array",
                          param, "invalid_type")
        if isinstance(p, list) and p:
            for k, x in enumerate(p):
                if type(x) is int and x < 0:
                    raise invalid(f"'{where}[{k}]': token id {x} is negative", param,
                                  "invalid_value")
                if type(x) is not int and not isinstance(x, str):
                    raise invalid(f"'{where}[{k}]' must be a string or a token id, got "
                                  f"{V.type_name(x)}", param, "invalid_type")
            return list(p)
        raise invalid(f"'{where}' must be a string, an array of token ids (and strings) or an "
                      f"object, got {V.type_name(p)}", param, "invalid_type")

    if isinstance(v, list) and v and not any(type(x) is int for x in v):
        if limit is not None and len(v) > limit:
            raise invalid(f"'{param}' has {len(v)} prompts, at most {limit} are allowed",
                          param, "invalid_value")
        return [one(p, f"{param}[{i}]") for i, p in enumerate(v)]
    return [one(v, param)]


def media_prompt(p: JSON, where: str, param: str) -> MediaPrompt:
    text, data = p.get("prompt_string"), p["multimodal_data"]
    if not isinstance(text, str):
        raise invalid(f"'{where}.prompt_string' must be a string (with a media marker "
                      f"'{vision.MEDIA_MARKER}' per multimodal_data entry)", param, "invalid_type")
    if not isinstance(data, list):
        raise invalid(f"'{where}.multimodal_data' must be an array of base64 strings, got "
                      f"{V.type_name(data)}", param, "invalid_type")
    out = MediaPrompt([text])
    out.images = [vision.base64_part(d, f"{where}.multimodal_data[{k}]") for k, d in enumerate(data)]
    out.where = where
    return out


def _text_parts(parts: Any, where: str, param: str = "prompt") -> str:
    if not isinstance(parts, list):
        raise invalid(f"'{where}.content' must be an array of {{\"type\": \"text\"}} parts, "
                      f"got {V.type_name(parts)}", param, "invalid_type")
    for k, part in enumerate(parts):
        if not isinstance(part, dict) or part.get("type") != "text" \
                or not isinstance(part.get("text"), str):
            raise invalid(f"'{where}.content[{k}]' must be a {{\"type\": \"text\", \"text\": "
                          "...}} part: only text parts are supported (this model takes no "
                          "images, audio or video)", param, "invalid_value")
    return "".join(part["text"] for part in parts)


def _is_id(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and x >= 0


def tokenize_pieces(llm, pieces: List[Piece], add_bos: bool = True) -> List[int]:
    """Text pieces are tokenized with special tokens parsed (as llama-server does); only a
    leading text piece gets the model's BOS."""
    ids: List[int] = []
    for i, p in enumerate(pieces):
        if isinstance(p, str):
            ids += [int(t) for t in llm.tokenize(p, add_special=add_bos and i == 0,
                                                 parse_special=True)]
        else:
            ids.append(int(p))
    return ids


def media_ids(llm, p: MediaPrompt) -> List[int]:
    """A MediaPrompt's ids with its image blocks (vision.PromptIds), for a model that takes them."""
    v = vision.of(llm)
    if v is None:
        raise invalid(f"'{p.where}.multimodal_data': this model takes no images or audio",
                      "prompt", "unsupported")
    return v.raw_prompt_ids(p[0], p.images, lambda text: tokenize_pieces(llm, [text]), p.where)


# --- FIM tokens -------------------------------------------------------------------------------

FIM_KINDS = {
    # kind: (GGUF metadata key, vocabulary texts tried when the key is absent)
    "pre": ("tokenizer.ggml.fim_pre_token_id", ("<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>",
                                                "<|fim▁begin|>", "<PRE>", "▁<PRE>")),
    "suf": ("tokenizer.ggml.fim_suf_token_id", ("<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>",
                                                "<|fim▁hole|>", "<SUF>", "▁<SUF>")),
    "mid": ("tokenizer.ggml.fim_mid_token_id", ("<|fim_middle|>", "<fim-middle>", "<fim_middle>",
                                                "<|fim▁end|>", "<MID>", "▁<MID>")),
    "rep": ("tokenizer.ggml.fim_rep_token_id", ("<|repo_name|>", "<repo_name>", "<reponame>")),
    "sep": ("tokenizer.ggml.fim_sep_token_id", ("<|file_sep|>", "<file_sep>")),
}


def fim_tokens(llm) -> Dict[str, Optional[int]]:
    inner = getattr(llm, "llm", llm)
    md = getattr(inner, "metadata", None) or {}
    tok = getattr(inner, "tokenizer", None)
    out: Dict[str, Optional[int]] = {}
    for kind, (key, texts) in FIM_KINDS.items():
        tid = md.get(key) if isinstance(md, dict) else None
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
        ids = list(llm.tokenize("a", add_special=True, parse_special=False))
        plain = list(llm.tokenize("a", add_special=False, parse_special=False))
    except Exception:  # noqa: BLE001
        return None
    if len(ids) == len(plain) + 1 and ids[1:] == plain:
        return int(ids[0])
    return None


def infill_prompt(llm, fim: Dict[str, Optional[int]], prefix: List[Piece], suffix: List[Piece],
                  extra: List[JSON], prompt_ids: List[int], n_batch: int, n_predict: Optional[int],
                  n_ctx: int) -> List[int]:
    """[rep]myproject\\n ([sep]file\\n text)* [sep]filename\\n [pre]prefix prompt [suf]suffix [mid]

    The prefix keeps its last 3/4 of a batch, the suffix what is left of the last quarter; the
    extra files fill what the context has left beyond a batch and twice n_predict (keeping the
    most recent), as llama-server does.
    """
    def tok(text):
        return [int(t) for t in llm.tokenize(text, add_special=False, parse_special=False)]

    def mixed(pieces):
        return [x for p in pieces for x in (tok(p) if isinstance(p, str) else [int(p)])]

    extra_ids: List[int] = []
    if fim.get("rep") is not None:
        extra_ids += [fim["rep"]] + tok("myproject\n")
    for chunk in extra:
        if fim.get("sep") is not None:
            extra_ids += [fim["sep"]] + tok(chunk.get("filename", "tmp") + "\n")
        else:
            extra_ids += tok("\n\n--- snippet ---\n\n")
        extra_ids += tok(chunk["text"])
    if fim.get("sep") is not None:
        extra_ids += [fim["sep"]] + tok("filename\n")

    pre, suf = mixed(prefix), mixed(suffix)
    n_pre = min(len(pre), 3 * (n_batch // 4))
    n_suf = min(len(suf), max(0, n_batch // 4 - (2 + len(prompt_ids))))
    pre = pre[len(pre) - n_pre:]
    suf = suf[:n_suf]
    n_extra = min(max(0, n_ctx - n_batch - 2 * (n_predict or 0)), len(extra_ids))
    out = extra_ids[len(extra_ids) - n_extra:] if n_extra else []
    bos = _bos_to_add(llm)
    if bos is not None:
        out.append(bos)  # the extra context goes before BOS, the FIM prefix after it
    return out + [fim["pre"]] + pre + list(prompt_ids) + [fim["suf"]] + suf + [fim["mid"]]


# --- the response objects ---------------------------------------------------------------------

SAMPLERS = list(sampling_fields.LLAMACPP_CHAIN)


def _attr(params, name, default=None):
    return getattr(params, name, default) if params is not None else default


def generation_settings(params, fields: JSON, stream: bool = False) -> JSON:
    """llama-server's generation_settings (task params) for the effective SamplingParams."""
    n_predict = -1 if _attr(params, "max_tokens") is None else int(params.max_tokens)
    seed, stop = _attr(params, "seed"), _attr(params, "stop") or []
    return {
        **sampling_fields.llamacpp_settings(params),
        "seed": 0xFFFFFFFF if seed is None else seed,
        "stop": [stop] if isinstance(stop, str) else list(stop),
        "max_tokens": n_predict, "n_predict": n_predict,
        "ignore_eos": bool(_attr(params, "ignore_eos", False)), "stream": stream,
        # a ban (-inf) as llama-server reports it: false
        "logit_bias": [{"bias": b if math.isfinite(b) else False, "token": t}
                       for t, b in sorted((_attr(params, "logit_bias") or {}).items())],
        "n_probs": _attr(params, "logprobs") or 0, "min_keep": fields.get("min_keep", 0),
        "grammar": _attr(params, "grammar") or "",
        "grammar_lazy": False, "grammar_triggers": [], "preserved_tokens": [],
        "chat_format": "Content-only", "reasoning_format": "none",
        "reasoning_in_content": False, "generation_prompt": "",
        "samplers": list(SAMPLERS), "speculative.types": "none",
        **{k: bool(fields.get(k, False)) for k in ("timings_per_token", "post_sampling_probs")},
        "backend_sampling": False, "lora": [],
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

    def _final(self, r: Answer) -> JSON:
        self.sent.add(r.index)
        return self.api.final(r, self.fields, self.settings, self.stream, self.n_ctx)

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


# --- the endpoints --------------------------------------------------------------------------------

class LlamaCppAPI:
    def __init__(self, routes):
        self.routes = routes          # the OpenAI routes (metrics_text)
        self.life = routes.life
        self.host = routes.host
        self.config = routes.config
        self.metrics = routes.metrics
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
            missing = [k for k, name in (("pre", "prefix"), ("suf", "suffix"), ("mid", "middle"))
                       if fim.get(k) is None]
            if missing:
                names = {"pre": "prefix", "suf": "suffix", "mid": "middle"}
                raise APIError(400, "infill is not supported by this model: it has no FIM "
                               + ", ".join(names[k] for k in missing) + " token (GGUF "
                               + ", ".join(FIM_KINDS[k][0] for k in missing)
                               + " or a vocabulary token such as "
                               + ", ".join(FIM_KINDS[k][1][0] for k in missing) + ")",
                               "not_supported_error", None, "infill_unsupported")
            for key in ("input_prefix", "input_suffix"):  # after the FIM check, as llama-server
                if key not in fields:
                    raise invalid(f"'{key}' is required", key, "missing_field")
            prefix, suffix = fields["input_prefix"], fields["input_suffix"]
            extra = fields.get("input_extra", [])
            prompts = [[fields.get("prompt", "")]]
        else:
            prompts = m.prompt  # as parsed: a MediaPrompt keeps its images

        kw = self._sampling(llm, fields)
        params = self.host.sampling_params(kw)
        n_ctx = self.host.n_ctx or 0

        ids_list = []
        for pieces in prompts:
            if infill:
                p_ids = tokenize_pieces(llm, [p for p in pieces if p != ""], add_bos=False)
                ids = infill_prompt(llm, fim, prefix, suffix, extra, p_ids,
                                    self.config.max_batch_tokens, _attr(params, "max_tokens"),
                                    n_ctx or 1 << 30)
            elif isinstance(pieces, MediaPrompt):  # images at the prompt's media markers
                ids = media_ids(llm, pieces)
            else:
                ids = tokenize_pieces(llm, pieces)
            if not ids:
                raise invalid("the prompt is empty (no tokens)", "prompt", "invalid_value")
            check_token_ids([ids], self.host.n_vocab, "prompt")
            if n_ctx and len(ids) >= n_ctx:
                raise exceed_context(len(ids), n_ctx)
            ids_list.append(ids)
        return fields, params, ids_list

    def _sampling(self, llm, fields: JSON) -> JSON:
        kw: JSON = {}
        n = fields.get("n_predict", fields.get("max_tokens"))
        if "n_predict" in fields and "max_tokens" in fields \
                and fields["n_predict"] != fields["max_tokens"]:
            raise invalid("'n_predict' and 'max_tokens' disagree; send one", "max_tokens",
                          "invalid_value")
        kw["max_tokens"] = None if n is None or n < 0 else n
        kw.update({f: fields[w] for w, f in _PLAIN.items() if w in fields})
        if "temperature" in fields:  # llama-server: negative temperature = greedy
            kw["temperature"] = max(0.0, float(fields["temperature"]))
        if "seed" in fields and fields["seed"] >= 0:
            kw["seed"] = fields["seed"]
        if fields.get("n_probs"):
            kw["logprobs"] = fields["n_probs"]
        if fields.get("logit_bias"):
            kw["logit_bias"] = self._bias(llm, fields["logit_bias"])
        if fields.get("return_progress") and fields.get("stream"):
            kw["return_progress"] = True  # llama-server: in stream mode only
        return kw

    @staticmethod
    def _bias(llm, pairs) -> Dict[int, float]:
        out: Dict[int, float] = {}
        for key, bias in pairs:
            for t in [key] if isinstance(key, int) else llm.tokenize(key, add_special=False,
                                                                     parse_special=False):
                if int(t) < 0:
                    raise invalid(f"'logit_bias' has negative token id {t}", "logit_bias",
                                  "invalid_value")
                check_token_ids([[int(t)]], getattr(getattr(llm, "llm", llm), "n_vocab", None),
                                "logit_bias")
                out[int(t)] = bias
        return out

    async def _native(self, request: Request, endpoint: str, infill: bool) -> Response:
        t0 = time.monotonic()

        async def plan(llm) -> Generation:
            body = await read_json(request)
            try:  # tokenizing (and checking) the prompt pieces: in a thread, off the event loop
                fields, params, ids_list = await off_loop(self._prepare, llm, body, infill)
            except json.JSONDecodeError as e:
                raise invalid(f"the request body is not valid JSON: {e}", None,
                              "invalid_json") from None
            n_ctx = self.host.n_ctx or 0
            asked = _attr(params, "max_tokens")
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
            return Generation(open_streams, enc, stream, 1, len(ids_list), "prompt",
                              lambda e, _: _engine_error(e, ids_list, n_ctx))
        return await self.life.run(request, endpoint, plan, "prompt")

    def final(self, r: Answer, fields: JSON, settings: JSON, stream: bool, n_ctx: int) -> JSON:
        llm = self.host.llm
        word = r.stop_reason if r.finish_reason == "stop" and isinstance(r.stop_reason, str) else ""
        stop_type = "word" if word else {"stop": "eos", "length": "limit"}.get(r.finish_reason, "none")
        n_gen = len(r.tokens)
        # llama-server: the context filled up -- generation stopped there, or (--context-shift)
        # the context was shifted to go on
        truncated = (bool(n_ctx) and r.finish_reason == "length" and len(r.prompt_ids) + n_gen >= n_ctx) \
            or bool((r.timings or {}).get("context_shifts"))
        cached = getattr(r.usage, "cached_tokens", 0) or 0 if r.usage is not None else 0
        try:
            prompt_text = llm.detokenize(r.prompt_ids) if llm is not None else ""
        except Exception:  # noqa: BLE001
            prompt_text = ""
        content, n_prompt = r.text, len(r.prompt_ids)
        out = {"index": r.index, "content": "" if stream else content,
               "tokens": [] if stream or not fields.get("return_tokens") else list(r.tokens),
               "id_slot": 0, "stop": True, "model": self.config.model_id,
               "tokens_predicted": n_gen, "tokens_evaluated": n_prompt,
               "generation_settings": settings,
               "prompt": prompt_text if isinstance(prompt_text, str) else "",
               "has_new_line": "\n" in content, "truncated": truncated, "stop_type": stop_type,
               "stopping_word": word, "tokens_cached": n_prompt + n_gen,
               "timings": native_timings(r.timings, cached)}
        if not stream and fields.get("n_probs"):
            out["completion_probabilities"] = probs_json(r.logprobs,
                                                         fields.get("post_sampling_probs", False))
        if fields.get("response_fields"):
            return pick_fields(out, fields["response_fields"])
        return out

    # --- /apply-template ---------------------------------------------------------------------------
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

            def count():
                if prompt_ids is not None:
                    return prompt_ids(req.messages, tools=req.tools)
                # a stand-in engine: render, then tokenize with special tokens parsed
                return llm.tokenize(llm.apply_chat_template(req.messages, tools=req.tools),
                                    add_special=True, parse_special=True)
            # rendering and tokenizing: off the event loop
            return JSONResponse({"input_tokens": len(await off_loop(count))})
        return await self.life.answer("input_tokens", work, "prompt")

    # --- /props and /slots -------------------------------------------------------------------------
    def _template_source(self, llm) -> str:
        """The Jinja source of the template chat requests render with (llama-server's /props)."""
        from edgellm.chat_template import template_source
        inner = getattr(llm, "llm", llm)
        return template_source(inner.chat_template)

    def _slot(self, i: int, busy: bool, params=None) -> JSON:
        out = {"id": i, "n_ctx": self.host.n_ctx or 0, "speculative": self._speculative(),
               "is_processing": busy}
        if params is not None:
            out["id_task"] = -1
            out["params"] = generation_settings(params, {})
        return out

    def _speculative(self) -> bool:
        """Whether the engine drafts (llama-server: a slot can speculate)."""
        inner = getattr(self.host.llm, "llm", self.host.llm)
        mode = getattr(inner, "speculative", "off")
        return isinstance(mode, str) and mode != "off"

    async def props(self, request: Request) -> Response:
        return await self.life.answer("props", self._props)

    async def _props(self) -> Response:
        llm = self.host.require_ready()
        inner = getattr(llm, "llm", llm)
        try:
            defaults = self.host.sampling_params({"max_tokens": None})
        except APIError:
            defaults = None
        tok = getattr(inner, "tokenizer", None)

        def tok_text(attr):
            tid = getattr(tok, attr, None) if tok is not None else None
            return (_token_text(tok, tid) or "") if tid is not None else ""

        md = getattr(inner, "metadata", None) or {}
        dgs = self._slot(0, False, defaults)
        dgs["prompt"] = ""
        dgs["next_token"] = [{"has_next_token": True, "has_new_line": False, "n_remain": -1,
                              "n_decoded": 0}]
        return JSONResponse({
            "default_generation_settings": dgs,
            "total_slots": self.config.parallel,
            "model_alias": self.config.model_id,
            "model_path": getattr(inner, "model_path", None) or self.config.model_path or "",
            "model_ftype": md.get("general.file_type") if isinstance(md, dict) else None,
            "n_ctx": self.host.n_ctx,
            "modalities": {"vision": getattr(inner, "takes_images", False) is True, "video": False, "audio": False},
            "media_marker": vision.MEDIA_MARKER if vision.of(llm) else "",
            "endpoint_slots": self.config.slots_endpoint,
            "endpoint_props": True,
            "endpoint_metrics": self.config.metrics_endpoint,
            "ui": False,
            "chat_template": self._template_source(llm),
            "chat_template_caps": {},
            "bos_token": tok_text("bos_id"),
            "eos_token": tok_text("eos_id"),
            "build_info": f"edgellm-{edgellm.__version__}",
            "is_sleeping": False,
            "cors_proxy_enabled": False,
            # speculative decoding: the mode and the draft model (llama-server's --model-draft)
            "speculative": getattr(inner, "speculative", "off") if self._speculative() else "off",
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
            slot = int(raw)
            llm = self.host.require_ready()
            inner = getattr(llm, "llm", llm)
            if action == "erase":
                n = (await off_loop(inner.slot_erase, slot))["n_erased"]
                return JSONResponse({"id_slot": slot, "n_erased": n})
            filename = parse(SlotFileBody, await read_json(request)).filename
            if not _valid_filename(filename):
                raise invalid("Invalid filename: a plain file name (no folders, no '..')", "filename")
            t0 = time.perf_counter()
            r = await off_loop(getattr(inner, f"slot_{action}"), slot,
                               os.path.join(folder, filename))
            n = ("n_saved", "n_written") if action == "save" else ("n_restored", "n_read")
            return JSONResponse({"id_slot": slot, "filename": filename, n[0]: r[n[0]], n[1]: r[n[1]],
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
    if not name or len(name.encode("utf-8", "surrogatepass")) > 255 or name in (".", ".."):
        return False
    if name.strip() != name or name.strip(".") == "":
        return False
    return not any(c in '/\\:' or ord(c) < 32 or ord(c) == 127 for c in name)


def llamacpp_metrics(stats: Optional[dict], m) -> str:
    """llama-server's metric names, from the engine's counters and the server's timings."""
    e = stats or {}
    prompt_s = getattr(m, "prompt_ms_total", 0.0) / 1e3
    pred_s = getattr(m, "predicted_ms_total", 0.0) / 1e3
    prompt_tokens = e.get("prompt_tokens_total", 0)
    predicted = e.get("generated_tokens_total", 0)
    steps = e.get("steps", 0)
    rows = [
        ("prompt_tokens_total", "counter", "Number of prompt tokens processed (cache hits excluded).",
         prompt_tokens),
        ("prompt_tokens_cached_total", "counter", "Number of prompt tokens taken from the prefix cache.",
         e.get("prefix_cache_hit_tokens", 0)),
        ("prompt_seconds_total", "counter", "Prompt process time", prompt_s),
        ("tokens_predicted_total", "counter", "Number of generation tokens processed.", predicted),
        ("tokens_predicted_seconds_total", "counter", "Predict process time", pred_s),
        ("n_decode_total", "counter", "Total number of engine steps (llama_decode() calls)", steps),
        ("n_tokens_max", "counter", "Largest observed n_tokens (prompt + generated) of a request.",
         getattr(m, "n_tokens_max", 0)),
        ("spec_decode_num_draft_tokens_total", "counter",
         "Speculative decoding: tokens drafted (n-gram or draft model) and verified.",
         e.get("spec_drafted", 0)),
        ("spec_decode_num_accepted_tokens_total", "counter",
         "Speculative decoding: drafted tokens the model accepted.", e.get("spec_accepted", 0)),
        ("spec_decode_num_drafts_total", "counter",
         "Speculative decoding: drafts verified (sequence-steps with a draft).", e.get("spec_steps", 0)),
        ("prompt_tokens_seconds", "gauge", "Average prompt throughput in tokens/s.",
         prompt_tokens / prompt_s if prompt_s > 0 else 0.0),
        ("predicted_tokens_seconds", "gauge", "Average generation throughput in tokens/s.",
         predicted / pred_s if pred_s > 0 else 0.0),
        ("requests_processing", "gauge", "Number of requests processing.", e.get("running", 0)),
        ("requests_deferred", "gauge", "Number of requests deferred.", e.get("waiting", 0)),
        ("n_busy_slots_per_decode", "gauge", "Average number of busy slots per engine step.",
         predicted / steps if steps else 0.0),
    ]
    out: List[str] = []
    for name, kind, help_, value in rows:
        family(out, f"llamacpp:{name}", kind, help_, [("", value)])
    return "\n".join(out) + "\n"


# --- helpers --------------------------------------------------------------------------------------

def _engine_error(e: BaseException, ids_list=None, n_ctx: int = 0) -> APIError:
    if isinstance(e, edgellm.ContextLengthError) and ids_list:
        return exceed_context(max(len(i) for i in ids_list), n_ctx)
    if isinstance(e, json.JSONDecodeError):
        return invalid(f"the request body is not valid JSON: {e}", None, "invalid_json")
    return engine_error(e, "prompt")
