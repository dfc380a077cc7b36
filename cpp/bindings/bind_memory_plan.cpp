// _core.MemoryPlanner: the memory plan of a model file (model/memory_plan.h), read from its
// header and tensor table only; python/edgellm/memory_plan.py turns it into edgellm.MemoryPlan.
// _core.machine_memory / _core.parse_bytes: the one probe of what the machine can give
// (common/machine_memory.h), which the engine's KV check uses too.
#include <pybind11/pybind11.h>

#include <algorithm>
#include <string>

#include "bindings.h"
#include "common/errors.h"
#include "common/machine_memory.h"
#include "model/memory_plan.h"

namespace py = pybind11;

namespace edgellm::bindings {
namespace {

py::dict plan_dict(const MemoryPlan& p) {
  py::dict d;
  d["path"] = text(p.path);
  d["arch"] = text(p.arch);
  d["n_ctx"] = p.n_ctx;
  d["n_ctx_train"] = p.n_ctx_train;
  d["n_layer"] = p.n_layer;
  d["n_threads"] = p.n_threads;
  d["page_size"] = p.page_size;
  d["max_seqs"] = p.max_seqs;
  d["max_batch_tokens"] = p.max_batch_tokens;
  d["kv_type"] = p.kv_type == DType::F32 ? "f32" : p.kv_type == DType::Q8_0 ? "q8_0" : "f16";
  d["file_bytes"] = p.file_bytes;
  d["weights_packed"] = p.weights_packed;
  d["weights_mapped"] = p.weights_mapped;
  d["weights_converted"] = p.weights_converted;
  d["embedding_mapped"] = p.embedding_mapped;
  d["matrices_packed"] = p.matrices_packed;
  d["matrices_mapped"] = p.matrices_mapped;
  d["kv_bytes_per_token_full"] = p.kv_bytes_per_token_full;
  d["kv_bytes_per_token_window"] = p.kv_bytes_per_token_window;
  d["kv_layers_full"] = p.kv_layers_full;
  d["kv_layers_window"] = p.kv_layers_window;
  d["window"] = p.window;
  d["kv_page_bytes_full"] = p.kv_page_bytes_full;
  d["kv_page_bytes_window"] = p.kv_page_bytes_window;
  d["kv_budget"] = p.kv_budget;
  d["scratch_forward"] = p.scratch_forward;
  d["scratch_attention"] = p.scratch_attention;
  d["metadata_heap"] = p.metadata_heap;
  d["tokenizer_heap"] = p.tokenizer_heap;
  d["tokenizer_load_transient"] = p.tokenizer_load_transient;
  d["engine_buffers"] = p.engine_buffers;
  d["runtime"] = p.runtime;
  d["load_peak"] = p.load_peak;
  d["total"] = p.total;
  d["params_total"] = p.params_total;
  d["params_active"] = p.params_active;
  d["active_weight_bytes"] = p.active_weight_bytes;
  d["n_expert"] = p.n_expert;
  d["n_expert_used"] = p.n_expert_used;
  return d;
}

}  // namespace

void bind_memory_plan(py::module_& m) {
  m.def(
      "machine_memory",
      [] {
        const MachineMemory mm = machine_memory();
        auto opt = [](int64_t v) -> py::object { return v < 0 ? py::none() : py::object(py::int_(v)); };
        py::dict d;
        d["available"] = opt(mm.available);
        d["source"] = mm.source;
        d["mem_available"] = opt(mm.mem_available);
        d["mem_total"] = opt(mm.mem_total);
        d["swap_total"] = opt(mm.swap_total);
        d["swap_free"] = opt(mm.swap_free);
        d["cgroup_limit"] = opt(mm.cgroup_limit);
        d["cgroup_usage"] = opt(mm.cgroup_usage);
        d["cgroup_path"] = mm.cgroup_path.empty() ? py::object(py::none()) : py::object(text(mm.cgroup_path));
        d["override"] = opt(mm.override_bytes);
        return d;
      },
      "What the machine can give this process now (common/machine_memory.h): a dict of bytes (None: not read) "
      "and the source of `available`. Raises InvalidRequestError for a bad EDGELLM_MEMORY_LIMIT.");
  m.def(
      "parse_bytes", [](const std::string& s, const std::string& what) { return parse_bytes(s, what); },
      py::arg("text"), py::arg("what") = "EDGELLM_MEMORY_LIMIT",
      "'123', '512M', '1.5 GiB', '2g' -> bytes (K/M/G/T powers of 1024); InvalidRequestError naming `what` else.");
  py::class_<MemoryPlanner>(m, "MemoryPlanner",
                            "The memory plan of one model file, from its header and tensor table (no weights read).")
      .def(py::init([](const std::string& path) {
             py::gil_scoped_release nogil;
             return new MemoryPlanner(path);
           }),
           py::arg("path"))
      .def(
          "plan",
          [](const MemoryPlanner& self, int n_ctx, int64_t kv_memory, const std::string& kv_type, int max_seqs,
             int max_batch_tokens, int page_size, int n_threads) {
            MemoryPlanOptions o;
            o.n_ctx = n_ctx;
            o.kv_memory = kv_memory;
            o.kv_type = kv_dtype(kv_type);
            o.max_seqs = max_seqs;
            o.max_batch_tokens = max_batch_tokens;
            o.page_size = page_size;
            o.n_threads = n_threads;
            return plan_dict(self.plan(o));
          },
          py::arg("n_ctx") = 0, py::arg("kv_memory") = 0, py::arg("kv_type") = "f16", py::arg("max_seqs") = 16,
          py::arg("max_batch_tokens") = 512, py::arg("page_size") = 32, py::arg("n_threads") = 0,
          "A dict of bytes per part (model/memory_plan.h); n_ctx 0 / kv_memory 0 / n_threads 0: the engine's defaults.");
}

}  // namespace edgellm::bindings
