// Matmuls split across the thread pool by output rows.
//
// Several matrices that read the same input (Q, K and V; gate and up) run as one parallel
// region: their rows are cut into chunks of roughly equal bytes — a chunk costs what its weight
// bytes cost to stream — and the pool hands chunks out dynamically. The chunk lists are made
// once at load time, so a forward pass allocates nothing.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/dtype.h"
#include "model/weights.h"

namespace edgellm {

class ThreadPool;

// The most matrices one epilogue'd op multiplies (Q, K and V).
constexpr int kMaxMatmulParts = 3;

struct MatmulChunk {
  int32_t part;    // which matrix of the fused op
  int32_t r0, r1;  // its output rows [r0, r1)
};

// Whether a column's result may depend on the other columns of its call. Decoders need each
// column exact whatever the batch (Independent: KernelTable::matmul); whole-input models
// (encoders, vision towers) take the many-column float GEMM (Any: KernelTable::matmul_wide).
enum class ColumnOrder { Independent, Any };

struct MatmulPlan {
  std::vector<MatmulChunk> chunks;
  ColumnOrder order = ColumnOrder::Independent;
};

// Chunks for the matrices `parts` (all read by one parallel region) on n_threads threads.
MatmulPlan plan_matmul(const std::vector<const Matrix*>& parts, int n_threads,
                       ColumnOrder order = ColumnOrder::Independent);

// One matrix of a fused op at run time: its input (already in vec_dot_type(w.type)) and output.
struct MatmulOperand {
  const Matrix* w = nullptr;
  const void* x = nullptr;  // ncols rows, stride x_stride bytes
  size_t x_stride = 0;
  float* y = nullptr;       // y[c * ldy + r]
  int64_t ldy = 0;
};

// Work an op adds to its matmul in the same pool region (the LoRA additions, model/lora_block.cpp):
// pre tasks, handed out before any chunk, and post(chunk) after each chunk on the thread that
// computed it (the chunk's output rows stay that thread's until the region ends). post runs once
// every pre task is done (it waits for the last ones: they were handed out first, so they are
// running). pre tasks must not throw.
class MatmulEpilogue {
 public:
  virtual int64_t n_pre() const = 0;
  virtual void pre(int64_t task, int thread) = 0;
  virtual void post(const MatmulChunk& chunk, int thread) = 0;
  // Rows of base output per ahead() call for an op of `ncols` columns (a multiple of 16; 0: no
  // ahead work this op). run_matmul computes each chunk in runs of this many rows and calls
  // ahead() before each run, so the work is spread through the chunk's weight stream instead of
  // issued in one burst as it begins (a value ≥ the chunk's rows: one call per chunk).
  virtual int64_t ahead_rows(int64_t ncols) const { return 0; }
  // Before the base rows of 16-row blocks [k0, k1) of the op's n (its parts' blocks in order; on
  // the thread about to compute them): work to overlap with their weight stream (the LoRA
  // epilogue prefetches that share, (k1 - k0) / n, of the next op's adapter bytes).
  virtual void ahead(int64_t k0, int64_t k1, int64_t n) {}

 protected:
  ~MatmulEpilogue() = default;
};

void run_matmul(ThreadPool& pool, const MatmulPlan& plan, const MatmulOperand* parts, int64_t ncols,
                MatmulEpilogue* epilogue = nullptr);

// Output rows [r0, r1) of one matrix on the calling thread (packed copy when there is one):
// y[c * ldy + r] = W[r] · x_c for ncols inputs x_c, stride x_stride, in matmul_input_type(w).
void matmul_rows(const Matrix& w, int64_t r0, int64_t r1, const void* x, size_t x_stride, int64_t ncols, float* y,
                 int64_t ldy, ColumnOrder order = ColumnOrder::Independent);

// Activations quantized for matmuls: the same input is quantized once per distinct
// vec_dot_type, however many matrices read it (Q/K/V share one; gate/up share one).
class ActivationQuantizer {
 public:
  // Room for max_rows rows of up to max_width elements in up to kSlots formats.
  void reserve(int64_t max_rows, int64_t max_width);
  // Bytes reserve() allocates (and writes: the slots are zero-filled).
  static size_t reserve_bytes(int64_t max_rows, int64_t max_width);
  // Starts a new input: previous quantizations are forgotten.
  void reset(const float* src, int64_t rows, int64_t width, int64_t src_stride);
  // The input in `type` (quantized on first request, in parallel over rows); row stride in
  // *stride.
  const void* get(ThreadPool& pool, DType type, size_t* stride);

 private:
  static constexpr int kSlots = 3;
  struct Slot {
    std::vector<uint8_t> data;
    DType type = DType::F32;
    bool valid = false;
  };
  Slot slots_[kSlots];
  const float* src_ = nullptr;
  int64_t rows_ = 0, width_ = 0, src_stride_ = 0;
};

// y[rows][w.n_out] = x[rows][w.n_in] . w^T (+ bias on every row when given): one matrix on the
// packed / float kernels through `pool`, x quantized by `act` as w's kernel wants (the
// encoders' and vision towers' linear layer).
void linear(ThreadPool& pool, ActivationQuantizer& act, const Matrix& w, const MatmulPlan& plan,
            const float* x, int64_t rows, float* y, const Vector& bias);

}  // namespace edgellm
