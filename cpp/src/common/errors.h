// Typed errors of the engine. The bindings map each to an edgellm Python exception,
// so every message must name the file, tensor, key or parameter at fault.
#pragma once
#include <stdexcept>
#include <string>

namespace edgellm {

struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// A GGUF file that is malformed, truncated, or uses something we do not support.
// Python: edgellm.ModelFormatError (subclass of ValueError).
struct ModelFormatError : Error {
  using Error::Error;
};

// A request the engine cannot serve as asked (bad parameter, unknown token id, ...).
// Python: edgellm.InvalidRequestError (subclass of ValueError).
struct InvalidRequestError : Error {
  using Error::Error;
};

// Prompt (+ max_tokens) does not fit the context or the KV memory.
// Python: edgellm.ContextLengthError (subclass of InvalidRequestError).
struct ContextLengthError : InvalidRequestError {
  using InvalidRequestError::InvalidRequestError;
};

// The request was cancelled while in flight. Python: edgellm.RequestCancelled.
struct RequestCancelled : Error {
  using Error::Error;
};

// A model load stopped by its progress callback (model/load_progress.h).
// Python: edgellm.LoadCancelled (subclass of RequestCancelled).
struct LoadCancelled : RequestCancelled {
  using RequestCancelled::RequestCancelled;
};

// A loaded model's file was changed in place (truncated, rewritten) while mapped: what the
// engine read from it can no longer be trusted, so the requests running on it fail and the
// model takes no more work (gguf/file_guard.h). Python: edgellm.ModelFileChangedError. Every
// message contains kModelFileChanged, which is how a request's error event is told apart.
struct ModelFileChangedError : Error {
  using Error::Error;
};
inline constexpr const char* kModelFileChanged = "the model file changed on disk while loaded";

// Writing a file failed for lack of room (ENOSPC, EDQUOT) or another I/O error that is the
// server's, not the request's. `err` is the errno. Python: edgellm.StorageError (an OSError).
struct StorageError : Error {
  StorageError(int e, const std::string& what) : Error(what), err(e) {}
  int err;
};

}  // namespace edgellm
