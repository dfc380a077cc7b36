#!/usr/bin/env python3
"""Regenerates the committed seed corpora in fuzz/corpus/<target>/ from the tests and the
golden files (run by hand when the tests gain interesting inputs; CI uses what is committed).

    EDGELLM_BUILD_DIR=build/dev PYTHONPATH=python:tests python fuzz/make_corpus.py

Sources:
  gbnf / regex / json_schema  every text the grammar tests hand to Grammar.from_gbnf /
                               from_regex / from_json_schema (recorded by running
                               tests/test_grammar.py and tests/test_json_schema.py with the three
                               constructors wrapped), plus GBNF string literals of the Python tests
                               and python/edgellm/chat_output.py, and the C++ grammar test's
  json_value                   the schemas, and JSON documents from shared/golden
  grammar_automaton            each grammar/regex/schema with a mode byte and steering bytes
  tokenizer_bpe / _spm         the golden tokenization texts (shared/golden/*.json) with each
                               flag combination, and golden id sequences in decode mode
  gguf                         the tests' tiny GGUF fixtures (tests/gguf_fixtures.py,
                               tests/tiny_vocab_model.py) and slices of the real models
                               (fuzz/make_vocab.py --seeds)
Files are named by the SHA-1 of their contents, as libFuzzer names its own.
"""
from __future__ import annotations

import ast
import hashlib
import json
import os
import random
import re
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "fuzz" / "corpus"
SHARED = Path(os.environ.get("EDGELLM_SHARED", ROOT.parent / "shared"))
MAX_SEED = 64 * 1024


def record_grammar_inputs():
    """Runs the grammar tests with Grammar.from_* wrapped; returns {kind: set(texts)}."""
    import pytest

    seen = {"gbnf": set(), "regex": set(), "json_schema": set()}

    class Recorder:
        def pytest_configure(self, config):
            import edgellm._core as core
            G = core.Grammar
            for kind, name in (("gbnf", "from_gbnf"), ("regex", "from_regex"), ("json_schema", "from_json_schema")):
                orig = getattr(G, name)

                def wrap(arg, _orig=orig, _kind=kind):
                    text = arg if isinstance(arg, str) else json.dumps(arg)
                    if len(text.encode()) <= MAX_SEED:
                        seen[_kind].add(text)
                    return _orig(arg)
                setattr(G, name, staticmethod(wrap))

    pytest.main(["-q", "-x", "-p", "no:cacheprovider", str(ROOT / "tests/test_grammar.py"),
                 str(ROOT / "tests/test_json_schema.py")], plugins=[Recorder()])
    return seen


def gbnf_literals():
    out = set()
    for path in list((ROOT / "tests").glob("*.py")) + [ROOT / "python/edgellm/chat_output.py"]:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and "::=" in node.value:
                out.add(node.value)
    # C++ test: raw strings R"(...)" and ordinary literals holding '::='.
    cpp = (ROOT / "cpp/tests/test_grammar.cpp").read_text()
    for m in re.finditer(r'R"\((.*?)\)"', cpp, re.S):
        if "::=" in m.group(1):
            out.add(m.group(1))
    for m in re.finditer(r'"((?:[^"\\\n]|\\.)*::=(?:[^"\\\n]|\\.)*)"', cpp):
        try:
            out.add(ast.literal_eval('"' + m.group(1) + '"'))
        except (ValueError, SyntaxError):
            pass
    return out


def write(target, blobs):
    d = CORPUS / target
    d.mkdir(parents=True, exist_ok=True)
    n = 0
    for b in blobs:
        if isinstance(b, str):
            b = b.encode("utf-8", "surrogatepass")
        if len(b) > MAX_SEED:
            continue
        (d / hashlib.sha1(b).hexdigest()).write_bytes(b)
        n += 1
    print(f"{target}: {len(list(d.iterdir()))} seeds ({n} written)")


def tokenizer_seeds(golden_names):
    blobs = []
    for name in golden_names:
        g = json.loads((SHARED / "golden" / name).read_text())
        for case in g.get("tokenize", []):
            text = case["text"].encode("utf-8", "surrogatepass")
            flags = 2 * case["add_special"] + 4 * case["parse_special"]
            blobs.append(bytes([flags, 0]) + text)
            blobs.append(bytes([flags ^ 4, 1]) + text)
            ids = case["ids"][:256]
            if ids:
                blobs.append(bytes([1, 0]) + b"".join(struct.pack("<I", i) for i in ids))
        for case in g.get("greedy", []):
            ids = (case.get("prompt_ids") or []) + (case.get("ids") or [])
            blobs.append(bytes([1, 0]) + b"".join(struct.pack("<I", i) for i in ids[:512]))
            blobs.append(bytes([0, 0]) + case.get("text", "").encode())
    return blobs


def gguf_seeds():
    sys.path.insert(0, str(ROOT / "tests"))
    import gguf_fixtures as gf
    from tiny_vocab_model import write_tiny_vocab_model
    blobs = [gf.minimal_valid()]
    with tempfile.TemporaryDirectory() as tmp:
        p = Path(tmp) / "v.gguf"
        gf.write_valid_fixture(p)
        blobs.append(p.read_bytes())
        for align in (64, 1):
            try:
                gf.write_valid_fixture(p, alignment=align)
                blobs.append(p.read_bytes())
            except Exception:
                pass
        q = Path(tmp) / "tiny.gguf"
        write_tiny_vocab_model(q)
        if q.stat().st_size <= MAX_SEED:
            blobs.append(q.read_bytes())
        seeds = Path(tmp) / "seeds"
        subprocess.run([sys.executable, str(ROOT / "fuzz/make_vocab.py"), str(Path(tmp) / "vocab"),
                        "--seeds", str(seeds)], check=False)
        if seeds.is_dir():
            blobs += [f.read_bytes() for f in sorted(seeds.iterdir())]
    return blobs


def main():
    rng = random.Random(0)
    rec = record_grammar_inputs()
    gbnf = rec["gbnf"] | gbnf_literals()
    write("gbnf", gbnf)
    write("regex", rec["regex"])
    write("json_schema", rec["json_schema"])
    docs = set(rec["json_schema"])
    for name in sorted((SHARED / "golden").glob("*.json")):
        g = json.loads(name.read_text())
        docs.add(json.dumps(g.get("tokenize", [])[:3]))
        docs.add(json.dumps(g.get("exact_summary", {})))
    docs |= {"[]", "{}", "null", "-0.0e+1", '"\\ud83d\\ude00"', '{"a":[1,2,{"b":null}],"c":"\\u00e9"}'}
    write("json_value", docs)
    auto = []
    for kind, texts in ((0, gbnf), (1, rec["regex"]), (2, rec["json_schema"])):
        for t in texts:
            b = t.encode("utf-8", "surrogatepass")
            if b"\0" in b or len(b) > 4096:
                continue
            steer = bytes(rng.randrange(0xC0) for _ in range(48))
            auto.append(bytes([kind]) + b + b"\0" + steer)
            if rng.random() < 0.2:
                auto.append(bytes([kind | 0x10]) + b + b"\0" + b"{\"\0" + steer)
    write("grammar_automaton", auto)
    write("tokenizer_bpe", tokenizer_seeds(["smollm2-135m-q4_1.json", "qwen2.5-coder-0.5b-q4_k_m.json"]))
    write("tokenizer_spm", tokenizer_seeds(["gemma3-270m-q4_k_m.json"]))
    write("gguf", gguf_seeds())


if __name__ == "__main__":
    main()
