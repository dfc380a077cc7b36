// The sampler chain on one row of logits, without an engine: tests/test_sampler.py draws from
// it, checks each truncation step and the penalties.
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <string>
#include <vector>

#include "common/errors.h"
#include "engine/sampler.h"
#include "testing.h"

namespace py = pybind11;

namespace edgellm::bindings {
namespace {

std::vector<float> row_from(const py::array_t<float, py::array::c_style | py::array::forcecast>& a) {
  if (a.ndim() != 1) throw InvalidRequestError("logits must be a 1-D float array");
  return std::vector<float>(a.data(), a.data() + a.size());
}

}  // namespace

void bind_sampler_testing(py::module_& m) {
  m.def(
      "sample_tokens",
      [](const py::array_t<float, py::array::c_style | py::array::forcecast>& logits, const SamplingParams& p,
         uint64_t seed, int n_draws, std::vector<int32_t> history, int n_generated, std::vector<int32_t> eog) {
        const std::vector<float> row = row_from(logits);
        std::vector<int32_t> out;
        {
          py::gil_scoped_release nogil;
          Sampler s(p, eog, seed);
          std::vector<float> work;
          for (int i = 0; i < n_draws; ++i) {
            work = row;
            out.push_back(s.sample(work.data(), static_cast<int32_t>(work.size()), history, n_generated));
          }
        }
        return out;
      },
      py::arg("logits"), py::arg("params"), py::arg("seed"), py::arg("n_draws") = 1, py::arg("history") = std::vector<int32_t>(),
      py::arg("n_generated") = 0, py::arg("eog") = std::vector<int32_t>(),
      "Draws n_draws tokens from one row of logits with one sampler (its RNG continues between draws).");
  m.def(
      "sample_once",
      [](const py::array_t<float, py::array::c_style | py::array::forcecast>& logits, const SamplingParams& p,
         uint64_t seed, std::vector<int32_t> history, int n_generated, std::vector<int32_t> eog) {
        std::vector<float> row = row_from(logits);
        Sampler s(p, eog, seed);
        TokenLogprob lp;
        const int32_t t = s.sample(row.data(), static_cast<int32_t>(row.size()), history, n_generated, &lp);
        py::list top;
        for (const auto& x : lp.top) top.append(py::make_tuple(x.first, x.second));
        return py::make_tuple(t, p.logprobs >= 0 ? py::cast(lp.logprob) : py::none(), top);
      },
      py::arg("logits"), py::arg("params"), py::arg("seed"), py::arg("history") = std::vector<int32_t>(),
      py::arg("n_generated") = 0, py::arg("eog") = std::vector<int32_t>(),
      "One sampling step: (token, its log-prob or None, [(id, logprob)] top list).");
  m.def(
      "argmax",
      [](const py::array_t<float, py::array::c_style | py::array::forcecast>& logits) {
        const std::vector<float> row = row_from(logits);
        return Sampler::argmax(row.data(), static_cast<int32_t>(row.size()));
      },
      py::arg("logits"), "Sampler::argmax: the first index of the largest value, NaN ignored; -1 when none.");
  m.def(
      "apply_penalties",
      [](const py::array_t<float, py::array::c_style | py::array::forcecast>& logits, std::vector<int32_t> history,
         int last_n, float repeat, float frequency, float presence) {
        std::vector<float> row = row_from(logits);
        Sampler::apply_penalties(row.data(), static_cast<int32_t>(row.size()), history, last_n, repeat, frequency, presence);
        return py::array_t<float>(static_cast<py::ssize_t>(row.size()), row.data());
      },
      py::arg("logits"), py::arg("history"), py::arg("last_n"), py::arg("repeat"), py::arg("frequency") = 0.0f,
      py::arg("presence") = 0.0f);
  m.def(
      "truncate_candidates",
      [](const py::array_t<float, py::array::c_style | py::array::forcecast>& logits, const std::string& step, double value) {
        const std::vector<float> row = row_from(logits);
        std::vector<Candidate> c;
        for (int32_t i = 0; i < static_cast<int32_t>(row.size()); ++i) c.push_back({i, row[i]});
        if (step == "top_k") Sampler::top_k(c, static_cast<int32_t>(value));
        else if (step == "top_p") Sampler::top_p(c, static_cast<float>(value));
        else if (step == "min_p") Sampler::min_p(c, static_cast<float>(value));
        else if (step == "typical_p") Sampler::typical(c, static_cast<float>(value));
        else throw InvalidRequestError("unknown truncation step '" + step + "' (top_k, top_p, min_p, typical_p)");
        std::vector<int32_t> ids;
        for (const auto& x : c) ids.push_back(x.id);
        std::sort(ids.begin(), ids.end());
        return ids;
      },
      py::arg("logits"), py::arg("step"), py::arg("value"), "Ids kept by one truncation step (sorted).");
}

}  // namespace edgellm::bindings
