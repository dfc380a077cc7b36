#!/usr/bin/env python3
"""Run llama.cpp's own server test suite against `edgellm serve`.

    scripts/llama-server-suite/run.py [--suite-dir DIR] [--files test_basic,test_completion]
                                      [--junit OUT.xml] [--timeout 1200] [-- extra pytest args]

- The suite is tools/server/tests of the llama.cpp copy vendored in the llama-cpp-python 0.3.36
  sdist. --suite-dir (or LLAMA_SERVER_SUITE_DIR) names that tests folder; otherwise the sdist is
  fetched with pip into ~/.cache/edgellm/llama-server-suite and unpacked there.
- The suite's Python requirements it lacks are installed with pip into this interpreter.
- LLAMA_SERVER_BIN_PATH points at ./llama-server, which maps llama-server's flags and model
  names to `edgellm serve` (shim.py). The suite's files are not modified.
- Each test file runs in its own pytest (-m "not slow"), plus test_tool_call's slow cases whose
  model is Qwen2.5-Coder (served by qwen2.5-coder-0.5b). A per-file table is printed and one
  JUnit XML written (default: build/llama-server-suite/junit.xml).

Run with the interpreter that has edgellm (e.g. EDGELLM_BUILD_DIR=build/dev /work/venv/bin/python).
"""
import argparse
import glob
import os
import shutil
import socket
import subprocess
import sys
import tarfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
SDIST = "llama-cpp-python==0.3.36"
SUITE_IN_SDIST = "vendor/llama.cpp/tools/server/tests"
CACHE = Path(os.environ.get("EDGELLM_SUITE_CACHE") or
             Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "edgellm" / "llama-server-suite")

FILES = ["test_basic", "test_tokenize", "test_security", "test_chat_completion", "test_completion",
         "test_tool_call", "test_embedding", "test_rerank", "test_infill", "test_ctx_shift", "test_slot_save",
         "test_speculative", "test_stream", "test_template", "test_metrics",
         "test_compat_anthropic", "test_compat_oai_responses"]

# import name -> pip requirement
REQUIREMENTS = {"requests": "requests", "wget": "wget", "filelock": "filelock",
                "xdist": "pytest-xdist", "prometheus_client": "prometheus-client",
                "aiohttp": "aiohttp", "openai": "openai", "pytest": "pytest"}


def log(msg):
    print(f"[suite] {msg}", flush=True)


def find_suite(arg):
    for cand in filter(None, [arg, os.environ.get("LLAMA_SERVER_SUITE_DIR")]):
        if (Path(cand) / "utils.py").is_file():
            return Path(cand)
        sys.exit(f"{cand} is not llama.cpp's tools/server/tests folder (no utils.py)")
    for found in sorted(CACHE.glob(f"llama_cpp_python-*/{SUITE_IN_SDIST}")):
        return found
    return fetch_sdist()


def fetch_sdist():
    CACHE.mkdir(parents=True, exist_ok=True)
    log(f"fetching the {SDIST} sdist with pip into {CACHE}")
    # --no-build-isolation: pip would otherwise build the sdist's build requirements (cmake...)
    # from source just to read its metadata. The metadata step still needs the sdist's build
    # backend (scikit-build-core, pure Python): put it in a folder of its own, not in this venv.
    env = dict(os.environ)
    import importlib.util
    if importlib.util.find_spec("scikit_build_core") is None:
        backend = CACHE / "build-backend"
        if not (backend / "scikit_build_core").is_dir():
            subprocess.check_call([sys.executable, "-m", "pip", "install", "-q", "--target",
                                   str(backend), "scikit-build-core"])
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(backend), env.get("PYTHONPATH")]))
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
           "--no-build-isolation", SDIST, "-d", str(CACHE)]
    rc = subprocess.call(cmd, env=env)
    archives = sorted(glob.glob(str(CACHE / "llama_cpp_python-*.tar.gz")))
    if not archives:
        sys.exit(f"pip download failed (status {rc}) and left no sdist in {CACHE}")
    if rc != 0:
        log(f"pip exited {rc} after saving {archives[-1]} (metadata step); using the archive")
    with tarfile.open(archives[-1]) as tar:
        members = [m for m in tar.getmembers() if "/vendor/llama.cpp/tools/server/tests/" in m.name
                   or "/vendor/llama.cpp/models/templates/" in m.name]
        try:
            tar.extractall(CACHE, members=members, filter="data")
        except TypeError:  # Python without extraction filters
            tar.extractall(CACHE, members=members)
    found = sorted(CACHE.glob(f"llama_cpp_python-*/{SUITE_IN_SDIST}"))
    if not found:
        sys.exit(f"{archives[-1]} has no {SUITE_IN_SDIST}")
    return found[-1]


def ensure_requirements():
    import importlib.util

    missing = [req for mod, req in REQUIREMENTS.items() if importlib.util.find_spec(mod) is None]
    if missing:
        log(f"installing the suite's requirements: {' '.join(missing)}")
        subprocess.check_call([sys.executable, "-m", "pip", "install", *missing])


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def qwen_tool_call_cases(suite, env):
    """Node ids of test_tool_call's slow cases whose model is a Qwen2.5-Coder."""
    out = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-m", "slow",
                          "-p", "suite_plugin", "unit/test_tool_call.py"], cwd=suite, env=env,
                         capture_output=True, text=True)
    return [line.strip() for line in out.stdout.splitlines()
            if line.startswith("unit/") and "Qwen2.5-Coder" in line]


def run_pytest(suite, env, name, args, junit, timeout):
    shown = [a if len(a) < 60 else a[:57] + "..." for a in args[:3]]
    log(f"{name}: pytest {' '.join(shown)}{' ...' if len(args) > 3 else ''}")
    t0 = time.monotonic()
    logf = junit.with_suffix(".log")
    with open(logf, "w") as lf:
        try:
            rc = subprocess.call([sys.executable, "-m", "pytest", "-p", "suite_plugin",
                                  "-p", "no:cacheprovider", "-o", "junit_family=xunit2",
                                  f"--junitxml={junit}", "-rA", "--tb=short", *args],
                                 cwd=suite, env=env, stdout=lf, stderr=subprocess.STDOUT,
                                 timeout=timeout)
        except subprocess.TimeoutExpired:
            rc = "timeout"
            lf.write(f"\n[suite] {name}: killed after {timeout} s\n")
    log(f"{name}: exit {rc} in {time.monotonic() - t0:.0f} s (log {logf})")
    return rc


def tally(junit):
    """{file: [passed, failed, skipped, total]} and the failing test ids."""
    rows, failing = {}, []
    if not junit.is_file():
        return rows, failing
    root = ET.parse(junit).getroot()
    for case in root.iter("testcase"):
        fname = case.get("classname", "").split(".")[-1] or "?"
        row = rows.setdefault(fname, [0, 0, 0, 0])
        row[3] += 1
        if case.find("failure") is not None or case.find("error") is not None:
            row[1] += 1
            failing.append(f"{case.get('classname')}::{case.get('name')}")
        elif case.find("skipped") is not None:
            row[2] += 1
        else:
            row[0] += 1
    return rows, failing


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--suite-dir")
    ap.add_argument("--files", default=",".join(FILES))
    ap.add_argument("--junit", default=str(REPO / "build" / "llama-server-suite" / "junit.xml"))
    ap.add_argument("--timeout", type=int, default=1800, help="seconds per test file")
    ap.add_argument("--no-qwen-tool-calls", action="store_true",
                    help="skip test_tool_call's slow Qwen2.5-Coder cases")
    ap.add_argument("--min-pass", type=int, default=None,
                    help="exit 0 when at least this many tests pass (a regression floor for CI), "
                         "instead of only when none fails")
    ap.add_argument("pytest_args", nargs="*")
    a = ap.parse_args()

    suite = find_suite(a.suite_dir)
    ensure_requirements()
    out_dir = Path(a.junit).resolve().parent
    out_dir.mkdir(parents=True, exist_ok=True)

    env = dict(os.environ)
    env["LLAMA_SERVER_BIN_PATH"] = str(HERE / "llama-server")
    env["EDGELLM_PYTHON"] = sys.executable
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), env.get("PYTHONPATH")]))
    if env.get("EDGELLM_BUILD_DIR"):
        env["EDGELLM_BUILD_DIR"] = os.path.abspath(env["EDGELLM_BUILD_DIR"])
    env["PORT"] = str(free_port())  # the suite's default 8080 may be taken
    env.pop("SLOW_TESTS", None)
    (suite / "tmp").mkdir(exist_ok=True)

    parts = []
    for f in [x.strip() for x in a.files.split(",") if x.strip()]:
        junit = out_dir / f"{f}.xml"
        junit.unlink(missing_ok=True)
        run_pytest(suite, env, f, [f"unit/{f}.py", "-m", "not slow", *a.pytest_args], junit,
                   a.timeout)
        parts.append(junit)
        if f == "test_tool_call" and not a.no_qwen_tool_calls:
            ids = qwen_tool_call_cases(suite, env)
            junit = out_dir / "test_tool_call.slow_qwen.xml"
            junit.unlink(missing_ok=True)
            if ids:
                run_pytest(suite, env, f"{f} (slow, Qwen2.5-Coder: {len(ids)})",
                           [*ids, *a.pytest_args], junit, a.timeout)
                parts.append(junit)

    merged = ET.Element("testsuites")
    table, failing = {}, []
    for p in parts:
        if p.is_file():
            for ts in ET.parse(p).getroot().iter("testsuite"):
                merged.append(ts)
        rows, fails = tally(p)
        failing += fails
        for k, v in rows.items():
            t = table.setdefault(k, [0, 0, 0, 0])
            for i in range(4):
                t[i] += v[i]
    ET.ElementTree(merged).write(a.junit, encoding="utf-8", xml_declaration=True)

    print()
    print(f"| file | passed | failed | skipped | total |")
    print(f"|---|---:|---:|---:|---:|")
    tot = [0, 0, 0, 0]
    for k in sorted(table):
        v = table[k]
        tot = [x + y for x, y in zip(tot, v)]
        print(f"| {k} | {v[0]} | {v[1]} | {v[2]} | {v[3]} |")
    print(f"| **total** | {tot[0]} | {tot[1]} | {tot[2]} | {tot[3]} |")
    print(f"\nJUnit XML: {a.junit}")
    if failing:
        print("\nfailing:")
        for f in failing:
            print("  " + f)
    if a.min_pass is not None:
        verdict = "ok" if tot[0] >= a.min_pass else "BELOW THE FLOOR"
        print(f"\nsuite: {tot[0]} of {tot[3]} pass, floor {a.min_pass}: {verdict}")
        return 0 if tot[0] >= a.min_pass else 1
    return 0 if not failing else 1


if __name__ == "__main__":
    sys.exit(main())
