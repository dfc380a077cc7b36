"""Shared test fixtures: the real models, the golden files, the markers.

Real models come from the cache that `edgellm models fetch` fills. A test that needs one takes
the fixture (smollm2_path, gemma3_path, qwen_path) and is skipped with a reason when it is not
fetched -- except under EDGELLM_REQUIRE_MODELS=1 (CI), where a missing model or golden file is
an error, so CI can never pass by skipping.
"""
import importlib.util
import json
import os
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent


def _load_registry():
    # By file path: python/edgellm/models.py is standard library only, and importing the
    # edgellm package would need the built extension.
    path = REPO_ROOT / "python" / "edgellm" / "models.py"
    spec = importlib.util.spec_from_file_location("edgellm_models_for_tests", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


model_registry = _load_registry()


def _required(var: str) -> bool:
    return os.environ.get(var, "") not in ("", "0")


def _missing(reason: str, require_var: str = "EDGELLM_REQUIRE_MODELS"):
    if _required(require_var):
        pytest.fail(f"{reason} ({require_var}=1 forbids skipping)", pytrace=False)
    pytest.skip(reason)


def pytest_configure(config):
    # pyproject.toml registers these too; here so the suite also runs from a bare tests/ copy.
    config.addinivalue_line("markers", "real_model: needs the real GGUF models (edgellm models fetch)")
    config.addinivalue_line("markers", "slow: takes more than a few seconds")


def require_model(name: str) -> Path:
    """The cached path of a known model, or skip (fail in CI) when it is not fetched."""
    name = model_registry.canonical_name(name)
    path = model_registry.model_path(name)
    if not path.is_file():
        _missing(f"model not fetched: run `edgellm models fetch {name}` (looked for {path})")
    if not model_registry.is_cached(name):
        _missing(f"model file incomplete: {path} has {path.stat().st_size} bytes, expected "
                 f"{model_registry.KNOWN_MODELS[name].size}; run `edgellm models fetch --verify {name}`")
    return path


@pytest.fixture(scope="session")
def smollm2_path() -> Path:
    return require_model("smollm2")


@pytest.fixture(scope="session")
def gemma3_path() -> Path:
    return require_model("gemma3")


@pytest.fixture(scope="session")
def qwen_path() -> Path:
    return require_model("qwen2.5-coder-0.5b")


def shared_dir() -> Path:
    """Reference material beside the clone: $EDGELLM_SHARED, else <repo>/../shared."""
    env = os.environ.get("EDGELLM_SHARED")
    return Path(env).expanduser() if env else REPO_ROOT.parent / "shared"


def _load_shared(folder: str, what: str, name: str) -> dict:
    stem = name[:-5] if name.endswith(".json") else name
    path = shared_dir() / folder / f"{stem}.json"
    if not path.is_file():
        _missing(f"{what} file missing: {path} (set EDGELLM_SHARED to the shared/ folder)")
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def load_golden(name: str) -> dict:
    """shared/golden/<name>.json, e.g. load_golden("smollm2-135m-q4_1")."""
    return _load_shared("golden", "golden", name)


def load_fixture_spec(name: str) -> dict:
    """shared/fixtures/<name>.json (tiny random-weight models' expected outputs)."""
    return _load_shared("fixtures", "fixture", name)


@pytest.fixture(scope="session")
def golden():
    """The loader: golden("gemma3-270m-q4_k_m") -> the parsed JSON (cached per session)."""
    cache = {}

    def get(name: str) -> dict:
        if name not in cache:
            cache[name] = load_golden(name)
        return cache[name]

    return get
