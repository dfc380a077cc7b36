// Byte-level BPE tokenizers of SmolLM2 (gpt2-style "smollm" pre-tokenizer) and Qwen2.5
// ("qwen2" pre-tokenizer). See fuzz_tokenizer.h for the input layout and the checks.
#include "fuzz_tokenizer.h"

static fuzz::TokenizerSet* g_set;

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  g_set = new fuzz::TokenizerSet;
  for (const char* name : {"smollm2", "qwen2.5-coder-0.5b"}) {
    g_set->add(fuzz::load_tokenizer(name), true);
    FUZZ_CHECK(g_set->toks.back()->vocab().type == edgellm::VocabType::Bpe);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::run_tokenizer(*g_set, data, size);
  return 0;
}
