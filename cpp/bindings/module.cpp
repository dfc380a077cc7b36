// edgellm._core: the pybind11 module. Each subsystem binds itself in its own bind_*.cpp;
// this file maps the C++ error types to Python exceptions and calls them in order. Test hooks
// (single kernels, GPU ops, sampler steps) are edgellm._testing (testing/module.cpp).
#include <pybind11/pybind11.h>

#include "bindings.h"
#include "common/bandwidth_probe.h"
#include "common/cpu_features.h"
#include "common/errors.h"
#include "kernels/kernels.h"

namespace py = pybind11;
using edgellm::bindings::ErrorClasses;

PYBIND11_MODULE(_core, m) {
  m.doc() = "edgellm C++ engine";

  // Exception hierarchy (Python side re-exports these from edgellm):
  //   EdgeLLMError(Exception)
  //   ModelFormatError(EdgeLLMError, ValueError) > ModelShardError
  //   InvalidRequestError(EdgeLLMError, ValueError) > ContextLengthError
  //   RequestCancelled(EdgeLLMError) > LoadCancelled
  //   ModelFileChangedError(EdgeLLMError)
  //   StorageError(EdgeLLMError, OSError)
  static py::exception<edgellm::Error> base(m, "EdgeLLMError", PyExc_Exception);
  py::handle bases_value = py::make_tuple(base, py::handle(PyExc_ValueError)).release();
  static py::object model_format = py::reinterpret_steal<py::object>(
      PyErr_NewException("edgellm._core.ModelFormatError", bases_value.ptr(), nullptr));
  static py::object invalid_request = py::reinterpret_steal<py::object>(
      PyErr_NewException("edgellm._core.InvalidRequestError", bases_value.ptr(), nullptr));
  bases_value.dec_ref();
  static py::object model_shard = py::reinterpret_steal<py::object>(
      PyErr_NewException("edgellm._core.ModelShardError", model_format.ptr(), nullptr));
  static py::object context_length = py::reinterpret_steal<py::object>(
      PyErr_NewException("edgellm._core.ContextLengthError", invalid_request.ptr(), nullptr));
  static py::object cancelled = py::reinterpret_steal<py::object>(
      PyErr_NewException("edgellm._core.RequestCancelled", base.ptr(), nullptr));
  static py::object load_cancelled = py::reinterpret_steal<py::object>(
      PyErr_NewException("edgellm._core.LoadCancelled", cancelled.ptr(), nullptr));
  static py::object model_file_changed = py::reinterpret_steal<py::object>(
      PyErr_NewException("edgellm._core.ModelFileChangedError", base.ptr(), nullptr));
  py::handle bases_os = py::make_tuple(base, py::handle(PyExc_OSError)).release();
  static py::object storage = py::reinterpret_steal<py::object>(
      PyErr_NewException("edgellm._core.StorageError", bases_os.ptr(), nullptr));
  bases_os.dec_ref();
  m.attr("ModelFormatError") = model_format;
  m.attr("InvalidRequestError") = invalid_request;
  m.attr("ContextLengthError") = context_length;
  m.attr("RequestCancelled") = cancelled;
  m.attr("LoadCancelled") = load_cancelled;
  m.attr("ModelFileChangedError") = model_file_changed;
  m.attr("StorageError") = storage;
  m.attr("ModelShardError") = model_shard;
  // What every ModelFileChangedError message contains: a request's error event says it so.
  m.attr("MODEL_FILE_CHANGED") = edgellm::kModelFileChanged;

  static const ErrorClasses classes{base,      model_format,      invalid_request, context_length,
                                    cancelled, load_cancelled, model_file_changed, storage,
                                    model_shard};
  py::register_exception_translator([](std::exception_ptr p) { edgellm::bindings::raise_as_python(p, classes); });

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
    for (Isa isa : edgellm::kernels::kAllIsas)
      if (edgellm::kernels::table_for(isa)) out.append(edgellm::kernels::isa_name(isa));
    return out;
  });
  m.def("physical_cores", [] { return edgellm::cpu_features().physical_cores; });
  py::class_<edgellm::BandwidthProbe>(m, "BandwidthProbe",
                                       "Read bandwidth as decode sees it: n_threads threads each stream their own "
                                       "buffer of bytes_per_thread (bench/compare.py's bandwidth floor).")
      .def(py::init<int, size_t>(), py::arg("n_threads"), py::arg("bytes_per_thread") = size_t(256) << 20)
      .def("run", [](edgellm::BandwidthProbe& b) {
        edgellm::BandwidthProbe::Pass p;
        {
          py::gil_scoped_release release;
          p = b.run();
        }
        py::dict d;
        d["gb_per_s"] = p.gb_per_s;
        d["seconds"] = p.seconds;
        d["checksum"] = p.checksum;
        return d;
      }, "One pass over every buffer: {'gb_per_s', 'seconds', 'checksum'}.")
      .def_property_readonly("n_threads", &edgellm::BandwidthProbe::n_threads)
      .def_property_readonly("bytes_per_thread", &edgellm::BandwidthProbe::bytes_per_thread)
      .def_property_readonly("expected_checksum", &edgellm::BandwidthProbe::expected_checksum);

  edgellm::bindings::bind_gguf(m);
  edgellm::bindings::bind_quant(m);
  edgellm::bindings::bind_tokenizer(m);
  edgellm::bindings::bind_model(m);
  edgellm::bindings::bind_memory_plan(m);
  edgellm::bindings::bind_lora(m);
  edgellm::bindings::bind_engine(m);
  edgellm::bindings::bind_grammar(m);
  edgellm::bindings::bind_cuda(m);
  edgellm::bindings::bind_vision(m);
}
