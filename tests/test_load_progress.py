"""LLM(path, progress=callback): the C++ loader reports its own loop (open, bind, the repacking
rounds, tokenizer, engine, ready) on the constructing thread with the GIL taken only for the
call; False or an exception stops the load with edgellm.LoadCancelled and releases everything
(the file mapping, the worker threads)."""
import gc
import os
import shutil
import threading

import pytest

import edgellm
from edgellm import LLM, InvalidRequestError, LoadCancelled, RequestCancelled

pytestmark = pytest.mark.real_model

N_THREADS = 2


@pytest.fixture
def model_copy(smollm2_path, tmp_path):
    """The model under a path of its own, so /proc/self/maps tells whether this load mapped it."""
    dst = tmp_path / "progress-model.gguf"
    try:
        os.link(smollm2_path, dst)
    except OSError:
        shutil.copyfile(smollm2_path, dst)
    return str(dst)


def mappings_of(path: str) -> int:
    with open("/proc/self/maps") as f:
        return sum(1 for line in f if line.rstrip().endswith(path))


def task_count() -> int:
    return len(os.listdir("/proc/self/task"))


def test_progress_is_monotone_reaches_one_and_follows_the_repack(model_copy):
    calls = []
    caller = threading.get_ident()

    def progress(fraction, stage):
        calls.append((fraction, stage, threading.get_ident()))

    with LLM(model_copy, n_threads=N_THREADS, progress=progress) as llm:
        assert llm.generate("Hello", edgellm.SamplingParams(max_tokens=2)).usage.completion_tokens >= 1
    fractions = [c[0] for c in calls]
    stages = [c[1] for c in calls]
    assert fractions[0] == 0.0 and stages[0] == "open"
    assert fractions[-1] == 1.0 and stages[-1] == "ready"
    assert all(0.0 <= f <= 1.0 for f in fractions)
    assert all(a <= b for a, b in zip(fractions, fractions[1:])), fractions
    assert all(c[2] == caller for c in calls)  # on the loading thread
    # the stages in load order, each once as a run
    order = [s for i, s in enumerate(stages) if i == 0 or stages[i - 1] != s]
    assert order == ["open", "bind", "repack", "tokenizer", "engine", "ready"], order
    if os.environ.get("EDGELLM_REPACK") != "0" and llm.isa != "neon":
        # the repacking loop reports its rounds: many distinct steps between bind and tokenizer
        repack = sorted({f for f, s, _ in calls if s == "repack"})
        assert len(repack) >= 10, repack


def test_the_gil_is_free_while_loading(model_copy):
    """Another Python thread runs during the load (the GIL is taken for the callback only)."""
    ticks = []
    stop = threading.Event()

    def ticker():
        while not stop.is_set():
            ticks.append(1)
            stop.wait(0.001)

    seen_during = []

    def progress(fraction, stage):
        seen_during.append(len(ticks))

    t = threading.Thread(target=ticker)
    t.start()
    try:
        LLM(model_copy, n_threads=N_THREADS, progress=progress).close()
    finally:
        stop.set()
        t.join()
    assert seen_during[-1] > seen_during[0]


@pytest.mark.parametrize("how", ["false", "raise"])
def test_callback_cancels_the_load_and_nothing_stays(model_copy, how):
    gc.collect()
    tasks_before = task_count()
    assert mappings_of(model_copy) == 0
    calls = []

    class Stop(Exception):
        pass

    def progress(fraction, stage):
        calls.append((fraction, stage))
        if stage == "repack" and fraction > 0.3:
            if how == "raise":
                raise Stop("user pressed cancel")
            return False
        return None  # None (no return value) goes on

    with pytest.raises(LoadCancelled) as ei:
        LLM(model_copy, n_threads=N_THREADS, progress=progress)
    assert isinstance(ei.value, RequestCancelled) and isinstance(ei.value, edgellm.EdgeLLMError)
    assert "repack" in str(ei.value)
    if how == "raise":
        assert isinstance(ei.value.__cause__, Stop)
    # stopped at the first refusal: no call after it
    assert calls[-1][1] == "repack" and calls[-1][0] > 0.3
    assert sum(1 for f, s in calls if s == "repack" and f > 0.3) == 1
    del ei
    gc.collect()
    assert mappings_of(model_copy) == 0      # the GGUF mapping is gone
    assert task_count() == tasks_before      # the loader's worker threads are joined
    # and the same file loads fine afterwards
    with LLM(model_copy, n_threads=N_THREADS) as llm:
        assert llm.n_vocab > 0


def test_cancel_at_the_very_start_and_end(model_copy):
    with pytest.raises(LoadCancelled, match="open"):
        LLM(model_copy, n_threads=N_THREADS, progress=lambda f, s: False)
    gc.collect()
    assert mappings_of(model_copy) == 0
    # refusing at "ready" still cancels: the engine built just before is shut down
    with pytest.raises(LoadCancelled, match="ready"):
        LLM(model_copy, n_threads=N_THREADS, progress=lambda f, s: s != "ready")
    gc.collect()
    assert mappings_of(model_copy) == 0


def test_progress_must_be_callable(model_copy):
    with pytest.raises(InvalidRequestError, match="progress must be a callable"):
        LLM(model_copy, n_threads=N_THREADS, progress=42)


def test_progress_covers_the_draft_model(model_copy):
    """With a draft model its load is reported too, inside the same rising fraction."""
    calls = []
    with LLM(model_copy, n_threads=N_THREADS, draft_model=model_copy, speculative="draft",
             progress=lambda f, s: calls.append((f, s))) as llm:
        assert llm.draft_model_path
    fractions = [f for f, _ in calls]
    stages = [s for _, s in calls]
    assert all(a <= b for a, b in zip(fractions, fractions[1:]))
    order = [s for i, s in enumerate(stages) if i == 0 or stages[i - 1] != s]
    assert order == ["open", "bind", "repack", "tokenizer", "open", "bind", "repack", "engine",
                     "ready"], order
    assert fractions[-1] == 1.0
