"""Prompt-processing and generation throughput with llama-bench's method
(bench/README.md), on the C++ forward pass directly (_core.ModelRunner / BatchRunner):

- warm-up: one full prompt run plus one generation step, discarded;
- each repetition starts from an empty KV cache;
- pp<N>: N random token ids (the first one BOS when the model adds BOS), fed in chunks of the
  model's max_batch_tokens with logits for the last token only;
- tg<N>: N single-token decodes of random tokens (the first one BOS when the model adds BOS),
  no sampling in the timed loop;
- tg<N> x<B>: B sequences decoding together, one token each per forward pass (the engine's
  batched decode step), aggregate tokens/s = B·N / time;
- t/s per repetition, mean ± sample standard deviation over repetitions.
"""
from __future__ import annotations

import random
import statistics
import time
from dataclasses import asdict, dataclass, field
from typing import Callable, List, Optional, Sequence

from .model_info import ModelInfo, format_size, read_model_info


@dataclass
class BenchResult:
    test: str  # "pp512", "tg128", "tg128 x4"
    n_prompt: int
    n_gen: int
    n_seqs: int
    samples_ts: List[float]
    samples_ns: List[int]
    model: str = ""
    model_filename: str = ""
    model_size: int = 0
    model_n_params: int = 0
    backend: str = ""
    n_threads: int = 0
    n_batch: int = 0
    extra: dict = field(default_factory=dict)

    @property
    def avg_ts(self) -> float:
        return statistics.fmean(self.samples_ts)

    @property
    def stddev_ts(self) -> float:
        return statistics.stdev(self.samples_ts) if len(self.samples_ts) > 1 else 0.0

    def as_dict(self) -> dict:
        d = asdict(self)
        d.pop("extra")
        d.update(self.extra)
        d["avg_ts"] = self.avg_ts
        d["stddev_ts"] = self.stddev_ts
        d["avg_ns"] = int(statistics.fmean(self.samples_ns))
        d["stddev_ns"] = int(statistics.stdev(self.samples_ns)) if len(self.samples_ns) > 1 else 0
        return d


def bos_rule(path: str):
    """(add_bos, bos_id) as the model's tokenizer says; (False, None) for a file without one."""
    from edgellm import _core

    try:
        tok = _core.Tokenizer.from_gguf(str(path))
    except Exception:  # a weights-only file: no BOS rule to follow
        return False, None
    return bool(tok.add_bos) and tok.bos_id is not None, tok.bos_id


class ThroughputBench:
    """One loaded model; run() measures the requested tests."""

    def __init__(self, path: str, n_threads: int = 0, max_batch_tokens: int = 512, seed: int = 1234,
                 n_gpu_layers: int = 0):
        from edgellm import _core

        self._core = _core
        self.path = str(path)
        self.info: ModelInfo = read_model_info(self.path)
        self.model = _core.Model(self.path, n_threads=n_threads, max_batch_tokens=max_batch_tokens,
                                 n_gpu_layers=n_gpu_layers)
        self.n_threads = int(self.model.n_threads)
        self.n_vocab = int(self.model.n_vocab)
        self.max_batch_tokens = int(self.model.max_batch_tokens)
        self.add_bos, self.bos_id = bos_rule(self.path)
        self.rng = random.Random(seed)
        self.backend = f"CPU {_core.isa()}"
        if self.model.n_gpu_layers:  # llama-bench style: the accelerator and how many layers it holds
            self.backend = f"CUDA ngl={self.model.n_gpu_layers} + CPU {_core.isa()}"

    def _tokens(self, n: int) -> List[int]:
        ids = [self.rng.randrange(self.n_vocab) for _ in range(n)]
        if self.add_bos and ids:
            ids[0] = int(self.bos_id)
        return ids

    def _runner(self, n_ctx: int):
        # llama-bench pads the context to 256.
        n_ctx = max(256, (n_ctx + 255) // 256 * 256)
        return self._core.ModelRunner(self.model, n_ctx=n_ctx, kv_type="F16")

    def _result(self, test, n_prompt, n_gen, n_seqs, ns: List[int], n_tokens: int) -> BenchResult:
        return BenchResult(test=test, n_prompt=n_prompt, n_gen=n_gen, n_seqs=n_seqs,
                           samples_ts=[n_tokens * 1e9 / t for t in ns], samples_ns=ns,
                           model=self.info.label, model_filename=self.path, model_size=self.info.size_bytes,
                           model_n_params=self.info.n_params, backend=self.backend, n_threads=self.n_threads,
                           n_batch=self.max_batch_tokens)

    def pp(self, n_prompt: int, reps: int, tick: Callable[[int], None] = lambda n: None) -> BenchResult:
        runner = self._runner(n_prompt + 1)
        runner.eval(self._tokens(n_prompt))  # warm-up: one prompt run ...
        runner.eval([self.rng.randrange(self.n_vocab)])  # ... and one generation step
        ns = []
        for _ in range(reps):
            runner.reset()
            ids = self._tokens(n_prompt)
            t0 = time.perf_counter_ns()
            runner.eval(ids, all_logits=False)
            ns.append(time.perf_counter_ns() - t0)
            tick(n_prompt)
        return self._result(f"pp{n_prompt}", n_prompt, 0, 1, ns, n_prompt)

    def tg(self, n_gen: int, reps: int, tick: Callable[[int], None] = lambda n: None) -> BenchResult:
        runner = self._runner(n_gen + 1)
        runner.eval(self._tokens(1))  # warm-up generation step
        ns = []
        for _ in range(reps):
            runner.reset()
            ids = self._tokens(n_gen)
            t0 = time.perf_counter_ns()
            for t in ids:
                runner.eval((t,))
            ns.append(time.perf_counter_ns() - t0)
            tick(n_gen)
        return self._result(f"tg{n_gen}", 0, n_gen, 1, ns, n_gen)

    def batched_tg(self, n_seqs: int, n_gen: int, reps: int,
                   tick: Callable[[int], None] = lambda n: None) -> BenchResult:
        """n_seqs sequences decode together: every forward pass holds one new token of each."""
        br = self._core.BatchRunner(self.model, n_seqs=n_seqs, n_ctx=n_gen + 1, kv_type="F16", page_size=32)
        seqs = list(range(n_seqs))
        want = [1] * n_seqs

        def run(steps):
            for step in range(steps):
                toks = [int(self.bos_id) if (step == 0 and self.add_bos) else self.rng.randrange(self.n_vocab)
                        for _ in seqs]
                br.forward(toks, [step] * n_seqs, seqs, want)

        run(1)  # warm-up step
        for s in seqs:
            br.release(s)
        ns = []
        for _ in range(reps):
            t0 = time.perf_counter_ns()
            run(n_gen)
            ns.append(time.perf_counter_ns() - t0)
            for s in seqs:
                br.release(s)
            tick(n_gen * n_seqs)
        return self._result(f"tg{n_gen} x{n_seqs}", 0, n_gen, n_seqs, ns, n_gen * n_seqs)

    def run(self, n_prompt: Sequence[int], n_gen: Sequence[int], reps: int, batches: Sequence[int] = (),
            progress=None) -> List[BenchResult]:
        tick = progress.update if progress is not None else (lambda n: None)
        out = []
        for p in n_prompt:
            if p > 0:
                out.append(self.pp(p, reps, tick))
        for g in n_gen:
            if g > 0:
                out.append(self.tg(g, reps, tick))
        for b in batches:
            for g in n_gen:
                if g > 0 and b > 0:
                    out.append(self.batched_tg(b, g, reps, tick))
        return out

    @staticmethod
    def work(n_prompt: Sequence[int], n_gen: Sequence[int], reps: int, batches: Sequence[int] = ()) -> int:
        """Token count run() processes (for a progress bar)."""
        return reps * (sum(n_prompt) + sum(n_gen) + sum(b * g for b in batches for g in n_gen))


def _spec_cell(r: BenchResult) -> str:
    n = int(r.extra.get("draft_n", 0) or 0)
    if n <= 0:
        return "-"
    a = int(r.extra.get("draft_n_accepted", 0) or 0)
    return f"{n} / {a} ({100.0 * a / n:.1f}%)"


def markdown_table(results: Sequence[BenchResult]) -> str:
    """llama-bench's table; a last column "drafted / accepted" (with the acceptance rate) when a
    speculative row (edgellm.bench.spec_decode) drafted anything."""
    spec = any(int(r.extra.get("draft_n", 0) or 0) > 0 for r in results)
    head = "| model | size | params | backend | threads | test | t/s |"
    rule = "| --- | ---: | ---: | --- | ---: | --- | ---: |"
    if spec:
        head += " drafted / accepted |"
        rule += " ---: |"
    rows = [head, rule]
    for r in results:
        params = f"{r.model_n_params / 1e9:.2f} B" if r.model_n_params >= 1e9 else f"{r.model_n_params / 1e6:.2f} M"
        rows.append(f"| {r.model} | {format_size(r.model_size)} | {params} | {r.backend} | {r.n_threads} | "
                    f"{r.test} | {r.avg_ts:.2f} ± {r.stddev_ts:.2f} |" + (f" {_spec_cell(r)} |" if spec else ""))
    return "\n".join(rows)
