// edgellm._testing: hooks that run one piece of the engine on numpy data for the tests, kept
// out of the production module _core (which must be imported first: its error classes are
// the ones raised here).
#pragma once
#include <pybind11/pybind11.h>

#include "bindings.h"

namespace edgellm::bindings {
void bind_kernels(pybind11::module_& m);          // bind_kernels.cpp: one entry of a kernel table
void bind_cuda_ops(pybind11::module_& m);         // bind_cuda_ops.cpp: one CUDA kernel
void bind_sampler_testing(pybind11::module_& m);  // bind_sampler.cpp: the sampler chain on one row
}  // namespace edgellm::bindings
