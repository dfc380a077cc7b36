// Errors raised by SIMD kernels. They are defined out of line, in a unit compiled without ISA
// flags, so the per-ISA units never instantiate std::string code of their own (which the linker
// could otherwise share with code that runs on CPUs lacking that ISA).
#pragma once
#include <cstdint>

#include "common/dtype.h"

namespace edgellm::kernels {

// Throws InvalidRequestError: a matmul row length K that is not a multiple of `t`'s block size.
[[noreturn]] void throw_bad_row_length(const char* op, DType t, int64_t K);

}  // namespace edgellm::kernels
