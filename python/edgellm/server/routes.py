"""OpenAI's endpoints (chat, legacy completions, models, tokenize) and the server's own (health,
metrics). Each generation endpoint is a parser (protocol.py) and an encoder (responses.py) run
by the one lifecycle (lifecycle.py)."""
import inspect
import time
from typing import Any, List

from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response

import edgellm

from . import lora_api, media, protocol
from .admission import EngineHost
from .lifecycle import Generation, Lifecycle, check_token_ids, off_loop, read_json
from .model_pool import public_text
from .responses import OpenAIEncoder
from .wire import parse


def engine_meta(llm) -> dict:
    """What /v1/models tells of a loaded engine: context, vocabulary, ISA, file, architecture,
    speculative decoding."""
    inner = getattr(llm, "llm", llm)
    meta = {"n_ctx": getattr(inner, "n_ctx", None), "n_vocab": getattr(inner, "n_vocab", None),
            "isa": getattr(inner, "isa", None), "path": getattr(inner, "model_path", None)}
    spec = getattr(inner, "speculative", None)
    if isinstance(spec, str):  # speculative decoding: the mode and the draft model's path
        meta["speculative"] = spec
        meta["draft_model"] = getattr(inner, "draft_model_path", None)
    if getattr(inner, "takes_images", False) is True:  # vision input: the projector file
        meta["modalities"] = ["text", "image"]
        meta["capabilities"] = ["completion", "multimodal"]  # llama-server's words
        meta["mmproj"] = getattr(inner, "mmproj", None)
    md = getattr(inner, "metadata", None) or {}
    if isinstance(md, dict):
        meta["architecture"] = md.get("general.architecture")
        meta["n_ctx_train"] = md.get(f"{md.get('general.architecture')}.context_length")
    return meta


def model_card(model_id: str, created: float, aliases: List[str], tags: List[str], meta: dict,
               **extra) -> dict:
    """One model of /v1/models (llama-server's --alias list and --tags, and engine_meta)."""
    return {"id": model_id, "object": "model", "created": int(created), "owned_by": "edgellm",
            "aliases": aliases, **extra, "tags": tags, "meta": meta}


class Routes:
    def __init__(self, host: EngineHost):
        self.host = host
        self.config = host.config
        self.metrics = host.metrics
        self.life = Lifecycle(host)

    def _fingerprint(self) -> str:
        return f"edgellm-{edgellm.__version__}-{self.host.engine_attr('isa') or 'cpu'}"

    # --- generation ----------------------------------------------------------------------------
    async def chat_completions(self, request: Request) -> Response:
        async def plan(llm) -> Generation:
            req = protocol.parse_chat(await read_json(request), images=media.takes_images(llm))
            shaping = {k: req.extra[k] for k in ("add_generation_prompt", "continue_final_message")
                       if k in req.extra}
            prompt = None
            if req.extra.get("verbose", self.config.verbose):  # rendered in a thread
                prompt = await off_loop(llm.render_chat_prompt, req.messages, req.tools,
                                        req.tool_choice, req.chat_template_kwargs, **shaping)
            params = self.host.sampling_params(req.sampling)
            return self._generation(req, 1, prompt, lambda: [llm.chat_stream_chunks(
                req.messages, params, tools=req.tools, tool_choice=req.tool_choice,
                parallel_tool_calls=req.parallel_tool_calls,
                chat_template_kwargs=req.chat_template_kwargs, **shaping)], "messages")
        return await self.life.run(request, "chat", plan, "messages")

    async def completions(self, request: Request) -> Response:
        async def plan(llm) -> Generation:
            req = protocol.parse_completion(await read_json(request))
            check_token_ids(req.prompts, self.host.n_vocab, "prompt")
            params = self.host.sampling_params(req.sampling)
            return self._generation(req, len(req.prompts), None, lambda: [
                llm.stream_chunks(p, params) for p in req.prompts], "prompt")
        return await self.life.run(request, "completions", plan, "prompt")

    def _generation(self, req, prompts: int, verbose_prompt, open_streams, param) -> Generation:
        enc = OpenAIEncoder("chat" if req.messages is not None else "completion", req, prompts,
                            self.config.model_id, self._fingerprint(), verbose_prompt)
        return Generation(open_streams, enc, req.stream, req.n, prompts * req.n, param)

    # --- the rest -------------------------------------------------------------------------------
    async def models(self, request: Request) -> Response:
        async def work():
            meta = engine_meta(self.host.require_ready())
            return JSONResponse({"object": "list", "models": [{  # llama-server's list too
                "name": self.config.model_id, "model": self.config.model_id,
                "capabilities": meta.get("capabilities", ["completion"])}], "data": [model_card(
                self.config.model_id, self.host.loaded_at or time.time(), self.config.aliases,
                self.config.tag_list, meta)] + lora_api.host_cards(self.host, self.config.model_id)})
        return await self.life.answer("models", work)

    async def health(self, request: Request) -> Response:
        state = self.host.state
        if state == "ready":
            return JSONResponse({"status": "ok"})
        if state == "failed":  # /health is open: no paths or file bytes in the message
            return JSONResponse({"status": "error",
                                 "message": public_text(str(self.host.error))}, 500)
        return JSONResponse({"status": state}, 503, headers={"Retry-After": "1"})

    async def metrics_text(self, request: Request) -> Response:
        text = self.metrics.render(self.host.stats(), self.config.model_id,
                                   self.host.state == "ready")
        return PlainTextResponse(text, media_type="text/plain; version=0.0.4; charset=utf-8")

    async def tokenize(self, request: Request) -> Response:
        async def work():
            llm = self.host.require_ready()
            f = parse(protocol.TokenizeBody, await read_json(request))
            to_piece = getattr(llm, "token_to_piece", None) or llm.llm.token_to_piece

            def run() -> List[Any]:
                ids = [int(t) for t in llm.tokenize(f.content, add_special=f.add_special,
                                                    parse_special=f.parse_special)]
                if not f.with_pieces:
                    return ids
                tokens: List[Any] = []
                for t in ids:
                    piece = bytes(to_piece(t))
                    try:
                        tokens.append({"id": t, "piece": piece.decode("utf-8")})
                    except UnicodeDecodeError:  # part of a multi-byte character: raw bytes
                        tokens.append({"id": t, "piece": list(piece)})
                return tokens
            return JSONResponse({"tokens": await off_loop(run)})
        return await self.life.answer("tokenize", work, "content")

    async def detokenize(self, request: Request) -> Response:
        async def work():
            llm = self.host.require_ready()
            ids = parse(protocol.DetokenizeBody, await read_json(request)).tokens
            check_token_ids([ids], self.host.n_vocab, "tokens")
            text = await off_loop(llm.detokenize, ids)
            return JSONResponse({"content": await text if inspect.isawaitable(text) else text})
        return await self.life.answer("detokenize", work, "tokens")
