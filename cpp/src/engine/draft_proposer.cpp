// Draft-model proposer (issue 18): see draft_proposer.h for the contract.
#include "engine/draft_proposer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <stdexcept>
#include <string>

#include "common/errors.h"
#include "tokenizer/tokenizer.h"

namespace edgellm {

namespace {

using Clock = std::chrono::steady_clock;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr int32_t kMaxVocabDifference = 128;

uint64_t mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// A token text for an error message: printable ASCII kept, other bytes as \xNN, long texts cut.
std::string shown(const std::string& t) {
  std::string out;
  for (size_t i = 0; i < t.size() && i < 48; ++i) {
    const unsigned char c = static_cast<unsigned char>(t[i]);
    if (c >= 0x20 && c < 0x7f && c != '\\' && c != '\'') {
      out += static_cast<char>(c);
    } else {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    }
  }
  if (t.size() > 48) out += "...";
  return out;
}

std::string id_name(int32_t id) { return id < 0 ? std::string("none") : std::to_string(id); }

std::string ids_text(const std::vector<int32_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? " " : "") + std::to_string(v[i]);
  return s + "]";
}

}  // namespace

void check_draft_vocab(const Tokenizer& target, const Tokenizer& draft) {
  const std::string head = "draft model vocabulary does not match the target's: ";
  const Vocab& t = target.vocab();
  const Vocab& d = draft.vocab();
  auto kind = [](VocabType k) { return k == VocabType::Bpe ? "bpe" : "spm"; };
  if (t.type != d.type)
    throw InvalidRequestError(head + "tokenizer kinds differ (" + kind(t.type) + " vs " + kind(d.type) + ")");
  if (t.type == VocabType::Bpe) {
    const std::string& tp = t.pre_resolved.empty() ? t.pre : t.pre_resolved;
    const std::string& dp = d.pre_resolved.empty() ? d.pre : d.pre_resolved;
    if (tp != dp) throw InvalidRequestError(head + "pre-tokenizers differ ('" + tp + "' vs '" + dp + "')");
  }
  const int32_t nt = t.n_tokens(), nd = d.n_tokens();
  if (std::abs(static_cast<int64_t>(nt) - nd) > kMaxVocabDifference)
    throw InvalidRequestError(head + "vocabulary sizes " + std::to_string(nt) + " and " + std::to_string(nd) +
                              " differ by more than " + std::to_string(kMaxVocabDifference));
  if (t.bos != d.bos)
    throw InvalidRequestError(head + "BOS ids differ (" + id_name(t.bos) + " vs " + id_name(d.bos) + ")");
  if (t.eos != d.eos)
    throw InvalidRequestError(head + "EOS ids differ (" + id_name(t.eos) + " vs " + id_name(d.eos) + ")");
  if (t.eog_ids != d.eog_ids)
    throw InvalidRequestError(head + "end-of-generation ids differ (" + ids_text(t.eog_ids) + " vs " +
                              ids_text(d.eog_ids) + ")");
  const int32_t n = std::min(nt, nd);
  for (int32_t i = 0; i < n; ++i)
    if (t.tokens[i] != d.tokens[i])
      throw InvalidRequestError(head + "token " + std::to_string(i) + " is '" + shown(t.tokens[i]) +
                                "' in the target and '" + shown(d.tokens[i]) + "' in the draft");
}

DraftProposer::DraftProposer(std::shared_ptr<EngineModel> draft, int32_t target_n_vocab, int32_t max_slots,
                             int64_t positions, int32_t page_size, DType kv_type, int32_t max_batch_tokens,
                             uint64_t seed)
    : model_(std::move(draft)), target_n_vocab_(target_n_vocab), max_batch_tokens_(max_batch_tokens), seed_(seed) {
  if (!model_) throw InvalidRequestError("draft proposer: no draft model");
  if (target_n_vocab <= 0 || max_slots <= 0 || positions <= 0 || page_size <= 0 || max_batch_tokens <= 0)
    throw InvalidRequestError("draft proposer: target_n_vocab, max_slots, positions, page_size and max_batch_tokens must be > 0");
  n_vocab_ = model_->n_vocab();
  KVCacheConfig kc = model_->kv_geometry();
  kc.page_size = page_size;
  kc.dtype = kv_type;
  kc.max_seqs = max_slots;
  kc.pages_full = (positions + page_size - 1) / page_size;
  bool window = false;
  for (int32_t w : kc.layer_window) {
    window = window || w > 0;
    max_window_ = std::max(max_window_, w);
  }
  kc.pages_window = window ? kc.pages_full : 0;
  kv_ = std::make_unique<KVCache>(kc);
  slots_.resize(static_cast<size_t>(max_slots));
  work_.resize(static_cast<size_t>(target_n_vocab_));
}

DraftProposer::~DraftProposer() = default;

int64_t DraftProposer::pages_used() const { return kv_->pages_used(); }

void DraftProposer::reset(int slot) {
  SlotState& s = slots_[static_cast<size_t>(slot)];
  kv_->release(slot);
  s.n_computed = 0;
  s.n_real = 0;
  s.drafted.clear();
}

void DraftProposer::release(int slot) {
  if (slot < 0 || slot >= static_cast<int>(slots_.size())) return;
  reset(slot);
  slots_[static_cast<size_t>(slot)].owned = false;
  slots_[static_cast<size_t>(slot)].rng.reset();
}

bool DraftProposer::window_intact(int slot, int32_t n) const {
  if (max_window_ <= 0 || n <= 0) return true;
  int layer = 0;
  while (kv_->window(layer) <= 0) ++layer;
  const auto& table = kv_->page_table(layer, slot);
  // A query at position n sees keys from n - window + 1 to n - 1.
  const int32_t lo = std::max<int32_t>(0, n - max_window_ + 1);
  const int32_t P = kv_->page_size();
  for (int32_t i = lo / P; i <= (n - 1) / P && i < static_cast<int32_t>(table.size()); ++i)
    if (table[static_cast<size_t>(i)] < 0) return false;
  return true;
}

void DraftProposer::shrink(int slot, int32_t n) {
  SlotState& s = slots_[static_cast<size_t>(slot)];
  if (n >= s.n_computed) return;
  if (n <= 0 || !window_intact(slot, n)) {
    reset(slot);
    return;
  }
  kv_->truncate(slot, n);
  s.n_computed = n;
  if (n < s.n_real) {
    s.n_real = n;
    s.drafted.clear();
  } else {
    s.drafted.resize(static_cast<size_t>(n - s.n_real));
  }
}

void DraftProposer::rollback(int slot, uint64_t key, int32_t n) {
  if (slot < 0 || slot >= static_cast<int>(slots_.size())) return;
  const SlotState& s = slots_[static_cast<size_t>(slot)];
  if (!s.owned || s.key != key) return;
  shrink(slot, std::max<int32_t>(0, n));
}

void DraftProposer::retain(const std::vector<std::pair<int, uint64_t>>& live) {
  for (size_t i = 0; i < slots_.size(); ++i) {
    if (!slots_[i].owned) continue;
    const bool keep = std::any_of(live.begin(), live.end(), [&](const std::pair<int, uint64_t>& p) {
      return p.first == static_cast<int>(i) && p.second == slots_[i].key;
    });
    if (!keep) release(static_cast<int>(i));
  }
}

void DraftProposer::run_forward() {
  logits_.resize(static_cast<size_t>(batch_.n_outputs()) * n_vocab_);
  const auto t0 = Clock::now();
  model_->forward(batch_, *kv_, logits_.data());
  stats_.seconds += std::chrono::duration<double>(Clock::now() - t0).count();
  ++stats_.forwards;
  stats_.tokens += batch_.size();
}

bool DraftProposer::choose(DraftRequest& r, const float* row, std::vector<int32_t>& history) {
  SlotState& s = slots_[static_cast<size_t>(r.slot)];
  const int32_t n_copy = std::min(n_vocab_, target_n_vocab_);
  std::copy(row, row + n_copy, work_.begin());
  // Ids the draft lacks can never be proposed; ids the target lacks are outside the row.
  std::fill(work_.begin() + n_copy, work_.end(), kNegInf);
  const std::vector<int32_t>& hist = r.sampler->params().reads_history() ? history : *r.tokens;
  try {
    r.sampler->distribution(work_.data(), target_n_vocab_, hist, r.n_generated + static_cast<int32_t>(r.draft.size()),
                            q_);
  } catch (const InvalidRequestError&) {
    return false;  // every token masked: the target's own sampling reports it
  }
  int32_t token;
  if (r.sampler->params().temperature <= 0.0f) {
    // greedy: one token, or (with XTC) its two outcomes -- propose the likelier
    token = std::max_element(q_.begin(), q_.end(), [](const TokenProb& a, const TokenProb& b) { return a.p < b.p; })->id;
  } else {
    token = s.rng->draw_from(q_);
    r.q.push_back(q_);
  }
  if (token < 0 || token >= target_n_vocab_) return false;
  r.draft.push_back(token);
  if (r.sampler->params().reads_history()) history.push_back(token);
  return true;
}

int32_t DraftProposer::behind(int slot, uint64_t key, const std::vector<int32_t>& tokens) const {
  const int32_t size = static_cast<int32_t>(tokens.size());
  if (slot < 0 || slot >= static_cast<int>(slots_.size()) || size == 0) return std::max(0, size - 1);
  const SlotState& s = slots_[static_cast<size_t>(slot)];
  if (!s.owned || s.key != key) return size - 1;
  int32_t valid = std::min(s.n_real, size);
  if (valid == s.n_real)
    for (size_t j = 0; j < s.drafted.size() && valid < size && tokens[static_cast<size_t>(valid)] == s.drafted[j]; ++j)
      ++valid;
  return std::max(0, size - 1 - std::min(valid, size - 1));
}

void DraftProposer::propose(std::vector<DraftRequest>& reqs) {
  const int n_slots = static_cast<int>(slots_.size());
  std::vector<size_t> active;  // indices into reqs
  std::vector<uint8_t> seen(slots_.size(), 0);
  for (size_t i = 0; i < reqs.size(); ++i) {
    DraftRequest& r = reqs[i];
    r.draft.clear();
    r.q.clear();
    if (r.k <= 0 || !r.tokens || r.tokens->empty() || !r.sampler) continue;
    if (r.slot < 0 || r.slot >= n_slots) throw InvalidRequestError("draft proposer: slot " + std::to_string(r.slot) + " out of range");
    if (seen[static_cast<size_t>(r.slot)]) continue;  // one request per slot and step
    seen[static_cast<size_t>(r.slot)] = 1;
    SlotState& s = slots_[static_cast<size_t>(r.slot)];
    if (!s.owned || s.key != r.key) {
      reset(r.slot);
      s.owned = true;
      s.key = r.key;
      const SamplingParams& p = r.sampler->params();
      s.rng = std::make_unique<Sampler>(SamplingParams{}, std::vector<int32_t>{},
                                        mix64((p.has_seed ? p.seed : seed_) ^ mix64(r.key)));
    }
    const std::vector<int32_t>& tok = *r.tokens;
    const int32_t size = static_cast<int32_t>(tok.size());
    // How much of the draft KV still agrees with the tokens: the sequence's own tokens, then
    // as many drafted tokens as were accepted.
    int32_t valid = std::min(s.n_real, size);
    if (valid == s.n_real)
      for (size_t j = 0; j < s.drafted.size() && valid < size && tok[static_cast<size_t>(valid)] == s.drafted[j]; ++j)
        ++valid;
    valid = std::min(valid, size - 1);  // the last token is fed below, for its logits
    shrink(r.slot, valid);
    s.n_real = s.n_computed;
    s.drafted.clear();
    if (!kv_->reserve(r.slot, size)) {
      reset(r.slot);  // no room: no draft this step, and its pages go back to the others
      continue;
    }
    active.push_back(i);
  }
  if (active.empty()) return;

  // Penalty history per request: the window the penalties look at, then the drafted tokens.
  std::vector<std::vector<int32_t>> history(reqs.size());
  for (size_t i : active) {
    const SamplingParams& p = reqs[i].sampler->params();
    if (!p.reads_history()) continue;
    const auto& tok = *reqs[i].tokens;
    const size_t n = p.repeat_last_n < 0 ? tok.size() : std::min(tok.size(), static_cast<size_t>(p.repeat_last_n));
    history[i].assign(tok.end() - static_cast<std::ptrdiff_t>(n), tok.end());
  }

  std::vector<uint8_t> stopped(reqs.size(), 0);
  std::vector<size_t> rows;  // request of each logits row of the batch
  auto finish_batch = [&](bool catch_up) {
    run_forward();
    for (size_t t = 0; t < static_cast<size_t>(batch_.size()); ++t) {
      const int slot = batch_.seq[t];
      SlotState& s = slots_[static_cast<size_t>(slot)];
      s.n_computed = std::max(s.n_computed, batch_.pos[t] + 1);
      if (catch_up) s.n_real = s.n_computed;
      else s.drafted.push_back(batch_.token[t]);
    }
    for (size_t t = 0; t < static_cast<size_t>(batch_.size()); ++t) {
      const int slot = batch_.seq[t];
      const SlotState& s = slots_[static_cast<size_t>(slot)];
      kv_->set_n_positions(slot, s.n_computed);
      if (catch_up) kv_->trim_window(slot, s.n_computed);  // drafted positions may be rolled back: never trimmed past
    }
    for (size_t i = 0; i < rows.size(); ++i) {
      DraftRequest& r = reqs[rows[i]];
      if (!choose(r, logits_.data() + i * static_cast<size_t>(n_vocab_), history[rows[i]])) stopped[rows[i]] = 1;
    }
    batch_.clear();
    rows.clear();
  };

  // Catch-up: every token not in the draft KV, in batches of at most max_batch_tokens; the
  // batch that reaches a sequence's last token takes its logits (the first draft token).
  batch_.clear();
  rows.clear();
  // The budget goes to the shortest catch-ups first, so sequences that are decoding (a token or
  // two to catch up) always draft while a new long prompt is fed in the background.
  std::vector<int32_t> end(reqs.size(), 0);
  {
    std::vector<size_t> order = active;
    auto need = [&](size_t i) {
      return static_cast<int32_t>(reqs[i].tokens->size()) - slots_[static_cast<size_t>(reqs[i].slot)].n_computed;
    };
    std::stable_sort(order.begin(), order.end(), [&](size_t x, size_t y) { return need(x) < need(y); });
    int64_t budget = catch_up_budget_ > 0 ? catch_up_budget_ : std::numeric_limits<int64_t>::max();
    for (size_t i : order) {
      const int32_t from = slots_[static_cast<size_t>(reqs[i].slot)].n_computed;
      int32_t n = need(i);
      if (n > budget) {  // cut short: no logits, no draft this call
        n = static_cast<int32_t>(budget);
        stopped[i] = 1;
      }
      budget -= n;
      end[i] = from + n;
    }
  }
  for (size_t i : active) {
    DraftRequest& r = reqs[i];
    const auto& tok = *r.tokens;
    const int32_t size = end[i];
    for (int32_t p = slots_[static_cast<size_t>(r.slot)].n_computed; p < size; ++p) {
      const bool last = p == size - 1 && !stopped[i];
      batch_.add(tok[static_cast<size_t>(p)], p, r.slot, last);
      if (last) rows.push_back(i);
      if (batch_.size() >= max_batch_tokens_) finish_batch(true);
    }
  }
  if (!batch_.empty()) finish_batch(true);

  // Drafting: one token per still-drafting sequence per forward, the previous draft as input.
  while (true) {
    for (size_t i : active) {
      DraftRequest& r = reqs[i];
      if (stopped[i] || r.draft.empty() || static_cast<int32_t>(r.draft.size()) >= r.k) continue;
      SlotState& s = slots_[static_cast<size_t>(r.slot)];
      if (!kv_->reserve(r.slot, s.n_computed + 1)) {
        stopped[i] = 1;  // the pool is full: this sequence keeps the draft it has
        continue;
      }
      batch_.add(r.draft.back(), s.n_computed, r.slot, true);
      rows.push_back(i);
      if (batch_.size() >= max_batch_tokens_) finish_batch(false);
    }
    if (batch_.empty()) break;
    finish_batch(false);
  }
}

}  // namespace edgellm
