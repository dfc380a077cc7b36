// Device detection and the kernel test surface (cuda_backend.h).
#include <cstring>
#include <string>
#include <vector>

#include "cuda/cuda_backend.h"
#include "cuda/cuda_kernels.cuh"
#include "cuda/device_buffer.cuh"

namespace edgellm::cuda {

GpuStatus probe() {
  GpuStatus s;
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    cudaGetLastError();
    if (e == cudaErrorNoDevice) s.reason = "no CUDA device found";
    else if (e == cudaErrorInsufficientDriver) s.reason = "the NVIDIA driver is missing or older than this build's CUDA runtime";
    else s.reason = std::string("CUDA unavailable: ") + cudaGetErrorString(e);
    return s;
  }
  if (n == 0) {
    s.reason = "no CUDA device found";
    return s;
  }
  cudaDeviceProp p;
  if (cudaGetDeviceProperties(&p, 0) != cudaSuccess) {
    cudaGetLastError();
    s.reason = "cannot read the properties of CUDA device 0";
    return s;
  }
  s.device = std::string(p.name) + " (sm_" + std::to_string(p.major) + std::to_string(p.minor) + ")";
  if (p.major * 10 + p.minor < 75) {
    s.reason = s.device + " is older than the oldest supported GPU (sm_75, Turing)";
    return s;
  }
  if (cudaSetDevice(0) != cudaSuccess || cudaMemGetInfo(&s.free_bytes, &s.total_bytes) != cudaSuccess) {
    cudaGetLastError();
    s.reason = "cannot create a CUDA context on " + s.device;
    return s;
  }
  s.available = true;
  return s;
}

namespace {

void require_gpu() {
  const GpuStatus s = probe();
  if (!s.available) throw Error("CUDA kernel test: " + s.reason);
}

template <class T>
DeviceBuffer upload(const T* src, size_t n, const char* what) {
  DeviceBuffer b(n * sizeof(T), what);
  if (n) check(cudaMemcpy(b.get(), src, n * sizeof(T), cudaMemcpyHostToDevice), what);
  return b;
}

template <class T>
void download(T* dst, const DeviceBuffer& b, size_t n) {
  check(cudaDeviceSynchronize(), "kernel");
  if (n) check(cudaMemcpy(dst, b.get(), n * sizeof(T), cudaMemcpyDeviceToHost), "download");
}

}  // namespace

void test_matmul(DType wtype, const uint8_t* w, int64_t K, int64_t rows, const float* x, int64_t ncols, float* y) {
  require_gpu();
  if (!matmul_supports(wtype)) throw InvalidRequestError(std::string("CUDA matmul: no kernel for ") + dtype_name(wtype));
  const size_t rb = row_bytes(wtype, K);
  DeviceBuffer dw = upload(w, rb * rows, "weights");
  DeviceBuffer dx = upload(x, static_cast<size_t>(K * ncols), "activations");
  DeviceBuffer dy(sizeof(float) * rows * ncols, "output");
  matmul(wtype, dw.get<uint8_t>(), rb, K, rows, dx.get<float>(), K, ncols, dy.get<float>(), rows, nullptr);
  check(cudaGetLastError(), "matmul launch");
  download(y, dy, static_cast<size_t>(rows * ncols));
}

void test_rmsnorm(const float* x, const float* w, float* y, int64_t rows, int64_t n, float eps) {
  require_gpu();
  DeviceBuffer dx = upload(x, static_cast<size_t>(rows * n), "x");
  DeviceBuffer dw = w ? upload(w, static_cast<size_t>(n), "w") : DeviceBuffer();
  rmsnorm(dx.get<float>(), w ? dw.get<float>() : nullptr, dx.get<float>(), rows, n, eps, nullptr);
  check(cudaGetLastError(), "rmsnorm launch");
  download(y, dx, static_cast<size_t>(rows * n));
}

void test_softmax(float* x, int64_t rows, int64_t n) {
  require_gpu();
  DeviceBuffer dx = upload(x, static_cast<size_t>(rows * n), "x");
  softmax(dx.get<float>(), rows, n, nullptr);
  check(cudaGetLastError(), "softmax launch");
  download(x, dx, static_cast<size_t>(rows * n));
}

void test_gated(bool gelu, const float* gate, const float* up, float* out, int64_t n) {
  require_gpu();
  DeviceBuffer dg = upload(gate, static_cast<size_t>(n), "gate");
  DeviceBuffer du = upload(up, static_cast<size_t>(n), "up");
  gated(gelu, dg.get<float>(), du.get<float>(), dg.get<float>(), n, nullptr);
  check(cudaGetLastError(), "gated launch");
  download(out, dg, static_cast<size_t>(n));
}

void test_rope(bool neox, const float* table, int n_rot, float* x, int64_t n_tokens, int n_heads, int head_dim,
               float scale) {
  require_gpu();
  DeviceBuffer dt = upload(table, static_cast<size_t>(n_tokens * n_rot), "table");
  DeviceBuffer dx = upload(x, static_cast<size_t>(n_tokens * n_heads * head_dim), "x");
  rope(neox, dt.get<float>(), n_rot, dx.get<float>(), n_tokens, n_heads, head_dim, scale, nullptr);
  check(cudaGetLastError(), "rope launch");
  download(x, dx, static_cast<size_t>(n_tokens * n_heads * head_dim));
}

void test_attention(DType kv_type, uint8_t* pages, int64_t n_pages, int page_size, int n_kv, int head_dim_k,
                    int head_dim_v, const int32_t* table, int64_t n_table, const float* q, int n_head,
                    const int32_t* pos, int64_t n_tokens, int32_t window, const float* k_new, const float* v_new,
                    float* out) {
  require_gpu();
  if (!kv_type_supported(kv_type)) throw InvalidRequestError(std::string("CUDA attention: KV type ") + dtype_name(kv_type));
  if (head_dim_k > kMaxHeadDim || head_dim_v > kMaxHeadDim || n_kv <= 0 || n_head % n_kv != 0)
    throw InvalidRequestError("CUDA attention: head dims must be <= 256 and n_head a multiple of n_kv");
  KvLayerView kv{};
  kv.k_row = row_bytes(kv_type, head_dim_k);
  kv.v_row = row_bytes(kv_type, head_dim_v);
  kv.page_size = page_size;
  kv.n_kv = n_kv;
  kv.head_dim_k = head_dim_k;
  kv.head_dim_v = head_dim_v;
  kv.type = kv_type;
  kv.page_stride = static_cast<size_t>(n_kv) * page_size * (kv.k_row + kv.v_row);
  const size_t page_bytes = kv.page_stride * n_pages;
  DeviceBuffer dpages = upload(pages, page_bytes, "KV pages");
  kv.base = dpages.get<uint8_t>();
  DeviceBuffer dtable = upload(table, static_cast<size_t>(n_table), "page table");
  std::vector<int32_t> offsets(n_tokens, 0);  // every token reads the one table
  DeviceBuffer doff = upload(offsets.data(), offsets.size(), "table offsets");
  DeviceBuffer dpos = upload(pos, static_cast<size_t>(n_tokens), "positions");
  DeviceBuffer dq = upload(q, static_cast<size_t>(n_tokens * n_head * head_dim_k), "q");
  DeviceBuffer dout(sizeof(float) * n_tokens * n_head * head_dim_v, "out");
  if (k_new && v_new) {
    DeviceBuffer dk = upload(k_new, static_cast<size_t>(n_tokens * n_kv * head_dim_k), "k");
    DeviceBuffer dv = upload(v_new, static_cast<size_t>(n_tokens * n_kv * head_dim_v), "v");
    store_kv(kv, dk.get<float>(), dv.get<float>(), dpos.get<int32_t>(), doff.get<int32_t>(), dtable.get<int32_t>(),
             n_tokens, nullptr);
    check(cudaGetLastError(), "store_kv launch");
    check(cudaDeviceSynchronize(), "store_kv");
  }
  paged_attention(kv, dq.get<float>(), static_cast<int64_t>(n_head) * head_dim_k, n_head, dpos.get<int32_t>(),
                  doff.get<int32_t>(), dtable.get<int32_t>(), window, n_tokens, dout.get<float>(),
                  static_cast<int64_t>(n_head) * head_dim_v, nullptr);
  check(cudaGetLastError(), "attention launch");
  download(out, dout, static_cast<size_t>(n_tokens * n_head * head_dim_v));
  if (k_new && v_new) download(pages, dpages, page_bytes);
}

}  // namespace edgellm::cuda
