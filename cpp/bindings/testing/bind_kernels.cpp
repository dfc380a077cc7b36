// Test surface of the kernel tables: run one entry of a named ISA's table on numpy data, so
// tests/test_kernels.py can compare every SIMD table against the scalar one (edgellm._testing).
//   kernel_matmul(isa, wtype, w, K, rows, x[ncols, K], r0=0, r1=rows, quantize_isa=None) -> y[ncols, rows]
//   kernel_quantize(isa, act_type, x[n]) -> bytes
//   kernel_op(isa, name, a, b=None, scalar=0.0) -> ndarray or float
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "common/errors.h"
#include "kernels/kernels.h"
#include "quant/quant.h"
#include "testing.h"

namespace py = pybind11;

namespace edgellm::bindings {
namespace {

using FloatArray = py::array_t<float, py::array::c_style | py::array::forcecast>;

const kernels::KernelTable& table_named(const std::string& name) {
  using kernels::Isa;
  for (Isa isa : kernels::kAllIsas) {
    if (name != kernels::isa_name(isa)) continue;
    const kernels::KernelTable* t = kernels::table_for(isa);
    if (!t) throw InvalidRequestError("isa '" + name + "': not compiled in or not supported by this CPU");
    return *t;
  }
  throw InvalidRequestError("isa '" + name + "': unknown (scalar, avx2, avx512, neon, neon-dotprod, neon-i8mm)");
}

DType dtype_named(const std::string& name, const char* param) {
  for (uint32_t id = 0; id < static_cast<uint32_t>(kDTypeIdLimit); ++id)
    if (const DTypeInfo* i = dtype_info(id); i && name == i->name) return i->type;
  throw InvalidRequestError(std::string(param) + " '" + name + "': unknown type name");
}

void check_multiple(DType t, int64_t n, const char* param) {
  const int64_t be = dtype_info(t).block_elems;
  if (n <= 0 || n % be != 0)
    throw InvalidRequestError(std::string(param) + " = " + std::to_string(n) + " must be a positive multiple of " +
                              std::to_string(be) + " for " + dtype_name(t));
}

py::array_t<float> kernel_matmul(const std::string& isa, const std::string& wtype, py::bytes w, int64_t K,
                                 int64_t rows, FloatArray x, int64_t r0, std::optional<int64_t> r1_opt,
                                 std::optional<std::string> quantize_isa) {
  const kernels::KernelTable& t = table_named(isa);
  const kernels::KernelTable& tq = table_named(quantize_isa.value_or(isa));
  const DType wt = dtype_named(wtype, "wtype");
  const DType at = quant::vec_dot_type(wt);
  if (!t.matmul[static_cast<int>(wt)] || !tq.quantize[static_cast<int>(at)])
    throw InvalidRequestError("wtype " + wtype + ": no matmul/quantizer in table " + isa);
  if (K <= 0 || K % dtype_info(wt).block_elems != 0 || K % dtype_info(at).block_elems != 0) {
    // The SIMD kernels reject such a K themselves (an empty call still checks it); the scalar
    // reference's empty loop does not, so the binding's own check follows.
    kernels::MatmulArgs probe{nullptr, K, 0, 0, nullptr, 0, 0, nullptr, 0};
    t.matmul[static_cast<int>(wt)](probe);
    check_multiple(wt, K, "K");
    check_multiple(at, K, "K");
  }
  const int64_t r1 = r1_opt.value_or(rows);
  if (rows <= 0 || r0 < 0 || r1 > rows || r0 > r1)
    throw InvalidRequestError("rows/r0/r1 = " + std::to_string(rows) + "/" + std::to_string(r0) + "/" +
                              std::to_string(r1) + ": need 0 <= r0 <= r1 <= rows");
  const std::string wbytes = w;
  const size_t w_stride = row_bytes(wt, K);
  if (wbytes.size() != w_stride * static_cast<size_t>(rows))
    throw InvalidRequestError("w: " + std::to_string(wbytes.size()) + " bytes, expected rows * row_bytes = " +
                              std::to_string(w_stride * rows));
  if (x.ndim() != 2 || x.shape(1) != K) throw InvalidRequestError("x: expected a float32 array of shape [ncols, K]");
  const int64_t ncols = x.shape(0);

  const size_t x_stride = row_bytes(at, K);
  std::vector<uint8_t> xq(x_stride * ncols + 64);
  for (int64_t c = 0; c < ncols; ++c) tq.quantize[static_cast<int>(at)](x.data(c, 0), xq.data() + c * x_stride, K);

  py::array_t<float> y({ncols, rows});
  std::memset(y.mutable_data(), 0, sizeof(float) * ncols * rows);
  kernels::MatmulArgs a{wbytes.data(), K, r0, r1, xq.data(), x_stride, ncols, y.mutable_data(), rows};
  {
    py::gil_scoped_release nogil;
    t.matmul[static_cast<int>(wt)](a);
  }
  return y;
}

py::bytes kernel_quantize(const std::string& isa, const std::string& act_type, FloatArray x) {
  const kernels::KernelTable& t = table_named(isa);
  const DType at = dtype_named(act_type, "act_type");
  if (x.ndim() != 1) throw InvalidRequestError("x: expected a 1-D float32 array");
  const int64_t n = x.shape(0);  // a length that is not a multiple of the block: the quantizer raises
  if (!t.quantize[static_cast<int>(at)]) throw InvalidRequestError("act_type " + act_type + ": no quantizer in " + isa);
  std::string out(row_bytes(at, n), '\0');
  t.quantize[static_cast<int>(at)](x.data(), out.data(), n);
  return py::bytes(out);
}

py::array_t<float> copy_of(const FloatArray& a) {
  py::array_t<float> out(a.shape(0));
  std::memcpy(out.mutable_data(), a.data(), sizeof(float) * a.shape(0));
  return out;
}

py::object kernel_op(const std::string& isa, const std::string& name, FloatArray a, std::optional<FloatArray> b,
                     float scalar) {
  const kernels::KernelTable& t = table_named(isa);
  if (a.ndim() != 1) throw InvalidRequestError("a: expected a 1-D float32 array");
  const int64_t n = a.shape(0);
  auto need_b = [&]() -> const FloatArray& {
    if (!b || b->ndim() != 1 || b->shape(0) != n)
      throw InvalidRequestError("kernel_op " + name + ": b must be a 1-D float32 array of len(a)");
    return *b;
  };
  if (name == "rmsnorm") {
    const float* w = nullptr;
    if (b) w = need_b().data();
    py::array_t<float> y(n);
    t.rmsnorm(a.data(), w, y.mutable_data(), n, scalar);
    return std::move(y);
  }
  if (name == "softmax") {
    py::array_t<float> y = copy_of(a);
    t.softmax(y.mutable_data(), n);
    return std::move(y);
  }
  if (name == "dot") return py::float_(t.dot_f32(a.data(), need_b().data(), n));
  if (name == "axpy" || name == "add") {
    py::array_t<float> y = copy_of(need_b());
    if (name == "axpy") t.axpy_f32(scalar, a.data(), y.mutable_data(), n);
    else t.add_f32(a.data(), y.mutable_data(), n);
    return std::move(y);
  }
  if (name == "silu_mul" || name == "gelu_mul") {
    py::array_t<float> y(n);
    (name == "silu_mul" ? t.silu_mul : t.gelu_mul)(a.data(), need_b().data(), y.mutable_data(), n);
    return std::move(y);
  }
  throw InvalidRequestError("kernel_op: unknown op '" + name +
                            "' (rmsnorm, softmax, dot, axpy, add, silu_mul, gelu_mul)");
}

}  // namespace

void bind_kernels(py::module_& m) {
  m.def("kernel_matmul", &kernel_matmul, py::arg("isa"), py::arg("wtype"), py::arg("w"), py::arg("K"),
        py::arg("rows"), py::arg("x"), py::arg("r0") = 0, py::arg("r1") = py::none(),
        py::arg("quantize_isa") = py::none(),
        "Run `isa`'s matmul for weight type `wtype` (w: rows × K elements, raw blocks) on x [ncols, K], "
        "quantized to vec_dot_type(wtype) by `quantize_isa`'s quantizer (default: isa). Returns y [ncols, "
        "rows]; rows outside [r0, r1) are 0.");
  m.def("kernel_quantize", &kernel_quantize, py::arg("isa"), py::arg("act_type"), py::arg("x"),
        "Quantize x with `isa`'s activation quantizer for `act_type` (Q8_0, Q8_1, Q8_K, F16, BF16, F32).");
  m.def("kernel_op", &kernel_op, py::arg("isa"), py::arg("name"), py::arg("a"), py::arg("b") = py::none(),
        py::arg("scalar") = 0.0f,
        "Run a float op of `isa`'s table: rmsnorm(a, w=b, eps=scalar), softmax(a), dot(a, b), "
        "axpy(alpha=scalar, x=a, y=b) -> y + alpha·x, add(x=a, y=b) -> y + x, silu_mul(gate=a, up=b), "
        "gelu_mul(gate=a, up=b).");
}

}  // namespace edgellm::bindings
