// _core.Model and _core.ModelRunner: load a GGUF model, run it on one sequence. The test and
// tool surface of the forward pass; edgellm.LLM builds on the same C++ classes.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <string>
#include <vector>

#include "backend/gpu_offload.h"
#include "bindings.h"
#include "common/errors.h"
#include "common/thread_pool.h"
#include "model/model.h"
#include "tools/runner.h"

namespace py = pybind11;

namespace edgellm::bindings {
namespace {

py::dict config_dict(const ModelConfig& c) {
  py::dict d;
  d["arch"] = text(c.arch);
  d["name"] = text(c.name);
  d["n_vocab"] = c.n_vocab;
  d["n_ctx_train"] = c.n_ctx_train;
  d["n_embd"] = c.n_embd;
  d["n_layer"] = c.n_layer;
  d["n_head"] = c.n_head;
  d["n_head_kv"] = c.n_head_kv;
  d["head_dim_k"] = c.head_dim_k;
  d["head_dim_v"] = c.head_dim_v;
  d["n_ff"] = c.n_ff;
  d["rms_eps"] = c.rms_eps;
  d["rope_type"] = rope_type_name(c.rope_type);
  d["n_rot"] = c.n_rot;
  d["rope_freq_base"] = c.rope_global.freq_base;
  d["rope_freq_scale"] = c.rope_global.freq_scale;
  d["rope_freq_base_swa"] = c.rope_local.freq_base;
  d["rope_freq_scale_swa"] = c.rope_local.freq_scale;
  d["n_swa"] = c.n_swa;
  d["layer_window"] = c.layer_window;
  d["attn_scale"] = c.attn_scale;
  d["embed_scale"] = c.embed_scale;
  d["logit_softcap"] = c.logit_softcap;
  d["attn_softcap"] = c.attn_softcap;
  d["rope_attn_factor"] = c.rope_global.attn_factor;
  d["n_ctx_orig"] = c.n_ctx_orig;
  d["rope_yarn"] = c.rope_global.yarn;
  d["rope_yarn_beta_fast"] = c.rope_global.yarn_beta_fast;
  d["rope_yarn_beta_slow"] = c.rope_global.yarn_beta_slow;
  d["n_expert"] = c.n_expert;
  d["n_expert_used"] = c.n_expert_used;
  d["n_ff_exp"] = c.n_ff_exp;
  d["n_ff_shexp"] = c.n_ff_shexp;
  d["expert_gating"] = expert_gating_name(c.expert_gating);
  d["expert_weights_norm"] = c.expert_weights_norm;
  d["expert_weights_scale"] = c.expert_weights_scale;
  d["swiglu_alpha"] = c.swiglu_alpha;
  d["swiglu_limit"] = c.swiglu_limit;
  return d;
}

DType kv_type_from(const std::string& s) {
  if (s == "F32" || s == "f32") return DType::F32;
  if (s == "F16" || s == "f16") return DType::F16;
  if (s == "Q8_0" || s == "q8_0") return DType::Q8_0;
  throw InvalidRequestError("kv_type \"" + s + "\" is not supported (use F32, F16 or Q8_0)");
}

std::vector<int32_t> ids_from(const py::object& obj) {
  std::vector<int32_t> ids;
  for (py::handle h : obj) ids.push_back(py::cast<int32_t>(h));
  return ids;
}

// Several sequences in one KV cache, fed explicit batches: the test surface for batched
// forward passes (mixed sequences, positions, logits flags). Pages are reserved automatically.
class BatchRunner {
 public:
  BatchRunner(std::shared_ptr<Model> model, int n_seqs, int n_ctx, DType kv_type, int page_size)
      : model_(std::move(model)) {
    KVCacheConfig k = model_->kv_config();
    k.page_size = page_size;
    k.dtype = kv_type;
    k.max_seqs = n_seqs;
    k.pages_full = static_cast<int64_t>(n_seqs) * ((n_ctx + page_size - 1) / page_size);
    k.pages_window = k.pages_full;
    kv_ = std::make_unique<KVCache>(k);
  }
  py::array_t<float> forward(const std::vector<int32_t>& token, const std::vector<int32_t>& pos,
                             const std::vector<int32_t>& seq, const std::vector<uint8_t>& want) {
    Batch b;
    b.token = token;
    b.pos = pos;
    b.seq = seq;
    b.want_logits = want;
    if (b.pos.size() != b.token.size() || b.seq.size() != b.token.size() || b.want_logits.size() != b.token.size())
      throw InvalidRequestError("BatchRunner.forward: token, pos, seq and want_logits differ in length");
    for (int i = 0; i < b.size(); ++i) {
      if (b.seq[i] < 0 || b.seq[i] >= kv_->config().max_seqs)
        throw InvalidRequestError("BatchRunner.forward: sequence " + std::to_string(b.seq[i]) + " out of range");
      if (b.pos[i] < 0) throw InvalidRequestError("BatchRunner.forward: negative position");
      if (b.pos[i] + 1 > kv_->n_positions(b.seq[i]) && !kv_->reserve(b.seq[i], b.pos[i] + 1))
        throw ContextLengthError("BatchRunner.forward: KV cache full");
    }
    const py::ssize_t n_vocab = model_->config().n_vocab;
    py::array_t<float> out({static_cast<py::ssize_t>(b.n_outputs()), n_vocab});
    float* dst = out.mutable_data();
    {
      py::gil_scoped_release nogil;
      model_->forward(b, *kv_, dst);
    }
    return out;
  }
  void release(int seq) { kv_->release(seq); }

 private:
  std::shared_ptr<Model> model_;
  std::unique_ptr<KVCache> kv_;
};

}  // namespace

void bind_model(py::module_& m) {
  py::class_<Model, std::shared_ptr<Model>>(m, "Model", "A GGUF model loaded for inference.")
      .def(py::init([](const std::string& path, int n_threads, int max_batch_tokens, int n_gpu_layers, int n_ctx) {
             LoadOptions o;
             o.n_threads = n_threads;
             o.max_batch_tokens = max_batch_tokens;
             o.n_gpu_layers = n_gpu_layers;
             o.make_executor = make_gpu_executor;
             o.n_ctx = n_ctx;
             py::gil_scoped_release nogil;
             return std::shared_ptr<Model>(Model::load(path, o));
           }),
           py::arg("path"), py::arg("n_threads") = 0, py::arg("max_batch_tokens") = 512, py::arg("n_gpu_layers") = 0,
           py::arg("n_ctx") = 0,
           "Loads `path`. n_threads = 0: physical cores. n_gpu_layers: last layers on the GPU (-1 = all; "
           "a warning and the CPU when none can take them). n_ctx: tokens per sequence it will run (0: "
           "min(n_ctx_train, 4096)); picks LongRoPE's long or short factors. Raises ModelFormatError.")
      .def_property_readonly("config", [](const Model& self) { return config_dict(self.config()); })
      .def_property_readonly("n_vocab", [](const Model& self) { return self.config().n_vocab; })
      .def_property_readonly("arch", [](const Model& self) { return self.config().arch; })
      .def_property_readonly("n_threads", [](Model& self) { return self.threads().size(); })
      .def_property_readonly("max_batch_tokens", &Model::max_batch_tokens)
      .def_property_readonly("n_gpu_layers", &Model::gpu_layers, "Layers running on the GPU (0: all on the CPU).")
      .def_property_readonly("path", [](const Model& self) { return self.file().path(); });

  py::class_<ModelRunner>(m, "ModelRunner",
                          "One sequence over a Model with its own KV cache: eval appends tokens and returns logits.")
      .def(py::init([](std::shared_ptr<Model> model, int n_ctx, const std::string& kv_type, int page_size) {
             RunnerOptions o;
             o.n_ctx = n_ctx;
             o.kv_type = kv_type_from(kv_type);
             o.page_size = page_size;
             return std::make_unique<ModelRunner>(std::move(model), o);
           }),
           py::arg("model"), py::arg("n_ctx") = 0, py::arg("kv_type") = "F16", py::arg("page_size") = 32,
           "n_ctx = 0: min(n_ctx_train, 4096). kv_type: F32, F16 or Q8_0.")
      .def(
          "eval",
          [](ModelRunner& self, const py::object& ids_obj, bool all_logits) {
            const std::vector<int32_t> ids = ids_from(ids_obj);
            const int n = static_cast<int>(ids.size());
            const py::ssize_t n_vocab = self.n_vocab();
            py::array_t<float> out = all_logits ? py::array_t<float>({static_cast<py::ssize_t>(n), n_vocab})
                                                : py::array_t<float>({n_vocab});
            float* dst = out.mutable_data();
            {
              py::gil_scoped_release nogil;
              self.eval(ids.data(), n, all_logits, dst);
            }
            return out;
          },
          py::arg("ids"), py::arg("all_logits") = false,
          "Appends ids; returns float32 logits [n, n_vocab] (all_logits) or [n_vocab] (last token).")
      .def(
          "greedy",
          [](ModelRunner& self, const py::object& prompt, int n, const py::object& stop) {
            const std::vector<int32_t> p = ids_from(prompt), s = ids_from(stop);
            py::gil_scoped_release nogil;
            return self.greedy(p, n, s);
          },
          py::arg("prompt_ids"), py::arg("n"), py::arg("stop_ids") = py::tuple(),
          "Appends prompt_ids, then up to n argmax tokens (stopping after one of stop_ids); returns them.")
      .def("reset", &ModelRunner::reset, "Forgets the sequence.")
      .def_property_readonly("n_past", &ModelRunner::n_past)
      .def_property_readonly("n_ctx", &ModelRunner::n_ctx)
      .def_property_readonly("n_vocab", &ModelRunner::n_vocab);

  py::class_<BatchRunner>(m, "BatchRunner", "Test surface: explicit multi-sequence batches over one KV cache.")
      .def(py::init([](std::shared_ptr<Model> model, int n_seqs, int n_ctx, const std::string& kv_type, int page_size) {
             return std::make_unique<BatchRunner>(std::move(model), n_seqs, n_ctx, kv_type_from(kv_type), page_size);
           }),
           py::arg("model"), py::arg("n_seqs") = 2, py::arg("n_ctx") = 256, py::arg("kv_type") = "F32",
           py::arg("page_size") = 16)
      .def("forward", &BatchRunner::forward, py::arg("token"), py::arg("pos"), py::arg("seq"), py::arg("want_logits"),
           "One Model.forward over the batch; returns logits rows of the tokens that want them, in batch order.")
      .def("release", &BatchRunner::release, py::arg("seq"));
}

}  // namespace edgellm::bindings
