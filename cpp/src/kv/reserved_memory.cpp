#include "kv/reserved_memory.h"

#include <sys/mman.h>
#include <unistd.h>

#include <new>
#include <vector>

namespace edgellm {

size_t ReservedMemory::os_page_size() {
  static const size_t page = [] {
    const long p = sysconf(_SC_PAGESIZE);
    return p > 0 ? static_cast<size_t>(p) : size_t{4096};
  }();
  return page;
}

ReservedMemory::ReservedMemory(size_t bytes) : size_(bytes) {
  const size_t len = bytes ? bytes : 1;
  int flags = MAP_PRIVATE | MAP_ANONYMOUS;
#ifdef MAP_NORESERVE
  flags |= MAP_NORESERVE;  // no swap reservation for the part never touched
#endif
  void* p = mmap(nullptr, len, PROT_READ | PROT_WRITE, flags, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  data_ = static_cast<uint8_t*>(p);
#ifdef MADV_NOHUGEPAGE
  madvise(p, len, MADV_NOHUGEPAGE);  // advisory: failure leaves ordinary behaviour
#endif
}

ReservedMemory::~ReservedMemory() {
  munmap(data_, size_ ? size_ : 1);
}

size_t ReservedMemory::decommit(uint8_t* p, size_t n) {
  if (n == 0) return 0;
  const size_t page = os_page_size();
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(p) + page - 1) / page * page;
  const uintptr_t end = (reinterpret_cast<uintptr_t>(p) + n) / page * page;
  if (end <= begin) return 0;
#ifdef MADV_DONTNEED
  if (madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED) != 0) return 0;
  return end - begin;
#else
  return 0;
#endif
}

int64_t ReservedMemory::resident_bytes(const uint8_t* p, size_t n) {
  if (n == 0) return 0;
  const size_t page = os_page_size();
  const uintptr_t begin = reinterpret_cast<uintptr_t>(p) / page * page;
  const uintptr_t end = (reinterpret_cast<uintptr_t>(p) + n + page - 1) / page * page;
#if defined(__APPLE__)
  std::vector<char> vec((end - begin) / page);
#else
  std::vector<unsigned char> vec((end - begin) / page);
#endif
  if (mincore(reinterpret_cast<void*>(begin), end - begin, vec.data()) != 0) return -1;
  int64_t resident = 0;
  for (auto v : vec) resident += (v & 1) ? static_cast<int64_t>(page) : 0;
  return resident;
}

}  // namespace edgellm
