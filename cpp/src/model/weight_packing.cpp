#include "model/weight_packing.h"

#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <new>

#include "common/thread_pool.h"
#include "kernels/kernels.h"
#include "kernels/packed.h"
#include "quant/quant.h"

namespace edgellm {
namespace {

bool packing_enabled() {
  const char* e = std::getenv("EDGELLM_REPACK");
  return !(e && std::strcmp(e, "0") == 0);
}

bool can_pack(const Matrix& m, const kernels::KernelTable& k) {
  return m && kernels::packable(m.type) && k.packed_matmul[static_cast<int>(m.type)] &&
         m.n_out % kernels::kPackRows == 0 && m.n_in % kernels::packed_unit_elems(m.type) == 0;
}

// Drops the mapped pages of [p, p + n) from this process (whole pages inside the range only).
void release_pages(const uint8_t* p, size_t n) {
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(p) + page - 1) / page * page;
  const uintptr_t end = (reinterpret_cast<uintptr_t>(p) + n) / page * page;
  if (end > begin) madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
}

}  // namespace

void PackedWeights::Free::operator()(uint8_t* p) const { std::free(p); }

PackedWeights pack_weights(const std::vector<Matrix*>& mats, ThreadPool& pool, const LoadProgress& progress) {
  PackedWeights out;
  if (!packing_enabled()) return out;
  const auto t0 = std::chrono::steady_clock::now();
  struct Job {
    Matrix* m;
    size_t offset;
  };
  std::vector<Job> jobs;
  size_t total = 0;
  for (Matrix* m : mats) {
    const size_t bytes = packed_matrix_bytes(*m);
    if (bytes == 0) continue;
    jobs.push_back({m, total});
    total += bytes;
  }
  if (jobs.empty()) return out;
  void* mem = nullptr;
  if (posix_memalign(&mem, 4096, total) != 0) throw std::bad_alloc();
  out.buffer.reset(static_cast<uint8_t*>(mem));
#ifdef MADV_HUGEPAGE
  madvise(mem, total, MADV_HUGEPAGE);  // decode streams every weight: fewer TLB misses
#endif
  out.bytes = total;
  out.matrices = static_cast<int>(jobs.size());

  // Work items of up to 64 row groups, so big matrices spread over the threads.
  struct Item {
    const Job* job;
    int64_t g0, g1;
  };
  std::vector<Item> items;
  constexpr int64_t kGroupsPerItem = 64;
  for (const Job& j : jobs) {
    const int64_t groups = j.m->n_out / kernels::kPackRows;
    for (int64_t g = 0; g < groups; g += kGroupsPerItem) items.push_back({&j, g, std::min(groups, g + kGroupsPerItem)});
  }
  uint8_t* base = out.buffer.get();
  const auto run_item = [&](const Item& it) {
    const Matrix& m = *it.job->m;
    kernels::pack_rows(m.type, m.data, base + it.job->offset, m.n_in, it.g0, it.g1);
    // Release the source rows as soon as they are packed, so peak RSS stays near one copy.
    const size_t rows_bytes = m.row_bytes * kernels::kPackRows;
    release_pages(m.data + static_cast<size_t>(it.g0) * rows_bytes, static_cast<size_t>(it.g1 - it.g0) * rows_bytes);
  };
  const auto item_bytes = [&](const Item& it) {
    return kernels::packed_group_bytes(it.job->m->type, it.job->m->n_in) * static_cast<size_t>(it.g1 - it.g0);
  };
  // Rounds of at least 1/64 of the bytes and 4 items per thread; progress between them.
  const size_t round_bytes = total / 64;
  const size_t round_items = 4 * static_cast<size_t>(pool.size());
  size_t begin = 0, done_bytes = 0;
  progress.report(0, "repack");
  while (begin < items.size()) {
    size_t end = begin, bytes = 0;
    while (end < items.size() && (bytes < round_bytes || end - begin < round_items)) bytes += item_bytes(items[end++]);
    pool.run(static_cast<int64_t>(end - begin), [&](int64_t i, int) { run_item(items[begin + static_cast<size_t>(i)]); });
    done_bytes += bytes;
    begin = end;
    progress.report(static_cast<double>(done_bytes) / static_cast<double>(total), "repack");
  }
  for (const Job& j : jobs) {
    j.m->packed = base + j.offset;
    release_pages(j.m->data, j.m->row_bytes * static_cast<size_t>(j.m->n_out));  // the item boundaries' pages
  }
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

size_t packed_matrix_bytes(const Matrix& m) {
  if (!packing_enabled() || !can_pack(m, kernels::active())) return 0;
  const size_t bytes = kernels::packed_group_bytes(m.type, m.n_in) * static_cast<size_t>(m.n_out / kernels::kPackRows);
  return (bytes + 63) / 64 * 64;  // K-quant units are a little larger than the GGUF blocks
}

bool use_packed(const Matrix& m) {
  return m.packed && kernels::active().packed_matmul[static_cast<int>(m.type)] != nullptr;
}

DType matmul_input_type(const Matrix& m) { return use_packed(m) ? DType::Q8_R : quant::vec_dot_type(m.type); }

}  // namespace edgellm
