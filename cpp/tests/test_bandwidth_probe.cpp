// BandwidthProbe: a pass reads every byte (its checksum equals the fill pattern's, for odd and
// even word counts, 1..3 threads), reports a positive finite rate consistent with its time, and
// refuses a zero thread count or a tiny buffer.
#include <cmath>
#include <stdexcept>

#include "common/bandwidth_probe.h"
#include "test_util.h"

using namespace edgellm;

namespace {

template <class F>
bool throws(F&& f) {
  try {
    f();
  } catch (const std::invalid_argument&) {
    return true;
  }
  return false;
}

void reads_every_byte() {
  for (int threads : {1, 2, 3})
    for (size_t bytes : {size_t(4096), size_t(3) << 20, (size_t(1) << 20) + 8}) {
      BandwidthProbe b(threads, bytes);
      CHECK(b.n_threads() == threads);
      CHECK(b.bytes_per_thread() % 4096 == 0 && b.bytes_per_thread() >= bytes);
      for (int r = 0; r < 2; ++r) {
        const BandwidthProbe::Pass p = b.run();
        CHECK(p.checksum == b.expected_checksum());
        CHECK(p.seconds > 0 && std::isfinite(p.gb_per_s) && p.gb_per_s > 0);
        const double gb = static_cast<double>(b.bytes_per_thread()) * threads / 1e9;
        CHECK(std::fabs(p.gb_per_s * p.seconds - gb) <= 1e-6 * gb + 1e-12);
      }
    }
}

void refuses_bad_arguments() {
  CHECK(throws([] { BandwidthProbe b(0, 1 << 20); }));
  CHECK(throws([] { BandwidthProbe b(1, 100); }));
}

}  // namespace

int main() {
  reads_every_byte();
  refuses_bad_arguments();
  return test_util::report();
}
