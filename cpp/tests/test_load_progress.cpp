// Load progress (model/load_progress.h) and its use by pack_weights (model/weight_packing.h):
// - LoadProgress maps each range's 0..1 into its part of the whole, never goes back, and a
//   callback returning false throws LoadCancelled naming the stage;
// - pack_weights reports rounds from the calling thread, monotone, ending at the whole range,
//   and its packed copies equal pack_rows of the original rows (every row group packed once
//   whatever the rounds);
// - a cancel in the middle throws LoadCancelled and leaves no matrix pointing at a buffer.
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "common/errors.h"
#include "common/thread_pool.h"
#include "gguf/gguf_file.h"
#include "kernels/kernels.h"
#include "kernels/packed.h"
#include "model/load_progress.h"
#include "model/weight_packing.h"
#include "quant/quant.h"
#include "test_util.h"

using namespace edgellm;

namespace {

struct Reported {
  double fraction;
  std::string stage;
  std::thread::id thread;
};

void test_ranges_and_cancel() {
  std::vector<Reported> got;
  LoadProgress p([&](double f, const char* s) {
    got.push_back({f, s, std::this_thread::get_id()});
    return true;
  });
  LoadProgress a = p.range(0.2, 0.6);
  a.report(0.5, "x");                  // 0.2 + 0.4 * 0.5
  a.range(0.5, 1.0).report(1.0, "y");  // 0.6
  a.report(0.0, "z");                  // would be 0.2: held at 0.6
  p.report(2.0, "w");                  // clamped to 1
  CHECK(got.size() == 4);
  CHECK_NEAR(got[0].fraction, 0.4, 1e-12);
  CHECK_NEAR(got[1].fraction, 0.6, 1e-12);
  CHECK_NEAR(got[2].fraction, 0.6, 1e-12);
  CHECK(got[3].fraction == 1.0 && got[3].stage == "w");

  LoadProgress none;  // no callback: nothing happens, never throws
  none.report(0.5, "x");
  CHECK(!none.active());

  LoadProgress stop([](double f, const char*) { return f < 0.5; });
  stop.report(0.25, "open");
  bool threw = false;
  try {
    stop.report(0.75, "repack");
  } catch (const LoadCancelled& e) {
    threw = std::string(e.what()).find("repack") != std::string::npos;
  }
  CHECK(threw);
}

struct Matrices {
  TensorInfo info;
  std::vector<std::vector<uint8_t>> data, original;
  std::vector<Matrix> mats;
};

// n matrices of Q8_0, 16 * groups rows of K elements, random blocks with finite scales.
Matrices make_matrices(int n, int64_t K, int64_t groups, std::mt19937& rng) {
  Matrices m;
  m.info.name = "test";
  m.info.type = DType::Q8_0;
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (int i = 0; i < n; ++i) {
    const int64_t rows = groups * kernels::kPackRows;
    const size_t rb = row_bytes(DType::Q8_0, K);
    std::vector<float> x(static_cast<size_t>(K));
    std::vector<uint8_t> d(rb * static_cast<size_t>(rows));
    for (int64_t r = 0; r < rows; ++r) {
      for (auto& v : x) v = u(rng);
      quant::quantize_row(DType::Q8_0, x.data(), d.data() + static_cast<size_t>(r) * rb, K);
    }
    m.original.push_back(d);
    m.data.push_back(std::move(d));
  }
  for (int i = 0; i < n; ++i) {
    Matrix mt;
    mt.info = &m.info;
    mt.type = DType::Q8_0;
    mt.data = m.data[i].data();
    mt.n_in = K;
    mt.n_out = groups * kernels::kPackRows;
    mt.row_bytes = row_bytes(DType::Q8_0, K);
    m.mats.push_back(mt);
  }
  return m;
}

std::vector<Matrix*> pointers(Matrices& m) {
  std::vector<Matrix*> out;
  for (auto& mt : m.mats) out.push_back(&mt);
  return out;
}

void test_pack_weights(std::mt19937& rng) {
  Matrices m = make_matrices(20, 256, 70, rng);  // 70 groups: items of 64 and 6 groups; 40 items
  if (packed_matrix_bytes(m.mats[0]) == 0) {
    std::printf("no packed Q8_0 kernel in the active table (or EDGELLM_REPACK=0): pack_weights not checked\n");
    return;
  }
  ThreadPool pool(2);  // rounds of at least 8 items: 5 rounds
  std::vector<Reported> got;
  LoadProgress whole([&](double f, const char* s) {
    got.push_back({f, s, std::this_thread::get_id()});
    return true;
  });
  PackedWeights pw = pack_weights(pointers(m), pool, whole.range(0.1, 0.9));
  CHECK(pw.matrices == 20);
  CHECK(got.size() >= 5);  // the start and each round
  bool monotone = true, on_caller = true, stage = true;
  for (size_t i = 0; i < got.size(); ++i) {
    if (i > 0 && got[i].fraction < got[i - 1].fraction) monotone = false;
    if (got[i].thread != std::this_thread::get_id()) on_caller = false;
    if (got[i].stage != "repack") stage = false;
  }
  CHECK(monotone && on_caller && stage);
  CHECK_NEAR(got.front().fraction, 0.1, 1e-12);
  CHECK(got.back().fraction > 0.89 && got.back().fraction <= 0.9);
  // every group packed exactly as pack_rows packs the original rows
  bool same = true;
  for (size_t i = 0; i < m.mats.size(); ++i) {
    const Matrix& mt = m.mats[i];
    CHECK(mt.packed != nullptr);
    const int64_t groups = mt.n_out / kernels::kPackRows;
    std::vector<uint8_t> ref(kernels::packed_group_bytes(mt.type, mt.n_in) * static_cast<size_t>(groups));
    kernels::pack_rows(mt.type, m.original[i].data(), ref.data(), mt.n_in, 0, groups);
    same = same && mt.packed && std::memcmp(ref.data(), mt.packed, ref.size()) == 0;
  }
  CHECK(same);

  // cancelled in the middle: LoadCancelled, no matrix left pointing into a freed buffer
  Matrices c = make_matrices(20, 256, 70, rng);
  int calls = 0;
  LoadProgress stop([&](double f, const char*) {
    ++calls;
    return f < 0.5;
  });
  bool threw = false;
  try {
    pack_weights(pointers(c), pool, stop);
  } catch (const LoadCancelled&) {
    threw = true;
  }
  CHECK(threw);
  CHECK(calls >= 2);
  bool none_packed = true;
  for (const Matrix& mt : c.mats) none_packed = none_packed && mt.packed == nullptr;
  CHECK(none_packed);
}

}  // namespace

int main() {
  std::mt19937 rng(77);
  test_ranges_and_cancel();
  test_pack_weights(rng);
  return test_util::report();
}
