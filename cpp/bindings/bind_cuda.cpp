// CUDA status: whether this build has the CUDA backend and whether a GPU can run layers.
// Compiled into every build: without CUDA, cuda_available() is False with the reason "built
// without CUDA". The GPU kernel test surface is edgellm._testing (testing/bind_cuda_ops.cpp).
#include <pybind11/pybind11.h>

#include <string>

#include "backend/gpu_offload.h"
#include "bindings.h"

namespace py = pybind11;

namespace edgellm::bindings {
namespace {

#ifdef EDGELLM_HAVE_CUDA
constexpr bool kBuiltWithCuda = true;
#else
constexpr bool kBuiltWithCuda = false;
#endif

}  // namespace

void bind_cuda(py::module_& m) {
  m.def("cuda_built", [] { return kBuiltWithCuda; }, "Whether this build contains the CUDA backend.");
  m.def("cuda_available", [] { return gpu_status().available; },
        "Whether a CUDA GPU can run layers (built with CUDA, device, driver and compute capability >= 7.5).");
  m.def("cuda_status", [] {
        const GpuStatus s = gpu_status();
        py::dict d;
        d["available"] = s.available;
        d["reason"] = s.reason;
        d["device"] = s.device;
        d["free_bytes"] = s.free_bytes;
        d["total_bytes"] = s.total_bytes;
        return d;
      }, "{'available', 'reason' (why not: 'built without CUDA', 'no CUDA device found', ...), 'device', "
         "'free_bytes', 'total_bytes'}.");
}

}  // namespace edgellm::bindings
