"""`edgellm serve MODEL`: the OpenAI-compatible server (see edgellm.server)."""
import logging
import signal
import sys
import threading
from pathlib import Path

import click

from ._lora_option import cli_loras, lora_option
from ._quantize_option import converted_model, quantize_option
from ._sampling import sampling_option
from ._speculative import spec_kwargs, spec_options

_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def _resolve_model(model: str, hint: str = "MODEL") -> str:
    from edgellm import models

    try:
        return str(models.resolve(model))
    except models.UnknownModelError as e:
        raise click.BadParameter(str(e), param_hint=hint) from None
    except Exception as e:  # a known model that is not fetched, an unreadable path, ...
        raise click.BadParameter(str(e), param_hint=hint) from None


def _read_key(api_key, api_key_file):
    if api_key and api_key_file:
        raise click.UsageError("give --api-key or --api-key-file, not both")
    if api_key_file:
        try:
            key = Path(api_key_file).read_text(encoding="utf-8").strip()
        except OSError as e:
            raise click.BadParameter(f"cannot read {api_key_file}: {e.strerror}",
                                     param_hint="--api-key-file") from None
        if not key:
            raise click.BadParameter(f"{api_key_file} is empty", param_hint="--api-key-file")
        return key
    if api_key is not None and not api_key.strip():
        # e.g. --api-key "$KEY" with KEY unset: serving without a key was not what was meant
        raise click.BadParameter("the key is empty (an unset variable?); give a non-empty key, "
                                 "or leave the option out to serve without one",
                                 param_hint="--api-key")
    return api_key or None


def _body_size(ctx, param, value):
    from edgellm.server.config import parse_size

    if value is None or str(value).strip() in ("0", "-1"):
        return 0  # unlimited
    try:
        return parse_size(value)
    except ValueError as e:
        raise click.BadParameter(str(e)) from None


def _size(ctx, param, value):
    if value is None:
        return None
    from edgellm.server.config import parse_size

    try:
        return parse_size(value)
    except ValueError as e:
        raise click.BadParameter(str(e)) from None


def _embedding_option(ctx, param, value):
    """--pooling / --embd-normalize / --embedding: kept in ctx.meta, copied into the config."""
    ctx.meta["edgellm.serve." + param.name] = value
    return value


def _embedding_options(config) -> None:
    meta = click.get_current_context().meta
    config.pooling = meta.get("edgellm.serve.pooling")
    config.embd_normalize = meta.get("edgellm.serve.embd_normalize", 2)
    config.embedding = bool(meta.get("edgellm.serve.embedding", False))


def _keep_alive(ctx, param, value):
    from edgellm.server.config import parse_keep_alive

    try:
        return parse_keep_alive(value)
    except ValueError as e:
        raise click.BadParameter(str(e)) from None


def _projectors(given, models, aliases, many: bool):
    """--mmproj values -> (the one model's projector, {MODEL or alias NAME: projector})."""
    import os

    named = {}
    for v in given or ():
        name, sep, path = ("", "", v) if os.path.isfile(v) and not many else v.rpartition("=")
        if not sep and many:
            raise click.BadParameter(f"{v!r}: with several models give MODEL=PATH", param_hint="--mmproj")
        if sep and name not in models and name not in aliases:
            raise click.BadParameter(f"{v!r}: {name!r} is no MODEL given (nor an --alias NAME)",
                                     param_hint="--mmproj")
        if not os.path.isfile(path):
            raise click.BadParameter(f"{v!r}: {path} is not a file", param_hint="--mmproj")
        named[name] = path
    if many:
        return None, named
    if len(given) > 1:
        raise click.BadParameter("one model: give one --mmproj PATH", param_hint="--mmproj")
    return next(iter(named.values()), None), {}



@click.command("serve")
@click.argument("models", nargs=-1, metavar="[MODEL]...")
@click.option("--models-dir", default=None, type=click.Path(file_okay=False),
              help="Serve every *.gguf file in this folder too (scanned again for new files); "
                   "a request's 'model' picks one.")
@click.option("--keep-alive", default="5m", show_default=True, callback=_keep_alive,
              help="With several models: how long a model stays loaded after its last request "
                   "(seconds or 10s / 5m / 1h; -1 = for ever, 0 = unload at once). A "
                   "request's 'keep_alive' sets it for that model, as Ollama's.")
@click.option("--max-loaded-models", default=None, type=click.IntRange(1),
              help="With several models: at most this many in memory at once [default: as "
                   "many as --models-memory holds].")
@click.option("--models-memory", default=None, callback=_size,
              help="With several models: memory all loaded models may take together, by their "
                   "memory plans (e.g. 6G); the least recently used idle one is unloaded to "
                   "make room [default: what the machine has available at start].")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address(es) to listen on, comma-separated (loopback by default; 0.0.0.0 "
                   "exposes it).")
@click.option("--port", default=8080, show_default=True, type=click.IntRange(0, 65535))
@click.option("--api-key", default=None, help="Require 'Authorization: Bearer KEY' (not /health or the web chat page).")
@click.option("--api-key-file", default=None, type=click.Path(dir_okay=False),
              help="Read the API key from a file (keeps it out of the process list).")
@click.option("--parallel", "-np", default=16, show_default=True, type=click.IntRange(1, 1024),
              help="Sequences running at once in the engine; the rest wait in its queue.")
@click.option("--max-queue", default=256, show_default=True, type=click.IntRange(0, 100000),
              help="Sequences allowed to wait beyond --parallel; more get 429 + Retry-After.")
@click.option("--ctx-size", "-c", default=None, type=click.IntRange(1),
              help="Context length per sequence [default: the model's trained context, at "
                   "most 4096].")
@click.option("--kv-memory", default=None, callback=_size,
              help="Memory for the paged KV cache shared by all sequences (and both layer groups), e.g. 512M, 2G.")
@click.option("--threads", "-t", default=None, type=click.IntRange(1),
              help="Compute threads [default: the engine's choice].")
@click.option("--timeout", default=600.0, show_default=True, type=click.FloatRange(0),
              help="Seconds a request may take before it is aborted with 504; 0 = no limit.")
@click.option("--chat-template", default=None,
              help="Chat template: a known name or a Jinja file [default: the model's].")
@click.option("--alias", "aliases", multiple=True,
              help="Model id shown to clients [default: MODEL's name]; several comma-separated "
                   "names: the first in sorted order is the id. NAME=MODEL (repeatable) names "
                   "one of several models (MODEL: a path, a known name, or one of the MODELs).")
@click.option("--max-batch-tokens", default=512, show_default=True, type=click.IntRange(1),
              help="Tokens per engine step (prefill chunks + decode tokens).")
@click.option("--shutdown-grace", default=5.0, show_default=True, type=click.FloatRange(0),
              help="Seconds in-flight requests get to finish after SIGTERM before being aborted.")
@click.option("--max-body-size", default="8M", show_default=True, callback=_body_size,
              help="Largest request body accepted, e.g. 512K, 8M (0 = no limit); a bigger one "
                   "gets 413.")
@click.option("--read-timeout", default=30.0, show_default=True, type=click.FloatRange(0),
              help="Seconds a client may take to send a request's headers (then the connection "
                   "is closed) and, after them, its body (then 408); 0 = no limit.")
@click.option("--log-level", default="info", show_default=True,
              type=click.Choice(["critical", "error", "warning", "info", "debug"]),
              help="Lines below this level are not written (info: one line per request).")
@click.option("--log-format", default="text", show_default=True, type=click.Choice(["text", "json"]),
              help="Every log line (edgellm's, uvicorn's, one per request: method, path, status, "
                   "tokens, milliseconds) as text or as one JSON object per line, for collectors.")
@click.option("--engine-factory", default=None, hidden=True, metavar="MODULE:CALLABLE",
              help="Build the engine with CALLABLE(ServerConfig) instead of edgellm.AsyncLLM; "
                   "MODULE.SamplingParams, if any, replaces edgellm's, MODULE.memory_plan_bytes(config) "
                   "sizes a model of several (tests, other engines).")
@click.option("-ngl", "--n-gpu-layers", "n_gpu_layers", default=0, show_default=True, type=click.IntRange(-1, None),
              help="Last layers to run on a CUDA GPU (-1 = all); without one, a warning and the CPU.")
@click.option("--pooling", type=click.Choice(["none", "mean", "cls", "last"]), default=None,
              expose_value=False, callback=_embedding_option,
              help="Embedding pooling (llama-server's --pooling) [default: the GGUF's "
                   "pooling_type, else mean]. 'none' gives per-token vectors on /embeddings and "
                   "makes /v1/embeddings refuse.")
@click.option("--embd-normalize", "embd_normalize", type=click.IntRange(-1), default=2,
              show_default=True, expose_value=False, callback=_embedding_option,
              help="Normalisation of pooled embeddings: -1 none, 0 max-abs (int16 range), "
                   "1 taxicab, 2 euclidean, >2 p-norm (a request's embd_normalize wins).")
@click.option("--embedding", "--embeddings", "embedding", is_flag=True, expose_value=False,
              callback=_embedding_option,
              help="Accepted for llama-server compatibility: embeddings are always served, "
                   "next to generation.")
# llama-server's options, same names and meaning (docs/SERVER.md "llama.cpp's native endpoints")
@click.option("--cors-origins", default="",
              help="Web pages of other origins allowed to use the server: '*' (any), "
                   "'localhost' (pages served from localhost) or a comma-separated list of "
                   "origins (https://app.example.com) [default: none but the server's own "
                   "pages]. 'null' is never allowed.")
@click.option("--allowed-hosts", default="",
              help="Without an API key, Host header names answered besides IP addresses, "
                   "localhost, local names and --host (a guard against DNS rebinding): a "
                   "comma-separated list, '.example.com' for it and its subdomains, '*' for any.")
@click.option("--cors-methods", default="GET, POST, DELETE, OPTIONS", show_default=True,
              help="Access-Control-Allow-Methods of preflight answers.")
@click.option("--cors-headers", default="*", show_default=True,
              help="Access-Control-Allow-Headers of preflight answers.")
@click.option("--cors-credentials/--no-cors-credentials", default=True, show_default=True,
              help="Access-Control-Allow-Credentials of preflight answers.")
@sampling_option("--n-predict", "-n", "n_predict", field="max_tokens", none_at=-1, default=-1,
                 show_default=True, help="Tokens to generate for requests that set no "
                 "max_tokens / n_predict (-1 = until end of generation or a full context).")
@sampling_option("--seed", "-s", "seed", field="seed", none_at=-1, default=-1, show_default=True,
                 help="Seed for requests that give none (-1 = random).")
@sampling_option("--temp", "temperature", field="temperature", default=None,
                 help="Temperature for requests that give none [default: 0.8].")
@click.option("--slots/--no-slots", "slots_endpoint", default=True, show_default=True,
              help="Serve GET /slots (without it: 501).")
@click.option("--metrics/--no-metrics", "metrics_endpoint", default=True, show_default=True,
              help="Serve GET /metrics (without it: 501).")
@click.option("--tags", default=None, help="Comma-separated tags listed with the model in /v1/models.")
@click.option("--verbose", "-v", "verbose", is_flag=True,
              help="Chat answers carry '__verbose' (the rendered prompt), as llama-server's "
                   "--verbose does; a request's 'verbose' field asks for it alone.")
@click.option("--reasoning", default="auto", show_default=True,
              type=click.Choice(["on", "off", "auto"]),
              help="Chat templates get enable_thinking true (on, auto) or false (off), unless a "
                   "request's chat_template_kwargs say otherwise.")
@click.option("--context-shift/--no-context-shift", "context_shift", default=False, show_default=True,
              help="llama-server's --context-shift: when a sequence fills the context while "
                   "generating, keep its first n_keep tokens (a request field; -1 = the prompt) and "
                   "the newer half of the rest, and go on instead of stopping.")
@click.option("--mmproj", "mmproj", multiple=True, metavar="[MODEL=]PATH",
              help="The model's projector GGUF (llama.cpp's convert_hf_to_gguf.py --mmproj): its "
                   "requests may then hold images. With several models, MODEL=PATH for each (MODEL "
                   "as given, or its --alias NAME). Default: the one mmproj*.gguf beside the model's "
                   "file, if any.")
@click.option("--media-path", "media_path", default=None, type=click.Path(file_okay=False),
              help="Allow file:// image URLs for files under this folder (refused otherwise).")
@click.option("--allow-remote-media", "allow_remote_media", is_flag=True, default=False,
              help="Fetch http(s) image URLs (off: only data: URIs and --media-path files).")
@click.option("--cache-dir", "cache_dir", default=None, type=click.Path(file_okay=False),
              help="Persistent prefix cache: full KV pages of prompts and replies are kept as files "
                   "in this folder (per model file, checksummed, LRU-bounded) and read back after "
                   "a restart instead of recomputed.")
@click.option("--cache-max-bytes", "cache_max_bytes", default=None, type=click.IntRange(1),
              help="Bound on --cache-dir's files for this model [default: 2 GiB].")
@click.option("--slot-save-path", "slot_save_path", default=None, type=click.Path(file_okay=False),
              help="llama-server's --slot-save-path: the folder of POST /slots/{id}?action=save|"
                   "restore files.")
@click.option("--thermal-backoff", "thermal_backoff", default="auto", show_default=True,
              type=click.Choice(["auto", "on", "off"]),
              help="Run fewer compute threads while the CPU throttles (temperature, cpufreq, "
                   "throttle counters in /sys) and all of them again once cool; auto = on for "
                   "ARM Linux boards with thermal sensors (docs/raspberry-pi.md).")
@click.option("--thermal-root", "thermal_root", default="/", hidden=True,
              type=click.Path(file_okay=False),
              help="Folder holding sys/class/thermal and sys/devices/system/cpu (tests).")
@click.option("--webui/--no-webui", "webui", default=True, show_default=True,
              help="Serve the web chat page at / (README 'Web chat'); --no-webui: API only.")
@quantize_option()
@lora_option()
@spec_options()
def command(models, host, port, api_key, api_key_file, parallel, max_queue, ctx_size, kv_memory,
            threads, timeout, chat_template, aliases, max_batch_tokens, shutdown_grace,
            max_body_size, read_timeout, log_level, engine_factory, n_gpu_layers, cors_origins="",
            allowed_hosts="", cors_methods="GET, POST, DELETE, OPTIONS",
            cors_headers="*", cors_credentials=True, n_predict=-1, seed=-1, temperature=None,
            slots_endpoint=True, metrics_endpoint=True, tags=None, reasoning="auto",
            verbose=False, spec="auto", draft=None, draft_max=None, context_shift=False,
            cache_dir=None, cache_max_bytes=None, slot_save_path=None, thermal_backoff="auto",
            thermal_root="/", models_dir=None, keep_alive=300.0, max_loaded_models=None,
            models_memory=None, quantize=None, webui=True, mmproj=(), media_path=None,
            allow_remote_media=False, log_format="text"):
    """Serve MODEL (a .gguf path, a known model name or a Hugging Face checkpoint directory)
    over an OpenAI-compatible HTTP API.

    With several MODELs or --models-dir, a request's 'model' picks one; each loads on first
    use and unloads after --keep-alive idle or when another needs its memory.

    Sampling parameters a request leaves out take edgellm's (llama.cpp's) defaults, as
    llama-server does, and an absent max_tokens means "until the end of generation or the
    context is full".
    """
    import uvicorn

    from edgellm.server import ServerConfig, create_app
    from edgellm.server.config import host_list

    factories = _engine_factory(engine_factory) if engine_factory else {}

    def resolve(m, hint="MODEL"):
        if factories:
            return m
        if quantize is not None and hint == "MODEL":  # the model id stays the directory's name
            return converted_model(m, quantize)
        return _resolve_model(m, hint)

    named = [a for a in aliases if "=" in a]
    plain = [a for a in aliases if "=" not in a]
    if not models and not models_dir:
        raise click.UsageError("give a MODEL (a .gguf path or a known name), several, or "
                               "--models-dir DIR")
    hosts = host_list(host)
    if not hosts:
        raise click.BadParameter("give at least one address", param_hint="--host")
    # the port first: one that is taken is said as such, before anything is loaded or converted
    sockets = _bind(hosts, port)
    port = sockets[0].getsockname()[1]
    try:
        model_aliases = {}
        for a in named:
            name, _, target = a.partition("=")
            if not name.strip() or not target.strip():
                raise click.BadParameter(f"{a!r}: give NAME=MODEL", param_hint="--alias")
            model_aliases[name.strip()] = resolve(target.strip(), "--alias")
        resolved = [(m, resolve(m)) for m in models]
        model = models[0] if models else (models_dir or "")
        if (len(models) > 1 or models_dir or model_aliases) and plain:
            raise click.BadParameter("with several models give each name as NAME=MODEL",
                                     param_hint="--alias")
        config = ServerConfig(
            model=model, model_path=resolved[0][1] if resolved else None,
            alias=",".join(plain) or None,
            host=host, port=port,
            api_key=_read_key(api_key, api_key_file), webui=webui, parallel=parallel, max_queue=max_queue,
            ctx_size=ctx_size, kv_memory=kv_memory, threads=threads, timeout=timeout or None,
            chat_template=chat_template, max_batch_tokens=max_batch_tokens,
            shutdown_grace=shutdown_grace, n_gpu_layers=n_gpu_layers,
            max_body_size=max_body_size or None, read_timeout=read_timeout or None)
        _llamacpp_options(config, cors_origins, cors_methods, cors_headers, cors_credentials,
                          n_predict, seed, temperature, slots_endpoint, metrics_endpoint)
        config.allowed_hosts = allowed_hosts.strip()
        config.tags = tags
        config.reasoning = reasoning
        spec_args = spec_kwargs(spec, draft, draft_max)
        config.speculative = spec_args["speculative"]
        config.num_speculative_tokens = spec_args["num_speculative_tokens"]
        if draft and spec_args["speculative"] in ("draft", "auto"):
            config.draft_model = draft if factories else _resolve_model(draft, "--draft")
        config.verbose = verbose
        config.context_shift = context_shift
        config.media_path = media_path
        config.allow_remote_media = allow_remote_media
        config.cache_dir = cache_dir
        config.cache_max_bytes = cache_max_bytes
        config.lora = cli_loras()  # --lora NAME=PATH[:SCALE]: loaded with the first model
        config.lora_base = config.model_path
        config.models = resolved
        config.models_dir = models_dir
        config.model_aliases = model_aliases
        config.keep_alive = keep_alive
        config.max_loaded_models = max_loaded_models
        config.models_memory = models_memory
        config.mmproj, config.model_mmproj = _projectors(mmproj, models, model_aliases,
                                                         config.multi_model)
        if slot_save_path:
            import os
            os.makedirs(slot_save_path, exist_ok=True)
            config.slot_save_path = os.path.abspath(slot_save_path)
        _embedding_options(config)  # --pooling, --embd-normalize, --embedding
        _thermal_options(config, thermal_backoff, thermal_root)
        from edgellm.server import request_log
        request_log.configure(log_level, log_format)
        log = logging.getLogger("edgellm.serve")

        failure = []

        def on_load_failure(e: BaseException):
            failure.append(e)
            server.should_exit = True

    except BaseException:
        for s_ in sockets:
            s_.close()
        raise
    try:
        app = create_app(config, on_load_failure=on_load_failure, **factories)
    except BaseException as e:
        for s in sockets:
            s.close()
        if isinstance(e, ValueError):  # several models that cannot be served together
            raise click.UsageError(str(e)) from None
        raise
    from edgellm.server.limits import http_protocol

    server = _Server(uvicorn.Config(
        app, host=hosts[0], port=port, log_level=log_level, access_log=False,
        log_config=None,  # uvicorn's loggers write through request_log's one handler
        http=http_protocol(config.read_timeout),  # uvicorn's, with a header-read timeout
        timeout_graceful_shutdown=max(1, int(round(shutdown_grace))) if shutdown_grace else None,
        lifespan="on"))
    where = ", ".join(f"http://{_url_host(h)}:{port}/v1" for h in hosts)
    if config.multi_model:
        log.info("serving %s on %s (each loaded on first use)",
                 ", ".join(app.state.models.slots), where)
    else:
        log.info("serving %s on %s (loading %s)", config.model_id, where, config.model_path)
    if config.webui:
        log.info("web chat at http://%s:%s/", _url_host(hosts[0]), port)
    for line in exposure_warnings(config):
        log.warning("%s", line)
    server.run(sockets=sockets)
    if failure:
        from edgellm.memory_plan import message_for
        log.error("could not load %s: %s", config.model_path, message_for(failure[0], "serve"))
        sys.exit(1)
    if not server.started:
        sys.exit(1)  # uvicorn has said why


def _llamacpp_options(config, cors_origins, cors_methods, cors_headers, cors_credentials,
                      n_predict, seed, temperature, slots_endpoint, metrics_endpoint) -> None:
    config.cors_origins = cors_origins.strip()
    config.cors_methods = cors_methods
    config.cors_headers = cors_headers
    config.cors_credentials = cors_credentials
    config.n_predict = None if n_predict in (None, -1, 0) else n_predict
    config.seed = None if seed in (None, -1) else seed
    config.temperature = temperature
    config.slots_endpoint = slots_endpoint
    config.metrics_endpoint = metrics_endpoint


def exposure_warnings(config) -> list:
    """What start-up says when the server is open to more than this machine's own clients
    (docs/SERVER.md "Security")."""
    from edgellm.server.browser_guard import is_loopback

    out = []
    if config.api_key:
        return out
    exposed = [h for h in config.hosts if not is_loopback(h)]
    if exposed:
        out.append(f"serving without an API key on {', '.join(exposed)}: anyone who can reach "
                   "this address can use the server, load models and write slot files; give "
                   "--api-key or --api-key-file, or listen on 127.0.0.1")
    if config.cors_origins == "*":
        out.append("--cors-origins '*' without an API key: every web page the users of this "
                   "machine open can use the server")
    if config.allowed_hosts == "*":
        out.append("--allowed-hosts '*' without an API key: a web page can reach the server "
                   "through a DNS name of its own (DNS rebinding)")
    return out


def _thermal_options(config, mode: str, root: str) -> None:
    from edgellm.thermal import backoff_default

    config.thermal_root = root
    config.thermal_backoff = mode == "on" or (mode == "auto" and backoff_default(root))


def _url_host(h: str) -> str:
    return f"[{h}]" if ":" in h else h


def _bind(hosts, port: int):
    """One listening socket per address, all on one port (the first bind picks it when 0)."""
    import errno
    import socket

    socks = []
    try:
        for h in hosts:
            infos = socket.getaddrinfo(h, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
            family, kind, proto, _, addr = infos[0]
            s = socket.socket(family, kind, proto)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            s.bind(addr)
            s.listen(2048)
            s.set_inheritable(True)
            socks.append(s)
            port = s.getsockname()[1]
    except (OSError, socket.gaierror) as e:
        for s in socks:
            s.close()
        if getattr(e, "errno", None) == errno.EADDRINUSE:
            raise click.ClickException(f"port {port} is in use on {h}: stop what listens there, "
                                       "or give another --port") from None
        raise click.BadParameter(f"cannot listen on {h}:{port}: {e}", param_hint="--host") from None
    return socks


def _engine_factory(spec: str) -> dict:
    import importlib

    module_name, _, attr = spec.partition(":")
    try:
        module = importlib.import_module(module_name)
        out = {"loader": getattr(module, attr)}
    except (ImportError, AttributeError, ValueError) as e:
        raise click.BadParameter(f"cannot load {spec}: {e}", param_hint="--engine-factory") from None
    if hasattr(module, "SamplingParams"):
        out["params_factory"] = module.SamplingParams
    # several models: the bytes one takes (config -> int); another engine's are its own to say
    out["planner"] = getattr(module, "memory_plan_bytes", lambda config: 0)
    return out


try:
    import uvicorn as _uvicorn

    class _Server(_uvicorn.Server):
        """uvicorn's server, except that a SIGTERM/SIGINT ends with a graceful shutdown and exit
        status 0 instead of the signal being raised again once shutdown is done."""

        def capture_signals(self):
            return _captured_signals(self)
except ImportError:  # pragma: no cover - uvicorn is a dependency
    _Server = None


class _captured_signals:
    def __init__(self, server):
        self.server = server
        self.saved = {}

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            self.saved = {sig: signal.signal(sig, self._handle) for sig in _SIGNALS}

    def _handle(self, sig, frame):
        if self.server.should_exit:
            self.server.force_exit = True  # a second signal: stop waiting for requests
        self.server.should_exit = True

    def __exit__(self, *exc):
        for sig, handler in self.saved.items():
            signal.signal(sig, handler)
        return False
