"""Finding and running the peer (llama-cpp-python) for the comparison scripts in bench/.

The peer runs in its own interpreter (the venv llama-cpp-python is built in), as a subprocess
running bench/peer_worker.py, so edgellm and the peer are measured one after the other in one
run without sharing a process.
"""
import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
DEFAULT_PEER_PYTHON = "/opt/peer/venv/bin/python"


class PeerMissing(RuntimeError):
    pass


def find_peer_python(explicit=None) -> str:
    """--peer-python, else $EDGELLM_PEER_PYTHON, else /opt/peer/venv/bin/python; it must
    import llama_cpp."""
    cand = explicit or os.environ.get("EDGELLM_PEER_PYTHON") or DEFAULT_PEER_PYTHON
    if not Path(cand).exists():
        raise PeerMissing(f"peer Python {cand} not found: pass --peer-python or set EDGELLM_PEER_PYTHON to a "
                          f"Python that has llama-cpp-python installed")
    r = subprocess.run([cand, "-c", "import llama_cpp"], capture_output=True, text=True)
    if r.returncode != 0:
        raise PeerMissing(f"{cand} cannot import llama_cpp: {r.stderr.strip().splitlines()[-1:]}")
    return cand


def run_peer(python: str, mode: str, model: str, *args, timeout=3600, echo_stderr=False) -> dict:
    cmd = [python, str(HERE / "peer_worker.py"), mode, str(model), *[str(a) for a in args]]
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=None if echo_stderr else subprocess.PIPE,
                       text=True, timeout=timeout)
    if r.returncode != 0:
        raise RuntimeError(f"peer {mode} failed (exit {r.returncode}): {' '.join(cmd)}\n{(r.stderr or '')[-2000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def ensure_edgellm_importable():
    """Let `python bench/x.py` import edgellm from the checkout when it is not installed."""
    try:
        import edgellm  # noqa: F401
    except ImportError:
        sys.path.insert(0, str(HERE.parent / "python"))
