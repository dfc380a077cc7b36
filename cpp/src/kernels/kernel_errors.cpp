#include "kernels/kernel_errors.h"

#include <stdexcept>
#include <string>

#include "common/errors.h"

namespace edgellm::kernels {

void throw_bad_row_length(const char* op, DType t, int64_t K) {
  throw InvalidRequestError(std::string(op) + ": row length K = " + std::to_string(K) +
                            " is not a multiple of the " + dtype_name(t) + " block size " +
                            std::to_string(dtype_info(t).block_elems));
}

void throw_bad_packed_rows(int64_t r0, int64_t r1) {
  throw std::invalid_argument("packed matmul: rows [" + std::to_string(r0) + ", " + std::to_string(r1) +
                              ") do not start and end on 16-row groups");
}

}  // namespace edgellm::kernels
