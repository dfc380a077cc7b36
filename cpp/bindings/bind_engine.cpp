// _core.Engine, _core.SamplingParams and _core.OutputChannel (the sampler test surface is in
// testing/bind_sampler.cpp).
// Python threads only submit and receive: every wait on an OutputChannel and every engine call
// that can block releases the GIL; events reach Python as _core.OutputEvent objects.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "backend/gpu_offload.h"
#include "bindings.h"
#include "common/errors.h"
#include "engine/draft_proposer.h"
#include "engine/engine.h"
#include "engine/model_backend.h"
#include "model/lora.h"
#include "common/thread_pool.h"

namespace py = pybind11;

namespace edgellm::bindings {
namespace {

SpecMode spec_mode(const std::string& s) {
  std::string u = s;
  std::transform(u.begin(), u.end(), u.begin(), ::tolower);
  if (u == "off") return SpecMode::Off;
  if (u == "ngram") return SpecMode::Ngram;
  if (u == "draft") return SpecMode::Draft;
  if (u == "auto") return SpecMode::Auto;
  throw InvalidRequestError("speculative \"" + s + "\" is not supported (use off, ngram, draft or auto)");
}

const char* spec_mode_name(SpecMode m) {
  switch (m) {
    case SpecMode::Off: return "off";
    case SpecMode::Ngram: return "ngram";
    case SpecMode::Draft: return "draft";
    case SpecMode::Auto: return "auto";
  }
  return "off";
}

py::str utf8(const std::string& s) {
  PyObject* o = PyUnicode_DecodeUTF8(s.data(), static_cast<Py_ssize_t>(s.size()), "replace");
  if (!o) throw py::error_already_set();
  return py::reinterpret_steal<py::str>(o);
}

py::list logprobs_list(const std::vector<TokenLogprob>& v) {
  py::list out;
  for (const auto& lp : v) {
    py::list top;
    for (const auto& t : lp.top) top.append(py::make_tuple(t.first, t.second));
    out.append(py::make_tuple(lp.token, lp.logprob, top));
  }
  return out;
}

// The properties of _core.OutputEvent that are built on access: progress, stop_reason, embedding, timings.
py::object progress_dict(const OutputEvent& ev) {
  if (!ev.has_progress) return py::none();  // return_progress: a prefill-progress event (no text, no tokens)
  py::dict pr;
  pr["total"] = ev.progress.total;
  pr["cache"] = ev.progress.cache;
  pr["processed"] = ev.progress.processed;
  pr["time_ms"] = ev.progress.time_ms;
  return std::move(pr);
}

py::object stop_reason(const OutputEvent& ev) {
  if (!ev.finished) return py::none();
  if (ev.has_stop_string) return utf8(ev.stop_string);
  if (ev.stop_token >= 0) return py::int_(ev.stop_token);
  return py::none();
}

py::object embedding_array(const OutputEvent& ev) {
  if (!ev.finished || ev.embedding_rows <= 0) return py::none();  // embedding request: float32 [rows, n_embd]
  const py::ssize_t rows = ev.embedding_rows, dim = static_cast<py::ssize_t>(ev.embedding.size()) / rows;
  return py::array_t<float>({rows, dim}, ev.embedding.data());
}

py::object timings_dict(const OutputEvent& ev) {
  if (!ev.finished) return py::none();
  const Timings& tm = ev.timings;
  py::dict t;
  t["prompt_n"] = tm.prompt_n;
  t["prompt_ms"] = tm.prompt_ms;
  t["prompt_per_second"] = tm.prompt_ms > 0 ? 1e3 * tm.prompt_n / tm.prompt_ms : 0.0;
  t["predicted_n"] = tm.predicted_n;
  t["predicted_ms"] = tm.predicted_ms;
  // The first token comes with the prompt; the rate is over the tokens after it.
  t["predicted_per_second"] = tm.predicted_ms > 0 ? 1e3 * (tm.predicted_n - 1) / tm.predicted_ms : 0.0;
  if (tm.context_shifts > 0) t["context_shifts"] = tm.context_shifts;  // only when it shifted
  // Speculative decoding: as llama-server, only when something was drafted for this completion.
  if (tm.draft_n > 0) {
    t["draft_n"] = tm.draft_n;
    t["draft_n_accepted"] = tm.draft_n_accepted;
  }
  return std::move(t);
}

void bind_output_event(py::module_& m) {
  using E = OutputEvent;
  py::class_<E>(m, "OutputEvent",
                "One event of a request (OutputChannel.pop / try_pop), read-only. The fields of the last event "
                "of a completion (finished) are None or 0 on the others.")
      .def_readonly("index", &E::index, "Completion index (n > 1).")
      .def_property_readonly("text", [](const E& e) { return utf8(e.text); },
                             "New text (whole UTF-8 characters; all of it when not streaming).")
      .def_readonly("token_ids", &E::token_ids, "New tokens (all of them when not streaming).")
      .def_property_readonly("logprobs", [](const E& e) { return logprobs_list(e.logprobs); },
                             "Per new token when logprobs were asked for: (id, logprob, [(id, logprob)]).")
      .def_property_readonly("prompt_logprobs",
                             [](const E& e) -> py::object {
                               if (!e.has_prompt_logprobs) return py::none();
                               return logprobs_list(e.prompt_logprobs);
                             },
                             "Once, on the first event of completion 0 when prompt_logprobs were asked for.")
      .def_readonly("finished", &E::finished)
      .def_property_readonly("finish_reason",
                             [](const E& e) -> py::object {
                               if (!e.finished) return py::none();
                               return py::str(to_string(e.finish_reason));
                             },
                             "\"stop\" | \"length\" | \"cancelled\" | \"error\" on the last event, else None.")
      .def_property_readonly("stop_reason", &stop_reason, "The stop string (str) or stop token id (int) that ended it.")
      .def_property_readonly("error", [](const E& e) { return text(e.error); }, "finish_reason \"error\": what went wrong.")
      .def_readonly("prompt_tokens", &E::prompt_tokens)
      .def_readonly("completion_tokens", &E::completion_tokens)
      .def_readonly("cached_tokens", &E::cached_tokens)
      .def_property_readonly("context_shifts", [](const E& e) { return e.timings.context_shifts; })
      .def_property_readonly("timings", &timings_dict,
                             "On the last event: prompt_n / _ms / _per_second, predicted_n / _ms / _per_second, and "
                             "context_shifts, draft_n / draft_n_accepted when nonzero.")
      .def_property_readonly("progress", &progress_dict,
                             "return_progress: {total, cache, processed, time_ms} on a prefill-progress event.")
      .def_property_readonly("embedding", &embedding_array, "Embedding requests: float32 [rows, n_embd].")
      .def("__repr__", [](const E& e) {
        return "<OutputEvent index=" + std::to_string(e.index) + " tokens=" + std::to_string(e.token_ids.size()) +
               (e.finished ? std::string(" finished ") + to_string(e.finish_reason) : std::string()) + ">";
      });
}

py::dict stats_dict(const EngineStats& s) {
  py::dict d;
  d["pages_used"] = s.pages_used;
  d["pages_total"] = s.pages_total;
  d["pages_full_total"] = s.pages_full_total;
  d["pages_window_total"] = s.pages_window_total;
  d["pages_cached"] = s.pages_cached;
  d["pages_allocated"] = s.pages_allocated;
  d["page_bytes_full"] = s.page_bytes_full;
  d["page_bytes_window"] = s.page_bytes_window;
  d["kv_bytes_total"] = s.kv_bytes_total;
  d["kv_bytes_used"] = s.kv_bytes_used;
  d["kv_bytes_resident"] = s.kv_bytes_resident;
  d["running"] = s.running;
  d["waiting"] = s.waiting;
  d["prefix_cache_hits"] = s.prefix_cache_hits;
  d["prefix_cache_queries"] = s.prefix_cache_queries;
  d["prefix_cache_hit_tokens"] = s.prefix_cache_hit_tokens;
  d["prompt_tokens_total"] = s.prompt_tokens_total;
  d["generated_tokens_total"] = s.generated_tokens_total;
  d["tokens_processed"] = s.tokens_processed;
  d["steps"] = s.steps;
  d["preemptions"] = s.preemptions;
  d["context_shifts"] = s.context_shifts;
  d["requests_finished"] = s.requests_finished;
  d["cache_disk_pages_read"] = s.cache_disk_pages_read;
  d["cache_disk_pages_written"] = s.cache_disk_pages_written;
  d["cache_disk_corrupt"] = s.cache_disk_corrupt;
  d["cache_disk_write_dropped"] = s.cache_disk_write_dropped;
  d["cache_disk_files"] = s.cache_disk_files;
  d["cache_disk_bytes"] = s.cache_disk_bytes;
  d["cache_disk_evicted"] = s.cache_disk_evicted;
  d["cache_disk_hit_tokens"] = s.cache_disk_hit_tokens;
  d["cache_disk"] = s.cache_disk;
  d["busy_seconds"] = s.busy_seconds;
  d["tokens_per_second"] = s.tokens_per_second;
  d["spec_drafted"] = s.spec_drafted;
  d["spec_accepted"] = s.spec_accepted;
  d["spec_steps"] = s.spec_steps;
  d["spec_draft_forwards"] = s.spec_draft_forwards;
  d["spec_draft_seconds"] = s.spec_draft_seconds;
  d["spec_acceptance"] = s.spec_drafted > 0 ? static_cast<double>(s.spec_accepted) / s.spec_drafted : 0.0;
  return d;
}

// The engine plus what it was built from; the Python Engine object owns all of it.
struct PyEngine {
  std::shared_ptr<Model> model;
  std::shared_ptr<Tokenizer> tok;
  std::shared_ptr<Model> draft;  // speculative decoding's draft model (may be null)
  std::string draft_path;
  std::unique_ptr<Engine> engine;

  Engine& get() {
    if (!engine) throw InvalidRequestError("the engine is closed");
    return *engine;
  }
  Model& loaded() {
    if (!model) throw InvalidRequestError("the engine is closed");
    return *model;
  }
};

// LLM(...)'s load options: the engine's own (EngineConfig) and the loader's.
struct EngineOptions : EngineConfig {
  EngineOptions() { spec.mode = SpecMode::Auto; }  // LLM's default (the C++ struct's is Off)
  int32_t n_threads = 0;      // 0: the physical cores
  int32_t n_gpu_layers = 0;   // the last N layers on a CUDA GPU; -1: all
  std::string draft_model;    // the draft model's GGUF path; empty: none
};

}  // namespace

void bind_engine(py::module_& m) {
  bind_output_event(m);
  py::class_<SamplingParams> sp(m, "SamplingParams", "Per-request sampling parameters (C++ side of edgellm.SamplingParams).");
  sp.def(py::init<>());
#define EDGELLM_BIND_FIELD(type, name, def, lo, hi, flags) sp.def_readwrite(#name, &SamplingParams::name);
  EDGELLM_SAMPLING_FIELDS(EDGELLM_BIND_FIELD)
#undef EDGELLM_BIND_FIELD
  // The table itself: edgellm.sampling_fields reads each field's type, default and range here.
  m.def(
      "sampling_fields",
      [] {
        using namespace sampling_field;
        py::list out;
        auto bound = [](bool is_int, double v) -> py::object {
          if (is_int && std::isfinite(v)) return py::int_(static_cast<int64_t>(v));
          return py::float_(v);
        };
#define EDGELLM_FIELD_ROW(type, name, def, lo, hi, flags)                                                   \
  {                                                                                                       \
    const bool is_bool = std::is_same<type, bool>::value, is_int = std::is_integral<type>::value && !is_bool; \
    out.append(py::dict(py::arg("name") = #name, py::arg("type") = is_bool ? "bool" : is_int ? "int" : "float", \
                        py::arg("default") = static_cast<type>(def), py::arg("lo") = bound(is_int, lo),   \
                        py::arg("hi") = bound(is_int, hi), py::arg("lo_open") = bool((flags) & kLoOpen),   \
                        py::arg("unset_below_0") = bool((flags) & kUnsetBelow0),                          \
                        py::arg("reads_history") = bool((flags) & kReadsHistory)));                       \
  }
        EDGELLM_SAMPLING_FIELDS(EDGELLM_FIELD_ROW)
#undef EDGELLM_FIELD_ROW
        return out;
      },
      "The engine's numeric sampling fields (EDGELLM_SAMPLING_FIELDS): name, type, default, range, flags.");
  sp.def_readwrite("logit_bias", &SamplingParams::logit_bias)
      .def_readwrite("has_seed", &SamplingParams::has_seed)
      .def_readwrite("seed", &SamplingParams::seed)
      .def_readwrite("stop", &SamplingParams::stop)
      .def_readwrite("stop_token_ids", &SamplingParams::stop_token_ids)
      .def_property("json_schema", [](const SamplingParams& p) { return p.constraint.json_schema; },
                    [](SamplingParams& p, const std::string& v) { p.constraint.json_schema = v; })
      .def_property("grammar", [](const SamplingParams& p) { return p.constraint.grammar; },
                    [](SamplingParams& p, const std::string& v) { p.constraint.grammar = v; })
      .def_property("regex", [](const SamplingParams& p) { return p.constraint.regex; },
                    [](SamplingParams& p, const std::string& v) { p.constraint.regex = v; })
      .def_property("grammar_triggers", [](const SamplingParams& p) { return p.constraint.triggers; },
                    [](SamplingParams& p, const std::vector<std::string>& v) { p.constraint.triggers = v; },
                    "Lazy constraint: free text until one of these strings appears, then the grammar.")
      .def_property("grammar_budget_close", [](const SamplingParams& p) { return p.constraint.budget_close; },
                    [](SamplingParams& p, bool v) { p.constraint.budget_close = v; },
                    "Steer the grammar to a complete document within the tokens left (max_tokens, context).")
      .def("validate", &SamplingParams::validate, py::arg("n_vocab"));

  py::class_<OutputChannel, std::shared_ptr<OutputChannel>>(m, "OutputChannel",
      "Events of one request. notify_fd >= 0: a byte is written there per event (asyncio wake-up).")
      .def(py::init<int>(), py::arg("notify_fd") = -1)
      .def(
          "pop",
          [](OutputChannel& ch, double timeout_s) -> py::object {
            OutputEvent ev;
            bool got;
            {
              py::gil_scoped_release nogil;
              got = ch.pop(ev, static_cast<int64_t>(timeout_s * 1000.0));
            }
            if (!got) return py::none();
            return py::cast(std::move(ev));
          },
          py::arg("timeout_s") = 0.1, "The next OutputEvent, waiting up to timeout_s (GIL released); None on timeout.")
      .def("try_pop", [](OutputChannel& ch) -> py::object {
        OutputEvent ev;
        if (!ch.try_pop(ev)) return py::none();
        return py::cast(std::move(ev));
      })
      .def_property_readonly("done", &OutputChannel::done, "Every last event sent and consumed.")
      .def_property_readonly("all_sent", &OutputChannel::all_sent,
                             "Every completion's last event was sent: the engine is done with the channel.");

  // LLM(...)'s load options as one object (edgellm.validation.check_engine_args fills it, one
  // attribute per checked argument): the engine's EngineConfig plus what loading takes.
  py::class_<EngineOptions>(m, "EngineConfig", "The engine's load options (LLM(...)'s engine arguments).")
      .def(py::init<>())
      .def_readwrite("n_ctx", &EngineOptions::n_ctx, "tokens per sequence; 0: min(trained, 4096)")
      .def_readwrite("n_threads", &EngineOptions::n_threads, "0: the physical cores")
      .def_readwrite("kv_memory", &EngineOptions::kv_memory, "KV bytes; 0: two full contexts")
      .def_property(
          "kv_type",
          [](const EngineOptions& o) {
            std::string n = dtype_name(o.kv_type);
            std::transform(n.begin(), n.end(), n.begin(), [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
            return n;
          },
          [](EngineOptions& o, const std::string& v) { o.kv_type = kv_dtype(v); }, "f16, f32 or q8_0")
      .def_readwrite("max_seqs", &EngineOptions::max_seqs)
      .def_readwrite("max_batch_tokens", &EngineOptions::max_batch_tokens)
      .def_readwrite("page_size", &EngineOptions::page_size)
      .def_readwrite("prefix_cache", &EngineOptions::prefix_cache)
      .def_readwrite("n_gpu_layers", &EngineOptions::n_gpu_layers, "the last N layers on a CUDA GPU; -1: all")
      .def_property(
          "speculative", [](const EngineOptions& o) { return std::string(spec_mode_name(o.spec.mode)); },
          [](EngineOptions& o, const std::string& v) { o.spec.mode = spec_mode(v); },
          "off | ngram (prompt lookup) | draft (draft_model proposes) | auto (n-gram, plus the draft model when "
          "one is given)")
      .def_property(
          "num_speculative_tokens", [](const EngineOptions& o) { return o.spec.max_draft; },
          [](EngineOptions& o, int v) {
            if (v < 0 || v > 64)
              throw InvalidRequestError("num_speculative_tokens must be in 0..64 (0: the default), got " +
                                        std::to_string(v));
            o.spec.max_draft = v;
          },
          "most tokens drafted per step; 0: the engine's default")
      .def_readwrite("draft_model", &EngineOptions::draft_model, "the draft model's GGUF path; empty: none")
      .def_property(
          "spec_adaptive", [](const EngineOptions& o) { return o.spec.adaptive; },
          [](EngineOptions& o, bool v) { o.spec.adaptive = v; },
          "false: always draft num_speculative_tokens when there is a proposal (tests, benchmarks)")
      .def_readwrite("context_shift", &EngineOptions::context_shift)
      .def_readwrite("cache_dir", &EngineOptions::cache_dir)
      .def_readwrite("cache_key", &EngineOptions::cache_key)
      .def_readwrite("cache_max_bytes", &EngineOptions::cache_max_bytes);

  py::class_<PyEngine>(m, "Engine", "The continuous-batching engine over one model (runs its own thread).")
      .def(py::init([](const std::string& path, py::object config, py::object progress_cb, py::kwargs kw) {
             // config (an EngineConfig, None: the defaults), then any option given by name
             py::object cfg = config.is_none() ? py::cast(EngineOptions()) : py::cast(config.cast<EngineOptions>());
             for (auto item : kw) {
               if (!py::hasattr(cfg, item.first))
                 throw InvalidRequestError("Engine: unknown option '" + std::string(py::str(item.first)) + "'");
               py::setattr(cfg, item.first, item.second);
             }
             const EngineOptions c = cfg.cast<EngineOptions>();
             const std::string& draft_model = c.draft_model;
             const int n_threads = c.n_threads, n_gpu_layers = c.n_gpu_layers, n_ctx = c.n_ctx;
             const int max_batch_tokens = c.max_batch_tokens;
             if (c.spec.mode == SpecMode::Draft && draft_model.empty())
               throw InvalidRequestError(
                   "speculative \"draft\" needs a draft model: give draft_model (a GGUF path or a known model "
                   "name with the target's vocabulary), or use speculative \"ngram\" / \"auto\"");
             auto e = std::make_unique<PyEngine>();
             // The progress callback runs on this (the loading) thread, with the GIL taken for the
             // call only. False or an exception stops the load; the exception becomes the
             // LoadCancelled's __cause__.
             std::unique_ptr<py::error_already_set> callback_error;
             LoadProgress progress;
             if (!progress_cb.is_none()) {
               if (!PyCallable_Check(progress_cb.ptr()))
                 throw InvalidRequestError("progress must be a callable (fraction, stage), got " +
                                           std::string(py::str(py::type::of(progress_cb).attr("__name__"))));
               const py::handle cb = progress_cb;  // the argument outlives the load: no reference taken
               progress = LoadProgress([&callback_error, cb](double f, const char* stage) {
                 py::gil_scoped_acquire gil;
                 try {
                   py::object r = cb(f, stage);
                   return r.ptr() != Py_False;
                 } catch (py::error_already_set& err) {
                   callback_error = std::make_unique<py::error_already_set>(std::move(err));
                   return false;
                 }
               });
             }
             try {
               py::gil_scoped_release nogil;
               // A draft with speculation off (or n-gram only) is accepted and left unloaded.
               const bool use_draft = !draft_model.empty() && c.spec.mode != SpecMode::Off && c.spec.mode != SpecMode::Ngram;
               const double model_end = use_draft ? 0.7 : 0.9;  // the draft's load: 0.72 .. 0.9
               LoadOptions o;
               o.n_threads = n_threads;
               o.max_batch_tokens = max_batch_tokens;
               o.n_gpu_layers = n_gpu_layers;
               o.make_executor = make_gpu_executor;
               o.n_ctx = n_ctx;  // the engine's n_ctx (0: the same default), for LongRoPE's factors
               o.progress = progress.range(0, model_end);
               e->model = std::shared_ptr<Model>(Model::load(path, o));
               progress.report(model_end, "tokenizer");
               e->tok = std::shared_ptr<Tokenizer>(Tokenizer::from_gguf(path));
               // The draft's vocabulary is checked before its weights are loaded.
               if (use_draft) check_draft_vocab(*e->tok, *Tokenizer::from_gguf(draft_model));
               std::shared_ptr<EngineModel> draft;
               if (use_draft) {
                 LoadOptions d;
                 d.n_threads = n_threads;
                 d.max_batch_tokens = max_batch_tokens;
                 d.n_ctx = n_ctx;
                 d.threads = e->model->thread_pool();  // the target's workers: the two never run at once
                 d.progress = progress.range(0.72, 0.9);
                 e->draft = std::shared_ptr<Model>(Model::load(draft_model, d));
                 e->draft_path = draft_model;
                 draft = std::make_shared<ModelBackend>(e->draft);
               }
               progress.report(0.9, "engine");
               e->engine = std::make_unique<Engine>(std::make_shared<ModelBackend>(e->model),
                                                    std::make_shared<TokenizerVocab>(e->tok), c, std::move(draft));
               progress.report(1.0, "ready");
             } catch (const LoadCancelled& err) {
               e.reset();  // the engine thread, the model and its mapping go now, not at the next GC
               if (callback_error) {
                 py::object type = py::module_::import("edgellm._core").attr("LoadCancelled");
                 py::raise_from(*callback_error, type.ptr(),
                                (std::string(err.what()) + ": the callback raised").c_str());
                 throw py::error_already_set();
               }
               throw;
             }
             return e;
           }),
           py::arg("path"), py::arg("config") = py::none(), py::arg("progress") = py::none(),
           "config: an EngineConfig (None: its defaults); options given by name (Engine(path, speculative=...)) "
           "are set on a copy of it. progress: called (fraction 0..1, stage) from the loading thread as the load goes on (open, bind, "
           "repack, tokenizer, engine, ready); returning False or raising stops it with LoadCancelled.")
      .def(
          "submit",
          [](PyEngine& self, std::vector<int32_t> prompt, const SamplingParams& p, std::shared_ptr<OutputChannel> ch,
             bool stream, const py::list& images, py::object lora) {
            if (!stream) ch->collect_whole();  // the caller side joins a non-streaming request's events
            std::vector<PromptImage> ims;
            for (const py::handle& item : images) {
              // (pos, pixel hash, float32 [n_tokens, n_embd] embeddings[, (rows, cols)])
              const py::tuple t = py::reinterpret_borrow<py::tuple>(item);
              if (t.size() != 3 && t.size() != 4)
                throw InvalidRequestError("images: each item is (pos, hash, embeddings[, (rows, cols)])");
              PromptImage im;
              im.pos = t[0].cast<int32_t>();
              im.hash = t[1].cast<uint64_t>();
              const auto a = t[2].cast<py::array_t<float, py::array::c_style | py::array::forcecast>>();
              if (a.ndim() != 2) throw InvalidRequestError("images: embeddings must be a 2-D array");
              im.n_tokens = static_cast<int32_t>(a.shape(0));
              im.embd = std::make_shared<const std::vector<float>>(a.data(), a.data() + a.size());
              if (t.size() == 4) {
                const auto grid = t[3].cast<std::pair<int32_t, int32_t>>();
                im.rows = grid.first;
                im.cols = grid.second;
              }
              ims.push_back(std::move(im));
            }
            Engine& e = self.get();
            std::shared_ptr<const LoraMix> mix = lora_mix(lora);
            py::gil_scoped_release nogil;
            return e.submit(std::move(prompt), p, std::move(ch), std::move(ims), std::move(mix));
          },
          py::arg("prompt"), py::arg("params"), py::arg("channel"), py::arg("stream") = true,
          py::arg("images") = py::list(), py::arg("lora") = py::none(),
          "images: [(pos, pixel hash, float32 [n_tokens, n_embd] embeddings[, (rows, cols): an M-RoPE grid])], image "
          "blocks of the prompt in order "
          "(engine/prompt_image.h). lora: None (the base alone) or [(LoraAdapter, scale), ...]")
      .def(
          "load_lora",
          [](PyEngine& self, const std::string& path) {
            Model& m = self.loaded();
            py::gil_scoped_release nogil;
            return std::const_pointer_cast<LoraAdapter>(m.load_lora(path));
          },
          py::arg("path"),
          "Opens a GGUF LoRA adapter for this engine's model (checked against it: ModelFormatError otherwise). "
          "Requests run with it through submit(..., lora=[(adapter, scale)]); it lives while any holds it.")
      .def(
          "submit_embedding",
          [](PyEngine& self, std::vector<int32_t> prompt, std::shared_ptr<OutputChannel> ch, int pooling,
             int normalize) {
            EmbeddingParams p;
            p.pooling = pooling;
            p.normalize = normalize;
            Engine& e = self.get();
            py::gil_scoped_release nogil;
            return e.submit_embedding(std::move(prompt), p, std::move(ch));
          },
          py::arg("prompt"), py::arg("channel"), py::arg("pooling") = -1, py::arg("normalize") = 2,
          "Queues an embedding request (pooling: -1 model default, 0 none, 1 mean, 2 cls, 3 last; normalize: "
          "llama.cpp's embd_normalize). Its one event's .embedding is float32 [rows, n_embd].")
      .def("abort", [](PyEngine& self, int64_t id) { self.get().abort(id); }, py::arg("request_id"))
      .def(
          "slot_save",
          [](PyEngine& self, int slot, const std::string& file, const std::string& model_key) {
            Engine& e = self.get();
            py::gil_scoped_release nogil;
            const SlotResult r = e.slot_save(slot, file, model_key);
            return std::make_pair(r.n_tokens, r.n_bytes);
          },
          py::arg("slot"), py::arg("file"), py::arg("model_key"),
          "Writes the slot's cached KV pages to file under the model's content key: (tokens saved, bytes written).")
      .def(
          "slot_restore",
          [](PyEngine& self, int slot, const std::string& file, const std::string& model_key) {
            Engine& e = self.get();
            py::gil_scoped_release nogil;
            const SlotResult r = e.slot_restore(slot, file, model_key);
            return std::make_pair(r.n_tokens, r.n_bytes);
          },
          py::arg("slot"), py::arg("file"), py::arg("model_key"),
          "Reads a slot file saved under the same content key into the prefix cache: (tokens restored, bytes read).")
      .def(
          "slot_erase",
          [](PyEngine& self, int slot) {
            Engine& e = self.get();
            py::gil_scoped_release nogil;
            return e.slot_erase(slot);
          },
          py::arg("slot"), "Drops the slot's cached pages: tokens erased.")
      .def("flush_cache", [](PyEngine& self) {
        Engine& e = self.get();
        py::gil_scoped_release nogil;
        e.flush_cache();
      }, "Waits until the persistent prefix cache's queued pages are on disk.")
      .def("stats", [](PyEngine& self) { return stats_dict(self.get().stats()); })
      .def_property_readonly(
          "gguf", [](PyEngine& self) { return self.loaded().file_handle(); },
          "The loaded model's GgufFile (its metadata as loaded, whatever the path holds now).")
      .def(
          "model_file_state",
          [](PyEngine& self) {
            self.get();
            FileState st = self.loaded().file().state();
            if (self.draft) st = std::max(st, self.draft->file().state());  // the worse of the two
            return std::string(file_state_name(st));
          },
          "The model file (and draft's) now: 'intact'; 'replaced' (the path names another file: the loaded one "
          "is still intact, a reload loads the new); 'changed' (rewritten in place: the model fails its requests "
          "with ModelFileChangedError).")
      .def(
          "eval_logits",
          [](PyEngine& self, std::vector<int32_t> ids, py::object lora) {
            Engine& e = self.get();
            std::shared_ptr<const LoraMix> mix = lora_mix(lora);
            py::array_t<float> out({static_cast<py::ssize_t>(ids.size()), static_cast<py::ssize_t>(e.n_vocab())});
            float* dst = out.mutable_data();
            {
              py::gil_scoped_release nogil;
              e.eval_logits(ids, dst, std::move(mix));
            }
            return out;
          },
          py::arg("ids"), py::arg("lora") = py::none(),
          "Logits of every position of ids in a fresh context: float32 [len(ids), n_vocab]. lora as submit's.")
      .def("close", [](PyEngine& self) {
        py::gil_scoped_release nogil;
        self.engine.reset();  // joins the engine thread; in-flight requests end "cancelled"
        // The weights, their mapping and the compute threads go now, not when the Python object
        // is collected (an LLM in a reference cycle could hold them until a full collection).
        self.draft.reset();
        self.model.reset();
      })
      .def_property_readonly("closed", [](const PyEngine& self) { return !self.engine; })
      .def_property_readonly("n_ctx", [](PyEngine& self) { return self.get().n_ctx(); })
      .def_property_readonly("context_shift", [](PyEngine& self) { return self.get().config().context_shift; })
      .def_property_readonly("n_vocab", [](PyEngine& self) { return self.get().n_vocab(); })
      .def_property_readonly("n_embd", [](PyEngine& self) { return self.get().n_embd(); })
      .def_property_readonly("causal", [](PyEngine& self) { return self.get().causal(); },
                             "False for encoders (BERT family): embeddings and rank only, each input whole.")
      .def_property_readonly("encoder_input_limit", [](PyEngine& self) { return self.get().encoder_input_limit(); },
                             "Encoders: the most tokens one input runs with (n_ctx, max_batch_tokens, positions).")
      .def_property_readonly("rank_outputs", [](PyEngine& self) { return self.get().rank_outputs(); },
                             "Scores a reranker's classification head gives per input (0: not a reranker).")
      .def_property_readonly("default_pooling", [](PyEngine& self) { return static_cast<int>(self.get().default_pooling()); },
                             "Pooling an embedding gets when none is asked for: the GGUF's pooling_type, else 1 (mean).")
      .def_property_readonly("n_threads", [](PyEngine& self) { return self.loaded().threads().size(); },
                             "Compute threads of the pool (its size, fixed at load).")
      .def_property_readonly("n_threads_active", [](PyEngine& self) { return self.loaded().threads().active(); },
                             "Compute threads taking work now (set_n_threads; n_threads unless lowered).")
      .def(
          "set_n_threads",
          [](PyEngine& self, int n) {
            self.get();  // a closed engine raises
            const int size = self.loaded().threads().size();
            if (n < 1 || n > size)
              throw InvalidRequestError("set_n_threads: the count must be in 1.." + std::to_string(size) +
                                        " (the pool's size), got " + std::to_string(n));
            self.loaded().threads().set_active(n);  // the draft model shares this pool
          },
          py::arg("n"),
          "Lets only n of the pool's threads compute from the next parallel op on (1..n_threads), e.g. while "
          "the CPU throttles; the others sleep until it is raised again.")
      .def_property_readonly("n_gpu_layers", [](PyEngine& self) { return self.loaded().gpu_layers(); },
                             "Layers running on the GPU (0: all on the CPU).")
      .def_property_readonly("page_size", [](PyEngine& self) { return self.get().kv().page_size(); })
      .def_property_readonly("arch", [](PyEngine& self) { return text(self.loaded().config().arch); })
      .def_property_readonly("n_ctx_train", [](PyEngine& self) { return self.loaded().config().n_ctx_train; },
                             "The model's trained context length (0 when the file does not say).")
      .def_property_readonly("tokenizer", [](PyEngine& self) { return self.tok; })
      .def_property_readonly("speculative", [](PyEngine& self) { return std::string(spec_mode_name(self.get().config().spec.mode)); },
                             "Speculative decoding mode: off, ngram, draft or auto.")
      .def_property_readonly("num_speculative_tokens", [](PyEngine& self) { return self.get().config().spec.max_draft; },
                             "Most tokens drafted per step (0: the engine's default).")
      .def_property_readonly("spec_adaptive", [](PyEngine& self) { return self.get().config().spec.adaptive; })
      .def_property_readonly("draft_model_path", [](PyEngine& self) { return self.draft_path; },
                             "The loaded draft model's path (empty without one).");

  m.def("has_constraint_factory", &has_constraint_factory);
}

}  // namespace edgellm::bindings
