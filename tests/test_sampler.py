"""The sampler chain on fixed logits (edgellm._testing hooks): draw statistics, each
truncation step, penalties, masks, log-probs and seeding."""
import math

import numpy as np
import pytest

from edgellm import InvalidRequestError, SamplingParams, _testing


def core(**kw):
    return SamplingParams(**kw).to_core()


def plain(temperature=1.0, **kw):
    """No truncation: the draw follows softmax(logits / T)."""
    return core(temperature=temperature, top_k=0, top_p=1.0, min_p=0.0, **kw)


LOGITS = np.array([2.0, 1.0, 0.5, 0.0, -0.5, -1.0, 1.5, 0.25], dtype=np.float32)


def softmax(x):
    e = np.exp(x - x.max())
    return e / e.sum()


def chi_square(counts, probs, n):
    expected = probs * n
    return float(((counts - expected) ** 2 / expected).sum())


# 99.9% quantile of chi-square with 7 degrees of freedom: a correct sampler fails 1 in 1000.
CHI2_7_999 = 24.32


@pytest.mark.parametrize("temperature", [1.0, 0.7, 1.8])
def test_draws_follow_softmax_over_temperature(temperature):
    n = 10000
    draws = _testing.sample_tokens(LOGITS, plain(temperature), 1234, n)
    counts = np.bincount(draws, minlength=len(LOGITS)).astype(np.float64)
    assert chi_square(counts, softmax(LOGITS / temperature), n) < CHI2_7_999


def test_chi_square_detects_wrong_temperature():
    # The statistic has power: draws at T=1 are far from softmax(logits / 2).
    n = 10000
    counts = np.bincount(_testing.sample_tokens(LOGITS, plain(1.0), 7, n), minlength=8).astype(np.float64)
    assert chi_square(counts, softmax(LOGITS / 2.0), n) > 10 * CHI2_7_999


def test_greedy_and_degenerate_truncation_equal_argmax():
    rng = np.random.default_rng(0)
    for seed in range(20):
        logits = rng.normal(size=200).astype(np.float32)
        best = int(np.argmax(logits))
        assert _testing.sample_once(logits, core(temperature=0.0), seed)[0] == best
        assert _testing.sample_once(logits, core(temperature=1.5, top_k=1, min_p=0.0), seed)[0] == best
        assert _testing.sample_once(logits, core(temperature=1.5, top_k=0, top_p=1e-6, min_p=0.0), seed)[0] == best


def plain_argmax(row):
    """The reference: the dependent scan (first strictly larger value wins; NaN never does)."""
    best, at = -np.inf, -1
    for i, x in enumerate(row.tolist()):
        if x > best:
            best, at = x, i
    return at


def test_argmax_equals_the_plain_scan():
    # Sizes around the 256-value blocks, ties (a small set of values), NaN, -inf and +inf, the
    # maximum in the tail, in the first and last block.
    rng = np.random.default_rng(5)
    sizes = [0, 1, 2, 15, 16, 255, 256, 257, 511, 512, 513, 1000, 4096 + 17, 262144]
    for trial in range(300):
        n = sizes[trial % len(sizes)] if trial < 2 * len(sizes) else int(rng.integers(0, 3000))
        kind = trial % 5
        if kind == 0:
            row = rng.normal(size=n)
        elif kind == 1:
            row = rng.integers(-3, 3, size=n).astype(np.float64)  # many ties
        else:
            row = rng.normal(size=n)
            for special in (np.nan, -np.inf, np.inf)[: kind - 1]:
                row[rng.random(n) < 0.05] = special
        row = row.astype(np.float32)
        assert _testing.argmax(row) == plain_argmax(row), (n, kind)
    assert _testing.argmax(np.full(300, -np.inf, np.float32)) == -1
    assert _testing.argmax(np.full(300, np.nan, np.float32)) == -1
    row = np.full(600, -np.inf, np.float32)
    row[599] = -1e30
    assert _testing.argmax(row) == 599  # in the tail after two -inf blocks


def test_top_k_keeps_the_k_largest():
    kept = _testing.truncate_candidates(LOGITS, "top_k", 3)
    assert kept == [0, 1, 6]
    assert _testing.truncate_candidates(LOGITS, "top_k", 0) == list(range(8))


def test_top_p_keeps_smallest_prefix_reaching_p():
    p = softmax(LOGITS)
    order = np.argsort(-p)
    cum = np.cumsum(p[order])
    for top_p in (0.3, 0.5, 0.8, 0.95):
        k = int(np.searchsorted(cum, top_p) + 1)
        assert _testing.truncate_candidates(LOGITS, "top_p", top_p) == sorted(order[:k].tolist())


def test_min_p_removes_tokens_below_fraction_of_max():
    p = softmax(LOGITS)
    for min_p in (0.05, 0.2, 0.5, 0.9):
        want = sorted(np.nonzero(p >= min_p * p.max() * (1 - 1e-6))[0].tolist())
        assert _testing.truncate_candidates(LOGITS, "min_p", min_p) == want
    # and the draws never pick a removed token
    draws = set(_testing.sample_tokens(LOGITS, core(temperature=1.0, top_k=0, top_p=1.0, min_p=0.5), 3, 2000))
    assert draws <= set(_testing.truncate_candidates(LOGITS, "min_p", 0.5))


def test_typical_p_keeps_tokens_nearest_the_entropy():
    p = softmax(LOGITS.astype(np.float64))
    h = -(p * np.log(p)).sum()
    order = np.argsort(np.abs(-np.log(p) - h), kind="stable")
    cum = np.cumsum(p[order])
    k = int(np.nonzero(cum > 0.5)[0][0] + 1)
    assert _testing.truncate_candidates(LOGITS, "typical_p", 0.5) == sorted(order[:k].tolist())


def test_penalties_change_logits_as_documented():
    logits = np.array([2.0, -2.0, 1.0, 0.5, -0.5], dtype=np.float32)
    history = [0, 1, 1, 4, 3, 3, 3]
    out = _testing.apply_penalties(logits, history, 64, 2.0, 0.25, 0.5)
    # token 0: count 1, positive -> /2 ; then -1*0.25 - 0.5
    # token 1: count 2, negative -> *2 ; then -2*0.25 - 0.5
    # token 2: absent, unchanged
    # token 3: count 3, positive -> /2 ; -3*0.25 - 0.5
    # token 4: count 1, negative -> *2 ; -0.25 - 0.5
    want = np.array([2 / 2 - 0.75, -4.0 - 1.0, 1.0, 0.25 - 1.25, -1.0 - 0.75], dtype=np.float32)
    np.testing.assert_allclose(out, want, rtol=0, atol=1e-6)
    # only the last repeat_last_n tokens count: window [3, 3] -> token 3 count 2
    out = _testing.apply_penalties(logits, history, 2, 2.0, 0.25, 0.5)
    want = logits.copy()
    want[3] = 0.25 - 0.5 - 0.5
    np.testing.assert_allclose(out, want, atol=1e-6)
    # repeat_last_n = 0 disables; -1 uses everything
    np.testing.assert_array_equal(_testing.apply_penalties(logits, history, 0, 2.0, 0.25, 0.5), logits)
    np.testing.assert_allclose(_testing.apply_penalties(logits, history, -1, 2.0, 0.25, 0.5),
                               _testing.apply_penalties(logits, history, 64, 2.0, 0.25, 0.5))


def test_penalty_counts_prompt_tokens_in_greedy_choice():
    logits = np.array([3.0, 2.9, 0.0], dtype=np.float32)
    # token 0 in the history (prompt) is penalised below token 1
    assert _testing.sample_once(logits, core(temperature=0, repetition_penalty=1.1), 0, [0])[0] == 1
    assert _testing.sample_once(logits, core(temperature=0), 0, [0])[0] == 0


def test_logit_bias_and_eog_masks():
    logits = np.array([5.0, 1.0, 0.0, 0.0], dtype=np.float32)
    assert _testing.sample_once(logits, core(temperature=0, logit_bias={2: 10.0}), 0)[0] == 2
    assert _testing.sample_once(logits, core(temperature=0, logit_bias={0: -math.inf}), 0)[0] == 1
    # token 0 is end-of-generation: masked before min_tokens and with ignore_eos
    assert _testing.sample_once(logits, core(temperature=0), 0, [], 0, [0])[0] == 0
    assert _testing.sample_once(logits, core(temperature=0, min_tokens=3), 0, [], 2, [0])[0] == 1
    assert _testing.sample_once(logits, core(temperature=0, min_tokens=3), 0, [], 3, [0])[0] == 0
    assert _testing.sample_once(logits, core(temperature=0, ignore_eos=True), 0, [], 10, [0])[0] == 1
    # stop_token_ids are masked before min_tokens too
    assert _testing.sample_once(logits, core(temperature=0, min_tokens=1, stop_token_ids=[0]), 0, [], 0)[0] == 1
    with pytest.raises(InvalidRequestError):
        _testing.sample_once(np.array([1.0, 2.0], dtype=np.float32),
                          core(temperature=0, logit_bias={0: -math.inf, 1: -math.inf}), 0)


def test_logprobs_are_before_truncation_and_temperature():
    logits = np.array([2.0, 1.0, 0.0, -1.0], dtype=np.float32)
    want = np.log(softmax(logits.astype(np.float64)))
    for params in (core(temperature=0.3, top_k=1, logprobs=3), core(temperature=0, logprobs=3),
                   core(temperature=2.0, min_p=0.5, logprobs=3)):
        tok, lp, top = _testing.sample_once(logits, params, 5)
        assert tok == 0
        assert lp == pytest.approx(want[0], abs=1e-5)
        assert [t for t, _ in top] == [0, 1, 2]
        assert [l for _, l in top] == pytest.approx(want[:3].tolist(), abs=1e-5)
    # after bias: the distribution the sampler saw
    tok, lp, top = _testing.sample_once(logits, core(temperature=0, logit_bias={3: 5.0}, logprobs=1), 5)
    biased = logits.copy()
    biased[3] += 5.0
    assert tok == 3 and lp == pytest.approx(np.log(softmax(biased.astype(np.float64)))[3], abs=1e-5)
    assert _testing.sample_once(logits, core(temperature=0), 5)[1] is None


def test_same_seed_same_draws_different_seed_differs():
    a = _testing.sample_tokens(LOGITS, plain(1.0), 99, 200)
    b = _testing.sample_tokens(LOGITS, plain(1.0), 99, 200)
    c = _testing.sample_tokens(LOGITS, plain(1.0), 100, 200)
    assert a == b
    assert a != c


def test_bad_parameters_are_rejected_with_their_names():
    for kw, name in (({"top_p": -0.1}, "top_p"), ({"min_p": 2.0}, "min_p"), ({"max_tokens": 0}, "max_tokens"),
                     ({"repetition_penalty": 0.0}, "repetition_penalty"), ({"n": 0}, "n"),
                     ({"logit_bias": {10**6: 1.0}}, "logit_bias"), ({"stop": [""]}, "stop")):
        with pytest.raises(InvalidRequestError, match=name):
            SamplingParams(**kw).to_core().validate(1000)
    with pytest.raises(InvalidRequestError, match="response_format"):
        SamplingParams(response_format={"type": "xml"}).to_core()


@pytest.mark.parametrize("top_p", [0.1, 0.9, 0.999])
def test_top_p_on_a_large_flat_vocabulary(top_p):
    # Many similar logits: the kept set runs past the first sorted head of candidates.
    logits = np.random.default_rng(1).normal(scale=0.3, size=5000).astype(np.float32)
    p = softmax(logits.astype(np.float64))
    order = np.argsort(-logits, kind="stable")
    cum = np.cumsum(p[order])
    k = int(np.searchsorted(cum, top_p) + 1)
    kept = _testing.truncate_candidates(logits, "top_p", top_p)
    assert abs(len(kept) - k) <= 1  # float32 vs float64 sums may move the cut by one
    assert set(kept) <= set(order[:k + 1].tolist())


def test_top_k_draws_follow_renormalized_softmax_of_the_k_best():
    n = 10000
    draws = _testing.sample_tokens(LOGITS, core(temperature=1.0, top_k=3, top_p=1.0, min_p=0.0), 11, n)
    counts = np.bincount(draws, minlength=len(LOGITS)).astype(np.float64)
    best = [0, 6, 1]
    assert counts.sum() == counts[best].sum()
    # chi-square, 2 degrees of freedom, 99.9% quantile 13.82
    assert chi_square(counts[best], softmax(LOGITS[best]), n) < 13.82


# ---- XTC (llama.cpp's "exclude top choices") --------------------------------------------------

def xtc_reference(logits, threshold):
    """llama.cpp's XTC on the candidates (here: the whole row, no truncation): sorted most
    likely first, probabilities by softmax; when at least two reach `threshold`, every one of
    them but the least likely is removed. Returns the ids kept."""
    order = sorted(range(len(logits)), key=lambda i: (-logits[i], i))
    p = softmax(np.asarray(logits, dtype=np.float64))
    last = 0
    for pos, i in enumerate(order):
        if p[i] >= threshold:
            last = pos
        else:
            break
    return sorted(order[last:]) if last > 0 else sorted(order)


def renormalized(logits, keep, temperature=1.0):
    probs = np.zeros(len(logits))
    probs[keep] = softmax(np.asarray(logits, dtype=np.float64)[keep] / temperature)
    return probs


# softmax(LOGITS): 0.379, 0.139, 0.085, 0.051, 0.031, 0.019, 0.230, 0.066
@pytest.mark.parametrize("threshold", [0.1, 0.15, 0.04, 0.3])
def test_xtc_always_on_draws_follow_the_reference(threshold):
    keep = xtc_reference(LOGITS, threshold)
    n = 6000
    draws = _testing.sample_tokens(LOGITS, plain(0.9, xtc_probability=1.0, xtc_threshold=threshold),
                                   99, n)
    assert set(draws) <= set(keep)
    counts = np.bincount(draws, minlength=len(LOGITS))[keep]
    probs = renormalized(LOGITS, keep, 0.9)[keep]
    if len(keep) > 1:
        # chi-square with len(keep) - 1 degrees of freedom, 99.9%: generous for 7, exact enough
        assert chi_square(counts, probs, n) < CHI2_7_999, (counts, probs * n)


def test_xtc_threshold_reached_by_one_token_changes_nothing():
    # only token 0 (0.379) reaches 0.25: nothing is removed
    a = _testing.sample_tokens(LOGITS, plain(xtc_probability=1.0, xtc_threshold=0.25), 7, 500)
    assert set(a) == set(range(len(LOGITS)))


def test_xtc_probability_mixes_with_and_without():
    p, threshold, n = 0.5, 0.1, 10000
    keep = xtc_reference(LOGITS, threshold)  # tokens 0 (0.379), 6 (0.230), 1 (0.139) qualify
    assert 0 not in keep and 6 not in keep and 1 in keep
    mix = (1 - p) * renormalized(LOGITS, list(range(len(LOGITS)))) + p * renormalized(LOGITS, keep)
    draws = _testing.sample_tokens(LOGITS, plain(xtc_probability=p, xtc_threshold=threshold), 5, n)
    counts = np.bincount(draws, minlength=len(LOGITS))
    assert chi_square(counts, mix, n) < CHI2_7_999, (counts, mix * n)


def test_xtc_sees_the_candidates_truncation_left():
    # top_k 3 keeps 0, 6, 1 (0.379, 0.230, 0.139 of the row; renormalized 0.51, 0.31, 0.19):
    # with threshold 0.3 two of them qualify there (over the whole row only token 0 does), so
    # token 0 goes and 6 / 1 stay
    draws = _testing.sample_tokens(
        LOGITS, core(temperature=1.0, top_k=3, top_p=1.0, min_p=0.0, xtc_probability=1.0,
                     xtc_threshold=0.3), 3, 2000)
    assert set(draws) == {6, 1}


def test_xtc_with_greedy_takes_the_least_likely_top_choice():
    # llama.cpp's chain: XTC before the temperature step, which at 0 keeps the best left
    greedy = dict(temperature=0.0, top_k=0, top_p=1.0, min_p=0.0)
    assert _testing.sample_tokens(LOGITS, core(**greedy), 1, 1) == [0]
    assert _testing.sample_tokens(LOGITS, core(**greedy, xtc_probability=1.0,
                                               xtc_threshold=0.1), 1, 1) == [1]
    assert _testing.sample_tokens(LOGITS, core(**greedy, xtc_probability=1.0,
                                               xtc_threshold=0.15), 1, 1) == [6]


def test_xtc_draws_its_coin_only_where_it_can_act():
    off = _testing.sample_tokens(LOGITS, plain(), 11, 200)
    # threshold > 0.5: off, no draw -- the same stream as without XTC
    assert _testing.sample_tokens(LOGITS, plain(xtc_probability=1.0, xtc_threshold=0.51), 11,
                                  200) == off
    # on, but no two tokens reach 0.5: nothing removed, yet a coin per token is drawn
    on = _testing.sample_tokens(LOGITS, plain(xtc_probability=1.0, xtc_threshold=0.5), 11, 200)
    assert on != off
    assert _testing.sample_tokens(LOGITS, plain(xtc_probability=1.0, xtc_threshold=0.5), 11,
                                  200) == on


@pytest.mark.parametrize("field, value", [("xtc_probability", 1.5), ("xtc_probability", -0.1),
                                          ("xtc_threshold", 2.0), ("xtc_threshold", math.nan)])
def test_xtc_ranges(field, value):
    with pytest.raises(InvalidRequestError) as e:
        SamplingParams(**{field: value})
    assert e.value.param == field
