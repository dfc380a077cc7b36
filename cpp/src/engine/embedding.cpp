#include "engine/embedding.h"

#include <algorithm>
#include <cmath>

namespace edgellm {

const char* pooling_name(Pooling p) {
  switch (p) {
    case Pooling::Unspecified: return "unspecified";
    case Pooling::None: return "none";
    case Pooling::Mean: return "mean";
    case Pooling::Cls: return "cls";
    case Pooling::Last: return "last";
    case Pooling::Rank: return "rank";
  }
  return "?";
}

void normalize_embedding(float* v, int64_t n, int32_t norm) {
  double s = 0.0;
  if (norm < 0) return;
  if (norm == 0) {
    for (int64_t i = 0; i < n; ++i) s = std::max(s, static_cast<double>(std::fabs(v[i])));
    s /= 32760.0;  // the largest component becomes 32760: an int16 range
  } else if (norm == 2) {
    for (int64_t i = 0; i < n; ++i) s += static_cast<double>(v[i]) * v[i];
    s = std::sqrt(s);
  } else {
    for (int64_t i = 0; i < n; ++i) s += std::pow(std::fabs(static_cast<double>(v[i])), norm);
    s = std::pow(s, 1.0 / norm);
  }
  const double inv = s > 0.0 ? 1.0 / s : 0.0;
  for (int64_t i = 0; i < n; ++i) v[i] = static_cast<float>(v[i] * inv);
}

void EmbeddingPool::reset() {
  count_ = 0;
  sum_.clear();
  rows_.clear();
}

void EmbeddingPool::add(const float* rows, int32_t n_rows) {
  const size_t n = static_cast<size_t>(n_embd_);
  if (n_rows <= 0) return;
  switch (pooling_) {
    case Pooling::Mean:
      if (sum_.empty()) sum_.assign(n, 0.0);
      for (int32_t r = 0; r < n_rows; ++r)
        for (size_t i = 0; i < n; ++i) sum_[i] += rows[r * n + i];
      break;
    case Pooling::None:
      rows_.insert(rows_.end(), rows, rows + n_rows * n);
      break;
    default:  // Cls / Last: the scheduler asks for exactly one row
      rows_.assign(rows + (n_rows - 1) * n, rows + n_rows * n);
      break;
  }
  count_ += n_rows;
}

std::vector<float> EmbeddingPool::finish(int32_t* n_rows) {
  const size_t n = static_cast<size_t>(n_embd_);
  std::vector<float> out;
  if (pooling_ == Pooling::Mean) {
    out.resize(n);
    for (size_t i = 0; i < n; ++i) out[i] = count_ > 0 ? static_cast<float>(sum_[i] / count_) : 0.0f;
  } else {
    out = std::move(rows_);
  }
  const int32_t rows = n > 0 ? static_cast<int32_t>(out.size() / n) : 0;
  for (int32_t r = 0; r < rows; ++r) normalize_embedding(out.data() + r * n, static_cast<int64_t>(n), normalize_);
  reset();
  *n_rows = rows;
  return out;
}

}  // namespace edgellm
