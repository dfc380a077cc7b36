#include "bindings.h"

namespace edgellm::bindings {
void bind_engine(pybind11::module_& m) {}
}  // namespace edgellm::bindings
