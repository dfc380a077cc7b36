// bench/batched.py's edgellm side without Python, for profiles and cycle counts of many-stream
// decode (not a test): N streams × (P random prompt tokens + G greedy tokens, ignore_eos) through
// one Engine driven step by step on this thread, R repetitions after one warm-up. Prints the
// tokens of the measured repetitions, their wall time, and the per-step wall time split into
// prefill-carrying and decode-only steps. Under load, count cycles instead:
//   perf stat -e cycles:u,instructions:u /tmp/bs MODEL      → tokens per Gcycle
//   perf record -e cycles:u -g /tmp/bs MODEL                → the split of a step
//
// Build (after scripts/dev-build.sh build/<dir>):
//   g++ -O2 -std=c++17 -Icpp/src bench/batched_steps.cpp build/<dir>/libedgellm_core.a -lpthread -o /tmp/bs
//   /tmp/bs MODEL.gguf [npl=16] [npp=128] [ntg=128] [reps=2] [threads=2]
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine/model_backend.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

using namespace edgellm;
using Clock = std::chrono::steady_clock;

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s MODEL.gguf [npl=16] [npp=128] [ntg=128] [reps=2] [threads=2]\n", argv[0]);
    return 2;
  }
  int npl = 16, npp = 128, ntg = 128, reps = 2, threads = 2;
  for (int i = 2; i < argc; ++i) {
    std::sscanf(argv[i], "npl=%d", &npl);
    std::sscanf(argv[i], "npp=%d", &npp);
    std::sscanf(argv[i], "ntg=%d", &ntg);
    std::sscanf(argv[i], "reps=%d", &reps);
    std::sscanf(argv[i], "threads=%d", &threads);
  }
  LoadOptions o;
  o.n_threads = threads;
  o.max_batch_tokens = 512;
  o.n_ctx = 8192;
  std::shared_ptr<Model> model(Model::load(argv[1], o));
  std::shared_ptr<Tokenizer> tok(Tokenizer::from_gguf(argv[1]));
  EngineConfig c;
  c.n_ctx = 8192;
  c.max_seqs = npl;
  c.max_batch_tokens = 512;
  c.start_thread = false;
  Engine e(std::make_shared<ModelBackend>(model), std::make_shared<TokenizerVocab>(tok), c);
  std::mt19937 rng(1234);
  SamplingParams sp;
  sp.temperature = 0.0f;
  sp.ignore_eos = true;
  double prefill_s = 0, decode_s = 0;
  std::vector<double> decode_times;
  int64_t prefill_steps = 0, decode_steps = 0;
  auto run = [&](int p, int g, bool measure) {
    sp.max_tokens = g;
    std::vector<std::shared_ptr<OutputChannel>> chans;
    for (int s = 0; s < npl; ++s) {
      std::vector<int32_t> ids(p);
      for (auto& t : ids) t = static_cast<int32_t>(rng() % static_cast<uint32_t>(e.n_vocab()));
      chans.push_back(std::make_shared<OutputChannel>());
      chans.back()->collect_whole();
      e.submit(ids, sp, chans.back());
    }
    const auto t0 = Clock::now();
    for (;;) {
      const int64_t before = e.stats().tokens_processed;
      const auto s0 = Clock::now();
      if (!e.step()) break;
      const double dt = std::chrono::duration<double>(Clock::now() - s0).count();
      if (!measure) continue;
      if (e.stats().tokens_processed - before > npl) {
        prefill_s += dt, ++prefill_steps;
      } else {
        decode_s += dt, ++decode_steps;
        decode_times.push_back(dt);
      }
    }
    const double dt = std::chrono::duration<double>(Clock::now() - t0).count();
    for (auto& ch : chans) {
      OutputEvent ev;
      while (ch->try_pop(ev)) {
      }
    }
    return dt;
  };
  auto cpu_seconds = [] {
    rusage u{};
    getrusage(RUSAGE_SELF, &u);
    return u.ru_utime.tv_sec + 1e-6 * u.ru_utime.tv_usec + u.ru_stime.tv_sec + 1e-6 * u.ru_stime.tv_usec;
  };
  run(32, 8, false);
  double total = 0;
  const double cpu0 = cpu_seconds();
  for (int r = 0; r < reps; ++r) total += run(npp, ntg, true);
  const double cpu = cpu_seconds() - cpu0;
  const double tokens = static_cast<double>(reps) * npl * (npp + ntg);
  std::printf("%d streams x (%d + %d), %d threads, %d reps: %.0f tokens in %.3f s = %.1f t/s\n", npl, npp, ntg, threads,
              reps, tokens, total, tokens / total);
  std::printf("prefill steps %lld: %.2f ms each; decode steps %lld: %.2f ms each (%.1f t/s decode)\n",
              static_cast<long long>(prefill_steps), 1e3 * prefill_s / std::max<int64_t>(1, prefill_steps),
              static_cast<long long>(decode_steps), 1e3 * decode_s / std::max<int64_t>(1, decode_steps),
              decode_steps ? npl * decode_steps / decode_s : 0.0);
  std::sort(decode_times.begin(), decode_times.end());
  if (!decode_times.empty())
    std::printf("decode step min %.2f ms, 10th percentile %.2f ms, median %.2f ms\n", 1e3 * decode_times[0],
                1e3 * decode_times[decode_times.size() / 10], 1e3 * decode_times[decode_times.size() / 2]);
  std::printf("CPU time (user + sys, all threads) %.3f s: %.1f tokens per CPU second\n", cpu, tokens / cpu);
  return 0;
}
