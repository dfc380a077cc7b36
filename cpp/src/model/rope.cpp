#include "model/rope.h"

#include <algorithm>
#include <cmath>

namespace edgellm {

namespace {

// YaRN's correction dim: the pair index whose wavelength fits n_rotations turns into n_ctx_orig
// positions, n_rot · ln(n_ctx_orig / (n_rotations · 2π)) / (2 ln base).
double yarn_corr_dim(int n_rot, int n_ctx_orig, double n_rotations, double base) {
  constexpr double kPi = 3.14159265358979323846;
  return n_rot * std::log(n_ctx_orig / (n_rotations * 2.0 * kPi)) / (2.0 * std::log(base));
}

}  // namespace

Rope::Rope(RopeType type, int n_rot, const RopeParams& params, const float* freq_factors)
    : type_(type), n_rot_(n_rot), inv_freq_(n_rot / 2), attn_factor_(params.attn_factor) {
  // YaRN's ramp between the correction dims (llama.cpp's rounding, floor / ceil, unless the file
  // says yarn_truncate = false; clamped either way).
  double lo = 0, hi = 0;
  if (params.yarn) {
    const int n_orig = params.yarn_n_ctx_orig;
    lo = yarn_corr_dim(n_rot, n_orig, params.yarn_beta_fast, params.freq_base);
    hi = yarn_corr_dim(n_rot, n_orig, params.yarn_beta_slow, params.freq_base);
    if (params.yarn_truncate) {
      lo = std::floor(lo);
      hi = std::ceil(hi);
    }
    lo = std::max(0.0, lo);
    hi = std::min(n_rot - 1.0, hi);
  }
  for (int i = 0; i < n_rot / 2; ++i) {
    double f = std::pow(static_cast<double>(params.freq_base), -2.0 * i / n_rot);
    if (freq_factors) f /= freq_factors[i];
    if (params.yarn) {
      const double ramp = 1.0 - std::min(1.0, std::max(0.0, (i - lo) / std::max(0.001, hi - lo)));
      inv_freq_[i] = f * (params.freq_scale * (1.0 - ramp) + ramp);
    } else {
      inv_freq_[i] = f * params.freq_scale;
    }
  }
}

void Rope::fill(int32_t pos, float* row) const {
  for (int i = 0; i < n_rot_ / 2; ++i) {
    const double theta = pos * inv_freq_[i];
    row[2 * i] = static_cast<float>(std::cos(theta) * attn_factor_);
    row[2 * i + 1] = static_cast<float>(std::sin(theta) * attn_factor_);
  }
}

void Rope::fill_sections(const int32_t* pos, const int* sections, float* row) const {
  int k = 0, end = sections[0];
  for (int i = 0; i < n_rot_ / 2; ++i) {
    while (i >= end && k < 3) end += sections[++k];
    const double theta = pos[i < end ? k : 0] * inv_freq_[i];
    row[2 * i] = static_cast<float>(std::cos(theta) * attn_factor_);
    row[2 * i + 1] = static_cast<float>(std::sin(theta) * attn_factor_);
  }
}

void Rope::apply(const float* row, float* x) const {
  const int half = n_rot_ / 2;
  if (type_ == RopeType::Norm) {
    for (int i = 0; i < half; ++i) {
      const float c = row[2 * i], s = row[2 * i + 1];
      const float x0 = x[2 * i], x1 = x[2 * i + 1];
      x[2 * i] = x0 * c - x1 * s;
      x[2 * i + 1] = x0 * s + x1 * c;
    }
  } else {
    for (int i = 0; i < half; ++i) {
      const float c = row[2 * i], s = row[2 * i + 1];
      const float x0 = x[i], x1 = x[i + half];
      x[i] = x0 * c - x1 * s;
      x[i + half] = x0 * s + x1 * c;
    }
  }
}

}  // namespace edgellm
