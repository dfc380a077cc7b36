// Self-contained checks of the block-format reference (the thorough comparison against the
// gguf package is tests/test_quant.py): round trips, hand-built blocks, vec_dot against the
// dot of dequantized rows, and the argument checks.
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "common/errors.h"
#include "common/fp16.h"
#include "quant/quant.h"
#include "quant/reference.h"
#include "test_util.h"

using namespace edgellm;

namespace {

using test_util::throws_invalid;

std::vector<float> gaussian(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist;
  std::vector<float> x(n);
  for (auto& v : x) v = dist(rng);
  return x;
}

double relative_rmse(DType t, const std::vector<float>& x) {
  std::vector<uint8_t> q(row_bytes(t, x.size()));
  std::vector<float> y(x.size());
  quant::quantize_row(t, x.data(), q.data(), x.size());
  quant::dequantize_row(t, q.data(), y.data(), x.size());
  double err = 0, sig = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    err += (y[i] - x[i]) * double(y[i] - x[i]);
    sig += x[i] * double(x[i]);
  }
  return std::sqrt(err / sig);
}

void round_trips() {
  const auto x = gaussian(1024, 1);
  struct Case { DType t; double limit; };
  for (Case c : {Case{DType::F16, 1e-3}, Case{DType::BF16, 5e-3}, Case{DType::Q8_0, 0.01},
                 Case{DType::Q8_1, 0.01}, Case{DType::Q8_K, 0.01}, Case{DType::Q5_0, 0.06},
                 Case{DType::Q5_1, 0.06}, Case{DType::Q4_0, 0.12}, Case{DType::Q4_1, 0.12},
                 Case{DType::Q6_K, 0.021}, Case{DType::Q5_K, 0.043}, Case{DType::Q4_K, 0.085},
                 Case{DType::Q3_K, 0.17}, Case{DType::Q2_K, 0.30}}) {
    const double e = relative_rmse(c.t, x);
    if (!(e < c.limit)) std::fprintf(stderr, "%s: relative RMSE %.4f >= %.4f\n", dtype_name(c.t), e, c.limit);
    CHECK(e < c.limit);
  }
  std::vector<float> f32(64);
  quant::quantize_row(DType::F32, x.data(), f32.data(), 64);
  CHECK(std::memcmp(f32.data(), x.data(), 64 * sizeof(float)) == 0);
}

void hand_built_blocks() {
  // Q4_0: nibble order — element j is the low nibble of qs[j], element j+16 the high nibble.
  block_q4_0 b{};
  b.d = fp32_to_fp16(0.5f);
  for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<uint8_t>(j | (15 - j) << 4);
  float y[32];
  quant::dequantize_row_q4_0(&b, y, 32);
  CHECK(y[0] == -4.0f && y[1] == -3.5f && y[16] == 3.5f && y[31] == -4.0f);

  // Q4_K: get_scale_min_k4 high bits for sub-blocks 4..7.
  uint8_t s[12] = {};
  s[0] = 0x40 | 5;  // scale 0 = 5, top bits -> bits 4..5 of scale 4
  s[4] = 0x80 | 7;  // min 0 = 7, top bits -> bits 4..5 of min 4
  s[8] = 0x3 | 0x9 << 4;
  uint8_t sc, m;
  quant::get_scale_min_k4(0, s, &sc, &m);
  CHECK(sc == 5 && m == 7);
  quant::get_scale_min_k4(4, s, &sc, &m);
  CHECK(sc == (3 | 1 << 4) && m == (9 | 2 << 4));

  // Q8_K: d = -max/127 with the signed max, bsums are sums of 16 levels.
  std::vector<float> x(256, 0.0f);
  x[3] = -2.0f;
  x[20] = 1.0f;
  block_q8_K q;
  quant::quantize_row_q8_k(x.data(), &q, 256);
  CHECK_NEAR(q.d, 2.0 / 127, 1e-9);
  CHECK(q.qs[3] == -127 && q.qs[20] == 64 && q.bsums[0] == -127 && q.bsums[1] == 64);

  // Q8_0 activation rule: ties to even on x·(127/amax).
  float a[32] = {127.0f, 2.5f, -2.5f, 3.5f};
  block_q8_0 q8;
  quant::quantize_row_q8_0(a, &q8, 32);
  CHECK(q8.qs[0] == 127 && q8.qs[1] == 2 && q8.qs[2] == -2 && q8.qs[3] == 4 && q8.qs[4] == 0);
}

void vec_dots() {
  const int64_t n = 512;
  const auto w = gaussian(n, 2), x = gaussian(n, 3);
  for (DType t : {DType::F32, DType::F16, DType::BF16, DType::Q4_0, DType::Q4_1, DType::Q5_0,
                  DType::Q5_1, DType::Q8_0, DType::Q2_K, DType::Q3_K, DType::Q4_K, DType::Q5_K,
                  DType::Q6_K}) {
    const DType at = quant::vec_dot_type(t);
    std::vector<uint8_t> qw(row_bytes(t, n)), qa(row_bytes(at, n));
    quant::quantize_row(t, w.data(), qw.data(), n);
    quant::quantize_row(at, x.data(), qa.data(), n);
    std::vector<float> dw(n), da(n);
    quant::dequantize_row(t, qw.data(), dw.data(), n);
    quant::dequantize_row(at, qa.data(), da.data(), n);
    double ref = 0, mag = 0;
    for (int64_t i = 0; i < n; ++i) {
      ref += double(dw[i]) * da[i];
      mag += std::fabs(double(dw[i]) * da[i]);
    }
    // Q4_1/Q5_1 use the rounded fp16 s = d·Σq for the min term: allow fp16 rounding there.
    const double tol = (at == DType::Q8_1 ? 2e-3 : 1e-5) * mag;
    const float got = quant::vec_dot(t, n, qw.data(), qa.data());
    if (!(std::fabs(got - ref) <= tol)) std::fprintf(stderr, "%s: %f vs %f\n", dtype_name(t), got, ref);
    CHECK_NEAR(got, ref, tol);
  }
}


void argument_checks() {
  float y[64];
  uint8_t buf[64] = {};
  CHECK(throws_invalid([&] { quant::dequantize_row(DType::Q4_0, buf, y, 33); }));
  CHECK(throws_invalid([&] { quant::quantize_row(DType::Q4_K, y, buf, 32); }));
  CHECK(throws_invalid([&] { quant::vec_dot_type(DType::Q8_K); }));
  CHECK(throws_invalid([&] { quant::vec_dot(DType::Q8_1, 32, buf, buf); }));
}

}  // namespace

int main() {
  round_trips();
  hand_built_blocks();
  vec_dots();
  argument_checks();
  return test_util::report();
}
