// BPE pre-tokenization: splits text into words with the regex list of a `tokenizer.ggml.pre`
// type, emulated by hand-written matchers that give exactly llama.cpp's splits (its custom
// GPT-2/Llama-3 splitters, and its std::regex path with "collapsed" Unicode categories).
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace edgellm {

// Returns the words of `text` (UTF-8, invalid bytes replaced by U+FFFD) for pre-tokenizer
// `pre` (a resolved name: smollm, llama3, qwen2, gpt2, default).
std::vector<std::string> pretokenize(std::string_view text, const std::string& pre);

}  // namespace edgellm
