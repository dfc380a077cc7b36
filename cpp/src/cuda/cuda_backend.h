// The CUDA backend's host interface (no CUDA headers: included by plain C++ units —
// backend/gpu_offload.{h,cpp} and bindings/bind_cuda.cpp; only the CUDA build defines its
// functions, GpuStatus is every build's).
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "common/dtype.h"
#include "model/layer_executor.h"

namespace edgellm {

struct GpuStatus {
  bool available = false;
  std::string reason;   // why not, when !available ("built without CUDA", "no CUDA device found", ...)
  std::string device;   // "NVIDIA H100 80GB HBM3 (sm_90)"
  size_t free_bytes = 0, total_bytes = 0;
};

}  // namespace edgellm

namespace edgellm::cuda {

// Device 0: present, driver new enough, compute capability >= 7.5, memory figures.
GpuStatus probe();

// The executor for the last n layers, or nullptr with *why_not set (too little memory, a weight
// type or head size the kernels do not handle, a CUDA error while uploading).
std::unique_ptr<LayerExecutor> make_layer_executor(const OffloadRequest& r, int n, std::string* why_not);

// ---- test surface: each runs one kernel on host arrays (copied in and out) ----
// Throws edgellm::Error when no GPU is usable or a CUDA call fails.
// y [ncols][rows] = W [rows][K] (raw blocks of wtype) · x [ncols][K]
void test_matmul(DType wtype, const uint8_t* w, int64_t K, int64_t rows, const float* x, int64_t ncols, float* y);
void test_rmsnorm(const float* x, const float* w, float* y, int64_t rows, int64_t n, float eps);
void test_softmax(float* x, int64_t rows, int64_t n);
void test_gated(bool gelu, const float* gate, const float* up, float* out, int64_t n);
// x [n_tokens][n_heads][head_dim] in place; table [n_tokens][n_rot] (cos, sin) pairs.
void test_rope(bool neox, const float* table, int n_rot, float* x, int64_t n_tokens, int n_heads, int head_dim,
               float scale);
// K/V of n_pages pages of one layer in kv/kv_cache.h's layout, one page table of n_table
// entries shared by all n_tokens queries (q [T][n_head * head_dim_k], positions pos[T]);
// out [T][n_head * head_dim_v]. If k_new/v_new are given ([T][n_kv * head_dim]), they are
// first stored at the tokens' positions (store_kv), and `pages` receives the updated pages.
void test_attention(DType kv_type, uint8_t* pages, int64_t n_pages, int page_size, int n_kv, int head_dim_k,
                    int head_dim_v, const int32_t* table, int64_t n_table, const float* q, int n_head,
                    const int32_t* pos, int64_t n_tokens, int32_t window, const float* k_new, const float* v_new,
                    float* out);

}  // namespace edgellm::cuda
