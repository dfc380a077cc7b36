#include "model/weights.h"

#include <cstring>
#include <string>

#include "common/errors.h"
#include "kernels/kernels.h"
#include "quant/quant.h"

namespace edgellm {

const TensorInfo* WeightLoader::find(const std::string& name, bool optional) const {
  const TensorInfo* t = file_.find_tensor(name);
  if (!t && !optional) throw ModelFormatError(file_.path() + ": required tensor " + name + " is missing");
  return t;
}

std::string WeightLoader::shape_of(const TensorInfo& t) const {
  std::string s = "{";
  for (uint32_t i = 0; i < t.n_dims; ++i) s += (i ? ", " : "") + std::to_string(t.ne[i]);
  return s + "}";
}

namespace {

// Throws ModelFormatError naming the tensor unless t's type has a matmul kernel and rows of n_in
// elements are whole blocks of it (WeightLoader::matrix and ::experts alike).
void check_matmul_rows(const std::string& path, const std::string& name, const TensorInfo& t, int64_t n_in) {
  const DTypeInfo& info = dtype_info(t.type);
  if (!kernels::active().matmul[static_cast<int>(t.type)])
    throw ModelFormatError(path + ": tensor " + name + " has type " + info.name + ", which has no matmul kernel");
  if (n_in % info.block_elems != 0)
    throw ModelFormatError(path + ": tensor " + name + " rows of " + std::to_string(n_in) +
                           " elements are not whole " + info.name + " blocks");
}

}  // namespace

Matrix WeightLoader::matrix(const std::string& name, int64_t n_in, int64_t n_out, bool optional) {
  Matrix m;
  const TensorInfo* t = find(name, optional);
  if (!t) return m;
  if (t->n_dims != 2 || t->ne[0] != n_in || t->ne[1] != n_out)
    throw ModelFormatError(file_.path() + ": tensor " + name + " has shape " + shape_of(*t) + ", expected {" +
                           std::to_string(n_in) + ", " + std::to_string(n_out) + "}");
  check_matmul_rows(file_.path(), name, *t, n_in);
  m.info = t;
  m.type = t->type;
  m.data = t->data;
  m.n_in = n_in;
  m.n_out = n_out;
  m.row_bytes = row_bytes(t->type, n_in);
  return m;
}

Matrix row_view(const Matrix& m, int64_t first, int64_t n) {
  Matrix v = m;
  v.data = m.data + static_cast<size_t>(first) * m.row_bytes;
  v.n_out = n;
  v.packed = nullptr;
  return v;
}

std::vector<Matrix> WeightLoader::experts(const std::string& name, int64_t n_in, int64_t n_out, int64_t n_expert) {
  const TensorInfo* t = find(name, /*optional=*/false);
  if (t->n_dims != 3 || t->ne[0] != n_in || t->ne[1] != n_out || t->ne[2] != n_expert)
    throw ModelFormatError(file_.path() + ": tensor " + name + " has shape " + shape_of(*t) + ", expected {" +
                           std::to_string(n_in) + ", " + std::to_string(n_out) + ", " + std::to_string(n_expert) +
                           "} ({n_in, n_out, expert_count})");
  check_matmul_rows(file_.path(), name, *t, n_in);
  std::vector<Matrix> out(static_cast<size_t>(n_expert));
  const size_t rb = row_bytes(t->type, n_in);
  for (int64_t e = 0; e < n_expert; ++e) {
    Matrix& m = out[static_cast<size_t>(e)];
    m.info = t;
    m.type = t->type;
    m.data = t->data + static_cast<size_t>(e) * static_cast<size_t>(n_out) * rb;
    m.n_in = n_in;
    m.n_out = n_out;
    m.row_bytes = rb;
  }
  return out;
}

Vector WeightLoader::vector(const std::string& name, int64_t n, bool optional) {
  const TensorInfo* t = find(name, optional);
  if (!t) return Vector{};
  if (t->n_elements() != n || t->ne[0] != n)
    throw ModelFormatError(file_.path() + ": tensor " + name + " has shape " + shape_of(*t) + ", expected {" +
                           std::to_string(n) + "}");
  return copy(*t, n);
}

Vector WeightLoader::table(const std::string& name, int64_t n0, int64_t n1) {
  const TensorInfo* t = find(name, /*optional=*/false);
  if (t->n_dims != 2 || t->ne[0] != n0 || t->ne[1] != n1)
    throw ModelFormatError(file_.path() + ": tensor " + name + " has shape " + shape_of(*t) + ", expected {" +
                           std::to_string(n0) + ", " + std::to_string(n1) + "}");
  return copy(*t, n0 * n1);
}

Vector WeightLoader::copy(const TensorInfo& tensor, int64_t n) {
  const TensorInfo* t = &tensor;
  const std::string& name = t->name;
  Vector v;
  v.n = n;
  // Every vector is copied, F32 ones too: a norm or bias read in place from the mapping each
  // forward pass faults its page in again, and where the kernel maps page-cache folios larger
  // than a page (large folios, file THP) that one fault maps the neighbouring weight matrices'
  // pages as well -- the sources packing gave back -- adding megabytes of resident memory the
  // memory plan does not count (seen: 9 MB on SmolLM2). The copies are a few KB per layer.
  if (t->type != DType::F32 && n % dtype_info(t->type).block_elems != 0)
    throw ModelFormatError(file_.path() + ": tensor " + name + " of " + std::to_string(n) + " elements is not whole " +
                           dtype_name(t->type) + " blocks");
  converted_bytes_ += static_cast<size_t>(n) * sizeof(float);
  if (plan_only_) return v;  // v.data stays null: the plan only counts the copy
  std::unique_ptr<float[]> copy(new float[n]);
  if (t->type == DType::F32)
    std::memcpy(copy.get(), t->data, static_cast<size_t>(n) * sizeof(float));
  else
    quant::dequantize_row(t->type, t->data, copy.get(), n);
  v.data = copy.get();
  owned_.push_back(std::move(copy));
  return v;
}

}  // namespace edgellm
