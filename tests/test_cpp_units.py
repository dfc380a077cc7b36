"""Builds the C++ unit tests (cpp/tests/test_*.cpp, one ctest executable each) and runs them
through ctest, so `pytest tests` covers the C++ side too.

The build folder build/ctest is reused between runs (incremental); a file lock keeps two
pytest processes from building it at once. Missing tools or test sources skip the test,
except under EDGELLM_REQUIRE_CTEST=1 (CI), where they fail it.
"""
import fcntl
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
BUILD = REPO / "build" / "ctest"


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

    BUILD.mkdir(parents=True, exist_ok=True)
    jobs = os.environ.get("EDGELLM_JOBS", "2")
    with open(BUILD / ".pytest.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (BUILD / "build.ninja").exists():
            rc, out = _run(["cmake", "-S", str(REPO), "-B", str(BUILD), "-G", "Ninja",
                            "-DCMAKE_BUILD_TYPE=Release", "-DEDGELLM_BUILD_TESTS=ON",
                            "-DEDGELLM_BUILD_PYTHON=OFF"], timeout=600)
            assert rc == 0, f"cmake configure failed:\n{out[-6000:]}"
        rc, out = _run(["cmake", "--build", str(BUILD), "--", f"-j{jobs}"], timeout=3600)
        assert rc == 0, f"C++ build failed:\n{out[-8000:]}"
        rc, out = _run(["ctest", "--test-dir", str(BUILD), "--output-on-failure",
                        "--no-tests=error", "--timeout", "600"], timeout=3600)

    assert rc == 0, f"ctest failed:\n{out[-8000:]}"
    # "100% tests passed out of 3" (ctest 4) or "100% tests passed, 0 tests failed out of 3"
    m = re.search(r"(\d+)% tests passed(?:, (\d+) tests? failed)? out of (\d+)", out)
    assert m, f"no ctest summary in its output:\n{out[-4000:]}"
    assert int(m.group(2) or 0) == 0 and int(m.group(3)) >= 1, m.group(0)
    # Every test source became a test that ran.
    assert int(m.group(3)) >= len(sources), f"{m.group(0)}, but {len(sources)} test sources"
