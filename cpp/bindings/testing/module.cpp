// edgellm._testing: the test hooks (testing.h). Errors are raised as _core's classes, so
// `pytest.raises(edgellm.InvalidRequestError)` holds for these functions as for the rest.
#include <pybind11/pybind11.h>

#include "testing.h"

namespace py = pybind11;

PYBIND11_MODULE(_testing, m) {
  m.doc() = "edgellm test hooks (not part of the API)";
  const py::module_ core = py::module_::import("edgellm._core");
  static const edgellm::bindings::ErrorClasses classes{core.attr("EdgeLLMError"), core.attr("ModelFormatError"),
                                                       core.attr("InvalidRequestError"),
                                                       core.attr("ContextLengthError"), core.attr("RequestCancelled")};
  py::register_local_exception_translator([](std::exception_ptr p) { edgellm::bindings::raise_as_python(p, classes); });
  edgellm::bindings::bind_kernels(m);
  edgellm::bindings::bind_cuda_ops(m);
  edgellm::bindings::bind_sampler_testing(m);
}
