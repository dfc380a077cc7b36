#!/usr/bin/env python3
"""Cycles per 32 weights of the single-column (decode) matmul by static throughput analysis: the
exact instruction stream of one 16-row, K = 4096 call (single-stepped by bench/decode_instructions.cpp,
so loops, prefetches and per-unit work appear as often as they run) is mapped onto the binary's
disassembly and given to llvm-mca, which schedules it on a CPU model with unlimited memory
bandwidth and every load an L1 hit. That is the compute bound: the bytes per cycle one core can
consume at best, to set beside the bytes per cycle its share of the memory bandwidth delivers.

    g++ -O2 -std=c++17 -no-pie -Icpp/src bench/decode_instructions.cpp build/dev/libedgellm_core.a -lpthread -o /tmp/di
    python bench/decode_mca.py /tmp/di --mcpu icelake-server avx512:Q4_K avx2:Q6_K ...

(Needs llvm-mca: apt-get install llvm. LLVM 14 has no Zen 4 model; icelake-server stands for the
AVX-512 VNNI Xeons, znver3 / skylake for AVX2.)
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile

FORMAT_BYTES = {"Q4_0": 18, "Q4_1": 20, "Q5_0": 22, "Q8_0": 34, "Q4_K": 18, "Q5_K": 22, "Q6_K": 26.25,
                "IQ4_XS": 17, "MXFP4": 17, "F16": 64}


def disassembly(binary):
    out = subprocess.run(["objdump", "-d", "--no-show-raw-insn", binary], check=True, capture_output=True,
                         text=True).stdout
    insns = {}
    in_tile = False
    for line in out.splitlines():
        h = re.match(r"[0-9a-f]+ <(.*)>:$", line)
        if h:
            # Only the tiles (the per-block work); the driver's per-call activation side-table is
            # shared by every row of a real matrix and not part of the per-weight work.
            in_tile = "tile" in h.group(1).lower()
            continue
        m = re.match(r"\s+([0-9a-f]+):\s+(.*)$", line)
        if not m:
            continue
        if not in_tile:
            continue
        text = m.group(2).split("#")[0].strip()
        insns[int(m.group(1), 16)] = text
    return insns


def mca_text(trace, insns):
    lines = ["target:"]
    for addr in trace:
        t = insns.get(addr)
        if t is None or not t or "nop" in t:
            continue
        op = t.split()[0]
        if op.startswith("j") or op.startswith("call") or op in ("ret", "leave", "endbr64"):
            # Control flow as a taken, predicted branch to a fixed label (llvm-mca needs a target).
            t = "jmp target" if op.startswith("call") or op == "ret" else (op + " target" if op.startswith("j") else t)
        t = re.sub(r"\s+<[^>]*>", "", t)
        lines.append(t)
    return "\n".join(lines) + "\n"


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("binary", help="decode_instructions built with -no-pie")
    p.add_argument("cases", nargs="+", help="TABLE:TYPE, e.g. avx512:Q4_K")
    p.add_argument("--mcpu", default="icelake-server")
    a = p.parse_args()
    insns = disassembly(a.binary)
    print(f"{'case':16} {'mcpu':15} {'instr/32w':>9} {'cycles/32w':>10} {'bytes/cycle':>11}")
    for case in a.cases:
        table, wtype = case.split(":")
        with tempfile.TemporaryDirectory() as d:
            tf = os.path.join(d, "trace")
            subprocess.run([a.binary, f"trace={tf}", table, wtype], check=True, capture_output=True)
            trace = [int(x, 16) for x in open(tf).read().split()]
            src = mca_text(trace, insns)
            sf = os.path.join(d, "s.s")
            open(sf, "w").write(src)
            r = subprocess.run(["llvm-mca", f"-mcpu={a.mcpu}", "-iterations=1", sf], capture_output=True, text=True)
            if r.returncode != 0:
                print(case, "llvm-mca failed:", r.stderr.strip().splitlines()[:3], file=sys.stderr)
                continue
            cycles = int(re.search(r"Total Cycles:\s+(\d+)", r.stdout).group(1))
            n_insn = int(re.search(r"Instructions:\s+(\d+)", r.stdout).group(1))
        w32 = 4096 / 32 * 16
        bpc = FORMAT_BYTES[wtype] / (cycles / w32)
        print(f"{case:16} {a.mcpu:15} {n_insn / w32:9.2f} {cycles / w32:10.2f} {bpc:11.2f}")


if __name__ == "__main__":
    main()
