"""The models an Ollama client sees (docs/SERVER.md "Ollama's API"): what a GGUF file is in
Ollama's terms (`facts`: details, capabilities, model_info, digest), created models and copies
(`Made`: a name with its own system prompt, template and parameters over a served file; the
Modelfile subset), the set of models of a single- or many-model server (`OneModel`,
`ManyModels`: the catalog, pool and router of model_catalog.py, model_pool.py,
model_router.py), and the routes about them (`OllamaServer`): GET / and /api/version,
/api/tags, /api/ps, /api/show, /api/pull, /api/create, /api/copy, /api/delete. The generation
routes are ollama_api.py's.
"""
import hashlib
import json
import logging
import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

import edgellm

from . import ollama_models as W
from .errors import APIError, invalid
from .lifecycle import engine_error, off_loop, read_json
from .wire import parse

log = logging.getLogger("edgellm.server")

JSON = Dict[str, Any]
OLLAMA_VERSION = "0.12.0"  # the Ollama API level these routes follow (GET /api/version)
ENCODER_ARCHS = ("bert", "nomic-bert", "nomic-bert-moe", "jina-bert-v2", "xlm-roberta", "t5encoder")
FIM_TOKENS = (("<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>"),
              ("<fim_prefix>", "<fim_suffix>", "<fim_middle>"),
              ("<|fim_begin|>", "<|fim_hole|>", "<|fim_end|>"))


# --- what a model file is ------------------------------------------------------------------------

@dataclass
class Facts:
    """A GGUF's facts for /api/tags, /api/show, /api/ps (read once per file version)."""
    metadata: JSON
    details: Any
    capabilities: List[str]
    template: str
    size: int
    modified: float
    digest: str
    fim: Optional[Tuple[str, str, str]]


_facts: Dict[Tuple[str, int, int], Facts] = {}
_facts_lock = threading.Lock()


def _param_count(n: int) -> str:
    for div, suffix in ((1e9, "B"), (1e6, "M"), (1e3, "K")):
        if n >= div:
            return f"{n / div:.2f}".rstrip("0").rstrip(".") + suffix
    return str(n)


def _digest(path: str, st: os.stat_result) -> str:
    """The known model's SHA-256, else a fingerprint of the file (size, time, first and last
    MiB): hashing a multi-GB file on every listing would take seconds."""
    from edgellm import models

    for spec in models.KNOWN_MODELS.values():
        if spec.filename == os.path.basename(path) and spec.size == st.st_size:
            return spec.sha256
    h = hashlib.sha256(f"{st.st_size}:{st.st_mtime_ns}".encode())
    with open(path, "rb") as f:
        h.update(f.read(1 << 20))
        f.seek(max(0, st.st_size - (1 << 20)))
        h.update(f.read(1 << 20))
    return h.hexdigest()


def capabilities(md: JSON, template: str, fim) -> List[str]:
    arch = str(md.get("general.architecture", ""))
    encoder = arch in ENCODER_ARCHS
    caps = [] if encoder else ["completion"]
    if not encoder and "tools" in template:
        caps.append("tools")
    if fim:
        caps.append("insert")
    if any(k.startswith(("clip.", f"{arch}.vision.")) for k in md):
        caps.append("vision")
    if encoder or f"{arch}.pooling_type" in md:
        caps.append("embedding")
    if any(w in template for w in ("enable_thinking", "<think>", "reasoning_content")):
        caps.append("thinking")
    return caps


def facts(path: str) -> Facts:
    from edgellm.model_file import ModelFile
    from edgellm.repl.model_facts import _FILE_TYPES

    st = os.stat(path)
    key = (os.path.realpath(path), st.st_size, st.st_mtime_ns)
    with _facts_lock:
        if key in _facts:
            return _facts[key]
    try:
        with ModelFile(path) as mf:
            md = dict(mf.metadata)
            n_params = sum(t.n_elements for t in mf.tensors.values())
            size = mf.total_size  # every shard of a split model
    except Exception as e:  # noqa: BLE001 - a file that is no GGUF
        raise APIError(500, f"cannot read the model file {os.path.basename(path)}: {e}",
                       "server_error") from None
    tokens = md.get("tokenizer.ggml.tokens") or []
    vocab = set(tokens) if isinstance(tokens, list) else set()
    fim = next((t for t in FIM_TOKENS if all(x in vocab for x in t)), None)
    template = md.get("tokenizer.chat_template") or ""
    arch = str(md.get("general.architecture", ""))
    ftype = md.get("general.file_type")
    details = W.Details(format="gguf", family=arch, families=[arch] if arch else None,
                        parameter_size=str(md.get("general.size_label") or _param_count(n_params)),
                        quantization_level=_FILE_TYPES.get(ftype, "") if isinstance(ftype, int)
                        else "")
    out = Facts(md, details, capabilities(md, template, fim), template, size, st.st_mtime,
                _digest(path, st), fim)
    with _facts_lock:
        _facts[key] = out
    return out


def model_info(md: JSON, verbose: bool) -> JSON:
    """The GGUF's keys; the tokenizer's long arrays as null unless `verbose` (as Ollama)."""
    out = {k: (None if isinstance(v, list) and len(v) > 64 and not verbose else v)
           for k, v in md.items() if k != "tokenizer.chat_template"}
    out["general.parameter_count"] = out.get("general.parameter_count")
    return {k: v for k, v in out.items() if not (k == "general.parameter_count" and v is None)}


# --- created models: a name with its own system prompt, template and parameters --------------------

@dataclass
class Made:
    name: str
    source: str                      # the name or file it was made from
    system: Optional[str] = None
    template: Optional[str] = None
    parameters: JSON = field(default_factory=dict)   # Ollama option name -> value, as given
    modified: float = field(default_factory=time.time)

    def options(self) -> Any:
        return W.parse_options(self.parameters)


def parameters_text(parameters: JSON) -> str:
    """Ollama's `parameters` text: one `name value` line each (stop: one line a string)."""
    lines = []
    for name, value in parameters.items():
        for v in (value if isinstance(value, list) else [value]):
            lines.append(f"{name:<30} {json.dumps(v) if isinstance(v, str) else v}")
    return "\n".join(lines)


def parse_modelfile(text: str) -> JSON:
    """The Modelfile subset: FROM, PARAMETER, SYSTEM, TEMPLATE (values may be \"\"\"-quoted
    over several lines); ADAPTER, MESSAGE, LICENSE are refused by name."""
    out: JSON = {"parameters": {}}
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i].strip()
        i += 1
        if not line or line.startswith("#"):
            continue
        word, _, rest = line.partition(" ")
        word, rest = word.upper(), rest.strip()
        if rest.startswith('"""'):
            body = rest[3:]
            while '"""' not in body and i < len(lines):
                body += "\n" + lines[i]
                i += 1
            if '"""' not in body:
                raise invalid(f"Modelfile: the \"\"\" of {word} is never closed", "modelfile")
            rest = body[:body.index('"""')]
        elif rest.startswith('"') and rest.endswith('"') and len(rest) > 1:
            rest = json.loads(rest) if word != "PARAMETER" else rest
        if word == "FROM":
            out["from"] = rest
        elif word in ("SYSTEM", "TEMPLATE"):
            out[word.lower()] = rest
        elif word == "PARAMETER":
            name, _, value = rest.partition(" ")
            value = value.strip()
            try:
                v = json.loads(value)
            except json.JSONDecodeError:
                v = value
            if name == "stop":
                out["parameters"].setdefault("stop", []).append(str(v))
            else:
                out["parameters"][name] = v
        else:
            raise invalid(f"Modelfile: {word} is not supported (FROM, PARAMETER, SYSTEM and "
                          "TEMPLATE are)", "modelfile", "unsupported")
    return out


# --- the models a server has ---------------------------------------------------------------------

class OneModel:
    """A single-model server's set: its one model, whatever name a request uses."""
    manages = False

    def __init__(self, host):
        self.host = host

    def path(self) -> Optional[str]:
        llm = self.host.llm
        inner = getattr(llm, "llm", llm)
        return getattr(inner, "model_path", None) or self.host.config.model_path

    def entries(self) -> List[Tuple[str, Optional[str]]]:
        return [(self.host.config.model_id, self.path())]

    def find(self, name: str) -> Tuple[str, Optional[str]]:
        return self.entries()[0]

    def running(self) -> List[Tuple[str, Optional[str], Any, Optional[float], Optional[int]]]:
        if self.host.state != "ready":
            return []
        return [(self.host.config.model_id, self.path(), self.host.llm, None, None)]


class ManyModels:
    """A many-model server's set: the catalog, the pool, and the router's per-model apps."""
    manages = True

    def __init__(self, catalog, pool, router):
        self.catalog, self.pool, self.router = catalog, pool, router

    def entries(self) -> List[Tuple[str, Optional[str]]]:
        self.catalog._scan_quietly()
        return [(e.id, e.path) for e in self.catalog.entries]

    def find(self, name: str) -> Tuple[str, Optional[str]]:
        e = self.catalog.find(name)
        return e.id, e.path

    def running(self):
        from .model_pool import LOADED

        out = []
        for e in self.catalog.entries:
            s = self.pool.slot(e)
            if s.state == LOADED:
                out.append((e.id, e.path, s.host.llm, s.expires_at, s.bytes))
        return out


def render(template: str, messages: List[JSON], tools, think: Optional[JSON]) -> str:
    """A created model's (or the request's) TEMPLATE -- Jinja, edgellm's template language --
    over the conversation."""
    from edgellm.chat_template import render_chat

    return render_chat(messages, template, add_generation_prompt=True, tools=tools,
                       **(think or {}))


# --- the server's routes ---------------------------------------------------------------------------

class OllamaServer:
    """The routes about the server's models (tags, ps, show, pull, create, copy, delete) and
    the probes (/, /api/version)."""

    def __init__(self, models, metrics, webui=None):
        self.models = models          # OneModel or ManyModels
        self.metrics = metrics
        self.webui = webui
        self.made: Dict[str, Made] = {}  # created models and copies, by lower-case tagged name
        self._lock = threading.Lock()

    def routes(self, route) -> list:
        r = [("/api/version", self.version, "GET", None), ("/api/tags", self.tags, "GET", None),
             ("/api/ps", self.ps, "GET", None), ("/api/show", self.show, "POST", W.OllamaShowBody),
             ("/api/pull", self.pull, "POST", W.OllamaPullBody),
             ("/api/create", self.create, "POST", W.OllamaCreateBody),
             ("/api/copy", self.copy, "POST", W.OllamaCopyBody),
             ("/api/delete", self.delete, "DELETE", W.OllamaDeleteBody),
             ("/api/blobs/{digest}", self.blob, "HEAD", None),
             ("/api/blobs/{digest}", self.blob, "POST", None)]
        out = [route(p, fn, m, b, "Ollama", streams=W.NDJSON if p in ("/api/pull", "/api/create")
                     else None) for p, fn, m, b in r]
        # "/" is the web chat page's too: like its routes, not in /openapi.json
        return out + [Route("/", self.root, methods=["GET", "HEAD"])]

    async def _answer(self, endpoint: str, work) -> Response:
        try:
            out = await work()
        except Exception as e:  # noqa: BLE001
            err = engine_error(e, None)
            self.metrics.request_done(endpoint, err.status)
            return W.error_response(err)
        self.metrics.request_done(endpoint, 200)
        return out

    async def root(self, request: Request) -> Response:
        """GET / : "Ollama is running" to Ollama's clients (they ask for JSON, or say they are
        ollama in User-Agent); anyone else gets the web chat page (404 without it)."""
        accept = request.headers.get("accept", "")
        if request.headers.get("user-agent", "").lower().startswith("ollama") or (
                "application/json" in accept and "text/html" not in accept):
            return PlainTextResponse("Ollama is running")
        if self.webui is None:
            raise HTTPException(404)
        return await self.webui.page(request)

    async def version(self, request: Request) -> Response:
        """The Ollama API version these routes follow."""
        return JSONResponse({"version": OLLAMA_VERSION, "edgellm": edgellm.__version__})

    def _card(self, name: str, path: str, modified: Optional[float] = None) -> JSON:
        f = facts(path)
        return W.ModelCard(name=W.tagged(name), model=W.tagged(name),
                           modified_at=W.now_iso(modified or f.modified), size=f.size,
                           digest=f.digest, details=f.details).model_dump()

    async def tags(self, request: Request) -> Response:
        """The models this server has (and the created ones)."""
        async def work():
            def run():
                cards = [self._card(i, p) for i, p in self.models.entries()
                         if p and os.path.isfile(p)]  # a stand-in engine has none
                for m in list(self.made.values()):
                    _, path = self.models.find(m.name)
                    cards.append(self._card(m.name, path, m.modified))
                return cards
            return JSONResponse({"models": await off_loop(run)})
        return await self._answer("ollama_tags", work)

    async def ps(self, request: Request) -> Response:
        """The models in memory."""
        async def work():
            out = []
            for ident, path, llm, expires, size in self.models.running():
                if not path or not os.path.isfile(path):
                    continue
                f = await off_loop(facts, path)
                inner = getattr(llm, "llm", llm)
                out.append(W.Running(
                    name=W.tagged(ident), model=W.tagged(ident), size=size or f.size, digest=f.digest,
                    details=f.details, size_vram=0, context_length=getattr(inner, "n_ctx", None),
                    expires_at=W.now_iso(expires) if expires else "2318-01-01T00:00:00Z"
                ).model_dump(exclude_none=True))
            return JSONResponse({"models": out})
        return await self._answer("ollama_ps", work)

    def _resolve(self, name: str) -> Tuple[str, str, Optional[Made]]:
        """(entry id, file, created model) of a name; Ollama's 404 when unknown."""
        try:
            ident, path = self.models.find(name)
        except APIError as e:
            if e.status == 404:
                raise APIError(404, f"model '{name}' not found", "not_found_error", "model",
                               "model_not_found") from None
            raise
        if not path:
            raise APIError(503, "the model is still loading", "unavailable_error")
        return ident, path, self.made.get(W.name_key(name))

    async def show(self, request: Request) -> Response:
        """A model's details, GGUF keys, capabilities, template and parameters."""
        async def work():
            body = parse(W.OllamaShowBody, await read_json(request))
            name = _named(body)
            ident, path, made = self._resolve(name)
            f = await off_loop(facts, path)
            params = made.parameters if made else {}
            template = (made.template if made and made.template else None) or f.template
            system = made.system if made else None
            modelfile = [f"# Modelfile of {W.tagged(name)} (edgellm)", f"FROM {path}"]
            if template:
                modelfile.append(f'TEMPLATE """{template}"""')
            if system:
                modelfile.append(f'SYSTEM """{system}"""')
            modelfile += [f"PARAMETER {line}" for line in parameters_text(params).splitlines()]
            out = W.Show(license=_license(f.metadata), modelfile="\n".join(modelfile) + "\n",
                         parameters=parameters_text(params), template=template, system=system,
                         details=f.details, model_info=model_info(f.metadata, body.verbose),
                         capabilities=f.capabilities,
                         modified_at=W.now_iso(made.modified if made else f.modified))
            return JSONResponse(out.model_dump(exclude_none=True))
        return await self._answer("ollama_show", work)

    # --- changing the set ------------------------------------------------------------------------
    def _managed(self, verb: str):
        if not self.models.manages:
            raise invalid(f"{verb} needs a many-model server: start edgellm serve with "
                          "--models-dir (or several models)", None, "unsupported")
        return self.models

    async def copy(self, request: Request) -> Response:
        """A second name for a model."""
        async def work():
            body = parse(W.OllamaCopyBody, await read_json(request))
            models = self._managed("/api/copy")
            ident, path, made = self._resolve(body.source)
            entry = models.catalog.find(body.source)
            self._name(body.destination, entry, Made(
                name=W.tagged(body.destination), source=W.tagged(body.source),
                system=made.system if made else None, template=made.template if made else None,
                parameters=dict(made.parameters) if made else {}))
            return Response(status_code=200)
        return await self._answer("ollama_copy", work)

    def _name(self, name: str, entry, made: Made) -> None:
        from .model_catalog import CatalogError

        key = W.name_key(name)
        try:
            current = self.models.catalog.find(name)
        except APIError:
            current = None
        if current is not None and key not in self.made and current is not entry:
            raise invalid(f"the name '{name}' is taken by the model {current.id}", "model",
                          "model_exists")
        try:
            self.models.catalog.add_name(W.tagged(name), entry)
        except CatalogError as e:
            raise invalid(str(e), "model", "model_exists") from None
        self.made[key] = made

    async def delete(self, request: Request) -> Response:
        """Forget a name: a copy or created model; a model file of --models-dir is deleted, one
        given on the command line or pulled only leaves the list."""
        async def work():
            body = parse(W.OllamaDeleteBody, await read_json(request))
            models = self._managed("/api/delete")
            name = _named(body)
            ident, path, made = self._resolve(name)
            key = W.name_key(name)
            if key in self.made:
                del self.made[key]
                models.catalog.remove_name(W.tagged(name))
                return Response(status_code=200)
            entry = models.catalog.find(name)
            slot = models.pool.slot(entry)
            if not await models.pool.unload(slot):
                raise APIError(409, f"the model {entry.id} is busy; delete it when its requests "
                                    "are done", "invalid_request_error", "model", "model_busy")
            for k in [k for k, m in self.made.items() if models.catalog.find(m.name) is entry]:
                del self.made[k]
            models.catalog.remove(entry)
            models.pool.slots.pop(entry.id, None)
            models.router.forget(entry.id)
            d = models.catalog.models_dir
            if d and os.path.dirname(os.path.abspath(entry.path)) == os.path.abspath(d):
                os.remove(entry.path)  # else the next scan of --models-dir brings it back
            return Response(status_code=200)
        return await self._answer("ollama_delete", work)

    async def create(self, request: Request) -> Response:
        """A model from one of this server's models or a GGUF file on its disk, with a system
        prompt, template and parameters (or a Modelfile with those)."""
        body: Any = None

        async def prepare():
            nonlocal body
            body = parse(W.OllamaCreateBody, await read_json(request))
            models = self._managed("/api/create")
            name = _named(body)
            spec: JSON = {"from": body.from_, "system": body.system, "template": body.template,
                          "parameters": dict(body.parameters or {})}
            if body.modelfile:
                mf = parse_modelfile(body.modelfile)
                spec = {**{k: spec.get(k) or mf.get(k) for k in ("from", "system", "template")},
                        "parameters": {**mf["parameters"], **spec["parameters"]}}
            for what in ("files", "adapters", "messages", "quantize"):
                if getattr(body, what):
                    raise invalid(f"'{what}' is not supported: create from a model of this server "
                                  "or a GGUF file on its disk ('from')", what, "unsupported")
            source = spec["from"] or body.path
            if not source:
                raise invalid("'from' is required: a model of this server or the path of a GGUF "
                              "file on its disk", "from", "missing_field")
            W.parse_options(spec["parameters"], "parameters")  # a 400 naming a bad one
            if spec["template"]:
                await off_loop(render, spec["template"], [{"role": "user", "content": "hi"}],
                               None, None)
            if os.path.isfile(os.path.expanduser(source)):
                entry = models.catalog.add(source, os.path.expanduser(source))
                base = None
            else:
                entry = models.catalog.find(self._resolve(source)[0])
                base = self.made.get(W.name_key(source))
            made = Made(name=W.tagged(name), source=source,
                        system=spec["system"] or (base.system if base else None),
                        template=spec["template"] or (base.template if base else None),
                        parameters={**(base.parameters if base else {}), **spec["parameters"]})
            self._name(name, entry, made)
            return facts(entry.path).digest

        stream = True
        try:
            digest = await prepare()
            stream = body.stream
        except Exception as e:  # noqa: BLE001
            err = engine_error(e, None)
            self.metrics.request_done("ollama_create", err.status)
            return W.error_response(err)
        self.metrics.request_done("ollama_create", 200)
        lines = [{"status": "parsing modelfile"},
                 {"status": f"using existing layer sha256:{digest}"},
                 {"status": "writing manifest"}, {"status": "success"}]
        return _progress_answer(lines, stream)

    async def pull(self, request: Request) -> Response:
        """A model fetched by edgellm.hub.pull — a known name or hf.co/USER/REPO[:QUANT] — with
        Ollama's progress lines, then served under that name."""
        try:
            body = parse(W.OllamaPullBody, await read_json(request))
            models = self._managed("/api/pull")
            name = _named(body)
            from edgellm import hub
            if hub.parse_ref(name) is None and hub._known(name) is None:
                raise APIError(404, f"pull model manifest: file does not exist: '{name}' is neither a "
                                    "known model nor a Hugging Face repository (hf.co/USER/REPO[:QUANT])",
                               "not_found_error", "model", "model_not_found")
        except Exception as e:  # noqa: BLE001
            err = engine_error(e, None)
            self.metrics.request_done("ollama_pull", err.status)
            return W.error_response(err)
        self.metrics.request_done("ollama_pull", 200)
        return await _PullAnswer(name, models, body.stream).answer()

    async def blob(self, request: Request) -> Response:
        """Blob uploads are not taken: create from a GGUF on the server's disk instead."""
        raise APIError(404 if request.method == "HEAD" else 400,
                       "blob uploads are not supported: /api/create takes 'from' as the path of a "
                       "GGUF file on the server's disk", "invalid_request_error", None,
                       "unsupported")


def _named(body) -> str:
    name = body.model or body.name
    if not name:
        raise invalid("'model' is required", "model", "missing_field")
    return name


def _license(md: JSON) -> Optional[str]:
    v = md.get("general.license")
    return v if isinstance(v, str) else None


def _progress_answer(lines: List[JSON], stream: bool) -> Response:
    if not stream:
        return JSONResponse(lines[-1])
    data = b"".join(json.dumps(x).encode() + b"\n" for x in lines)
    return Response(data, media_type=W.NDJSON)


class _PullAnswer:
    """The W.NDJSON progress of one pull: edgellm.hub.pull runs in a thread and reports Ollama's
    steps (status, completed, total), handed to the event loop as they come."""

    def __init__(self, name: str, models: ManyModels, stream: bool):
        self.name, self.models, self.stream = name, models, stream

    async def _run(self):
        import asyncio

        from edgellm import hub

        loop = asyncio.get_running_loop()
        steps: "asyncio.Queue" = asyncio.Queue()

        def progress(status, completed, total):
            loop.call_soon_threadsafe(steps.put_nowait, (status, completed, total))

        job = loop.run_in_executor(None, lambda: hub.pull(self.name, progress))
        job.add_done_callback(lambda _: loop.call_soon_threadsafe(steps.put_nowait, None))
        yield W.Progress(status="pulling manifest")  # known names skip it: said for every pull
        last = None
        while True:
            step = await steps.get()
            if step is None:
                break
            status, completed, total = step
            if status in ("pulling manifest", "success"):
                continue  # said first / once the model is in the catalog
            if (status, completed) == last:
                continue
            last = (status, completed)
            if status.startswith("pulling ") and total is not None:
                yield W.Progress(status=status, digest=f"sha256:{status.split()[-1]}", total=total,
                                 completed=completed or 0)
            else:
                yield W.Progress(status=status)
        path = job.result()  # its error, if any, becomes the in-band error line
        known = hub._known(self.name)
        self.models.catalog.add(known or self.name, str(path), None if known else self.name)
        yield W.Progress(status="success")

    async def answer(self) -> Response:
        from .sse import EventStreamResponse

        if not self.stream:  # the last status, once done; or the error with its status
            last = None
            try:
                async for p in self._run():
                    last = p
            except Exception as e:  # noqa: BLE001
                return W.error_response(engine_error(e, None))
            return JSONResponse(W.dump(last))

        async def lines():
            try:
                async for p in self._run():
                    yield json.dumps(W.dump(p)).encode() + b"\n"
            except Exception as e:  # noqa: BLE001 - the headers are out: the error goes in-band
                yield json.dumps(W.error_body(engine_error(e, None))).encode() + b"\n"

        async def on_close(disconnected: bool):
            return None  # a fetch under way finishes in its thread (the cache keeps it)

        return EventStreamResponse(lines(), on_close, headers={"Content-Type": W.NDJSON})
