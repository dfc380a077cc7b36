"""What `edgellm serve` was asked for: the model, the engine's sizes and the server's limits."""
import re
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(i?b?)?\s*$", re.IGNORECASE)
_SCALE = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def parse_size(text: str) -> int:
    """'512M', '2G', '1.5GiB', '1048576' -> bytes (binary multiples, as memory is sized)."""
    m = _SIZE.match(str(text))
    if not m:
        raise ValueError(f"cannot read {text!r} as a memory size (examples: 512M, 2G, 1073741824)")
    value = float(m.group(1)) * _SCALE[m.group(2).lower()]
    if value < 1:
        raise ValueError(f"memory size {text!r} is zero")
    return int(value)


_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|h|m|s)", re.IGNORECASE)
_UNIT = {"ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_keep_alive(value) -> Optional[float]:
    """Ollama's keep_alive: seconds as a number, or a duration such as '5m', '1h30m', '10s';
    negative = for ever (None), 0 = unload as soon as the last request ends."""
    if isinstance(value, bool):
        raise ValueError(f"keep_alive must be seconds or a duration such as '5m', got {value!r}")
    if isinstance(value, (int, float)):
        seconds = float(value)
    else:
        text = str(value).strip().lower()
        try:
            seconds = float(text)
        except ValueError:
            sign = -1.0 if text.startswith("-") else 1.0
            body = text.lstrip("+-")
            parts = _DURATION.findall(body)
            if not body or "".join(n + u for n, u in parts) != body:
                raise ValueError(f"keep_alive must be seconds or a duration such as '5m', "
                                 f"'1h30m', '-1' (for ever), got {value!r}") from None
            seconds = sign * sum(float(n) * _UNIT[u] for n, u in parts)
    if seconds != seconds or seconds in (float("inf"), float("-inf")):
        raise ValueError(f"keep_alive must be a finite number, got {value!r}")
    return None if seconds < 0 else seconds


@dataclass
class ServerConfig:
    model: str                         # path or known name, as given on the command line
    model_path: Optional[str] = None   # resolved file (set by the loader)
    alias: Optional[str] = None        # the id clients see in /v1/models and responses
    host: str = "127.0.0.1"
    port: int = 8080
    api_key: Optional[str] = None
    webui: bool = True                 # the web chat page at / (server/webui.py)
    parallel: int = 16                 # sequences the engine runs at once (LLM max_seqs)
    max_queue: int = 256               # sequences allowed to wait beyond `parallel`; then 429
    ctx_size: Optional[int] = None     # None = the model's
    kv_memory: Optional[int] = None    # bytes for the paged KV cache; None = the engine's default
    threads: Optional[int] = None
    timeout: Optional[float] = 600.0   # seconds a request may take in all; None/0 = no limit
    chat_template: Optional[str] = None
    max_batch_tokens: int = 512
    shutdown_grace: float = 5.0        # seconds in-flight requests get after SIGTERM
    # limits on one client (server/limits.py): 413 over max_body_size (0/None = unlimited);
    # request headers must arrive within read_timeout of connecting, the body within
    # read_timeout of its headers (408) (0/None = no limit)
    max_body_size: Optional[int] = 8 << 20
    read_timeout: Optional[float] = 30.0
    n_gpu_layers: int = 0              # last layers on a CUDA GPU (-1 = all); README "CUDA"
    verbose: bool = False              # every chat answer carries "__verbose" (rendered prompt)
    # embeddings (server/embeddings.py): --pooling, --embd-normalize, --embedding
    pooling: Optional[str] = None      # none | mean | cls | last; None = the model's (else mean)
    embd_normalize: int = 2            # llama.cpp's embd_normalize for pooled vectors
    embedding: bool = False            # --embedding: accepted; embeddings are always served
    # llama-server's options (docs/SERVER.md "llama.cpp's native endpoints"); web pages allowed
    # ("" none, "*", "localhost", origins) and Host names answered without a key ("Security")
    cors_origins: str = ""
    allowed_hosts: str = ""            # comma list of names, ".example.com", or "*" (any)
    cors_methods: str = "GET, POST, DELETE, OPTIONS"
    cors_headers: str = "*"
    cors_credentials: bool = True
    n_predict: Optional[int] = None    # max tokens for requests that give none (None = no limit)
    seed: Optional[int] = None         # default seed when a request gives none (None = random)
    temperature: Optional[float] = None  # default temperature when a request gives none
    slots_endpoint: bool = True        # GET /slots (501 when off, as llama-server)
    metrics_endpoint: bool = True      # GET /metrics (501 when off)
    tags: Optional[str] = None         # llama-server's --tags: comma list shown in /v1/models
    reasoning: str = "auto"            # llama-server's --reasoning: off = enable_thinking false
    # speculative decoding (--spec, --draft, --draft-max): LLM(speculative=, draft_model=, ...)
    speculative: str = "auto"          # auto | ngram | draft | off
    draft_model: Optional[str] = None  # the draft model's path (or known name)
    num_speculative_tokens: Optional[int] = None  # None = the engine's default
    # llama-server's --context-shift: a full context keeps n_keep + the newer half and goes on
    context_shift: bool = False
    # vision input (edgellm.vision): --mmproj (None: the one mmproj*.gguf beside the model),
    # file:// image URLs only under --media-path, http(s) fetched only with --allow-remote-media
    mmproj: Optional[str] = None
    # several models: --mmproj MODEL=PATH, the projector of each model named (as given, or its
    # --alias NAME); the others find theirs beside their file
    model_mmproj: Dict[str, str] = field(default_factory=dict)
    media_path: Optional[str] = None
    allow_remote_media: bool = False
    # the persistent prefix cache (LLM(cache_dir=...)) and llama-server's --slot-save-path
    cache_dir: Optional[str] = None
    cache_max_bytes: Optional[int] = None
    # LoRA adapters loaded with the model (--lora NAME=PATH[:SCALE]): (name, path, scale)
    lora: List[Tuple[str, str, float]] = field(default_factory=list)
    lora_base: Optional[str] = None    # the model path they are for (None: every model)
    slot_save_path: Optional[str] = None
    # thermal back-off (edgellm.thermal): fewer compute threads while the SoC throttles
    thermal_backoff: bool = False
    thermal_root: str = "/"            # where sys/class/thermal and cpufreq are read (tests: a tmp tree)
    thermal_interval: float = 2.0      # seconds between readings
    # many models in one server (server/model_catalog.py, model_pool.py; docs/SERVER.md
    # "Several models"): (as given, resolved path) per MODEL argument, --models-dir,
    # --alias NAME=MODEL (NAME -> resolved path), and what stays loaded
    models: List[Tuple[str, str]] = field(default_factory=list)
    models_dir: Optional[str] = None
    model_aliases: Dict[str, str] = field(default_factory=dict)
    keep_alive: Optional[float] = 300.0    # seconds idle before a model unloads; None = never
    max_loaded_models: Optional[int] = None  # None = as many as --models-memory holds
    models_memory: Optional[int] = None    # bytes for all loaded models; None = the machine's

    @property
    def multi_model(self) -> bool:
        """Several models (or a folder of them): the request's `model` picks one."""
        return bool(self.models_dir or self.model_aliases or len(self.models) > 1)

    @property
    def hosts(self) -> list:
        return host_list(self.host)

    @property
    def tag_list(self) -> list:
        """--tags, comma-separated (as llama-server's)."""
        return [t.strip() for t in (self.tags or "").split(",") if t.strip()]

    @property
    def model_id(self) -> str:
        if self.alias:
            return self.aliases[0]  # llama-server: the first of the sorted aliases
        return self.model.replace("\\", "/").rsplit("/", 1)[-1]

    @property
    def aliases(self) -> list:
        """--alias may list several names, comma-separated (as llama-server's)."""
        return sorted({a.strip() for a in (self.alias or "").split(",") if a.strip()}) \
            or ([self.alias] if self.alias else [])


def host_list(text: str) -> list:
    """--host may name several addresses, comma-separated (as llama-server's)."""
    return [h.strip() for h in text.split(",") if h.strip()]
