// DType dispatch over the per-type reference functions of quant/reference.h, with the argument
// checks the per-type functions leave out.
#include "quant/quant.h"

#include <string>

#include "common/errors.h"
#include "quant/reference.h"

namespace edgellm::quant {
namespace {

template <typename T>
const T* as(const void* p) {
  return static_cast<const T*>(p);
}
template <typename T>
T* as(void* p) {
  return static_cast<T*>(p);
}

void check_row(const char* what, DType t, int64_t n) {
  const DTypeInfo& info = dtype_info(t);
  if (n < 0 || n % info.block_elems != 0)
    throw InvalidRequestError(std::string(what) + ": n = " + std::to_string(n) + " is not a multiple of the " +
                              info.name + " block size " + std::to_string(info.block_elems));
}

[[noreturn]] void unsupported(const char* what, DType t) {
  throw InvalidRequestError(std::string(what) + ": type " + dtype_name(t) + " is not supported");
}

}  // namespace

void dequantize_row(DType t, const void* src, float* dst, int64_t n) {
  check_row("dequantize_row", t, n);
  switch (t) {
    case DType::F32: return dequantize_row_f32(as<float>(src), dst, n);
    case DType::F16: return dequantize_row_f16(as<uint16_t>(src), dst, n);
    case DType::BF16: return dequantize_row_bf16(as<uint16_t>(src), dst, n);
    case DType::Q4_0: return dequantize_row_q4_0(as<block_q4_0>(src), dst, n);
    case DType::Q4_1: return dequantize_row_q4_1(as<block_q4_1>(src), dst, n);
    case DType::Q5_0: return dequantize_row_q5_0(as<block_q5_0>(src), dst, n);
    case DType::Q5_1: return dequantize_row_q5_1(as<block_q5_1>(src), dst, n);
    case DType::Q8_0: return dequantize_row_q8_0(as<block_q8_0>(src), dst, n);
    case DType::Q8_1: return dequantize_row_q8_1(as<block_q8_1>(src), dst, n);
    case DType::Q2_K: return dequantize_row_q2_k(as<block_q2_K>(src), dst, n);
    case DType::Q3_K: return dequantize_row_q3_k(as<block_q3_K>(src), dst, n);
    case DType::Q4_K: return dequantize_row_q4_k(as<block_q4_K>(src), dst, n);
    case DType::Q5_K: return dequantize_row_q5_k(as<block_q5_K>(src), dst, n);
    case DType::Q6_K: return dequantize_row_q6_k(as<block_q6_K>(src), dst, n);
    case DType::Q8_K: return dequantize_row_q8_k(as<block_q8_K>(src), dst, n);
    case DType::IQ4_NL: return dequantize_row_iq4_nl(as<block_iq4_nl>(src), dst, n);
    case DType::IQ4_XS: return dequantize_row_iq4_xs(as<block_iq4_xs>(src), dst, n);
    case DType::MXFP4: return dequantize_row_mxfp4(as<block_mxfp4>(src), dst, n);
    case DType::Q8_R: break;  // the packed kernels' own format (kernels/packed.h)
  }
  unsupported("dequantize_row", t);
}

void quantize_row(DType t, const float* src, void* dst, int64_t n) {
  check_row("quantize_row", t, n);
  switch (t) {
    case DType::F32: return quantize_row_f32(src, as<float>(dst), n);
    case DType::F16: return quantize_row_f16(src, as<uint16_t>(dst), n);
    case DType::BF16: return quantize_row_bf16(src, as<uint16_t>(dst), n);
    case DType::Q4_0: return quantize_row_q4_0(src, as<block_q4_0>(dst), n);
    case DType::Q4_1: return quantize_row_q4_1(src, as<block_q4_1>(dst), n);
    case DType::Q5_0: return quantize_row_q5_0(src, as<block_q5_0>(dst), n);
    case DType::Q5_1: return quantize_row_q5_1(src, as<block_q5_1>(dst), n);
    case DType::Q8_0: return quantize_row_q8_0(src, as<block_q8_0>(dst), n);
    case DType::Q8_1: return quantize_row_q8_1(src, as<block_q8_1>(dst), n);
    case DType::Q2_K: return quantize_row_q2_k(src, as<block_q2_K>(dst), n);
    case DType::Q3_K: return quantize_row_q3_k(src, as<block_q3_K>(dst), n);
    case DType::Q4_K: return quantize_row_q4_k(src, as<block_q4_K>(dst), n);
    case DType::Q5_K: return quantize_row_q5_k(src, as<block_q5_K>(dst), n);
    case DType::Q6_K: return quantize_row_q6_k(src, as<block_q6_K>(dst), n);
    case DType::Q8_K: return quantize_row_q8_k(src, as<block_q8_K>(dst), n);
    case DType::IQ4_NL: return quantize_row_iq4_nl(src, as<block_iq4_nl>(dst), n);
    case DType::IQ4_XS: return quantize_row_iq4_xs(src, as<block_iq4_xs>(dst), n);
    case DType::MXFP4: return quantize_row_mxfp4(src, as<block_mxfp4>(dst), n);
    case DType::Q8_R: break;  // the packed kernels' own format (kernels/packed.h)
  }
  unsupported("quantize_row", t);
}

DType vec_dot_type(DType weight) {
  switch (weight) {
    case DType::F32: return DType::F32;
    case DType::F16: return DType::F16;
    case DType::BF16: return DType::BF16;
    case DType::Q4_0:
    case DType::Q5_0:
    case DType::Q8_0:
    case DType::IQ4_NL:
    case DType::MXFP4: return DType::Q8_0;
    case DType::Q4_1:
    case DType::Q5_1: return DType::Q8_1;
    case DType::Q2_K:
    case DType::Q3_K:
    case DType::Q4_K:
    case DType::Q5_K:
    case DType::Q6_K:
    case DType::IQ4_XS: return DType::Q8_K;
    case DType::Q8_1:
    case DType::Q8_K:
    case DType::Q8_R: break;  // activation-only formats: never a weight
  }
  throw InvalidRequestError(std::string("vec_dot_type: ") + dtype_name(weight) +
                            " is an activation format, not a weight type");
}

float vec_dot(DType weight, int64_t n, const void* w, const void* act) {
  check_row("vec_dot", weight, n);
  switch (weight) {
    case DType::F32: return vec_dot_f32(n, as<float>(w), as<float>(act));
    case DType::F16: return vec_dot_f16(n, as<uint16_t>(w), as<uint16_t>(act));
    case DType::BF16: return vec_dot_bf16(n, as<uint16_t>(w), as<uint16_t>(act));
    case DType::Q4_0: return vec_dot_q4_0_q8_0(n, as<block_q4_0>(w), as<block_q8_0>(act));
    case DType::Q4_1: return vec_dot_q4_1_q8_1(n, as<block_q4_1>(w), as<block_q8_1>(act));
    case DType::Q5_0: return vec_dot_q5_0_q8_0(n, as<block_q5_0>(w), as<block_q8_0>(act));
    case DType::Q5_1: return vec_dot_q5_1_q8_1(n, as<block_q5_1>(w), as<block_q8_1>(act));
    case DType::Q8_0: return vec_dot_q8_0_q8_0(n, as<block_q8_0>(w), as<block_q8_0>(act));
    case DType::Q2_K: return vec_dot_q2_K_q8_K(n, as<block_q2_K>(w), as<block_q8_K>(act));
    case DType::Q3_K: return vec_dot_q3_K_q8_K(n, as<block_q3_K>(w), as<block_q8_K>(act));
    case DType::Q4_K: return vec_dot_q4_K_q8_K(n, as<block_q4_K>(w), as<block_q8_K>(act));
    case DType::Q5_K: return vec_dot_q5_K_q8_K(n, as<block_q5_K>(w), as<block_q8_K>(act));
    case DType::Q6_K: return vec_dot_q6_K_q8_K(n, as<block_q6_K>(w), as<block_q8_K>(act));
    case DType::IQ4_NL: return vec_dot_iq4_nl_q8_0(n, as<block_iq4_nl>(w), as<block_q8_0>(act));
    case DType::IQ4_XS: return vec_dot_iq4_xs_q8_K(n, as<block_iq4_xs>(w), as<block_q8_K>(act));
    case DType::MXFP4: return vec_dot_mxfp4_q8_0(n, as<block_mxfp4>(w), as<block_q8_0>(act));
    case DType::Q8_1:
    case DType::Q8_K:
    case DType::Q8_R: break;
  }
  unsupported("vec_dot (activation formats are not weights)", weight);
}

}  // namespace edgellm::quant
