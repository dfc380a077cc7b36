#include "engine/prompt_image.h"

#include <algorithm>

namespace edgellm {

int32_t image_key_token(uint64_t hash, int32_t j) {
  uint64_t x = hash ^ (0x9e3779b97f4a7c15ull * (static_cast<uint64_t>(j) + 1));
  x ^= x >> 31;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 29;
  return -1 - static_cast<int32_t>(x & 0x3fffffff);
}

const PromptImage* image_at(const std::vector<PromptImage>& images, int32_t p) {
  for (const PromptImage& im : images)
    if (p >= im.pos && p < im.pos + im.n_tokens) return &im;
  return nullptr;
}

int32_t fit_image_chunk(const std::vector<PromptImage>& images, int32_t start, int32_t k, int32_t budget) {
  const int32_t end = start + k;
  for (const PromptImage& im : images) {
    const int32_t block_end = im.pos + im.n_tokens;
    if (im.pos < end && end < block_end) {  // the chunk would end inside this block
      if (im.pos > start) return im.pos - start;
      return block_end - start <= budget ? block_end - start : 0;
    }
  }
  return k;
}

void mrope_position(const std::vector<PromptImage>& images, int32_t p, int32_t* out) {
  int32_t shift = 0;
  for (const PromptImage& im : images) {
    if (im.rows <= 0 || im.pos > p) break;
    if (p <= im.last()) {
      const int32_t s = im.pos - shift, j = p - im.pos;
      out[0] = s;
      out[1] = s + j / im.cols;
      out[2] = s + j % im.cols;
      return;
    }
    shift += im.n_tokens - std::max(im.rows, im.cols);
  }
  out[0] = out[1] = out[2] = p - shift;
}

bool has_grid(const std::vector<PromptImage>& images) {
  for (const PromptImage& im : images)
    if (im.rows > 0) return true;
  return false;
}

}  // namespace edgellm
