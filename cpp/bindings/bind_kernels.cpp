#include "bindings.h"

namespace edgellm::bindings {
void bind_kernels(pybind11::module_& m) {}
}  // namespace edgellm::bindings
