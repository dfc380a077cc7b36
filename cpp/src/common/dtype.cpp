#include "common/dtype.h"

#include <stdexcept>

namespace edgellm {
namespace {
constexpr DTypeInfo kInfos[] = {
    {DType::F32, "F32", 1, 4},       {DType::F16, "F16", 1, 2},       {DType::Q4_0, "Q4_0", 32, 18},
    {DType::Q4_1, "Q4_1", 32, 20},   {DType::Q5_0, "Q5_0", 32, 22},   {DType::Q5_1, "Q5_1", 32, 24},
    {DType::Q8_0, "Q8_0", 32, 34},   {DType::Q8_1, "Q8_1", 32, 36},   {DType::Q2_K, "Q2_K", 256, 84},
    {DType::Q3_K, "Q3_K", 256, 110}, {DType::Q4_K, "Q4_K", 256, 144}, {DType::Q5_K, "Q5_K", 256, 176},
    {DType::Q6_K, "Q6_K", 256, 210}, {DType::Q8_K, "Q8_K", 256, 292}, {DType::BF16, "BF16", 1, 2},
    {DType::IQ4_NL, "IQ4_NL", 32, 18}, {DType::IQ4_XS, "IQ4_XS", 256, 136}, {DType::MXFP4, "MXFP4", 32, 17},
};
// Formats the engine makes for itself; a file naming their ids is rejected like any unknown id.
constexpr DTypeInfo kInternal[] = {
    {DType::Q8_R, "Q8_R", 32, 40},
};
}  // namespace

const DTypeInfo* dtype_info(uint32_t id) {
  for (const auto& i : kInfos)
    if (static_cast<uint32_t>(i.type) == id) return &i;
  return nullptr;
}

const DTypeInfo& dtype_info(DType t) {
  for (const auto& i : kInternal)
    if (i.type == t) return i;
  const DTypeInfo* i = dtype_info(static_cast<uint32_t>(t));
  if (!i) throw std::logic_error("dtype_info: unknown type id " + std::to_string(static_cast<uint32_t>(t)));
  return *i;
}

}  // namespace edgellm
