// Load-time repacking of weight matrices into the row-interleaved layout of kernels/packed.h,
// for the matrices whose type the active kernel table has a packed matmul for.
//
// The packed copies live in one 64-byte aligned buffer the model owns; the GGUF mapping stays
// (the token embedding is still read row by row, and a kernel table without packed kernels — a
// test forcing a lower ISA after load — still finds the original), but its pages are released
// with MADV_DONTNEED after packing so resident memory counts each weight once.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "model/load_progress.h"
#include "model/weights.h"

namespace edgellm {

class ThreadPool;

struct PackedWeights {
  struct Free {
    void operator()(uint8_t* p) const;
  };
  std::unique_ptr<uint8_t, Free> buffer;
  size_t bytes = 0;
  int matrices = 0;
  double seconds = 0;  // wall time of packing (load-time cost)
};

// Packs every matrix of `mats` that can be packed (packable type, rows a multiple of 16, the
// active table has packed_matmul for it) and sets its `packed` pointer. The same Matrix object
// may appear once only. EDGELLM_REPACK=0 in the environment disables packing (A/B measurement).
// The work runs in rounds of about 1/64 of the bytes; `progress` is told the bytes done after
// each (stage "repack", from the calling thread) and may stop it (LoadCancelled: the buffer is
// freed and no matrix is left pointing into it).
PackedWeights pack_weights(const std::vector<Matrix*>& mats, ThreadPool& pool, const LoadProgress& progress = {});

// Bytes pack_weights gives `m` in its buffer (64-byte rounded), or 0 when it would stay in the
// GGUF layout (not packable, EDGELLM_REPACK=0, no packed kernel in the active table). The one
// sizing rule the loader and the memory plan (model/memory_plan.h) share.
size_t packed_matrix_bytes(const Matrix& m);

// Whether a matmul with `m` runs on its packed copy now (packed and the active table has the kernel).
bool use_packed(const Matrix& m);
// The activation format a matmul with `m` reads: Q8_R for packed weights, else vec_dot_type.
DType matmul_input_type(const Matrix& m);

}  // namespace edgellm
