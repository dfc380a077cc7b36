// A minimal check harness for the C++ unit tests: CHECK / CHECK_NEAR record failures and keep
// going; main() ends with `return test_util::report();`, which prints "N passed, M failed" and
// is nonzero when anything failed.
#pragma once
#include <cmath>
#include <cstdio>

#include "common/errors.h"

namespace test_util {

// True when f() throws edgellm::InvalidRequestError (any other exception propagates).
template <class F>
bool throws_invalid(F f) {
  try {
    f();
  } catch (const edgellm::InvalidRequestError&) {
    return true;
  }
  return false;
}

inline int& passed() { static int n = 0; return n; }
inline int& failed() { static int n = 0; return n; }

inline void record(bool ok, const char* expr, const char* file, int line) {
  if (ok) {
    ++passed();
  } else {
    ++failed();
    std::fprintf(stderr, "%s:%d: CHECK failed: %s\n", file, line, expr);
  }
}

inline int report() {
  std::printf("%d passed, %d failed\n", passed(), failed());
  return failed() == 0 ? 0 : 1;
}

}  // namespace test_util

#define CHECK(cond) test_util::record(static_cast<bool>(cond), #cond, __FILE__, __LINE__)
#define CHECK_NEAR(a, b, tol)                                                                \
  test_util::record(std::fabs(static_cast<double>(a) - static_cast<double>(b)) <=            \
                        static_cast<double>(tol),                                            \
                    #a " ~= " #b " within " #tol, __FILE__, __LINE__)
