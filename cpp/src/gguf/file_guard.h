// The SIGBUS guard over mapped model files.
//
// A model's weights are read through a file mapping (gguf/gguf_file.h). If the file is truncated
// or rewritten in place while it is mapped (`truncate`, `cp` over it: cp truncates first), a read
// of a page that is no longer backed by the file raises SIGBUS, which would kill the whole
// process. Each mapping is registered here; a SIGBUS whose fault address lies inside a registered
// mapping replaces that whole mapping with anonymous zero pages (mmap MAP_FIXED, which the handler
// may call: it is one system call) and marks it faulted, so the faulting read and every later
// one see zeros and the step finishes. The model's owner (GgufFile::check_unchanged) then fails
// the step and refuses further work with ModelFileChangedError. A SIGBUS anywhere else goes on
// to the handler that was installed before (or the default action: the process dies as before).
#pragma once
#include <cstddef>

namespace edgellm::file_guard {

// Registers [base, base + size); returns a handle for the calls below, or -1 when the table is
// full (the mapping is then not guarded). Installs the handler on first use, and again when
// someone replaced it since (it chains to whatever was there).
int add(const void* base, size_t size);
// Forgets a registration (before the mapping is unmapped). -1 is ignored.
void remove(int handle);
// Whether a SIGBUS hit the registered mapping (it now reads as zeros).
bool faulted(int handle);

}  // namespace edgellm::file_guard
