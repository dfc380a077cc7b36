"""LoRA decode speed beside the base (issue 42): a random rank-R adapter on every projection of
every layer of a GGUF base (written here with gguf-py, F16 as convert_lora_to_gguf.py writes
by default), then, alternating base / adapter runs,
  - one stream: decode tokens/s of the base alone and with one adapter;
  - 16 streams: aggregate decode tokens/s of 16 base requests and of 16 requests over 4 adapters
    (4 each), all submitted at once.
llama.cpp beside it: `--llama-server PATH` (llama-bench has no `--lora`) starts llama-server on the
same base alone and with `--lora` on the first adapter, one server at a time, alternating rounds
(its threads spin: two at once would fight over the cores), and reads the single-stream decode
tok/s of a `/completion` of the same length from its `timings`; default
/work/peers/llama.cpp/build/bin/llama-server when /work/peers/READY exists.
EDGELLM_LORA_AHEAD=0 in the environment turns off the next-op adapter prefetch
(model/lora_block.cpp) for an A/B between processes.

    PYTHONPATH=python python bench/lora_speed.py MODEL.gguf [--rank 16] [--threads 2] [--rounds 3]
"""
import argparse
import json
import os
import socket
import subprocess
import tempfile
import time
import urllib.request

import numpy as np

PEER_SERVER = "/work/peers/llama.cpp/build/bin/llama-server"


def write_adapter(base_path: str, out: str, rank: int, seed: int) -> None:
    import gguf

    r = gguf.GGUFReader(base_path)
    arch = r.fields["general.architecture"].contents()
    w = gguf.GGUFWriter(out, arch)
    w.add_string("general.type", "adapter")
    w.add_string("adapter.type", "lora")
    w.add_float32("adapter.lora.alpha", float(2 * rank))
    rng = np.random.default_rng(seed)
    targets = ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down")
    for t in r.tensors:
        parts = t.name.split(".")
        if len(parts) == 4 and parts[0] == "blk" and parts[2] in targets and parts[3] == "weight":
            n_in, n_out = int(t.shape[0]), int(t.shape[1])
            a = (rng.standard_normal((rank, n_in)) * 0.02).astype(np.float16)
            b = (rng.standard_normal((n_out, rank)) * 0.02).astype(np.float16)
            w.add_tensor(t.name + ".lora_a", a)
            w.add_tensor(t.name + ".lora_b", b)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


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
    ap.add_argument("--rank", type=int, default=16)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--no-streams", action="store_true", help="the single-stream pair only")
    ap.add_argument("--llama-bench", default=None)
    ap.add_argument("--llama-server", default=PEER_SERVER if os.path.exists("/work/peers/READY") else None,
                    help="llama-server binary: the peer's single-stream figure, base alone and with --lora")
    args = ap.parse_args()
    from edgellm import LLM, SamplingParams

    d = tempfile.mkdtemp()
    paths = [os.path.join(d, f"a{i}.gguf") for i in range(4)]
    for i, p in enumerate(paths):
        write_adapter(args.model, p, args.rank, i)
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
    print(f"model {os.path.basename(args.model)}, rank {args.rank} on all projections, {args.threads} threads, "
          f"{args.rounds} alternating rounds (medians), load average {os.getloadavg()[0]:.1f}")
    print("  per-round ratios, 1 stream:", " ".join(f"{a / b:.2f}" for a, b in zip(one["lora"], one["base"])),
          "| 16 streams:", " ".join(f"{a / b:.2f}" for a, b in zip(many["lora"], many["base"])))
    print(f"1 stream decode: base {med(one['base']):.1f} tok/s, 1 adapter {med(one['lora']):.1f} tok/s "
          f"({med(one['lora']) / med(one['base']):.2f}x)")
    print(f"1 stream CPU time: base {med(cpu['base']) * 1e3:.2f} ms/token, 1 adapter {med(cpu['lora']) * 1e3:.2f} "
          f"ms/token (base/adapter {med(cpu['base']) / med(cpu['lora']):.2f}x; with --threads 1 the load-independent "
          f"figure), best wall: base {max(one['base']):.1f}, adapter {max(one['lora']):.1f} tok/s "
          f"({max(one['lora']) / max(one['base']):.2f}x)")
    print(f"16 streams: base {med(many['base']):.1f} tok/s aggregate, 4 adapters x 4 {med(many['lora']):.1f} tok/s "
          f"({med(many['lora']) / med(many['base']):.2f}x)")
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
