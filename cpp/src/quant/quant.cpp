// Placeholder until the reference block formats land.
#include "quant/quant.h"
#include <stdexcept>
namespace edgellm::quant {
void dequantize_row(DType, const void*, float*, int64_t) { throw std::logic_error("not implemented"); }
void quantize_row(DType, const float*, void*, int64_t) { throw std::logic_error("not implemented"); }
DType vec_dot_type(DType w) { return w; }
float vec_dot(DType, int64_t, const void*, const void*) { throw std::logic_error("not implemented"); }
}  // namespace edgellm::quant
