// _core.GgufFile: the GGUF reader for Python. edgellm.ModelFile (python/edgellm/model_file.py)
// wraps it with the user-facing surface; this layer converts metadata to Python values in one
// pass (a 262k-entry token list must be cheap) and hands out zero-copy numpy views that keep
// the mapping alive.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstring>

#include "bindings.h"
#include "common/fp16.h"
#include "gguf/gguf_file.h"
#include "quant/quant.h"

namespace py = pybind11;

namespace edgellm::bindings {
namespace {

// Strings in GGUF are UTF-8 by contract; a stray byte becomes the text \xNN (bindings.h) instead
// of failing the whole file over one token -- and, unlike a lone surrogate, the result can be
// printed, sent as JSON and passed back to look a tensor up.
py::object to_str(const char* data, size_t len) { return text(std::string_view(data, len)); }

py::object scalar_to_py(GgufType t, const GgufValue& v) {
  switch (t) {
    case GgufType::UINT8: case GgufType::UINT16: case GgufType::UINT32: case GgufType::UINT64:
      return py::int_(v.u64);
    case GgufType::INT8: case GgufType::INT16: case GgufType::INT32: case GgufType::INT64:
      return py::int_(v.i64);
    case GgufType::FLOAT32: case GgufType::FLOAT64: return py::float_(v.f64);
    case GgufType::BOOL: return py::bool_(v.u64 != 0);
    case GgufType::STRING: return to_str(v.str.data(), v.str.size());
    default: return py::none();
  }
}

template <class T>
T load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// One element of a numeric array as a Python object, kept in its own integer/float kind.
PyObject* array_elem_to_py(GgufType t, const uint8_t* base, uint64_t i) {
  switch (t) {
    case GgufType::UINT8: return PyLong_FromUnsignedLong(base[i]);
    case GgufType::INT8: return PyLong_FromLong(static_cast<int8_t>(base[i]));
    case GgufType::BOOL: return PyBool_FromLong(base[i] != 0);
    case GgufType::UINT16: return PyLong_FromUnsignedLong(load<uint16_t>(base + 2 * i));
    case GgufType::INT16: return PyLong_FromLong(load<int16_t>(base + 2 * i));
    case GgufType::UINT32: return PyLong_FromUnsignedLong(load<uint32_t>(base + 4 * i));
    case GgufType::INT32: return PyLong_FromLong(load<int32_t>(base + 4 * i));
    case GgufType::FLOAT32: return PyFloat_FromDouble(load<float>(base + 4 * i));
    case GgufType::UINT64: return PyLong_FromUnsignedLongLong(load<uint64_t>(base + 8 * i));
    case GgufType::INT64: return PyLong_FromLongLong(load<int64_t>(base + 8 * i));
    case GgufType::FLOAT64: return PyFloat_FromDouble(load<double>(base + 8 * i));
    default: Py_RETURN_NONE;
  }
}

py::object value_to_py(const GgufValue& v) {
  if (!v.is_array()) return scalar_to_py(v.type, v);
  const auto n = static_cast<Py_ssize_t>(v.array_len);
  PyObject* list = PyList_New(n);
  if (!list) throw py::error_already_set();
  py::object owner = py::reinterpret_steal<py::object>(list);
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject* item;
    if (v.elem_type == GgufType::STRING) {
      const std::string& s = v.strings[static_cast<size_t>(i)];
      item = PyUnicode_DecodeUTF8(s.data(), static_cast<Py_ssize_t>(s.size()), "backslashreplace");
    } else {
      item = array_elem_to_py(v.elem_type, v.array_data, static_cast<uint64_t>(i));
    }
    if (!item) throw py::error_already_set();
    PyList_SET_ITEM(list, i, item);  // steals the reference
  }
  return owner;
}

// By name as tensor_infos() lists it: the file's bytes, or -- for a name that is not UTF-8 --
// its \xNN-escaped form (matched only when no tensor has the name itself).
const TensorInfo& tensor_or_key_error(const GgufFile& f, const std::string& name) {
  if (const TensorInfo* t = f.find_tensor(name)) return *t;
  if (name.find("\\x") != std::string::npos) {
    for (const TensorInfo& t : f.tensors()) {
      const py::str shown = text(t.name);
      if (shown.cast<std::string>() == name) return t;
    }
  }
  throw py::key_error(f.path() + ": no tensor named '" + name + "'");
}

// numpy order: the reverse of ggml's ne (ne[0] is the contiguous, last numpy axis).
std::vector<py::ssize_t> numpy_shape(const TensorInfo& t) {
  std::vector<py::ssize_t> shape;
  for (int d = static_cast<int>(t.n_dims) - 1; d >= 0; --d) shape.push_back(static_cast<py::ssize_t>(t.ne[d]));
  return shape;
}

void dequantize_into(const TensorInfo& t, float* out) {
  const int64_t n = t.n_elements();
  switch (t.type) {
    case DType::F32: std::memcpy(out, t.data, static_cast<size_t>(n) * sizeof(float)); return;
    case DType::F16:
      for (int64_t i = 0; i < n; ++i) out[i] = fp16_to_fp32(load<uint16_t>(t.data + 2 * i));
      return;
    case DType::BF16:
      for (int64_t i = 0; i < n; ++i) out[i] = bf16_to_fp32(load<uint16_t>(t.data + 2 * i));
      return;
    default: break;
  }
  // Block formats: row by row through the reference code (rows are whole blocks by validation).
  if (t.ne[0] == 0) return;
  const int64_t rows = n / t.ne[0];
  const size_t rb = row_bytes(t.type, t.ne[0]);
  for (int64_t r = 0; r < rows; ++r) quant::dequantize_row(t.type, t.data + r * rb, out + r * t.ne[0], t.ne[0]);
}

}  // namespace

void bind_gguf(py::module_& m) {
  py::class_<GgufFile, std::shared_ptr<GgufFile>>(m, "GgufFile",
      "A memory-mapped, validated GGUF file (use edgellm.ModelFile).")
      .def_static("open", [](const std::string& path) {
        py::gil_scoped_release nogil;  // mapping and validation touch the whole header
        return GgufFile::open(path);
      }, py::arg("path"))
      .def_property_readonly("path", &GgufFile::path)
      .def_property_readonly("version", &GgufFile::version)
      .def_property_readonly("alignment", &GgufFile::alignment)
      .def_property_readonly("file_size", &GgufFile::file_size)
      .def_property_readonly("data_offset", &GgufFile::data_offset)
      .def_property_readonly("shard_count", &GgufFile::shard_count)
      .def_property_readonly("shard_paths", &GgufFile::shard_paths)
      .def_property_readonly("total_size", &GgufFile::total_size)
      .def("metadata", [](const GgufFile& f) {
        py::dict d;
        for (const GgufKV& kv : f.metadata()) d[to_str(kv.key.data(), kv.key.size())] = value_to_py(kv.value);
        return d;
      }, "All key/value pairs as a dict of Python values (arrays become lists).")
      .def("metadata_types", [](const GgufFile& f) {
        py::dict d;
        for (const GgufKV& kv : f.metadata()) {
          std::string t = gguf_type_name(kv.value.type);
          if (kv.value.is_array()) t += std::string("[") + gguf_type_name(kv.value.elem_type) + "]";
          d[to_str(kv.key.data(), kv.key.size())] = t;
        }
        return d;
      }, "key -> GGUF value type name, e.g. 'UINT32' or 'ARRAY[STRING]'.")
      .def("tensor_infos", [](const GgufFile& f) {
        py::list out;
        for (const TensorInfo& t : f.tensors()) {
          py::tuple shape = py::cast(numpy_shape(t));
          out.append(py::make_tuple(to_str(t.name.data(), t.name.size()), dtype_name(t.type), shape,
                                    t.nbytes, t.n_elements(), t.offset));
        }
        return out;
      }, "(name, type, numpy shape, nbytes, n_elements, offset) per tensor, in file order.")
      .def("dequantize", [](const std::shared_ptr<GgufFile>& f, const std::string& name) {
        const TensorInfo& t = tensor_or_key_error(*f, name);
        py::array_t<float> out(numpy_shape(t));
        float* dst = out.mutable_data();
        {
          py::gil_scoped_release nogil;
          dequantize_into(t, dst);
        }
        return out;
      }, py::arg("name"))
      .def("raw", [](const std::shared_ptr<GgufFile>& f, const std::string& name) {
        const TensorInfo& t = tensor_or_key_error(*f, name);
        // The capsule owns a reference to the file, so the view outlives ModelFile.close().
        py::capsule owner(new std::shared_ptr<GgufFile>(f),
                          [](void* p) { delete static_cast<std::shared_ptr<GgufFile>*>(p); });
        py::array_t<uint8_t> view({static_cast<py::ssize_t>(t.nbytes)}, {static_cast<py::ssize_t>(1)}, t.data, owner);
        // The mapping is PROT_READ: a writable view would turn a Python write into a segfault.
        py::detail::array_proxy(view.ptr())->flags &= ~py::detail::npy_api::NPY_ARRAY_WRITEABLE_;
        return view;
      }, py::arg("name"), "Zero-copy read-only uint8 view of the tensor's bytes.");
}

}  // namespace edgellm::bindings
