// SentencePiece (SPM) tokenizer of Gemma 3 (byte fallback). See fuzz_tokenizer.h for the
// input layout and the checks.
#include "fuzz_tokenizer.h"

static fuzz::TokenizerSet* g_set;

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  g_set = new fuzz::TokenizerSet;
  g_set->add(fuzz::load_tokenizer("gemma3"), true);
  FUZZ_CHECK(g_set->toks.back()->vocab().type == edgellm::VocabType::Spm);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::run_tokenizer(*g_set, data, size);
  return 0;
}
