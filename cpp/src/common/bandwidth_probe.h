// The machine's read bandwidth, measured the way decode uses memory: T threads each stream
// through their own buffer, larger than the last-level cache, once per pass, prefetching into
// L1 ahead of the stream as the decode kernels do (bandwidth_probe.cpp). It is what the
// benchmarks divide weight bytes by ("% of the bandwidth floor"): a decode step reads every
// weight once, so tokens/s ≤ bandwidth / weight bytes.
//
// On a shared machine the bandwidth moves from second to second (other tenants' traffic), so
// one figure taken before a long run says little about the run; bench/compare.py takes a pass
// right before and right after each measurement instead (docs in bench/README.md).
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace edgellm {

class BandwidthProbe {
 public:
  // n_threads buffers of bytes_per_thread each (rounded up to 4 KiB), allocated and written
  // once here (huge pages requested, as for the repacked weights).
  BandwidthProbe(int n_threads, size_t bytes_per_thread);
  ~BandwidthProbe();
  BandwidthProbe(const BandwidthProbe&) = delete;
  BandwidthProbe& operator=(const BandwidthProbe&) = delete;

  struct Pass {
    double seconds = 0;    // from the common start to the last thread's end
    double gb_per_s = 0;   // all threads' bytes / seconds, 1e9 bytes a GB
    uint64_t checksum = 0; // sum of every 64-bit word read: proves each byte was loaded
  };
  // One pass: every thread sums its whole buffer.
  Pass run();

  int n_threads() const { return n_threads_; }
  size_t bytes_per_thread() const { return bytes_; }
  // The checksum a pass must return (the buffers' fill pattern, known in advance).
  uint64_t expected_checksum() const { return expected_; }

 private:
  int n_threads_;
  size_t bytes_;
  std::vector<uint64_t*> bufs_;
  uint64_t expected_ = 0;
};

}  // namespace edgellm
