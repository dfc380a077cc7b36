// GPU-free self-check of the CUDA build, run by .ci/run: the matmul kernel's block dequantizer
// (dequant32 in cuda_kernels.cu, compiled for the host too) must equal the CPU reference
// dequantizer of quant/ exactly, for every weight type the GPU matmul reads.
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "cuda/cuda_kernels.cuh"
#include "quant/quant.h"

using namespace edgellm;

int main() {
  std::mt19937 rng(1);
  std::normal_distribution<float> nd;
  const DType types[] = {DType::F32,  DType::F16,  DType::BF16, DType::Q4_0, DType::Q4_1, DType::Q5_0,
                         DType::Q5_1, DType::Q8_0, DType::Q4_K, DType::Q5_K, DType::Q6_K};
  int bad = 0;
  for (DType t : types) {
    const int64_t K = 1024;
    std::vector<float> x(K), ref(K), got(K);
    for (float& v : x) v = nd(rng) * 0.7f;
    std::vector<uint8_t> raw(row_bytes(t, K));
    quant::quantize_row(t, x.data(), raw.data(), K);
    quant::dequantize_row(t, raw.data(), ref.data(), K);
    cuda::dequantize_on_host(t, raw.data(), K, got.data());
    double maxd = 0;
    for (int64_t i = 0; i < K; ++i) maxd = std::fmax(maxd, std::fabs(ref[i] - got[i]));
    std::printf("%-5s cuda dequantizer vs CPU reference: max |diff| = %g\n", dtype_name(t), maxd);
    bad += maxd != 0.0;
  }
  std::printf(bad ? "FAILED: %d types differ\n" : "ok: every type bit-identical\n", bad);
  return bad;
}
