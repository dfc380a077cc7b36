#pragma once
#include <pybind11/pybind11.h>

#include <algorithm>
#include <cctype>
#include <exception>
#include <memory>
#include <string>
#include <string_view>

#include "common/dtype.h"
#include "common/errors.h"
#include "gguf/gguf_file.h"  // ModelShardError

namespace edgellm {
struct LoraMix;
}

namespace edgellm::bindings {

// A KV cache element type by its Python name ("f16", "f32", "q8_0", any case): the engine and
// the memory planner take the same spelling.
inline DType kv_dtype(const std::string& s) {
  std::string u = s;
  std::transform(u.begin(), u.end(), u.begin(), [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
  if (u == "F32") return DType::F32;
  if (u == "F16") return DType::F16;
  if (u == "Q8_0") return DType::Q8_0;
  throw InvalidRequestError("kv_type \"" + s + "\" is not supported (use f16, f32 or q8_0)");
}

// Bytes from a file or the engine (names, metadata, error messages) as a Python str that is
// always valid: UTF-8 is decoded, any other byte becomes the four characters \xNN. pybind's
// own std::string -> str conversion raises UnicodeDecodeError instead. Names shown this way
// can be looked up again (bind_gguf.cpp matches a tensor by its escaped name).
inline pybind11::str text(std::string_view s) {
  PyObject* o = PyUnicode_DecodeUTF8(s.data(), static_cast<Py_ssize_t>(s.size()), "backslashreplace");
  if (!o) throw pybind11::error_already_set();
  return pybind11::reinterpret_steal<pybind11::str>(o);
}
// The Python classes of the C++ error types (common/errors.h), created by _core.
struct ErrorClasses {
  pybind11::object base, model_format, invalid_request, context_length, cancelled, load_cancelled;
  pybind11::object model_file_changed, storage;
  pybind11::object model_shard;  // ModelShardError (gguf/gguf_file.h), a ModelFormatError
};
// Raises the exception in flight as its Python class (for a pybind11 exception translator).
// Messages may quote bytes from a file that are not UTF-8: PyErr_SetString would replace the
// error with a UnicodeDecodeError, so the message is decoded with \xNN escapes (text()).
inline void raise_as_python(std::exception_ptr p, const ErrorClasses& c) {
  const auto raise = [](const pybind11::object& type, const std::exception& e) {
    PyErr_SetObject(type.ptr(), text(e.what()).ptr());
  };
  try {
    if (p) std::rethrow_exception(p);
  } catch (const ModelShardError& e) {
    // .shard names the shard at fault
    pybind11::object err = c.model_shard(text(e.what()));
    err.attr("shard") = pybind11::str(e.shard);
    PyErr_SetObject(c.model_shard.ptr(), err.ptr());
  } catch (const ModelFormatError& e) {
    raise(c.model_format, e);
  } catch (const ContextLengthError& e) {
    raise(c.context_length, e);
  } catch (const InvalidRequestError& e) {
    raise(c.invalid_request, e);
  } catch (const LoadCancelled& e) {
    raise(c.load_cancelled, e);
  } catch (const RequestCancelled& e) {
    raise(c.cancelled, e);
  } catch (const ModelFileChangedError& e) {
    raise(c.model_file_changed, e);
  } catch (const StorageError& e) {
    // an OSError: (errno, message), so .errno says which
    PyErr_SetObject(c.storage.ptr(), pybind11::make_tuple(e.err, text(e.what())).ptr());
  } catch (const Error& e) {
    raise(c.base, e);
  }
}

void bind_gguf(pybind11::module_& m);       // bind_gguf.cpp: ModelFile
void bind_quant(pybind11::module_& m);      // bind_quant.cpp: block formats (tests, quantize CLI)
void bind_tokenizer(pybind11::module_& m);  // bind_tokenizer.cpp
void bind_model(pybind11::module_& m);      // bind_model.cpp
void bind_memory_plan(pybind11::module_& m);  // bind_memory_plan.cpp: MemoryPlanner
void bind_engine(pybind11::module_& m);     // bind_engine.cpp: LLM engine, sampling
void bind_grammar(pybind11::module_& m);    // bind_grammar.cpp: constrained decoding (factory + test surface)
void bind_cuda(pybind11::module_& m);       // bind_cuda.cpp: CUDA status
void bind_lora(pybind11::module_& m);       // bind_lora.cpp: LoraAdapter
// A request's adapters: None, or an iterable of (LoraAdapter, scale); None when empty.
std::shared_ptr<const LoraMix> lora_mix(const pybind11::object& uses);
void bind_vision(pybind11::module_& m);     // bind_vision.cpp: VisionEncoder (mmproj files)
}  // namespace edgellm::bindings
