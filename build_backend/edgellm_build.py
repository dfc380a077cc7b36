"""PEP 517 backend: scikit-build-core, plus a wheel cache keyed by the build's inputs.

pip builds every `pip install .` in a fresh isolated environment, and scikit-build-core
clears its CMake cache and object files whenever that environment changes, so a second
`pip install .` (the README's test command after its install command) recompiled the whole
C++ core. Here `build_wheel` first hashes what goes into the wheel -- the C++ and Python
sources, the CMake files, pyproject.toml, README.md, the interpreter, the build tools'
versions, config settings and the environment variables CMake and the compiler read -- and
when build/wheel-cache/<hash>/ already holds the wheel built from exactly those inputs it
hands that wheel to pip instead of building again. Anything else is scikit-build-core's.

EDGELLM_WHEEL_CACHE=0 turns the cache off.
"""
import hashlib
import json
import os
import shutil
import sys
from pathlib import Path

from scikit_build_core import build as _skb
from scikit_build_core.build import (  # the rest of the PEP 517 interface
    build_editable,
    build_sdist,
    get_requires_for_build_editable,
    get_requires_for_build_sdist,
    get_requires_for_build_wheel,
    prepare_metadata_for_build_editable,
    prepare_metadata_for_build_wheel,
)

__all__ = ["build_wheel", "build_editable", "build_sdist", "get_requires_for_build_wheel",
           "get_requires_for_build_editable", "get_requires_for_build_sdist",
           "prepare_metadata_for_build_wheel", "prepare_metadata_for_build_editable"]

ROOT = Path(__file__).resolve().parent.parent
CACHE = ROOT / "build" / "wheel-cache"
KEEP = 3  # cached wheels kept (most recent first)

_INPUT_FILES = ("CMakeLists.txt", "pyproject.toml", "README.md", "LICENSE", "fuzz/CMakeLists.txt")
_INPUT_DIRS = ("cpp", "python", "cmake", "build_backend")
# What CMake and the compiler read from the environment (not PATH: pip's isolated build
# environment changes it every time; not CMAKE_BUILD_PARALLEL_LEVEL: it changes no output).
_ENV_PREFIXES = ("CMAKE_", "SKBUILD_", "CUDA", "NVCC")
_ENV_NAMES = ("CC", "CXX", "CFLAGS", "CXXFLAGS", "CPPFLAGS", "LDFLAGS", "ARCHFLAGS")
_ENV_IGNORED = ("CMAKE_BUILD_PARALLEL_LEVEL",)


def _inputs_hash(config_settings) -> str:
    h = hashlib.sha256()

    def add(label: str, data: bytes) -> None:
        h.update(label.encode() + b"\0" + len(data).to_bytes(8, "little") + data)

    for name in _INPUT_FILES:
        p = ROOT / name
        if p.is_file():
            add(name, p.read_bytes())
    for d in _INPUT_DIRS:
        base = ROOT / d
        if not base.is_dir():
            continue
        for p in sorted(base.rglob("*")):
            if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc":
                add(p.relative_to(ROOT).as_posix(), p.read_bytes())
    tools = {}
    for mod in ("scikit_build_core", "pybind11"):
        try:
            tools[mod] = __import__(mod).__version__
        except Exception:  # pragma: no cover - a tool without __version__
            tools[mod] = "?"
    env = {k: v for k, v in os.environ.items()
           if (k.startswith(_ENV_PREFIXES) or k in _ENV_NAMES) and k not in _ENV_IGNORED}
    add("meta", json.dumps({
        "python": sys.version, "executable_prefix": sys.base_prefix, "platform": sys.platform,
        "tools": tools, "config": config_settings or {}, "env": env,
    }, sort_keys=True, default=str).encode())
    return h.hexdigest()[:32]


def _cached_wheel(key: str):
    d = CACHE / key
    wheels = sorted(d.glob("*.whl")) if d.is_dir() else []
    return wheels[0] if len(wheels) == 1 else None


def _store(key: str, wheel: Path) -> None:
    d = CACHE / key
    tmp = CACHE / f".{key}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    shutil.copy2(wheel, tmp / wheel.name)
    shutil.rmtree(d, ignore_errors=True)
    tmp.rename(d)
    entries = sorted((p for p in CACHE.iterdir() if p.is_dir() and not p.name.startswith(".")),
                     key=lambda p: p.stat().st_mtime, reverse=True)
    for old in entries[KEEP:]:
        shutil.rmtree(old, ignore_errors=True)


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    if os.environ.get("EDGELLM_WHEEL_CACHE", "1") in ("0", "false", "no", "off"):
        return _skb.build_wheel(wheel_directory, config_settings, metadata_directory)
    try:
        key = _inputs_hash(config_settings)
    except OSError:
        return _skb.build_wheel(wheel_directory, config_settings, metadata_directory)
    hit = _cached_wheel(key)
    if hit is not None:
        shutil.copy2(hit, Path(wheel_directory) / hit.name)
        os.utime(hit.parent)  # most recently used
        print(f"edgellm: the sources are unchanged since {hit.name} was built; reusing it "
              f"({hit.parent.relative_to(ROOT)}; EDGELLM_WHEEL_CACHE=0 rebuilds)", file=sys.stderr)
        return hit.name
    name = _skb.build_wheel(wheel_directory, config_settings, metadata_directory)
    try:
        _store(key, Path(wheel_directory) / name)
    except OSError as e:  # a read-only tree: build without caching
        print(f"edgellm: wheel not cached ({e})", file=sys.stderr)
    return name
