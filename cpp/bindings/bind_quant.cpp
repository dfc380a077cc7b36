#include "bindings.h"

namespace edgellm::bindings {
void bind_quant(pybind11::module_& m) {}
}  // namespace edgellm::bindings
