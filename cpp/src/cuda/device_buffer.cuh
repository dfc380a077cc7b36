// RAII device memory and CUDA error checking for the backend's host code.
#pragma once
#include <cstddef>
#include <string>
#include <utility>

#include <cuda_runtime.h>

#include "common/errors.h"

namespace edgellm::cuda {

// Throws edgellm::Error "CUDA <what>: <error string>" when `e` is not cudaSuccess.
inline void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    cudaGetLastError();  // clear a sticky launch error so the message is about this call
    throw Error(std::string("CUDA ") + what + ": " + cudaGetErrorString(e));
  }
}

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  // Throws Error naming `what` when the device is out of memory.
  DeviceBuffer(size_t bytes, const char* what) : bytes_(bytes) {
    if (bytes == 0) return;
    const cudaError_t e = cudaMalloc(&p_, bytes);
    if (e != cudaSuccess) {
      cudaGetLastError();
      p_ = nullptr;
      throw Error(std::string("CUDA: cannot allocate ") + std::to_string(bytes >> 20) + " MiB for " + what + ": " +
                  cudaGetErrorString(e));
    }
  }
  ~DeviceBuffer() {
    if (p_) cudaFree(p_);
  }
  DeviceBuffer(DeviceBuffer&& o) noexcept : p_(std::exchange(o.p_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      if (p_) cudaFree(p_);
      p_ = std::exchange(o.p_, nullptr);
      bytes_ = std::exchange(o.bytes_, 0);
    }
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  template <class T = void>
  T* get() const { return static_cast<T*>(p_); }
  size_t bytes() const { return bytes_; }

 private:
  void* p_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace edgellm::cuda
