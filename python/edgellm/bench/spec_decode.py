"""`edgellm bench --spec MODE [--draft MODEL]`: generation through the engine (edgellm.LLM) with
speculative decoding, next to the same generation with it off.

The raw pp / tg tests (throughput.py) feed random tokens to the forward pass, where nothing can
be drafted; this one generates greedily (temperature 0, end-of-generation ignored) from a fixed
prompt that asks the model to copy a passage, the case speculative decoding exists for (prompt
lookup finds the passage; a draft model predicts it easily). Each repetition is one completion
of n_gen tokens; its rate is llama-server's predicted_per_second (the tokens after the first,
over the time after the first), and the row carries the completion's drafted / accepted counts
(timings draft_n / draft_n_accepted). Greedy output with and without speculation is the same
text, so the two rows measure the same work.

bench/speculative.py in the repository is the full comparison (code edit, quoting summary,
free prose, llama.cpp's speculative modes); this is the quick look.
"""
from __future__ import annotations

from typing import Callable, List, Optional

from .throughput import BenchResult

PASSAGE = (
    "def merge_sorted(left, right):\n"
    "    result = []\n"
    "    i = j = 0\n"
    "    while i < len(left) and j < len(right):\n"
    "        if left[i] <= right[j]:\n"
    "            result.append(left[i])\n"
    "            i += 1\n"
    "        else:\n"
    "            result.append(right[j])\n"
    "            j += 1\n"
    "    result.extend(left[i:])\n"
    "    result.extend(right[j:])\n"
    "    return result\n"
)
PROMPT = ("Here is a Python function:\n\n" + PASSAGE +
          "\nThe same function, copied exactly, with no changes:\n\n")


def spec_label(mode: str, draft: Optional[str]) -> str:
    if draft and mode in ("draft", "auto"):
        name = str(draft).replace("\\", "/").rsplit("/", 1)[-1]
        return f"spec={mode} draft={name}"
    return f"spec={mode}"


class SpeculativeBench:
    """An LLM with speculation off and one with `mode` (and the draft), loaded once each."""

    def __init__(self, path: str, mode: str, draft: Optional[str] = None, n_threads: int = 0,
                 max_batch_tokens: int = 512, num_speculative_tokens: Optional[int] = None,
                 n_gpu_layers: int = 0):
        from edgellm import LLM

        self.path, self.mode, self.draft = str(path), mode, draft
        common = dict(n_threads=n_threads or None, max_seqs=1, max_batch_tokens=max_batch_tokens,
                      n_gpu_layers=n_gpu_layers, prefix_cache=False)
        self.off = LLM(self.path, speculative="off", **common)
        self.on = LLM(self.path, speculative=mode, draft_model=draft,
                      num_speculative_tokens=num_speculative_tokens, **common)

    def close(self) -> None:
        self.off.close()
        self.on.close()

    def _one(self, llm, n_gen: int) -> dict:
        from edgellm import SamplingParams

        c = llm.generate(PROMPT, SamplingParams(temperature=0.0, max_tokens=n_gen, ignore_eos=True))
        return c.timings

    def run(self, n_gen: int, reps: int, base: BenchResult,
            tick: Callable[[int], None] = lambda n: None) -> List[BenchResult]:
        """Two rows, `tg<N> spec=off` and `tg<N> spec=<mode>`, labelled like `base`'s model."""
        out = []
        for label, llm in (("spec=off", self.off), (spec_label(self.mode, self.draft), self.on)):
            self._one(llm, min(n_gen, 8))  # warm-up
            ns, ts, drafted, accepted = [], [], 0, 0
            for _ in range(reps):
                t = self._one(llm, n_gen)
                steps = max(1, int(t.get("predicted_n", 0)) - 1)
                ms = float(t.get("predicted_ms", 0.0)) or 1e-9
                ns.append(int(ms * 1e6))
                ts.append(1e3 * steps / ms)
                drafted += int(t.get("draft_n", 0) or 0)
                accepted += int(t.get("draft_n_accepted", 0) or 0)
                tick(n_gen)
            r = BenchResult(test=f"tg{n_gen} {label}", n_prompt=0, n_gen=n_gen, n_seqs=1,
                            samples_ts=ts, samples_ns=ns, model=base.model,
                            model_filename=self.path, model_size=base.model_size,
                            model_n_params=base.model_n_params, backend=base.backend,
                            n_threads=base.n_threads, n_batch=base.n_batch)
            r.extra = {"speculative": label.split()[0].split("=", 1)[1],
                       "draft_n": drafted, "draft_n_accepted": accepted,
                       "draft_acceptance": accepted / drafted if drafted else 0.0}
            out.append(r)
        return out
