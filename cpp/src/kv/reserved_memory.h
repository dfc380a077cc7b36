// Address space reserved for a KV pool, committed page by page as it is first written.
//
// Linux (and every POSIX system with lazy anonymous mappings) backs an anonymous mapping with
// memory only where it is touched, so a pool can be reserved large — here: large enough to hold
// the whole KV budget alone — and cost only what is written. `decommit` gives a range back to
// the system (madvise MADV_DONTNEED: the next touch reads zeros and commits afresh); only the
// OS pages wholly inside the range are returned, so a range that does not start and end on OS
// page boundaries keeps its partial edge pages resident (shared with the neighbouring ranges).
// Transparent huge pages are refused for the mapping (MADV_NOHUGEPAGE), or one touched KV page
// could commit 2 MiB.
#pragma once
#include <cstddef>
#include <cstdint>

namespace edgellm {

class ReservedMemory {
 public:
  explicit ReservedMemory(size_t bytes);  // std::bad_alloc when the address space is refused
  ~ReservedMemory();
  ReservedMemory(const ReservedMemory&) = delete;
  ReservedMemory& operator=(const ReservedMemory&) = delete;

  uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  // Returns the OS pages wholly inside [p, p + n) to the system; their contents become zeros.
  // Returns the bytes given back (0 when the range holds no whole OS page).
  size_t decommit(uint8_t* p, size_t n);
  // Bytes of [p, p + n) (rounded out to OS pages) that are resident now (mincore); -1 when the
  // system cannot say. For tests and diagnostics: it walks the range.
  static int64_t resident_bytes(const uint8_t* p, size_t n);
  static size_t os_page_size();

 private:
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace edgellm
