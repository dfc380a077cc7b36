#include "bindings.h"

namespace edgellm::bindings {
void bind_model(pybind11::module_& m) {}
}  // namespace edgellm::bindings
