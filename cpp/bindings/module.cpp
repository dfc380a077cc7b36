// edgellm._core: the pybind11 module. Each subsystem binds itself in its own bind_*.cpp;
// this file maps the C++ error types to Python exceptions and calls them in order.
#include <pybind11/pybind11.h>

#include "bindings.h"
#include "common/cpu_features.h"
#include "common/errors.h"
#include "kernels/kernels.h"

namespace py = pybind11;

PYBIND11_MODULE(_core, m) {
  m.doc() = "edgellm C++ engine";

  // Exception hierarchy (Python side re-exports these from edgellm):
  //   EdgeLLMError(Exception)
  //   ModelFormatError(EdgeLLMError, ValueError)
  //   InvalidRequestError(EdgeLLMError, ValueError) > ContextLengthError
  //   RequestCancelled(EdgeLLMError)
  static py::exception<edgellm::Error> base(m, "EdgeLLMError", PyExc_Exception);
  py::handle bases_value = py::make_tuple(base, py::handle(PyExc_ValueError)).release();
  static py::object model_format = py::reinterpret_steal<py::object>(
      PyErr_NewException("edgellm._core.ModelFormatError", bases_value.ptr(), nullptr));
  static py::object invalid_request = py::reinterpret_steal<py::object>(
      PyErr_NewException("edgellm._core.InvalidRequestError", bases_value.ptr(), nullptr));
  bases_value.dec_ref();
  static py::object context_length = py::reinterpret_steal<py::object>(
      PyErr_NewException("edgellm._core.ContextLengthError", invalid_request.ptr(), nullptr));
  static py::object cancelled = py::reinterpret_steal<py::object>(
      PyErr_NewException("edgellm._core.RequestCancelled", base.ptr(), nullptr));
  m.attr("ModelFormatError") = model_format;
  m.attr("InvalidRequestError") = invalid_request;
  m.attr("ContextLengthError") = context_length;
  m.attr("RequestCancelled") = cancelled;

  // Messages may quote bytes from a file that are not UTF-8: PyErr_SetString would replace the
  // error with a UnicodeDecodeError, so the message is decoded with \xNN escapes.
  py::register_exception_translator([](std::exception_ptr p) {
    const auto raise = [](const py::object& type, const std::exception& e) {
      PyErr_SetObject(type.ptr(), edgellm::bindings::text(e.what()).ptr());
    };
    try {
      if (p) std::rethrow_exception(p);
    } catch (const edgellm::ModelFormatError& e) {
      raise(model_format, e);
    } catch (const edgellm::ContextLengthError& e) {
      raise(context_length, e);
    } catch (const edgellm::InvalidRequestError& e) {
      raise(invalid_request, e);
    } catch (const edgellm::RequestCancelled& e) {
      raise(cancelled, e);
    } catch (const edgellm::Error& e) {
      raise(base, e);
    }
  });

  // ---- machine facts ----
  m.def("isa", [] { return std::string(edgellm::kernels::isa_name(edgellm::kernels::active().isa)); },
        "The instruction-set level of the kernel table in use.");
  m.def("set_isa", [](py::object name) {
    if (name.is_none()) edgellm::kernels::set_active(nullptr);
    else edgellm::kernels::set_active(name.cast<std::string>().c_str());
  }, py::arg("name"), "Force a kernel table ('scalar', 'avx2', ...); None restores the default.");
  m.def("available_isas", [] {
    py::list out;
    using edgellm::kernels::Isa;
    for (Isa isa : {Isa::Scalar, Isa::Avx2, Isa::Avx512, Isa::Neon, Isa::NeonDotprod})
      if (edgellm::kernels::table_for(isa)) out.append(edgellm::kernels::isa_name(isa));
    return out;
  });
  m.def("physical_cores", [] { return edgellm::cpu_features().physical_cores; });

  edgellm::bindings::bind_gguf(m);
  edgellm::bindings::bind_quant(m);
  edgellm::bindings::bind_tokenizer(m);
  edgellm::bindings::bind_model(m);
  edgellm::bindings::bind_memory_plan(m);
  edgellm::bindings::bind_engine(m);
  edgellm::bindings::bind_kernels(m);
  edgellm::bindings::bind_grammar(m);
  edgellm::bindings::bind_cuda(m);
}
