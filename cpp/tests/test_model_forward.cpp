// Model::forward on tiny random F32 models written by this test, one per registered
// architecture (with the tensors its LayerSpec asks for; a sliding window where the
// architecture reads one): batching invariances and the errors of bad batches. The numeric comparison
// against an independent reference is in tests/test_model_forward.py; this runs the same code
// paths under the sanitizers (EDGELLM_SANITIZE=ON) without Python.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "common/errors.h"
#include "kv/kv_cache.h"
#include "model/architecture.h"
#include "model/model.h"
#include "tools/runner.h"
#include "test_util.h"

using namespace edgellm;

namespace {

// ---- a minimal GGUF v3 writer (F32 tensors, u32/f32/string keys) ----
class GgufWriter {
 public:
  void u32(const std::string& k, uint32_t v) { key(k, 4); put(v); }
  void f32(const std::string& k, float v) { key(k, 6); put(v); }
  void i32s(const std::string& k, const std::vector<int32_t>& v) {  // ARRAY of INT32
    key(k, 9);
    put<uint32_t>(5);
    put<uint64_t>(v.size());
    for (int32_t x : v) put(x);
  }
  void str(const std::string& k, const std::string& v) { key(k, 8); string(v); }
  void tensor(const std::string& name, std::vector<int64_t> ne, const std::vector<float>& data) {
    tensors_.push_back({name, std::move(ne), data});
  }
  void write(const std::string& path) {
    std::vector<uint8_t> out;
    auto raw = [&](const void* p, size_t n) { out.insert(out.end(), (const uint8_t*)p, (const uint8_t*)p + n); };
    raw("GGUF", 4);
    const uint32_t version = 3;
    raw(&version, 4);
    const int64_t nt = tensors_.size(), nk = n_kv_;
    raw(&nt, 8);
    raw(&nk, 8);
    raw(kv_.data(), kv_.size());
    uint64_t offset = 0;
    for (const auto& t : tensors_) {
      const uint64_t len = t.name.size();
      raw(&len, 8);
      raw(t.name.data(), len);
      const uint32_t nd = t.ne.size(), type = 0;
      raw(&nd, 4);
      for (int64_t e : t.ne) raw(&e, 8);
      raw(&type, 4);
      raw(&offset, 8);
      offset += (t.data.size() * 4 + 31) / 32 * 32;
    }
    while (out.size() % 32) out.push_back(0);
    for (const auto& t : tensors_) {
      raw(t.data.data(), t.data.size() * 4);
      while (out.size() % 32) out.push_back(0);
    }
    FILE* f = std::fopen(path.c_str(), "wb");
    std::fwrite(out.data(), 1, out.size(), f);
    std::fclose(f);
  }

 private:
  struct T {
    std::string name;
    std::vector<int64_t> ne;
    std::vector<float> data;
  };
  template <class V>
  void put(V v) {
    kv_.insert(kv_.end(), (const uint8_t*)&v, (const uint8_t*)&v + sizeof(v));
  }
  void string(const std::string& s) {
    put<uint64_t>(s.size());
    kv_.insert(kv_.end(), s.begin(), s.end());
  }
  void key(const std::string& k, uint32_t type) {
    string(k);
    put(type);
    ++n_kv_;
  }
  std::vector<uint8_t> kv_;
  int64_t n_kv_ = 0;
  std::vector<T> tensors_;
};

constexpr int kEmbd = 32, kHeads = 4, kKv = 2, kHd = 32, kFf = 64, kVocab = 40, kLayers = 2;
// MoE archs (LayerSpec::moe): experts kFf wide, and a shared expert of kFf with its sigmoid gate
constexpr int kExperts = 4, kExpertsUsed = 2;

std::string write_tiny(const Architecture& architecture, const std::string& path) {
  const std::string arch = architecture.name;
  const LayerSpec& spec = architecture.layer;
  std::mt19937 rng(7);
  std::normal_distribution<float> g;
  auto rnd = [&](size_t n, float std, float mean = 0) {
    std::vector<float> v(n);
    for (float& x : v) x = mean + std * g(rng);
    return v;
  };
  GgufWriter w;
  w.str("general.architecture", arch);
  const std::string a = arch + ".";
  w.u32(a + "context_length", 256);
  w.u32(a + "embedding_length", kEmbd);
  w.u32(a + "block_count", kLayers);
  w.u32(a + "feed_forward_length", kFf);
  w.u32(a + "attention.head_count", kHeads);
  w.u32(a + "attention.head_count_kv", kKv);
  w.u32(a + "attention.key_length", kHd);
  w.u32(a + "attention.value_length", kHd);
  w.f32(a + "attention.layer_norm_rms_epsilon", 1e-6f);
  w.u32(a + "vocab_size", kVocab);
  // Read by architectures with sliding-window layers (gemma2, gemma3, phi3), ignored by the others.
  w.u32(a + "attention.sliding_window", 3);
  w.u32(a + "attention.sliding_window_pattern", 2);  // layer 0 local, layer 1 global
  // Read by qwen2vl (M-RoPE sections of the 16 rotated pairs; text: all equal, plain NEOX RoPE).
  w.i32s(a + "rope.dimension_sections", {4, 6, 6, 0});
  if (spec.moe) {
    w.u32(a + "expert_count", kExperts);
    w.u32(a + "expert_used_count", kExpertsUsed);
    w.u32(a + "expert_feed_forward_length", kFf);
    w.u32(a + "expert_shared_feed_forward_length", kFf);
  }
  w.tensor("token_embd.weight", {kEmbd, kVocab}, rnd(kEmbd * kVocab, 1.0f));
  w.tensor("output_norm.weight", {kEmbd}, rnd(kEmbd, 0.1f, 1.0f));
  for (int il = 0; il < kLayers; ++il) {
    const std::string b = "blk." + std::to_string(il) + ".";
    w.tensor(b + "attn_norm.weight", {kEmbd}, rnd(kEmbd, 0.1f, 1.0f));
    if (spec.fused_qkv) {  // rows Q, K, V in one matrix
      w.tensor(b + "attn_qkv.weight", {kEmbd, (kHeads + 2 * kKv) * kHd}, rnd(kEmbd * (kHeads + 2 * kKv) * kHd, 0.2f));
    } else {
      w.tensor(b + "attn_q.weight", {kEmbd, kHeads * kHd}, rnd(kEmbd * kHeads * kHd, 0.2f));
      w.tensor(b + "attn_k.weight", {kEmbd, kKv * kHd}, rnd(kEmbd * kKv * kHd, 0.2f));
      w.tensor(b + "attn_v.weight", {kEmbd, kKv * kHd}, rnd(kEmbd * kKv * kHd, 0.2f));
    }
    w.tensor(b + "attn_output.weight", {kHeads * kHd, kEmbd}, rnd(kEmbd * kHeads * kHd, 0.2f));
    w.tensor(b + spec.ffn_norm + ".weight", {kEmbd}, rnd(kEmbd, 0.1f, 1.0f));  // gpt-oss: post_attention_norm
    if (spec.attn_out_bias) w.tensor(b + "attn_output.bias", {kEmbd}, rnd(kEmbd, 0.2f));
    if (spec.attn_sinks) w.tensor(b + "attn_sinks.weight", {kHeads}, rnd(kHeads, 1.0f));
    if (spec.expert_biases) {
      w.tensor(b + "ffn_gate_inp.bias", {kExperts}, rnd(kExperts, 0.5f));
      w.tensor(b + "ffn_gate_exps.bias", {kFf, kExperts}, rnd(kFf * kExperts, 0.3f));
      w.tensor(b + "ffn_up_exps.bias", {kFf, kExperts}, rnd(kFf * kExperts, 0.3f));
      w.tensor(b + "ffn_down_exps.bias", {kEmbd, kExperts}, rnd(kEmbd * kExperts, 0.1f));
    }
    if (spec.moe) {
      w.tensor(b + "ffn_gate_inp.weight", {kEmbd, kExperts}, rnd(kEmbd * kExperts, 0.5f));
      w.tensor(b + "ffn_gate_exps.weight", {kEmbd, kFf, kExperts}, rnd(kEmbd * kFf * kExperts, 0.2f));
      w.tensor(b + "ffn_up_exps.weight", {kEmbd, kFf, kExperts}, rnd(kEmbd * kFf * kExperts, 0.2f));
      w.tensor(b + "ffn_down_exps.weight", {kFf, kEmbd, kExperts}, rnd(kEmbd * kFf * kExperts, 0.2f));
      w.tensor(b + "ffn_gate_shexp.weight", {kEmbd, kFf}, rnd(kEmbd * kFf, 0.2f));
      w.tensor(b + "ffn_up_shexp.weight", {kEmbd, kFf}, rnd(kEmbd * kFf, 0.2f));
      w.tensor(b + "ffn_down_shexp.weight", {kFf, kEmbd}, rnd(kEmbd * kFf, 0.2f));
      w.tensor(b + "ffn_gate_inp_shexp.weight", {kEmbd}, rnd(kEmbd, 0.5f));
    } else {
      if (spec.fused_gate_up) {  // gate rows, then up rows
        w.tensor(b + "ffn_up.weight", {kEmbd, 2 * kFf}, rnd(2 * kEmbd * kFf, 0.2f));
      } else {
        w.tensor(b + "ffn_gate.weight", {kEmbd, kFf}, rnd(kEmbd * kFf, 0.2f));
        w.tensor(b + "ffn_up.weight", {kEmbd, kFf}, rnd(kEmbd * kFf, 0.2f));
      }
      w.tensor(b + "ffn_down.weight", {kFf, kEmbd}, rnd(kEmbd * kFf, 0.2f));
    }
    if (spec.qkv_bias) {
      w.tensor(b + "attn_q.bias", {kHeads * kHd}, rnd(kHeads * kHd, 0.2f));
      w.tensor(b + "attn_k.bias", {kKv * kHd}, rnd(kKv * kHd, 0.2f));
      w.tensor(b + "attn_v.bias", {kKv * kHd}, rnd(kKv * kHd, 0.2f));
    }
    if (spec.qk_norm) {
      const int nq = spec.qk_norm_whole ? kHeads * kHd : kHd, nk = spec.qk_norm_whole ? kKv * kHd : kHd;
      w.tensor(b + "attn_q_norm.weight", {nq}, rnd(nq, 0.1f, 1.0f));
      w.tensor(b + "attn_k_norm.weight", {nk}, rnd(nk, 0.1f, 1.0f));
    }
    if (spec.post_norms) {
      w.tensor(b + "post_attention_norm.weight", {kEmbd}, rnd(kEmbd, 0.1f, 1.0f));
      w.tensor(b + "post_ffw_norm.weight", {kEmbd}, rnd(kEmbd, 0.1f, 1.0f));
    }
  }
  w.write(path);
  return path;
}

float max_diff(const float* a, const float* b, size_t n) {
  float m = 0;
  for (size_t i = 0; i < n; ++i) m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

KVCache make_kv(const Model& m, int seqs, DType t = DType::F32) {
  KVCacheConfig k = m.kv_config();
  k.page_size = 4;
  k.dtype = t;
  k.max_seqs = seqs;
  k.pages_full = 64;
  k.pages_window = 64;
  return KVCache(k);
}

template <class E, class F>
bool throws(F&& f) {
  try {
    f();
  } catch (const E&) {
    return true;
  } catch (...) {
    return false;
  }
  return false;
}

// Hidden-state rows (embeddings): the final-norm states of the rows asked for, in batch order,
// are the LM head's input (hidden · output matrix = that token's logits), whatever else the
// batch holds and whether or not the same token also wants logits.
void check_hidden_rows(const std::shared_ptr<Model>& model) {
  const std::vector<int32_t> a = {5, 9, 1, 33, 2, 7}, b = {8, 8, 30, 4, 17};
  const TensorInfo* emb = model->file().find_tensor("token_embd.weight");  // tied output head, F32
  CHECK(emb != nullptr);
  const float* w = reinterpret_cast<const float*>(emb->data);
  const float cap = model->config().logit_softcap;
  auto head = [&](const float* h, int32_t v) {
    double s = 0;
    for (int i = 0; i < kEmbd; ++i) s += static_cast<double>(h[i]) * w[static_cast<size_t>(v) * kEmbd + i];
    return cap > 0 ? cap * std::tanh(s / cap) : s;
  };
  ModelRunner rb(model, {64, DType::F32, 4});
  const std::vector<float> lb = rb.eval(b, true);

  // a wants hidden rows only, b wants logits everywhere and hidden rows at odd positions.
  KVCache kv = make_kv(*model, 2);
  CHECK(kv.reserve(0, a.size()) && kv.reserve(1, b.size()));
  Batch batch;
  for (size_t i = 0; i < std::max(a.size(), b.size()); ++i) {
    if (i < a.size()) batch.add(a[i], i, 0, false, true);
    if (i < b.size()) batch.add(b[i], i, 1, true, i % 2 == 1);
  }
  CHECK(batch.n_hidden_outputs() == static_cast<int32_t>(a.size() + b.size() / 2));
  std::vector<float> logits(batch.n_outputs() * kVocab), hidden(batch.n_hidden_outputs() * kEmbd);
  model->forward(batch, kv, logits.data(), hidden.data());
  double worst = 0;
  int hrow = 0;
  std::vector<float> a_rows;
  for (int t = 0; t < batch.size(); ++t) {
    if (!batch.wants_hidden(t)) continue;
    const float* h = &hidden[hrow++ * kEmbd];
    if (batch.seq[t] == 0) {
      a_rows.insert(a_rows.end(), h, h + kEmbd);
      continue;
    }
    for (int32_t v = 0; v < kVocab; ++v)
      worst = std::max(worst, std::fabs(head(h, v) - lb[batch.pos[t] * kVocab + v]));
  }
  CHECK(worst < 1e-4);

  // a alone, no logits at all: the same rows.
  KVCache kv2 = make_kv(*model, 1);
  CHECK(kv2.reserve(0, a.size()));
  batch.clear();
  for (size_t i = 0; i < a.size(); ++i) batch.add(a[i], i, 0, false, true);
  std::vector<float> alone(a.size() * kEmbd);
  model->forward(batch, kv2, nullptr, alone.data());
  CHECK(max_diff(alone.data(), a_rows.data(), alone.size()) < 1e-5f);
  // and the logits of a's last token agree with its hidden row
  ModelRunner ra(model, {64, DType::F32, 4});
  const std::vector<float> la = ra.eval(a, false);
  worst = 0;
  for (int32_t v = 0; v < kVocab; ++v) worst = std::max(worst, std::fabs(head(&alone[(a.size() - 1) * kEmbd], v) - la[v]));
  CHECK(worst < 1e-4);

  // Rows wanting hidden states need a buffer; want_hidden is empty or as long as the batch.
  KVCache kv3 = make_kv(*model, 1);
  CHECK(kv3.reserve(0, 2));
  batch.clear();
  batch.add(1, 0, 0, false, true);
  CHECK(throws<InvalidRequestError>([&] { model->forward(batch, kv3, nullptr, nullptr); }));
  batch.want_hidden.push_back(0);
  CHECK(throws<InvalidRequestError>([&] { model->forward(batch, kv3, nullptr, alone.data()); }));
}

void check_arch(const Architecture& architecture) {
  const std::string arch = architecture.name;
  const std::string path = write_tiny(architecture, "/tmp/edgellm_test_model_" + arch + ".gguf");
  LoadOptions opts;
  opts.n_threads = 3;
  opts.max_batch_tokens = 16;
  std::shared_ptr<Model> model = Model::load(path, opts);
  CHECK(model->config().arch == arch);
  const std::vector<int32_t> a = {5, 9, 1, 33, 2, 7, 20, 11, 3}, b = {8, 8, 30, 4, 17, 6};

  // Separate runs (one sequence each), all logits.
  ModelRunner ra(model, {64, DType::F32, 4}), rb(model, {64, DType::F32, 4});
  const std::vector<float> la = ra.eval(a, true), lb = rb.eval(b, true);

  // One batch interleaving both sequences, every token wanting logits.
  KVCache kv = make_kv(*model, 2);
  CHECK(kv.reserve(0, a.size()) && kv.reserve(1, b.size()));
  Batch batch;
  std::vector<std::pair<int, int>> order;  // (seq, index)
  for (size_t i = 0; i < std::max(a.size(), b.size()); ++i) {
    if (i < a.size()) order.push_back({0, (int)i});
    if (i < b.size()) order.push_back({1, (int)i});
  }
  for (auto [s, i] : order) batch.add(s ? b[i] : a[i], i, s, true);
  std::vector<float> lab(order.size() * kVocab);
  model->forward(batch, kv, lab.data());
  float worst = 0;
  for (size_t r = 0; r < order.size(); ++r) {
    const auto [s, i] = order[r];
    worst = std::max(worst, max_diff(&lab[r * kVocab], &(s ? lb : la)[i * kVocab], kVocab));
  }
  CHECK(worst < 1e-5f);
  CHECK(kv.n_positions(0) == (int)a.size() && kv.n_positions(1) == (int)b.size());

  // A decode step for both in one batch equals appending to each runner.
  CHECK(kv.reserve(0, a.size() + 1) && kv.reserve(1, b.size() + 1));
  batch.clear();
  batch.add(12, a.size(), 0, true);
  batch.add(13, b.size(), 1, true);
  std::vector<float> step(2 * kVocab);
  model->forward(batch, kv, step.data());
  const std::vector<float> na = ra.eval({12}, false), nb = rb.eval({13}, false);
  CHECK(max_diff(step.data(), na.data(), kVocab) < 1e-5f);
  CHECK(max_diff(step.data() + kVocab, nb.data(), kVocab) < 1e-5f);

  // Bad batches throw typed errors and leave the cache usable.
  batch.clear();
  batch.add(kVocab, a.size() + 1, 0, true);
  CHECK(throws<InvalidRequestError>([&] { model->forward(batch, kv, step.data()); }));
  batch.clear();
  batch.add(1, 40, 0, true);  // pages not reserved
  CHECK(throws<InvalidRequestError>([&] { model->forward(batch, kv, step.data()); }));
  batch.clear();
  batch.add(1, 0, 5, true);  // no such sequence slot
  CHECK(throws<InvalidRequestError>([&] { model->forward(batch, kv, step.data()); }));
  batch.clear();
  for (int i = 0; i < 17; ++i) batch.add(1, i, 0, false);
  CHECK(throws<InvalidRequestError>([&] { model->forward(batch, kv, nullptr); }));
  batch.clear();
  batch.add(1, 0, 0, true);
  CHECK(throws<InvalidRequestError>([&] { model->forward(batch, kv, nullptr); }));
  KVCacheConfig wrong = model->kv_config();
  wrong.n_kv_heads += 1;
  wrong.pages_full = wrong.pages_window = 4;
  KVCache other(wrong);
  CHECK(throws<InvalidRequestError>([&] { model->forward(batch, other, step.data()); }));

  // Context and vocabulary errors of the runner.
  ModelRunner small(model, {8, DType::F16, 4});
  CHECK(throws<ContextLengthError>([&] { small.eval(std::vector<int32_t>(9, 1), false); }));
  CHECK(small.n_past() == 0);
  CHECK(throws<InvalidRequestError>([&] { small.eval({-1}, false); }));
  const std::vector<int32_t> g = small.greedy({1, 2, 3}, 4);
  CHECK(g.size() == 4 && small.n_past() == 3 + 3);

  // Long prompt through chunks with a Q8_0 cache (head dim 32): finite logits.
  ModelRunner q8(model, {128, DType::Q8_0, 4});
  std::vector<int32_t> longp(100);
  for (int i = 0; i < 100; ++i) longp[i] = (i * 7) % kVocab;
  const std::vector<float> lq = q8.eval(longp, true);
  bool finite = true;
  for (float x : lq) finite &= std::isfinite(x);
  CHECK(finite);
  check_hidden_rows(model);
  std::remove(path.c_str());
}

}  // namespace

int main() {
  // gemma2, gemma3, gpt-oss, llama, olmoe, phi3, qwen2, qwen2moe, qwen3, qwen3moe
  for (const Architecture* a : architectures()) check_arch(*a);
  CHECK(architectures().size() >= 10);
  return test_util::report();
}
