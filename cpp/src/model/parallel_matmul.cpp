#include "model/parallel_matmul.h"

#include <algorithm>
#include <atomic>
#include <thread>
#include <cstring>
#include <stdexcept>

#include "common/thread_pool.h"
#include "kernels/kernels.h"
#include "kernels/packed.h"
#include "model/weight_packing.h"
#include "quant/quant.h"

namespace edgellm {
namespace {
// Chunks per thread: enough that dynamic hand-out evens out uneven progress, few enough that a
// chunk keeps a useful number of rows for SIMD row blocking.
constexpr int kChunksPerThread = 4;
// Chunk boundaries fall on multiples of this many rows (kernels block rows by 4, 8 or — packed
// weights — 16).
constexpr int64_t kRowGranule = kernels::kPackRows;
// Float weights: the outer-product GEMM's widest panel (AVX-512: 32 rows, kernels/matmul_float.inc.h);
// a chunk of 48 rows would leave a 16-row panel that runs at half the FMAs per load.
constexpr int64_t kFloatRowGranule = 32;
int64_t row_granule(DType t) {
  return t == DType::F32 || t == DType::F16 || t == DType::BF16 ? kFloatRowGranule : kRowGranule;
}
static_assert(kRowGranule == 16, "MatmulEpilogue::ahead counts 16-row blocks");
}  // namespace

MatmulPlan plan_matmul(const std::vector<const Matrix*>& parts, int n_threads, ColumnOrder order) {
  MatmulPlan plan;
  plan.order = order;
  double total = 0;
  for (const Matrix* m : parts) total += static_cast<double>(m->row_bytes) * m->n_out;
  const double target = total / std::max(1, n_threads * kChunksPerThread);
  for (size_t p = 0; p < parts.size(); ++p) {
    const Matrix& m = *parts[p];
    int64_t rows = target > 0 ? static_cast<int64_t>(target / m.row_bytes) : m.n_out;
    const int64_t g = row_granule(m.type);
    rows = std::max<int64_t>(g, (rows + g - 1) / g * g);
    for (int64_t r0 = 0; r0 < m.n_out; r0 += rows)
      plan.chunks.push_back({static_cast<int32_t>(p), static_cast<int32_t>(r0),
                             static_cast<int32_t>(std::min(m.n_out, r0 + rows))});
  }
  return plan;
}

void matmul_rows(const Matrix& w, int64_t r0, int64_t r1, const void* x, size_t x_stride, int64_t ncols, float* y,
                 int64_t ldy, ColumnOrder order) {
  const kernels::KernelTable& k = kernels::active();
  const bool packed = use_packed(w);
  kernels::MatmulArgs a;
  a.w = packed ? w.packed : w.data;
  a.K = w.n_in;
  a.r0 = r0;
  a.r1 = r1;
  a.x = x;
  a.x_stride = x_stride;
  a.ncols = ncols;
  a.y = y;
  a.ldy = ldy;
  const int t = static_cast<int>(w.type);
  if (packed)
    k.packed_matmul[t](a);
  else if (order == ColumnOrder::Any && k.matmul_wide[t])
    k.matmul_wide[t](a);
  else
    k.matmul[t](a);
}

void run_matmul(ThreadPool& pool, const MatmulPlan& plan, const MatmulOperand* parts, int64_t ncols,
                MatmulEpilogue* epilogue) {
  const auto chunk = [&](const MatmulChunk& c) {
    const MatmulOperand& op = parts[c.part];
    matmul_rows(*op.w, c.r0, c.r1, op.x, op.x_stride, ncols, op.y, op.ldy, plan.order);
  };
  if (!epilogue) {
    pool.run(static_cast<int64_t>(plan.chunks.size()), [&](int64_t i, int) { chunk(plan.chunks[i]); });
    return;
  }
  const int64_t n_pre = epilogue->n_pre();
  // The ahead work's 16-row blocks: each part's first, and the op's total.
  const int64_t step = epilogue->ahead_rows(ncols);
  int64_t first_block[kMaxMatmulParts + 1] = {0};
  int n_parts = 0;
  for (const MatmulChunk& c : plan.chunks) n_parts = std::max(n_parts, c.part + 1);
  if (step > 0 && n_parts > kMaxMatmulParts) throw std::logic_error("run_matmul: more parts than kMaxMatmulParts");
  if (step > 0)
    for (int p = 0; p < n_parts; ++p)
      first_block[p + 1] = first_block[p] + (parts[p].w->n_out + kRowGranule - 1) / kRowGranule;
  std::atomic<int64_t> pre_done{0};
  pool.run(n_pre + static_cast<int64_t>(plan.chunks.size()), [&](int64_t i, int thread) {
    if (i < n_pre) {
      epilogue->pre(i, thread);
      pre_done.fetch_add(1, std::memory_order_release);
      return;
    }
    const MatmulChunk& c = plan.chunks[static_cast<size_t>(i - n_pre)];
    if (step > 0) {
      const MatmulOperand& op = parts[c.part];
      const int64_t base = first_block[c.part];
      for (int64_t r = c.r0; r < c.r1; r += step) {
        const int64_t e = std::min<int64_t>(c.r1, r + step);
        epilogue->ahead(base + r / kRowGranule, base + (e + kRowGranule - 1) / kRowGranule, first_block[n_parts]);
        matmul_rows(*op.w, r, e, op.x, op.x_stride, ncols, op.y, op.ldy, plan.order);
      }
    } else {
      chunk(c);
    }
    while (pre_done.load(std::memory_order_acquire) < n_pre) std::this_thread::yield();
    epilogue->post(c, thread);
  });
}

void ActivationQuantizer::reserve(int64_t max_rows, int64_t max_width) {
  // F32 is the widest activation format (4 bytes an element; Q8_K is 1.14, F16 2).
  for (Slot& s : slots_) s.data.assign(static_cast<size_t>(max_rows * max_width * 4 + 64), 0);
}

size_t ActivationQuantizer::reserve_bytes(int64_t max_rows, int64_t max_width) {
  return kSlots * static_cast<size_t>(max_rows * max_width * 4 + 64);
}

void ActivationQuantizer::reset(const float* src, int64_t rows, int64_t width, int64_t src_stride) {
  src_ = src;
  rows_ = rows;
  width_ = width;
  src_stride_ = src_stride;
  for (Slot& s : slots_) s.valid = false;
}

const void* ActivationQuantizer::get(ThreadPool& pool, DType type, size_t* stride) {
  *stride = row_bytes(type, width_);
  if (type == DType::F32 && src_stride_ == width_) return src_;  // already in the format
  Slot* slot = nullptr;
  for (Slot& s : slots_) {
    if (s.valid && s.type == type) return s.data.data();
    if (!s.valid && !slot) slot = &s;
  }
  if (!slot) throw std::logic_error("ActivationQuantizer: more activation formats in one op than slots");
  if (static_cast<size_t>(rows_) * *stride > slot->data.size())
    throw std::logic_error("ActivationQuantizer: input larger than reserved");
  const kernels::QuantizeFn q = kernels::active().quantize[static_cast<int>(type)];
  if (!q) throw std::logic_error(std::string("no activation quantizer for ") + dtype_name(type));
  uint8_t* dst = slot->data.data();
  const size_t st = *stride;
  pool.parallel_for(0, rows_, [&](int64_t r, int) { q(src_ + r * src_stride_, dst + r * st, width_); });
  slot->type = type;
  slot->valid = true;
  return dst;
}

void linear(ThreadPool& pool, ActivationQuantizer& act, const Matrix& w, const MatmulPlan& plan,
            const float* x, int64_t rows, float* y, const Vector& bias) {
  act.reset(x, rows, w.n_in, w.n_in);
  MatmulOperand op;
  op.w = &w;
  op.x = act.get(pool, matmul_input_type(w), &op.x_stride);
  op.y = y;
  op.ldy = w.n_out;
  run_matmul(pool, plan, &op, rows);
  if (!bias) return;
  pool.parallel_for(0, rows, [&](int64_t r, int) { kernels::active().add_f32(bias.data, y + r * w.n_out, w.n_out); });
}

}  // namespace edgellm
