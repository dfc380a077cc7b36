#!/usr/bin/env python3
"""Fetch the real test models without installing edgellm:

    python models/fetch.py [all|NAME ...]     # same as `edgellm models fetch`; all = the test models
    python models/fetch.py qwen2.5-coder-1.5b  # a model outside `all` (see models/README.md)
    python models/fetch.py list | path NAME

The registry and download code live in python/edgellm/models.py (standard library only); this
script loads that file by path, so neither the package nor its C++ extension need to be built.
"""
import importlib.util
import sys
from pathlib import Path

_MODELS_PY = Path(__file__).resolve().parent.parent / "python" / "edgellm" / "models.py"


def _load_registry():
    spec = importlib.util.spec_from_file_location("edgellm_models_standalone", _MODELS_PY)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve the module through sys.modules
    spec.loader.exec_module(module)
    return module


if __name__ == "__main__":
    argv = sys.argv[1:]
    if not argv or argv[0] not in ("fetch", "path", "list", "-h", "--help"):
        argv = ["fetch"] + argv  # `fetch.py all` and `fetch.py smollm2` mean fetch
    sys.exit(_load_registry().main(argv))
