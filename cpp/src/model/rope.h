// Rotary position embedding (docs/formats.md §3.6, §4.2–4.3).
//
// theta_i(pos) = pos * freq_base^(-2i/n_rot) / freq_factor_i * freq_scale, i < n_rot/2.
// NORM rotates the pairs (x[2i], x[2i+1]); NEOX rotates (x[i], x[i + n_rot/2]); dims >= n_rot
// pass through. The table's cos and sin carry attn_factor (LongRoPE's attention factor, YaRN's
// magnitude scale), so the rotated dims of Q and K are both scaled by it. YaRN (RopeParams::yarn,
// gpt-oss) changes each pair's inverse frequency: a ramp between the interpolated (× freq_scale)
// and the original one, fixed per pair, so it is folded into inv_freq_ at construction.
//
// Frequency factors: Llama-3's rope_freqs.weight, or LongRoPE's pair (Phi-3) rope_factors_short /
// rope_factors_long.weight, the long ones when the context run exceeds n_ctx_orig
// (select_rope_factors). Angles are computed in double from the exact inverse frequencies, so long
// positions lose nothing to an iterated f32 product.
//
// A forward pass fills one table of (cos, sin) per token and RoPE variant once, then every head
// of every layer using that variant reads it.
#pragma once
#include <cstdint>
#include <vector>

#include "model/model_config.h"

namespace edgellm {

class Rope {
 public:
  Rope() = default;
  // freq_factors: n_rot/2 divisors of theta (Llama-3 rope_freqs), or nullptr.
  Rope(RopeType type, int n_rot, const RopeParams& params, const float* freq_factors);

  int n_rot() const { return n_rot_; }
  // Floats per token in a table: n_rot/2 (cos, sin) pairs.
  int table_stride() const { return n_rot_; }
  // Writes the (cos, sin) pairs of position `pos` to row[0 .. table_stride()).
  void fill(int32_t pos, float* row) const;
  // M-RoPE: pair i at position pos[k], k the section (sections[0..3] pairs each) holding i.
  void fill_sections(const int32_t* pos, const int* sections, float* row) const;
  // Rotates one head vector in place with a row from fill().
  void apply(const float* row, float* x) const;

 private:
  RopeType type_ = RopeType::Norm;
  int n_rot_ = 0;
  std::vector<double> inv_freq_;  // freq_base^(-2i/n_rot) / factor_i * freq_scale (YaRN: the ramped scale)
  float attn_factor_ = 1.0f;
};

}  // namespace edgellm
