"""pytest plugin loaded by run.py (-p suite_plugin) next to llama.cpp's server tests.

llama.cpp's conftest starts every ServerPreset once per session (ServerPreset.load_all) so that
llama-server downloads their models; a start that fails aborts the whole session. edgellm's
stand-in models are local files (see shim.py), and some presets name models edgellm has no
stand-in for (a reranker, a vision model), so that preload step is replaced by a no-op here.
Model files the tests download by URL (test_speculative's stories15M draft) are answered with
the local stand-in shim.py picks for them; any other URL goes to the suite's own download_file. The suite's files themselves are not modified.
"""
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import shim  # noqa: E402 - the model stand-ins


def pytest_sessionstart(session):
    utils = sys.modules.get("utils")
    if utils is None:
        import utils  # noqa: F401 - the suite's utils.py (its folder is on sys.path)
        utils = sys.modules["utils"]

    def load_all():
        print("edgellm suite plugin: ServerPreset.load_all skipped (stand-in models are local)")

    utils.ServerPreset.load_all = staticmethod(load_all)

    fetch = utils.download_file

    def download_file(url, output_file_path=None):
        name = url.rstrip("/").split("/")[-1]
        found = shim.standin(name) if name.lower().endswith(".gguf") else None
        if found is None:
            return fetch(url, output_file_path)
        if os.environ.get("EDGELLM_BUILD_DIR"):  # a development build, as shim.py runs it
            sys.path.insert(0, str(shim.REPO / "python"))
        from edgellm.models import resolve
        path = str(resolve(found[0]))
        print(f"edgellm suite plugin: {url} -> {path} ({found[1]})")
        return path

    utils.download_file = download_file
