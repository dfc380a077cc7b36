// Block-format test/tool surface: quantize, dequantize and dot rows by type name.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cctype>
#include <string>

#include "bindings.h"
#include "common/dtype.h"
#include "quant/quant.h"

namespace py = pybind11;

namespace edgellm::bindings {
namespace {

// "Q4_K" or "q4_k" -> DType; ValueError for anything else.
DType dtype_from_name(const std::string& name) {
  std::string upper;
  for (char c : name) upper += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  for (uint32_t id = 0; id < static_cast<uint32_t>(kDTypeIdLimit); ++id) {
    const DTypeInfo* info = dtype_info(id);
    if (info && upper == info->name) return info->type;
  }
  throw py::value_error("unknown tensor type '" + name + "'");
}

int64_t check_n(DType t, int64_t n) {
  const DTypeInfo& info = dtype_info(t);
  if (n <= 0 || n % info.block_elems != 0)
    throw py::value_error(std::string("n = ") + std::to_string(n) + " must be a positive multiple of the " +
                          info.name + " block size " + std::to_string(info.block_elems));
  return n;
}

// A contiguous byte view of `data` (bytes, bytearray, numpy array...) holding exactly one row.
const void* row_buffer(const py::buffer_info& buf, DType t, int64_t n, const char* what) {
  const size_t expected = row_bytes(t, n);
  const size_t got = static_cast<size_t>(buf.size * buf.itemsize);
  if (got != expected)
    throw py::value_error(std::string(what) + ": " + std::to_string(got) + " bytes given, but " +
                          std::to_string(n) + " elements of " + dtype_name(t) + " take " +
                          std::to_string(expected) + " bytes");
  return buf.ptr;
}

py::buffer_info contiguous(const py::buffer& b, const char* what) {
  py::buffer_info info = b.request();
  // Only C-contiguous buffers can be read as a flat row.
  int64_t stride = info.itemsize;
  for (int64_t d = info.ndim - 1; d >= 0; --d) {
    if (info.shape[d] > 1 && info.strides[d] != stride)
      throw py::value_error(std::string(what) + " must be a C-contiguous buffer");
    stride *= info.shape[d];
  }
  return info;
}

}  // namespace

void bind_quant(py::module_& m) {
  m.def(
      "quant_dequantize",
      [](const std::string& type_name, const py::buffer& data, int64_t n) {
        const DType t = dtype_from_name(type_name);
        check_n(t, n);
        const py::buffer_info buf = contiguous(data, "data");
        const void* src = row_buffer(buf, t, n, "data");
        py::array_t<float> out(n);
        float* dst = out.mutable_data();
        {
          py::gil_scoped_release nogil;
          quant::dequantize_row(t, src, dst, n);
        }
        return out;
      },
      py::arg("type_name"), py::arg("data"), py::arg("n"),
      "Dequantize n elements of type `type_name` from raw block bytes to float32.");

  m.def(
      "quant_quantize",
      [](const std::string& type_name, py::array_t<float, py::array::c_style | py::array::forcecast> x) {
        const DType t = dtype_from_name(type_name);
        const int64_t n = check_n(t, static_cast<int64_t>(x.size()));
        py::array_t<uint8_t> out(static_cast<py::ssize_t>(row_bytes(t, n)));
        const float* src = x.data();
        uint8_t* dst = out.mutable_data();
        {
          py::gil_scoped_release nogil;
          quant::quantize_row(t, src, dst, n);
        }
        return out;
      },
      py::arg("type_name"), py::arg("x"),
      "Quantize a float32 array (flattened; size a multiple of the block size) to raw block bytes (uint8).");

  m.def(
      "quant_vec_dot",
      [](const std::string& weight_type, const py::buffer& w, const py::buffer& act, int64_t n) {
        const DType wt = dtype_from_name(weight_type);
        const DType at = quant::vec_dot_type(wt);
        check_n(wt, n);
        const py::buffer_info wb = contiguous(w, "w"), ab = contiguous(act, "act");
        return quant::vec_dot(wt, n, row_buffer(wb, wt, n, "w"), row_buffer(ab, at, n, "act"));
      },
      py::arg("weight_type"), py::arg("w"), py::arg("act"), py::arg("n"),
      "dot(weight row, activation row); `act` must already be in quant_vec_dot_type(weight_type).");

  m.def(
      "quant_vec_dot_type",
      [](const std::string& weight_type) { return std::string(dtype_name(quant::vec_dot_type(dtype_from_name(weight_type)))); },
      py::arg("weight_type"), "The activation format a weight type is dotted against, e.g. 'Q8_K' for 'Q4_K'.");

  m.def(
      "dtype_info",
      [](const std::string& type_name) {
        const DTypeInfo& info = dtype_info(dtype_from_name(type_name));
        return py::make_tuple(info.block_elems, info.block_bytes);
      },
      py::arg("type_name"), "(elements per block, bytes per block) of a tensor type.");
}

}  // namespace edgellm::bindings
