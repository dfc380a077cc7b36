"""Ollama's model verbs: `edgellm pull`, `list`, `ps`, `show`, `rm`, `cp` (edgellm/hub.py).

Output as Ollama's CLI prints it: tables with Ollama's columns (NAME ID SIZE MODIFIED for `list`,
NAME ID SIZE PROCESSOR CONTEXT UNTIL for `ps`), left-aligned, four spaces between columns,
sizes in decimal units; `show` in Ollama's sections. Progress goes to stderr; stdout holds only
the result (`pull` prints the model file's path).
"""
from __future__ import annotations

import json
import os
import sys
import time
from typing import List, Optional, Sequence

import click

_PAD = "    "  # Ollama's tablewriter padding


def _table(header: Optional[Sequence[str]], rows: List[Sequence[str]], indent: bool = False) -> str:
    """Ollama's borderless table: each column as wide as its widest cell, 4 spaces between.
    indent: Ollama's `show` rows, whose first (empty) column puts 4 spaces before each row."""
    all_rows = ([list(header)] if header else []) + [list(r) for r in rows]
    if not all_rows:
        return ""
    ncol = max(len(r) for r in all_rows)
    widths = [max(len(r[i]) if i < len(r) else 0 for r in all_rows) for i in range(ncol)]
    lead = _PAD if indent else ""
    return "\n".join(lead + _PAD.join(c.ljust(widths[i]) for i, c in enumerate(r)).rstrip()
                     for r in all_rows)


def _ago(t: float) -> str:
    """Ollama's HumanTime: '2 minutes ago', 'About an hour ago', ..."""
    s = int(time.time() - t)
    if s < 0:
        return "Less than a second ago"
    if s < 1:
        return "Less than a second ago"
    if s == 1:
        return "1 second ago"
    if s < 60:
        return f"{s} seconds ago"
    m = s // 60
    if m == 1:
        return "About a minute ago"
    if m < 60:
        return f"{m} minutes ago"
    h = round(s / 3600)
    if h == 1:
        return "About an hour ago"
    if h < 48:
        return f"{h} hours ago"
    if h < 24 * 14:
        return f"{h // 24} days ago"
    if h < 24 * 60:
        return f"{h // 24 // 7} weeks ago"
    if h < 24 * 730:
        return f"{h // 24 // 30} months ago"
    return f"{h // 24 // 365} years ago"


def _fail(e: Exception) -> None:
    raise click.ClickException(str(e))


@click.command("pull", short_help="Pull a model from Hugging Face (or a known model).")
@click.argument("model")
def pull(model: str) -> None:
    """Download MODEL: hf.co/USER/REPO[:QUANT] (the quant picks the .gguf; default Q4_K_M), or a
    known model name. Prints the model file's path; progress goes to stderr."""
    from edgellm import hub
    from edgellm.models import ModelFetchError, UnknownModelError

    try:
        path = hub.pull(model)
    except (UnknownModelError, ModelFetchError, OSError) as e:
        _fail(e)
    except KeyboardInterrupt:
        sys.exit(130)
    click.echo(str(path))


@click.command("list", short_help="List models.")
@click.argument("prefix", required=False)
def list_models(prefix: Optional[str]) -> None:
    """List the models on this machine (fetched known models, pulled and copied names)."""
    from edgellm import hub
    from edgellm.download_progress import human_bytes
    from edgellm.models import ModelFetchError

    try:
        found = hub.local_models()
    except ModelFetchError as e:
        _fail(e)
    rows = [(m.name, (m.digest or "-")[:12], human_bytes(m.size), _ago(m.modified))
            for m in found if not prefix or m.name.lower().startswith(prefix.lower())]
    click.echo(_table(("NAME", "ID", "SIZE", "MODIFIED"), rows))


def _server_url(host: Optional[str]) -> str:
    url = host or os.environ.get("EDGELLM_HOST") or "http://127.0.0.1:8080"
    return (url if "://" in url else f"http://{url}").rstrip("/")


def _get_json(url: str, api_key: Optional[str]):
    import urllib.request

    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {api_key}"} if api_key else {})
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.loads(r.read().decode("utf-8"))


def _running(base: str, api_key: Optional[str]) -> List[dict]:
    """Ollama's /api/ps models; a server without Ollama's API answers from /v1/models."""
    import urllib.error

    try:
        return list(_get_json(f"{base}/api/ps", api_key).get("models") or [])
    except urllib.error.HTTPError as e:
        if e.code != 404:
            raise
    models = []
    for card in _get_json(f"{base}/v1/models", api_key).get("data") or []:
        status = card.get("status") or {"value": "loaded"}  # one-model server: always loaded
        if status.get("value") != "loaded":
            continue
        meta = card.get("meta") or {}
        expires = status.get("expires_at")
        models.append({"name": card.get("id"), "digest": "", "size": meta.get("memory_bytes") or 0,
                       "size_vram": 0, "context_length": meta.get("n_ctx") or 0,
                       "expires_at": (time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(expires))
                                      if expires else None)})
    return models


def _until(expires_at: Optional[str]) -> str:
    if not expires_at:
        return "Forever"
    from datetime import datetime, timezone

    try:
        t = datetime.fromisoformat(expires_at.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return expires_at
    delta = t - time.time()
    if delta <= 0:
        return "Stopping..."
    if delta > 20 * 365 * 86400:
        return "Forever"
    return _ago(time.time() - delta).replace(" ago", " from now")


def _processor(size: int, vram: int) -> str:
    if not vram:
        return "100% CPU"
    if vram == size:
        return "100% GPU"
    if vram > size or not size:
        return "Unknown"
    cpu = round((size - vram) / size * 100)
    return f"{cpu}%/{100 - cpu}% CPU/GPU"


@click.command("ps", short_help="List running models.")
@click.option("--host", default=None, metavar="URL",
              help="The server to ask (default: $EDGELLM_HOST, else http://127.0.0.1:8080).")
@click.option("--api-key", default=None, envvar="EDGELLM_API_KEY", help="The server's API key.")
def ps(host: Optional[str], api_key: Optional[str]) -> None:
    """List the models a running `edgellm serve` has loaded."""
    import urllib.error

    from edgellm.download_progress import human_bytes

    base = _server_url(host)
    try:
        running = _running(base, api_key)
    except urllib.error.HTTPError as e:
        raise click.ClickException(f"the server at {base} answered {e.code} {e.reason}"
                                   + (" (give --api-key)" if e.code == 401 else ""))
    except (urllib.error.URLError, OSError, ValueError) as e:
        reason = getattr(e, "reason", e)
        raise click.ClickException(
            f"no edgellm server is running at {base} ({reason}); start one with "
            "`edgellm serve MODEL`, or name it with --host / EDGELLM_HOST")
    rows = [(str(m.get("name") or m.get("model")), (m.get("digest") or "-")[:12],
             human_bytes(int(m.get("size") or 0)),
             _processor(int(m.get("size") or 0), int(m.get("size_vram") or 0)),
             str(m.get("context_length") or "-"), _until(m.get("expires_at")))
            for m in running]
    click.echo(_table(("NAME", "ID", "SIZE", "PROCESSOR", "CONTEXT", "UNTIL"), rows))


def _human_number(n: int) -> str:
    """Ollama's HumanNumber: 134515008 -> '134.52M', 1.5e9 -> '1.5B'."""
    for div, suffix, digits in ((1e9, "B", 1), (1e6, "M", 2)):
        if n >= div:
            v = n / div
            return f"{v:.0f}{suffix}" if v == int(v) else f"{v:.{digits}f}{suffix}"
    return f"{n / 1e3:.0f}K" if n >= 1e3 else str(n)


def _capabilities(md: dict, mmproj) -> List[str]:
    template = md.get("tokenizer.chat_template") or ""
    caps = ["completion"]
    if "tools" in template:
        caps.append("tools")
    if md.get("tokenizer.ggml.fim_pre_token_id") is not None:
        caps.append("insert")
    if mmproj is not None:
        caps.append("vision")
    if "<think>" in template or "enable_thinking" in template:
        caps.append("thinking")
    return caps


@click.command("show", short_help="Show information for a model.")
@click.argument("model")
@click.option("--license", "what", flag_value="license", help="Show the model's license.")
@click.option("--modelfile", "what", flag_value="modelfile", help="Show a Modelfile for the model.")
@click.option("--parameters", "what", flag_value="parameters", help="Show the model's parameters.")
@click.option("--system", "what", flag_value="system", help="Show the model's system message.")
@click.option("--template", "what", flag_value="template", help="Show the model's chat template.")
@click.option("-v", "--verbose", is_flag=True, help="Show the GGUF metadata too.")
def show(model: str, what: Optional[str], verbose: bool) -> None:
    """Show what MODEL is (a name from `edgellm list`, a known model or a .gguf path)."""
    import edgellm
    from edgellm import hub
    from edgellm.models import ModelFetchError, UnknownModelError, resolve
    from edgellm.repl.model_facts import _FILE_TYPES

    try:
        local = hub.find(model)
        path = local.path if local else resolve(model, fetch=False)
        with edgellm.ModelFile(str(path)) as mf:
            md = mf.metadata
            n_params = sum(t.n_elements for t in mf.tensors.values())
    except (UnknownModelError, ModelFetchError, FileNotFoundError, OSError,
            edgellm.ModelFormatError) as e:
        _fail(e)
    template = md.get("tokenizer.chat_template") or ""
    license_ = str(md.get("general.license") or "")
    if what == "license":
        click.echo(license_)
        return
    if what == "template":
        click.echo(template, nl=False)
        return
    if what in ("system", "parameters"):
        return  # a GGUF holds neither; Ollama prints them empty too
    if what == "modelfile":
        click.echo(f"# Modelfile generated by \"edgellm show\"\nFROM {path}\n"
                   + (f'TEMPLATE """{template}"""\n' if template else ""))
        return
    arch = md.get("general.architecture")
    rows = [("architecture", str(arch)), ("parameters", _human_number(n_params))]
    for key, label in (("context_length", "context length"),
                       ("embedding_length", "embedding length")):
        if md.get(f"{arch}.{key}") is not None:
            rows.append((label, str(md[f"{arch}.{key}"])))
    rows.append(("quantization", _FILE_TYPES.get(md.get("general.file_type"), "unknown")))
    sections = [("Model", rows),
                ("Capabilities", [(c,) for c in _capabilities(md, local.mmproj if local else None)])]
    if verbose:
        sections.append(("Metadata", [(k, _short(v)) for k, v in sorted(md.items())]))
    if license_:
        lines = [ln.strip() for ln in license_.splitlines() if ln.strip()]
        sections.append(("License", [(ln,) for ln in lines[:2]] + ([("...",)] if len(lines) > 2 else [])))
    for title, body in sections:
        click.echo(f"  {title}\n{_table(None, body, indent=True)}\n")


def _short(v) -> str:
    if isinstance(v, (list, tuple)):
        head = ", ".join(str(x) for x in v[:3])
        return f"[{head}{f' ...+{len(v) - 3} more' if len(v) > 3 else ''}]"
    text = str(v)
    return text if len(text) <= 60 else text[:57] + "..."


@click.command("rm", short_help="Remove a model.")
@click.argument("models", nargs=-1, required=True)
def rm(models: Sequence[str]) -> None:
    """Remove MODELS: the names, and the files no other name uses."""
    from edgellm import hub
    from edgellm.models import ModelFetchError, UnknownModelError

    for name in models:
        try:
            hub.remove(name)
        except (UnknownModelError, ModelFetchError, OSError) as e:
            _fail(e)
        click.echo(f"deleted '{name}'")


@click.command("cp", short_help="Copy a model.")
@click.argument("source")
@click.argument("destination")
def cp(source: str, destination: str) -> None:
    """Give the model SOURCE another name, DESTINATION (no bytes are copied)."""
    from edgellm import hub
    from edgellm.models import ModelFetchError, UnknownModelError

    try:
        hub.copy(source, destination)
    except (UnknownModelError, ModelFetchError, OSError) as e:
        _fail(e)
    click.echo(f"copied '{source}' to '{destination}'")
