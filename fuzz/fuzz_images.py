"""Fuzz harness for vision's image decoding and preprocessing (edgellm.vision.open_image +
preprocess: what every API's image goes through before the encoder): any input must give pixels
or an ImageError, within TIME_LIMIT_S, and the memory one input costs must stay under
MEMORY_BOUND (a header claiming a huge image is refused from its size, before any pixel is
allocated; the pixel cap here, MAX_PIXELS, bounds what a real image may take). Measured as the
process's peak RSS over the call (fuzz_convert.RssMeter: VmHWM reset before each input).

Runs under atheris when it is installed, else a seeded mutation loop (byte flips, interesting
numbers at the size fields, truncation, splices between formats). Seeds: tests/bad_images.py
(PNG, JPEG, WebP, GIF, BMP, TIFF, headers rewritten to bombs). Usage:

    python fuzz/fuzz_images.py [--seconds S] [--runs N] [--seed K] [--engine atheris|mutate]
                               [--work DIR] [--artifacts DIR] [FILE...]

FILEs (or folders) are replayed only (fuzz/regressions/images/). scripts/fuzz.sh runs it as
target `images`."""
from __future__ import annotations

import os
import random
import signal
import struct
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "tests"))
from fuzz_convert import TIME_LIMIT_S, RssMeter, _alarm, arguments, replay, run_one  # noqa: E402

MAX_PIXELS = 1 << 22           # 4 Mi pixels: the decoded image, its RGB copy and resize
MEMORY_BOUND = 256 << 20


class Harness:
    def __init__(self):
        from edgellm import vision

        self.vision = vision
        self.meter = RssMeter()
        self.executions = 0
        self.outcomes = {"pixels": 0, "ImageError": 0}
        self.max_peak = 0

    def run(self, data: bytes) -> None:
        self.executions += 1
        self.meter.start()
        try:
            px = self.vision.preprocess(self.vision.open_image(data, MAX_PIXELS), 32, [0.5] * 3, [0.5] * 3)
            if px.shape != (3, 32, 32):
                raise AssertionError(f"pixels of shape {px.shape}")
            self.outcomes["pixels"] += 1
        except self.vision.ImageError:
            self.outcomes["ImageError"] += 1
        peak = self.meter.stop()
        self.max_peak = max(self.max_peak, peak)
        if peak > MEMORY_BOUND:
            raise AssertionError(f"an input of {len(data)} bytes took {peak} bytes, over {MEMORY_BOUND}")


_SIZES = (0, 1, 255, 256, 4097, 65535, 1 << 16, 1 << 20, 1 << 24, (1 << 31) - 1, (1 << 32) - 1)


def mutate(rng: random.Random, data: bytes, pool: list) -> bytes:
    b = bytearray(data)
    for _ in range(rng.choice((1, 1, 2, 3, 6))):
        n = len(b)
        op = rng.randrange(6)
        if op == 0 and n:
            b[rng.randrange(n)] ^= 1 << rng.randrange(8)
        elif op == 1 and n >= 4:  # a size-like number where headers keep theirs (early bytes most)
            i = rng.randrange(min(n - 3, 64 if rng.random() < 0.7 else n - 3))
            b[i:i + 4] = struct.pack(rng.choice((">I", "<I")), rng.choice(_SIZES) & 0xFFFFFFFF)
        elif op == 2 and n:
            del b[rng.randrange(n):]
        elif op == 3 and pool:
            other = rng.choice(pool)
            i = rng.randrange(min(n, len(other)) + 1)
            b = b[:i] + other[i:]
        elif op == 4 and n > 1:
            i = rng.randrange(n)
            del b[i:i + rng.randrange(1, 64)]
        elif op == 5 and n:
            i = rng.randrange(n)
            b[i:i] = b[i:i + rng.randrange(1, 32)] * rng.randrange(1, 16)
    return bytes(b[:1 << 20])


def loop(h: Harness, seeds: list, seconds: float, runs: int, seed: int, artifacts: str) -> int:
    rng = random.Random(seed)
    pool = list(seeds)
    start = last = time.monotonic()
    signal.signal(signal.SIGALRM, _alarm)
    while not (runs and h.executions >= runs) and not (seconds and time.monotonic() - start >= seconds):
        data = seeds[h.executions] if h.executions < len(seeds) else mutate(rng, rng.choice(pool), pool)
        rc = run_one(h, data, artifacts)
        if rc:
            return rc
        if rng.random() < 0.01 and len(pool) < 4096:
            pool.append(data)
        if time.monotonic() - last >= 30:
            last = time.monotonic()
            print(f"#{h.executions} {h.executions / (last - start):.0f} exec/s", flush=True)
    return 0


def main() -> int:
    args = arguments(__doc__, "images")
    from bad_images import seeds

    h = Harness()
    if args.engine == "replay":
        return replay(h, args.files, args.artifacts)
    engine = args.engine
    t0 = time.monotonic()
    if engine == "atheris":
        import atheris
        work = args.work or os.path.join("build", "fuzz", "corpus", "images")
        os.makedirs(work, exist_ok=True)
        for i, s in enumerate(seeds()):
            with open(os.path.join(work, f"seed-{i:03d}"), "wb") as f:
                f.write(s)
        os.makedirs(args.artifacts, exist_ok=True)
        lf = [sys.argv[0], work, f"-timeout={TIME_LIMIT_S}", "-rss_limit_mb=2048", "-max_len=262144",
              "-print_final_stats=1", f"-artifact_prefix={args.artifacts.rstrip('/')}/", f"-seed={args.seed}"]
        lf += [f"-runs={args.runs}"] if args.runs else []
        lf += [f"-max_total_time={int(args.seconds)}"] if args.seconds else []
        atheris.Setup(lf, h.run)
        atheris.Fuzz()
        return 0
    rc = loop(h, seeds(), args.seconds, args.runs, args.seed, args.artifacts)
    dt = time.monotonic() - t0
    print(f"stat::number_of_executed_units: {h.executions}", flush=True)
    print(f"#{h.executions} DONE in {dt:.1f} s; outcomes {h.outcomes}; the most one input took "
          f"{h.max_peak >> 20} MiB", flush=True)
    return rc


if __name__ == "__main__":
    sys.exit(main())
