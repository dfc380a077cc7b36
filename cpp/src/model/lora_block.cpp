// LoRA in the forward pass (model/lora.h): after a projection's base matmul, which the whole
// batch shares, each token's adapters add scale · B·(A·x) to its output row. Tokens are grouped
// by adapter (LoraScratch), so each adapter's A and B are read once per step for all the tokens
// that use it, whatever else the batch holds (Punica / S-LoRA's batched LoRA). Two stages per
// wave, each one region on the pool, both with the kernel table's matmuls (A and B are F32 /
// F16 / BF16 or any type with a matmul kernel, in the GGUF layout):
//   A: tasks (group, part, 16 tokens): gather the tokens' inputs in A's input format, A·x
//      (rank values a token), × the token's scale, stored in B's input format;
//   B: tasks (group, part, 64 output rows): B·(that) for every token of the group, added to
//      the tokens' output rows.
#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "common/thread_pool.h"
#include "kernels/kernels.h"
#include "model/forward_pass.h"
#include "model/weight_packing.h"
#include "quant/quant.h"

namespace edgellm {
namespace {

constexpr int kMaxParts = 3;  // Q, K, V: the most matrices one op multiplies

size_t align64(size_t n) { return (n + 63) / 64 * 64; }

int64_t widest_input(const ModelConfig& c) { return std::max({c.n_embd, c.n_ff, c.n_embd_attn()}); }

// Per-thread bytes: the A stage's gathered inputs (F32 at most) and A outputs, or the B stage's
// outputs for up to max_tokens tokens.
size_t per_thread_bytes(const ModelConfig& c, int max_tokens, int64_t rank) {
  const size_t T = LoraScratch::kTokenChunk;
  const size_t a = align64(T * widest_input(c) * sizeof(float)) + align64(T * rank * sizeof(float));
  const size_t b = align64(static_cast<size_t>(max_tokens) * LoraScratch::kRowChunk * sizeof(float));
  // one stage: a's, then the chunk's A outputs in B's format and its B outputs
  const size_t one = a + align64(T * rank * sizeof(float)) + align64(T * LoraScratch::kOneStageRows * sizeof(float));
  return std::max({a, b, one});
}

// Below this many multiply-adds (Σ tokens · rank · (n_in + n_out) over an op's pairs) the op's
// LoRA work runs on the calling thread: a pool region costs more than it saves (one decode token).
constexpr int64_t kInlineMacs = 1 << 18;

}  // namespace

size_t LoraScratch::bytes(const ModelConfig& c, int max_tokens, int n_threads, int64_t rank) {
  return align64(kMaxParts * static_cast<size_t>(max_tokens) * rank * sizeof(float)) +
         per_thread_bytes(c, max_tokens, rank) * static_cast<size_t>(n_threads);
}

void LoraScratch::ensure(const ModelConfig& c, int T, int n_threads, int64_t rank) {
  if (rank <= rank_cap && T <= max_tokens) return;
  rank_cap = static_cast<int>(std::max<int64_t>(rank, rank_cap));
  max_tokens = std::max(T, max_tokens);
  low.allocate(kMaxParts * static_cast<size_t>(max_tokens) * low_row_bytes());
  thread_bytes = per_thread_bytes(c, max_tokens, rank_cap);
  thread.allocate(thread_bytes * static_cast<size_t>(n_threads));
  groups.reserve(max_tokens);
  tokens.reserve(max_tokens);
  scales.reserve(max_tokens);
  order.reserve(max_tokens);
}

void ForwardPass::prepare_lora() {
  LoraScratch& L = sc_.lora;
  L.groups.clear();
  L.waves.clear();
  L.tokens.clear();
  L.scales.clear();
  size_t n_waves = 0;
  for (int t = 0; t < n_tokens_; ++t)
    if (const LoraMix* m = batch_.lora_of(t)) n_waves = std::max(n_waves, m->uses.size());
  if (n_waves == 0) return;
  if (L.max_tokens < n_tokens_ || L.rank_cap <= 0)
    throw std::logic_error("LoRA scratch not sized: DecoderModel::load_lora sizes it");
  for (size_t w = 0; w < n_waves; ++w) {
    L.order.clear();
    for (int t = 0; t < n_tokens_; ++t) {
      const LoraMix* m = batch_.lora_of(t);
      if (m && w < m->uses.size()) L.order.emplace_back(m->uses[w].adapter.get(), t);
    }
    std::stable_sort(L.order.begin(), L.order.end(),
                     [](const auto& a, const auto& b) { return std::less<const LoraAdapter*>()(a.first, b.first); });
    LoraScratch::Wave wave{static_cast<int32_t>(L.groups.size()), 0, static_cast<int32_t>(L.tokens.size())};
    for (const auto& [adapter, t] : L.order) {
      if (wave.n_groups == 0 || L.groups.back().adapter != adapter) {
        L.groups.push_back({adapter, static_cast<int32_t>(L.tokens.size()), 0});
        ++wave.n_groups;
      }
      ++L.groups.back().n;
      L.tokens.push_back(t);
      L.scales.push_back(batch_.lora_of(t)->uses[w].scale);
    }
    L.waves.push_back(wave);
  }
}

void ForwardPass::apply_lora(int il, const LoraTarget* targets, int n, const float* src, int64_t width,
                             float* const* y, const int64_t* ldy) {
  LoraScratch& L = sc_.lora;
  if (L.waves.empty()) return;
  const kernels::KernelTable& kt = kernels::active();
  const size_t low_row = L.low_row_bytes();
  const size_t low_part = static_cast<size_t>(L.max_tokens) * low_row;
  // Small waves (decode steps) run in one stage: each task computes A·x for its group's tokens
  // itself and then its share of B's rows, so the op costs one pool region (or none, inline).
  const auto one_stage = [&](const LoraScratch::Wave& wave, const LoraScratch::Task& task, int thread) {
    const LoraScratch::Group& g = L.groups[task.group];
    const LoraPair& p = g.adapter->pair(il, targets[task.part]);
    const int64_t rank = p.rank();
    uint8_t* buf = L.thread.data() + static_cast<size_t>(thread) * L.thread_bytes;
    const DType in_a = matmul_input_type(p.a), in_b = matmul_input_type(p.b);
    const size_t xs = row_bytes(in_a, width), ls = row_bytes(in_b, rank);
    float* a_out = reinterpret_cast<float*>(buf + align64(LoraScratch::kTokenChunk * xs));
    uint8_t* low = reinterpret_cast<uint8_t*>(a_out) + align64(LoraScratch::kTokenChunk * rank * sizeof(float));
    float* delta = reinterpret_cast<float*>(low + align64(LoraScratch::kTokenChunk * rank * sizeof(float)));
    float* out = y[task.part];
    for (int32_t c0 = 0; c0 < g.n; c0 += LoraScratch::kTokenChunk) {
      const int64_t nc = std::min<int64_t>(LoraScratch::kTokenChunk, g.n - c0);
      for (int64_t c = 0; c < nc; ++c)
        kt.quantize[static_cast<int>(in_a)](src + static_cast<int64_t>(L.tokens[g.first + c0 + c]) * width,
                                            buf + c * xs, width);
      matmul_rows(p.a, 0, rank, buf, xs, nc, a_out, rank);
      for (int64_t c = 0; c < nc; ++c) {
        const float sc = L.scales[static_cast<size_t>(g.first + c0 + c)] * p.scale;
        float* row = a_out + c * rank;
        for (int64_t r = 0; r < rank; ++r) row[r] *= sc;
        kt.quantize[static_cast<int>(in_b)](row, low + c * ls, rank);
      }
      for (int64_t r0 = task.lo; r0 < task.hi; r0 += LoraScratch::kOneStageRows) {
        const int64_t rows = std::min<int64_t>(LoraScratch::kOneStageRows, task.hi - r0);
        matmul_rows(row_view(p.b, r0, rows), 0, rows, low, ls, nc, delta, rows);
        for (int64_t c = 0; c < nc; ++c) {
          const int32_t tok = L.tokens[static_cast<size_t>(g.first + c0 + c)];
          kt.add_f32(delta + c * rows, out + tok * ldy[task.part] + r0, rows);
        }
      }
    }
    (void)wave;
  };
  for (const LoraScratch::Wave& wave : L.waves) {
    const int32_t n_entries = (&wave == &L.waves.back() ? static_cast<int32_t>(L.tokens.size()) : (&wave)[1].first_entry) -
                              wave.first_entry;
    if (n_entries <= LoraScratch::kOneStageTokens) {
      int64_t macs = 0;
      L.tasks.clear();
      const int threads = pool_.size();
      for (int32_t g = wave.first_group; g < wave.first_group + wave.n_groups; ++g)
        for (int j = 0; j < n; ++j) {
          const LoraPair& p = L.groups[g].adapter->pair(il, targets[j]);
          if (!p) continue;
          macs += static_cast<int64_t>(L.groups[g].n) * p.rank() * (p.a.n_in + p.b.n_out);
          // rows in about one share per thread, whole 16-row groups
          const int64_t share = std::max<int64_t>(16, (p.b.n_out + threads - 1) / threads + 15) / 16 * 16;
          for (int64_t r = 0; r < p.b.n_out; r += share)
            L.tasks.push_back({g, j, static_cast<int32_t>(r), static_cast<int32_t>(std::min(p.b.n_out, r + share))});
        }
      if (macs < kInlineMacs) {
        for (const LoraScratch::Task& t : L.tasks) one_stage(wave, t, 0);  // no region runs: thread 0's slice is free
      } else {
        pool_.run(static_cast<int64_t>(L.tasks.size()), [&](int64_t i, int thread) { one_stage(wave, L.tasks[i], thread); });
      }
      continue;
    }
    // A stage.
    L.tasks.clear();
    for (int32_t g = wave.first_group; g < wave.first_group + wave.n_groups; ++g)
      for (int j = 0; j < n; ++j) {
        if (!L.groups[g].adapter->pair(il, targets[j])) continue;
        for (int32_t c = 0; c < L.groups[g].n; c += LoraScratch::kTokenChunk)
          L.tasks.push_back({g, j, c, std::min(L.groups[g].n, c + LoraScratch::kTokenChunk)});
      }
    if (L.tasks.empty()) continue;
    pool_.run(static_cast<int64_t>(L.tasks.size()), [&](int64_t i, int thread) {
      const LoraScratch::Task& task = L.tasks[i];
      const LoraScratch::Group& g = L.groups[task.group];
      const LoraPair& p = g.adapter->pair(il, targets[task.part]);
      const int64_t rank = p.rank();
      uint8_t* buf = L.thread.data() + static_cast<size_t>(thread) * L.thread_bytes;
      const DType in_a = matmul_input_type(p.a), in_b = matmul_input_type(p.b);
      const size_t xs = row_bytes(in_a, width);
      const kernels::QuantizeFn qa = kt.quantize[static_cast<int>(in_a)];
      const kernels::QuantizeFn qb = kt.quantize[static_cast<int>(in_b)];
      const int64_t nc = task.hi - task.lo;
      for (int64_t c = 0; c < nc; ++c) {
        const int32_t tok = L.tokens[static_cast<size_t>(g.first + task.lo + c)];
        qa(src + static_cast<int64_t>(tok) * width, buf + c * xs, width);
      }
      float* a_out = reinterpret_cast<float*>(buf + align64(LoraScratch::kTokenChunk * xs));
      matmul_rows(p.a, 0, rank, buf, xs, nc, a_out, rank);
      for (int64_t c = 0; c < nc; ++c) {
        const int32_t e = g.first + task.lo + static_cast<int32_t>(c);
        const float s = L.scales[static_cast<size_t>(e)] * p.scale;
        float* row = a_out + c * rank;
        for (int64_t r = 0; r < rank; ++r) row[r] *= s;
        qb(row, L.low.data() + task.part * low_part + static_cast<size_t>(e - wave.first_entry) * low_row, rank);
      }
    });
    // B stage.
    L.tasks.clear();
    for (int32_t g = wave.first_group; g < wave.first_group + wave.n_groups; ++g)
      for (int j = 0; j < n; ++j) {
        const LoraPair& p = L.groups[g].adapter->pair(il, targets[j]);
        if (!p) continue;
        for (int64_t r = 0; r < p.b.n_out; r += LoraScratch::kRowChunk)
          L.tasks.push_back({g, j, static_cast<int32_t>(r),
                             static_cast<int32_t>(std::min<int64_t>(p.b.n_out, r + LoraScratch::kRowChunk))});
      }
    pool_.run(static_cast<int64_t>(L.tasks.size()), [&](int64_t i, int thread) {
      const LoraScratch::Task& task = L.tasks[i];
      const LoraScratch::Group& g = L.groups[task.group];
      const LoraPair& p = g.adapter->pair(il, targets[task.part]);
      const int64_t rows = task.hi - task.lo;
      float* delta = reinterpret_cast<float*>(L.thread.data() + static_cast<size_t>(thread) * L.thread_bytes);
      const uint8_t* low = L.low.data() + task.part * low_part + static_cast<size_t>(g.first - wave.first_entry) * low_row;
      matmul_rows(row_view(p.b, task.lo, rows), 0, rows, low, low_row, g.n, delta, rows);
      float* out = y[task.part];
      for (int32_t c = 0; c < g.n; ++c) {
        const int32_t tok = L.tokens[static_cast<size_t>(g.first + c)];
        kt.add_f32(delta + static_cast<int64_t>(c) * rows, out + tok * ldy[task.part] + task.lo, rows);
      }
    });
  }
}

}  // namespace edgellm
