// Scalar references of the LoRA products (kernels/lora_kernels.h). F16 elements are widened a
// block at a time so the F32 loops vectorise where the compiler can (the generic level is also
// what an ARM table without its own LoRA bodies runs).
#include <algorithm>

#include "common/fp16.h"
#include "kernels/lora_kernels.h"

namespace edgellm::kernels {
namespace {

constexpr int64_t kBlock = 256;

// Elements [i0, i0 + n) of row `r` (stride ld elements) as F32: the row itself or `buf`.
const float* widen(DType type, const void* m, int64_t r, int64_t ld, int64_t i0, int64_t n, float* buf) {
  if (type == DType::F32) return static_cast<const float*>(m) + r * ld + i0;
  const uint16_t* h = static_cast<const uint16_t*>(m) + r * ld + i0;
  for (int64_t i = 0; i < n; ++i) buf[i] = fp16_to_fp32(h[i]);
  return buf;
}

}  // namespace

void lora_down_ref(const LoraDownArgs& a) {
  float buf[kBlock];
  for (int64_t c = 0; c < a.ncols; ++c)
    for (int64_t r = 0; r < a.rank; ++r) a.low[c * a.rank + r] = 0.0f;
  for (int64_t r = 0; r < a.rank; ++r)
    for (int64_t i0 = 0; i0 < a.K; i0 += kBlock) {
      const int64_t n = std::min(kBlock, a.K - i0);
      const float* w = widen(a.type, a.a, r, a.K, i0, n, buf);
      for (int64_t c = 0; c < a.ncols; ++c) {
        const float* x = a.x + a.rows[c] * a.ldx + i0;
        float s = 0.0f;
        for (int64_t i = 0; i < n; ++i) s += w[i] * x[i];
        a.low[c * a.rank + r] += s;
      }
    }
  for (int64_t c = 0; c < a.ncols; ++c)
    for (int64_t r = 0; r < a.rank; ++r) a.low[c * a.rank + r] *= a.scale[c];
}

void lora_up_ref(const LoraUpArgs& a) {
  float buf[kLoraBlock];
  for (int64_t o0 = a.o0; o0 < a.o1; o0 += kLoraBlock) {  // one block of Bᵀ
    const int64_t n = std::min<int64_t>(kLoraBlock, a.o1 - o0);
    for (int64_t r = 0; r < a.rank; ++r) {
      const float* b = widen(a.type, a.bt, o0 / kLoraBlock * a.rank + r, kLoraBlock, 0, n, buf);
      for (int64_t c = 0; c < a.ncols; ++c) {
        const float l = a.low[c * a.rank + r];
        float* y = a.y + a.rows[c] * a.ldy + o0;
        for (int64_t i = 0; i < n; ++i) y[i] += l * b[i];
      }
    }
  }
}

}  // namespace edgellm::kernels
