"""pytest plugin loaded by run.py (-p suite_plugin) next to llama.cpp's server tests.

llama.cpp's conftest starts every ServerPreset once per session (ServerPreset.load_all) so that
llama-server downloads their models; a start that fails aborts the whole session. edgellm's
stand-in models are local files (see shim.py), and some presets name models edgellm has no
stand-in for (a reranker, a vision model), so that preload step is replaced by a no-op here.
The suite's files themselves are not modified.
"""
import sys


def pytest_sessionstart(session):
    utils = sys.modules.get("utils")
    if utils is None:
        import utils  # noqa: F401 - the suite's utils.py (its folder is on sys.path)
        utils = sys.modules["utils"]

    def load_all():
        print("edgellm suite plugin: ServerPreset.load_all skipped (stand-in models are local)")

    utils.ServerPreset.load_all = staticmethod(load_all)
