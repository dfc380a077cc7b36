"""LoRA decode speed beside the base (issue 42): four random adapters for a GGUF base, written
here with gguf-py in the layout convert_lora_to_gguf.py writes, then, alternating base / adapter
runs,
  - one stream: decode tokens/s of the base alone and with one adapter;
  - 16 streams: aggregate decode tokens/s of 16 base requests and of 16 requests over 4 adapters
    (4 each), all submitted at once.
llama.cpp beside it: `--llama-server PATH` (llama-bench has no `--lora`) starts llama-server on the
same base alone and with `--lora` on the first adapter, one server at a time, alternating rounds
(its threads spin: two at once would fight over the cores), and reads the single-stream decode
tok/s of a `/completion` of the same length from its `timings`; default
/work/peers/llama.cpp/build/bin/llama-server when /work/peers/READY exists.
EDGELLM_LORA_AHEAD in the environment sets the next-op adapter prefetch (model/lora_block.cpp)
for an A/B between processes: 0 off, `burst` one share per base chunk, ROWS one share per that
many base rows of a decode step (unset: 64).

Adapter cases (`--case`): `all` — rank 16 on all seven projections (q/k/v/o/gate/up/down), the
worst case; `peft` — PEFT's LoraConfig defaults for Llama/Qwen2 (r = 8, lora_alpha = 8 on q_proj and
v_proj). `--adapter-type`: f32 is convert_lora_to_gguf.py's default --outtype, f16 its smaller
choice. Printed beside each ratio: its byte bound, base bytes / (base + adapter bytes) read per
decode step (the base's matrices and output head; 1 stream reads one adapter, 16 streams over 4
adapters read all four once per step), what the ratio would be if the step were bandwidth-bound
and the adapter's bytes streamed as fast as the base's.

    PYTHONPATH=python python bench/lora_speed.py MODEL.gguf [--case all|peft] [--adapter-type f16|f32]
        [--rank R] [--threads 2] [--rounds 3]
"""
import argparse
import atexit
import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.request

import numpy as np

PEER_SERVER = "/work/peers/llama.cpp/build/bin/llama-server"


ALL_TARGETS = ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down")
CASES = {  # name: (targets, default rank, alpha as a function of rank)
    "all": (ALL_TARGETS, 16, lambda r: 2.0 * r),
    "peft": (("attn_q", "attn_v"), 8, lambda r: 8.0),  # peft.LoraConfig(): r=8, lora_alpha=8, q_proj/v_proj
}


def write_adapter(base_path: str, out: str, rank: int, seed: int, targets=ALL_TARGETS, alpha=None,
                  dtype=np.float16) -> int:
    """Writes a random adapter for `base_path`; returns its tensor bytes."""
    import gguf

    r = gguf.GGUFReader(base_path)
    arch = r.fields["general.architecture"].contents()
    w = gguf.GGUFWriter(out, arch)
    w.add_string("general.type", "adapter")
    w.add_string("adapter.type", "lora")
    w.add_float32("adapter.lora.alpha", float(2 * rank) if alpha is None else float(alpha))
    rng = np.random.default_rng(seed)
    nbytes = 0
    for t in r.tensors:
        parts = t.name.split(".")
        if len(parts) == 4 and parts[0] == "blk" and parts[2] in targets and parts[3] == "weight":
            n_in, n_out = int(t.shape[0]), int(t.shape[1])
            a = (rng.standard_normal((rank, n_in)) * 0.02).astype(dtype)
            b = (rng.standard_normal((n_out, rank)) * 0.02).astype(dtype)
            w.add_tensor(t.name + ".lora_a", a)
            w.add_tensor(t.name + ".lora_b", b)
            nbytes += a.nbytes + b.nbytes
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return nbytes


def base_step_bytes(base_path: str) -> int:
    """Bytes of the base one decode step reads: every layer tensor and the output head (the
    token embeddings themselves when tied; otherwise only one row of them, not counted)."""
    import gguf

    r = gguf.GGUFReader(base_path)
    names = {t.name: int(t.n_bytes) for t in r.tensors}
    head = names.get("output.weight", names.get("token_embd.weight", 0))
    return sum(v for k, v in names.items() if k.startswith("blk.")) + head


def run_streams(llm, lora_names, n_tokens):
    """Aggregate tokens/s of len(lora_names) requests submitted together, each from its own
    thread (base and adapter runs alike), prefill included."""
    import threading

    from edgellm import SamplingParams

    res = [None] * len(lora_names)

    def one(i):
        res[i] = llm.generate(f"Write a long story number {i} about a lighthouse keeper.",
                              SamplingParams(temperature=0, max_tokens=n_tokens, ignore_eos=True, lora=lora_names[i]))

    th = [threading.Thread(target=one, args=(i,)) for i in range(len(lora_names))]
    t0 = time.perf_counter()
    for t in th:
        t.start()
    for t in th:
        t.join()
    return sum(len(o.token_ids) for o in res) / (time.perf_counter() - t0)


def llama_server_round(server, model, lora, threads, n_tokens, prompt):
    """Decode tok/s of one /completion (after a warm-up one) from a fresh llama-server on `model`,
    with `--lora lora` when given."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [server, "-m", model, "-t", str(threads), "-c", "1024", "-np", "1", "--port", str(port), "--no-webui"]
    if lora:
        cmd += ["--lora", lora]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        url = f"http://127.0.0.1:{port}"
        for _ in range(600):
            try:
                with urllib.request.urlopen(url + "/health", timeout=1) as r:
                    if r.status == 200:
                        break
            except OSError:
                time.sleep(0.2)
        else:
            raise RuntimeError("llama-server did not come up")
        body = json.dumps({"prompt": prompt, "n_predict": n_tokens, "temperature": 0, "ignore_eos": True,
                           "cache_prompt": False}).encode()
        tps = []
        for _ in range(2):  # the first is a warm-up
            req = urllib.request.Request(url + "/completion", data=body, headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(req, timeout=600) as r:
                tps.append(json.load(r)["timings"]["predicted_per_second"])
        return tps[-1]
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--case", choices=sorted(CASES), default="all",
                    help="all: rank 16 on all seven projections; peft: PEFT's default r=8 on q_proj, v_proj")
    ap.add_argument("--adapter-type", choices=("f16", "f32"), default="f16",
                    help="the adapter tensors' type (convert_lora_to_gguf.py --outtype; its default is f32)")
    ap.add_argument("--rank", type=int, default=None, help="default: the case's rank")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--no-streams", action="store_true", help="the single-stream pair only")
    ap.add_argument("--llama-bench", default=None)
    ap.add_argument("--llama-server", default=PEER_SERVER if os.path.exists("/work/peers/READY") else None,
                    help="llama-server binary: the peer's single-stream figure, base alone and with --lora")
    args = ap.parse_args()
    from edgellm import LLM, SamplingParams

    d = tempfile.mkdtemp()  # removed at exit (four F32 adapters of a 1.5B base are ~300 MB)
    atexit.register(shutil.rmtree, d, True)
    paths = [os.path.join(d, f"a{i}.gguf") for i in range(4)]
    targets, rank0, alpha_of = CASES[args.case]
    rank = args.rank or rank0
    dtype = np.float16 if args.adapter_type == "f16" else np.float32
    for i, p in enumerate(paths):
        ad_bytes = write_adapter(args.model, p, rank, i, targets, alpha_of(rank), dtype)
    base_bytes = base_step_bytes(args.model)
    bound1 = base_bytes / (base_bytes + ad_bytes)
    bound16 = base_bytes / (base_bytes + 4 * ad_bytes)
    llm = LLM(args.model, n_threads=args.threads, n_ctx=1024, max_seqs=16,
              lora={f"a{i}": p for i, p in enumerate(paths)}, speculative="off")
    sp = lambda lora: SamplingParams(temperature=0, max_tokens=args.tokens, ignore_eos=True, lora=lora)  # noqa: E731
    prompt = "Write a long story about a lighthouse keeper."
    llm.generate(prompt, sp(None))  # warm-up
    one = {"base": [], "lora": []}
    many = {"base": [], "lora": []}
    cpu = {"base": [], "lora": []}  # process CPU seconds per generated token: what time slicing does not move
    for _ in range(args.rounds):
        for kind, lora in (("base", None), ("lora", "a0")):
            t0 = time.process_time()
            c = llm.generate(prompt, sp(lora))
            cpu[kind].append((time.process_time() - t0) / len(c.token_ids))
            one[kind].append(c.timings["predicted_per_second"] if isinstance(c.timings, dict) else
                             c.timings.predicted_per_second)
        if not args.no_streams:
            many["base"].append(run_streams(llm, [None] * 16, args.tokens))
            many["lora"].append(run_streams(llm, [f"a{i % 4}" for i in range(16)], args.tokens))
    med = lambda v: float(np.median(v)) if v else float("nan")  # noqa: E731
    load = os.getloadavg()
    print(f"model {os.path.basename(args.model)} ({base_bytes / 1e6:.0f} MB read per step), case {args.case}: "
          f"rank {rank} on {'/'.join(targets)}, {args.adapter_type.upper()} ({ad_bytes / 1e6:.1f} MB an adapter); "
          f"{args.threads} threads, {args.rounds} alternating rounds (medians), "
          f"EDGELLM_LORA_AHEAD={os.environ.get('EDGELLM_LORA_AHEAD') or '(unset: 64)'}, "
          f"load average {load[0]:.1f} / {load[1]:.1f}")
    print("  per-round ratios, 1 stream:", " ".join(f"{a / b:.2f}" for a, b in zip(one["lora"], one["base"])),
          "| 16 streams:", " ".join(f"{a / b:.2f}" for a, b in zip(many["lora"], many["base"])))
    print(f"1 stream decode: base {med(one['base']):.1f} tok/s, 1 adapter {med(one['lora']):.1f} tok/s "
          f"({med(one['lora']) / med(one['base']):.2f}x, median of the per-round ratios "
          f"{med([a / b for a, b in zip(one['lora'], one['base'])]):.2f}x; byte bound {bound1:.3f}x)")
    print(f"1 stream CPU time (process, prefill included): base {min(cpu['base']) * 1e3:.2f} ms/token, 1 adapter "
          f"{min(cpu['lora']) * 1e3:.2f} ms/token, min of {args.rounds} (base/adapter "
          f"{min(cpu['base']) / min(cpu['lora']):.2f}x; with --threads 1 the load-independent figure), best wall: "
          f"base {max(one['base']):.1f}, adapter {max(one['lora']):.1f} tok/s ({max(one['lora']) / max(one['base']):.2f}x)")
    if many["base"]:
        print(f"16 streams: base {med(many['base']):.1f} tok/s aggregate, 4 adapters x 4 {med(many['lora']):.1f} "
              f"tok/s ({med(many['lora']) / med(many['base']):.2f}x, median of the per-round ratios "
              f"{med([a / b for a, b in zip(many['lora'], many['base'])]):.2f}x; byte bound {bound16:.3f}x, which the ratio may "
              f"exceed as far as the base's 16-column step is compute-bound)")
    llm.close()
    if args.llama_server:
        peer = {"base": [], "lora": []}
        for _ in range(args.rounds):
            for kind, lora in (("base", None), ("lora", paths[0])):
                peer[kind].append(llama_server_round(args.llama_server, args.model, lora, args.threads, args.tokens,
                                                     prompt))
        print(f"llama-server, 1 stream decode: base {med(peer['base']):.1f} tok/s, --lora {med(peer['lora']):.1f} tok/s "
              f"({med(peer['lora']) / med(peer['base']):.2f}x; per round "
              + " ".join(f"{a / b:.2f}" for a, b in zip(peer["lora"], peer["base"])) + ")")
    if args.llama_bench:
        for extra in ([], ["--lora", paths[0]]):
            r = subprocess.run([args.llama_bench, "-m", args.model, "-t", str(args.threads), "-p", "0", "-n",
                                str(args.tokens), "-r", str(args.rounds), "-o", "csv", *extra],
                               capture_output=True, text=True)
            print("llama-bench", " ".join(extra) or "(base)", r.stdout.strip().splitlines()[-1:] or r.stderr[-300:])


if __name__ == "__main__":
    main()
