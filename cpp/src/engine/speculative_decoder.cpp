#include "engine/speculative_decoder.h"

#include <algorithm>
#include <random>
#include <utility>

#include "common/errors.h"

namespace edgellm {

SpeculativeDecoder::SpeculativeDecoder(const SpeculativeConfig& cfg, std::shared_ptr<EngineModel> draft_model,
                                       int32_t n_vocab, int32_t n_ctx, int32_t max_batch_tokens,
                                       const DraftPool& pool)
    : cfg_(cfg), n_ctx_(n_ctx), max_batch_tokens_(max_batch_tokens) {
  if (cfg_.max_draft < 0 || cfg_.max_draft > 64)
    throw InvalidRequestError("num_speculative_tokens must be between 1 and 64, got " + std::to_string(cfg_.max_draft));
  if (cfg_.mode == SpecMode::Draft && !draft_model)
    throw InvalidRequestError("speculative mode 'draft' needs a draft model (draft_model=..., --draft MODEL)");
  if (draft_model && (cfg_.mode == SpecMode::Draft || cfg_.mode == SpecMode::Auto)) {
    std::random_device rd;
    draft_ = std::make_unique<DraftProposer>(std::move(draft_model), n_vocab, pool.slots,
                                             pool.positions * pool.page_size, pool.page_size, pool.kv_type,
                                             max_batch_tokens, (static_cast<uint64_t>(rd()) << 32) ^ rd());
    draft_->set_catch_up_budget(max_batch_tokens);  // a long prompt reaches the draft over several steps
  }
}

void SpeculativeDecoder::start(Sequence* s, const std::vector<int32_t>& prompt) const {
  if (cfg_.mode != SpecMode::Ngram && cfg_.mode != SpecMode::Auto) return;
  s->ngram = std::make_unique<NgramProposer>(cfg_.ngram_max, cfg_.ngram_min);
  s->ngram->push(prompt);
  s->accept_ngram.assign(static_cast<size_t>(cfg_.ngram_max) + 1, SpecAcceptance{});
}

// Acceptance of an n-gram draft from a match of n tokens: that length's own record, over the
// record of every match at least as long as its prior (a longer match is the better evidence:
// where those fail, a shorter one fails too). Each length starting from an even chance made
// free prose draft again at every match length it had not failed at yet (12 lengths, each
// needing ~10 rejections to stop: half the steps of an answer drafted at < 20 % acceptance,
// cpp/tests/test_speculative.cpp test_prose_stops_drafting); a long match the sequence has no
// record of still gets its try.
double ngram_alpha(const Sequence& s, int32_t n) {
  SpecAcceptance longer;
  for (size_t m = static_cast<size_t>(n); m < s.accept_ngram.size(); ++m) {
    longer.accepted += s.accept_ngram[m].accepted;
    longer.rejected += s.accept_ngram[m].rejected;
  }
  return s.accept_ngram[static_cast<size_t>(n)].alpha_given(longer.alpha());
}

// Default caps. N-gram drafts cost no model time, and where a passage is being copied they are
// accepted nearly whole, so the cap only bounds the verify step: measured on the 1.5B code edit
// (1 thread, same run) 32 drafted tokens per step ran 44 t/s against 37.6 with 16, and 64 no
// better than 32; the adaptive policy still picks k ≤ cap from measured step costs. A draft
// model pays a forward per drafted token, so its cap stays lower.
int32_t SpeculativeDecoder::max_draft(bool from_model) const {
  if (cfg_.max_draft > 0) return cfg_.max_draft;
  return from_model ? 8 : 32;
}

void SpeculativeDecoder::propose(const std::vector<std::shared_ptr<Sequence>>& running) {
  if (cfg_.mode == SpecMode::Off) return;
  // Tokens this step will have without drafts: one per decoding sequence, prompt chunks.
  int32_t base = 0;
  for (const auto& sp : running) base += std::min(sp->remaining(), max_batch_tokens_);
  base = std::max(1, std::min(base, max_batch_tokens_));
  draft_reqs_.clear();
  std::vector<Sequence*> from_model;
  bool explored = false;  // one sequence per step may try a batch size not measured yet
  for (const auto& sp : running) {
    Sequence* s = sp.get();
    s->draft.clear();
    s->draft_q.clear();
    s->draft_from_model = false;
    if (s->embedding || s->want_prompt_logprobs || !s->images.empty() || s->blocked() || !s->siblings.empty() || s->remaining() != 1) continue;
    // Every accepted draft and the token after them must fit max_tokens and the context.
    int32_t left = n_ctx_ - static_cast<int32_t>(s->tokens.size()) - 1;
    if (s->max_tokens >= 0) left = std::min(left, s->max_tokens - s->n_generated() - 1);
    if (left <= 0) continue;
    if (s->ngram) {
      const NgramProposer::Match m = s->ngram->find_match();
      if (m.n > 0) {
        const int32_t k_max = std::min(left, max_draft(false));
        const double alpha = ngram_alpha(*s, m.n);
        int32_t k = k_max;
        if (cfg_.adaptive) {
          const SpecChoice c = choose_draft_length(step_cost_, base, alpha, k_max, 0.0, 0.0, !explored);
          k = c.k;
          explored = explored || c.explores;
        }
        if (k > 0) s->ngram->propose(k, &s->draft);
        if (!s->draft.empty()) {
          s->draft_ngram_n = m.n;
          base += static_cast<int32_t>(s->draft.size());
          continue;
        }
      }
    }
    if (!draft_) continue;
    const int32_t k_max = std::min(left, max_draft(true));
    const uint64_t key = static_cast<uint64_t>(s->arrival) + 1;
    // Auto: the draft must first read what it has not seen (tokens accepted from n-gram drafts,
    // or the whole prompt), paid before any drafted token, so it weighs on the choice; until
    // that cost was measured, the target's own cost per prompt token stands in (an upper bound
    // for a smaller draft). Draft mode has no other proposer: there the catch-up is the price of
    // drafting at all.
    double catch_up = 0.0;
    if (cfg_.mode == SpecMode::Auto) {
      const double per = draft_catch_up_seconds_ > 0
                             ? draft_catch_up_seconds_
                             : step_cost_.estimate(max_batch_tokens_) / max_batch_tokens_;
      catch_up = per * draft_->behind(s->slot, key, s->tokens);
    }
    int32_t k = k_max;
    if (cfg_.adaptive) {
      const SpecChoice c = choose_draft_length(step_cost_, base, s->accept_draft.alpha(), k_max,
                                               draft_forward_seconds_, catch_up, !explored);
      k = c.k;
      explored = explored || c.explores;
    }
    if (k <= 0) continue;
    DraftRequest r;
    r.slot = s->slot;
    r.key = key;
    r.tokens = &s->tokens;
    r.k = k;
    r.sampler = s->sampler.get();
    r.n_generated = s->n_generated();
    draft_reqs_.push_back(std::move(r));
    from_model.push_back(s);
    base += k;
  }
  if (!draft_) return;
  std::vector<std::pair<int, uint64_t>> live;
  for (const auto& sp : running)
    if (sp->slot >= 0) live.emplace_back(sp->slot, static_cast<uint64_t>(sp->arrival) + 1);
  draft_->retain(live);
  if (draft_reqs_.empty()) return;
  const DraftStats before = draft_->stats();
  draft_->propose(draft_reqs_);
  const DraftStats& after = draft_->stats();
  const int64_t forwards = after.forwards - before.forwards, tokens = after.tokens - before.tokens;
  // The cost of drafting one more token for a sequence: one more draft forward. Calls that were
  // mostly catch-up (a prompt run through the draft) say little about that and are skipped.
  if (forwards > 0 && tokens <= (forwards + 2) * static_cast<int64_t>(draft_reqs_.size())) {
    const double per = (after.seconds - before.seconds) / forwards;
    draft_forward_seconds_ = draft_forward_seconds_ > 0 ? 0.8 * draft_forward_seconds_ + 0.2 * per : per;
  } else if (tokens > 0) {
    const double per = (after.seconds - before.seconds) / tokens;  // mostly catch-up: cost per token read
    draft_catch_up_seconds_ = draft_catch_up_seconds_ > 0 ? 0.8 * draft_catch_up_seconds_ + 0.2 * per : per;
  }
  for (size_t i = 0; i < draft_reqs_.size(); ++i) {
    Sequence* s = from_model[i];
    s->draft = std::move(draft_reqs_[i].draft);
    s->draft_q = std::move(draft_reqs_[i].q);
    s->draft_from_model = !s->draft.empty();
  }
}

int32_t SpeculativeDecoder::verify(Sequence* s, int32_t nd, const float* rows, int32_t n_vocab,
                                   std::vector<float>& work, const Hooks& hooks) {
  const std::vector<int32_t> draft = std::move(s->draft);  // commit_draft / finish clear it anyway
  const std::vector<std::vector<TokenProb>> draft_q = std::move(s->draft_q);
  const bool from_model = s->draft_from_model;
  const SamplingParams& params = s->sampler->params();
  // A drafted token chosen by the draft's distribution q at temperature > 0 is accepted with
  // min(1, p/q) and otherwise replaced by a draw from the residual max(0, p - q): the speculative
  // sampling rule. Greedy drafts and n-gram drafts (a deterministic proposal) need no rule: the
  // row is sampled exactly as a decode step samples it (same chain, same generator stream) and
  // the draft is accepted when it matches, so the output is the one decoding without drafts gives.
  const bool rule = from_model && params.temperature > 0.0f && draft_q.size() == draft.size();
  ++steps_;
  drafted_ += nd;
  s->draft_n += nd;
  int32_t accepted = 0;
  const int32_t shifts = s->context_shifts;  // a shift (only on the walk's last token) restarts the KV
  for (int32_t i = 0; i <= nd; ++i) {
    const float* row = rows + static_cast<size_t>(i) * n_vocab;
    work.assign(row, row + n_vocab);
    int32_t token;
    TokenLogprob lp;
    try {
      hooks.mask(work.data());
      if (rule && i < nd) {
        s->sampler->distribution(work.data(), n_vocab, s->tokens, s->n_generated(), spec_p_);
        token = speculative_pick(spec_p_, draft[i], draft_q[i], *s->sampler);
        if (params.logprobs >= 0) lp = Sampler::logprobs_of(work.data(), n_vocab, token, params.logprobs);
      } else {
        token = s->sampler->sample(work.data(), n_vocab, s->tokens, s->n_generated(), &lp);
      }
      if (s->constraint) s->constraint->accept(token);
    } catch (const std::exception& e) {
      hooks.fail(e.what());
      break;
    }
    const bool hit = i < nd && token == draft[i];
    if (hit) {
      ++accepted;
      ++accepted_;
      ++s->draft_n_accepted;
    }
    hooks.emit(token, params.logprobs >= 0 ? &lp : nullptr);
    if (s->slot < 0 || !hit || s->context_shifts != shifts) break;  // finished, first rejection, or shifted
  }
  if (from_model) s->accept_draft.update(nd, accepted);
  else if (s->draft_ngram_n > 0 && s->draft_ngram_n < static_cast<int32_t>(s->accept_ngram.size())) {
    s->accept_ngram[static_cast<size_t>(s->draft_ngram_n)].update(nd, accepted);
  }
  return accepted;
}

void SpeculativeDecoder::rollback(const Sequence* s) {
  if (draft_) draft_->rollback(s->slot, static_cast<uint64_t>(s->arrival) + 1, s->n_computed);
}

void SpeculativeDecoder::forget(Sequence* s) {
  s->draft.clear();
  s->draft_q.clear();
  if (draft_ && s->slot >= 0) draft_->release(s->slot);
}

SpecCounters SpeculativeDecoder::counters() const {
  SpecCounters c;
  c.drafted = drafted_;
  c.accepted = accepted_;
  c.steps = steps_;
  if (draft_) {
    c.draft_forwards = draft_->stats().forwards;
    c.draft_seconds = draft_->stats().seconds;
  }
  return c;
}

}  // namespace edgellm
