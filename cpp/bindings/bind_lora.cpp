// LoRA adapters (model/lora.h) as Python sees them: _core.LoraAdapter, made by Engine.load_lora,
// and the one conversion of a request's adapter list into the engine's LoraMix.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cmath>
#include <memory>

#include "bindings.h"
#include "model/lora.h"

namespace py = pybind11;

namespace edgellm::bindings {

std::shared_ptr<const LoraMix> lora_mix(const py::object& uses) {
  if (uses.is_none()) return nullptr;
  auto mix = std::make_shared<LoraMix>();
  for (py::handle item : uses) {
    py::tuple t = py::reinterpret_borrow<py::object>(item).cast<py::tuple>();
    if (t.size() != 2) throw InvalidRequestError("lora: each entry is (LoraAdapter, scale)");
    LoraUse u;
    u.adapter = t[0].cast<std::shared_ptr<LoraAdapter>>();
    u.scale = t[1].cast<float>();
    if (!u.adapter) throw InvalidRequestError("lora: an entry has no adapter");
    if (!std::isfinite(u.scale)) throw InvalidRequestError("lora: scale must be a finite number");
    mix->uses.push_back(std::move(u));
  }
  if (mix->empty()) return nullptr;
  return mix;
}

void bind_lora(py::module_& m) {
  py::class_<LoraAdapter, std::shared_ptr<LoraAdapter>>(m, "LoraAdapter",
                                                        "A LoRA adapter loaded for one engine's model (Engine.load_lora).")
      .def_property_readonly("path", [](const LoraAdapter& a) { return text(a.path()); })
      .def_property_readonly("alpha", &LoraAdapter::alpha)
      .def_property_readonly("max_rank", &LoraAdapter::max_rank)
      .def_property_readonly("n_pairs", &LoraAdapter::n_pairs, "adapted matrices (a fused tensor's parts counted each)")
      .def_property_readonly("targets", &LoraAdapter::targets, "the base tensors it adapts")
      .def_property_readonly("nbytes", &LoraAdapter::bytes, "bytes of its packed tensors (the memory it adds)")
      .def_property_readonly("content_key", &LoraAdapter::content_key)
      .def("__repr__", [](const LoraAdapter& a) {
        return "<LoraAdapter " + std::string(py::str(text(a.path()))) + " rank " + std::to_string(a.max_rank()) +
               ", " + std::to_string(a.targets().size()) + " tensors>";
      });
}

}  // namespace edgellm::bindings
