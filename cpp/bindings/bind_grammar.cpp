// Constrained decoding: registers the engine's constraint factory and exposes grammars,
// byte-level matchers and token-level constraints for tests and tools.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "bindings.h"
#include "common/errors.h"
#include "engine/model_backend.h"
#include "grammar/grammar_constraint.h"
#include "tokenizer/tokenizer.h"

namespace py = pybind11;

namespace edgellm::bindings {
namespace {

using grammar::GrammarContext;
using grammar::GrammarKind;

struct PyGrammar {
  std::shared_ptr<GrammarContext> ctx;
};

struct PyMatcher {
  std::shared_ptr<GrammarContext> ctx;
  int32_t state;
};

std::string as_bytes(const py::object& data) {
  if (py::isinstance<py::str>(data)) return data.cast<std::string>();
  if (py::isinstance<py::bytes>(data) || py::isinstance<py::bytearray>(data))
    return py::bytes(data).cast<std::string>();
  throw InvalidRequestError("expected str or bytes");
}

PyGrammar make(GrammarKind kind, const std::string& text) {
  py::gil_scoped_release nogil;
  return PyGrammar{grammar::grammar_context(kind, text)};
}

std::shared_ptr<const grammar::TokenTrie> trie_of(const std::shared_ptr<Tokenizer>& tok) {
  py::gil_scoped_release nogil;
  const Tokenizer* t = tok.get();
  // Same bytes and special tokens as the engine's vocabulary adapter.
  const TokenizerVocab v(tok);
  return grammar::token_trie_for(std::static_pointer_cast<const void>(tok), t->n_vocab(),
                                 [&v](int32_t id) { return v.piece(id); }, v.eog_tokens(), v.special_tokens());
}

py::dict stats_dict(GrammarContext& ctx) {
  const auto s = ctx.stats();
  py::dict d;
  d["mask_hits"] = s.mask_hits;
  d["mask_misses"] = s.mask_misses;
  d["states"] = s.n_states;
  d["masks"] = s.n_masks;
  d["mask_bytes"] = s.mask_bytes;
  return d;
}

}  // namespace

void bind_grammar(py::module_& m) {
  grammar::register_grammar_constraints();

  m.def("json_schema_to_gbnf", [](const std::string& schema) { return grammar::json_schema_to_gbnf(schema); },
        py::arg("schema"), "The GBNF grammar a JSON schema (text) is converted to.");

  py::class_<PyGrammar>(m, "Grammar", "A compiled constraint grammar (GBNF, JSON schema or regex).")
      .def_static("from_gbnf", [](const std::string& text) { return make(GrammarKind::Gbnf, text); }, py::arg("text"))
      .def_static("from_json_schema", [](const py::object& schema) {
            if (py::isinstance<py::str>(schema)) return make(GrammarKind::JsonSchema, schema.cast<std::string>());
            std::string text;
            try {
              text = py::module_::import("json").attr("dumps")(schema).cast<std::string>();
            } catch (py::error_already_set& e) {  // too deep (RecursionError), circular, not JSON
              if (!e.matches(PyExc_RecursionError) && !e.matches(PyExc_ValueError) && !e.matches(PyExc_TypeError)) throw;
              throw InvalidRequestError(std::string("json_schema cannot be serialised to JSON: ") + e.what());
            }
            return make(GrammarKind::JsonSchema, text);
          }, py::arg("schema"), "schema: JSON text or a JSON-serialisable object")
      .def_static("from_regex", [](const std::string& text) { return make(GrammarKind::Regex, text); }, py::arg("pattern"))
      .def_property_readonly("gbnf", [](const PyGrammar& g) { return g.ctx->grammar().gbnf(); })
      .def("accepts", [](const PyGrammar& g, const py::object& data) {
            const std::string bytes = as_bytes(data);
            const int32_t s = g.ctx->advance(g.ctx->initial_state(), bytes);
            return s != grammar::GrammarAutomaton::kDead && g.ctx->is_accepting(s);
          }, py::arg("data"), "True when the whole of `data` (str or bytes) is a complete sentence.")
      .def("accepts_prefix", [](const PyGrammar& g, const py::object& data) {
            return g.ctx->advance(g.ctx->initial_state(), as_bytes(data)) != grammar::GrammarAutomaton::kDead;
          }, py::arg("data"), "True when `data` can be continued to a sentence.")
      .def("matcher", [](const PyGrammar& g) { return PyMatcher{g.ctx, g.ctx->initial_state()}; })
      .def("constraint", [](const PyGrammar& g, const std::shared_ptr<Tokenizer>& tok) {
            return std::make_unique<grammar::GrammarConstraint>(g.ctx, trie_of(tok));
          }, py::arg("tokenizer"), "A token-level constraint over `tokenizer`'s vocabulary.")
      .def("stats", [](const PyGrammar& g) { return stats_dict(*g.ctx); });

  py::class_<PyMatcher>(m, "GrammarMatcher", "Byte-level parse state of a Grammar.")
      .def("accept", [](PyMatcher& mt, const py::object& data) {
            const int32_t s = mt.ctx->advance(mt.state, as_bytes(data));
            if (s == grammar::GrammarAutomaton::kDead) return false;
            mt.state = s;
            return true;
          }, py::arg("data"), "Advances by `data`; False (state unchanged) when the grammar rejects it.")
      .def_property_readonly("is_complete", [](const PyMatcher& mt) { return mt.ctx->is_accepting(mt.state); })
      .def_property_readonly("can_continue", [](const PyMatcher& mt) { return mt.ctx->can_continue(mt.state); })
      .def_property_readonly("state", [](const PyMatcher& mt) { return mt.state; });

  py::class_<grammar::GrammarConstraint>(m, "GrammarConstraint", "Token masks of a Grammar over a vocabulary.")
      .def("allowed_tokens", [](grammar::GrammarConstraint& c) {
            py::gil_scoped_release nogil;
            return c.allowed_tokens();
          })
      .def("apply", [](grammar::GrammarConstraint& c, py::array_t<float, py::array::c_style> logits) {
            if (logits.ndim() != 1) throw InvalidRequestError("apply: logits must be a 1-D float32 array");
            float* p = logits.mutable_data();
            const int n = static_cast<int>(logits.shape(0));
            py::gil_scoped_release nogil;
            c.apply(p, n);
          }, py::arg("logits"), "Sets disallowed tokens' logits to -inf, in place.")
      .def("accept", &grammar::GrammarConstraint::accept, py::arg("token"))
      .def("accept_bytes", [](grammar::GrammarConstraint& c, const py::object& data) { return c.accept_bytes(as_bytes(data)); },
           py::arg("data"))
      .def_property_readonly("is_complete", &grammar::GrammarConstraint::is_complete)
      .def_property_readonly("can_continue", &grammar::GrammarConstraint::can_continue)
      .def("stats", [](grammar::GrammarConstraint& c) { return stats_dict(c.context()); });
}

}  // namespace edgellm::bindings
