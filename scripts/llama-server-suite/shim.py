"""llama-server's command line -> `edgellm serve`, so that llama.cpp's own server tests
(tools/server/tests in llama.cpp) can run against edgellm unmodified.

The tests start LLAMA_SERVER_BIN_PATH with llama-server flags (tests/utils.py ServerProcess).
Each flag is either mapped to an `edgellm serve` option, ignored with a note on stderr (it has
no meaning here: e.g. --cont-batching, which edgellm always does), or refused with exit status 2
(a feature edgellm does not have: LoRA, router mode, ...), so that a test
needing it fails at start-up saying why instead of passing by accident.

Models: the tests name Hugging Face repos; they are mapped to the local test models
(`edgellm models list`). Unknown models are refused.
"""
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

# llama-server flag -> edgellm serve option (the value follows in both)
VALUE_MAP = {
    "--port": "--port",
    "--threads": "--threads",
    "-t": "--threads",
    "--n-gpu-layers": "--n-gpu-layers",
    "-ngl": "--n-gpu-layers",
    "--api-key": "--api-key",
    "--api-key-file": "--api-key-file",
    "--batch-size": "--max-batch-tokens",
    "-b": "--max-batch-tokens",
    "--n-predict": "--n-predict",
    "-n": "--n-predict",
    "--temp": "--temp",
    "--seed": "--seed",
    "-s": "--seed",
    "--cors-origins": "--cors-origins",
    "--cors-methods": "--cors-methods",
    "--cors-headers": "--cors-headers",
    "--chat-template": "--chat-template",
    "--chat-template-file": "--chat-template",
    "--pooling": "--pooling",
    "--timeout": "--timeout",
    "--tags": "--tags",
    "--reasoning": "--reasoning",
    "-to": "--timeout",
    "--slot-save-path": "--slot-save-path",
    "--spec-draft-n-max": "--draft-max",
    "--draft-max": "--draft-max",
    "--draft": "--draft-max",
    "--draft-n": "--draft-max",
}
# llama-server switch -> edgellm serve switch
SWITCH_MAP = {
    "--metrics": "--metrics",
    "--slots": "--slots",
    "--no-slots": "--no-slots",
    "--embedding": "--embedding",
    "--embeddings": "--embedding",
    "--cors-credentials": "--cors-credentials",
    "--no-cors-credentials": "--no-cors-credentials",
    "--context-shift": "--context-shift",
    "--no-context-shift": "--no-context-shift",
    "--no-ui": "--no-webui",       # edgellm's web chat page at /
    "--no-webui": "--no-webui",
}
# Handled here: --host, --model/-m, --hf-repo/-hf, --hf-file/-hff, --alias/-a, --ctx-size/-c,
# --parallel/-np, --verbose/-v, --model-draft/-md, --spec-type.
HANDLED_VALUE = {"--host", "--model", "-m", "--hf-repo", "-hf", "-hfr", "--hf-file", "-hff",
                 "--alias", "-a", "--ctx-size", "-c", "--parallel", "-np",
                 "--model-draft", "-md", "--spec-type"}

# No meaning for edgellm: accepted, and said so on stderr.
IGNORED_SWITCH = {
    "--offline": "models are local files here; nothing is downloaded",
    "--cont-batching": "edgellm always batches running sequences together",
    "-cb": "edgellm always batches running sequences together",
    "--swa-full": "sliding-window layers keep their own window-sized pages",
    "--jinja": "chat templates are always rendered with edgellm's Jinja renderer",
    "--no-jinja": "chat templates are always rendered with edgellm's Jinja renderer",
    "--no-mmproj": "edgellm loads no multimodal projector",
    "--no-cache-idle-slots": "edgellm keeps no per-slot state; the prefix cache is shared",
    "--backend_sampling": "sampling runs on the CPU",
    "--reranking": "edgellm serves /rerank on a reranker with no flag",
    "--rerank": "edgellm serves /rerank on a reranker with no flag",
}
IGNORED_VALUE = {
    "--ubatch-size": "edgellm has one batch size (--batch-size -> --max-batch-tokens)",
    "-ub": "edgellm has one batch size (--batch-size -> --max-batch-tokens)",
    "-ctk": "the KV cache type is not a server option here (f16)",
    "-ctv": "the KV cache type is not a server option here (f16)",
    "--cache-type-k": "the KV cache type is not a server option here (f16)",
    "--cache-type-v": "the KV cache type is not a server option here (f16)",
    "-fa": "the attention kernel is chosen by the engine",
    "--flash-attn": "the attention kernel is chosen by the engine",
    "--reasoning-format": "edgellm does not split reasoning out of the content",
    "--cache-ram": "the prefix cache lives in the KV pages (--kv-memory)",
    "--spec-draft-n-min": "edgellm sizes each draft from measured step costs and acceptance",
    "--draft-min": "edgellm sizes each draft from measured step costs and acceptance",
    "--draft-p-min": "edgellm sizes each draft from measured step costs and acceptance",
}
# Features edgellm does not have: refused, so the test fails saying why.
REFUSED = {
    "--model-url": "downloading models by URL", "-mu": "downloading models by URL",
    "--spec-synth-len": "synthetic draft acceptance (llama-server's testing aid)",
    "--spec-synth-rates": "synthetic draft acceptance (llama-server's testing aid)",
    "--models-dir": "router mode (several models)", "--models-max": "router mode (several models)",
    "--models-preset": "router mode (several models)",
    "--no-models-autoload": "router mode (several models)",
    "--grp-attn-n": "group attention (self-extend)", "--grp-attn-w": "group attention (self-extend)",
    "--lora": "LoRA adapters",
    "--mmproj-url": "multimodal input", "--media-path": "multimodal input",
    "--sleep-idle-seconds": "sleeping when idle",
    "--ui-mcp-proxy": "the web UI's MCP proxy",
    "--tools": "built-in server tools", "--tools-runtime": "built-in server tools",
    "--mcp-servers-config": "MCP servers", "--mcp-servers-json": "MCP servers",
}
REFUSED_SWITCHES = {"--no-models-autoload", "--ui-mcp-proxy"}


def note(msg: str) -> None:
    print(f"llama-server shim: {msg}", file=sys.stderr, flush=True)


def refuse(msg: str) -> "NoReturn":  # noqa: F821
    note(msg)
    sys.exit(2)


def map_model(model, hf_repo, hf_file):
    """(edgellm model name or path, why) for what the test asked for."""
    if model:
        if os.path.isfile(model):
            return model, "the file given"
        refuse(f"--model {model}: no such file")
    if not hf_repo and not hf_file:
        return ("smollm2", "no model given is llama-server's router mode, which edgellm does not "
                "have; serving smollm2 so that the server-level tests (CORS, auth) can run")
    found = standin(f"{hf_repo or ''}/{hf_file or ''}")
    if found is None:
        refuse(f"no local stand-in for model {hf_repo or ''} {hf_file or ''}".rstrip())
    return found


def standin(name: str):
    """(local model name, why) standing in for a model the suite names (a Hugging Face repo /
    file, or a downloaded file's name), or None when there is none."""
    key = name.lower()
    if "stories260k-infill" in key:
        return "qwen2.5-coder-0.5b", "stand-in for stories260K-infill (a model with FIM tokens)"
    if "stories260k" in key or "tinyllamas/" in key or "stories15m" in key:
        return "smollm2", "stand-in for the tiny stories models"
    if "bert-bge-small" in key:
        # a BERT with bge-small's uncased WordPiece vocabulary (issue 41)
        name = os.environ.get("EDGELLM_SUITE_EMBEDDING_MODEL", "all-minilm-l6-v2")
        return name, "stand-in for bert-bge-small (embeddings)"
    if "qwen2.5-coder" in key:
        return "qwen2.5-coder-0.5b", "stand-in for the Qwen2.5-Coder models"
    if "reranker" in key:
        # bge-reranker-v2-m3's shape (an XLM-R cross-encoder, llama.cpp's conversion), random weights:
        # the route, its shapes and refusals are tested, not which document is relevant (issue 41)
        path = os.environ.get("EDGELLM_SUITE_RERANK_MODEL") or str(
            Path(__file__).resolve().parents[2] / "tests" / "data" / "encoders" / "tiny-xlmr-reranker.llamacpp.gguf")
        return path, "stand-in for jina-reranker-v1-tiny-en (a random-weight bge-reranker-v2-m3-shaped cross-encoder)"
    return None


def map_spec_type(value: str) -> str:
    """llama-server's --spec-type -> edgellm's --spec: the draft-model types -> draft, the n-gram
    (prompt lookup) types -> ngram, none -> off."""
    v = value.strip().lower()
    if v in ("none", "off"):
        return "off"
    if v.startswith("draft"):
        return "draft"
    if v.startswith("ngram") or v.startswith("lookup"):
        return "ngram"
    refuse(f"--spec-type {value}: edgellm has draft-model and n-gram drafting only")


def serve_options():
    """The option names `edgellm serve` has (features land at different times)."""
    from edgellm.commands.serve import command

    names = set()
    for p in command.params:
        names.update(getattr(p, "opts", ()))
        names.update(getattr(p, "secondary_opts", ()))
    return names


def main(argv):
    out = []
    host, model, hf_repo, hf_file, alias = "127.0.0.1", None, None, None, None
    ctx, parallel, verbose, unified, metrics = None, None, False, False, False
    draft, spec = None, None
    i = 0
    while i < len(argv):
        flag = argv[i]
        value = None
        if "=" in flag and flag.startswith("--"):
            flag, value = flag.split("=", 1)
        takes_value = (flag in VALUE_MAP or flag in HANDLED_VALUE or flag in IGNORED_VALUE
                       or (flag in REFUSED and flag not in REFUSED_SWITCHES))
        if takes_value and value is None:
            if i + 1 >= len(argv):
                refuse(f"{flag} needs a value")
            value = argv[i + 1]
            i += 1
        i += 1
        if flag in REFUSED:
            refuse(f"{flag}: edgellm has no {REFUSED[flag]}")
        elif flag in VALUE_MAP:
            out.append((VALUE_MAP[flag], value))
        elif flag in SWITCH_MAP:
            out.append((SWITCH_MAP[flag], None))
            metrics = metrics or flag == "--metrics"
        elif flag == "--host":
            host = value
        elif flag in ("--model", "-m"):
            model = value
        elif flag in ("--hf-repo", "-hf", "-hfr"):
            hf_repo = value
        elif flag in ("--hf-file", "-hff"):
            hf_file = value
        elif flag in ("--alias", "-a"):
            alias = value
        elif flag in ("--model-draft", "-md"):
            if not os.path.isfile(value):
                refuse(f"--model-draft {value}: no such file")
            draft = value
        elif flag == "--spec-type":
            spec = map_spec_type(value)
        elif flag in ("--ctx-size", "-c"):
            ctx = int(value)
        elif flag in ("--parallel", "-np"):
            parallel = int(value)
        elif flag in ("--verbose", "-v"):
            verbose = True
        elif flag in ("--kv-unified", "-kvu"):
            unified = True
        elif flag in IGNORED_SWITCH:
            note(f"ignoring {flag}: {IGNORED_SWITCH[flag]}")
        elif flag in IGNORED_VALUE:
            note(f"ignoring {flag} {value}: {IGNORED_VALUE[flag]}")
        else:
            refuse(f"unknown llama-server flag {flag!r} (add it to scripts/llama-server-suite/shim.py)")

    name, why = map_model(model, hf_repo, hf_file)
    note(f"model {hf_repo or model or '-'} {hf_file or ''} -> {name} ({why})")

    # llama-server splits --ctx-size over the --parallel slots, unless --kv-unified, where each
    # slot may use the whole context of one shared pool (which edgellm's paged KV cache always
    # is); edgellm's --ctx-size is per sequence.
    n_par = parallel if parallel and parallel > 0 else 1
    out.append(("--parallel", str(n_par)))
    if ctx:
        out.append(("--ctx-size", str(ctx if unified else max(1, ctx // n_par))))
    out.append(("--host", host))
    if not metrics:
        out.append(("--no-metrics", None))  # llama-server serves /metrics only with --metrics
    if not any(opt == "--cors-origins" for opt, _ in out):
        out.append(("--cors-origins", "*"))  # llama-server's default; edgellm's is none
    if alias:
        out.append(("--alias", alias))
    out.append(("--log-level", "debug" if verbose else "info"))
    # speculative decoding: llama-server drafts only when given a draft model or a --spec-type;
    # edgellm's default (auto: n-gram drafts, plus the draft model when given) is kept otherwise
    if draft:
        out.append(("--draft", draft))
    if spec == "draft" and not draft:
        refuse("--spec-type draft-*: needs --model-draft")
    if spec:
        out.append(("--spec", spec))
    if verbose:
        out.append(("--verbose", None))

    env = dict(os.environ)
    if env.get("EDGELLM_BUILD_DIR"):  # a development build: the package comes from the checkout
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO / "python"), env.get("PYTHONPATH")]))
        env["EDGELLM_BUILD_DIR"] = os.path.abspath(env["EDGELLM_BUILD_DIR"])
        sys.path.insert(0, str(REPO / "python"))
    os.environ.update(env)  # else: the installed edgellm (CI), with its built extension
    have = serve_options()
    kept = []
    for opt, val in out:
        if opt not in have:
            note(f"`edgellm serve` has no {opt} option (yet); dropped")
            continue
        kept += [opt] if val is None else [opt, val]
    cmd = [sys.executable, "-m", "edgellm", "serve", name, *kept]
    note("exec " + " ".join(cmd))
    if os.environ.get("LLAMA_SHIM_DRY_RUN"):  # tests: print the command instead of running it
        print("\0".join(cmd[3:]))
        return
    sys.stdout.flush()
    os.execve(sys.executable, cmd, env)


if __name__ == "__main__":
    main(sys.argv[1:])
