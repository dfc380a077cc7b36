// LoRA in the forward pass (model/lora.h): each op's base matmul, which the whole batch shares,
// carries the adapters' low-rank products as its epilogue (LoraScratch, one pool region):
//   pre:  tasks (group, part, up to 16 entries): low = scale · A·x for the group's tokens
//         (kernels' lora_down; x is the op's F32 input, nothing is quantized);
//   post: after each base chunk (part, output rows [r0, r1)), the same thread adds
//         Σ_r low[r] · Bᵀ[r][r0, r1) for every group's tokens (lora_up, vectorised over the rows).
// So the adapter bytes are read once per step per group, split over the threads as the base
// weights are, in the pass that already holds the output rows; a batch may mix the base and
// any number of adapters (Punica / S-LoRA's grouping).
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

#include "common/thread_pool.h"
#include "kernels/kernels.h"
#include "model/forward_pass.h"

namespace edgellm {
namespace {
constexpr int kMaxParts = kMaxMatmulParts;  // Q, K, V: the most matrices one op multiplies

// The op after the one adapting `first` (the forward pass's order: Q/K/V, O, gate/up, down, then
// the next layer's Q/K/V): its layer and targets; n = 0 at the end of the model.
int next_op(int il, LoraTarget first, int n_layers, int* layer, LoraTarget* targets) {
  *layer = il;
  switch (first) {
    case kLoraQ: case kLoraK: case kLoraV:
      targets[0] = kLoraO;
      return 1;
    case kLoraO:
      targets[0] = kLoraGate;
      targets[1] = kLoraUp;
      return 2;
    case kLoraGate: case kLoraUp:
      targets[0] = kLoraDown;
      return 1;
    default:
      if (il + 1 >= n_layers) return 0;
      *layer = il + 1;
      targets[0] = kLoraQ;
      targets[1] = kLoraK;
      targets[2] = kLoraV;
      return 3;
  }
}

// Base rows per share of the next op's adapter prefetch in a decode step (one column): four
// 16-row blocks of base weights between each share and the next, so the adapter's lines are
// requested in step with the base stream instead of in one burst per chunk, whose prefetches
// stalled on the core's outstanding misses (perf, SmolLM2 1 thread: 11 % of the samples on the
// burst's prefetch instructions, 5.6-6.4 % spread by 64 rows). Not finer: each run is a call of
// the base kernel, which prepares its column's block sums again (16 rows: 2-3 % of the samples
// there). Several columns keep one share per chunk: the packed tiles prefetch their next row
// group only within a call, so runs would leave the first group of each cold.
constexpr int64_t kAheadRows = 64;
constexpr int64_t kAheadBurst = int64_t{1} << 30;

// EDGELLM_LORA_AHEAD: 0 turns the prefetch off; a number of rows (a multiple of 16) sets a
// decode step's share; "burst" issues a chunk's share at once as the chunk begins (the previous
// form, still the one for several columns): bench/lora_speed.py's A/B within one build.
int64_t ahead_rows_setting() {
  static const int64_t rows = [] {
    const char* e = std::getenv("EDGELLM_LORA_AHEAD");
    if (!e || !*e) return kAheadRows;
    if (std::strcmp(e, "burst") == 0) return kAheadBurst;
    const long v = std::strtol(e, nullptr, 10);
    return v <= 0 ? int64_t{0} : std::max<int64_t>(16, v / 16 * 16);
  }();
  return rows;
}
}  // namespace

void LoraScratch::ensure(int T, int64_t rank) {
  if (rank <= rank_cap && T <= max_tokens) return;
  rank_cap = static_cast<int>(std::max<int64_t>(rank, rank_cap));
  max_tokens = std::max(T, max_tokens);
  low.resize(kMaxParts * static_cast<size_t>(max_tokens) * rank_cap);
  groups.reserve(max_tokens);
  tokens.reserve(max_tokens);
  scales.reserve(max_tokens);
  order.reserve(max_tokens);
  tasks.reserve(static_cast<size_t>(max_tokens) * kMaxParts);
}

void ForwardPass::prepare_lora() {
  LoraScratch& L = sc_.lora;
  L.groups.clear();
  L.tokens.clear();
  L.scales.clear();
  L.order.clear();
  for (int t = 0; t < n_tokens_; ++t)
    if (const LoraMix* m = batch_.lora_of(t))
      for (size_t u = 0; u < m->uses.size(); ++u) L.order.push_back({m->uses[u].adapter.get(), static_cast<int32_t>(u), t});
  if (L.order.empty()) return;
  if (L.rank_cap <= 0) throw std::logic_error("LoRA scratch not sized: DecoderModel::load_lora sizes it");
  std::stable_sort(L.order.begin(), L.order.end(), [](const LoraScratch::Entry& a, const LoraScratch::Entry& b) {
    if (a.adapter != b.adapter) return std::less<const LoraAdapter*>()(a.adapter, b.adapter);
    return a.use < b.use;
  });
  for (size_t e = 0; e < L.order.size(); ++e) {
    const LoraScratch::Entry& en = L.order[e];
    if (e == 0 || en.adapter != L.order[e - 1].adapter || en.use != L.order[e - 1].use)
      L.groups.push_back({en.adapter, static_cast<int32_t>(e), 0});
    ++L.groups.back().n;
    L.tokens.push_back(en.token);
    L.scales.push_back(batch_.lora_of(en.token)->uses[static_cast<size_t>(en.use)].scale);
  }
  // Grows only for mixes of several adapters (one entry a use).
  const size_t need = kMaxParts * L.tokens.size() * static_cast<size_t>(L.rank_cap);
  if (L.low.size() < need) L.low.resize(need);
}

MatmulEpilogue* ForwardPass::lora(int il, const LoraTarget* targets, int n, const float* src, int64_t width,
                                  float* const* y, const int64_t* ldy) {
  LoraScratch& L = sc_.lora;
  if (L.groups.empty()) return nullptr;
  L.tasks.clear();
  for (int32_t g = 0; g < static_cast<int32_t>(L.groups.size()); ++g)
    for (int j = 0; j < n; ++j) {
      if (!L.groups[g].adapter->pair(il, targets[j])) continue;
      for (int32_t c = 0; c < L.groups[g].n; c += LoraScratch::kTokenChunk)
        L.tasks.push_back({g, j, c, std::min(L.groups[g].n, c + LoraScratch::kTokenChunk)});
    }
  L.next.clear();
  int nl = 0;
  LoraTarget nt[kMaxParts];
  const int nn = ahead_rows_setting() > 0 ? next_op(il, targets[0], c_.n_layer, &nl, nt) : 0;
  for (const LoraScratch::Group& g : L.groups) {
    const uint8_t* lo = nullptr;
    const uint8_t* hi = nullptr;
    if (nl >= g.adapter->n_layers()) continue;
    for (int j = 0; j < nn; ++j)
      if (const LoraPair& p = g.adapter->pair(nl, nt[j])) {
        lo = lo ? std::min(lo, p.span_begin) : p.span_begin;
        hi = std::max(hi, p.span_end);
      }
    if (lo) L.next.push_back({lo, hi});
  }
  // An op no adapter of the batch touches still carries the prefetch of the next one's pairs
  // (an adapter on Q and V alone, PEFT's default: the down projection before each layer's QKV
  // fetches them, which otherwise arrive as cold short streams).
  if (L.tasks.empty() && L.next.empty()) return nullptr;
  L.layer = il;
  L.n_parts = n;
  L.targets = targets;
  L.src = src;
  L.width = width;
  L.y = y;
  L.ldy = ldy;
  return &L;
}

void LoraScratch::pre(int64_t i, int) {
  const Task& task = tasks[static_cast<size_t>(i)];
  const Group& g = groups[static_cast<size_t>(task.group)];
  const LoraPair& p = g.adapter->pair(layer, targets[task.part]);
  float scale[kTokenChunk];
  for (int32_t e = task.lo; e < task.hi; ++e) scale[e - task.lo] = scales[static_cast<size_t>(g.first + e)] * p.scale;
  kernels::LoraDownArgs a;
  a.type = p.type;
  a.a = p.a;
  a.rank = p.rank();
  a.K = p.n_in;
  a.x = src;
  a.ldx = width;
  a.rows = tokens.data() + g.first + task.lo;
  a.ncols = task.hi - task.lo;
  a.scale = scale;
  a.low = low_of(task.part, g.first) + static_cast<size_t>(task.lo) * p.rank();
  kernels::active().lora_down(a);
}

void LoraScratch::post(const MatmulChunk& chunk, int) {
  const kernels::LoraUpFn up = kernels::active().lora_up;
  for (const Group& g : groups) {
    const LoraPair& p = g.adapter->pair(layer, targets[chunk.part]);
    if (!p) continue;
    kernels::LoraUpArgs a;
    a.type = p.type;
    a.bt = p.bt;
    a.rank = p.rank();
    a.o0 = chunk.r0;
    a.o1 = chunk.r1;
    a.low = low_of(chunk.part, g.first);
    a.ncols = g.n;
    a.y = y[chunk.part];
    a.rows = tokens.data() + g.first;
    a.ldy = ldy[chunk.part];
    up(a);
  }
}

int64_t LoraScratch::ahead_rows(int64_t ncols) const {
  if (next.empty() || ahead_rows_setting() == 0) return 0;
  return ncols == 1 ? ahead_rows_setting() : kAheadBurst;
}

void LoraScratch::ahead(int64_t k0, int64_t k1, int64_t n) {
  for (const auto& [lo, hi] : next) {
    const size_t len = static_cast<size_t>(hi - lo);
    const size_t b = len * static_cast<size_t>(k0) / static_cast<size_t>(n) / 64 * 64;
    const size_t e = k1 >= n ? len : len * static_cast<size_t>(k1) / static_cast<size_t>(n) / 64 * 64;
    for (size_t o = b; o < e; o += 64) __builtin_prefetch(lo + o, 0, 2);
  }
}

}  // namespace edgellm
