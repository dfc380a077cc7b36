// The CUDA LayerExecutor (model/layer_executor.h): the last n layers of a decoder on the GPU.
//
// Each layer is run_layer (model/architecture.h), the same definition and LayerSpec the CPU
// runs, over DevicePass below: the GPU counterparts of model/forward_pass.h's building blocks.
//   rmsnorm          h = rmsnorm(x) * norm per token (also in place on a sub-layer's output)
//   self_attention   q, k, v = Wq h (+bq), Wk h (+bk), Wv h (+bv); per-head q/k norms if bound;
//                    RoPE (NORM or NEOX, the layer's local or global table), q *= attn_scale;
//                    K/V stored in device pages; out = Wo · paged_attention (+bo)
//   gated_ffn        out = Wdown (act(Wgate h + b) ⊙ (Wup h + b)) (+b)
//   add_residual     x += out
//
// Device KV pages mirror the host KVCache page ids for the offloaded layers: the host page
// tables are copied up every forward, and KVCache::copy_page_hook mirrors copy-on-write.
#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "cuda/cuda_backend.h"
#include "cuda/cuda_kernels.cuh"
#include "cuda/device_buffer.cuh"
#include "model/architecture.h"
#include "model/rope.h"

namespace edgellm::cuda {
namespace {

struct DevMatrix {
  DType type = DType::F32;
  const uint8_t* data = nullptr;
  size_t row_bytes = 0;
  int64_t n_in = 0, n_out = 0;
};

// A layer's weights in device memory, members named as in LayerWeights (run_layer reads them).
struct DevLayer {
  DevMatrix wq, wk, wv, wo, gate, up, down;
  const float *attn_norm = nullptr, *bq = nullptr, *bk = nullptr, *bv = nullptr, *bo = nullptr;
  const float *q_norm = nullptr, *k_norm = nullptr, *post_attn_norm = nullptr, *ffn_norm = nullptr;
  const float *b_gate = nullptr, *b_up = nullptr, *b_down = nullptr, *post_ffn_norm = nullptr;
};

// Device pages of the offloaded layers for one host KVCache (owned by that cache's copy hook).
struct DeviceKv {
  std::vector<DeviceBuffer> layer;  // by offloaded layer index (il - first)
  std::vector<int> group;           // group of each offloaded layer
  size_t page_stride = 0;
  int64_t pages[2] = {0, 0};

  void copy_page(int g, int32_t src, int32_t dst) const {
    for (size_t i = 0; i < layer.size(); ++i) {
      if (group[i] != g) continue;
      uint8_t* base = layer[i].get<uint8_t>();
      check(cudaMemcpy(base + dst * page_stride, base + src * page_stride, page_stride, cudaMemcpyDeviceToDevice),
            "KV page copy");
    }
  }
};

// Copy-on-write and fork copy pages in the host cache; the hook repeats each copy on the device.
// The hook owns the device pages, so they live exactly as long as the host cache (the executor
// only holds them weakly, by cache address).
void install_copy_hook(KVCache& kv, std::shared_ptr<DeviceKv> d) {
  kv.copy_page_hook = [d = std::move(d)](KvGroup g, int32_t src, int32_t dst) { d->copy_page(kv_group_index(g), src, dst); };
}

// Device scratch of one executor, sized for max_batch_tokens at load.
struct DeviceScratch {
  DeviceBuffer x, h, out, q, k, v, attn, gate, up, rope_table[2], pos, table_off[2], tables;
};

// The building blocks run_layer is written with, on the GPU, for one run() over T tokens whose
// positions, RoPE tables and page tables are already in the scratch.
class DevicePass {
 public:
  DevicePass(const ModelConfig& c, DeviceScratch& sc, const DeviceKv& dkv, const KVCache& kv, int first, int T,
             cudaStream_t stream)
      : x(sc.x.get<float>()), h(sc.h.get<float>()), out(sc.out.get<float>()), c_(c), sc_(sc), dkv_(dkv), kv_(kv),
        first_(first), T_(T), s_(stream) {}

  float* x;
  float* h;
  float* out;

  void rmsnorm(const float* src, const float* w, float* dst) {
    cuda::rmsnorm(src, w, dst, T_, c_.n_embd, c_.rms_eps, s_);
  }
  void add_residual(const float* src) { add(src, x, static_cast<int64_t>(T_) * c_.n_embd, s_); }
  void self_attention(const DevLayer& w, int il);
  void gated_ffn(const DevLayer& w, int il, FfnActivation act);

 private:
  void mm(const DevMatrix& w, const float* in, float* y) {
    matmul(w.type, w.data, w.row_bytes, w.n_in, w.n_out, in, w.n_in, T_, y, w.n_out, s_);
  }

  const ModelConfig& c_;
  DeviceScratch& sc_;
  const DeviceKv& dkv_;
  const KVCache& kv_;
  int first_, T_;
  cudaStream_t s_;
};

void DevicePass::self_attention(const DevLayer& w, int il) {
  const int T = T_;
  float* q = sc_.q.get<float>();
  float* k = sc_.k.get<float>();
  float* v = sc_.v.get<float>();
  const float eps = c_.rms_eps;
  mm(w.wq, h, q);
  mm(w.wk, h, k);
  mm(w.wv, h, v);
  if (w.bq) add_bias(w.bq, q, T, c_.n_embd_q(), s_);
  if (w.bk) add_bias(w.bk, k, T, c_.n_embd_k(), s_);
  if (w.bv) add_bias(w.bv, v, T, c_.n_embd_v(), s_);
  if (w.q_norm) cuda::rmsnorm(q, w.q_norm, q, static_cast<int64_t>(T) * c_.n_head, c_.head_dim_k, eps, s_);
  if (w.k_norm) cuda::rmsnorm(k, w.k_norm, k, static_cast<int64_t>(T) * c_.n_head_kv, c_.head_dim_k, eps, s_);
  const int variant = c_.is_swa(il) ? 1 : 0;
  const bool neox = c_.rope_type == RopeType::Neox;
  const float* table = sc_.rope_table[variant].get<float>();
  rope(neox, table, c_.n_rot, q, T, c_.n_head, c_.head_dim_k, c_.attn_scale, s_);
  rope(neox, table, c_.n_rot, k, T, c_.n_head_kv, c_.head_dim_k, 1.0f, s_);

  const int g = kv_group_index(kv_.group_of(il));
  KvLayerView view{};
  view.base = dkv_.layer[il - first_].get<uint8_t>();
  view.page_stride = dkv_.page_stride;
  view.k_row = kv_.k_row_bytes();
  view.v_row = kv_.v_row_bytes();
  view.page_size = kv_.page_size();
  view.n_kv = c_.n_head_kv;
  view.head_dim_k = c_.head_dim_k;
  view.head_dim_v = c_.head_dim_v;
  view.type = kv_.dtype();
  const int32_t* pos = sc_.pos.get<int32_t>();
  const int32_t* off = sc_.table_off[g].get<int32_t>();
  const int32_t* tables = sc_.tables.get<int32_t>();
  store_kv(view, k, v, pos, off, tables, T, s_);
  paged_attention(view, q, c_.n_embd_q(), c_.n_head, pos, off, tables, c_.layer_window[il], T, sc_.attn.get<float>(),
                  c_.n_embd_attn(), s_);
  mm(w.wo, sc_.attn.get<float>(), out);
  if (w.bo) add_bias(w.bo, out, T, c_.n_embd, s_);
}

void DevicePass::gated_ffn(const DevLayer& w, int il, FfnActivation act) {
  float* gate = sc_.gate.get<float>();
  float* up = sc_.up.get<float>();
  mm(w.gate, h, gate);
  mm(w.up, h, up);
  if (w.b_gate) add_bias(w.b_gate, gate, T_, c_.n_ff, s_);
  if (w.b_up) add_bias(w.b_up, up, T_, c_.n_ff, s_);
  gated(act == FfnActivation::GeluTanh, gate, up, gate, static_cast<int64_t>(T_) * c_.n_ff, s_);
  mm(w.down, gate, out);
  if (w.b_down) add_bias(w.b_down, out, T_, c_.n_embd, s_);
}

class CudaLayerExecutor final : public LayerExecutor {
 public:
  CudaLayerExecutor(const OffloadRequest& r, int n, const std::string& device);
  ~CudaLayerExecutor() override {
    if (stream_) cudaStreamDestroy(stream_);
  }
  int first_layer() const override { return first_; }
  std::string describe() const override {
    return "CUDA " + device_ + ": layers " + std::to_string(first_) + ".." + std::to_string(c_.n_layer - 1);
  }
  void run(const Batch& batch, KVCache& kv, float* x) override;

 private:
  const float* upload_vector(const Vector& v);
  DevMatrix upload_matrix(const Matrix& m);
  std::shared_ptr<DeviceKv> device_kv(KVCache& kv);

  ModelConfig c_;
  LayerSpec spec_;
  int first_;
  std::string device_;
  cudaStream_t stream_ = nullptr;
  std::vector<DeviceBuffer> weights_;
  std::vector<DevLayer> layers_;  // by il - first_
  Rope rope_[2];
  int max_tokens_;
  DeviceScratch sc_;
  std::vector<float> host_rope_[2];
  std::vector<int32_t> host_tables_, host_off_[2];
  // Device pages per live host cache.
  std::map<const KVCache*, std::weak_ptr<DeviceKv>> kvs_;
};

CudaLayerExecutor::CudaLayerExecutor(const OffloadRequest& r, int n, const std::string& device)
    : c_(*r.config), spec_(*r.layer), first_(r.config->n_layer - n), device_(device),
      max_tokens_(r.max_batch_tokens) {
  check(cudaSetDevice(0), "set device");
  check(cudaStreamCreate(&stream_), "stream create");
  rope_[0] = Rope(c_.rope_type, c_.n_rot, c_.rope_global, r.rope_freq_factors);
  rope_[1] = Rope(c_.rope_type, c_.n_rot, c_.rope_local, r.rope_freq_factors);
  layers_.resize(n);
  for (int i = 0; i < n; ++i) {
    const LayerWeights& w = (*r.layers)[first_ + i];
    DevLayer& d = layers_[i];
    d.wq = upload_matrix(w.wq);
    d.wk = upload_matrix(w.wk);
    d.wv = upload_matrix(w.wv);
    d.wo = upload_matrix(w.wo);
    d.gate = upload_matrix(w.gate);
    d.up = upload_matrix(w.up);
    d.down = upload_matrix(w.down);
    d.attn_norm = upload_vector(w.attn_norm);
    d.bq = upload_vector(w.bq);
    d.bk = upload_vector(w.bk);
    d.bv = upload_vector(w.bv);
    d.bo = upload_vector(w.bo);
    d.q_norm = upload_vector(w.q_norm);
    d.k_norm = upload_vector(w.k_norm);
    d.post_attn_norm = upload_vector(w.post_attn_norm);
    d.ffn_norm = upload_vector(w.ffn_norm);
    d.b_gate = upload_vector(w.b_gate);
    d.b_up = upload_vector(w.b_up);
    d.b_down = upload_vector(w.b_down);
    d.post_ffn_norm = upload_vector(w.post_ffn_norm);
  }
  const size_t T = static_cast<size_t>(max_tokens_), f = sizeof(float);
  sc_.x = DeviceBuffer(T * c_.n_embd * f, "activations");
  sc_.h = DeviceBuffer(T * c_.n_embd * f, "activations");
  sc_.out = DeviceBuffer(T * c_.n_embd * f, "activations");
  sc_.q = DeviceBuffer(T * c_.n_embd_q() * f, "queries");
  sc_.k = DeviceBuffer(T * c_.n_embd_k() * f, "keys");
  sc_.v = DeviceBuffer(T * c_.n_embd_v() * f, "values");
  sc_.attn = DeviceBuffer(T * c_.n_embd_attn() * f, "attention output");
  sc_.gate = DeviceBuffer(T * c_.n_ff * f, "FFN activations");
  sc_.up = DeviceBuffer(T * c_.n_ff * f, "FFN activations");
  for (int g = 0; g < 2; ++g) {
    sc_.rope_table[g] = DeviceBuffer(T * std::max(c_.n_rot, 2) * f, "RoPE table");
    sc_.table_off[g] = DeviceBuffer(T * sizeof(int32_t), "page table offsets");
  }
  sc_.pos = DeviceBuffer(T * sizeof(int32_t), "positions");
  check(cudaDeviceSynchronize(), "weight upload");
}

const float* CudaLayerExecutor::upload_vector(const Vector& v) {
  if (!v) return nullptr;
  weights_.emplace_back(sizeof(float) * v.n, "a weight vector");
  check(cudaMemcpy(weights_.back().get(), v.data, sizeof(float) * v.n, cudaMemcpyHostToDevice), "weight upload");
  return weights_.back().get<float>();
}

DevMatrix CudaLayerExecutor::upload_matrix(const Matrix& m) {
  DevMatrix d;
  d.type = m.type;
  d.row_bytes = m.row_bytes;
  d.n_in = m.n_in;
  d.n_out = m.n_out;
  const size_t bytes = m.row_bytes * static_cast<size_t>(m.n_out);
  weights_.emplace_back(bytes, m.info ? m.info->name.c_str() : "a weight matrix");
  check(cudaMemcpy(weights_.back().get(), m.data, bytes, cudaMemcpyHostToDevice), "weight upload");
  d.data = weights_.back().get<uint8_t>();
  return d;
}

std::shared_ptr<DeviceKv> CudaLayerExecutor::device_kv(KVCache& kv) {
  const KVCacheConfig& kc = kv.config();
  const size_t stride = static_cast<size_t>(kc.n_kv_heads) * kc.page_size * (kv.k_row_bytes() + kv.v_row_bytes());
  auto it = kvs_.find(&kv);
  if (it != kvs_.end()) {
    // Alive means this very cache: its hook is the pages' owner and dies with it.
    if (std::shared_ptr<DeviceKv> d = it->second.lock()) return d;
    kvs_.erase(it);
  }
  for (auto e = kvs_.begin(); e != kvs_.end();) e = e->second.expired() ? kvs_.erase(e) : std::next(e);
  if (!kv_type_supported(kv.dtype()))
    throw InvalidRequestError(std::string("CUDA: KV cache type ") + dtype_name(kv.dtype()) + " is not supported on the GPU");
  auto d = std::make_shared<DeviceKv>();
  d->page_stride = stride;
  d->pages[0] = kv.pages_total(KvGroup::Full);
  d->pages[1] = kv.pages_total(KvGroup::Window);
  for (int il = first_; il < c_.n_layer; ++il) {
    const int g = kv_group_index(kv.group_of(il));
    d->group.push_back(g);
    d->layer.emplace_back(stride * static_cast<size_t>(d->pages[g]),
                          "the KV cache of the GPU layers (load with a smaller n_gpu_layers or kv_memory)");
  }
  install_copy_hook(kv, d);
  kvs_[&kv] = d;
  return d;
}

void CudaLayerExecutor::run(const Batch& batch, KVCache& kv, float* x) {
  const int T = batch.size();
  if (T == 0) return;
  if (T > max_tokens_)
    throw InvalidRequestError("CUDA: batch of " + std::to_string(T) + " tokens exceeds max_batch_tokens = " +
                              std::to_string(max_tokens_));
  const std::shared_ptr<DeviceKv> dkv_owner = device_kv(kv);
  const DeviceKv& dkv = *dkv_owner;

  // Page tables of the batch's sequences, per group, flattened; each token points at its own.
  host_tables_.clear();
  for (int g = 0; g < 2; ++g) {
    host_off_[g].assign(T, 0);
    int rep = -1;  // an offloaded layer of this group stands for its page tables
    for (int il = first_; il < c_.n_layer && rep < 0; ++il)
      if (kv_group_index(kv.group_of(il)) == g) rep = il;
    if (rep < 0) continue;
    std::map<int32_t, int32_t> seen;
    for (int t = 0; t < T; ++t) {
      const int32_t s = batch.seq[t];
      auto it = seen.find(s);
      if (it == seen.end()) {
        const std::vector<int32_t>& table = kv.page_table(rep, s);
        it = seen.emplace(s, static_cast<int32_t>(host_tables_.size())).first;
        host_tables_.insert(host_tables_.end(), table.begin(), table.end());
      }
      host_off_[g][t] = it->second;
    }
  }
  if (host_tables_.empty()) host_tables_.push_back(0);
  if (sc_.tables.bytes() < host_tables_.size() * sizeof(int32_t))
    sc_.tables = DeviceBuffer(std::max<size_t>(host_tables_.size() * 2, 1024) * sizeof(int32_t), "page tables");

  for (int v = 0; v < 2; ++v) {
    const int stride = rope_[v].table_stride();
    host_rope_[v].resize(static_cast<size_t>(T) * std::max(stride, 1));
    for (int t = 0; t < T; ++t) rope_[v].fill(batch.pos[t], host_rope_[v].data() + static_cast<size_t>(t) * stride);
    check(cudaMemcpyAsync(sc_.rope_table[v].get(), host_rope_[v].data(), host_rope_[v].size() * sizeof(float),
                          cudaMemcpyHostToDevice, stream_), "upload");
    check(cudaMemcpyAsync(sc_.table_off[v].get(), host_off_[v].data(), T * sizeof(int32_t), cudaMemcpyHostToDevice,
                          stream_), "upload");
  }
  check(cudaMemcpyAsync(sc_.tables.get(), host_tables_.data(), host_tables_.size() * sizeof(int32_t),
                        cudaMemcpyHostToDevice, stream_), "upload");
  check(cudaMemcpyAsync(sc_.pos.get(), batch.pos.data(), T * sizeof(int32_t), cudaMemcpyHostToDevice, stream_), "upload");
  const size_t x_bytes = static_cast<size_t>(T) * c_.n_embd * sizeof(float);
  check(cudaMemcpyAsync(sc_.x.get(), x, x_bytes, cudaMemcpyHostToDevice, stream_), "activation upload");

  DevicePass pass(c_, sc_, dkv, kv, first_, T, stream_);
  for (int il = first_; il < c_.n_layer; ++il) run_layer(spec_, pass, layers_[il - first_], il);

  check(cudaGetLastError(), "kernel launch");
  check(cudaMemcpyAsync(x, sc_.x.get(), x_bytes, cudaMemcpyDeviceToHost, stream_), "activation download");
  check(cudaStreamSynchronize(stream_), "forward");
}

// Bytes the executor will allocate for n layers (weights + scratch), before any allocation.
size_t bytes_needed(const OffloadRequest& r, int n) {
  const ModelConfig& c = *r.config;
  size_t total = 0;
  for (int il = c.n_layer - n; il < c.n_layer; ++il) {
    const LayerWeights& w = (*r.layers)[il];
    for (const Matrix* m : w.matrices()) total += m->row_bytes * static_cast<size_t>(m->n_out);
    for (const Vector* v : w.vectors()) total += sizeof(float) * v->n;
  }
  const size_t T = static_cast<size_t>(r.max_batch_tokens);
  total += sizeof(float) * T * (3 * c.n_embd + c.n_embd_q() + c.n_embd_k() + c.n_embd_v() + c.n_embd_attn() +
                                2 * c.n_ff + 2 * c.n_rot);
  return total;
}

}  // namespace

std::unique_ptr<LayerExecutor> make_layer_executor(const OffloadRequest& r, int n, std::string* why_not) {
  const ModelConfig& c = *r.config;
  if (c.head_dim_k > kMaxHeadDim || c.head_dim_v > kMaxHeadDim) {
    *why_not = "head size " + std::to_string(std::max(c.head_dim_k, c.head_dim_v)) +
               " exceeds the CUDA attention kernel's " + std::to_string(kMaxHeadDim);
    return nullptr;
  }
  if (c.attn_softcap > 0.0f) {
    *why_not = "attention logit soft-capping (" + c.arch + ") is not in the CUDA attention kernel";
    return nullptr;
  }
  for (int il = c.n_layer - n; il < c.n_layer; ++il) {
    const LayerWeights& w = (*r.layers)[il];
    if (w.sinks) {  // the CUDA attention kernel has no sink term: never run such a layer without it
      *why_not = "attention sinks (" + c.arch + ", layer " + std::to_string(il) +
                 ") are not in the CUDA attention kernel";
      return nullptr;
    }
    for (const Matrix* m : w.matrices())
      if (!matmul_supports(m->type)) {
        *why_not = "tensor " + (m->info ? m->info->name : std::string("of layer ") + std::to_string(il)) +
                   " has type " + dtype_name(m->type) + ", which the CUDA matmul does not handle";
        return nullptr;
      }
  }
  const GpuStatus s = probe();
  const size_t need = bytes_needed(r, n);
  // Leave room for the KV cache pages and the CUDA context's own use.
  if (need + (need >> 3) + (size_t(256) << 20) > s.free_bytes) {
    *why_not = "too little GPU memory on " + s.device + ": " + std::to_string(n) + " layers need " +
               std::to_string(need >> 20) + " MiB, " + std::to_string(s.free_bytes >> 20) + " MiB free";
    return nullptr;
  }
  try {
    auto ex = std::make_unique<CudaLayerExecutor>(r, n, s.device);
    std::fprintf(stderr, "edgellm: %s\n", ex->describe().c_str());
    return ex;
  } catch (const Error& e) {
    *why_not = e.what();
    return nullptr;
  }
}

}  // namespace edgellm::cuda
