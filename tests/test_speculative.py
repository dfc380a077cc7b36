"""Speculative decoding (issue 18) on the real models, from the user's side: greedy output is the
model's own with speculation off, n-gram (prompt lookup) or auto, alone and batched with other
requests, under a JSON schema, with stop strings, n > 1 and log-probs; a draft model
(Qwen2.5-Coder-0.5B for the 1.5B) changes nothing either; KV pages come back after rejected
drafts and aborted streams; a draft with another vocabulary is refused; the CLI, the REPL's
--verbose block, `edgellm bench`, the server's timings and /metrics show drafted / accepted.

Drafting is forced where a test needs it to happen (spec_adaptive=False with a fixed
num_speculative_tokens); the "auto" runs use the defaults users get. Speeds are bench/'s
business (bench/speculative.py), never asserted here.
"""
import asyncio
import json
import threading

import pytest

from edgellm import LLM, AsyncLLM, InvalidRequestError, SamplingParams
from test_llm import pages_back_to_zero, wait_for

pytestmark = pytest.mark.real_model

N_THREADS = 2

CODE = (
    "def area(width, height):\n"
    "    if width < 0 or height < 0:\n"
    "        raise ValueError('negative size')\n"
    "    return width * height\n"
    "\n"
    "def perimeter(width, height):\n"
    "    if width < 0 or height < 0:\n"
    "        raise ValueError('negative size')\n"
    "    return 2 * (width + height)\n"
)
# Makes the model copy its context: n-gram drafts are accepted here.
COPY = f"Here is some Python code:\n\n{CODE}\nThe same code again, copied exactly:\n\n"
PROMPTS = [
    COPY,
    "The capital of France is",
    "List the numbers from 1 to 20, separated by commas: 1, 2, 3,",
    "Once upon a time, in a small village by the sea,",
    "The quick brown fox jumps over the lazy dog. " * 4,
]
N_TOKENS = 40


def greedy(max_tokens=N_TOKENS, **kw):
    return SamplingParams(temperature=0.0, max_tokens=max_tokens, **kw)


def forced(path, mode="ngram", k=4, **kw):
    """An LLM that drafts k tokens whenever there is a proposal (no adaptive back-off)."""
    return LLM(str(path), n_threads=N_THREADS, speculative=mode, num_speculative_tokens=k,
               spec_adaptive=False, **kw)


class Trio:
    """The same model three times: speculation off, n-gram forced, and auto (the defaults)."""

    def __init__(self, path):
        self.path = str(path)
        self.off = LLM(self.path, n_threads=N_THREADS, speculative="off")
        self.ngram = forced(self.path)
        self.auto = LLM(self.path, n_threads=N_THREADS)  # speculative="auto" is the default
        self.ref = {}

    def reference(self, prompt, params):
        key = (prompt, repr(params))
        if key not in self.ref:
            self.ref[key] = self.off.generate(prompt, params)
        return self.ref[key]

    def close(self):
        for llm in (self.off, self.ngram, self.auto):
            llm.close()


@pytest.fixture(scope="module", params=["smollm2", "qwen"])
def trio(request):
    t = Trio(request.getfixturevalue(f"{request.param}_path"))
    yield t
    t.close()


def same(a, b):
    assert a.token_ids == b.token_ids, (a.text, b.text)
    assert a.text == b.text
    assert a.finish_reason == b.finish_reason
    assert a.stop_reason == b.stop_reason


# ---- (a) greedy output is the model's own ---------------------------------------------------

def test_modes_as_configured(trio):
    assert trio.off.speculative == "off"
    assert trio.ngram.speculative == "ngram" and trio.ngram.num_speculative_tokens == 4
    assert trio.auto.speculative == "auto"
    assert trio.auto.draft_model_path is None  # auto without a draft: n-gram only


def test_greedy_identical_one_at_a_time(trio):
    before = trio.ngram.stats()
    for p in PROMPTS:
        ref = trio.reference(p, greedy())
        same(trio.ngram.generate(p, greedy()), ref)
        same(trio.auto.generate(p, greedy()), ref)
    after = trio.ngram.stats()
    assert after["spec_drafted"] > before["spec_drafted"]
    assert after["spec_steps"] > before["spec_steps"]
    assert 0.0 <= after["spec_acceptance"] <= 1.0
    for llm in (trio.ngram, trio.auto, trio.off):
        assert pages_back_to_zero(llm)
    assert trio.off.stats()["spec_drafted"] == 0  # off never drafts


def test_copying_accepts_ngram_drafts(trio):
    before = trio.ngram.stats()
    out = trio.ngram.generate(COPY, greedy())
    same(out, trio.reference(COPY, greedy()))
    after = trio.ngram.stats()
    assert after["spec_accepted"] > before["spec_accepted"], after
    # the completion's own timings carry llama-server's draft_n / draft_n_accepted
    assert out.timings["draft_n"] > 0
    assert 0 < out.timings["draft_n_accepted"] <= out.timings["draft_n"]
    assert after["spec_acceptance"] == pytest.approx(after["spec_accepted"] / after["spec_drafted"])


def test_batched_with_other_requests(trio):
    refs = [trio.reference(p, greedy()) for p in PROMPTS]
    for llm in (trio.ngram, trio.auto):
        outs = llm.generate(PROMPTS, greedy())  # one call: all in the engine at once
        for o, r in zip(outs, refs):
            same(o, r)
        assert pages_back_to_zero(llm)


def test_concurrent_threads_and_streams(trio):
    refs = [trio.reference(p, greedy()) for p in PROMPTS]
    got = [None] * len(PROMPTS)
    errors = []

    def work(i):
        try:
            if i % 2:
                got[i] = "".join(trio.ngram.stream(PROMPTS[i], greedy()))
            else:
                got[i] = trio.ngram.generate(PROMPTS[i], greedy()).text
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(PROMPTS))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert not errors, errors
    assert got == [r.text for r in refs]
    assert pages_back_to_zero(trio.ngram)


def test_json_schema(trio):
    schema = {"type": "object", "properties": {"name": {"type": "string"},
                                               "sides": {"type": "integer"}},
              "required": ["name", "sides"]}
    prompt = "A square as JSON with its name and number of sides:"
    params = greedy(60, json_schema=schema)
    ref = trio.reference(prompt, params)
    for llm in (trio.ngram, trio.auto):
        out = llm.generate(prompt, params)
        same(out, ref)
    if ref.finish_reason == "stop":
        json.loads(ref.text)
    # a copy prompt under a schema: drafts are checked against the grammar's mask
    copy_schema = {"type": "object", "properties": {"code": {"type": "string"}},
                   "required": ["code"]}
    copy = f"{CODE}\nThe code above as a JSON object {{\"code\": ...}}:\n"
    params = greedy(80, json_schema=copy_schema)
    same(trio.ngram.generate(copy, params), trio.reference(copy, params))
    same(trio.ngram.generate(copy, greedy(60, response_format={"type": "json_object"})),
         trio.reference(copy, greedy(60, response_format={"type": "json_object"})))
    assert pages_back_to_zero(trio.ngram)


def test_stop_strings(trio):
    # "height" recurs in the copied code: a drafted run may run through it, and must not
    params = greedy(80, stop=["height)", "ValueError"])
    ref = trio.reference(COPY, params)
    out = trio.ngram.generate(COPY, params)
    same(out, ref)
    assert "height)" not in out.text and "ValueError" not in out.text
    for p in PROMPTS[1:3]:
        params = greedy(40, stop=[",", "\n"])
        same(trio.ngram.generate(p, params), trio.reference(p, params))
    # streamed pieces join to the same text, with the stop string held back
    assert "".join(trio.ngram.stream(COPY, greedy(80, stop=["height)"]))) == \
        trio.reference(COPY, greedy(80, stop=["height)"])).text
    assert pages_back_to_zero(trio.ngram)


def test_n_greater_than_one_and_logprobs(trio):
    params = greedy(30, n=2, logprobs=2)
    ref = trio.reference(COPY, params)
    outs = trio.ngram.generate(COPY, params)
    assert len(outs) == 2
    for o, r in zip(outs, ref):
        same(o, r)
        # log-probs are always the target model's
        assert [lp.token_id for lp in o.logprobs] == [lp.token_id for lp in r.logprobs]
        for a, b in zip(o.logprobs, r.logprobs):
            assert a.logprob == pytest.approx(b.logprob, abs=1e-2)
    assert pages_back_to_zero(trio.ngram)


def test_max_tokens_is_exact(trio):
    # a draft longer than the tokens left must not overshoot max_tokens
    for n in (1, 2, 3, 5, 7):
        out = trio.ngram.generate(COPY, greedy(n))
        ref = trio.reference(COPY, greedy(n))
        same(out, ref)
        assert len(out.token_ids) <= n


# ---- (c) pages come back ------------------------------------------------------------------

def test_pages_back_after_aborted_streams(trio):
    llm = trio.ngram
    for cut in (1, 3, 8):
        it = llm.stream_chunks(COPY, greedy(200))
        for i, _ in enumerate(it):
            if i >= cut:
                break
        it.close()  # aborts the request mid-draft
    assert pages_back_to_zero(llm)

    async def cancelled():
        allm = AsyncLLM.__new__(AsyncLLM)
        allm.llm = llm  # the same engine, driven from asyncio

        started = asyncio.Event()

        async def consume():
            # ignore_eos: long enough that the cancel lands while tokens (and drafts) are in flight
            async for _ in allm.stream(COPY, greedy(1000, ignore_eos=True)):
                started.set()
        task = asyncio.ensure_future(consume())
        await asyncio.wait_for(started.wait(), 60)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(cancelled())
    assert pages_back_to_zero(llm)
    # and the engine still answers the model's own greedy text afterwards
    same(llm.generate(COPY, greedy()), trio.reference(COPY, greedy()))
    assert pages_back_to_zero(llm)


def test_pages_back_with_a_small_pool(qwen_path):
    # little KV memory: drafts run into full pools and preemption; outputs stay the model's own
    with LLM(str(qwen_path), n_threads=N_THREADS, speculative="off", n_ctx=512) as off:
        refs = [off.generate(p, greedy(24)) for p in PROMPTS]
        page_bytes = off.stats()["page_bytes_full"]
    with forced(qwen_path, k=8, n_ctx=512, kv_memory=16 * page_bytes) as llm:
        outs = llm.generate(PROMPTS * 2, greedy(24))
        for o, r in zip(outs, refs * 2):
            same(o, r)
        assert pages_back_to_zero(llm)


# ---- AsyncLLM -------------------------------------------------------------------------------

def test_async_llm_takes_the_same_arguments(smollm2_path):
    async def main():
        with AsyncLLM(str(smollm2_path), n_threads=N_THREADS, speculative="ngram",
                      num_speculative_tokens=4, spec_adaptive=False) as allm:
            assert allm.speculative == "ngram"
            out = await allm.generate(COPY, greedy())
            chunks = [c async for c in allm.stream_chunks(COPY, greedy())]
            return out, chunks, allm.stats()

    out, chunks, stats = asyncio.run(main())
    with LLM(str(smollm2_path), n_threads=N_THREADS, speculative="off") as off:
        ref = off.generate(COPY, greedy())
    same(out, ref)
    assert "".join(c.text for c in chunks) == ref.text
    assert chunks[-1].timings["draft_n"] > 0  # the final chunk's timings
    assert stats["spec_drafted"] > 0 and stats["pages_used"] == 0


# ---- argument rules -----------------------------------------------------------------------

@pytest.mark.parametrize("kw, param", [
    ({"speculative": "medusa"}, "speculative"),
    ({"speculative": 1}, "speculative"),
    ({"num_speculative_tokens": 0}, "num_speculative_tokens"),
    ({"num_speculative_tokens": 65}, "num_speculative_tokens"),
    ({"num_speculative_tokens": True}, "num_speculative_tokens"),
    ({"num_speculative_tokens": 2.5}, "num_speculative_tokens"),
    ({"speculative": "draft"}, "draft_model"),
    ({"draft_model": ""}, "draft_model"),
    ({"spec_adaptive": "no"}, "spec_adaptive"),
])
def test_bad_arguments_refused_before_loading(kw, param):
    with pytest.raises(InvalidRequestError) as e:
        LLM("no-such-model-is-ever-loaded", **kw)  # refused before the model is looked up
    assert e.value.param == param
    if kw.get("speculative") == "draft":
        assert "draft_model" in str(e.value)


def test_draft_with_off_or_ngram_is_accepted_unused(smollm2_path):
    # a draft with speculation off (or n-gram only) is accepted and not even loaded
    for mode in ("off", "ngram"):
        with LLM(str(smollm2_path), n_threads=N_THREADS, speculative=mode,
                 draft_model="/nonexistent/draft.gguf") as llm:
            assert llm.speculative == mode and llm.draft_model_path is None


def test_bindings_refuse_draft_mode_without_a_draft(smollm2_path):
    from edgellm import _core

    with pytest.raises(InvalidRequestError, match="draft_model"):
        _core.Engine(str(smollm2_path), speculative="draft")
    with pytest.raises(InvalidRequestError, match="speculative"):
        _core.Engine(str(smollm2_path), speculative="sometimes")


# ---- (d) vocabulary mismatch ----------------------------------------------------------------

def qwen15_path():
    from conftest import require_model
    return require_model("qwen2.5-coder-1.5b")


def test_vocabulary_mismatch_refused(smollm2_path):
    target = qwen15_path()
    with pytest.raises(InvalidRequestError) as e:
        LLM(str(target), draft_model=str(smollm2_path), speculative="draft", n_threads=N_THREADS)
    msg = str(e.value).lower()
    # names what differs: the tokenizer's pre-tokenizer, the vocabulary size or a token text
    assert any(w in msg for w in ("pre-tokenizer", "pre_tokenizer", "pretokenizer", "vocab",
                                  "token")), msg
    # known names resolve like the model's: same refusal
    with pytest.raises(InvalidRequestError):
        LLM("qwen2.5-coder-1.5b", draft_model="smollm2", speculative="draft",
            n_threads=N_THREADS)
    # gemma3 (SPM) drafting for smollm2 (BPE): another tokenizer kind
    with pytest.raises(InvalidRequestError):
        LLM(str(smollm2_path), draft_model="gemma3", speculative="auto", n_threads=N_THREADS)


# ---- (b) draft model ------------------------------------------------------------------------

DRAFT_PROMPTS = [COPY, "def fibonacci(n):\n", "The capital of France is"]


@pytest.fixture(scope="module")
def qwen_pair(qwen_path):
    target = str(qwen15_path())
    off = LLM(target, n_threads=N_THREADS, speculative="off")
    refs = [off.generate(p, greedy(24)) for p in DRAFT_PROMPTS]
    off.close()
    yield target, str(qwen_path), refs


def test_draft_model_greedy_identical(qwen_pair):
    target, draft, refs = qwen_pair
    with forced(target, mode="draft", k=4, draft_model="qwen2.5-coder-0.5b") as llm:
        assert llm.speculative == "draft"
        assert llm.draft_model_path and llm.draft_model_path.endswith(".gguf")
        for p, r in zip(DRAFT_PROMPTS, refs):
            same(llm.generate(p, greedy(24)), r)
        outs = llm.generate(DRAFT_PROMPTS, greedy(24))  # batched
        for o, r in zip(outs, refs):
            same(o, r)
        st = llm.stats()
        assert st["spec_drafted"] > 0 and st["spec_accepted"] > 0
        assert st["spec_draft_forwards"] > 0 and st["spec_draft_seconds"] > 0
        assert pages_back_to_zero(llm)
        # an aborted stream mid-draft gives its pages back too (the draft's own KV included)
        it = llm.stream_chunks(COPY, greedy(100))
        next(it)
        next(it)
        it.close()
        assert pages_back_to_zero(llm)


def test_draft_model_auto_default(qwen_pair):
    target, draft, refs = qwen_pair
    with LLM(target, n_threads=N_THREADS, draft_model=draft) as llm:  # auto, adaptive
        assert llm.speculative == "auto" and llm.draft_model_path == draft
        for p, r in zip(DRAFT_PROMPTS, refs):
            same(llm.generate(p, greedy(24)), r)
        assert pages_back_to_zero(llm)


# ---- (e) CLI, REPL, bench, server -----------------------------------------------------------

def cli(*args):
    from click.testing import CliRunner

    from edgellm.cli import main

    try:
        runner = CliRunner(mix_stderr=False)
    except TypeError:  # click >= 8.2 keeps stderr apart always
        runner = CliRunner()
    return runner.invoke(main, [str(a) for a in args])


def test_cli_generate_spec_ngram(smollm2_path):
    base = ["generate", smollm2_path, "-p", COPY, "--temp", 0, "-n", 40, "-t", N_THREADS]
    off = cli(*base, "--spec", "off")
    on = cli(*base, "--spec", "ngram", "--draft-max", 4)
    auto = cli(*base)
    for r in (off, on, auto):
        assert r.exit_code == 0, (r.output, r.stderr)
    assert on.stdout == off.stdout == auto.stdout
    assert "drafted:" not in off.stderr
    assert "generated: 40 tokens" in on.stderr


def test_cli_usage_errors(smollm2_path):
    r = cli("generate", smollm2_path, "-p", "x", "--spec", "draft")
    assert r.exit_code == 2 and "--draft" in r.output + r.stderr
    r = cli("generate", smollm2_path, "-p", "x", "--spec", "maybe")
    assert r.exit_code == 2
    r = cli("generate", smollm2_path, "-p", "x", "--draft-max", 0)
    assert r.exit_code == 2
    for command in ("run", "serve", "bench", "generate"):
        r = cli(command, "--help")
        assert r.exit_code == 0
        for flag in ("--spec", "--draft", "--draft-max"):
            assert flag in r.output, (command, flag)


def test_cli_generate_with_draft(qwen_pair):
    target, draft, refs = qwen_pair
    r = cli("generate", target, "-p", COPY, "--temp", 0, "-n", 24, "-t", N_THREADS,
            "--draft", draft, "--spec", "draft", "--draft-max", 4, "--verbose")
    assert r.exit_code == 0, (r.output, r.stderr)
    assert r.stdout == refs[0].text + "\n"
    assert "drafted:" in r.stderr and "accepted:" in r.stderr


def test_cli_vocab_mismatch_is_an_error(smollm2_path):
    r = cli("generate", smollm2_path, "-p", "x", "--draft", "gemma3", "--spec", "draft")
    assert r.exit_code == 1 and "Error" in r.output + r.stderr


def test_repl_verbose_block_and_timing_line():
    from edgellm.repl.render import timing_line, verbose_block

    t = {"prompt_n": 10, "prompt_ms": 20.0, "prompt_per_second": 500.0, "predicted_n": 41,
         "predicted_ms": 400.0, "predicted_per_second": 100.0, "draft_n": 40,
         "draft_n_accepted": 30}
    block = verbose_block(t, 1.0, 0.5)
    assert "draft count:          40 token(s)" in block
    assert "draft accepted:       30 token(s)" in block
    assert "draft acceptance:     75.0%" in block
    assert "draft" not in timing_line(t)  # the counts are asked for: --verbose, /show info
    plain = {k: v for k, v in t.items() if not k.startswith("draft")}
    assert "draft" not in verbose_block(plain, 1.0, 0.5)
    assert "draft" not in timing_line(plain)


def test_repl_show_info_rows(trio):
    from edgellm.repl.model_facts import info_rows

    trio.ngram.generate(COPY, greedy(16))
    rows = dict(info_rows(trio.ngram))
    assert rows["speculative"] == "ngram"
    assert "draft model" not in rows and "%" in rows["drafted / accepted"]
    assert dict(info_rows(trio.off))["speculative"] == "off"


def test_run_verbose_shows_acceptance(smollm2_path):
    r = cli("run", smollm2_path, "--verbose", "--temp", 0, "-n", 60, "-t", N_THREADS,
            "--spec", "ngram", "--draft-max", 4,
            f"Copy this code exactly, nothing else:\n\n{CODE}")
    assert r.exit_code == 0, (r.output, r.stderr)
    assert "eval rate:" in r.stderr
    # a copy prompt gets n-gram drafts; the block then has the three draft rows
    assert "draft count:" in r.stderr and "draft accepted:" in r.stderr
    assert "draft acceptance:" in r.stderr


def test_bench_speculative_rows(smollm2_path):
    # 64 tokens: SmolLM2 does not copy the bench's passage; what it writes repeats itself from
    # about the 35th token on the AVX2 kernels (32 passed on AVX-512), which is where prompt
    # lookup's drafts get accepted
    r = cli("bench", smollm2_path, "-p", 0, "-n", 64, "-r", 1, "-t", N_THREADS,
            "--spec", "ngram", "--draft-max", 4, "-o", "json")
    assert r.exit_code == 0, (r.output, r.stderr)
    rows = json.loads(r.stdout)
    tests = [d["test"] for d in rows]
    assert tests == ["tg64", "tg64 spec=off", "tg64 spec=ngram"]
    assert rows[1]["draft_n"] == 0
    assert rows[2]["draft_n"] > 0 and rows[2]["draft_n_accepted"] > 0
    md = cli("bench", smollm2_path, "-p", 0, "-n", 16, "-r", 1, "-t", N_THREADS, "--spec", "ngram")
    assert md.exit_code == 0, (md.output, md.stderr)
    lines = md.stdout.strip().splitlines()
    assert lines[-1].startswith("| ") and "spec=ngram" in lines[-1]
    if "drafted / accepted" in lines[0]:
        assert "%" in lines[-1]
    # without --spec / --draft, the table is llama-bench's alone
    plain = cli("bench", smollm2_path, "-p", 0, "-n", 8, "-r", 1, "-t", N_THREADS)
    assert plain.exit_code == 0 and "spec=" not in plain.stdout


def test_bench_table_column():
    from edgellm.bench.throughput import BenchResult, markdown_table

    r = BenchResult(test="tg8 spec=ngram", n_prompt=0, n_gen=8, n_seqs=1, samples_ts=[10.0],
                    samples_ns=[1], model="m", n_threads=1)
    r.extra = {"draft_n": 8, "draft_n_accepted": 6}
    plain = BenchResult(test="tg8", n_prompt=0, n_gen=8, n_seqs=1, samples_ts=[10.0],
                        samples_ns=[1], model="m", n_threads=1)
    lines = markdown_table([plain, r]).splitlines()
    assert lines[0].endswith("| t/s | drafted / accepted |")
    assert lines[2].endswith("| - |") and lines[3].endswith("| 8 / 6 (75.0%) |")
    assert "drafted" not in markdown_table([plain])


@pytest.fixture(scope="module")
def spec_server(smollm2_path):
    """The real app in-process over a forced n-gram engine (drafting deterministic)."""
    from starlette.testclient import TestClient

    from edgellm.server import ServerConfig, create_app

    def loader(config):
        return AsyncLLM(str(smollm2_path), n_threads=N_THREADS, max_seqs=4,
                        speculative="ngram", num_speculative_tokens=4, spec_adaptive=False)

    app = create_app(ServerConfig(model=str(smollm2_path), alias="smol"), loader=loader)
    with TestClient(app) as client:
        assert wait_for(lambda: client.get("/health").status_code == 200, 120)
        yield client


def test_server_timings_and_metrics(spec_server, smollm2_path):
    c = spec_server
    body = {"model": "smol", "prompt": COPY, "max_tokens": 40, "temperature": 0}
    r = c.post("/v1/completions", json=body)
    assert r.status_code == 200, r.text
    t = r.json()["timings"]
    assert t["draft_n"] > 0 and 0 < t["draft_n_accepted"] <= t["draft_n"]
    with LLM(str(smollm2_path), n_threads=N_THREADS, speculative="off") as off:
        assert r.json()["choices"][0]["text"] == off.generate(COPY, greedy()).text
    # llama-server's native /completion
    r = c.post("/completion", json={"prompt": COPY, "n_predict": 40, "temperature": 0})
    assert r.status_code == 200, r.text
    assert r.json()["timings"]["draft_n"] > 0
    # a stream's last chunk
    r = c.post("/v1/chat/completions", json={
        "model": "smol", "stream": True, "temperature": 0, "max_tokens": 60,
        "messages": [{"role": "user", "content": f"Repeat exactly:\n{CODE}"}]})
    assert r.status_code == 200
    events = [json.loads(line[6:]) for line in r.text.split("\n\n")
              if line.startswith("data: ") and line != "data: [DONE]"]
    timed = [e["timings"] for e in events if e.get("timings")]
    assert timed and "predicted_n" in timed[-1]
    # /metrics: ours and llama.cpp's names
    text = c.get("/metrics").text
    values = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            values[name] = float(value)
    assert values["edgellm_spec_draft_tokens_total"] > 0
    assert 0 < values["edgellm_spec_accepted_tokens_total"] <= values["edgellm_spec_draft_tokens_total"]
    assert values["edgellm_spec_acceptance_ratio"] == pytest.approx(
        values["edgellm_spec_accepted_tokens_total"] / values["edgellm_spec_draft_tokens_total"])
    assert values["llamacpp:spec_decode_num_draft_tokens_total"] == values["edgellm_spec_draft_tokens_total"]
    assert values["llamacpp:spec_decode_num_accepted_tokens_total"] > 0
    assert values["llamacpp:spec_decode_num_drafts_total"] > 0
    # /props and /v1/models say how the engine speculates
    props = c.get("/props").json()
    assert props["speculative"] == "ngram" and props["default_generation_settings"]["speculative"]
    meta = c.get("/v1/models").json()["data"][0]["meta"]
    assert meta["speculative"] == "ngram" and meta["draft_model"] is None
    assert wait_for(lambda: values and c.get("/metrics").text.count(
        "edgellm_kv_pages_in_use_requests 0") == 1)


def test_serve_cli_builds_the_config(monkeypatch, smollm2_path, qwen_path):
    """`edgellm serve --spec/--draft/--draft-max` reach ServerConfig and the default loader."""
    import edgellm.commands.serve as serve
    from edgellm.server import admission

    seen = {}

    class Stop(Exception):
        pass

    def fake_create_app(config, **kw):
        seen["config"] = config
        raise Stop()

    monkeypatch.setattr("edgellm.server.create_app", fake_create_app)
    r = cli("serve", qwen_path, "--spec", "draft", "--draft", "qwen2.5-coder-0.5b",
            "--draft-max", 6)
    assert isinstance(r.exception, Stop), (r.output, r.exception)
    cfg = seen["config"]
    assert cfg.speculative == "draft" and cfg.num_speculative_tokens == 6
    assert cfg.draft_model == str(qwen_path)
    r = cli("serve", smollm2_path, "--spec", "off", "--draft", "smollm2")
    assert seen["config"].speculative == "off" and seen["config"].draft_model is None

    made = {}
    monkeypatch.setattr("edgellm.async_llm.AsyncLLM", lambda *a, **kw: made.update(kw) or None)
    cfg.model_path = str(qwen_path)
    try:
        admission.default_loader(cfg)
    except AttributeError:
        pass  # the stand-in is None
    assert made["speculative"] == "draft" and made["draft_model"] == str(qwen_path)
    assert made["num_speculative_tokens"] == 6
    assert serve  # imported for monkeypatching by name
