// GPU offload: the LayerExecutor (model/layer_executor.h) for the last layers of a model on a
// GPU, and what the GPU is. Loaders inject make_gpu_executor into LoadOptions::make_executor.
//
// make_gpu_executor() is compiled into every build: with CUDA off, or with no usable GPU, it
// prints a warning and returns nullptr, and the model runs wholly on the CPU.
#pragma once
#include <memory>
#include <string>

#include "cuda/cuda_backend.h"  // GpuStatus (no CUDA headers)
#include "model/layer_executor.h"

namespace edgellm {

// Layers that n_gpu_layers asks for on a model of n_layer layers: -1 (or more than n_layer)
// means all. Throws InvalidRequestError for values below -1.
int resolve_gpu_layers(int n_gpu_layers, int n_layer);

// An executor for the last resolve_gpu_layers(...) layers, or nullptr when n_gpu_layers is 0 or
// no GPU can take them (built without CUDA, no device or driver, too little memory, a weight
// type without a GPU kernel); every nullptr for n_gpu_layers != 0 prints a one-line warning
// saying why, ending "running on the CPU".
std::unique_ptr<LayerExecutor> make_gpu_executor(const OffloadRequest& request);

// What the GPU is (cuda/cuda_backend.h's GpuStatus; "built without CUDA" in a default build).
GpuStatus gpu_status();

}  // namespace edgellm
