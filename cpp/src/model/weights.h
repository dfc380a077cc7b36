// Weight views into the mapped GGUF file, and the loader that binds them by name, checking each
// tensor's shape and type against the config before any forward pass can trip over it.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "gguf/gguf_file.h"

namespace edgellm {

// A 2-D weight used by a matmul: n_out rows of n_in elements (ggml ne = {n_in, n_out}).
struct Matrix {
  const TensorInfo* info = nullptr;
  DType type = DType::F32;
  const uint8_t* data = nullptr;
  int64_t n_in = 0, n_out = 0;
  size_t row_bytes = 0;
  // The same rows repacked for the active kernel table (model/weight_packing.h), or null.
  const uint8_t* packed = nullptr;
  explicit operator bool() const { return info != nullptr; }
  const uint8_t* row(int64_t r) const { return data + static_cast<size_t>(r) * row_bytes; }
};

// Rows [first, first + n) of `m` as a matrix of their own (a fused tensor's parts, e.g. Phi-3's
// attn_qkv): the same tensor and element type, data offset by whole rows.
Matrix row_view(const Matrix& m, int64_t first, int64_t n);

// A 1-D f32 vector (norm weights, biases, RoPE frequency factors). Always points into an f32 copy
// the loader owns (also for F32 files: released weight pages must not be faulted back in).
struct Vector {
  const float* data = nullptr;
  int64_t n = 0;
  explicit operator bool() const { return data != nullptr; }
};

class WeightLoader {
 public:
  // plan_only: bind and check everything but convert nothing (vector() returns a view with a
  // null data pointer and counts the bytes the copy would take: model/memory_plan.h).
  explicit WeightLoader(const GgufFile& file, bool plan_only = false) : file_(file), plan_only_(plan_only) {}

  // Binds `name` as a matrix with n_in columns and n_out rows. A missing tensor throws unless
  // `optional`; a wrong shape or a type without a matmul kernel throws ModelFormatError naming
  // the tensor.
  Matrix matrix(const std::string& name, int64_t n_in, int64_t n_out, bool optional = false);
  // Binds the 3-D tensor `name` (ggml ne = {n_in, n_out, n_expert}: n_expert matrices stored
  // one after the other) as one Matrix view per expert, all sharing `info`. A missing tensor, a
  // wrong shape (an expert count that differs from the metadata's included) or a type without a
  // matmul kernel throws ModelFormatError naming the tensor.
  std::vector<Matrix> experts(const std::string& name, int64_t n_in, int64_t n_out, int64_t n_expert);
  // Binds `name` as a vector of n elements: an f32 copy (converted if stored otherwise).
  Vector vector(const std::string& name, int64_t n, bool optional = false);
  // Binds the 2-D tensor `name` (ggml ne = {n0, n1}: n1 rows of n0) as one vector of n0 * n1
  // elements, row r at r * n0 (per-expert biases); shape checked as vector() does.
  Vector table(const std::string& name, int64_t n0, int64_t n1);
  // Whether the file has a tensor `name`.
  bool has(const std::string& name) const { return file_.find_tensor(name) != nullptr; }
  // The file's path, for error messages.
  const std::string& path() const { return file_.path(); }

  // The vectors' copies; the model keeps them alive.
  std::vector<std::unique_ptr<float[]>>& owned() { return owned_; }
  // Bytes of the f32 copies made (or, plan_only, that would be made).
  size_t converted_bytes() const { return converted_bytes_; }

 private:
  const TensorInfo* find(const std::string& name, bool optional) const;
  Vector copy(const TensorInfo& t, int64_t n);
  std::string shape_of(const TensorInfo& t) const;

  const GgufFile& file_;
  bool plan_only_ = false;
  size_t converted_bytes_ = 0;
  std::vector<std::unique_ptr<float[]>> owned_;
};

}  // namespace edgellm
