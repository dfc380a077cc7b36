// Errors raised by SIMD kernels. They are defined out of line, in a unit compiled without ISA
// flags, so the per-ISA units never instantiate std::string code of their own (which the linker
// could otherwise share with code that runs on CPUs lacking that ISA).
#pragma once
#include <cstdint>

#include "common/dtype.h"

namespace edgellm::kernels {

// Throws InvalidRequestError: a matmul row length K that is not a multiple of `t`'s block size.
[[noreturn]] void throw_bad_row_length(const char* op, DType t, int64_t K);

// Throws std::invalid_argument: a packed matmul's rows [r0, r1) that are not whole 16-row groups.
[[noreturn]] void throw_bad_packed_rows(int64_t r0, int64_t r1);

}  // namespace edgellm::kernels
