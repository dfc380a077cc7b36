"""Builds the C++ unit tests (cpp/tests/test_*.cpp, one ctest executable each) and runs them
through ctest, so `pytest tests` covers the C++ side too.

The C++ core is not compiled a second time when a build of it is at hand: the tests build
in the folder `pip install .` used (build/<wheel tag>, reconfigured with the tests on and the
Python module off, so only the test executables compile), or in $EDGELLM_BUILD_DIR when that
is a dev build with the tests (scripts/dev-build.sh); otherwise in build/ctest. Ninja rebuilds
whatever changed since, so the tests always run the checkout's sources. A file lock keeps two
pytest processes from building at once. Missing tools or test sources skip the test, except
under EDGELLM_REQUIRE_CTEST=1 (CI), where they fail it.
"""
import fcntl
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
BUILD = REPO / "build" / "ctest"


def _cache(build: Path) -> dict:
    try:
        text = (build / "CMakeCache.txt").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return {}
    out = {}
    for line in text.splitlines():
        m = re.match(r"([A-Za-z0-9_.+-]+):[A-Z]+=(.*)$", line)
        if m:
            out[m.group(1)] = m.group(2)
    return out


def _same_source(cache: dict) -> bool:
    home = cache.get("CMAKE_HOME_DIRECTORY") or cache.get("edgellm_SOURCE_DIR")
    try:
        return bool(home) and Path(home).resolve() == REPO
    except OSError:
        return False


def choose_build():
    """(folder, cmake, configure?): where the C++ tests are built, with which cmake."""
    dev = os.environ.get("EDGELLM_BUILD_DIR")
    if dev:
        d = Path(dev) if Path(dev).is_absolute() else REPO / dev
        c = _cache(d)
        if (d / "build.ninja").exists() and c.get("EDGELLM_BUILD_TESTS") == "ON" and _same_source(c):
            return d, c.get("CMAKE_COMMAND") or "cmake", False
    tag = f"cp{sys.version_info.major}{sys.version_info.minor}-"
    wheels = sorted((p for p in (REPO / "build").glob(f"{tag}*") if (p / "build.ninja").exists()),
                    key=lambda p: p.stat().st_mtime, reverse=True)
    for d in wheels:
        c = _cache(d)
        if c.get("SKBUILD") and _same_source(c) and c.get("CMAKE_GENERATOR") == "Ninja":
            # the same cmake that configured it, so that the compile commands stay identical
            cmake = c.get("CMAKE_COMMAND")
            return d, cmake if cmake and os.access(cmake, os.X_OK) else "cmake", True
    return BUILD, "cmake", not (BUILD / "build.ninja").exists()


def _unavailable(reason):
    if os.environ.get("EDGELLM_REQUIRE_CTEST", "") not in ("", "0"):
        pytest.fail(f"{reason} (EDGELLM_REQUIRE_CTEST=1 forbids skipping)", pytrace=False)
    pytest.skip(reason)


def _compiler():
    if os.environ.get("CXX"):
        return shutil.which(os.environ["CXX"].split()[0])
    return next((p for p in map(shutil.which, ("c++", "g++", "clang++")) if p), None)


def _run(cmd, timeout):
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL)
    return proc.returncode, proc.stdout + proc.stderr


@pytest.mark.slow
def test_cpp_unit_tests_pass():
    for tool in ("cmake", "ninja", "ctest"):
        if not shutil.which(tool):
            _unavailable(f"{tool} not found on PATH")
    if not _compiler():
        _unavailable("no C++ compiler (c++, g++, clang++ or $CXX) found")
    sources = sorted((REPO / "cpp" / "tests").glob("test_*.cpp"))
    if not sources:
        _unavailable("no C++ unit tests yet (cpp/tests/test_*.cpp)")

    build, cmake, configure = choose_build()
    ctest = Path(cmake).with_name("ctest") if os.sep in cmake else Path("ctest")
    ctest = str(ctest) if ctest.is_absolute() and ctest.exists() else "ctest"
    build.mkdir(parents=True, exist_ok=True)
    jobs = os.environ.get("EDGELLM_JOBS", "2")
    with open(build / ".pytest.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if configure:
            rc, out = _run([cmake, "-S", str(REPO), "-B", str(build), "-G", "Ninja",
                            "-DCMAKE_BUILD_TYPE=Release", "-DEDGELLM_BUILD_TESTS=ON",
                            "-DEDGELLM_BUILD_PYTHON=OFF"], timeout=600)
            assert rc == 0, f"cmake configure of {build} failed:\n{out[-6000:]}"
        rc, out = _run([cmake, "--build", str(build), "--", f"-j{jobs}"], timeout=3600)
        assert rc == 0, f"C++ build in {build} failed:\n{out[-8000:]}"
        rc, out = _run([ctest, "--test-dir", str(build), "--output-on-failure",
                        "--no-tests=error", "--timeout", "600"], timeout=3600)

    assert rc == 0, f"ctest failed:\n{out[-8000:]}"
    # "100% tests passed out of 3" (ctest 4) or "100% tests passed, 0 tests failed out of 3"
    m = re.search(r"(\d+)% tests passed(?:, (\d+) tests? failed)? out of (\d+)", out)
    assert m, f"no ctest summary in its output:\n{out[-4000:]}"
    assert int(m.group(2) or 0) == 0 and int(m.group(3)) >= 1, m.group(0)
    # Every test source became a test that ran.
    assert int(m.group(3)) >= len(sources), f"{m.group(0)}, but {len(sources)} test sources"
