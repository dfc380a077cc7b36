// The CUDA kernels one at a time on numpy data (tests/test_cuda.py compares each with the CPU
// reference). Compiled into every build: without CUDA every entry point raises EdgeLLMError
// "built without CUDA".
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <cstring>
#include <optional>
#include <string>

#include "common/dtype.h"
#include "common/errors.h"
#include "testing.h"

#ifdef EDGELLM_HAVE_CUDA
#include "cuda/cuda_backend.h"
#endif

namespace py = pybind11;

namespace edgellm::bindings {
namespace {

using FloatArray = py::array_t<float, py::array::c_style | py::array::forcecast>;
using IntArray = py::array_t<int32_t, py::array::c_style | py::array::forcecast>;
using ByteArray = py::array_t<uint8_t, py::array::c_style | py::array::forcecast>;

DType dtype_named(const std::string& name) {
  for (uint32_t id = 0; id < static_cast<uint32_t>(kDTypeIdLimit); ++id) {
    const DTypeInfo* info = dtype_info(id);
    if (info && name == info->name) return info->type;
  }
  throw InvalidRequestError("unknown tensor type '" + name + "'");
}

void need(bool ok, const std::string& what) {
  if (!ok) throw InvalidRequestError(what);
}

#ifndef EDGELLM_HAVE_CUDA
[[noreturn]] void no_cuda() { throw Error("built without CUDA (rebuild with -DEDGELLM_CUDA=ON)"); }
#endif

py::array_t<float> cuda_matmul(const std::string& wtype, ByteArray w, int64_t K, int64_t rows, FloatArray x) {
  const DType t = dtype_named(wtype);
  need(x.ndim() == 2 && x.shape(1) == K, "cuda_matmul: x must be [ncols, K]");
  need(K > 0 && K % dtype_info(t).block_elems == 0 && K % 32 == 0, "cuda_matmul: K must be a multiple of the block size");
  need(static_cast<size_t>(w.size()) == row_bytes(t, K) * rows, "cuda_matmul: w must hold rows × row_bytes(K) bytes");
  const int64_t ncols = x.shape(0);
  py::array_t<float> y({ncols, rows});
#ifdef EDGELLM_HAVE_CUDA
  cuda::test_matmul(t, w.data(), K, rows, x.data(), ncols, y.mutable_data());
#else
  no_cuda();
#endif
  return y;
}

py::array_t<float> cuda_rmsnorm(FloatArray x, std::optional<FloatArray> w, float eps) {
  need(x.ndim() == 2, "cuda_rmsnorm: x must be [rows, n]");
  const int64_t rows = x.shape(0), n = x.shape(1);
  if (w) need(w->ndim() == 1 && w->shape(0) == n, "cuda_rmsnorm: w must have n elements");
  py::array_t<float> y({rows, n});
#ifdef EDGELLM_HAVE_CUDA
  cuda::test_rmsnorm(x.data(), w ? w->data() : nullptr, y.mutable_data(), rows, n, eps);
#else
  no_cuda();
#endif
  return y;
}

py::array_t<float> cuda_softmax(FloatArray x) {
  need(x.ndim() == 2, "cuda_softmax: x must be [rows, n]");
  py::array_t<float> y({x.shape(0), x.shape(1)});
  std::memcpy(y.mutable_data(), x.data(), sizeof(float) * x.size());
#ifdef EDGELLM_HAVE_CUDA
  cuda::test_softmax(y.mutable_data(), x.shape(0), x.shape(1));
#else
  no_cuda();
#endif
  return y;
}

py::array_t<float> cuda_gated(const std::string& act, FloatArray gate, FloatArray up) {
  need(act == "silu" || act == "gelu", "cuda_gated: act must be 'silu' or 'gelu'");
  need(gate.ndim() == 1 && up.ndim() == 1 && gate.shape(0) == up.shape(0), "cuda_gated: gate and up: same-length 1-D");
  py::array_t<float> y(gate.shape(0));
#ifdef EDGELLM_HAVE_CUDA
  cuda::test_gated(act == "gelu", gate.data(), up.data(), y.mutable_data(), gate.shape(0));
#else
  no_cuda();
#endif
  return y;
}

py::array_t<float> cuda_rope(const std::string& mode, FloatArray table, FloatArray x, float scale) {
  need(mode == "norm" || mode == "neox", "cuda_rope: mode must be 'norm' or 'neox'");
  need(x.ndim() == 3 && table.ndim() == 2 && table.shape(0) == x.shape(0), "cuda_rope: x [T, heads, head_dim], table [T, n_rot]");
  const int n_rot = static_cast<int>(table.shape(1));
  need(n_rot % 2 == 0 && n_rot <= x.shape(2), "cuda_rope: n_rot must be even and <= head_dim");
  py::array_t<float> y({x.shape(0), x.shape(1), x.shape(2)});
  std::memcpy(y.mutable_data(), x.data(), sizeof(float) * x.size());
#ifdef EDGELLM_HAVE_CUDA
  cuda::test_rope(mode == "neox", table.data(), n_rot, y.mutable_data(), x.shape(0), static_cast<int>(x.shape(1)),
                  static_cast<int>(x.shape(2)), scale);
#else
  no_cuda();
#endif
  return y;
}

py::tuple cuda_attention(const std::string& kv_type, ByteArray pages, int page_size, int n_kv, int head_dim_k,
                         int head_dim_v, IntArray table, FloatArray q, IntArray pos, int window,
                         std::optional<FloatArray> k_new, std::optional<FloatArray> v_new) {
  const DType t = dtype_named(kv_type);
  need(q.ndim() == 3 && q.shape(2) == head_dim_k, "cuda_attention: q must be [T, n_head, head_dim_k]");
  need(pos.ndim() == 1 && pos.shape(0) == q.shape(0), "cuda_attention: one position per query token");
  const int64_t T = q.shape(0);
  const int n_head = static_cast<int>(q.shape(1));
  const size_t page_bytes = static_cast<size_t>(n_kv) * page_size * (row_bytes(t, head_dim_k) + row_bytes(t, head_dim_v));
  need(page_bytes > 0 && pages.size() % page_bytes == 0, "cuda_attention: pages must be whole pages");
  const bool store = k_new.has_value();
  need(store == v_new.has_value(), "cuda_attention: give both k_new and v_new or neither");
  if (store)
    need(k_new->size() == T * n_kv * head_dim_k && v_new->size() == T * n_kv * head_dim_v,
         "cuda_attention: k_new [T, n_kv, head_dim_k], v_new [T, n_kv, head_dim_v]");
  for (int64_t i = 0; i < T; ++i) {
    need(pos.at(i) >= 0 && pos.at(i) / page_size < table.size(), "cuda_attention: a position lies past the page table");
  }
  for (int64_t i = 0; i < table.size(); ++i)
    need(table.at(i) >= 0 && table.at(i) < static_cast<int32_t>(pages.size() / page_bytes),
         "cuda_attention: a page id lies outside the pages");
  py::array_t<uint8_t> pages_out(pages.size());
  std::memcpy(pages_out.mutable_data(), pages.data(), pages.size());
  py::array_t<float> out({T, static_cast<int64_t>(n_head), static_cast<int64_t>(head_dim_v)});
#ifdef EDGELLM_HAVE_CUDA
  cuda::test_attention(t, pages_out.mutable_data(), static_cast<int64_t>(pages.size() / page_bytes), page_size, n_kv,
                       head_dim_k, head_dim_v, table.data(), table.size(), q.data(), n_head, pos.data(), T, window,
                       store ? k_new->data() : nullptr, store ? v_new->data() : nullptr, out.mutable_data());
#else
  no_cuda();
#endif
  return py::make_tuple(out, pages_out);
}

}  // namespace

void bind_cuda_ops(py::module_& m) {
  m.def("cuda_matmul", &cuda_matmul, py::arg("wtype"), py::arg("w"), py::arg("K"), py::arg("rows"), py::arg("x"),
        "GPU matmul test: y [ncols, rows] = W (rows × K raw blocks of wtype) · x [ncols, K] (f32).");
  m.def("cuda_rmsnorm", &cuda_rmsnorm, py::arg("x"), py::arg("w") = py::none(), py::arg("eps") = 1e-5f);
  m.def("cuda_softmax", &cuda_softmax, py::arg("x"));
  m.def("cuda_gated", &cuda_gated, py::arg("act"), py::arg("gate"), py::arg("up"));
  m.def("cuda_rope", &cuda_rope, py::arg("mode"), py::arg("table"), py::arg("x"), py::arg("scale") = 1.0f);
  m.def("cuda_attention", &cuda_attention, py::arg("kv_type"), py::arg("pages"), py::arg("page_size"), py::arg("n_kv"),
        py::arg("head_dim_k"), py::arg("head_dim_v"), py::arg("table"), py::arg("q"), py::arg("pos"),
        py::arg("window") = 0, py::arg("k_new") = py::none(), py::arg("v_new") = py::none(),
        "GPU paged attention test over one layer's pages (kv/kv_cache.h layout): returns (out [T, n_head, "
        "head_dim_v], pages after storing k_new/v_new when given).");
}

}  // namespace edgellm::bindings
