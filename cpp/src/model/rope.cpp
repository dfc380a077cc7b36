#include "model/rope.h"

#include <cmath>

namespace edgellm {

Rope::Rope(RopeType type, int n_rot, const RopeParams& params, const float* freq_factors)
    : type_(type), n_rot_(n_rot), inv_freq_(n_rot / 2), attn_factor_(params.attn_factor) {
  for (int i = 0; i < n_rot / 2; ++i) {
    double f = std::pow(static_cast<double>(params.freq_base), -2.0 * i / n_rot);
    if (freq_factors) f /= freq_factors[i];
    inv_freq_[i] = f * params.freq_scale;
  }
}

void Rope::fill(int32_t pos, float* row) const {
  for (int i = 0; i < n_rot_ / 2; ++i) {
    const double theta = pos * inv_freq_[i];
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
