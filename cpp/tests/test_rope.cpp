// Rope tables (model/rope.h): the plain angle pos · base^(-2i/n_rot), linear scaling, and YaRN
// (gpt-oss): pairs below the low correction dim keep their original angle, pairs from the high one
// on are interpolated by freq_scale, the ones between mix the two monotonically; cos / sin carry
// attn_factor; NEOX and NORM rotations move the right elements.
#include <algorithm>
#include <cmath>
#include <vector>

#include "model/rope.h"
#include "test_util.h"

using namespace edgellm;

namespace {

// The (cos, sin) row of `rope` at `pos`, as angles (atan2) and magnitudes.
void angles(const Rope& rope, int32_t pos, std::vector<double>& theta, std::vector<double>& mag) {
  std::vector<float> row(rope.table_stride());
  rope.fill(pos, row.data());
  theta.resize(row.size() / 2);
  mag.resize(row.size() / 2);
  for (size_t i = 0; i < theta.size(); ++i) {
    theta[i] = std::atan2(row[2 * i + 1], row[2 * i]);
    mag[i] = std::hypot(row[2 * i], row[2 * i + 1]);
  }
}

// |a - b| as angles (mod 2π).
double angle_diff(double a, double b) {
  constexpr double kTwoPi = 6.283185307179586;
  const double d = std::fmod(std::fabs(a - b), kTwoPi);
  return std::min(d, kTwoPi - d);
}

void plain_and_linear() {
  const int n = 64;
  RopeParams p;
  p.freq_base = 10000.0f;
  Rope plain(RopeType::Neox, n, p, nullptr);
  p.freq_scale = 0.25f;
  Rope linear(RopeType::Neox, n, p, nullptr);
  std::vector<double> t0, t1, m;
  for (int32_t pos : {1, 7, 300}) {
    angles(plain, pos, t0, m);
    angles(linear, pos, t1, m);
    for (int i = 0; i < n / 2; ++i) {
      const double inv = std::pow(10000.0, -2.0 * i / n);
      CHECK(angle_diff(t0[i], pos * inv) < 1e-5);
      CHECK(angle_diff(t1[i], pos * inv * 0.25) < 1e-5);
      CHECK_NEAR(m[i], 1.0, 1e-6);
    }
  }
}

void yarn() {
  // gpt-oss: 64 rotated dims, base 150000, factor 32 from 4096 positions, betas 32 / 1: the
  // correction dims are 8 and 18 (of 32 pairs)
  const int n = 64;
  RopeParams p;
  p.freq_base = 150000.0f;
  p.freq_scale = 1.0f / 32.0f;
  p.attn_factor = 1.0f + 0.1f * std::log(32.0f);
  p.yarn = true;
  p.yarn_beta_fast = 32.0f;
  p.yarn_beta_slow = 1.0f;
  p.yarn_n_ctx_orig = 4096;
  Rope rope(RopeType::Neox, n, p, nullptr);
  const int32_t pos = 1;  // small angles: no wrap-around, the mix is visible as a ratio
  std::vector<double> t, m;
  angles(rope, pos, t, m);
  double prev_ratio = 2.0;
  for (int i = 0; i < n / 2; ++i) {
    const double inv = std::pow(150000.0, -2.0 * i / n);
    const double ratio = t[i] / (pos * inv);  // 1: original angle, 1/32: interpolated
    if (i <= 8) CHECK_NEAR(ratio, 1.0, 1e-5);
    if (i >= 18) CHECK_NEAR(ratio, 1.0 / 32.0, 1e-5);
    if (i > 8 && i < 18) CHECK(ratio < 1.0 && ratio > 1.0 / 32.0);
    CHECK(ratio <= prev_ratio + 1e-5);  // the ramp only goes down (up to f32 cos / sin rounding)
    prev_ratio = ratio;
    // the ramp is linear in i between the dims: ratio = r + (1 - r) / 32, r = 1 - (i - 8) / 10
    const double r = 1.0 - std::min(1.0, std::max(0.0, (i - 8) / 10.0));
    CHECK_NEAR(ratio, r + (1 - r) / 32.0, 1e-5);
    CHECK_NEAR(m[i], 1.0 + 0.1 * std::log(32.0), 1e-5);  // the magnitude scale on cos and sin
  }
  // the same params without yarn interpolate every pair
  p.yarn = false;
  Rope linear(RopeType::Neox, n, p, nullptr);
  angles(linear, pos, t, m);
  for (int i = 0; i < n / 2; ++i) CHECK_NEAR(t[i] / (pos * std::pow(150000.0, -2.0 * i / n)), 1.0 / 32.0, 1e-5);
}

void rotations() {
  RopeParams p;
  Rope neox(RopeType::Neox, 4, p, nullptr), norm(RopeType::Norm, 4, p, nullptr);
  std::vector<float> row(4);
  neox.fill(3, row.data());
  float x[6] = {1, 2, 3, 4, 5, 6}, y[6] = {1, 2, 3, 4, 5, 6};
  neox.apply(row.data(), x);  // pairs (0, 2), (1, 3); dims 4, 5 pass through
  CHECK_NEAR(x[0], 1 * row[0] - 3 * row[1], 1e-6);
  CHECK_NEAR(x[2], 1 * row[1] + 3 * row[0], 1e-6);
  CHECK_NEAR(x[1], 2 * row[2] - 4 * row[3], 1e-6);
  CHECK(x[4] == 5 && x[5] == 6);
  norm.apply(row.data(), y);  // pairs (0, 1), (2, 3)
  CHECK_NEAR(y[0], 1 * row[0] - 2 * row[1], 1e-6);
  CHECK_NEAR(y[1], 1 * row[1] + 2 * row[0], 1e-6);
  CHECK_NEAR(y[3], 3 * row[3] + 4 * row[2], 1e-6);
}

}  // namespace

int main() {
  plain_and_linear();
  yarn();
  rotations();
  return test_util::report();
}
