#include "bindings.h"

namespace edgellm::bindings {
void bind_gguf(pybind11::module_& m) {}
}  // namespace edgellm::bindings
