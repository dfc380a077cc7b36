"""The memory plan: what a model will take before it is loaded, and whether the machine has it.

    plan = edgellm.LLM.plan("smollm2", n_ctx=8192)      # or edgellm.memory_plan.plan(...)
    plan.total, plan.available, plan.fits               # bytes; bytes or None; bool
    print(plan.table())                                 # `edgellm plan MODEL` prints this

The bytes come from the C++ planner (cpp/src/model/memory_plan.h, `_core.MemoryPlanner`),
which reads the GGUF header and tensor table only and sizes each part with the loader's and
the engine's own rules: a plan is a function of the file and the options. What the machine can
give comes from the engine's one probe (cpp/src/common/machine_memory.h, `_core.machine_memory`):
/proc/meminfo's MemAvailable, capped by the room left in the process's cgroup and its ancestors
(v2 memory.max - memory.current, v1 memory.limit_in_bytes - memory.usage_in_bytes). Swap is
reported, never counted (a Raspberry Pi may have none). EDGELLM_MEMORY_LIMIT (bytes, or with
K/M/G/T, powers of 1024: "512M", "1.5G") replaces the machine's figure: a small machine
simulated, or a cap you choose.

LLM(...) and `edgellm serve` run the same check before they touch memory: a plan that does
not fit raises MemoryPlanError (a ContextLengthError) naming the numbers and what would fit;
with n_ctx unset the largest context that fits is chosen instead (a warning says so).
"""
from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional

from . import _core

__all__ = ["MemoryPlan", "MachineMemory", "MemoryPlanError", "Fix", "advice", "machine_memory",
           "plan", "parse_bytes"]

_DEFAULT_MAX_CONTEXT = 4096  # the engine's default n_ctx cap (engine.cpp)
_MIN_AUTO_CONTEXT = 256      # the smallest context chosen automatically


@dataclass(frozen=True)
class Fix:
    """One change that would make a plan fit: `setting` ("n_ctx", "kv_type", "kv_memory", or
    "model": a smaller model) to `value`, with `note` (sizes, what it means) written after it."""
    setting: str
    value: Any = None
    note: str = ""


# How each place that shows advice spells a setting; a setting a place has no way to change is
# not offered there (`run` has no --kv-memory and runs one sequence; the REPL speaks /set).
SPELLINGS: Dict[str, Dict[str, str]] = {
    "python": {"n_ctx": "n_ctx={}", "kv_type": 'kv_type="{}"', "kv_memory": "kv_memory={}"},
    "plan": {"n_ctx": "-c {}", "kv_type": "--kv-type {}", "kv_memory": "--kv-memory {}"},
    "serve": {"n_ctx": "--ctx-size {}", "kv_memory": "--kv-memory {}"},
    "run": {"n_ctx": "-c {}"},
    "repl": {"n_ctx": "/set parameter num_ctx {}"},
}


def advice(fixes: List[Fix], where: str = "python") -> List[str]:
    """`fixes` in the words of `where` (a key of SPELLINGS), those it can apply only."""
    out = []
    for f in fixes:
        if f.setting == "model":
            out.append(f.note)
        elif f.setting in SPELLINGS[where]:
            out.append(SPELLINGS[where][f.setting].format(f.value) + (f" {f.note}" if f.note else ""))
    return out


def context_warnings(n_ctx: int, n_ctx_train: int) -> List[str]:
    """What a context of n_ctx tokens deserves a warning for (LLM(...) warns it; `edgellm
    plan` prints it): beyond the trained context is allowed, as llama.cpp allows it."""
    if n_ctx_train > 0 and n_ctx > n_ctx_train:
        return [f"n_ctx {n_ctx} is beyond the model's trained context {n_ctx_train}: output "
                "past that length may degrade"]
    return []


def message_for(e: BaseException, where: str) -> str:
    """An error's message as `where` shows it: a MemoryPlanError's advice in its words."""
    return e.message_for(where) if isinstance(e, MemoryPlanError) else str(e)


class MemoryPlanError(_core.ContextLengthError):
    """The model, at the configuration asked for, needs more memory than the machine can give.
    `.plan` is the MemoryPlan; `.fixes` what would fit (Fix), `.suggestions` the same in
    LLM(...)'s words; `.message_for(where)` the message in another place's words ("run",
    "serve", "repl", "plan": edgellm.memory_plan.SPELLINGS)."""

    def __init__(self, message: str, plan: "Optional[MemoryPlan]" = None,
                 suggestions: Optional[List[str]] = None, fixes: Optional[List[Fix]] = None):
        self.head = message
        self.fixes = list(fixes or [])
        self.suggestions = suggestions if suggestions is not None else advice(self.fixes)
        super().__init__(self.message_for("python"))
        self.plan = plan

    def message_for(self, where: str) -> str:
        said = advice(self.fixes, where) if self.fixes else self.suggestions
        return self.head + ("; what would fit: " + "; or ".join(said) if said else "")


def parse_bytes(text: str) -> int:
    """'123', '512M', '1.5 GiB', '2g' -> bytes (K/M/G/T are powers of 1024)."""
    return _core.parse_bytes(str(text))


def _gb(n: Optional[int]) -> str:
    if n is None:
        return "unknown"
    if n >= 1 << 30:
        return f"{n / (1 << 30):.2f} GiB"
    if n >= 1 << 20:
        return f"{n / (1 << 20):.1f} MiB"
    return f"{n / (1 << 10):.1f} KiB"


# ---- what the machine can give -------------------------------------------------------------

@dataclass
class MachineMemory:
    """Bytes this process can still use. available: the smallest of the sources (None if none
    could be read); source names it ("MemAvailable", "sysconf", "cgroup",
    "EDGELLM_MEMORY_LIMIT")."""
    available: Optional[int]
    source: str
    mem_available: Optional[int] = None
    mem_total: Optional[int] = None
    swap_total: Optional[int] = None
    swap_free: Optional[int] = None
    cgroup_limit: Optional[int] = None
    cgroup_usage: Optional[int] = None
    cgroup_path: Optional[str] = None
    override: Optional[int] = None


def machine_memory() -> MachineMemory:
    """MemAvailable capped by the cgroup's room (EDGELLM_MEMORY_LIMIT overrides both): the
    engine's own probe, so the plan and the engine's KV check see the same number.
    EDGELLM_CGROUP_ROOT / EDGELLM_PROC_SELF_CGROUP (tests only) read the cgroup files under
    another folder / the process's cgroup from another file."""
    return MachineMemory(**_core.machine_memory())


def _params_line(p: "MemoryPlan") -> str:
    def count(n: int) -> str:
        for div, suffix in ((1e9, "B"), (1e6, "M"), (1e3, "K")):
            if n >= div:
                return f"{n / div:.2f}{suffix}"
        return str(n)

    if not p.n_expert:
        return f"{count(p.params_total)}"
    return (f"{count(p.params_total)} total, {count(p.params_active)} active per token "
            f"({p.n_expert_used} of {p.n_expert} experts; a decode step reads "
            f"{_gb(p.active_weight_bytes)} of weights)")


# ---- the plan ------------------------------------------------------------------------------

@dataclass
class MemoryPlan:
    """Bytes per part of one model at one configuration (cpp/src/model/memory_plan.h) and what
    the machine can give. total = max(load_peak, weights + scratch + runtime + kv_budget)."""
    path: str
    arch: str
    n_ctx: int
    n_ctx_train: int
    n_layer: int
    n_threads: int
    page_size: int
    max_seqs: int
    max_batch_tokens: int
    kv_type: str
    file_bytes: int
    weights_packed: int       # repacked copies the loader builds (anonymous memory)
    weights_mapped: int       # read in place from the mapping (unpacked matrices, norms, header)
    weights_converted: int    # f32 copies of non-F32 vectors
    embedding_mapped: int     # token embedding rows, paged in per token used (not in total)
    matrices_packed: int
    matrices_mapped: int
    kv_bytes_per_token_full: int
    kv_bytes_per_token_window: int
    kv_layers_full: int
    kv_layers_window: int
    window: int
    kv_page_bytes_full: int
    kv_page_bytes_window: int
    kv_budget: int
    scratch_forward: int
    scratch_attention: int
    metadata_heap: int
    tokenizer_heap: int
    tokenizer_load_transient: int  # its second parse of the metadata (freed, kept by malloc)
    engine_buffers: int   # the engine's logits row and sampling copy
    runtime: int          # metadata + tokenizer + transient + engine buffers
    load_peak: int
    total: int
    # parameters, and those one token uses (MoE: the selected experts only); file bytes a
    # decode step reads (the embedding row aside); expert counts (0 for dense models)
    params_total: int = 0
    params_active: int = 0
    active_weight_bytes: int = 0
    n_expert: int = 0
    n_expert_used: int = 0
    # the draft model's part (speculative decoding with draft_model), included in total
    draft: Optional["MemoryPlan"] = None
    draft_kv: int = 0
    # LoRA adapters loaded into the model (LLM.load_lora): their tensors' bytes (mapped from
    # their files, read by every step that uses them), included in total; how many
    lora_bytes: int = 0
    lora_adapters: int = 0
    # the vision projector (mmproj GGUF) beside it: its tensors' bytes, included in total
    projector: Optional[str] = None
    projector_bytes: int = 0
    machine: MachineMemory = field(default_factory=lambda: MachineMemory(None, "unknown"))
    # when it does not fit: the changes that would (edgellm.memory_plan.advice words them)
    fixes: List[Fix] = field(default_factory=list)

    @property
    def weights(self) -> int:
        return self.weights_packed + self.weights_mapped + self.weights_converted

    @property
    def scratch(self) -> int:
        return self.scratch_forward + self.scratch_attention

    @property
    def available(self) -> Optional[int]:
        return self.machine.available

    @property
    def fits(self) -> bool:
        return self.available is None or self.total <= self.available

    def add_projector(self, path: Optional[str]) -> None:
        """The projector file `path` (None: none) counted: its tensors' bytes in total."""
        if path is None or self.projector is not None:
            return
        from .model_file import ModelFile
        with ModelFile(str(path)) as mf:
            self.projector_bytes = sum(t.nbytes for t in mf.tensors.values())
        self.projector = str(path)
        self.total += self.projector_bytes

    def count_lora(self, nbytes: int, sign: int = 1) -> None:
        """An adapter loaded (sign 1) or unloaded (-1): its bytes in lora_bytes and total."""
        self.lora_bytes += sign * nbytes
        self.lora_adapters += sign
        self.total += sign * nbytes
    @property
    def warnings(self) -> List[str]:
        return context_warnings(self.n_ctx, self.n_ctx_train)

    def to_dict(self) -> Dict[str, Any]:
        d = asdict(self)
        d.update(weights=self.weights, scratch=self.scratch, available=self.available,
                 fits=self.fits, warnings=self.warnings)
        if self.draft is not None:
            d["draft"] = self.draft.to_dict()
        return d

    def table(self) -> str:
        """The plan as `edgellm plan` prints it."""
        rows = [
            ("model", f"{self.path} ({self.arch}, {self.n_layer} layers, file {_gb(self.file_bytes)})"),
            ("parameters", _params_line(self)),
            ("config", f"n_ctx {self.n_ctx} (trained {self.n_ctx_train}), kv_type {self.kv_type}, "
                       f"max_seqs {self.max_seqs}, max_batch_tokens {self.max_batch_tokens}, "
                       f"threads {self.n_threads}"),
            ("weights, repacked", f"{_gb(self.weights_packed)} ({self.matrices_packed} matrices, copied)"),
            ("weights, mapped", f"{_gb(self.weights_mapped)} ({self.matrices_mapped} matrices in "
                                "place, norms, header)"),
            ("weights, converted", _gb(self.weights_converted)),
            ("token embedding", f"{_gb(self.embedding_mapped)} mapped, paged in per token used "
                                "(not counted)"),
        ]
        kv = f"{self.kv_bytes_per_token_full} B/token full ({self.kv_layers_full} layers)"
        if self.window:
            kv += (f", {self.kv_bytes_per_token_window} B/token sliding window "
                   f"{self.window} ({self.kv_layers_window} layers)")
        rows += [
            ("KV per token", kv),
            ("KV budget", f"{_gb(self.kv_budget)} (committed as written)"),
            ("scratch", f"{_gb(self.scratch)} (forward {_gb(self.scratch_forward)} for "
                        f"{self.max_batch_tokens} tokens, attention {_gb(self.scratch_attention)} "
                        f"for {self.n_threads} threads)"),
            ("runtime", f"{_gb(self.runtime)} (metadata {_gb(self.metadata_heap)}, tokenizer "
                        f"{_gb(self.tokenizer_heap)} + {_gb(self.tokenizer_load_transient)} while "
                        f"built, engine buffers {_gb(self.engine_buffers)})"),
        ]
        if self.draft is not None:
            rows.append(("draft model", f"{_gb(self.draft.weights + self.draft.scratch + self.draft.runtime)}"
                                        f" + KV {_gb(self.draft_kv)} ({self.draft.path})"))
        if self.projector is not None:
            rows.append(("vision projector", f"{_gb(self.projector_bytes)} ({self.projector})"))
        if self.lora_adapters:
            rows.append(("LoRA adapters", f"{_gb(self.lora_bytes)} ({self.lora_adapters} loaded)"))
        rows += [
            ("peak during load", _gb(self.load_peak)),
            ("total", f"{_gb(self.total)} ({self.total} bytes)"),
        ]
        m = self.machine
        avail = f"{_gb(m.available)} ({m.source})"
        if m.source != "EDGELLM_MEMORY_LIMIT":
            extra = []
            if m.mem_available is not None and m.source != "MemAvailable":
                extra.append(f"MemAvailable {_gb(m.mem_available)}")
            if m.cgroup_limit is not None:
                extra.append(f"cgroup {_gb(m.cgroup_limit)} - {_gb(m.cgroup_usage)} used")
            if extra:
                avail += ": " + ", ".join(extra)
        rows.append(("available", avail))
        rows.append(("swap", "off" if not m.swap_total else f"{_gb(m.swap_total)} (not counted)"))
        rows.append(("fits", "yes" if self.fits else f"NO: short by {_gb(self.total - self.available)}"))
        if not self.fits and self.fixes:
            rows.append(("what would fit", "; or ".join(advice(self.fixes, "plan"))))
        width = max(len(k) for k, _ in rows)
        return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)


class _Planner:
    """One model's header, read once per process (per path, size and mtime; the plan is a
    function of the file's contents, so this only saves re-reading it); plan() for any
    configuration."""
    _cache: Dict[Any, Any] = {}

    def __init__(self, path: str):
        self.path = path
        try:
            st = os.stat(path)
            key = (os.path.realpath(path), st.st_size, st.st_mtime_ns)
        except OSError:
            key = None  # the C++ reader says what is wrong
        core = self._cache.get(key) if key else None
        if core is None:
            core = _core.MemoryPlanner(path)
            if key:
                if len(self._cache) > 16:
                    self._cache.clear()
                self._cache[key] = core
        self.core = core

    def raw(self, n_ctx: int, kv_memory: int, kv_type: str, max_seqs: int, max_batch_tokens: int,
            page_size: int, n_threads: int) -> Dict[str, Any]:
        return self.core.plan(n_ctx, kv_memory, kv_type, max_seqs, max_batch_tokens, page_size,
                              n_threads)


def _build(target: _Planner, draft: Optional[_Planner], machine: MachineMemory,
           a: Dict[str, Any]) -> MemoryPlan:
    d = target.raw(a["n_ctx"], a["kv_memory"], a["kv_type"], a["max_seqs"], a["max_batch_tokens"],
                   a["page_size"], a["n_threads"])
    p = MemoryPlan(**d, machine=machine)
    if draft is not None:
        dd = draft.raw(p.n_ctx, 0, a["kv_type"], a["max_seqs"], a["max_batch_tokens"],
                       a["page_size"], a["n_threads"])
        p.draft = MemoryPlan(**dd, machine=machine)
        # engine.cpp: the draft's pool holds as many positions as the target's sequences can
        ctx_pages = -(-p.n_ctx // p.page_size)
        pages = ctx_pages * (p.max_seqs + 1)
        if p.kv_page_bytes_full > 0:
            pages = min(pages, p.kv_budget // p.kv_page_bytes_full)
        p.draft_kv = pages * p.draft.kv_page_bytes_full
        p.total += p.draft.weights + p.draft.scratch + p.draft.runtime + p.draft_kv
        p.load_peak += p.draft.load_peak
    return p


def _suggestions(target: _Planner, draft: Optional[_Planner], machine: MachineMemory,
                 a: Dict[str, Any], p: MemoryPlan) -> List[Fix]:
    avail = machine.available or 0
    out: List[Fix] = []
    fixed = p.total - p.kv_budget
    if fixed >= avail:
        return [Fix("model", None, f"the model alone (weights, scratch, runtime: {_gb(fixed)}) "
                                   f"is more than the {_gb(avail)} available: a smaller or more "
                                   "quantized model is needed")]
    if a["kv_memory"]:
        out.append(Fix("kv_memory", avail - fixed, f"(at most; {_gb(avail - fixed)})"))
    else:
        # never past the model's trained context: a larger one was not what fit was asked for
        upper = min(p.n_ctx, p.n_ctx_train) if p.n_ctx_train > 0 else p.n_ctx
        best = _largest_n_ctx(target, draft, machine, a, upper)
        if best:
            out.append(Fix("n_ctx", best, "(the model's trained context)"
                           if best == p.n_ctx_train else "(the largest that fits)"))
        if a["kv_type"] != "q8_0":
            q = _build(target, draft, machine, dict(a, n_ctx=p.n_ctx, kv_type="q8_0"))
            if q.fits:
                out.append(Fix("kv_type", "q8_0", f"at n_ctx {p.n_ctx} ({_gb(q.total)})"))
        # a smaller KV budget at this context: fewer full-length sequences at once (the
        # default holds two); short requests still share it many at a time
        room = avail - fixed
        if room >= p.kv_page_bytes_full + p.kv_page_bytes_window and p.n_ctx <= upper:
            seqs = room / max(1, p.kv_budget / 2)
            out.append(Fix("kv_memory", room, f"({_gb(room)}: {seqs:.2f} full-length sequences "
                                              f"at n_ctx {p.n_ctx} instead of 2)"))
    return out


def _largest_n_ctx(target: _Planner, draft: Optional[_Planner], machine: MachineMemory,
                   a: Dict[str, Any], upper: int) -> int:
    """The largest n_ctx (a multiple of the page size, <= upper) whose plan fits; 0 if none."""
    step = a["page_size"]
    lo, hi = 1, max(1, upper // step)
    if not _build(target, draft, machine, dict(a, n_ctx=step)).fits:
        return 0
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if _build(target, draft, machine, dict(a, n_ctx=mid * step)).fits:
            lo = mid
        else:
            hi = mid - 1
    return lo * step


def _refusal(p: MemoryPlan, kv_memory: int) -> str:
    m = p.machine
    per_token = p.kv_bytes_per_token_full + p.kv_bytes_per_token_window
    parts = [f"weights {_gb(p.weights)}", f"KV {_gb(p.kv_budget)} ({per_token} bytes per token)",
             f"scratch {_gb(p.scratch)}", f"runtime {_gb(p.runtime)}"]
    if p.draft is not None:
        parts.append(f"draft model {_gb(p.draft.weights + p.draft.scratch + p.draft.runtime + p.draft_kv)}")
    where = m.source
    if m.source == "cgroup":
        where = f"cgroup {m.cgroup_path}: {m.cgroup_limit} limit - {m.cgroup_usage} used"
    swap = "swap off" if not m.swap_total else f"swap {_gb(m.swap_total)} not counted"
    fixed = p.total - p.kv_budget
    if m.available is not None and fixed >= m.available:
        head = "the model does not fit in memory even without its KV cache"
    elif kv_memory:
        head = (f"kv_memory {kv_memory} bytes: the KV cache needs {p.kv_budget} bytes and the "
                f"model {fixed} more")
    else:
        head = f"n_ctx {p.n_ctx} is beyond what memory allows"
    msg = (f"{head}: {Path(p.path).name} at n_ctx {p.n_ctx}, kv_type {p.kv_type}, max_seqs "
           f"{p.max_seqs} needs {p.total} bytes ({_gb(p.total)}: {', '.join(parts)}) but only "
           f"{m.available} bytes ({_gb(m.available)}) of memory are available ({where}; {swap})")
    return msg


def _args(n_ctx=None, n_threads=None, kv_memory=None, kv_type="f16", max_seqs=16,
          max_batch_tokens=512, page_size=32) -> Dict[str, Any]:
    from .validation import check_engine_args
    a = check_engine_args(n_ctx=n_ctx, n_threads=n_threads, kv_memory=kv_memory, kv_type=kv_type,
                          max_seqs=max_seqs, max_batch_tokens=max_batch_tokens,
                          page_size=page_size, n_gpu_layers=0, prefix_cache=True,
                          draft_model=None, speculative="off", num_speculative_tokens=None,
                          spec_adaptive=True)
    a["kv_type"] = a["kv_type"].strip().lower()
    return a


def plan(model, n_ctx: Optional[int] = None, n_threads: Optional[int] = None, *,
         kv_memory: Optional[int] = None, kv_type: str = "f16", max_seqs: int = 16,
         max_batch_tokens: int = 512, page_size: int = 32, draft_model=None,
         speculative: str = "auto", mmproj=None, **_ignored) -> MemoryPlan:
    """The memory plan of `model` (a path or known name) with LLM's arguments; nothing is
    loaded. n_ctx None: the engine's default, min(trained, 4096) (what LLM would use, before
    it shrinks a context that does not fit). mmproj: the vision projector's file (None: the
    one mmproj*.gguf beside the model, as LLM finds it; False: none). Raises
    ModelFormatError for a bad file."""
    from .models import resolve
    a = _args(n_ctx, n_threads, kv_memory, kv_type, max_seqs, max_batch_tokens, page_size)
    target = _Planner(str(resolve(model)))
    draft = None
    if draft_model is not None and str(speculative).strip().lower() in ("draft", "auto"):
        draft = _Planner(str(resolve(draft_model)))
    p = _build(target, draft, machine_memory(), a)
    if mmproj is not False:
        from .vision import find_mmproj
        p.add_projector(mmproj or find_mmproj(target.path))
    if not p.fits:
        p.fixes = _suggestions(target, draft, p.machine, a, p)
    return p


def check(path: str, a: Dict[str, Any], draft_path: str = "", auto_ctx: bool = True) -> MemoryPlan:
    """LLM's check before load (a: check_engine_args' dict). Returns the plan to run with; when
    it cannot fit raises MemoryPlanError, unless n_ctx was left to the default (a["n_ctx"] 0)
    and auto_ctx: then the largest n_ctx that fits is planned and returned."""
    target = _Planner(path)
    draft = _Planner(draft_path) if draft_path else None
    machine = machine_memory()
    a = dict(a, kv_type=str(a["kv_type"]).strip().lower())
    if a["kv_type"] not in ("f16", "f32", "q8_0"):
        return _build(target, draft, machine, a)  # the engine says what is wrong with it
    p = _build(target, draft, machine, a)
    if p.fits:
        return p
    if auto_ctx and a["n_ctx"] == 0 and a["kv_memory"] == 0:
        best = _largest_n_ctx(target, draft, machine, a, p.n_ctx)
        if best >= min(_MIN_AUTO_CONTEXT, p.n_ctx):
            return _build(target, draft, machine, dict(a, n_ctx=best))
    p.fixes = _suggestions(target, draft, machine, a, p)
    raise MemoryPlanError(_refusal(p, a["kv_memory"]), p, fixes=p.fixes)
