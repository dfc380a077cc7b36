#include "kernels/kernel_errors.h"

#include <string>

#include "common/errors.h"

namespace edgellm::kernels {

void throw_bad_row_length(const char* op, DType t, int64_t K) {
  throw InvalidRequestError(std::string(op) + ": row length K = " + std::to_string(K) +
                            " is not a multiple of the " + dtype_name(t) + " block size " +
                            std::to_string(dtype_info(t).block_elems));
}

}  // namespace edgellm::kernels
