// run_layer (model/architecture.h), the one layer definition the CPU forward pass and the CUDA
// executor both run: which building blocks it calls, in which order, on which buffers, for each
// registered architecture's LayerSpec. A recording pass stands in for a backend.
#include <string>
#include <vector>

#include "model/architecture.h"
#include "test_util.h"

using namespace edgellm;

namespace {

// Weights as the backends' copies have them: only the members run_layer names.
struct NamedNorms {
  const char* attn_norm = "attn_norm";
  const char* post_attn_norm = "post_attn_norm";
  const char* ffn_norm = "ffn_norm";
  const char* post_ffn_norm = "post_ffn_norm";
};

struct RecordingPass {
  float buffers[3] = {0, 0, 0};
  float* x = &buffers[0];
  float* h = &buffers[1];
  float* out = &buffers[2];
  std::vector<std::string> calls;

  std::string name(const float* p) const { return p == x ? "x" : p == h ? "h" : p == out ? "out" : "?"; }
  void rmsnorm(const float* src, const char* w, float* dst) {
    calls.push_back("rmsnorm(" + name(src) + ", " + w + ", " + name(dst) + ")");
  }
  void self_attention(const NamedNorms&, int il) { calls.push_back("self_attention(" + std::to_string(il) + ")"); }
  void gated_ffn(const NamedNorms&, int il, FfnActivation act) {
    calls.push_back(std::string("gated_ffn(") + std::to_string(il) + ", " +
                    (act == FfnActivation::SiLU ? "silu" : "gelu_tanh") + ")");
  }
  void add_residual(const float* src) { calls.push_back("add_residual(" + name(src) + ")"); }
};

// A backend with the MoE FFN, and weights that may have a router (LayerWeights::router).
struct MoeWeights : NamedNorms {
  bool router = false;
};
struct MoePass : RecordingPass {
  void moe_ffn(const MoeWeights&, int il) { calls.push_back("moe_ffn(" + std::to_string(il) + ")"); }
};

// Layers with a router run moe_ffn in the FFN's place (same norms, same residual); without one,
// and on a backend without moe_ffn, the gated FFN.
void check_moe_layer() {
  MoePass f;
  MoeWeights w;
  w.router = true;
  run_layer(LayerSpec{}, f, w, 2);
  const std::vector<std::string> want = {
      "rmsnorm(x, attn_norm, h)", "self_attention(2)", "add_residual(out)",
      "rmsnorm(x, ffn_norm, h)",  "moe_ffn(2)",        "add_residual(out)",
  };
  CHECK(f.calls == want);
  MoePass dense;
  run_layer(LayerSpec{}, dense, MoeWeights{}, 2);
  CHECK(dense.calls.size() == 6 && dense.calls[4] == "gated_ffn(2, silu)");
}

std::vector<std::string> trace(const LayerSpec& spec, int il) {
  RecordingPass f;
  run_layer(spec, f, NamedNorms{}, il);
  return f.calls;
}

void check_plain_pre_norm_layer() {
  const std::vector<std::string> want = {
      "rmsnorm(x, attn_norm, h)", "self_attention(3)", "add_residual(out)",
      "rmsnorm(x, ffn_norm, h)",  "gated_ffn(3, silu)", "add_residual(out)",
  };
  CHECK(trace(LayerSpec{}, 3) == want);
  LayerSpec biased;
  biased.qkv_bias = true;  // and Q/K norms: inside self_attention, same calls here
  biased.qk_norm = true;
  CHECK(trace(biased, 3) == want);
}

void check_post_norm_geglu_layer() {
  LayerSpec spec;
  spec.ffn_activation = FfnActivation::GeluTanh;
  spec.post_norms = true;
  const std::vector<std::string> want = {
      "rmsnorm(x, attn_norm, h)",       "self_attention(0)",
      "rmsnorm(out, post_attn_norm, out)", "add_residual(out)",
      "rmsnorm(x, ffn_norm, h)",        "gated_ffn(0, gelu_tanh)",
      "rmsnorm(out, post_ffn_norm, out)",  "add_residual(out)",
  };
  CHECK(trace(spec, 0) == want);
}

// Each registered architecture: the trace its spec gives (the post-norms add exactly two norms
// on the sub-layer outputs, the activation reaches the FFN).
void check_registry() {
  for (const Architecture* a : architectures()) {
    const std::vector<std::string> t = trace(a->layer, 1);
    CHECK(t.size() == (a->layer.post_norms ? 8u : 6u));
    const std::string ffn = a->layer.ffn_activation == FfnActivation::SiLU ? "gated_ffn(1, silu)" : "gated_ffn(1, gelu_tanh)";
    CHECK(t.size() >= 6 && t[a->layer.post_norms ? 5 : 4] == ffn);
    CHECK(find_architecture(a->name) == a);
  }
  CHECK(architectures().size() >= 4);
  CHECK(find_architecture("no-such-arch") == nullptr);
}

}  // namespace

int main() {
  check_plain_pre_norm_layer();
  check_post_norm_geglu_layer();
  check_moe_layer();
  check_registry();
  return test_util::report();
}
