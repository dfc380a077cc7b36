// make_gpu_executor / gpu_status for every build: the CUDA build forwards to cuda/, the default
// build answers "built without CUDA" (gpu_offload.h).
#include <cstdio>
#include <string>

#include "backend/gpu_offload.h"
#include "common/errors.h"

namespace edgellm {
namespace {

void warn(const std::string& msg) { std::fprintf(stderr, "edgellm: warning: %s\n", msg.c_str()); }

}  // namespace

int resolve_gpu_layers(int n_gpu_layers, int n_layer) {
  if (n_gpu_layers < -1)
    throw InvalidRequestError("n_gpu_layers = " + std::to_string(n_gpu_layers) +
                              ": expected -1 (all layers), 0 (CPU only) or a layer count");
  if (n_gpu_layers == -1 || n_gpu_layers > n_layer) return n_layer;
  return n_gpu_layers;
}

GpuStatus gpu_status() {
#ifdef EDGELLM_HAVE_CUDA
  return cuda::probe();
#else
  GpuStatus s;
  s.reason = "built without CUDA";
  return s;
#endif
}

std::unique_ptr<LayerExecutor> make_gpu_executor(const OffloadRequest& r) {
  const int n = resolve_gpu_layers(r.n_gpu_layers, r.config->n_layer);
  if (n == 0) return nullptr;
  const std::string asked = "n_gpu_layers = " + std::to_string(r.n_gpu_layers);
  // Layer features only the CPU building blocks have: declined here, before any GPU work, so
  // the CUDA executor never runs a layer it would compute differently.
  if (r.config->is_moe()) {
    // run_layer's moe_ffn
    warn(asked + ": mixture-of-experts layers (" + r.config->arch + ", " + std::to_string(r.config->n_expert) +
         " experts) are not supported on the GPU; running on the CPU");
    return nullptr;
  }
  if (r.layer && r.layer->attn_sinks) {
    // attention sinks are not in the CUDA attention kernel
    warn(asked + ": attention sinks (" + r.config->arch + ") are not supported on the GPU; running on the CPU");
    return nullptr;
  }
  if (r.layer && r.layer->qk_norm_whole) {
    warn(asked + ": Q/K norms over the whole projection (" + r.config->arch +
         ") are not supported on the GPU; running on the CPU");
    return nullptr;
  }
#ifdef EDGELLM_HAVE_CUDA
  const GpuStatus s = cuda::probe();
  if (!s.available) {
    warn(asked + ": " + s.reason + "; running on the CPU");
    return nullptr;
  }
  std::string why;
  std::unique_ptr<LayerExecutor> ex = cuda::make_layer_executor(r, n, &why);
  if (!ex) warn(asked + ": " + why + "; running on the CPU");
  return ex;
#else
  warn(asked + ": built without CUDA; running on the CPU");
  return nullptr;
#endif
}

}  // namespace edgellm
