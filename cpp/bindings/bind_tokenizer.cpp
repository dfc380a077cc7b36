#include "bindings.h"

namespace edgellm::bindings {
void bind_tokenizer(pybind11::module_& m) {}
}  // namespace edgellm::bindings
